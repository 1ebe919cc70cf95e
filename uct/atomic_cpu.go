package uct

import (
	"sync/atomic"

	"github.com/goshmem/goshmem/ucs"
)

// CPUAtomic64 applies op with operand v to *p with CPU atomics and returns
// the old value; for AtomicOpCSwap, v is stored only if *p holds cmp.
// Transports with IfaceFlagAtomicCPU, and software atomics applied at a
// target, use it, so that every atomic on a word is coherent with every
// other whatever path it came by. It returns ucs.ErrUnsupported for an
// unknown op; p must be 8-byte aligned.
func CPUAtomic64(op AtomicOp, p *uint64, v, cmp uint64) (uint64, ucs.Status) {
	switch op {
	case AtomicOpAdd:
		return atomic.AddUint64(p, v) - v, ucs.OK
	case AtomicOpAnd:
		return atomic.AndUint64(p, v), ucs.OK
	case AtomicOpOr:
		return atomic.OrUint64(p, v), ucs.OK
	case AtomicOpXor:
		for {
			o := atomic.LoadUint64(p)
			if atomic.CompareAndSwapUint64(p, o, o^v) {
				return o, ucs.OK
			}
		}
	case AtomicOpSwap:
		return atomic.SwapUint64(p, v), ucs.OK
	case AtomicOpCSwap:
		return CSwap64(p, cmp, v), ucs.OK
	}
	return 0, ucs.ErrUnsupported
}

// CPUAtomic32 is CPUAtomic64 for 4-byte words.
func CPUAtomic32(op AtomicOp, p *uint32, v, cmp uint32) (uint32, ucs.Status) {
	switch op {
	case AtomicOpAdd:
		return atomic.AddUint32(p, v) - v, ucs.OK
	case AtomicOpAnd:
		return atomic.AndUint32(p, v), ucs.OK
	case AtomicOpOr:
		return atomic.OrUint32(p, v), ucs.OK
	case AtomicOpXor:
		for {
			o := atomic.LoadUint32(p)
			if atomic.CompareAndSwapUint32(p, o, o^v) {
				return o, ucs.OK
			}
		}
	case AtomicOpSwap:
		return atomic.SwapUint32(p, v), ucs.OK
	case AtomicOpCSwap:
		return CSwap32(p, cmp, v), ucs.OK
	}
	return 0, ucs.ErrUnsupported
}

// CSwap64 stores swap into *p if it holds compare, and returns the value
// *p held, atomically.
func CSwap64(p *uint64, compare, swap uint64) uint64 {
	for {
		o := atomic.LoadUint64(p)
		if o != compare || atomic.CompareAndSwapUint64(p, o, swap) {
			return o
		}
	}
}

// CSwap32 is CSwap64 for 4-byte words.
func CSwap32(p *uint32, compare, swap uint32) uint32 {
	for {
		o := atomic.LoadUint32(p)
		if o != compare || atomic.CompareAndSwapUint32(p, o, swap) {
			return o
		}
	}
}
