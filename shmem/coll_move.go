package shmem

import (
	"encoding/binary"
	"math"
	"math/bits"
	"sync/atomic"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
)

// The data-moving collectives: broadcast, collect, fcollect, alltoall and
// alltoalls, on bytes.
//
// On one node (every PE of the team maps every other's heap) each PE
// copies what it needs straight out of the other PEs' heaps between two
// syncs of the team: the first says the sources are ready, the second that
// nobody reads them any more (so a PE may change its source, or its dest
// for the next call, once the routine returns).
//
// Across nodes broadcast, collect and fcollect are one pattern of messages
// that carry the call's keys and, when it fits, the data (coll_net.go):
// for broadcast a dissemination with a binomial tree rooted at the root
// inside it, for collect and fcollect a dissemination (Bruck) allgather,
// ceil(log2 n) rounds for any n. Longer data then moves with puts that
// carry a signal, as the data of alltoall does after a sync of the team
// that keeps calls apart (see collSigs): broadcast by the binomial tree,
// collect and fcollect by a dissemination allgather that puts each block
// straight at its final place in dest; alltoall puts block j to PE j in
// the order me+1, me+2, ... so that no PE is the target of every PE at
// once.

func broadcast(routine string, form collForm, t *Team, dest, source []byte, root, size int) error {
	form |= formRoot
	cs, err := collTeam(routine, t)
	if err != nil {
		return err
	}
	t.beginColl(routine)
	defer t.endColl()
	if root < 0 || root >= t.npes {
		return argErr(routine, "root %d is not a PE of %v (valid: 0..%d)", root, t, t.npes-1)
	}
	n := len(source)
	if len(dest) < n {
		return argErr(routine, "dest has %d elements, fewer than the %d of source", len(dest)/size, n/size)
	}
	dest = dest[:n]
	doff, soff, err := symOffsets(routine, dest, source)
	if err != nil {
		return err
	}
	if t.npes == 1 {
		ucs.Copy(dest, source)
		return nil
	}
	args := collArgs{nelems: n / size, size: size, root: root, form: form}
	if cs.direct {
		if st.env.debug {
			if err := t.syncArgs(routine, args); err != nil {
				return err
			}
		}
		err := broadcastStaged(routine, form, cs, dest, source, soff, size, root)
		if err == nil && t.me == root {
			profTeam(routine, t, 0, n)
		}
		return err
	}
	v := (t.me - root + t.npes) % t.npes
	// The net pattern is a dissemination (as the barrier's): in round k,
	// with d = 2^k, the PE of rank v (from the root) sends to rank v+d
	// and hears from rank v-d (mod n). Rank v < d has the data by then,
	// so the messages from ranks below d to ranks below n carry it: a
	// binomial tree inside the dissemination, ceil(log2 n) rounds in all
	// (one network latency for 2 PEs), after which every PE has heard
	// every key. The root sends its messages at once, its key only; rank
	// n-1 relays to rank d in round k > 0 what the root would have
	// forwarded (coll_net.go). A root whose data is pushed then returns
	// without its messages unless SHMEM_DEBUG asks it to check the keys;
	// one that moves the data by the tree waits for them, so that its
	// puts into dest come after the other PEs' last call.
	push := n <= netPushMax
	c := cs.netBegin(routine, args)
	rounds := bits.Len(uint(t.npes - 1))
	var cur []byte // the header and, once this PE has it, the data
	if v == 0 {
		if push {
			cur = c.buf(netHdr + n)
			ucs.Copy(cur[netHdr:], source)
		} else {
			cur = c.buf(netHdr)
		}
		for k := range rounds {
			c.send((t.me+1<<k)%t.npes, k, cur)
		}
		if push && !st.env.debug {
			c.owe(rounds)
		} else {
			for k := range rounds {
				c.recv(k, 0)
			}
		}
	} else {
		cur = c.buf(netHdr)
		last := t.npes - 1
		for k, d := 0, 1; d < t.npes; k, d = k+1, d<<1 {
			msg := cur[:netHdr]
			if v < d && v+d < t.npes {
				msg = cur
			}
			c.send((t.me+d)%t.npes, k, msg)
			relay := k > 0 && d != last
			if v == last && relay {
				c.sendAt((root+d)%t.npes, k, netRelay, cur[:netHdr])
			}
			data := 0
			if push && d <= v && v < 2*d {
				data = n
			}
			switch {
			case v == d && relay:
				cur = c.recvRelayed(k, data)
			case data > 0:
				cur = c.recv(k, data)
			default:
				c.recv(k, 0)
			}
		}
	}
	if !c.agreed() {
		return t.argsMismatch(routine, form)
	}
	if t.me == root {
		profTeam(routine, t, 0, n)
	}
	if n == 0 {
		return nil
	}
	switch {
	case v == 0:
		ucs.Copy(dest, source)
	case push:
		ucs.Copy(dest, cur[netHdr:])
	}
	if push {
		return nil
	}
	// The binomial tree, into dest.
	mask := 1
	for ; mask < t.npes; mask <<= 1 {
		if v&mask != 0 {
			cs.wait(sigA, 1) // the parent v-mask put the data
			break
		}
	}
	for mask >>= 1; mask > 0; mask >>= 1 {
		if v+mask < t.npes {
			cs.putSignal(routine, t.members[(v+mask+root)%t.npes], doff, dest, sigA)
		}
	}
	return nil
}

