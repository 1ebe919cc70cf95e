package shmem

import (
	"fmt"
	"os"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
)

// peerAt returns the peer record of pe, panicking with a clear message for a
// PE outside the job or use before Init.
func peerAt(routine string, pe int) *peer {
	if uint(pe) >= uint(len(st.peers)) {
		badPE(routine, pe)
	}
	return &st.peers[pe]
}

//go:noinline
func badPE(routine string, pe int) {
	if !st.inited {
		panic("shmem." + routine + " called before shmem.Init")
	}
	panic(fmt.Sprintf("shmem.%s: PE %d is not a PE of the job (valid: 0..%d)", routine, pe, st.npes-1))
}

// offsetOf returns the heap offset of the n bytes at p, panicking when they
// are not all inside the symmetric heap.
func offsetOf(routine, arg string, p unsafe.Pointer, n int) uintptr {
	off := uintptr(p) - st.heapBase
	if off >= st.heapSize || uintptr(n) > st.heapSize-off {
		badAddr(routine, arg, p, n)
	}
	return off
}

//go:noinline
func badAddr(routine, arg string, p unsafe.Pointer, n int) {
	if !st.inited {
		panic("shmem." + routine + " called before shmem.Init")
	}
	panic(fmt.Sprintf("shmem.%s: %s (%d bytes at %p) is not inside the symmetric heap %#x..%#x",
		routine, arg, n, p, st.heapBase, st.heapBase+st.heapSize))
}

//go:noinline
func badLen(routine string, dstLen, srcLen int) {
	panic(fmt.Sprintf("shmem.%s: the symmetric object has %d elements, fewer than the %d to transfer", routine, dstLen, srcLen))
}

// fatal ends the PE after a communication failure, which OpenSHMEM routines
// cannot report: waiting on would hang the job.
//
//go:noinline
func fatal(routine string, pe int, err error) {
	fmt.Fprintf(os.Stderr, "goshmem: PE %d: shmem.%s to PE %d failed: %v\n", st.me, routine, pe, err)
	os.Exit(1)
}

// largeCopy is the size from which direct copies go through ucs.Memcpy,
// which keeps large copies into shared memory on the runtime's cached path.
const largeCopy = 1 << 20

func bytesOf[T any](s []T) []byte {
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z)))
}

// Put copies src into the symmetric array dst on pe (shmem_put). It returns
// when src may be reused; the data is visible at pe after Quiet or a
// barrier. dst must have at least len(src) elements.
func Put[T RMA](dst, src []T, pe int) {
	q := peerAt("Put", pe)
	n := len(src)
	if len(dst) < n {
		badLen("Put", len(dst), n)
	}
	if n == 0 {
		return
	}
	var z T
	off := offsetOf("Put", "dst", unsafe.Pointer(unsafe.SliceData(dst)), n*int(unsafe.Sizeof(z)))
	if q.base != nil {
		if nb := n * int(unsafe.Sizeof(z)); nb >= largeCopy {
			ucs.Memcpy(unsafe.Slice((*byte)(unsafe.Add(q.base, off)), nb), bytesOf(src))
			return
		}
		copy(unsafe.Slice((*T)(unsafe.Add(q.base, off)), n), src)
		return
	}
	putSlow("Put", pe, off, bytesOf(src))
}

// Get copies len(dst) elements of the symmetric array src on pe into dst
// (shmem_get). It returns when dst holds the data. src must have at least
// len(dst) elements.
func Get[T RMA](dst, src []T, pe int) {
	q := peerAt("Get", pe)
	n := len(dst)
	if len(src) < n {
		badLen("Get", len(src), n)
	}
	if n == 0 {
		return
	}
	var z T
	off := offsetOf("Get", "src", unsafe.Pointer(unsafe.SliceData(src)), n*int(unsafe.Sizeof(z)))
	if q.base != nil {
		if nb := n * int(unsafe.Sizeof(z)); nb >= largeCopy {
			ucs.Memcpy(bytesOf(dst), unsafe.Slice((*byte)(unsafe.Add(q.base, off)), nb))
			return
		}
		copy(dst, unsafe.Slice((*T)(unsafe.Add(q.base, off)), n))
		return
	}
	getSlow("Get", pe, off, bytesOf(dst))
}

// PutMem copies the bytes of src into the symmetric bytes dst on pe
// (shmem_putmem).
func PutMem(dst, src []byte, pe int) { Put(dst, src, pe) }

// GetMem copies the symmetric bytes src on pe into dst (shmem_getmem).
func GetMem(dst, src []byte, pe int) { Get(dst, src, pe) }

// P stores v into the symmetric object *dst on pe (shmem_p).
func P[T RMA](dst *T, v T, pe int) {
	q := peerAt("P", pe)
	off := offsetOf("P", "dst", unsafe.Pointer(dst), int(unsafe.Sizeof(v)))
	if q.base != nil {
		*(*T)(unsafe.Add(q.base, off)) = v
		return
	}
	pSlow(pe, off, v)
}

// G loads the symmetric object *src on pe (shmem_g).
func G[T RMA](src *T, pe int) T {
	q := peerAt("G", pe)
	var z T
	off := offsetOf("G", "src", unsafe.Pointer(src), int(unsafe.Sizeof(z)))
	if q.base != nil {
		return *(*T)(unsafe.Add(q.base, off))
	}
	return gSlow[T](pe, off)
}

// The slow paths take their values by copy so that the fast paths above keep
// everything on the stack.

//go:noinline
func pSlow[T RMA](pe int, off uintptr, v T) {
	putSlow("P", pe, off, unsafe.Slice((*byte)(unsafe.Pointer(&v)), unsafe.Sizeof(v)))
}

//go:noinline
func gSlow[T RMA](pe int, off uintptr) (v T) {
	getSlow("G", pe, off, unsafe.Slice((*byte)(unsafe.Pointer(&v)), unsafe.Sizeof(v)))
	return v
}

// putSlow puts b through the ucp endpoint to pe and waits for local
// completion.
//
//go:noinline
func putSlow(routine string, pe int, off uintptr, b []byte) {
	if len(b) == 0 {
		return
	}
	q := &st.peers[pe]
	req, err := q.ep.PutNBX(b, q.raddr+uint64(off), q.rkey, nil)
	if err == nil && req != nil {
		err = req.Wait()
		req.Free()
	}
	if err != nil {
		fatal(routine, pe, err)
	}
}

// getSlow gets b through the ucp endpoint to pe and waits for the data.
//
//go:noinline
func getSlow(routine string, pe int, off uintptr, b []byte) {
	if len(b) == 0 {
		return
	}
	q := &st.peers[pe]
	req, err := q.ep.GetNBX(b, q.raddr+uint64(off), q.rkey, nil)
	if err == nil && req != nil {
		err = req.Wait()
		req.Free()
	}
	if err != nil {
		fatal(routine, pe, err)
	}
}
