package shmem

import (
	"fmt"
	"math"
	"reflect"
	"sync/atomic"
	"unsafe"

	"github.com/goshmem/goshmem/ucp"
)

// An atomic's target is reached through the cached pointer of a same-node
// PE (CPU atomics on the mapped heap, coherent with the transports' own
// atomics on it) or through ucp's atomic operations on the context's
// endpoint otherwise. Values travel as raw bits: 4- or 8-byte words
// whatever T is.

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

// amoOp is an atomic operation of this package.
type amoOp uint8

const (
	amoFetch amoOp = iota
	amoSet
	amoSwap
	amoCSwap
	amoAdd
	amoAnd
	amoOr
	amoXor
	amoFAdd // add of float32 or float64 bits: a compare-and-swap loop
)

// ucp returns the ucp operation that carries op, and whether it needs a
// reply buffer (a fetch, or ucp's swap that always fetches).
func (op amoOp) ucp() (ucp.AtomicOp, bool) {
	switch op {
	case amoFetch:
		return ucp.AtomicOpAdd, true // adding zero leaves any bit pattern as it is
	case amoSet, amoSwap:
		return ucp.AtomicOpSwap, true
	case amoCSwap:
		return ucp.AtomicOpCSwap, true
	case amoAnd:
		return ucp.AtomicOpAnd, false
	case amoOr:
		return ucp.AtomicOpOr, false
	case amoXor:
		return ucp.AtomicOpXor, false
	}
	return ucp.AtomicOpAdd, false
}

// amoDirect applies op to the size-byte word at a with CPU atomics and
// returns the old value (0 for amoSet).
func amoDirect(a unsafe.Pointer, size uintptr, op amoOp, v, cond uint64) uint64 {
	if size == 4 {
		p, x := (*uint32)(a), uint32(v)
		switch op {
		case amoFetch:
			return uint64(atomic.LoadUint32(p))
		case amoSet:
			atomic.StoreUint32(p, x)
			return 0
		case amoSwap:
			return uint64(atomic.SwapUint32(p, x))
		case amoCSwap:
			for {
				old := atomic.LoadUint32(p)
				if old != uint32(cond) || atomic.CompareAndSwapUint32(p, old, x) {
					return uint64(old)
				}
			}
		case amoAdd:
			return uint64(atomic.AddUint32(p, x) - x)
		case amoAnd:
			return uint64(atomic.AndUint32(p, x))
		case amoOr:
			return uint64(atomic.OrUint32(p, x))
		case amoXor:
			for {
				old := atomic.LoadUint32(p)
				if atomic.CompareAndSwapUint32(p, old, old^x) {
					return uint64(old)
				}
			}
		case amoFAdd:
			for {
				old := atomic.LoadUint32(p)
				if atomic.CompareAndSwapUint32(p, old, math.Float32bits(math.Float32frombits(old)+math.Float32frombits(x))) {
					return uint64(old)
				}
			}
		}
		panic("shmem: invalid atomic operation")
	}
	p := (*uint64)(a)
	switch op {
	case amoFetch:
		return atomic.LoadUint64(p)
	case amoSet:
		atomic.StoreUint64(p, v)
		return 0
	case amoSwap:
		return atomic.SwapUint64(p, v)
	case amoCSwap:
		for {
			old := atomic.LoadUint64(p)
			if old != cond || atomic.CompareAndSwapUint64(p, old, v) {
				return old
			}
		}
	case amoAdd:
		return atomic.AddUint64(p, v) - v
	case amoAnd:
		return atomic.AndUint64(p, v)
	case amoOr:
		return atomic.OrUint64(p, v)
	case amoXor:
		for {
			old := atomic.LoadUint64(p)
			if atomic.CompareAndSwapUint64(p, old, old^v) {
				return old
			}
		}
	case amoFAdd:
		for {
			old := atomic.LoadUint64(p)
			if atomic.CompareAndSwapUint64(p, old, fadd(old, v, 8)) {
				return old
			}
		}
	}
	panic("shmem: invalid atomic operation")
}

