package shmem

import (
	"math/bits"
	"unsafe"
)

// The reductions.
//
// On one node every PE reads the sources of the other PEs straight out of
// their heaps. A short vector (collSmallReduce bytes at most) is reduced
// whole by every PE into private memory between two syncs, then stored into
// dest (so dest may be source: every PE has read the sources before any
// writes). A longer one is split into one slice per PE: each PE reduces its
// slice, and after a second sync stores it into the dest of every PE; a
// third sync ends the call. The PEs combine the sources in the order of
// their team numbers, so every PE gets the same bits.
//
// Across nodes the reduction is Rabenseifner's: a reduce-scatter by
// recursive halving, then an allgather by recursive doubling, over the
// largest power of two p of PEs; the r = n-p PEs past it first hand their
// vector to a neighbour (the even PEs of the first 2r fold into the odd
// ones) and get the result back at the end. The reduce-scatter works in
// dest: in each round a PE signals its partner that its half is ready,
// gets the partner's copy of the half it keeps and combines it in place;
// the allgather puts each PE's finished part into its partner's dest with
// a signal. Each element is combined by one PE, so every PE gets the same
// bits. 2*log2(p) rounds, and n*nreduce elements moved in all for large
// vectors.

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
	if err != nil || nr == 0 {
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
		reduceDirect(routine, cs, dest, doff, soff, combine)
		return nil
	}
	reduceRabenseifner(routine, cs, dest, source, doff, combine)
	return nil
}

func reduceDirect[T RMA](routine string, cs *collState, dest []T, doff, soff uintptr, combine func(d, s []T)) {
	t := cs.team
	n, nr := t.npes, len(dest)
	var z T
	size := int(unsafe.Sizeof(z))
	src := func(j int) []T {
		return unsafe.Slice((*T)(unsafe.Add(jobPeer(routine, t.members[j]).base, soff)), nr)
	}
	if nr*size <= stageData {
		reduceStaged(cs, dest, bytesOf(src(t.me)), soff, combine)
		return
	}
	if nr*size <= collSmallReduce {
		tmp := scratch[T](cs, nr)
		t.sync(routine)
		copy(tmp, src(0))
		for j := 1; j < n; j++ {
			combine(tmp, src(j))
		}
		t.sync(routine)
		copy(dest, tmp)
		return
	}
	lo, hi := nr*t.me/n, nr*(t.me+1)/n
	tmp := scratch[T](cs, hi-lo)
	t.sync(routine)
	copy(tmp, src(0)[lo:hi])
	for j := 1; j < n; j++ {
		combine(tmp, src(j)[lo:hi])
	}
	t.sync(routine) // every PE has read the sources: dests may change
	tb := bytesOf(tmp)
	for i := range n {
		pe := t.members[(t.me+i)%n]
		copyBytes(peerBytes(pe, doff+uintptr(lo*size), len(tb)), tb)
	}
	t.sync(routine)
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
	t.sync(routine)
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
