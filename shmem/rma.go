package shmem

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"github.com/goshmem/goshmem/ucp"
	"github.com/goshmem/goshmem/ucs"
)

// offsetOf returns the symmetric offset of the n bytes at p (region.go)
// and whether they are in the heap, panicking when they are neither all
// inside the heap nor all inside one registered region.
func offsetOf(routine, arg string, p unsafe.Pointer, n int) (off uintptr, heap bool) {
	off = uintptr(p) - st.heapBase
	if off >= st.heapSize || uintptr(n) > st.heapSize-off {
		return regionOffset(routine, arg, p, n), false
	}
	if st.env.debug {
		debugCheckRange(routine, arg, p, off, n)
	}
	return off, true
}

// heapOffset is offsetOf's fast path, which the hot routines inline: the
// heap offset of the n bytes at p, and whether they lie in the heap with
// SHMEM_DEBUG off. When they do not, the routines call offsetOf.
func heapOffset(p unsafe.Pointer, n int) (uintptr, bool) {
	off := uintptr(p) - st.heapBase
	return off, off < st.heapSize && uintptr(n) <= st.heapSize-off && !st.env.debug
}

//go:noinline
func badAddr(routine, arg string, p unsafe.Pointer, n int) {
	if st.phase != initialized {
		panicUninit(routine)
	}
	regions := ""
	for _, r := range st.regions {
		regions += fmt.Sprintf(" or the symmetric region %#x..%#x", r.lo, r.lo+r.size)
	}
	panic(fmt.Sprintf("shmem.%s: %s (%d bytes at %p) is not inside the symmetric heap %#x..%#x%s",
		routine, arg, n, p, st.heapBase, st.heapBase+st.heapSize, regions))
}

//go:noinline
func badLen(routine string, dstLen, srcLen int) {
	panic(fmt.Sprintf("shmem.%s: the symmetric object has %d elements, fewer than the %d to transfer", routine, dstLen, srcLen))
}

// fatal ends the PE after a communication failure, which OpenSHMEM routines
// cannot report: waiting on would hang the job. It first tells the launcher
// that this PE ends because it lost pe, so that the job is named after pe
// when pe failed first.
//
//go:noinline
func fatal(routine string, pe int, err error) {
	lg().Logf(ucs.LogFatal, "goshmem: PE %d: shmem.%s to PE %d failed: %v", st.me, routine, pe, err)
	if m := st.member; m != nil && pe != st.me && peerGone(err) {
		m.ReportLost(pe, err.Error()) // the exit below is the report that matters
	}
	os.Exit(1)
}

// peerGone says whether err means that the peer is gone, not that this PE
// cannot do the operation.
func peerGone(err error) bool {
	var s ucs.Status
	if !errors.As(err, &s) {
		return false
	}
	switch {
	case s == ucs.ErrConnectionReset, s == ucs.ErrNotConnected, s == ucs.ErrUnreachable, s == ucs.ErrTimedOut:
		return true
	}
	return s <= ucs.ErrFirstLinkFailure && s >= ucs.ErrLastEndpointFailure
}

func bytesOf[T any](s []T) []byte {
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z)))
}

// The RMA routines of every context are implemented once, on a *Ctx; the
// routines without a context pass the default context. A routine's name is
// passed along for the messages of programming errors.

// Put copies src into the symmetric array dst on pe (shmem_put). It returns
// when src may be reused; the data is visible at pe after Quiet or a
// barrier. dst must have at least len(src) elements.
func Put[T Plain](dst, src []T, pe int) { put(&defaultCtx, "Put", dst, src, pe, false) }

// CtxPut is Put on the context ctx (shmem_ctx_put).
func CtxPut[T Plain](ctx *Ctx, dst, src []T, pe int) { put(ctx, "CtxPut", dst, src, pe, false) }