// fadd adds the floating-point numbers whose bits are a and b, of size
// bytes (4 or 8), and returns the sum's bits.
func fadd(a, b uint64, size uintptr) uint64 {
	if size == 4 {
		return uint64(math.Float32bits(math.Float32frombits(uint32(a)) + math.Float32frombits(uint32(b))))
	}
	return math.Float64bits(math.Float64frombits(a) + math.Float64frombits(b))
}

// floatAddSlow is a floating-point add through the network: no transport
// adds floats, so it is a loop of compare-and-swaps of the bits, each a
// round trip, until one finds the value it read. It returns the old
// value. mode and fetch are those of amoSlow: the loop completes before
// it returns whatever the mode, as a non-blocking routine may.
func (c *Ctx) floatAddSlow(routine string, pe int, off, size uintptr, v uint64, mode int, fetch unsafe.Pointer) uint64 {
	old := c.amoSlow(routine, pe, off, size, amoFetch, 0, 0, amoWait, nil)
	for {
		prev := c.amoSlow(routine, pe, off, size, amoCSwap, fadd(old, v, size), old, amoWait, nil)
		if prev == old {
			break
		}
		old = prev
	}
	if mode == amoNBI {
		if size == 4 {
			*(*uint32)(fetch) = uint32(old)
		} else {
			*(*uint64)(fetch) = old
		}
	}
	return old
}

// amoTarget checks pe and the address of an atomic and returns the peer,
// the symmetric offset and whether it is in the heap.
func amoTarget[T any](c *Ctx, routine string, p *T, pe int) (*peer, uintptr, bool) {
	q := c.peer(routine, pe)
	var z T
	size := unsafe.Sizeof(z)
	off, heap := offsetOf(routine, "dest", unsafe.Pointer(p), int(size))
	if uintptr(unsafe.Pointer(p))%size != 0 {
		badAlign(routine, "dest", unsafe.Pointer(p), size)
	}
	return q, off, heap
}

//go:noinline
func badAlign(routine, arg string, p unsafe.Pointer, size uintptr) {
	panic(fmt.Sprintf("shmem.%s: %s %p is not aligned to %d bytes", routine, arg, p, size))
}

// How the slow path of an atomic completes.
const (
	amoWait = iota // fetching: wait for the old value and return it
	amoPost        // non-fetching: Quiet completes it
	amoNBI         // non-blocking fetching: Quiet stores the old value
)

// amoSlow runs op through the context's endpoint to pe. With amoWait it
// waits and returns the old value; with amoPost and amoNBI it leaves the
// completion to Quiet, which for amoNBI stores the old value at fetch.
//
//go:noinline
func (c *Ctx) amoSlow(routine string, pe int, off, size uintptr, op amoOp, v, cond uint64, mode int, fetch unsafe.Pointer) uint64 {
	if c.session.Load() != nil {
		c.flushBatch(routine, pe)
	}
	if op == amoFAdd {
		return c.floatAddSlow(routine, pe, off, size, v, mode, fetch)
	}
	q := c.remote(routine, pe)
	uop, needsReply := op.ucp()
	raddr, rkey := q.at(routine, pe, off)
	if mode == amoWait {
		// The old value comes into a wireBuf's first word: ucp keeps its
		// address until the operation completes.
		b := wireBufs.Get().(*wireBuf)
		reply := &b[0]
		*reply = cond
		param := new(ucp.RequestParam).SetDatatype(ucp.DatatypeContig(int(size))).SetReply(reply)
		req, err := q.ep.AtomicOpNBX(uop, v, raddr, rkey, param)
		c.wait(routine, pe, req, err)
		old := *reply
		wireBufs.Put(b)
		if size == 4 {
			return uint64(uint32(old))
		}
		return old
	}
	a := c.newAsync(routine, pe)
	a.reply, a.size = cond, size
	if mode == amoNBI {
		a.fetch = fetch
		needsReply = true
	}
	param := a.param(needsReply).SetDatatype(ucp.DatatypeContig(int(size)))
	a.started(q.ep.AtomicOpNBX(uop, v, raddr, rkey, param))
	return 0
}

