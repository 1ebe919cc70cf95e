package shmem

import (
	"math/bits"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
)

// The reductions.
//
// On one node every PE first publishes its source as a staged contribution
// (coll_staged.go): a copy in its slot when it fits (stageData bytes), its
// length and element size in any case, which every PE checks, and which
// tell that the PE is in the call with its source ready. A vector that fits
// is combined out of the slots into dest. A short one (collSmallReduce
// bytes at most) is reduced whole by every PE out of the others' sources,
// straight out of their heaps, into private memory, then stored into dest
// after a sync (so dest may be source: every PE has read the sources before
// any writes). A longer one is split into one slice per PE: each PE reduces
// its slice, and after a sync stores it into the dest of every PE; a second
// sync ends the call. The PEs combine the sources in the order of their
// team numbers, so every PE gets the same bits.
//
// Across nodes a vector of at most netPushMax bytes is reduced by
// recursive doubling, each PE pushing its partial vector to its partner
// with the call's keys (reduceNet). A longer one is reduced, after the
// same pattern has carried the keys, by Rabenseifner's algorithm: a
// reduce-scatter by recursive halving, then an allgather by recursive
// doubling, over the largest power of two p of PEs; the r = n-p PEs past
// it first hand their vector to a neighbour (the even PEs of the first 2r
// fold into the odd ones) and get the result back at the end. The
// reduce-scatter works in dest: in each round a PE signals its partner
// that its half is ready, gets the partner's copy of the half it keeps and
// combines it in place; the allgather puts each PE's finished part into
// its partner's dest with a signal. Each element is combined by one PE, so
// every PE gets the same bits. 2*log2(p) rounds, and n*nreduce elements
// moved in all for large vectors.

// collSmallReduce is the largest vector, in bytes, that every PE of a node
// reduces whole.
const collSmallReduce = 16 << 10

func reduce[T RMA](routine string, t *Team, dest, source []T, combine func(d, s []T)) error {
	cs, err := collTeam(routine, t)
	if err != nil {
		return err
	}
	t.beginColl(routine)
	defer t.endColl()
	nr := len(source)
	if len(dest) < nr {
		return argErr(routine, "dest has %d elements, fewer than the %d of source", len(dest), nr)
	}
	dest = dest[:nr]
	db, sb := bytesOf(dest), bytesOf(source)
	doff, soff, err := symOffsets(routine, db, sb)
	if err != nil {
		return err
	}
	if doff != soff && doff < soff+uintptr(len(sb)) && soff < doff+uintptr(len(db)) {
		return argErr(routine, "dest and source overlap without being the same array")
	}
	if t.npes == 1 {
		copy(dest, source)
		return nil
	}
	if cs.direct {
		err := reduceDirect(routine, cs, dest, sb, doff, soff, combine)
		if err == nil {
			profTeam(routine, t, 0, len(sb))
		}
		return err
	}
	return reduceNet(routine, cs, dest, source, doff, combine)
}

// reduceNet is a reduction across nodes: recursive doubling over the
// largest power of two p of PEs, the r = n-p PEs past it folded into a
// neighbour first (the even PEs of the first 2r send their vector to the
// odd ones, which send the result back at the end), in the net pattern
// (coll_net.go). Every message carries the keys, and a vector of at most
// netPushMax bytes: in round k a PE sends its partial vector to its
// partner and combines the partner's with it, the lower rank's first, so
// that both partners, and in the end every PE, get the same bits. That is
// log2(p) rounds (one message each way for 2 PEs, one network latency),
// and two more for a fold. A longer vector takes the pattern for its keys
// only, and then Rabenseifner's bandwidth algorithm.
func reduceNet[T RMA](routine string, cs *collState, dest, source []T, doff uintptr, combine func(d, s []T)) error {
	t := cs.team
	n, v, nr := t.npes, t.me, len(dest)
	var z T
	size := int(unsafe.Sizeof(z))
	nb := nr * size
	push := nb <= netPushMax
	if !push {
		nb = 0
	}
	c := cs.netBegin(routine, collArgs{nelems: nr, size: size})
	p := 1 << (bits.Len(uint(n)) - 1)
	r := n - p
	// index returns the team index of the PE of rank w among the p.
	index := func(w int) int {
		if w < r {
			return 2*w + 1
		}
		return w + r
	}
	// The slot of the fold is that of a round past the last (r > 0: n is
	// not a power of two, so log2(p) < ceil(log2(n)) <= netSlots()); the
	// unfold takes slot 0.
	fold := bits.Len(uint(p)) - 1
	cur := c.buf(netHdr + nb)
	if push {
		copy(netVec[T](cur, nr), source)
	}
	if v < 2*r && v%2 == 0 {
		c.send(v+1, fold, cur)
		cur = c.recv(0, nb) // the only message into this PE's slots
	} else {
		w := v - r
		if v < 2*r {
			w = v / 2
			// PE v-1 is the lower: its vector comes first.
			in := c.recv(fold, nb)
			if push {
				combine(netVec[T](in, nr), netVec[T](cur, nr))
			}
			cur = in
		}
		for k, d := 0, 1; d < p; k, d = k+1, d<<1 {
			c.send(index(w^d), k, cur)
			in := c.recv(k, nb)
			if !push {
				continue
			}
			// cur may be a slot of an earlier round: no PE writes into it
			// again in this call.
			if w&d != 0 {
				combine(netVec[T](in, nr), netVec[T](cur, nr))
				cur = in
			} else {
				combine(netVec[T](cur, nr), netVec[T](in, nr))
			}
		}
		if v < 2*r {
			c.send(v-1, 0, cur)
		}
	}
	if !c.agreed() {
		return t.argsMismatch(routine, 0)
	}
	if nr == 0 {
		return nil
	}
	profTeam(routine, t, 0, nr*size)
	if push {
		// Every PE has copied its source: dest may be source.
		copy(dest, netVec[T](cur, nr))
		return nil
	}
	reduceRabenseifner(routine, cs, dest, source, doff, combine)
	return nil
}

