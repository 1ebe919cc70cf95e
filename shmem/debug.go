package shmem

import (
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
)

// With SHMEM_DEBUG set, every allocation call (Malloc, Calloc, Align,
// MallocWithHints, Realloc, Free) first checks that every PE makes the
// same call, with the same size, alignment, hints and object, as the same
// allocation call of its program; a mismatch is reported on every PE,
// naming the call and the PEs that differ. And the routines that take
// symmetric addresses check that the range they touch lies inside one
// object that is allocated now (not merely inside the heap).

// ErrDebugMismatch is ErrAllocMismatch, which SHMEM_DEBUG used to be
// needed for: an allocation call that is not the same on every PE. The
// allocation routines wrap it in their error; Free, which returns nothing,
// panics with it.
var ErrDebugMismatch = ErrAllocMismatch

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

// describeCall describes the allocation call of a record of an allocation
// exchange: [seq, recAlloc, call, bytes, align, offset, hints<<1 | done
// here, allocation call number].
func describeCall(r teamRecord) string {
	name := callNames[r[2]]
	var d string
	switch r[2] {
	case callRealloc:
		d = fmt.Sprintf("Realloc(object at heap offset %#x, to %d bytes)", r[5], r[3])
	case callFree:
		d = fmt.Sprintf("Free(object at heap offset %#x)", r[5])
	case callMallocWithHints:
		d = fmt.Sprintf("MallocWithHints(%s, hints %v)", describeBytes(r[3]), MallocHints(r[6]>>1))
	case 0:
		return "no allocation call"
	case callAlign:
		d = fmt.Sprintf("Align(%s, alignment %d)", describeBytes(r[3]), r[4])
	default:
		d = fmt.Sprintf("%s(%s)", name, describeBytes(r[3]))
	}
	if r[6]&1 == 0 {
		d += " (which failed there)"
	}
	return d
}

// describeBytes describes the size of a request; -1 (all ones) stands for
// one that does not fit any heap.
func describeBytes(n uint64) string {
	if n == ^uint64(0) {
		return "more bytes than the heap holds"
	}
	return fmt.Sprintf("%d bytes", n)
}

// describeCalls describes the calls of an allocation exchange, grouped:
// "PEs 0, 2: Malloc(64 bytes); PE 1: Malloc(128 bytes)".
func describeCalls(recs []teamRecord) string {
	var order []string
	pes := map[string][]int{}
	for pe, r := range recs {
		var d string
		switch {
		case r[1] != recAlloc:
			d = fmt.Sprintf("in %s, not an allocation", recNames[r[1]])
		default:
			d = fmt.Sprintf("allocation call #%d, %s", r[7], describeCall(r))
		}
		if _, ok := pes[d]; !ok {
			order = append(order, d)
		}
		pes[d] = append(pes[d], pe)
	}
	parts := make([]string, len(order))
	for i, d := range order {
		parts[i] = describePEs(pes[d]) + ": " + d
	}
	return strings.Join(parts, "; ") + " (every PE must make the same allocation calls in the same order)"
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
	rec := teamRecord{0, recAlloc, uint64(call), uint64(bytes), uint64(align), uint64(off), uint64(hints)<<1 | 1, debugState.calls}
	recs := TeamWorld.exchange(routine, rec)
	defer TeamWorld.sync(routine)
	for _, r := range recs {
		if r != recs[0] {
			err := fmt.Errorf("shmem.%s: SHMEM_DEBUG: %w: %s", routine, ErrAllocMismatch, describeCalls(recs))
			lg().Logf(ucs.LogError, "goshmem: PE %d: %v", st.me, err)
			return err
		}
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
