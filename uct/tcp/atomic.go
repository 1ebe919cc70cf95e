package tcp

import (
	"encoding/binary"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
	"github.com/goshmem/goshmem/uct/internal/base"
)

// Atomics: the EP sends a frameAtomic naming the key, the word and the
// operation; the target applies it to its registered memory where it
// reads the frame (in its Progress, or its poller's), with uct.CPUAtomic64
// or CPUAtomic32, the CPU atomics that the shared-memory transports and
// ucp's software atomics use, and answers a fetching one with a
// frameAtomicRep on the same connection (see get.go for the replies). A
// posted atomic has no reply: like a put, it counts as processed for
// flush. An atomic the target refuses (a word outside every registered
// region, or not aligned) is answered with ucs.ErrInvalidAddr, or dropped
// and logged when posted.

// The atomic operations of the iface: posted and fetching.
const (
	atomicOps  = base.AllAtomicOps
	atomicFops = base.AllAtomicFops
)

// atomicFrame returns the request of an atomic on the size-byte word at
// raddr, or the status of a bad one: an op the iface does not do
// (posted when post is set) fails with ucs.ErrUnsupported, a word outside
// the key or not aligned with ucs.ErrInvalidParam.
func atomicFrame(op uct.AtomicOp, post bool, size int, value, compare, raddr, rkey uint64) (*txFrame, ucs.Status) {
	mask := atomicFops
	if post {
		mask = atomicOps
	}
	if op < 0 || op > uct.AtomicOpCSwap || mask&op.OpMask() == 0 {
		return nil, ucs.ErrUnsupported
	}
	if raddr%uint64(size) != 0 {
		return nil, ucs.ErrInvalidParam
	}
	k, st := remoteRange(rkey, raddr, size)
	if st != ucs.OK {
		return nil, st
	}
	f := newFrame(frameHeaderLen + atomicHeaderLen)
	putFrameHeader(f.buf, frameAtomic, 0, atomicHeaderLen)
	a := atomicHeader{key: k.id, token: k.token, raddr: raddr, value: value, compare: compare, op: op, size: uint8(size)}
	a.encode(f.buf[frameHeaderLen:])
	return f, ucs.OK
}

// atomicIDOff is where the id lies in an atomic request.
const atomicIDOff = frameHeaderLen + 40

// postAtomic sends a posted atomic: ucs.OK once the EP took it.
func (e *EP) postAtomic(op uct.AtomicOp, size int, value, raddr, rkey uint64) ucs.Status {
	f, st := atomicFrame(op, true, size, value, 0, raddr, rkey)
	if st != ucs.OK {
		return st
	}
	return sent(e.post(f, false))
}

// fetchAtomic sends a fetching atomic whose old value goes to res64 or
// res32 before comp is signalled.
func (e *EP) fetchAtomic(op uct.AtomicOp, size int, value, compare, raddr, rkey uint64, res64 *uint64, res32 *uint32, comp *uct.Completion) ucs.Status {
	f, st := atomicFrame(op, false, size, value, compare, raddr, rkey)
	if st != ucs.OK {
		return st
	}
	w := newWaitOp()
	w.reply, w.res64, w.res32, w.comp = frameAtomicRep, res64, res32, comp
	return e.postWait(f, w, atomicIDOff)
}

// AtomicPost64 applies op (Add, And, Or or Xor; ucs.ErrUnsupported for
// another) with value to the 8-byte word at raddr under rkey, at the
// target; it returns ucs.OK once the EP took it (flush tells when it was
// applied), ucs.ErrInvalidParam for a word outside the key or not aligned,
// ucs.ErrNoResource when the EP's queue is full.
func (e *EP) AtomicPost64(op uct.AtomicOp, value uint64, raddr uint64, rkey uint64) ucs.Status {
	return e.postAtomic(op, 8, value, raddr, rkey)
}

