package shmem

import (
	"errors"
	"fmt"
	"unsafe"
)

// The collective routines of OpenSHMEM 1.5 on teams: broadcast, collect,
// fcollect, alltoall, alltoalls and the reductions.
//
// Every routine is collective over its team: every PE of the team must
// call it, with the same root, element counts and strides (collect alone
// takes a count of its own on each PE), after the team's earlier
// collectives and in the same order. The source and dest arrays must be
// symmetric (allocated by Malloc and friends, at the same offset on every
// PE); a PE numbers the root and the blocks of collect, fcollect and
// alltoall by the team's PE numbers (0..team.NPEs()-1), not the job's.
// They need no pSync array and no barrier between two calls: each team
// keeps its synchronization words in the team pool and counts its calls.
// A routine returns once this PE's part is done: dest holds the result and
// source may be changed; it does not complete other operations of this PE
// (Quiet does).
//
// The routines return an error, without communicating, for the invalid
// team (nil, SHMEM_TEAM_INVALID), a root outside the team, a length that
// does not fit, or a source or dest outside the symmetric heap. Every PE
// that passes the same arguments finds the same error; a PE that finds
// such an error in its own arguments while the others pass valid ones
// leaves those waiting, as OpenSHMEM leaves such calls undefined. Valid
// arguments that differ among the PEs (lengths, element types, roots,
// strides) are found before any data moves, and the routine returns an
// error wrapping ErrInvalidArgument that names each PE's arguments, on
// every PE of the team; the root of a broadcast, which reads no other
// PE's arguments, finds it only with SHMEM_DEBUG set, or across nodes when
// the data is longer than the 4 KiB a message pushes (the other PEs always
// do). Across nodes such a root returns once it has sent, without waiting
// for the other PEs, and before its next collective of the team (or
// Destroy, or Finalize) waits for their messages, and for them to end the
// call when they found different arguments. See coll_args.go. Use before Init and a destroyed team
// are programming errors: they panic, as in every routine (see the
// package documentation's table).

// ErrInvalidTeam is wrapped by the errors of the routines with an error
// result (the collectives, the splits, (*Team).CreateCtx,
// (*Team).GetConfig) called with the invalid team, nil
// (SHMEM_TEAM_INVALID).
var ErrInvalidTeam = errors.New("invalid team")

// ErrInvalidArgument is wrapped by the errors of the routines with an
// error result called with arguments that do not fit: for the collectives
// a root outside the team, arrays too short for the data, arrays outside
// the symmetric heap, negative counts or strides below 1, and lengths,
// element types, roots or strides that differ among the team's PEs; for the splits
// a start, stride, size or xrange outside the parent team; unknown
// options of CtxCreate and (*Team).CreateCtx, unknown mask bits of
// (*Team).GetConfig; the alignment of Align when it is not a power of two
// or above the heap's symheap.MaxAlignOf.
var ErrInvalidArgument = errors.New("invalid argument")

// BitwiseReduce is the set of types of the bitwise reductions (AndReduce,
// OrReduce, XorReduce): the unsigned and fixed-size integer types of
// OpenSHMEM 1.5's reduction table (unsigned char, short, int, long and
// long long, int8..int64, uint8..uint64, size_t). It holds every type of
// Bitwise, the set of the bitwise atomics.
type BitwiseReduce interface {
	~int8 | ~int16 | ~int32 | ~int64 |
		~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~uintptr
}

// Ordered is the set of types of MaxReduce and MinReduce: OpenSHMEM's
// integer and real reduction types (char, short, int, long, long long,
// ptrdiff_t, their unsigned forms, the fixed-size integers, size_t, float
// and double) in Go form.
type Ordered interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 |
		~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~uintptr |
		~float32 | ~float64
}

// Arith is the set of types of SumReduce and ProdReduce: the Ordered types
// and the complex ones (complexf and complexd).
type Arith interface {
	Ordered | ~complex64 | ~complex128
}

// Broadcast copies source of the team's PE root into dest on every PE of
// the team, root included (shmem_broadcast, OpenSHMEM 1.5 semantics):
// nelems is len(source), which must be the same on every PE, and dest must
// hold at least that many elements. On root, dest may be source itself.
// It returns an error for an invalid team (ErrInvalidTeam), a root outside
// 0..team.NPEs()-1, a dest shorter than source, or arrays outside the
// symmetric heap (ErrInvalidArgument).
func Broadcast[T RMA](team *Team, dest, source []T, root int) error {
	var z T
	return broadcast("Broadcast", 0, team, bytesOf(dest), bytesOf(source), root, int(unsafe.Sizeof(z)))
}