// PutNBI starts copying src into the symmetric array dst on pe
// (shmem_put_nbi). It may return before src has been read: src may be
// reused, and the data is visible at pe, after Quiet (or a barrier). dst
// must have at least len(src) elements.
func PutNBI[T Plain](dst, src []T, pe int) { put(&defaultCtx, "PutNBI", dst, src, pe, true) }

// CtxPutNBI is PutNBI on the context ctx (shmem_ctx_put_nbi); ctx.Quiet
// completes it.
func CtxPutNBI[T Plain](ctx *Ctx, dst, src []T, pe int) { put(ctx, "CtxPutNBI", dst, src, pe, true) }

// PutMem copies the bytes of src into the symmetric bytes dst on pe
// (shmem_putmem).
func PutMem(dst, src []byte, pe int) { putMem(&defaultCtx, "PutMem", dst, src, pe, false) }

// CtxPutMem is PutMem on the context ctx (shmem_ctx_putmem).
func CtxPutMem(ctx *Ctx, dst, src []byte, pe int) { putMem(ctx, "CtxPutMem", dst, src, pe, false) }

// PutMemNBI is PutNBI of bytes (shmem_putmem_nbi).
func PutMemNBI(dst, src []byte, pe int) { putMem(&defaultCtx, "PutMemNBI", dst, src, pe, true) }

// CtxPutMemNBI is PutMemNBI on the context ctx (shmem_ctx_putmem_nbi).
func CtxPutMemNBI(ctx *Ctx, dst, src []byte, pe int) { putMem(ctx, "CtxPutMemNBI", dst, src, pe, true) }

// Get copies len(dst) elements of the symmetric array src on pe into dst
// (shmem_get). It returns when dst holds the data. src must have at least
// len(dst) elements.
func Get[T Plain](dst, src []T, pe int) { get(&defaultCtx, "Get", dst, src, pe, false) }

// CtxGet is Get on the context ctx (shmem_ctx_get).
func CtxGet[T Plain](ctx *Ctx, dst, src []T, pe int) { get(ctx, "CtxGet", dst, src, pe, false) }

// GetNBI starts copying len(dst) elements of the symmetric array src on pe
// into dst (shmem_get_nbi); dst holds the data after Quiet. src must have
// at least len(dst) elements.
func GetNBI[T Plain](dst, src []T, pe int) { get(&defaultCtx, "GetNBI", dst, src, pe, true) }

// CtxGetNBI is GetNBI on the context ctx (shmem_ctx_get_nbi); ctx.Quiet
// completes it.
func CtxGetNBI[T Plain](ctx *Ctx, dst, src []T, pe int) { get(ctx, "CtxGetNBI", dst, src, pe, true) }

// GetMem copies the symmetric bytes src on pe into dst (shmem_getmem).
func GetMem(dst, src []byte, pe int) { get(&defaultCtx, "GetMem", dst, src, pe, false) }

// CtxGetMem is GetMem on the context ctx (shmem_ctx_getmem).
func CtxGetMem(ctx *Ctx, dst, src []byte, pe int) { get(ctx, "CtxGetMem", dst, src, pe, false) }

// GetMemNBI is GetNBI of bytes (shmem_getmem_nbi).
func GetMemNBI(dst, src []byte, pe int) { get(&defaultCtx, "GetMemNBI", dst, src, pe, true) }

// CtxGetMemNBI is GetMemNBI on the context ctx (shmem_ctx_getmem_nbi).
func CtxGetMemNBI(ctx *Ctx, dst, src []byte, pe int) { get(ctx, "CtxGetMemNBI", dst, src, pe, true) }

// P stores v into the symmetric object *dst on pe (shmem_p).
func P[T Plain](dst *T, v T, pe int) { putValue(&defaultCtx, "P", dst, v, pe) }

// CtxP is P on the context ctx (shmem_ctx_p).
func CtxP[T Plain](ctx *Ctx, dst *T, v T, pe int) { putValue(ctx, "CtxP", dst, v, pe) }