func collect(routine string, form collForm, t *Team, dest, source []byte, size int, fixed bool) error {
	cs, err := collTeam(routine, t)
	if err != nil {
		return err
	}
	t.beginColl(routine)
	defer t.endColl()
	n, b := t.npes, len(source)
	if fixed && len(dest)/n < b {
		return argErr(routine, "dest has %d elements, fewer than the %d of %d PEs' %d", len(dest)/size, n*b/size, n, b/size)
	}
	doff, soff, err := symOffsets(routine, dest, source)
	if err != nil {
		return err
	}
	if n == 1 {
		if len(dest) < b {
			return argErr(routine, "dest has %d elements, fewer than the %d collected", len(dest)/size, b/size)
		}
		ucs.Copy(dest, source)
		return nil
	}
	if cs.direct {
		err := collectStaged(routine, form, cs, dest, source, soff, size, fixed)
		if err == nil {
			profTeam(routine, t, 0, b)
		}
		return err
	}
	return collectNet(routine, form, cs, dest, source, doff, size, fixed)
}

// collectNet is collect and fcollect across nodes: a dissemination (Bruck)
// allgather in the net pattern (coll_net.go). In round k, with d = 2^k, a
// PE holds the blocks of the PEs me..me+d-1 (mod n), in that order, and
// sends the first min(d, n-d) of them to PE me-d: their lengths, and the
// data of each block of at most blockCap bytes, with the keys. So every PE
// learns every length and, when every block fits, every block, in
// ceil(log2 n) rounds (one network latency for 2 PEs), before it writes
// dest. When a block does not fit, every PE knows it, and the blocks go
// by the dissemination allgather of puts into dest (allgather) that used
// to follow a sync of the team and an allgather of the lengths.
func collectNet(routine string, form collForm, cs *collState, dest, source []byte, doff uintptr, size int, fixed bool) error {
	t := cs.team
	n, v, b := t.npes, t.me, len(source)
	args := collArgs{nelems: -1, size: size, form: form}
	if fixed {
		args.nelems = b / size
	}
	c := cs.netBegin(routine, args)
	if !netLensFit(n) {
		return collectLens(routine, form, &c, dest, source, doff, size, fixed)
	}
	// A slot holds the lengths and the data of the most blocks a message
	// carries (at least 8 bytes each, as netLensFit holds).
	blockCap := uint64((netSlot-netHdr)/bruckMost(n) - 8)
	if cap(cs.lens) < 2*n+1 {
		cs.lens = make([]int, 2*n+1)
	}
	lens, pos := cs.lens[:n], cs.lens[n:2*n+1] // lens: of the blocks me, me+1, ...
	lens[0] = b
	held := cs.gather[:0] // the data of the blocks held that fit, in order
	if uint64(b) <= blockCap {
		held = append(held, source...)
	}
	for k, d := 0, 1; d < n; k, d = k+1, d<<1 {
		cnt, end := min(d, n-d), 0
		msg := c.buf(netHdr + 8*cnt + min(len(held), cnt*int(blockCap)))
		for i := range cnt {
			binary.LittleEndian.PutUint64(msg[netHdr+8*i:], uint64(lens[i]))
			if uint64(lens[i]) <= blockCap {
				end += lens[i]
			}
		}
		copy(msg[netHdr+8*cnt:], held[:end])
		c.send((v-d+n)%n, k, msg[:netHdr+8*cnt+end])
		in, got := c.recv(k, 8*cnt), 0
		for i := range cnt {
			// A length past blockCap (from a PE of other arguments, too)
			// came without its data.
			l := binary.LittleEndian.Uint64(in[netHdr+8*i:])
			lens[d+i] = int(min(l, math.MaxInt32))
			if l <= blockCap {
				got += int(l)
			}
		}
		held = append(held, localBytes(c.slotOff(k)+netHdr+uintptr(8*cnt), got)...)
	}
	cs.gather = held
	if !c.agreed() {
		return t.argsMismatch(routine, form)
	}
	all := true
	pos[0] = 0
	for j := range n {
		l := lens[(j-v+n)%n]
		pos[j+1] = pos[j] + l
		all = all && uint64(l) <= blockCap
	}
	if !all {
		held = nil
	}
	return collectPlace(routine, cs, dest, source, doff, size, pos, lens, held)
}

