package shmem

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"reflect"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/goshmem/goshmem/symheap"
	"github.com/goshmem/goshmem/ucs"
)

// checkNoPointers reports an error if T holds Go pointers: the symmetric heap
// is outside the Go heap, so the garbage collector would not see them, and
// they mean nothing on another PE.
func checkNoPointers[T any](routine string) error {
	t := reflect.TypeFor[T]()
	if hasPointers(t) {
		return fmt.Errorf("shmem.%s[%v]: type holds Go pointers (pointer, slice, map, string, interface, channel or func) and cannot live in the symmetric heap", routine, t)
	}
	return nil
}

func hasPointers(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Array:
		return t.Len() > 0 && hasPointers(t.Elem())
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			if hasPointers(t.Field(i).Type) {
				return true
			}
		}
		return false
	case reflect.Pointer, reflect.UnsafePointer, reflect.Slice, reflect.Map, reflect.String,
		reflect.Interface, reflect.Chan, reflect.Func:
		return true
	}
	return false
}

func mustInit(routine string) {
	if st.phase != initialized {
		panicUninit(routine)
	}
}

// ErrHeapExhausted is wrapped by the errors of the allocation routines
// when the symmetric heap has no room for the object; SHMEM_SYMMETRIC_SIZE
// sets the heap's size. The errors also wrap symheap.ErrNoSpace.
var ErrHeapExhausted = errors.New("symmetric heap exhausted (SHMEM_SYMMETRIC_SIZE sets its size)")

// ErrAllocMismatch is wrapped by the errors of the allocation routines,
// on every PE, when the PEs did not make the same call: every allocation
// checks that every PE called the same routine (Malloc, Calloc, Align,
// MallocWithHints, Realloc or Free) for the same number of bytes, placed
// alike (the alignment, at least a cache line), with the same hints and
// object; the element types may differ, as C's shmem_malloc counts bytes.
// The error names each PE's call (routine, type, element count, bytes,
// alignment, hints). Free, which returns
// nothing, panics with it. ErrDebugMismatch is the same error.
var ErrAllocMismatch = errors.New("the PEs made different allocation calls")

// Allocation calls, as allocCall names them.
const (
	callMalloc = 1 + iota
	callCalloc
	callAlign
	callMallocWithHints
	callRealloc
	callFree
)

var callNames = map[int]string{callMalloc: "Malloc", callCalloc: "Calloc", callAlign: "Align",
	callMallocWithHints: "MallocWithHints", callRealloc: "Realloc", callFree: "Free"}

// allocCall is an allocation call, as the checked barrier compares and
// reports it.
type allocCall struct {
	call    int    // callMalloc, ...
	typ     string // the element type
	n, size int    // element count and element size (0 for Free)
	arg     int    // the alignment argument of Align
	align   int    // the alignment of the object: Align's, or the type's
	off     int    // heap offset of the object of Realloc and Free; -1 for none
	hints   MallocHints
	ok      bool // the call could be done on this PE
}

// newAllocCall describes a call of n elements of T aligned to align
// (Align's argument, or 0) at heap offset off (-1 for none).
func newAllocCall[T any](call, n, align, off int, hints MallocHints) allocCall {
	var z T
	c := allocCall{call: call, typ: reflect.TypeFor[T]().String(), n: n, size: int(unsafe.Sizeof(z)), arg: align,
		align: max(align, int(unsafe.Alignof(z))), off: off, hints: hints}
	if call == callFree {
		c.n, c.size = 0, 0 // any slice of the object frees it
	}
	return c
}

// key digests what must be the same on every PE: the routine, the bytes
// and their placement (alignments below a cache line place the object
// alike), the hints and the object. The element type is not: as
// OpenSHMEM's shmem_malloc counts bytes, Malloc[int32](8) and
// Malloc[int64](4) make the same allocation, and so do a C PE's
// shmem_malloc(32) and a Go PE's Malloc[int64](4) in one job. A PE whose
// heap had no room (not ok) must not agree with one whose had.
func (c allocCall) key() uint64 {
	h := fnv.New64a()
	var b [8 * 6]byte
	for i, v := range []uint64{uint64(c.call), uint64(c.n * c.size), uint64(max(c.align, symheap.MinAlign)), uint64(c.off), uint64(c.hints), b2u(c.ok)} {
		binary.LittleEndian.PutUint64(b[8*i:], v)
	}
	h.Write(b[:])
	return h.Sum64()
}