// G loads the symmetric object *src on pe (shmem_g).
func G[T Plain](src *T, pe int) T { return getValue(&defaultCtx, "G", src, pe) }

// CtxG is G on the context ctx (shmem_ctx_g).
func CtxG[T Plain](ctx *Ctx, src *T, pe int) T { return getValue(ctx, "CtxG", src, pe) }

// IPut copies nelems elements of src, taken every srcStride elements from
// src[0], into the symmetric array dst on pe, every dstStride elements from
// dst[0] (shmem_iput): dst[i*dstStride] = src[i*srcStride] for i in
// 0..nelems-1. Strides are counted in elements and must be at least 1; the
// slices must hold every element the strides reach. It returns when src may
// be reused; the data is visible at pe after Quiet or a barrier.
func IPut[T RMA](dst, src []T, dstStride, srcStride, nelems, pe int) {
	ibput(&defaultCtx, "IPut", countElems, dst, src, dstStride, srcStride, 1, nelems, pe)
}

// CtxIPut is IPut on the context ctx (shmem_ctx_iput).
func CtxIPut[T RMA](ctx *Ctx, dst, src []T, dstStride, srcStride, nelems, pe int) {
	ibput(ctx, "CtxIPut", countElems, dst, src, dstStride, srcStride, 1, nelems, pe)
}

// IBPut copies nblocks blocks of bsize elements of src, one every
// srcStride elements from src[0], into the symmetric array dst on pe, one
// every dstStride elements from dst[0] (shmem_ibput, OpenSHMEM 1.6): block
// i is src[i*srcStride : i*srcStride+bsize], and it lands at
// dst[i*dstStride]. Strides are counted in elements and must be at least
// bsize (bsize itself means contiguous blocks); the slices must hold every
// element the blocks reach. IPut is IBPut with blocks of one element. It
// returns when src may be reused; the data is visible at pe after Quiet or
// a barrier.
func IBPut[T RMA](dst, src []T, dstStride, srcStride, bsize, nblocks, pe int) {
	ibput(&defaultCtx, "IBPut", countBlocks, dst, src, dstStride, srcStride, bsize, nblocks, pe)
}

// CtxIBPut is IBPut on the context ctx (shmem_ctx_ibput).
func CtxIBPut[T RMA](ctx *Ctx, dst, src []T, dstStride, srcStride, bsize, nblocks, pe int) {
	ibput(ctx, "CtxIBPut", countBlocks, dst, src, dstStride, srcStride, bsize, nblocks, pe)
}

// IGet copies nelems elements of the symmetric array src on pe, taken every
// srcStride elements from src[0], into dst, every dstStride elements from
// dst[0] (shmem_iget): dst[i*dstStride] = src[i*srcStride] on pe. Strides
// are counted in elements and must be at least 1; the slices must hold
// every element the strides reach. It returns when dst holds the data.
func IGet[T RMA](dst, src []T, dstStride, srcStride, nelems, pe int) {
	ibget(&defaultCtx, "IGet", countElems, dst, src, dstStride, srcStride, 1, nelems, pe)
}

// CtxIGet is IGet on the context ctx (shmem_ctx_iget).
func CtxIGet[T RMA](ctx *Ctx, dst, src []T, dstStride, srcStride, nelems, pe int) {
	ibget(ctx, "CtxIGet", countElems, dst, src, dstStride, srcStride, 1, nelems, pe)
}

// IBGet copies nblocks blocks of bsize elements of the symmetric array src
// on pe, one every srcStride elements from src[0], into dst, one every
// dstStride elements from dst[0] (shmem_ibget, OpenSHMEM 1.6): block i of
// src on pe, src[i*srcStride : i*srcStride+bsize], lands at
// dst[i*dstStride]. Strides are counted in elements and must be at least
// bsize; the slices must hold every element the blocks reach. IGet is
// IBGet with blocks of one element. It returns when dst holds the data.
func IBGet[T RMA](dst, src []T, dstStride, srcStride, bsize, nblocks, pe int) {
	ibget(&defaultCtx, "IBGet", countBlocks, dst, src, dstStride, srcStride, bsize, nblocks, pe)
}

