package shmem

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/goshmem/goshmem/ucp"
)

// An atomic's target is reached through the cached pointer of a same-node
// PE (CPU atomics on the mapped heap, coherent with the transports' own
// atomics on it) or through ucp's atomic operations otherwise. Values travel
// as raw bits: 4- or 8-byte words whatever T is.

func bitsOf[T any](v T) uint64 {
	switch unsafe.Sizeof(v) {
	case 4:
		return uint64(*(*uint32)(unsafe.Pointer(&v)))
	case 8:
		return *(*uint64)(unsafe.Pointer(&v))
	}
	panic("shmem: atomic on a type of unsupported size")
}

func fromBits[T any](u uint64) (v T) {
	switch unsafe.Sizeof(v) {
	case 4:
		*(*uint32)(unsafe.Pointer(&v)) = uint32(u)
	case 8:
		*(*uint64)(unsafe.Pointer(&v)) = u
	default:
		panic("shmem: atomic on a type of unsupported size")
	}
	return v
}

// amoTarget checks pe and the address of an atomic and returns the peer and
// the heap offset.
func amoTarget[T any](routine string, p *T, pe int) (*peer, uintptr) {
	q := peerAt(routine, pe)
	var z T
	size := unsafe.Sizeof(z)
	off := offsetOf(routine, "dest", unsafe.Pointer(p), int(size))
	if off%size != 0 {
		panic(fmt.Sprintf("shmem.%s: %p is not aligned to %d bytes", routine, p, size))
	}
	return q, off
}

// amoSlow runs op through the ucp endpoint to pe and waits for it; for
// fetching ops (fetch true, or Swap/CSwap) it returns the old value. For
// CSwap, cond is the compare value.
//
//go:noinline
func amoSlow(routine string, pe int, off uintptr, size uintptr, op ucp.AtomicOp, v, cond uint64, fetch bool) uint64 {
	q := &st.peers[pe]
	param := new(ucp.RequestParam).SetDatatype(ucp.DatatypeContig(int(size)))
	var reply uint64
	if fetch {
		reply = cond
		param.SetReply(&reply)
	}
	req, err := q.ep.AtomicOpNBX(op, v, q.raddr+uint64(off), q.rkey, param)
	if err == nil && req != nil {
		err = req.Wait()
		req.Free()
	}
	if err != nil {
		fatal(routine, pe, err)
	}
	if size == 4 {
		return uint64(uint32(reply))
	}
	return reply
}

// AtomicFetch returns the value of the symmetric object *src on pe, read
// atomically (shmem_atomic_fetch).
func AtomicFetch[T ExtAMO](src *T, pe int) T {
	q, off := amoTarget("AtomicFetch", src, pe)
	var z T
	if q.base != nil {
		a := unsafe.Add(q.base, off)
		if unsafe.Sizeof(z) == 4 {
			return fromBits[T](uint64(atomic.LoadUint32((*uint32)(a))))
		}
		return fromBits[T](atomic.LoadUint64((*uint64)(a)))
	}
	// Fetch-and-add of zero leaves any bit pattern as it is.
	return fromBits[T](amoSlow("AtomicFetch", pe, off, unsafe.Sizeof(z), ucp.AtomicOpAdd, 0, 0, true))
}

// AtomicSet stores v into the symmetric object *dst on pe atomically
// (shmem_atomic_set).
func AtomicSet[T ExtAMO](dst *T, v T, pe int) {
	q, off := amoTarget("AtomicSet", dst, pe)
	if q.base != nil {
		a := unsafe.Add(q.base, off)
		if unsafe.Sizeof(v) == 4 {
			atomic.StoreUint32((*uint32)(a), uint32(bitsOf(v)))
			return
		}
		atomic.StoreUint64((*uint64)(a), bitsOf(v))
		return
	}
	amoSlow("AtomicSet", pe, off, unsafe.Sizeof(v), ucp.AtomicOpSwap, bitsOf(v), 0, true)
}

// AtomicSwap stores v into *dst on pe and returns the old value
// (shmem_atomic_swap).
func AtomicSwap[T ExtAMO](dst *T, v T, pe int) T {
	q, off := amoTarget("AtomicSwap", dst, pe)
	if q.base != nil {
		a := unsafe.Add(q.base, off)
		if unsafe.Sizeof(v) == 4 {
			return fromBits[T](uint64(atomic.SwapUint32((*uint32)(a), uint32(bitsOf(v)))))
		}
		return fromBits[T](atomic.SwapUint64((*uint64)(a), bitsOf(v)))
	}
	return fromBits[T](amoSlow("AtomicSwap", pe, off, unsafe.Sizeof(v), ucp.AtomicOpSwap, bitsOf(v), 0, true))
}

// AtomicCompareSwap stores v into *dst on pe if it holds cond, and returns
// the old value either way (shmem_atomic_compare_swap).
func AtomicCompareSwap[T AMO](dst *T, cond, v T, pe int) T {
	q, off := amoTarget("AtomicCompareSwap", dst, pe)
	if q.base != nil {
		a := unsafe.Add(q.base, off)
		if unsafe.Sizeof(v) == 4 {
			for {
				old := atomic.LoadUint32((*uint32)(a))
				if old != uint32(cond) {
					return T(old)
				}
				if atomic.CompareAndSwapUint32((*uint32)(a), old, uint32(v)) {
					return T(old)
				}
			}
		}
		for {
			old := atomic.LoadUint64((*uint64)(a))
			if old != uint64(cond) {
				return T(old)
			}
			if atomic.CompareAndSwapUint64((*uint64)(a), old, uint64(v)) {
				return T(old)
			}
		}
	}
	return fromBits[T](amoSlow("AtomicCompareSwap", pe, off, unsafe.Sizeof(v), ucp.AtomicOpCSwap, bitsOf(v), bitsOf(cond), true))
}

// AtomicFetchAdd adds v to *dst on pe and returns the old value
// (shmem_atomic_fetch_add).
func AtomicFetchAdd[T AMO](dst *T, v T, pe int) T {
	q, off := amoTarget("AtomicFetchAdd", dst, pe)
	if q.base != nil {
		a := unsafe.Add(q.base, off)
		if unsafe.Sizeof(v) == 4 {
			return T(atomic.AddUint32((*uint32)(a), uint32(v)) - uint32(v))
		}
		return T(atomic.AddUint64((*uint64)(a), uint64(v)) - uint64(v))
	}
	return fromBits[T](amoSlow("AtomicFetchAdd", pe, off, unsafe.Sizeof(v), ucp.AtomicOpAdd, bitsOf(v), 0, true))
}

// AtomicAdd adds v to *dst on pe (shmem_atomic_add).
func AtomicAdd[T AMO](dst *T, v T, pe int) {
	q, off := amoTarget("AtomicAdd", dst, pe)
	if q.base != nil {
		a := unsafe.Add(q.base, off)
		if unsafe.Sizeof(v) == 4 {
			atomic.AddUint32((*uint32)(a), uint32(v))
			return
		}
		atomic.AddUint64((*uint64)(a), uint64(v))
		return
	}
	amoSlow("AtomicAdd", pe, off, unsafe.Sizeof(v), ucp.AtomicOpAdd, bitsOf(v), 0, false)
}

// AtomicFetchInc adds one to *dst on pe and returns the old value
// (shmem_atomic_fetch_inc).
func AtomicFetchInc[T AMO](dst *T, pe int) T { return AtomicFetchAdd(dst, 1, pe) }

// AtomicInc adds one to *dst on pe (shmem_atomic_inc).
func AtomicInc[T AMO](dst *T, pe int) { AtomicAdd(dst, 1, pe) }
