package shmem

import (
	"sync/atomic"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
)

// Staged collectives: broadcast, collect, fcollect and short reductions on
// one node, without a sync of the team.
//
// A team's area holds, on every PE, stageSlots slots used in turn by the
// team's staged calls (call s uses slot s mod stageSlots), and a done word.
// A PE that contributes to call s (the root of a broadcast, every PE of the
// others) publishes in its slot a header (its length and the heap offset of
// its source) and, when it fits, a copy of its data, and then the call's
// number in the slot's first word, all in the slot's first cache line for
// short data. The other PEs wait for that number in the slot, read the data
// from the slot (or, when it did not fit, from the contributor's source)
// and store s in their done word. So one cache line travels from each
// contributor to each reader, where a sync of the team costs log2(n)
// rounds, twice.
//
// A contributor reuses a slot only after every PE of the team has stored a
// done number at least as high as the slot's last call. A contributor whose
// data did not fit its slot waits, before it returns, until every PE has
// finished the call, since they read its source. The calls of a team are
// numbered alike on every PE, as every PE of the team makes them in the
// same order.
const (
	stageSlots = 8
	// stageHeader is the bytes of a slot before its data: call number,
	// length and source offset.
	stageHeader = 24
	// stageData is the data bytes of a slot: 512, and the rest of the
	// header's cache line. Longer data is read from the contributor's
	// source: the contributor's copy into its slot must take back, line
	// by line, the lines the readers hold from the slot's last use, and
	// beyond 512 bytes that costs more than waiting for the readers (on
	// 2 PEs, broadcasts of 1 and 2 KiB through the slots took 0.5-0.97
	// us, 2 and 4 KiB read from the root's source 0.45).
	stageData = 512 + counterStride - stageHeader
	stageSlot = stageHeader + stageData
)

// stagedAreaSize is the bytes of the staged area of a team: the done word's
// cache line and the slots.
func stagedAreaSize() uintptr { return counterStride + stageSlots*stageSlot }

// stagedCall is this PE's view of one staged call of a team.
type stagedCall struct {
	cs   *collState
	s    uint64  // the call's number, from 1
	slot uintptr // heap offset of the call's slot (the same on every PE)
}

// stagedBegin starts the team's next staged call.
func (cs *collState) stagedBegin() stagedCall {
	cs.seq++
	return stagedCall{cs: cs, s: cs.seq, slot: cs.stage + counterStride + uintptr(cs.seq%stageSlots)*stageSlot}
}

// doneWord returns the done word of the team's PE j.
func (c *stagedCall) doneWord(j int) *uint64 {
	return (*uint64)(unsafe.Add(jobPeer("collective", c.cs.team.members[j]).base, c.cs.stage))
}

// waitDone waits until every PE of the team has finished call s.
func (c *stagedCall) waitDone(s uint64) {
	low := ^uint64(0)
	for j := range c.cs.team.npes {
		w := c.doneWord(j)
		waitGE(w, s)
		low = min(low, atomic.LoadUint64(w))
	}
	c.cs.allDone = max(c.cs.allDone, low)
}

// publish makes b, whose heap offset is off and whose elements have size
// bytes, this PE's contribution to the call: its header, and a copy of b
// when it fits the slot. It reports whether it copied b; if not, the PE
// must call finish(true) so that its source outlives the readers (or
// sync the team before it returns).
func (c *stagedCall) publish(b []byte, off uintptr, size int) bool {
	if c.s > stageSlots && c.cs.allDone < c.s-stageSlots {
		c.waitDone(c.s - stageSlots)
	}
	hdr := (*[3]uint64)(st.heap.At(int(c.slot)))
	fits := len(b) <= stageData
	if fits {
		copy(localBytes(c.slot+stageHeader, len(b)), b)
	}
	// Plain stores and a release store: an atomic store would wait, each
	// time, until this CPU owns the cache line that the readers spin on.
	// The length's top byte is the kind of the collective, which the
	// readers check (stall.go), and the next the element size, which they
	// check with the length (coll_args.go).
	_, kind, _ := splitCollWord(atomic.LoadUint64(c.cs.team.collWord()))
	hdr[1], hdr[2] = uint64(len(b))|uint64(size&0xff)<<48|kind<<56, uint64(off)
	ucs.StoreRelease(&hdr[0], c.s)
	return fits
}