// CtxIBGet is IBGet on the context ctx (shmem_ctx_ibget).
func CtxIBGet[T RMA](ctx *Ctx, dst, src []T, dstStride, srcStride, bsize, nblocks, pe int) {
	ibget(ctx, "CtxIBGet", countBlocks, dst, src, dstStride, srcStride, bsize, nblocks, pe)
}

func put[T any](c *Ctx, routine string, dst, src []T, pe int, nbi bool) {
	checkPlain[T](routine)
	putBytes(c, routine, unsafe.Pointer(unsafe.SliceData(dst)), len(dst), bytesOf(src), len(src), pe, nbi)
}

// putMem is put of bytes, whose type needs no check (the generic check
// cost put8 15 of its 123 instructions).
func putMem(c *Ctx, routine string, dst, src []byte, pe int, nbi bool) {
	putBytes(c, routine, unsafe.Pointer(unsafe.SliceData(dst)), len(dst), src, len(src), pe, nbi)
}

// putBytes is put of n elements, whose bytes are src, into the symmetric
// array of dstLen elements at dst.
func putBytes(c *Ctx, routine string, dst unsafe.Pointer, dstLen int, src []byte, n, pe int, nbi bool) {
	q := c.peer(routine, pe)
	if dstLen < n {
		badLen(routine, dstLen, n)
	}
	nb := len(src)
	if nb == 0 {
		return
	}
	off, ok := heapOffset(dst, nb)
	if !ok {
		if off, ok = offsetOf(routine, "dst", dst, nb); !ok {
			profCtx(c, routine, pe, nb)
			c.putSlow(routine, pe, off, src, nbi)
			return
		}
	}
	profCtx(c, routine, pe, nb)
	if base := q.heap(); base != nil {
		ucs.Copy(unsafe.Slice((*byte)(unsafe.Add(base, off)), nb), src)
		return
	}
	c.putSlow(routine, pe, off, src, nbi)
}

// copyOut copies src to the heap offset off of a peer mapped at base.
func copyOut[T any](base unsafe.Pointer, off uintptr, src []T) {
	b := bytesOf(src)
	ucs.Copy(unsafe.Slice((*byte)(unsafe.Add(base, off)), len(b)), b)
}

func get[T any](c *Ctx, routine string, dst, src []T, pe int, nbi bool) {
	checkPlain[T](routine)
	q := c.peer(routine, pe)
	n := len(dst)
	if len(src) < n {
		badLen(routine, len(src), n)
	}
	if n == 0 {
		return
	}
	var z T
	nb := n * int(unsafe.Sizeof(z))
	off, ok := heapOffset(unsafe.Pointer(unsafe.SliceData(src)), nb)
	if !ok {
		if off, ok = offsetOf(routine, "src", unsafe.Pointer(unsafe.SliceData(src)), nb); !ok {
			profCtx(c, routine, pe, nb)
			c.getSlow(routine, pe, off, bytesOf(dst), nbi)
			return
		}
	}
	profCtx(c, routine, pe, nb)
	if base := q.heap(); base != nil {
		ucs.Copy(bytesOf(dst), unsafe.Slice((*byte)(unsafe.Add(base, off)), nb))
		return
	}
	c.getSlow(routine, pe, off, bytesOf(dst), nbi)
}