// amoFetching runs a fetching atomic and returns the old value.
func amoFetching[T any](c *Ctx, routine string, dst *T, pe int, op amoOp, v, cond T) T {
	// amoTarget, by hand: this is the hot path.
	q := c.peer(routine, pe)
	off := uintptr(unsafe.Pointer(dst)) - st.heapBase
	if off >= st.heapSize || unsafe.Sizeof(v) > st.heapSize-off || off%unsafe.Sizeof(v) != 0 || st.env.debug {
		// Panics with the message, makes the SHMEM_DEBUG checks, or
		// finds the address in a registered region.
		if _, roff, heap := amoTarget(c, routine, dst, pe); !heap {
			profCtx(c, routine, pe, int(unsafe.Sizeof(v)))
			return fromBits[T](c.amoSlow(routine, pe, roff, unsafe.Sizeof(v), op, bitsOf(v), bitsOf(cond), amoWait, nil))
		}
	}
	profCtx(c, routine, pe, int(unsafe.Sizeof(v)))
	if base := q.heap(); base != nil {
		return fromBits[T](amoDirect(unsafe.Add(base, off), unsafe.Sizeof(v), op, bitsOf(v), bitsOf(cond)))
	}
	return fromBits[T](c.amoSlow(routine, pe, off, unsafe.Sizeof(v), op, bitsOf(v), bitsOf(cond), amoWait, nil))
}

// amoPosted runs a non-fetching atomic.
func amoPosted[T any](c *Ctx, routine string, dst *T, pe int, op amoOp, v T) {
	q, off, heap := amoTarget(c, routine, dst, pe)
	profCtx(c, routine, pe, int(unsafe.Sizeof(v)))
	if base := q.heap(); base != nil && heap {
		amoDirect(unsafe.Add(base, off), unsafe.Sizeof(v), op, bitsOf(v), 0)
		return
	}
	c.amoSlow(routine, pe, off, unsafe.Sizeof(v), op, bitsOf(v), 0, amoPost, nil)
}

// amoNonBlocking runs a fetching atomic whose old value goes to *fetch by
// the next Quiet.
func amoNonBlocking[T any](c *Ctx, routine string, fetch, dst *T, pe int, op amoOp, v, cond T) {
	q, off, heap := amoTarget(c, routine, dst, pe)
	if fetch == nil {
		panic("shmem." + routine + ": fetch is nil")
	}
	profCtx(c, routine, pe, int(unsafe.Sizeof(v)))
	if base := q.heap(); base != nil && heap {
		*fetch = fromBits[T](amoDirect(unsafe.Add(base, off), unsafe.Sizeof(v), op, bitsOf(v), bitsOf(cond)))
		return
	}
	c.amoSlow(routine, pe, off, unsafe.Sizeof(v), op, bitsOf(v), bitsOf(cond), amoNBI, unsafe.Pointer(fetch))
}

// AtomicFetch returns the value of the symmetric object *src on pe, read
// atomically (shmem_atomic_fetch).
func AtomicFetch[T ExtAMO](src *T, pe int) T {
	var z T
	return amoFetching(&defaultCtx, "AtomicFetch", src, pe, amoFetch, z, z)
}

// CtxAtomicFetch is AtomicFetch on the context ctx (shmem_ctx_atomic_fetch).
func CtxAtomicFetch[T ExtAMO](ctx *Ctx, src *T, pe int) T {
	var z T
	return amoFetching(ctx, "CtxAtomicFetch", src, pe, amoFetch, z, z)
}

// AtomicSet stores v into the symmetric object *dst on pe atomically
// (shmem_atomic_set). It may return before the store is done; Quiet
// completes it.
func AtomicSet[T ExtAMO](dst *T, v T, pe int) {
	amoPosted(&defaultCtx, "AtomicSet", dst, pe, amoSet, v)
}