// collectPlace moves the blocks of collect and fcollect across nodes into
// dest, PE j's at pos[j] (pos[n] bytes in all): those of held, the blocks
// of the PEs from this one on in order, with the lengths lens, when held
// is not nil; otherwise by the dissemination allgather of puts, this PE's
// own block from source.
func collectPlace(routine string, cs *collState, dest, source []byte, doff uintptr, size int, pos, lens []int, held []byte) error {
	t := cs.team
	n, v := t.npes, t.me
	if pos[n] > len(dest) {
		return argErr(routine, "dest has %d elements, fewer than the %d collected", len(dest)/size, pos[n]/size)
	}
	if pos[n] == 0 {
		return nil
	}
	profTeam(routine, t, 0, len(source))
	if held != nil {
		at := 0
		for i, l := range lens {
			j := (v + i) % n
			ucs.Copy(dest[pos[j]:pos[j+1]], held[at:at+l])
			at += l
		}
		return nil
	}
	ucs.Copy(dest[pos[v]:pos[v+1]], source)
	cs.allgather(routine, doff, dest, pos, sigA)
	return nil
}

// collectLens is collectNet for a team too large for the net pattern to
// carry the lengths of the blocks (netLensFit): the pattern carries the
// keys alone, then the lengths are gathered into the length words of the
// team's area (word j for the team's PE j) and the blocks into dest, by
// the dissemination allgather of puts. The pattern is a dissemination
// over the team, so no PE writes a length of the next call before every
// PE has finished this one's.
func collectLens(routine string, form collForm, c *netCall, dest, source []byte, doff uintptr, size int, fixed bool) error {
	cs := c.cs
	t := cs.team
	n, v, b := t.npes, t.me, len(source)
	hdr := c.buf(netHdr)
	for k, d := 0, 1; d < n; k, d = k+1, d<<1 {
		c.send((v-d+n)%n, k, hdr)
		c.recv(k, 0)
	}
	if !c.agreed() {
		return t.argsMismatch(routine, form)
	}
	if cap(cs.lens) < n+1 {
		cs.lens = make([]int, n+1)
	}
	pos := cs.lens[:n+1]
	if fixed {
		for j := range pos {
			pos[j] = j * b
		}
	} else {
		lensOff := cs.area + collSigs*8
		lens := unsafe.Slice((*uint64)(st.heap.At(int(lensOff))), n)
		atomic.StoreUint64(&lens[v], uint64(b))
		for j := range pos {
			pos[j] = 8 * j
		}
		cs.allgather(routine, lensOff, localBytes(lensOff, 8*n), pos, sigB)
		pos[0] = 0
		for j := range n {
			pos[j+1] = pos[j] + int(min(atomic.LoadUint64(&lens[j]), math.MaxInt32))
		}
	}
	return collectPlace(routine, cs, dest, source, doff, size, pos, nil, nil)
}

// bruckMost returns the most blocks a message of the dissemination
// allgather of n PEs carries: min(d, n-d) over the rounds' d = 2^k < n,
// the last round's n-d or the round before's d/2, whichever is more.
func bruckMost(n int) int {
	last := 1 << (bits.Len(uint(n-1)) - 1)
	return max(last/2, n-last)
}

// allgather completes the blocks of the team's PEs in the symmetric bytes
// at heap offset off (local is this PE's copy): block j lies at
// local[pos[j]:pos[j+1]], and this PE's own block is in place. In round k,
// with d = 2^k, the PE holds the blocks me..me+d-1 (mod n); it puts the
// first min(d, n-d) of them to PE me-d, at their places, with a signal on
// word sig+k, and waits for the blocks me+d... from PE me+d.
func (cs *collState) allgather(routine string, off uintptr, local []byte, pos []int, sig int) {
	t := cs.team
	n, v := t.npes, t.me
	for k, d := 0, 1; d < n; k, d = k+1, d<<1 {
		to := t.members[(v-d+n)%n]
		end := v + min(d, n-d)
		if end <= n {
			cs.putSignal(routine, to, off+uintptr(pos[v]), local[pos[v]:pos[end]], sig+k)
		} else {
			put2(routine, to, off+uintptr(pos[v]), local[pos[v]:pos[n]])
			cs.putSignal(routine, to, off, local[:pos[end-n]], sig+k)
		}
		cs.wait(sig+k, 1)
	}
}