// BroadcastMem is Broadcast of bytes (shmem_broadcastmem).
func BroadcastMem(team *Team, dest, source []byte, root int) error {
	return broadcast("BroadcastMem", formBytes, team, dest, source, root, 1)
}

// Collect concatenates the source arrays of the team's PEs, in the order of
// their team numbers, into dest on every PE (shmem_collect): each PE may
// pass a source of its own length, and dest must hold the sum of the
// lengths (which every PE learns). It returns an error for an invalid team
// (ErrInvalidTeam), a dest shorter than the sum, or arrays outside the
// symmetric heap (ErrInvalidArgument); the short-dest error comes on every
// PE alike, after the lengths were exchanged.
func Collect[T RMA](team *Team, dest, source []T) error {
	var z T
	return collect("Collect", 0, team, bytesOf(dest), bytesOf(source), int(unsafe.Sizeof(z)), false)
}

// CollectMem is Collect of bytes (shmem_collectmem).
func CollectMem(team *Team, dest, source []byte) error {
	return collect("CollectMem", formBytes, team, dest, source, 1, false)
}

// FCollect concatenates the source arrays of the team's PEs, in the order of
// their team numbers, into dest on every PE (shmem_fcollect): every PE passes
// a source of the same length, and dest must hold team.NPEs() times that.
// It returns the errors of Collect.
func FCollect[T RMA](team *Team, dest, source []T) error {
	var z T
	return collect("FCollect", 0, team, bytesOf(dest), bytesOf(source), int(unsafe.Sizeof(z)), true)
}

// FCollectMem is FCollect of bytes (shmem_fcollectmem).
func FCollectMem(team *Team, dest, source []byte) error {
	return collect("FCollectMem", formBytes, team, dest, source, 1, true)
}

// Alltoall exchanges a block of nelems = len(source)/team.NPEs() elements
// between every two PEs of the team (shmem_alltoall): block j of source
// on the team's PE i goes to block i of dest on PE j. len(source) must be a
// multiple of team.NPEs() and the same on every PE, and dest must hold at
// least len(source) elements; source and dest must not overlap. It returns
// an error for an invalid team (ErrInvalidTeam), lengths that do not fit or
// arrays outside the symmetric heap (ErrInvalidArgument).
func Alltoall[T RMA](team *Team, dest, source []T) error {
	var z T
	return alltoall("Alltoall", 0, team, bytesOf(dest), bytesOf(source), int(unsafe.Sizeof(z)))
}

// AlltoallMem is Alltoall of bytes (shmem_alltoallmem).
func AlltoallMem(team *Team, dest, source []byte) error {
	return alltoall("AlltoallMem", formBytes, team, dest, source, 1)
}

// Alltoalls is Alltoall with strided blocks (shmem_alltoalls): element k
// of the block for the team's PE j, source[(j*nelems+k)*sst], goes to
// dest[(i*nelems+k)*dst] on PE j, where i is this PE's team number, for k
// in 0..nelems-1. dst and sst count elements and must be at least 1,
// nelems must not be negative, and source and dest must reach every
// element the strides name. It returns the errors of Alltoall.
func Alltoalls[T RMA](team *Team, dest, source []T, dst, sst, nelems int) error {
	var z T
	return alltoalls("Alltoalls", 0, team, bytesOf(dest), bytesOf(source), dst, sst, nelems, int(unsafe.Sizeof(z)))
}

// AlltoallsMem is Alltoalls of bytes (shmem_alltoallsmem).
func AlltoallsMem(team *Team, dest, source []byte, dst, sst, nelems int) error {
	return alltoalls("AlltoallsMem", formBytes, team, dest, source, dst, sst, nelems, 1)
}

// AndReduce sets dest[i], on every PE of the team, to the bitwise and of
// source[i] over the team's PEs, for i in 0..len(source)-1
// (shmem_TYPENAME_and_reduce). nreduce is len(source), the same on every
// PE; dest must hold at least that many elements, and may be source itself
// (in place) but must not overlap it otherwise. Every PE gets the same
// result. It returns an error for an invalid team (ErrInvalidTeam), a dest
// shorter than source or arrays outside the symmetric heap
// (ErrInvalidArgument).
func AndReduce[T BitwiseReduce](team *Team, dest, source []T) error {
	return reduce("AndReduce", team, dest, source, andInto[T])
}