// CtxAtomicSet is AtomicSet on the context ctx (shmem_ctx_atomic_set).
func CtxAtomicSet[T ExtAMO](ctx *Ctx, dst *T, v T, pe int) {
	amoPosted(ctx, "CtxAtomicSet", dst, pe, amoSet, v)
}

// AtomicSwap stores v into *dst on pe and returns the old value
// (shmem_atomic_swap).
func AtomicSwap[T ExtAMO](dst *T, v T, pe int) T {
	return amoFetching(&defaultCtx, "AtomicSwap", dst, pe, amoSwap, v, v)
}

// CtxAtomicSwap is AtomicSwap on the context ctx (shmem_ctx_atomic_swap).
func CtxAtomicSwap[T ExtAMO](ctx *Ctx, dst *T, v T, pe int) T {
	return amoFetching(ctx, "CtxAtomicSwap", dst, pe, amoSwap, v, v)
}

// AtomicCompareSwap stores v into *dst on pe if it holds cond, and returns
// the old value either way (shmem_atomic_compare_swap).
func AtomicCompareSwap[T AMO](dst *T, cond, v T, pe int) T {
	return amoFetching(&defaultCtx, "AtomicCompareSwap", dst, pe, amoCSwap, v, cond)
}

// CtxAtomicCompareSwap is AtomicCompareSwap on the context ctx
// (shmem_ctx_atomic_compare_swap).
func CtxAtomicCompareSwap[T AMO](ctx *Ctx, dst *T, cond, v T, pe int) T {
	return amoFetching(ctx, "CtxAtomicCompareSwap", dst, pe, amoCSwap, v, cond)
}

// AtomicFetchInc adds one to *dst on pe and returns the old value
// (shmem_atomic_fetch_inc).
func AtomicFetchInc[T AMO](dst *T, pe int) T {
	return amoFetching(&defaultCtx, "AtomicFetchInc", dst, pe, amoAdd, 1, 0)
}

// CtxAtomicFetchInc is AtomicFetchInc on the context ctx
// (shmem_ctx_atomic_fetch_inc).
func CtxAtomicFetchInc[T AMO](ctx *Ctx, dst *T, pe int) T {
	return amoFetching(ctx, "CtxAtomicFetchInc", dst, pe, amoAdd, 1, 0)
}

// AtomicInc adds one to *dst on pe (shmem_atomic_inc). It may return before
// the update is done; Quiet completes it.
func AtomicInc[T AMO](dst *T, pe int) { amoPosted(&defaultCtx, "AtomicInc", dst, pe, amoAdd, 1) }

// CtxAtomicInc is AtomicInc on the context ctx (shmem_ctx_atomic_inc).
func CtxAtomicInc[T AMO](ctx *Ctx, dst *T, pe int) {
	amoPosted(ctx, "CtxAtomicInc", dst, pe, amoAdd, 1)
}

// AddAMO is the set of types of the add routines (AtomicAdd,
// AtomicFetchAdd, AtomicFetchAddNBI): the standard AMO types and, as an
// extension of goshmem, the floating-point types of the extended AMO set
// (float and double in C), whose adds are atomic with respect to the
// other atomics on the word: a compare-and-swap loop, on the CPU for a
// mapped heap and through the network otherwise (a round trip per try).
type AddAMO interface {
	AMO | ~float32 | ~float64
}

// addOp is the operation of an add of T: amoFAdd for the floating-point
// types.
func addOp[T AddAMO]() amoOp {
	var z T
	switch any(z).(type) {
	case int, int32, int64, uint, uint32, uint64, uintptr:
		return amoAdd
	case float32, float64:
		return amoFAdd
	}
	if k := reflect.TypeFor[T]().Kind(); k == reflect.Float32 || k == reflect.Float64 {
		return amoFAdd
	}
	return amoAdd
}