// reduceDirect is a reduction on one node. Every PE first publishes its
// source as a staged contribution (coll_staged.go), whose header every PE
// reads: that checks the PEs' lengths, and says that every PE is in the
// call with its source ready, as a sync of the team would. A vector that
// fits a slot is then combined out of the slots; a longer one out of the
// sources, between syncs.
func reduceDirect[T RMA](routine string, cs *collState, dest []T, sb []byte, doff, soff uintptr, combine func(d, s []T)) error {
	t := cs.team
	n, nr := t.npes, len(dest)
	var z T
	size := int(unsafe.Sizeof(z))
	c := cs.stagedBegin()
	c.publish(sb, soff, size)
	if err := c.checkSame(routine, sb, size); err != nil {
		c.finish(false)
		return err
	}
	// Every PE's contribution is in: its slot's copy of its source when
	// it fits, which dest may then overwrite (dest may be source), or its
	// source, which no PE changes before the sync that follows the reads.
	vec := func(j int) []T {
		b, _ := c.from(j)
		return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), nr)
	}
	if nr*size <= stageData {
		if nr > 0 {
			copy(dest, vec(0))
			for j := 1; j < n; j++ {
				combine(dest, vec(j))
			}
		}
		c.finish(false)
		return nil
	}
	defer c.finish(false)
	if nr*size <= collSmallReduce {
		tmp := scratch[T](cs, nr)
		copy(tmp, vec(0))
		for j := 1; j < n; j++ {
			combine(tmp, vec(j))
		}
		t.sync(routine) // every PE has read the sources: dests may change
		copy(dest, tmp)
		return nil
	}
	lo, hi := nr*t.me/n, nr*(t.me+1)/n
	tmp := scratch[T](cs, hi-lo)
	copy(tmp, vec(0)[lo:hi])
	for j := 1; j < n; j++ {
		combine(tmp, vec(j)[lo:hi])
	}
	t.sync(routine) // every PE has read the sources: dests may change
	tb := bytesOf(tmp)
	for i := range n {
		pe := t.members[(t.me+i)%n]
		ucs.Copy(peerBytes(pe, doff+uintptr(lo*size), len(tb)), tb)
	}
	t.sync(routine)
	return nil
}

func reduceRabenseifner[T RMA](routine string, cs *collState, dest, source []T, doff uintptr, combine func(d, s []T)) {
	t := cs.team
	n, v, nr := t.npes, t.me, len(dest)
	var z T
	size := uintptr(unsafe.Sizeof(z))
	p := 1 << (bits.Len(uint(n)) - 1)
	r := n - p
	// pe returns the job's number of the PE of rank w among the p.
	pe := func(w int) int {
		if w < r {
			return t.members[2*w+1]
		}
		return t.members[w+r]
	}
	copy(dest, source)
	tmp := scratch[T](cs, nr)
	if v < 2*r && v%2 == 0 {
		// Folded: the odd neighbour reads this dest and puts the result.
		cs.signal(routine, t.members[v+1], sigFold)
		cs.wait(sigUnfold, 1)
		return
	}
	w := v - r
	if v < 2*r {
		w = v / 2
		cs.wait(sigFold, 1)
		get2(routine, t.members[v-1], doff, bytesOf(tmp))
		combine(dest, tmp)
	}
	var los, his [maxSigRound]int
	lo, hi, k := 0, nr, 0
	for d := p >> 1; d > 0; d, k = d>>1, k+1 {
		partner := pe(w ^ d)
		los[k], his[k] = lo, hi
		mid := lo + (hi-lo)/2
		if w&d == 0 {
			hi = mid
		} else {
			lo = mid
		}
		cs.signal(routine, partner, sigA+k)
		cs.wait(sigA+k, 1)
		if hi > lo {
			get2(routine, partner, doff+uintptr(lo)*size, bytesOf(tmp[:hi-lo]))
			combine(dest[lo:hi], tmp[:hi-lo])
		}
	}
	for k--; k >= 0; k-- {
		partner := pe(w ^ (p >> 1 >> k))
		cs.putSignal(routine, partner, doff+uintptr(lo)*size, bytesOf(dest[lo:hi]), sigB+k)
		cs.wait(sigB+k, 1)
		lo, hi = los[k], his[k]
	}
	if v < 2*r {
		cs.putSignal(routine, t.members[v-1], doff, bytesOf(dest), sigUnfold)
	}
}