func putValue[T any](c *Ctx, routine string, dst *T, v T, pe int) {
	checkPlain[T](routine)
	q := c.peer(routine, pe)
	off, ok := heapOffset(unsafe.Pointer(dst), int(unsafe.Sizeof(v)))
	if !ok {
		if off, ok = offsetOf(routine, "dst", unsafe.Pointer(dst), int(unsafe.Sizeof(v))); !ok {
			profCtx(c, routine, pe, int(unsafe.Sizeof(v)))
			pSlow(c, routine, pe, off, v)
			return
		}
	}
	profCtx(c, routine, pe, int(unsafe.Sizeof(v)))
	if base := q.heap(); base != nil {
		*(*T)(unsafe.Add(base, off)) = v
		return
	}
	pSlow(c, routine, pe, off, v)
}

func getValue[T any](c *Ctx, routine string, src *T, pe int) T {
	checkPlain[T](routine)
	q := c.peer(routine, pe)
	var z T
	off, ok := heapOffset(unsafe.Pointer(src), int(unsafe.Sizeof(z)))
	if !ok {
		if off, ok = offsetOf(routine, "src", unsafe.Pointer(src), int(unsafe.Sizeof(z))); !ok {
			profCtx(c, routine, pe, int(unsafe.Sizeof(z)))
			return gSlow[T](c, routine, pe, off)
		}
	}
	profCtx(c, routine, pe, int(unsafe.Sizeof(z)))
	if base := q.heap(); base != nil {
		return *(*T)(unsafe.Add(base, off))
	}
	return gSlow[T](c, routine, pe, off)
}

// stridedCount says what the count of a strided routine counts.
type stridedCount uint8

const (
	countElems  stridedCount = iota // IPut, IGet: nelems elements (blocks of one)
	countBlocks                     // IBPut, IBGet: nblocks blocks of bsize elements
)

// blockSpan returns how many elements of a slice of n elements nblocks
// blocks of bsize elements at stride reach, panicking when the stride is
// less than bsize or the slice is too short; count says how to name the
// blocks.
func blockSpan(routine, arg string, count stridedCount, n, nblocks, stride, bsize int) int {
	if stride < bsize {
		panic(fmt.Sprintf("shmem.%s: %s stride %d (valid: %d or more)", routine, arg, stride, bsize))
	}
	if n < bsize || nblocks-1 > (n-bsize)/stride {
		what := fmt.Sprintf("%d blocks of %d elements", nblocks, bsize)
		if count == countElems {
			what = fmt.Sprintf("%d elements", nblocks)
		}
		panic(fmt.Sprintf("shmem.%s: %s has %d elements, fewer than %s at stride %d reach", routine, arg, n, what, stride))
	}
	return (nblocks-1)*stride + bsize
}

// checkCount panics when the count arg is negative.
func checkCount(routine, arg string, n int) {
	if n < 0 {
		panic(fmt.Sprintf("shmem.%s: %s %d (valid: 0 or more)", routine, arg, n))
	}
}

// checkBlocks checks the counts of the strided routines.
func checkBlocks(routine string, count stridedCount, bsize, nblocks int) {
	if count == countElems {
		checkCount(routine, "nelems", nblocks)
		return
	}
	checkCount(routine, "nblocks", nblocks)
	checkCount(routine, "bsize", bsize)
}