// AtomicFetchAdd adds v to *dst on pe and returns the old value
// (shmem_atomic_fetch_add). For float32 and float64 see AddAMO.
func AtomicFetchAdd[T AddAMO](dst *T, v T, pe int) T {
	return amoFetching(&defaultCtx, "AtomicFetchAdd", dst, pe, addOp[T](), v, 0)
}

// CtxAtomicFetchAdd is AtomicFetchAdd on the context ctx
// (shmem_ctx_atomic_fetch_add).
func CtxAtomicFetchAdd[T AddAMO](ctx *Ctx, dst *T, v T, pe int) T {
	return amoFetching(ctx, "CtxAtomicFetchAdd", dst, pe, addOp[T](), v, 0)
}

// AtomicAdd adds v to *dst on pe (shmem_atomic_add). It may return before
// the update is done; Quiet completes it. For float32 and float64 see
// AddAMO.
func AtomicAdd[T AddAMO](dst *T, v T, pe int) {
	amoPosted(&defaultCtx, "AtomicAdd", dst, pe, addOp[T](), v)
}

// CtxAtomicAdd is AtomicAdd on the context ctx (shmem_ctx_atomic_add).
func CtxAtomicAdd[T AddAMO](ctx *Ctx, dst *T, v T, pe int) {
	amoPosted(ctx, "CtxAtomicAdd", dst, pe, addOp[T](), v)
}

// AtomicFetchAnd stores *dst & v into *dst on pe and returns the old value
// (shmem_atomic_fetch_and).
func AtomicFetchAnd[T Bitwise](dst *T, v T, pe int) T {
	return amoFetching(&defaultCtx, "AtomicFetchAnd", dst, pe, amoAnd, v, 0)
}

// CtxAtomicFetchAnd is AtomicFetchAnd on the context ctx
// (shmem_ctx_atomic_fetch_and).
func CtxAtomicFetchAnd[T Bitwise](ctx *Ctx, dst *T, v T, pe int) T {
	return amoFetching(ctx, "CtxAtomicFetchAnd", dst, pe, amoAnd, v, 0)
}

// AtomicAnd stores *dst & v into *dst on pe (shmem_atomic_and). It may
// return before the update is done; Quiet completes it.
func AtomicAnd[T Bitwise](dst *T, v T, pe int) {
	amoPosted(&defaultCtx, "AtomicAnd", dst, pe, amoAnd, v)
}

// CtxAtomicAnd is AtomicAnd on the context ctx (shmem_ctx_atomic_and).
func CtxAtomicAnd[T Bitwise](ctx *Ctx, dst *T, v T, pe int) {
	amoPosted(ctx, "CtxAtomicAnd", dst, pe, amoAnd, v)
}

// AtomicFetchOr stores *dst | v into *dst on pe and returns the old value
// (shmem_atomic_fetch_or).
func AtomicFetchOr[T Bitwise](dst *T, v T, pe int) T {
	return amoFetching(&defaultCtx, "AtomicFetchOr", dst, pe, amoOr, v, 0)
}

// CtxAtomicFetchOr is AtomicFetchOr on the context ctx
// (shmem_ctx_atomic_fetch_or).
func CtxAtomicFetchOr[T Bitwise](ctx *Ctx, dst *T, v T, pe int) T {
	return amoFetching(ctx, "CtxAtomicFetchOr", dst, pe, amoOr, v, 0)
}

// AtomicOr stores *dst | v into *dst on pe (shmem_atomic_or). It may return
// before the update is done; Quiet completes it.
func AtomicOr[T Bitwise](dst *T, v T, pe int) { amoPosted(&defaultCtx, "AtomicOr", dst, pe, amoOr, v) }

// CtxAtomicOr is AtomicOr on the context ctx (shmem_ctx_atomic_or).
func CtxAtomicOr[T Bitwise](ctx *Ctx, dst *T, v T, pe int) {
	amoPosted(ctx, "CtxAtomicOr", dst, pe, amoOr, v)
}

