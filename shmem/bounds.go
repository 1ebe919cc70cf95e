package shmem

import "unsafe"

// HeapBounds returns the address and size of this PE's symmetric heap, or
// nil and 0 before Init and after the last Finalize. It is for libraries
// built on this package that must tell a symmetric address from another
// without calling in for each one (the C library's hot paths, which
// compute a peer's address from the offset into the heap and the peer's
// heap as Ptr maps it).
func HeapBounds() (base unsafe.Pointer, size int) {
	if !st.inited {
		return nil, 0
	}
	return st.heap.Base(), int(st.heapSize)
}