// String describes the call: "Malloc[int64](20): 160 bytes, alignment 8".
func (c allocCall) String() string {
	name := callNames[c.call]
	var d string
	switch c.call {
	case callFree:
		return fmt.Sprintf("Free[%s](object at heap offset %#x)", c.typ, c.off)
	case callRealloc:
		d = fmt.Sprintf("Realloc[%s](object at heap offset %#x, %d)", c.typ, c.off, c.n)
	case callAlign:
		d = fmt.Sprintf("Align[%s](%d, %d)", c.typ, c.arg, c.n)
	case callMallocWithHints:
		d = fmt.Sprintf("MallocWithHints[%s](%d, %v)", c.typ, c.n, c.hints)
	default:
		d = fmt.Sprintf("%s[%s](%d)", name, c.typ, c.n)
	}
	switch {
	case c.n < 0:
		d += ": a negative count"
	case c.size > 0 && uintptr(c.n) > st.heapSize/uintptr(c.size):
		d += ": more bytes than the heap holds"
	default:
		d += fmt.Sprintf(": %d bytes", c.n*c.size)
	}
	if c.call != callRealloc {
		d += fmt.Sprintf(", alignment %d", c.align)
	}
	if !c.ok {
		d += " (which failed there)"
	}
	return d
}

// checkedAllocBarrier is the barrier of an allocation call: BarrierAll
// that also checks that every PE made the same call (allocCall.key). It
// returns nil when they did; otherwise every PE learns it, exchanges the
// description of its call with the others, and returns the same error
// wrapping ErrAllocMismatch, naming the calls and the PEs that made them
// (and, with SHMEM_DEBUG set, logs it). A PE in another collective than
// an allocation panics, as in every collective (collAgree).
func checkedAllocBarrier(routine string, c allocCall) error {
	Quiet()
	profCall(routine)
	st.allocCalls++
	teamWorld.beginColl(routine)
	defer teamWorld.endColl()
	if teamWorld.syncKey(routine, c.key()^collKey(atomic.LoadUint64(teamWorld.collWord()))) {
		return nil
	}
	teamWorld.collAgree(routine)
	calls := TeamWorld.exchangeText(routine, fmt.Sprintf("allocation call #%d, %v", st.allocCalls, c))
	var order []string
	pes := map[string][]int{}
	for pe, d := range calls {
		if _, ok := pes[d]; !ok {
			order = append(order, d)
		}
		pes[d] = append(pes[d], pe)
	}
	parts := make([]string, len(order))
	for i, d := range order {
		parts[i] = describePEs(pes[d]) + ": " + d
	}
	err := fmt.Errorf("shmem.%s: %w: %s (every PE must make the same allocation calls in the same order)", routine, ErrAllocMismatch, strings.Join(parts, "; "))
	if st.env.debug {
		lg().Logf(ucs.LogError, "goshmem: PE %d: SHMEM_DEBUG: %v", st.me, err)
	}
	return err
}