// AtomicPost32 is AtomicPost64 for a 4-byte word.
func (e *EP) AtomicPost32(op uct.AtomicOp, value uint32, raddr uint64, rkey uint64) ucs.Status {
	return e.postAtomic(op, 4, uint64(value), raddr, rkey)
}

// AtomicFetch64 applies op (Add, And, Or, Xor or Swap) with value to the
// 8-byte word at raddr under rkey and stores its old value in *result
// before comp (when not nil) is signalled: it returns ucs.InProgress, or
// an error as AtomicPost64 does. A word the target refuses completes with
// ucs.ErrInvalidAddr.
func (e *EP) AtomicFetch64(op uct.AtomicOp, value uint64, raddr uint64, rkey uint64, result *uint64, comp *uct.Completion) ucs.Status {
	if op == uct.AtomicOpCSwap {
		return ucs.ErrUnsupported
	}
	return e.fetchAtomic(op, 8, value, 0, raddr, rkey, result, nil, comp)
}

// AtomicFetch32 is AtomicFetch64 for a 4-byte word.
func (e *EP) AtomicFetch32(op uct.AtomicOp, value uint32, raddr uint64, rkey uint64, result *uint32, comp *uct.Completion) ucs.Status {
	if op == uct.AtomicOpCSwap {
		return ucs.ErrUnsupported
	}
	return e.fetchAtomic(op, 4, uint64(value), 0, raddr, rkey, nil, result, comp)
}

// AtomicCSwap64 stores swap in the 8-byte word at raddr under rkey if it
// holds compare, and its old value in *result before comp (when not nil)
// is signalled; results and errors as AtomicFetch64.
func (e *EP) AtomicCSwap64(compare, swap uint64, raddr uint64, rkey uint64, result *uint64, comp *uct.Completion) ucs.Status {
	return e.fetchAtomic(uct.AtomicOpCSwap, 8, swap, compare, raddr, rkey, result, nil, comp)
}

// AtomicCSwap32 is AtomicCSwap64 for a 4-byte word.
func (e *EP) AtomicCSwap32(compare, swap uint32, raddr uint64, rkey uint64, result *uint32, comp *uct.Completion) ucs.Status {
	return e.fetchAtomic(uct.AtomicOpCSwap, 4, uint64(swap), uint64(compare), raddr, rkey, nil, result, comp)
}

// serveAtomic applies an atomic to the registered word it names and
// answers it when it fetches; a refused one is answered with
// ucs.ErrInvalidAddr (logged when posted). It fails only when the
// connection does.
func (s *rxConn) serveAtomic(a atomicHeader) error {
	size := uint64(a.size)
	var old uint64
	st := ucs.ErrInvalidAddr
	r, why := s.iface.md.access(a.key, a.token, a.raddr, size)
	switch {
	case r != nil && a.raddr%size != 0:
		r.mu.RUnlock()
		why = "not aligned"
	case r != nil:
		p := unsafe.Pointer(&r.mem[a.raddr-r.key.addr])
		if size == 4 {
			var o uint32
			o, st = uct.CPUAtomic32(a.op, (*uint32)(p), uint32(a.value), uint32(a.compare))
			old = uint64(o)
		} else {
			old, st = uct.CPUAtomic64(a.op, (*uint64)(p), a.value, a.compare)
		}
		r.mu.RUnlock()
	}
	if st != ucs.OK {
		s.iface.warn.rejected.Logf("rejected an atomic %v on %d bytes at %#x (key %#x) from %v: %s", a.op, size, a.raddr, a.key, s.from, why)
		old = 0
	}
	if a.id == 0 {
		return nil
	}
	b := s.amoRep[:]
	putFrameHeader(b, frameAtomicRep, 0, atomicRepLen)
	binary.LittleEndian.PutUint64(b[frameHeaderLen:], a.id)
	binary.LittleEndian.PutUint64(b[frameHeaderLen+8:], uint64(int64(st)))
	binary.LittleEndian.PutUint64(b[frameHeaderLen+16:], old)
	return s.write(nil, b, nil)
}
