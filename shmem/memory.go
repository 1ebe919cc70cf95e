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
	if !st.inited {
		panic("shmem." + routine + " called before shmem.Init")
	}
}

// ErrHeapExhausted is wrapped by the errors of the allocation routines
// when the symmetric heap has no room for the object; SHMEM_SYMMETRIC_SIZE
// sets the heap's size. The errors also wrap symheap.ErrNoSpace.
var ErrHeapExhausted = errors.New("symmetric heap exhausted (SHMEM_SYMMETRIC_SIZE sets its size)")

// ErrAllocMismatch is wrapped by the errors of the allocation routines,
// on every PE, when the PEs did not make the same call: every allocation
// checks that every PE asked for the same size, alignment, hints and
// object. ErrDebugMismatch is the same error.
var ErrAllocMismatch = errors.New("the PEs made different allocation calls")

// allocKey digests an allocation call for the checked barrier: the call,
// its size, alignment, object and hints, and whether it could be done
// here (a PE whose heap had no room must not agree with one whose had).
func allocKey(call, bytes, align, off int, hints MallocHints, ok bool) uint64 {
	h := fnv.New64a()
	var b [8 * 6]byte
	for i, v := range []uint64{uint64(call), uint64(bytes), uint64(align), uint64(off), uint64(hints), b2u(ok)} {
		binary.LittleEndian.PutUint64(b[8*i:], v)
	}
	h.Write(b[:])
	return h.Sum64()
}

// checkedAllocBarrier is the barrier of an allocation call: BarrierAll
// that also checks that every PE made the same call (allocKey). It
// returns nil when they did; otherwise every PE learns it, exchanges its
// call with the others, and returns the same error wrapping
// ErrAllocMismatch, naming the calls and the PEs that made them.
func checkedAllocBarrier(routine string, call, bytes, align, off int, hints MallocHints, ok bool) error {
	Quiet()
	st.allocCalls++
	teamWorld.beginColl(routine)
	defer teamWorld.endColl()
	coll := atomic.LoadUint64(teamWorld.collWord())
	if teamWorld.syncKey(routine, allocKey(call, bytes, align, off, hints, ok)^coll) {
		return nil
	}
	if !teamWorld.collAgree(routine) {
		teamWorld.collMismatch(routine)
	}
	rec := teamRecord{0, recAlloc, uint64(call), uint64(bytes), uint64(align), uint64(off), uint64(hints)<<1 | b2u(ok), st.allocCalls}
	recs := TeamWorld.exchange(routine, rec)
	defer TeamWorld.sync(routine)
	return fmt.Errorf("shmem.%s: %w: %s", routine, ErrAllocMismatch, describeCalls(recs))
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
	var z T
	size := unsafe.Sizeof(z)
	if zeroBytes[T](n) {
		return nil, nil
	}
	bytes := n * int(size)
	if err := debugAlloc(routine, call, bytes, align, -1, hints); err != nil {
		return nil, err
	}
	// An error of the arguments is found alike on every PE that passes
	// the same ones; it still takes part in the barrier, so that a PE that
	// passed others is not left waiting there.
	err := checkNoPointers[T](routine)
	if err == nil && (n < 0 || (size > 0 && uintptr(n) > st.heapSize/size)) {
		err = fmt.Errorf("shmem.%s: %d elements of %d bytes do not fit a heap of %d bytes (SHMEM_SYMMETRIC_SIZE): %w", routine, n, size, st.heapSize, ErrHeapExhausted)
		bytes = -1
	}
	// The alignment the allocator gives (at least symheap.MinAlign): calls
	// that make the same allocation agree, whatever their element type
	// (a C program's shmem_malloc of bytes beside a Go PE's Malloc[int64]).
	align = max(align, int(unsafe.Alignof(z)), symheap.MinAlign)
	off, dirty := -1, 0
	if err == nil {
		allocMu.Lock()
		off, dirty, err = st.heap.AllocClean(bytes, align)
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
	if merr := checkedAllocBarrier(routine, call, bytes, align, -1, hints, err == nil); merr != nil {
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
// PEs' calls differ (another size, alignment or hints on some PE), every
// PE returns an error wrapping ErrAllocMismatch that names the calls and
// the PEs, and allocates nothing: the check is part of the barrier, always
// on.
func Malloc[T any](n int) ([]T, error) { return alloc[T]("Malloc", callMalloc, n, 0, 0, false) }

// Calloc is Malloc with the memory set to zero. Like Malloc, it does
// nothing and returns nil for a request of zero bytes.
func Calloc[T any](n int) ([]T, error) { return alloc[T]("Calloc", callCalloc, n, 0, 0, true) }

// Align is Malloc with the start of the array aligned to alignment bytes,
// which must be a power of two (otherwise it returns an error). Like
// Malloc, it does nothing and returns nil for a request of zero bytes,
// whatever the alignment.
func Align[T any](alignment, n int) ([]T, error) {
	if zeroBytes[T](n) {
		return alloc[T]("Align", callAlign, n, 0, 0, false)
	}
	if alignment <= 0 || alignment&(alignment-1) != 0 {
		return nil, fmt.Errorf("shmem.Align: alignment %d is not a power of two", alignment)
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
// returns nil. On error (heap exhausted, or with SHMEM_DEBUG set a call
// that differs among the PEs) s is left as it was.
func Realloc[T any](s []T, n int) ([]T, error) {
	mustInit("Realloc")
	if s == nil {
		return Malloc[T](n)
	}
	if zeroBytes[T](n) {
		Free(s)
		return nil, nil
	}
	var z T
	size := int(unsafe.Sizeof(z))
	off := blockOf("Realloc", s)
	bytes := n * size
	if err := debugAlloc("Realloc", callRealloc, bytes, 0, off, 0); err != nil {
		return nil, err
	}
	err := checkNoPointers[T]("Realloc")
	if err == nil && (n < 0 || (size > 0 && uintptr(n) > st.heapSize/uintptr(size))) {
		err = fmt.Errorf("shmem.Realloc: %d elements of %d bytes do not fit a heap of %d bytes (SHMEM_SYMMETRIC_SIZE): %w", n, size, st.heapSize, ErrHeapExhausted)
		bytes = -1
	}
	// Every PE must be done with the old object before it may move, and
	// must ask for the same.
	if merr := checkedAllocBarrier("Realloc", callRealloc, bytes, 0, off, 0, err == nil); merr != nil {
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
	if err := debugAlloc("Free", callFree, 0, 0, off, 0); err != nil {
		panic(err.Error())
	}
	if err := checkedAllocBarrier("Free", callFree, 0, 0, off, 0, true); err != nil {
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
	off := offsetOf("Ptr", "p", unsafe.Pointer(p), int(unsafe.Sizeof(z)))
	base := jobPeer("Ptr", pe).base
	if base == nil {
		return nil
	}
	return (*T)(unsafe.Add(base, off))
}

// PEAccessible reports whether pe is a PE of the job that this PE can reach
// with the routines of this package. The PE is connected first, if that was
// not done yet.
func PEAccessible(pe int) bool {
	return st.inited && pe >= 0 && pe < st.npes && defaultCtx.connect(pe) == nil
}

// AddrAccessible reports whether *p is a symmetric object that pe can be
// reached at with the routines of this package.
func AddrAccessible[T any](p *T, pe int) bool {
	if !PEAccessible(pe) {
		return false
	}
	var z T
	_, ok := st.heap.Offset(unsafe.Pointer(p), int(unsafe.Sizeof(z)))
	return ok
}
