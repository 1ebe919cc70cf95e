package shmem

import (
	"context"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// SignalOp is how a put-with-signal updates its signal word.
type SignalOp int

// Signal operations.
const (
	// SignalSet stores the signal value into the signal word
	// (SHMEM_SIGNAL_SET).
	SignalSet SignalOp = iota
	// SignalAdd adds the signal value to the signal word (SHMEM_SIGNAL_ADD).
	SignalAdd
)

// String returns the name of the operation.
func (op SignalOp) String() string {
	switch op {
	case SignalSet:
		return "SignalSet"
	case SignalAdd:
		return "SignalAdd"
	}
	return fmt.Sprintf("SignalOp(%d)", int(op))
}

// PutSignal copies src into the symmetric array dst on pe and then updates
// the symmetric signal word *sig on pe with signal, as op says
// (shmem_put_signal): a PE that sees the update (SignalWaitUntil,
// WaitUntil, SignalFetch) also sees the data. The update is atomic with
// respect to the other signal updates and atomics on *sig. PutSignal
// returns when src may be reused; the signal's completion at pe is Quiet's.
// dst must have at least len(src) elements; sig must be 8-byte aligned.
func PutSignal[T RMA](dst, src []T, sig *uint64, signal uint64, op SignalOp, pe int) {
	putSignal(&defaultCtx, "PutSignal", dst, src, sig, signal, op, pe, false)
}

// CtxPutSignal is PutSignal on the context ctx (shmem_ctx_put_signal).
func CtxPutSignal[T RMA](ctx *Ctx, dst, src []T, sig *uint64, signal uint64, op SignalOp, pe int) {
	putSignal(ctx, "CtxPutSignal", dst, src, sig, signal, op, pe, false)
}

// PutSignalNBI is PutSignal that may return before src has been read
// (shmem_put_signal_nbi): src may be reused after Quiet.
func PutSignalNBI[T RMA](dst, src []T, sig *uint64, signal uint64, op SignalOp, pe int) {
	putSignal(&defaultCtx, "PutSignalNBI", dst, src, sig, signal, op, pe, true)
}

// CtxPutSignalNBI is PutSignalNBI on the context ctx
// (shmem_ctx_put_signal_nbi).
func CtxPutSignalNBI[T RMA](ctx *Ctx, dst, src []T, sig *uint64, signal uint64, op SignalOp, pe int) {
	putSignal(ctx, "CtxPutSignalNBI", dst, src, sig, signal, op, pe, true)
}

// PutMemSignal is PutSignal of bytes (shmem_putmem_signal).
func PutMemSignal(dst, src []byte, sig *uint64, signal uint64, op SignalOp, pe int) {
	putSignal(&defaultCtx, "PutMemSignal", dst, src, sig, signal, op, pe, false)
}

// CtxPutMemSignal is PutMemSignal on the context ctx
// (shmem_ctx_putmem_signal).
func CtxPutMemSignal(ctx *Ctx, dst, src []byte, sig *uint64, signal uint64, op SignalOp, pe int) {
	putSignal(ctx, "CtxPutMemSignal", dst, src, sig, signal, op, pe, false)
}

// PutMemSignalNBI is PutSignalNBI of bytes (shmem_putmem_signal_nbi).
func PutMemSignalNBI(dst, src []byte, sig *uint64, signal uint64, op SignalOp, pe int) {
	putSignal(&defaultCtx, "PutMemSignalNBI", dst, src, sig, signal, op, pe, true)
}

// CtxPutMemSignalNBI is PutMemSignalNBI on the context ctx
// (shmem_ctx_putmem_signal_nbi).
func CtxPutMemSignalNBI(ctx *Ctx, dst, src []byte, sig *uint64, signal uint64, op SignalOp, pe int) {
	putSignal(ctx, "CtxPutMemSignalNBI", dst, src, sig, signal, op, pe, true)
}

// AddSignal adds signal to the symmetric signal word *sig on pe
// (shmem_signal_add, OpenSHMEM 1.6): the update of a put-with-signal
// without the data, atomic with respect to the other signal updates and
// atomics on *sig. Its completion at pe is Quiet's. sig must be 8-byte
// aligned.
func AddSignal(sig *uint64, signal uint64, pe int) {
	putSignal[byte](&defaultCtx, "AddSignal", nil, nil, sig, signal, SignalAdd, pe, false)
}

// CtxAddSignal is AddSignal on the context ctx (shmem_ctx_signal_add).
func CtxAddSignal(ctx *Ctx, sig *uint64, signal uint64, pe int) {
	putSignal[byte](ctx, "CtxAddSignal", nil, nil, sig, signal, SignalAdd, pe, false)
}

// SetSignal stores signal into the symmetric signal word *sig on pe
// (shmem_signal_set, OpenSHMEM 1.6), as AddSignal adds.
func SetSignal(sig *uint64, signal uint64, pe int) {
	putSignal[byte](&defaultCtx, "SetSignal", nil, nil, sig, signal, SignalSet, pe, false)
}

// CtxSetSignal is SetSignal on the context ctx (shmem_ctx_signal_set).
func CtxSetSignal(ctx *Ctx, sig *uint64, signal uint64, pe int) {
	putSignal[byte](ctx, "CtxSetSignal", nil, nil, sig, signal, SignalSet, pe, false)
}

func putSignal[T RMA](c *Ctx, routine string, dst, src []T, sig *uint64, signal uint64, op SignalOp, pe int, nbi bool) {
	q := c.peer(routine, pe)
	n := len(src)
	if len(dst) < n {
		badLen(routine, len(dst), n)
	}
	var aop amoOp
	switch op {
	case SignalSet:
		aop = amoSet
	case SignalAdd:
		aop = amoAdd
	default:
		panic(fmt.Sprintf("shmem.%s: invalid signal operation %d (valid: SignalSet, SignalAdd)", routine, int(op)))
	}
	soff, heap := offsetOf(routine, "sig", unsafe.Pointer(sig), 8)
	if uintptr(unsafe.Pointer(sig))%8 != 0 {
		badAlign(routine, "sig", unsafe.Pointer(sig), 8)
	}
	var z T
	nb := n * int(unsafe.Sizeof(z))
	var off uintptr
	if n > 0 {
		var dheap bool
		off, dheap = offsetOf(routine, "dst", unsafe.Pointer(unsafe.SliceData(dst)), nb)
		heap = heap && dheap
	}
	profCtx(c, routine, pe, nb+8)
	if base := q.heap(); base != nil && heap {
		if n > 0 {
			copyOut(base, off, src[:n])
		}
		// The atomic orders the copy before the signal for every reader
		// that loads the signal atomically.
		amoDirect(unsafe.Add(base, soff), 8, aop, signal, 0)
		return
	}
	c.putSignalSlow(routine, pe, off, bytesOf(src), soff, aop, signal, nbi)
}

//go:noinline
func (c *Ctx) putSignalSlow(routine string, pe int, off uintptr, b []byte, soff uintptr, op amoOp, signal uint64, nbi bool) {
	if c.session.Load() != nil {
		c.flushBatch(routine, pe)
	}
	if len(b) > 0 {
		// (A signal alone, SetSignal and AddSignal, is the atomic alone.)
		c.sendPut(routine, pe, off, b, nbi)
		// The fence keeps the signal behind the data on the way to pe. It
		// is the endpoint's: a fence of the worker may wait for every peer
		// it sent to in software, and a peer that has left a barrier need
		// not progress again before this PE's signal lets another leave it.
		if err := c.remote(routine, pe).ep.Fence(); err != nil {
			fatal(routine, pe, err)
		}
	}
	c.amoSlow(routine, pe, soff, 8, op, signal, 0, amoPost, nil)
}

// SignalFetch returns the value of the symmetric signal word *sig of this
// PE, read atomically (shmem_signal_fetch). sig must be 8-byte aligned.
func SignalFetch(sig *uint64) uint64 {
	checkPoint("SignalFetch", sig)
	return atomic.LoadUint64(sig)
}

// SignalWaitUntil waits until the symmetric signal word *sig of this PE
// compares to v as cmp says, and returns the value that did
// (shmem_signal_wait_until). sig must be 8-byte aligned.
func SignalWaitUntil(sig *uint64, cmp Cmp, v uint64) uint64 {
	checkPoint("SignalWaitUntil", sig)
	checkCmp("SignalWaitUntil", cmp)
	w := waiter{what: "SignalWaitUntil", on: waitFor(sig, 1, cmp, v, false)}
	for {
		if x := atomic.LoadUint64(sig); compare(x, cmp, v) {
			w.done()
			return x
		}
		w.pause()
	}
}

// SignalWaitUntilContext is SignalWaitUntil that gives up when ctx is
// done, returning an error that wraps ctx.Err() (and the value it saw
// last).
func SignalWaitUntilContext(ctx context.Context, sig *uint64, cmp Cmp, v uint64) (uint64, error) {
	checkPoint("SignalWaitUntilContext", sig)
	checkCmp("SignalWaitUntilContext", cmp)
	w := waiter{what: "SignalWaitUntilContext", on: waitFor(sig, 1, cmp, v, false)}
	defer w.done()
	for {
		x := atomic.LoadUint64(sig)
		if compare(x, cmp, v) {
			return x, nil
		}
		if w.n%ctxPolls == 0 {
			if err := ctx.Err(); err != nil {
				return x, fmt.Errorf("shmem.SignalWaitUntilContext: %w", err)
			}
		}
		w.pause()
	}
}