// OrReduce is AndReduce with bitwise or (shmem_TYPENAME_or_reduce).
func OrReduce[T BitwiseReduce](team *Team, dest, source []T) error {
	return reduce("OrReduce", team, dest, source, orInto[T])
}

// XorReduce is AndReduce with bitwise exclusive or
// (shmem_TYPENAME_xor_reduce).
func XorReduce[T BitwiseReduce](team *Team, dest, source []T) error {
	return reduce("XorReduce", team, dest, source, xorInto[T])
}

// MaxReduce is AndReduce with the maximum (shmem_TYPENAME_max_reduce), as
// Go's max computes it (a NaN among floating-point values gives NaN).
func MaxReduce[T Ordered](team *Team, dest, source []T) error {
	return reduce("MaxReduce", team, dest, source, maxInto[T])
}

// MinReduce is AndReduce with the minimum (shmem_TYPENAME_min_reduce), as
// Go's min computes it.
func MinReduce[T Ordered](team *Team, dest, source []T) error {
	return reduce("MinReduce", team, dest, source, minInto[T])
}

// SumReduce is AndReduce with the sum (shmem_TYPENAME_sum_reduce). Integer
// sums wrap around as Go's + does; the floating-point sums are computed in
// an order of the implementation's choosing, the same for every PE, so
// every PE gets the same bits.
func SumReduce[T Arith](team *Team, dest, source []T) error {
	return reduce("SumReduce", team, dest, source, sumInto[T])
}

// ProdReduce is SumReduce with the product (shmem_TYPENAME_prod_reduce).
func ProdReduce[T Arith](team *Team, dest, source []T) error {
	return reduce("ProdReduce", team, dest, source, prodInto[T])
}

func andInto[T BitwiseReduce](d, s []T) {
	s = s[:len(d)]
	for i := range d {
		d[i] &= s[i]
	}
}

func orInto[T BitwiseReduce](d, s []T) {
	s = s[:len(d)]
	for i := range d {
		d[i] |= s[i]
	}
}

func xorInto[T BitwiseReduce](d, s []T) {
	s = s[:len(d)]
	for i := range d {
		d[i] ^= s[i]
	}
}

func maxInto[T Ordered](d, s []T) {
	s = s[:len(d)]
	for i := range d {
		d[i] = max(d[i], s[i])
	}
}

func minInto[T Ordered](d, s []T) {
	s = s[:len(d)]
	for i := range d {
		d[i] = min(d[i], s[i])
	}
}

func sumInto[T Arith](d, s []T) {
	s = s[:len(d)]
	for i := range d {
		d[i] += s[i]
	}
}

func prodInto[T Arith](d, s []T) {
	s = s[:len(d)]
	for i := range d {
		d[i] *= s[i]
	}
}

// collTeam checks the team of a collective and returns its state: an
// error for the invalid team (nil), a panic before Init and for a
// destroyed team.
func collTeam(routine string, t *Team) (*collState, error) {
	mustInit(routine)
	switch {
	case t == nil:
		return nil, fmt.Errorf("shmem.%s: nil team (the splits return nil to the PEs outside the new team): %w", routine, ErrInvalidTeam)
	case t.destroyed:
		t.check(routine) // panics
	case t.npes < 1:
		return nil, fmt.Errorf("shmem.%s: %v: %w", routine, t, ErrInvalidTeam)
	}
	profCall(routine)
	return t.coll(routine), nil
}

// argErr makes an ErrInvalidArgument error of routine.
func argErr(routine, format string, args ...any) error {
	return fmt.Errorf("shmem.%s: %s: %w", routine, fmt.Sprintf(format, args...), ErrInvalidArgument)
}

// symOffset returns the heap offset of the symmetric bytes b (0 for none),
// or an error when they are not all inside the symmetric heap.
func symOffset(routine, arg string, b []byte) (uintptr, error) {
	if len(b) == 0 {
		return 0, nil
	}
	p := unsafe.Pointer(unsafe.SliceData(b))
	off := uintptr(p) - st.heapBase
	if off >= st.heapSize || uintptr(len(b)) > st.heapSize-off {
		return 0, argErr(routine, "%s (%d bytes at %p) is not inside the symmetric heap %#x..%#x", arg, len(b), p, st.heapBase, st.heapBase+st.heapSize)
	}
	return off, nil
}

// symOffsets is symOffset of dest and source.
func symOffsets(routine string, dest, source []byte) (doff, soff uintptr, err error) {
	if doff, err = symOffset(routine, "dest", dest); err != nil {
		return 0, 0, err
	}
	soff, err = symOffset(routine, "source", source)
	return doff, soff, err
}