// alloc is the common part of Malloc, Calloc, Align and MallocWithHints:
// a collective allocation of n elements of T aligned to align, ending
// with a barrier so that every PE has the object before any PE uses it.
// The barrier checks that every PE asked for the same (see
// checkedAllocBarrier); when one did not, every PE gives its object back
// and returns the error. A request of zero bytes does nothing and returns
// nil, without a barrier, as OpenSHMEM says of every allocation routine.
func alloc[T any](routine string, call, n, align int, hints MallocHints, zero bool) ([]T, error) {
	mustInit(routine)
	if zeroBytes[T](n) {
		return nil, nil
	}
	c := newAllocCall[T](call, n, align, -1, hints)
	// An error of the arguments is found alike on every PE that passes
	// the same ones; it still takes part in the barrier, so that a PE that
	// passed others is not left waiting there.
	err := checkNoPointers[T](routine)
	if err == nil && (n < 0 || c.size > 0 && uintptr(n) > st.heapSize/uintptr(c.size)) {
		err = fmt.Errorf("shmem.%s: %d elements of %d bytes do not fit a heap of %d bytes (SHMEM_SYMMETRIC_SIZE): %w", routine, n, c.size, st.heapSize, ErrHeapExhausted)
	}
	bytes := n * c.size
	off, dirty := -1, 0
	if err == nil {
		allocMu.Lock()
		off, dirty, err = st.heap.AllocClean(bytes, c.align)
		if err == nil {
			debugTrack(off, bytes, true)
		}
		allocMu.Unlock()
		if err != nil {
			err = exhausted(routine, bytes, err)
		}
	}
	if err == nil && zero {
		// Memory past the allocator's high-water mark was never used: the
		// fresh segment is zero there, and touching it would cost its pages.
		clear(unsafe.Slice((*byte)(st.heap.At(off)), dirty))
	}
	c.ok = err == nil
	if merr := checkedAllocBarrier(routine, c); merr != nil {
		if err == nil {
			allocMu.Lock()
			st.heap.Free(off)
			debugTrack(off, 0, false)
			allocMu.Unlock()
		}
		return nil, merr
	}
	if err != nil {
		return nil, err
	}
	return unsafe.Slice((*T)(st.heap.At(off)), n), nil
}

// exhausted makes the error of an allocation of bytes that found no room.
func exhausted(routine string, bytes int, err error) error {
	return fmt.Errorf("shmem.%s: no room for %d bytes in the symmetric heap of %d bytes (%d in use); raise SHMEM_SYMMETRIC_SIZE: %w: %w",
		routine, bytes, st.heapSize, st.heap.Used(), ErrHeapExhausted, err)
}

// Malloc allocates a symmetric array of n elements of T on every PE and
// returns this PE's copy. It is collective: every PE must call it with the
// same n, and it returns once every PE has the object. The contents are not
// initialized. A request of zero bytes (n is 0, or T has size 0) does
// nothing, not even the barrier, and returns nil and no error. T must hold
// no Go pointers; otherwise, or when the heap is exhausted
// (ErrHeapExhausted), it returns an error and allocates nothing. When the
// PEs' calls differ (another routine, number of bytes, alignment or hints
// on some PE; the element types may differ), every PE returns an error wrapping ErrAllocMismatch
// that names the calls and the PEs, and allocates nothing (a PE in Free
// panics with it): the check is part of the barrier, always on.
func Malloc[T any](n int) ([]T, error) { return alloc[T]("Malloc", callMalloc, n, 0, 0, false) }

// Calloc is Malloc with the memory set to zero. Like Malloc, it does
// nothing and returns nil for a request of zero bytes.
func Calloc[T any](n int) ([]T, error) { return alloc[T]("Calloc", callCalloc, n, 0, 0, true) }

// Align is Malloc with the start of the array aligned to alignment bytes,
// which must be a power of two that fits the heap: no larger than its size
// (SHMEM_SYMMETRIC_SIZE) rounded up to a power of two, and at least 2 MiB
// (symheap.MaxAlignOf; the heap starts on such a boundary on every PE, so
// the same offset is aligned on every PE). Otherwise it returns an error
// wrapping symheap.ErrBadAlign and ErrInvalidArgument, on every PE that
// passed it, without communicating; an alignment that fits but for which
// no aligned free block is large enough fails as Malloc does
// (ErrHeapExhausted). The alignment holds for this PE's copy; a pointer to
// another PE's copy (Ptr) is aligned to the page only. Like Malloc, it
// does nothing and returns nil for a request of zero bytes, whatever the
// alignment.
func Align[T any](alignment, n int) ([]T, error) {
	if zeroBytes[T](n) {
		return alloc[T]("Align", callAlign, n, 0, 0, false)
	}
	mustInit("Align")
	if max := st.heap.MaxAlign(); alignment <= 0 || alignment&(alignment-1) != 0 || alignment > max {
		return nil, fmt.Errorf("shmem.Align: alignment %d (the heap of %d bytes aligns to powers of two up to %d): %w: %w",
			alignment, st.heap.Size(), max, symheap.ErrBadAlign, ErrInvalidArgument)
	}
	return alloc[T]("Align", callAlign, n, alignment, 0, false)
}

