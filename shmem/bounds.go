package shmem

import (
	"fmt"
	"unsafe"
)

// HeapBounds returns the address and size of this PE's symmetric heap, or
// nil and 0 before Init and after the last Finalize. It is for libraries
// built on this package that must tell a symmetric address from another
// without calling in for each one (the C library's hot paths, which
// compute a peer's address from the offset into the heap and the peer's
// heap as Ptr maps it).
func HeapBounds() (base unsafe.Pointer, size int) {
	if st.phase != initialized {
		return nil, 0
	}
	return st.heap.Base(), int(st.heapSize)
}

// initExtra is what SetInitExtra gave, published in this PE's init blob.
var initExtra []byte

// SetInitExtra sets bytes that the next Init publishes to every PE with
// this PE's address and heap key, for PeerExtra to return there (at most
// 64 KiB; nil publishes nothing). It is for libraries built on this
// package that keep something of their own per PE and must not add a
// collective of their own to Init (the C library publishes where its
// program's static data can be mapped, which a Go program in the same job
// does not publish). It panics when called while the library is
// initialized or for more than 64 KiB.
func SetInitExtra(b []byte) {
	if st.phase == initialized {
		panic("shmem.SetInitExtra called while the library is initialized")
	}
	if len(b) > 64<<10 {
		panic(fmt.Sprintf("shmem.SetInitExtra: %d bytes (at most 64 KiB)", len(b)))
	}
	initExtra = append([]byte(nil), b...)
}

// PeerExtra returns the bytes PE pe published with SetInitExtra before its
// Init (nil if none), or nil before Init. It panics for a pe outside the
// job.
func PeerExtra(pe int) []byte {
	if st.phase != initialized {
		return nil
	}
	if pe < 0 || pe >= st.npes {
		panic(fmt.Sprintf("shmem.PeerExtra: PE %d is not a PE of the job (0..%d)", pe, st.npes-1))
	}
	return blobExtra(st.table.Blob(pe))
}

// blobExtra returns the extra bytes at the end of an init blob that
// decodeBlob accepted, or nil.
func blobExtra(b []byte) []byte {
	in, err := decodeBlob(b)
	if err != nil {
		return nil
	}
	return in.extra
}