// ibput copies nblocks blocks of bsize elements, every srcStride elements
// of src, to every dstStride elements of the symmetric dst on pe: the
// routines of IPut (bsize 1) and IBPut.
func ibput[T RMA](c *Ctx, routine string, count stridedCount, dst, src []T, dstStride, srcStride, bsize, nblocks, pe int) {
	q := c.peer(routine, pe)
	checkBlocks(routine, count, bsize, nblocks)
	if nblocks == 0 || bsize == 0 {
		return
	}
	dspan := blockSpan(routine, "dst", count, len(dst), nblocks, dstStride, bsize)
	blockSpan(routine, "src", count, len(src), nblocks, srcStride, bsize)
	var z T
	size := unsafe.Sizeof(z)
	off, heap := offsetOf(routine, "dst", unsafe.Pointer(unsafe.SliceData(dst)), dspan*int(size))
	profCtx(c, routine, pe, nblocks*bsize*int(size))
	if base := q.heap(); base != nil && heap {
		d := unsafe.Slice((*T)(unsafe.Add(base, off)), dspan)
		if bsize == 1 {
			for i := range nblocks {
				d[i*dstStride] = src[i*srcStride]
			}
			return
		}
		for i := range nblocks {
			copyOut(base, off+uintptr(i*dstStride)*size, src[i*srcStride:i*srcStride+bsize])
		}
		return
	}
	if dstStride == bsize && srcStride == bsize {
		c.putSlow(routine, pe, off, bytesOf(src[:nblocks*bsize]), false)
		return
	}
	// Every block's put in flight at once, then the wait for all.
	if c.session.Load() != nil {
		c.flushBatch(routine, pe)
	}
	q = c.remote(routine, pe)
	raddr, rkey := q.at(routine, pe, off)
	reqs := make([]*ucp.Request, 0, nblocks)
	for i := range nblocks {
		b := bytesOf(src[i*srcStride : i*srcStride+bsize])
		req, err := q.ep.PutNBX(b, raddr+uint64(i*dstStride)*uint64(size), rkey, nil)
		if err != nil {
			fatal(routine, pe, err)
		}
		if req != nil {
			reqs = append(reqs, req)
		}
	}
	for _, r := range reqs {
		c.wait(routine, pe, r, nil)
	}
}

// ibget copies nblocks blocks of bsize elements, every srcStride elements
// of the symmetric src on pe, to every dstStride elements of dst: the
// routines of IGet (bsize 1) and IBGet.
func ibget[T RMA](c *Ctx, routine string, count stridedCount, dst, src []T, dstStride, srcStride, bsize, nblocks, pe int) {
	q := c.peer(routine, pe)
	checkBlocks(routine, count, bsize, nblocks)
	if nblocks == 0 || bsize == 0 {
		return
	}
	blockSpan(routine, "dst", count, len(dst), nblocks, dstStride, bsize)
	sspan := blockSpan(routine, "src", count, len(src), nblocks, srcStride, bsize)
	var z T
	size := unsafe.Sizeof(z)
	off, heap := offsetOf(routine, "src", unsafe.Pointer(unsafe.SliceData(src)), sspan*int(size))
	profCtx(c, routine, pe, nblocks*bsize*int(size))
	if base := q.heap(); base != nil && heap {
		s := unsafe.Slice((*T)(unsafe.Add(base, off)), sspan)
		for i := range nblocks {
			copy(dst[i*dstStride:i*dstStride+bsize], s[i*srcStride:i*srcStride+bsize])
		}
		return
	}
	if dstStride == bsize && srcStride == bsize {
		c.getSlow(routine, pe, off, bytesOf(dst[:nblocks*bsize]), false)
		return
	}
	// Every block's get in flight at once, then the wait for all.
	if c.session.Load() != nil {
		c.flushBatch(routine, pe)
	}
	q = c.remote(routine, pe)
	raddr, rkey := q.at(routine, pe, off)
	reqs := make([]*ucp.Request, 0, nblocks)
	for i := range nblocks {
		b := bytesOf(dst[i*dstStride : i*dstStride+bsize])
		req, err := q.ep.GetNBX(b, raddr+uint64(i*srcStride)*uint64(size), rkey, nil)
		if err != nil {
			fatal(routine, pe, err)
		}
		if req != nil {
			reqs = append(reqs, req)
		}
	}
	for _, r := range reqs {
		c.wait(routine, pe, r, nil)
	}
}

// The slow paths take their values by copy so that the fast paths above keep
// everything on the stack.

//go:noinline
func pSlow[T any](c *Ctx, routine string, pe int, off uintptr, v T) {
	n := unsafe.Sizeof(v)
	if n > wireBufLen {
		pSlowLarge(c, routine, pe, off, v)
		return
	}
	b := wireBufs.Get().(*wireBuf)
	copy(b.bytes(n), unsafe.Slice((*byte)(unsafe.Pointer(&v)), n))
	c.putSlow(routine, pe, off, b.bytes(n), false)
	wireBufs.Put(b)
}