// MallocHints tell MallocWithHints how a symmetric object will be used,
// or-ed together; 0 gives no hint.
type MallocHints int

// Allocation hints (SHMEM_MALLOC_*).
const (
	// MallocAtomicsRemote: the object will mostly be the target of atomic
	// operations from other PEs (SHMEM_MALLOC_ATOMICS_REMOTE).
	MallocAtomicsRemote MallocHints = 1 << iota
	// MallocSignalRemote: the object will be the signal word of
	// put-with-signal operations from other PEs
	// (SHMEM_MALLOC_SIGNAL_REMOTE).
	MallocSignalRemote

	mallocAllHints = MallocAtomicsRemote | MallocSignalRemote
)

func (h MallocHints) String() string {
	if h == 0 {
		return "0"
	}
	var s []string
	if h&MallocAtomicsRemote != 0 {
		s = append(s, "MallocAtomicsRemote")
	}
	if h&MallocSignalRemote != 0 {
		s = append(s, "MallocSignalRemote")
	}
	if r := h &^ mallocAllHints; r != 0 {
		s = append(s, fmt.Sprintf("%#x", int(r)))
	}
	return strings.Join(s, "|")
}

// MallocWithHints is Malloc with hints on the object's use
// (shmem_malloc_with_hints); 0 is Malloc. goshmem accepts
// MallocAtomicsRemote and MallocSignalRemote and places such objects as
// Malloc does: every object of the heap already starts on a cache line of
// its own (so atomics on it do not share the line with other objects), and
// atomics from other PEs reach it through the same CPU or transport
// atomics whatever the hint. Every PE must pass the same hints. It returns
// an error for unknown hints, and the errors of Malloc; like Malloc, it
// does nothing and returns nil for a request of zero bytes.
func MallocWithHints[T any](n int, hints MallocHints) ([]T, error) {
	if hints&^mallocAllHints != 0 && !zeroBytes[T](n) {
		return nil, fmt.Errorf("shmem.MallocWithHints: unknown hints %v (valid: MallocAtomicsRemote, MallocSignalRemote, or 0)", hints)
	}
	return alloc[T]("MallocWithHints", callMallocWithHints, n, 0, hints, false)
}

// zeroBytes reports whether n elements of T take no bytes.
func zeroBytes[T any](n int) bool {
	var z T
	return n == 0 || unsafe.Sizeof(z) == 0 && n > 0
}

// heapOffsetOf returns the heap offset of a symmetric slice's first element,
// panicking when s does not start a block of the heap.
func blockOf[T any](routine string, s []T) int {
	p := unsafe.Pointer(unsafe.SliceData(s))
	off, ok := st.heap.Offset(p, 0)
	if !ok || st.heap.SizeOf(off) == 0 {
		panic(fmt.Sprintf("shmem.%s: %p is not an object allocated by shmem.Malloc (symmetric heap is %#x..%#x)",
			routine, p, st.heapBase, st.heapBase+st.heapSize))
	}
	return off
}

