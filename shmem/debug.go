package shmem

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"sync/atomic"
	"unsafe"
)

// With SHMEM_DEBUG set, every allocation call (Malloc, Calloc, Align,
// MallocWithHints, Realloc, Free) first checks that every PE makes the
// same call, with the same size, alignment, hints and object, as the same
// allocation call of its program; a mismatch is reported on every PE,
// naming the call and the PEs that differ. And the routines that take
// symmetric addresses check that the range they touch lies inside one
// object that is allocated now (not merely inside the heap).

// ErrDebugMismatch reports, with SHMEM_DEBUG set, an allocation call that
// is not the same on every PE. The allocation routines wrap it in their
// error; Free, which returns nothing, panics with it.
var ErrDebugMismatch = errors.New("SHMEM_DEBUG: the PEs made different allocation calls")

// Allocation calls, as debug records name them.
const (
	callMalloc = 1 + iota
	callCalloc
	callAlign
	callMallocWithHints
	callRealloc
	callFree
)

var callNames = map[uint64]string{callMalloc: "Malloc", callCalloc: "Calloc", callAlign: "Align",
	callMallocWithHints: "MallocWithHints", callRealloc: "Realloc", callFree: "Free"}

// debugState is the bookkeeping of SHMEM_DEBUG.
var debugState struct {
	calls uint64 // allocation calls made
	// blocks are the live objects, sorted by offset; replaced, never
	// changed, so the routines read them without a lock.
	blocks atomic.Pointer[[]liveBlock]
}

// liveBlock is an allocated object: size bytes from heap offset off.
type liveBlock struct{ off, size uintptr }

func resetDebug() {
	debugState.calls = 0
	debugState.blocks.Store(nil)
}

// describeCall describes an allocation call of a debug record.
func describeCall(r teamRecord) string {
	name := callNames[r[2]]
	switch r[2] {
	case callRealloc:
		return fmt.Sprintf("Realloc(object at heap offset %#x, to %d bytes)", r[5], r[3])
	case callFree:
		if r[5] == ^uint64(0) {
			return "Free(nil)"
		}
		return fmt.Sprintf("Free(object at heap offset %#x)", r[5])
	case callMallocWithHints:
		return fmt.Sprintf("MallocWithHints(%d bytes, hints %v)", r[3], MallocHints(r[6]))
	case 0:
		return "no allocation call"
	case callAlign:
		return fmt.Sprintf("Align(%d bytes, alignment %d)", r[3], r[4])
	}
	return fmt.Sprintf("%s(%d bytes)", name, r[3])
}

// debugAlloc checks, with SHMEM_DEBUG set, that every PE makes the same
// allocation call: call with bytes, align, the object's heap offset off
// (-1 for none) and hints. It exchanges a record with every PE, so every
// PE finds the same mismatch, reports it on its standard error and returns
// it.
func debugAlloc(routine string, call, bytes, align, off int, hints MallocHints) error {
	if !st.env.debug {
		return nil
	}
	debugState.calls++
	rec := teamRecord{0, recAlloc, uint64(call), uint64(bytes), uint64(align), uint64(off), uint64(hints), debugState.calls}
	recs := TeamWorld.exchange(routine, rec)
	defer TeamWorld.sync(routine)
	for pe, r := range recs {
		var what string
		switch {
		case r[0] != recs[0][0] || r[1] != recAlloc || recs[0][1] != recAlloc:
			what = fmt.Sprintf("PE %d is in collective #%d (%s), PE 0 in #%d (%s)", pe, r[0], recNames[r[1]], recs[0][0], recNames[recs[0][1]])
		case r[7] != recs[0][7]:
			what = fmt.Sprintf("PE %d is at its allocation call #%d, %s, PE 0 at #%d, %s", pe, r[7], describeCall(r), recs[0][7], describeCall(recs[0]))
		case r[2] != recs[0][2] || r[3] != recs[0][3] || r[4] != recs[0][4] || r[5] != recs[0][5] || r[6] != recs[0][6]:
			what = fmt.Sprintf("at allocation call #%d, PE %d called %s, PE 0 %s", r[7], pe, describeCall(r), describeCall(recs[0]))
		default:
			continue
		}
		err := fmt.Errorf("shmem.%s: %w: %s", routine, ErrDebugMismatch, what)
		fmt.Fprintf(os.Stderr, "goshmem: PE %d: %v\n", st.me, err)
		return err
	}
	return nil
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