// AtomicFetchXor stores *dst ^ v into *dst on pe and returns the old value
// (shmem_atomic_fetch_xor).
func AtomicFetchXor[T Bitwise](dst *T, v T, pe int) T {
	return amoFetching(&defaultCtx, "AtomicFetchXor", dst, pe, amoXor, v, 0)
}

// CtxAtomicFetchXor is AtomicFetchXor on the context ctx
// (shmem_ctx_atomic_fetch_xor).
func CtxAtomicFetchXor[T Bitwise](ctx *Ctx, dst *T, v T, pe int) T {
	return amoFetching(ctx, "CtxAtomicFetchXor", dst, pe, amoXor, v, 0)
}

// AtomicXor stores *dst ^ v into *dst on pe (shmem_atomic_xor). It may
// return before the update is done; Quiet completes it.
func AtomicXor[T Bitwise](dst *T, v T, pe int) {
	amoPosted(&defaultCtx, "AtomicXor", dst, pe, amoXor, v)
}

// CtxAtomicXor is AtomicXor on the context ctx (shmem_ctx_atomic_xor).
func CtxAtomicXor[T Bitwise](ctx *Ctx, dst *T, v T, pe int) {
	amoPosted(ctx, "CtxAtomicXor", dst, pe, amoXor, v)
}

// The non-blocking fetching atomics return at once; the old value is in
// *fetch after the next Quiet of their context (or a barrier for the
// default context). fetch must not be nil, and must not be read or written
// before then.

// AtomicFetchNBI reads *src on pe atomically into *fetch
// (shmem_atomic_fetch_nbi).
func AtomicFetchNBI[T ExtAMO](fetch, src *T, pe int) {
	var z T
	amoNonBlocking(&defaultCtx, "AtomicFetchNBI", fetch, src, pe, amoFetch, z, z)
}

// CtxAtomicFetchNBI is AtomicFetchNBI on the context ctx
// (shmem_ctx_atomic_fetch_nbi).
func CtxAtomicFetchNBI[T ExtAMO](ctx *Ctx, fetch, src *T, pe int) {
	var z T
	amoNonBlocking(ctx, "CtxAtomicFetchNBI", fetch, src, pe, amoFetch, z, z)
}

// AtomicSwapNBI stores v into *dst on pe, with the old value going to
// *fetch (shmem_atomic_swap_nbi).
func AtomicSwapNBI[T ExtAMO](fetch, dst *T, v T, pe int) {
	amoNonBlocking(&defaultCtx, "AtomicSwapNBI", fetch, dst, pe, amoSwap, v, v)
}

// CtxAtomicSwapNBI is AtomicSwapNBI on the context ctx
// (shmem_ctx_atomic_swap_nbi).
func CtxAtomicSwapNBI[T ExtAMO](ctx *Ctx, fetch, dst *T, v T, pe int) {
	amoNonBlocking(ctx, "CtxAtomicSwapNBI", fetch, dst, pe, amoSwap, v, v)
}

// AtomicCompareSwapNBI stores v into *dst on pe if it holds cond, with the
// old value going to *fetch either way (shmem_atomic_compare_swap_nbi).
func AtomicCompareSwapNBI[T AMO](fetch, dst *T, cond, v T, pe int) {
	amoNonBlocking(&defaultCtx, "AtomicCompareSwapNBI", fetch, dst, pe, amoCSwap, v, cond)
}

// CtxAtomicCompareSwapNBI is AtomicCompareSwapNBI on the context ctx
// (shmem_ctx_atomic_compare_swap_nbi).
func CtxAtomicCompareSwapNBI[T AMO](ctx *Ctx, fetch, dst *T, cond, v T, pe int) {
	amoNonBlocking(ctx, "CtxAtomicCompareSwapNBI", fetch, dst, pe, amoCSwap, v, cond)
}

