package shmem

import (
	"fmt"
	"sort"
	"sync/atomic"
	"unsafe"
)

// With SHMEM_DEBUG set, an allocation call that is not the same on every
// PE (which every allocation checks, SHMEM_DEBUG or not) is also reported
// on each PE's standard error; and the routines that take symmetric
// addresses check that the range they touch lies inside one object that
// is allocated now (not merely inside the heap).

// ErrDebugMismatch is ErrAllocMismatch, which SHMEM_DEBUG used to be
// needed for: an allocation call that is not the same on every PE. The
// allocation routines wrap it in their error; Free, which returns nothing,
// panics with it.
var ErrDebugMismatch = ErrAllocMismatch

// debugState is the bookkeeping of SHMEM_DEBUG.
var debugState struct {
	// blocks are the live objects, sorted by offset; replaced, never
	// changed, so the routines read them without a lock.
	blocks atomic.Pointer[[]liveBlock]
}

// liveBlock is an allocated object: size bytes from heap offset off.
type liveBlock struct{ off, size uintptr }

func resetDebug() {
	debugState.blocks.Store(nil)
}

// debugTrack records, with SHMEM_DEBUG set, that the object of size bytes
// at off was allocated (add) or freed. The caller holds allocMu.
func debugTrack(off, size int, add bool) {
	if !st.env.debug {
		return
	}
	var old []liveBlock
	if p := debugState.blocks.Load(); p != nil {
		old = *p
	}
	b := make([]liveBlock, 0, len(old)+1)
	for _, x := range old {
		if x.off != uintptr(off) {
			b = append(b, x)
		}
	}
	if add {
		b = append(b, liveBlock{uintptr(off), uintptr(size)})
		sort.Slice(b, func(i, j int) bool { return b[i].off < b[j].off })
	}
	debugState.blocks.Store(&b)
}

// debugCheckRange panics, with SHMEM_DEBUG set, when the n bytes at heap
// offset off do not lie inside one live object.
//
//go:noinline
func debugCheckRange(routine, arg string, p unsafe.Pointer, off uintptr, n int) {
	var blocks []liveBlock
	if bp := debugState.blocks.Load(); bp != nil {
		blocks = *bp
	}
	i := sort.Search(len(blocks), func(i int) bool { return blocks[i].off > off }) - 1
	if i >= 0 && off+uintptr(n) <= blocks[i].off+blocks[i].size {
		return
	}
	if i >= 0 && off < blocks[i].off+blocks[i].size {
		panic(fmt.Sprintf("shmem.%s: SHMEM_DEBUG: %s (%d bytes at %p) runs past the end of its object (%d bytes at heap offset %#x)",
			routine, arg, n, p, blocks[i].size, blocks[i].off))
	}
	panic(fmt.Sprintf("shmem.%s: SHMEM_DEBUG: %s (%d bytes at %p, heap offset %#x) is not inside an allocated object (freed, or never allocated)",
		routine, arg, n, p, off))
}