// Realloc resizes the symmetric array s to n elements on every PE,
// collectively, and returns the new copy; the contents up to the smaller of
// the two lengths are kept. s must come from Malloc, Calloc, Align or
// Realloc; a nil s allocates like Malloc (and so does nothing for zero
// bytes). A request of zero bytes for a non-nil s frees s as Free does and
// returns nil. On error (heap exhausted, or a call that differs among the
// PEs, ErrAllocMismatch) s is left as it was.
func Realloc[T any](s []T, n int) ([]T, error) {
	mustInit("Realloc")
	if s == nil {
		return Malloc[T](n)
	}
	if zeroBytes[T](n) {
		Free(s)
		return nil, nil
	}
	off := blockOf("Realloc", s)
	c := newAllocCall[T](callRealloc, n, 0, off, 0)
	bytes := n * c.size
	err := checkNoPointers[T]("Realloc")
	if err == nil && (n < 0 || c.size > 0 && uintptr(n) > st.heapSize/uintptr(c.size)) {
		err = fmt.Errorf("shmem.Realloc: %d elements of %d bytes do not fit a heap of %d bytes (SHMEM_SYMMETRIC_SIZE): %w", n, c.size, st.heapSize, ErrHeapExhausted)
	}
	// Every PE must be done with the old object before it may move, and
	// must ask for the same.
	c.ok = err == nil
	if merr := checkedAllocBarrier("Realloc", c); merr != nil {
		return nil, merr
	}
	if err != nil {
		return nil, err
	}
	allocMu.Lock()
	oldSize := st.heap.SizeOf(off)
	newOff, moved, err := st.heap.Realloc(off, bytes)
	if err == nil {
		debugTrack(off, 0, false)
		debugTrack(newOff, bytes, true)
	}
	allocMu.Unlock()
	if err != nil {
		// The heaps are alike on every PE (every call was checked), so
		// every PE fails alike.
		return nil, exhausted("Realloc", bytes, err)
	}
	if moved {
		copy(unsafe.Slice((*byte)(st.heap.At(newOff)), bytes), unsafe.Slice((*byte)(st.heap.At(off)), oldSize))
	}
	BarrierAll()
	return unsafe.Slice((*T)(st.heap.At(newOff)), n), nil
}

// Free releases a symmetric array on every PE, collectively, after a barrier
// (no PE may still be using it). A nil s does nothing, not even the
// barrier. It panics if s was not allocated by this package, and, on every
// PE, when the PEs free different objects (ErrAllocMismatch, which the
// barrier checks).
func Free[T any](s []T) {
	if s == nil {
		return
	}
	mustInit("Free")
	off := blockOf("Free", s)
	c := newAllocCall[T](callFree, 0, 0, off, 0)
	c.ok = true
	if err := checkedAllocBarrier("Free", c); err != nil {
		panic(err.Error())
	}
	allocMu.Lock()
	defer allocMu.Unlock()
	if err := st.heap.Free(off); err != nil {
		panic("shmem.Free: " + err.Error())
	}
	debugTrack(off, 0, false)
}

// Ptr returns a pointer through which this PE can load and store the copy of
// the symmetric object *p that lives on pe, or nil where pe's memory is not
// directly reachable (another node, or a transport without direct access).
// It panics if pe is not a PE of the job or p is not symmetric.
func Ptr[T any](p *T, pe int) *T {
	mustInit("Ptr")
	var z T
	defaultCtx.peer("Ptr", pe) // checks pe
	return (*T)(peerPtr("Ptr", unsafe.Pointer(p), int(unsafe.Sizeof(z)), pe))
}

// peerPtr returns where the n symmetric bytes at p are on the job's PE
// pe, mapped here, or nil where they are not mapped.
func peerPtr(routine string, p unsafe.Pointer, n, pe int) unsafe.Pointer {
	off, heap := offsetOf(routine, "p", p, n)
	if !heap {
		return regionPtr(routine, pe, off)
	}
	base := jobPeer(routine, pe).base
	if base == nil {
		return nil
	}
	return unsafe.Add(base, off)
}

// PEAccessible reports whether pe is a PE of the job that this PE can reach
// with the routines of this package. The PE is connected first, if that was
// not done yet.
func PEAccessible(pe int) bool {
	return st.phase == initialized && pe >= 0 && pe < st.npes && defaultCtx.connect(pe) == nil
}

// AddrAccessible reports whether *p is a symmetric object that pe can be
// reached at with the routines of this package: in the heap, or in a
// region of SetRegions that pe registered too.
func AddrAccessible[T any](p *T, pe int) bool {
	if !PEAccessible(pe) {
		return false
	}
	var z T
	if _, ok := st.heap.Offset(unsafe.Pointer(p), int(unsafe.Sizeof(z))); ok {
		return true
	}
	for r, x := range st.regions {
		if _, ok := x.reg.Offset(unsafe.Pointer(p), int(unsafe.Sizeof(z))); ok {
			q := defaultCtx.remote("AddrAccessible", pe)
			return r < len(q.regions) && q.regions[r].packed != nil
		}
	}
	return false
}