// AtomicFetchIncNBI adds one to *dst on pe, with the old value going to
// *fetch (shmem_atomic_fetch_inc_nbi).
func AtomicFetchIncNBI[T AMO](fetch, dst *T, pe int) {
	amoNonBlocking(&defaultCtx, "AtomicFetchIncNBI", fetch, dst, pe, amoAdd, 1, 0)
}

// CtxAtomicFetchIncNBI is AtomicFetchIncNBI on the context ctx
// (shmem_ctx_atomic_fetch_inc_nbi).
func CtxAtomicFetchIncNBI[T AMO](ctx *Ctx, fetch, dst *T, pe int) {
	amoNonBlocking(ctx, "CtxAtomicFetchIncNBI", fetch, dst, pe, amoAdd, 1, 0)
}

// AtomicFetchAddNBI adds v to *dst on pe, with the old value going to
// *fetch (shmem_atomic_fetch_add_nbi). For float32 and float64 see AddAMO.
func AtomicFetchAddNBI[T AddAMO](fetch, dst *T, v T, pe int) {
	amoNonBlocking(&defaultCtx, "AtomicFetchAddNBI", fetch, dst, pe, addOp[T](), v, 0)
}

// CtxAtomicFetchAddNBI is AtomicFetchAddNBI on the context ctx
// (shmem_ctx_atomic_fetch_add_nbi).
func CtxAtomicFetchAddNBI[T AddAMO](ctx *Ctx, fetch, dst *T, v T, pe int) {
	amoNonBlocking(ctx, "CtxAtomicFetchAddNBI", fetch, dst, pe, addOp[T](), v, 0)
}

// AtomicFetchAndNBI stores *dst & v into *dst on pe, with the old value
// going to *fetch (shmem_atomic_fetch_and_nbi).
func AtomicFetchAndNBI[T Bitwise](fetch, dst *T, v T, pe int) {
	amoNonBlocking(&defaultCtx, "AtomicFetchAndNBI", fetch, dst, pe, amoAnd, v, 0)
}

// CtxAtomicFetchAndNBI is AtomicFetchAndNBI on the context ctx
// (shmem_ctx_atomic_fetch_and_nbi).
func CtxAtomicFetchAndNBI[T Bitwise](ctx *Ctx, fetch, dst *T, v T, pe int) {
	amoNonBlocking(ctx, "CtxAtomicFetchAndNBI", fetch, dst, pe, amoAnd, v, 0)
}

// AtomicFetchOrNBI stores *dst | v into *dst on pe, with the old value
// going to *fetch (shmem_atomic_fetch_or_nbi).
func AtomicFetchOrNBI[T Bitwise](fetch, dst *T, v T, pe int) {
	amoNonBlocking(&defaultCtx, "AtomicFetchOrNBI", fetch, dst, pe, amoOr, v, 0)
}

// CtxAtomicFetchOrNBI is AtomicFetchOrNBI on the context ctx
// (shmem_ctx_atomic_fetch_or_nbi).
func CtxAtomicFetchOrNBI[T Bitwise](ctx *Ctx, fetch, dst *T, v T, pe int) {
	amoNonBlocking(ctx, "CtxAtomicFetchOrNBI", fetch, dst, pe, amoOr, v, 0)
}

// AtomicFetchXorNBI stores *dst ^ v into *dst on pe, with the old value
// going to *fetch (shmem_atomic_fetch_xor_nbi).
func AtomicFetchXorNBI[T Bitwise](fetch, dst *T, v T, pe int) {
	amoNonBlocking(&defaultCtx, "AtomicFetchXorNBI", fetch, dst, pe, amoXor, v, 0)
}

// CtxAtomicFetchXorNBI is AtomicFetchXorNBI on the context ctx
// (shmem_ctx_atomic_fetch_xor_nbi).
func CtxAtomicFetchXorNBI[T Bitwise](ctx *Ctx, fetch, dst *T, v T, pe int) {
	amoNonBlocking(ctx, "CtxAtomicFetchXorNBI", fetch, dst, pe, amoXor, v, 0)
}