func alltoall(routine string, form collForm, t *Team, dest, source []byte, size int) error {
	cs, err := collTeam(routine, t)
	if err != nil {
		return err
	}
	t.beginColl(routine)
	defer t.endColl()
	n, v := t.npes, t.me
	if len(source)%(n*size) != 0 {
		return argErr(routine, "source has %d elements, not a multiple of the %d PEs of %v", len(source)/size, n, t)
	}
	if len(dest) < len(source) {
		return argErr(routine, "dest has %d elements, fewer than the %d of source", len(dest)/size, len(source)/size)
	}
	doff, soff, err := symOffsets(routine, dest[:len(source)], source)
	if err != nil {
		return err
	}
	b := len(source) / n
	if n == 1 {
		ucs.Copy(dest, source)
		return nil
	}
	if err := t.syncArgs(routine, collArgs{nelems: len(source) / size, size: size, form: form}); err != nil || b == 0 {
		return err
	}
	profTeam(routine, t, 0, b)
	if cs.direct {
		for i := range n {
			j := (v + i) % n
			ucs.Copy(dest[j*b:(j+1)*b], peerBytes(t.members[j], soff+uintptr(v*b), b))
		}
		t.sync(routine)
		return nil
	}
	ucs.Copy(dest[v*b:(v+1)*b], source[v*b:(v+1)*b])
	for i := 1; i < n; i++ {
		j := (v + i) % n
		cs.putSignal(routine, t.members[j], doff+uintptr(v*b), source[j*b:(j+1)*b], sigA)
	}
	cs.wait(sigA, uint64(n-1))
	return nil
}

func alltoalls(routine string, form collForm, t *Team, dest, source []byte, dst, sst, nelems, size int) error {
	cs, err := collTeam(routine, t)
	if err != nil {
		return err
	}
	t.beginColl(routine)
	defer t.endColl()
	n, v := t.npes, t.me
	switch {
	case dst < 1 || sst < 1:
		return argErr(routine, "strides dst %d and sst %d (valid: 1 or more)", dst, sst)
	case nelems < 0:
		return argErr(routine, "nelems %d (valid: 0 or more)", nelems)
	}
	last := n*nelems - 1 // the last element of either array
	if nelems > 0 && len(source)/size <= last*sst {
		return argErr(routine, "source has %d elements; %d PEs' %d elements at stride %d reach element %d", len(source)/size, n, nelems, sst, last*sst)
	}
	if nelems > 0 && len(dest)/size <= last*dst {
		return argErr(routine, "dest has %d elements; %d PEs' %d elements at stride %d reach element %d", len(dest)/size, n, nelems, dst, last*dst)
	}
	if nelems > 0 {
		dest, source = dest[:(last*dst+1)*size], source[:(last*sst+1)*size]
	}
	doff, soff, err := symOffsets(routine, dest, source)
	if err != nil {
		return err
	}
	if n > 1 {
		if err := t.syncArgs(routine, collArgs{nelems: nelems, size: size, dst: dst, sst: sst, form: form | formStrides}); err != nil || nelems == 0 {
			return err
		}
		profTeam(routine, t, 0, nelems*size)
	} else if nelems == 0 {
		return nil
	}
	// elem returns the byte offset of element k of the block of PE j in an
	// array of stride s.
	elem := func(j, k, s int) int { return (j*nelems + k) * s * size }
	if n == 1 || cs.direct {
		for i := range n {
			j := (v + i) % n
			pe := t.members[j]
			for k := range nelems {
				copy(dest[elem(j, k, dst):elem(j, k, dst)+size], peerBytes(pe, soff+uintptr(elem(v, k, sst)), size))
			}
		}
		if n > 1 {
			t.sync(routine)
		}
		return nil
	}
	for k := range nelems {
		copy(dest[elem(v, k, dst):elem(v, k, dst)+size], source[elem(v, k, sst):elem(v, k, sst)+size])
	}
	pack := scratch[byte](cs, nelems*size)
	for i := 1; i < n; i++ {
		j := (v + i) % n
		pe := t.members[j]
		if dst == 1 {
			for k := range nelems {
				copy(pack[k*size:(k+1)*size], source[elem(j, k, sst):elem(j, k, sst)+size])
			}
			cs.putSignal(routine, pe, doff+uintptr(elem(v, 0, dst)), pack, sigA)
			continue
		}
		for k := range nelems - 1 {
			put2(routine, pe, doff+uintptr(elem(v, k, dst)), source[elem(j, k, sst):elem(j, k, sst)+size])
		}
		k := nelems - 1
		cs.putSignal(routine, pe, doff+uintptr(elem(v, k, dst)), source[elem(j, k, sst):elem(j, k, sst)+size], sigA)
	}
	cs.wait(sigA, uint64(n-1))
	return nil
}