//go:noinline
func gSlow[T any](c *Ctx, routine string, pe int, off uintptr) (v T) {
	n := unsafe.Sizeof(v)
	if n > wireBufLen {
		return gSlowLarge[T](c, routine, pe, off)
	}
	b := wireBufs.Get().(*wireBuf)
	c.getSlow(routine, pe, off, b.bytes(n), false)
	v = *(*T)(unsafe.Pointer(b))
	wireBufs.Put(b)
	return v
}

// pSlowLarge and gSlowLarge are pSlow and gSlow for values larger than a
// wireBuf, which they pass to ucp themselves (then on the heap).
func pSlowLarge[T any](c *Ctx, routine string, pe int, off uintptr, v T) {
	c.putSlow(routine, pe, off, unsafe.Slice((*byte)(unsafe.Pointer(&v)), unsafe.Sizeof(v)), false)
}

func gSlowLarge[T any](c *Ctx, routine string, pe int, off uintptr) (v T) {
	c.getSlow(routine, pe, off, unsafe.Slice((*byte)(unsafe.Pointer(&v)), unsafe.Sizeof(v)), false)
	return v
}

// wireBuf is a buffer that a routine going through the network lends
// (wireBufs) to ucp for the duration of one blocking operation: the value
// of a P or G, the header of a message, or the word a fetching atomic's
// old value comes into. The routine's own variable
// would escape to the heap, an allocation per call. Words, for the
// alignment of the values.
type wireBuf [wireBufLen / 8]uint64

// wireBufLen is the size of a wireBuf in bytes.
const wireBufLen = 64

var wireBufs = sync.Pool{New: func() any { return new(wireBuf) }}

// bytes returns the first n bytes of b (n <= wireBufLen).
func (b *wireBuf) bytes(n uintptr) []byte { return unsafe.Slice((*byte)(unsafe.Pointer(b)), n) }

// putSlow puts b at the symmetric offset off of pe through the context's
// endpoint: blocking, it waits
// for local completion; non-blocking, it leaves the completion to Quiet.
//
//go:noinline
func (c *Ctx) putSlow(routine string, pe int, off uintptr, b []byte, nbi bool) {
	if len(b) == 0 {
		return
	}
	if c.session.Load() != nil {
		if c.gather(routine, pe, off, b) {
			return
		}
		c.flushBatch(routine, pe)
	}
	c.sendPut(routine, pe, off, b, nbi)
}

// sendPut is putSlow without the batch of a session.
func (c *Ctx) sendPut(routine string, pe int, off uintptr, b []byte, nbi bool) {
	q := c.remote(routine, pe)
	raddr, rkey := q.at(routine, pe, off)
	if !nbi {
		req, err := q.ep.PutNBX(b, raddr, rkey, nil)
		c.wait(routine, pe, req, err)
		return
	}
	op := c.newAsync(routine, pe)
	op.started(q.ep.PutNBX(b, raddr, rkey, op.param(false)))
}

// getSlow gets b through the context's endpoint to pe: blocking, it waits
// for the data; non-blocking, Quiet does.
//
//go:noinline
func (c *Ctx) getSlow(routine string, pe int, off uintptr, b []byte, nbi bool) {
	if len(b) == 0 {
		return
	}
	if c.session.Load() != nil {
		c.flushBatch(routine, pe)
	}
	q := c.remote(routine, pe)
	raddr, rkey := q.at(routine, pe, off)
	if !nbi {
		req, err := q.ep.GetNBX(b, raddr, rkey, nil)
		c.wait(routine, pe, req, err)
		return
	}
	op := c.newAsync(routine, pe)
	op.started(q.ep.GetNBX(b, raddr, rkey, op.param(false)))
}