// from waits for the contribution of the team's PE j and returns its bytes,
// in j's slot or at j's source, and the size of their elements.
func (c *stagedCall) from(j int) ([]byte, int) {
	pe := c.cs.team.members[j]
	hdr := (*[3]uint64)(unsafe.Add(jobPeer("collective", pe).base, c.slot))
	waitGE(&hdr[0], c.s)
	h1, off := atomic.LoadUint64(&hdr[1]), uintptr(atomic.LoadUint64(&hdr[2]))
	n := int(h1 & (1<<48 - 1))
	if _, kind, _ := splitCollWord(atomic.LoadUint64(c.cs.team.collWord())); h1>>56 != kind {
		c.cs.team.stagedMismatch()
	}
	if n <= stageData {
		off = c.slot + stageHeader
	}
	return peerBytes(pe, off, n), int(h1 >> 48 & 0xff)
}

// argsOf returns the arguments of the team's PE j in the call, from its
// contribution: its element count and size (-1 elements for collect,
// where they may differ).
func (c *stagedCall) argsOf(j int, fixed bool) collArgs {
	b, size := c.from(j)
	a := collArgs{nelems: -1, size: size}
	if fixed && size > 0 {
		a.nelems = len(b) / size
	}
	return a
}

// finish says that this PE read every contribution it needed; with wait it
// also waits until every PE of the team has.
func (c *stagedCall) finish(wait bool) {
	ucs.StoreRelease(c.doneWord(c.cs.team.me), c.s)
	if wait {
		c.waitDone(c.s)
	}
}

// broadcastStaged is broadcast on one node: the root publishes, the others
// copy. A non-root whose length or element size is not the root's returns
// an error instead, after the copy of nothing.
func broadcastStaged(routine string, form collForm, cs *collState, dest, source []byte, soff uintptr, size, root int) error {
	c := cs.stagedBegin()
	if cs.team.me != root {
		b, rsize := c.from(root)
		if len(b) != len(source) || rsize != size {
			c.finish(false)
			mine, theirs := collArgs{nelems: len(source) / size, size: size, root: root, form: form}, collArgs{size: rsize, root: root, form: form}
			if rsize > 0 {
				theirs.nelems = len(b) / rsize
			}
			return argErr(routine, "the root, PE %d, broadcasts %s, and this PE (PE %d) passed %s (every PE of the team must pass the same lengths and element type)",
				cs.team.members[root], theirs.describe(), st.me, mine.describe())
		}
		ucs.Copy(dest, b)
		c.finish(false)
		return nil
	}
	fits := c.publish(source, soff, size)
	ucs.Copy(dest, source)
	c.finish(!fits)
	return nil
}

// collectStaged is collect and fcollect on one node: every PE publishes its
// block and copies every block, its own included, to its place in dest.
// With fixed, every block has len(source) bytes. It returns an error, the
// same on every PE, when the blocks' lengths (with fixed) or element sizes
// differ, or dest is too short for them.
func collectStaged(routine string, form collForm, cs *collState, dest, source []byte, soff uintptr, size int, fixed bool) error {
	c := cs.stagedBegin()
	fits := c.publish(source, soff, size)
	n, v := cs.team.npes, cs.team.me
	if fixed {
		b, same := len(source), true
		for i := range n {
			j := (v + i) % n
			if src, s := c.from(j); same && len(src) == b && s == size {
				ucs.Copy(dest[j*b:(j+1)*b], src)
			} else {
				same = false
			}
		}
		var err error
		if !same {
			err = argsErr(routine, form, cs.team, func(j int) collArgs { return c.argsOf(j, true) })
		}
		c.finish(!fits)
		return err
	}
	total, same := 0, true
	for j := range n {
		src, s := c.from(j)
		total += len(src)
		same = same && s == size
	}
	var err error
	switch {
	case !same:
		err = argsErr(routine, form, cs.team, func(j int) collArgs { return c.argsOf(j, false) })
	case total > len(dest):
		err = argErr(routine, "dest has %d elements, fewer than the %d collected", len(dest)/size, total/size)
	default:
		pos := 0
		for j := range n {
			b, _ := c.from(j)
			ucs.Copy(dest[pos:pos+len(b)], b)
			pos += len(b)
		}
	}
	c.finish(!fits)
	return err
}

// checkSame returns, once every PE of the team contributed to the call, an
// error naming every PE's arguments when their lengths or element sizes
// differ, or nil.
func (c *stagedCall) checkSame(routine string, b []byte, size int) error {
	for j := range c.cs.team.npes {
		if src, s := c.from(j); len(src) != len(b) || s != size {
			return argsErr(routine, 0, c.cs.team, func(j int) collArgs { return c.argsOf(j, true) })
		}
	}
	return nil
}
