package uctest

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// atomicKind is how an atomic operation is issued.
type atomicKind int

const (
	posted atomicKind = iota
	fetching
	cswap
)

// atomicCases returns a case for every atomic operation of each width:
// posted add/and/or/xor, fetching add/and/or/xor/swap and cswap.
func atomicCases() []testCase {
	var cs []testCase
	slot := 0
	for _, width := range []int{32, 64} {
		add := func(name string, kind atomicKind, op uct.AtomicOp) {
			off := atomicOff + 8*slot
			slot++
			cs = append(cs, testCase{name: name, run: func(t *testing.T, e *env) { testAtomic(t, e, width, kind, op, off) }})
		}
		for _, op := range []uct.AtomicOp{uct.AtomicOpAdd, uct.AtomicOpAnd, uct.AtomicOpOr, uct.AtomicOpXor} {
			add(fmt.Sprintf("atomic%d_post_%s", width, op), posted, op)
		}
		for _, op := range []uct.AtomicOp{uct.AtomicOpAdd, uct.AtomicOpAnd, uct.AtomicOpOr, uct.AtomicOpXor, uct.AtomicOpSwap} {
			add(fmt.Sprintf("atomic%d_fetch_%s", width, op), fetching, op)
		}
		add(fmt.Sprintf("atomic%d_cswap", width), cswap, uct.AtomicOpCSwap)
	}
	return cs
}

// apply is the model of the atomic operations: the value op leaves in a
// word of the given width that held old.
func apply(op uct.AtomicOp, width int, old, v uint64) uint64 {
	var r uint64
	switch op {
	case uct.AtomicOpAdd:
		r = old + v
	case uct.AtomicOpAnd:
		r = old & v
	case uct.AtomicOpOr:
		r = old | v
	case uct.AtomicOpXor:
		r = old ^ v
	case uct.AtomicOpSwap:
		r = v
	}
	if width == 32 {
		r &= math.MaxUint32
	}
	return r
}

// testAtomic checks one atomic operation against the model, for a few
// initial values and operands (including wrap-around and all-ones), on the
// word at offset off of the target.
func testAtomic(t *testing.T, e *env, width int, kind atomicKind, op uct.AtomicOp, off int) {
	caps := e.attr.Atomic64
	if width == 32 {
		caps = e.attr.Atomic32
	}
	flags, how := caps.FopFlags, "fetching"
	if kind == posted {
		flags, how = caps.OpFlags, "posted"
	}
	if flags&op.OpMask() == 0 {
		t.Skipf("skipped: transport does not claim %s %d-bit atomic %s", how, width, op)
	}
	c := e.main
	mask := uint64(math.MaxUint64)
	if width == 32 {
		mask = math.MaxUint32
	}
	vals := []struct{ old, v uint64 }{
		{0x0123456789abcdef, 0xfedcba9876543210},
		{0, mask},
		{mask, 1}, // add wraps around
		{0xa5a5a5a5a5a5a5a5, 0x5a5a5a5a0f0f0f0f},
	}
	raddr, rkey := c.base+uint64(off), c.rkey.Rkey
	size := width / 8
	for _, tv := range vals {
		old, v := tv.old&mask, tv.v&mask
		for _, match := range []bool{true, false} {
			if !match && kind != cswap {
				continue
			}
			init := make([]byte, size)
			putWord(init, old)
			e.write(t, c, off, init)
			want := apply(op, width, old, v)
			what := fmt.Sprintf("%d-bit %s %s(%#x) on %#x", width, how, op, v, old)
			var result uint64
			var r32 uint32
			switch {
			case kind == posted && width == 64:
				e.do(t, what, func(*uct.Completion) ucs.Status { return c.ep.AtomicPost64(op, v, raddr, rkey) })
			case kind == posted:
				e.do(t, what, func(*uct.Completion) ucs.Status { return c.ep.AtomicPost32(op, uint32(v), raddr, rkey) })
			case kind == fetching && width == 64:
				e.do(t, what, func(comp *uct.Completion) ucs.Status {
					return c.ep.AtomicFetch64(op, v, raddr, rkey, &result, comp)
				})
			case kind == fetching:
				e.do(t, what, func(comp *uct.Completion) ucs.Status {
					return c.ep.AtomicFetch32(op, uint32(v), raddr, rkey, &r32, comp)
				})
				result = uint64(r32)
			default:
				compare := old
				if !match {
					compare = ^old & mask
				}
				what = fmt.Sprintf("%d-bit cswap(%#x, %#x) on %#x", width, compare, v, old)
				want = old
				if match {
					want = v
				}
				if width == 64 {
					e.do(t, what, func(comp *uct.Completion) ucs.Status {
						return c.ep.AtomicCSwap64(compare, v, raddr, rkey, &result, comp)
					})
				} else {
					e.do(t, what, func(comp *uct.Completion) ucs.Status {
						return c.ep.AtomicCSwap32(uint32(compare), uint32(v), raddr, rkey, &r32, comp)
					})
					result = uint64(r32)
				}
			}
			if kind == posted {
				// A posted operation completes at the latest with a flush.
				e.flush(t, c)
			}
			if kind != posted && result != old {
				t.Errorf("%s fetched %#x, want the old value %#x", what, result, old)
			}
			if got := word(e.read(t, c, off, size)); got != want {
				t.Errorf("%s left %#x, want %#x", what, got, want)
			}
		}
	}
}

// putWord stores v little-endian in b (4 or 8 bytes).
func putWord(b []byte, v uint64) {
	if len(b) == 4 {
		binary.LittleEndian.PutUint32(b, uint32(v))
		return
	}
	binary.LittleEndian.PutUint64(b, v)
}

// word decodes a little-endian word of 4 or 8 bytes.
func word(b []byte) uint64 {
	if len(b) == 4 {
		return uint64(binary.LittleEndian.Uint32(b))
	}
	return binary.LittleEndian.Uint64(b)
}
