package shmem_test

import (
	"fmt"
	"slices"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"

	"github.com/goshmem/goshmem/shmem"
)

// multiples returns 0, step, 2*step, ... (n values).
func multiples[T shmem.AMO](n int, step T) []T {
	s := make([]T, n)
	for i := range s {
		s[i] = T(i) * step
	}
	return s
}

// fetchAddModel checks the fetching adds and increments of T, blocking and
// non-blocking: every PE adds to counters on every PE; the old values the
// PEs fetch from one counter must be 0, v, 2v, ... in some order. Each PE
// sends what it fetched from a PE to that PE, which checks them.
func fetchAddModel[T shmem.AMO](t *testing.T, me, n int) {
	t.Helper()
	ctr := calloc[T](t, 6)
	seen := calloc[T](t, 4*n) // seen[k*n+from]: what from fetched from this PE's counter 2+k
	fetched := make([]T, 4*n)
	for pe := 0; pe < n; pe++ {
		shmem.AtomicAdd(&ctr[0], T(me+1), pe)
		shmem.AtomicInc(&ctr[1], pe)
		fetched[0*n+pe] = shmem.AtomicFetchAdd(&ctr[2], T(3), pe)
		fetched[1*n+pe] = shmem.AtomicFetchInc(&ctr[3], pe)
		shmem.AtomicFetchAddNBI(&fetched[2*n+pe], &ctr[4], T(5), pe)
		shmem.AtomicFetchIncNBI(&fetched[3*n+pe], &ctr[5], pe)
	}
	shmem.Quiet() // the NBI values are in place now
	for pe := 0; pe < n; pe++ {
		for k := 0; k < 4; k++ {
			shmem.P(&seen[k*n+me], fetched[k*n+pe], pe)
		}
	}
	shmem.BarrierAll()
	want := []T{T(n * (n + 1) / 2), T(n), T(3 * n), T(n), T(5 * n), T(n)}
	if diff := cmp.Diff(want, ctr); diff != "" {
		t.Fatalf("%T counters (-want +got):\n%s", ctr[0], diff)
	}
	for k, step := range []T{3, 1, 5, 1} {
		got := slices.Clone(seen[k*n : (k+1)*n])
		slices.Sort(got)
		if diff := cmp.Diff(multiples(n, step), got); diff != "" {
			t.Fatalf("%T: old values fetched from counter %d, sorted (-want +got):\n%s", ctr[0], 2+k, diff)
		}
	}
	shmem.BarrierAll()
	shmem.Free(seen)
	shmem.Free(ctr)
}

// swapModel checks AtomicSwap, AtomicSwapNBI, AtomicFetchNBI and
// AtomicCompareSwapNBI of T on a word of PE 0: the values swapped out and
// the last value in are every value once; exactly one compare-and-swap
// from the initial value wins.
func swapModel[T shmem.AMO](t *testing.T, me, n int) {
	t.Helper()
	w := calloc[T](t, 3)
	got := calloc[T](t, 2*n) // on PE 0: what each PE swapped out, blocking then NBI
	var old, oldNBI, cas T
	old = shmem.AtomicSwap(&w[0], T(me+1), 0)
	shmem.AtomicSwapNBI(&oldNBI, &w[1], T(me+1), 0)
	shmem.AtomicCompareSwapNBI(&cas, &w[2], 0, T(me+1), 0)
	shmem.Quiet()
	shmem.P(&got[me], old, 0)
	shmem.P(&got[n+me], oldNBI, 0)
	winners := calloc[int64](t, 1)
	if cas == 0 {
		shmem.AtomicInc(&winners[0], 0)
	}
	shmem.BarrierAll()
	if me == 0 {
		for k := 0; k < 2; k++ {
			all := append(slices.Clone(got[k*n:(k+1)*n]), w[k])
			slices.Sort(all)
			if diff := cmp.Diff(multiples(n+1, T(1)), all); diff != "" {
				t.Errorf("%T swap chain %d: values out and the last in, sorted (-want +got):\n%s", w[0], k, diff)
			}
		}
		if winners[0] != 1 || w[2] == 0 || int(w[2]) > n {
			t.Errorf("%T AtomicCompareSwapNBI: %d winners, value %v", w[0], winners[0], w[2])
		}
	}
	// AtomicFetchNBI of a value every PE knows.
	var f T
	shmem.AtomicFetchNBI(&f, &w[2], 0)
	shmem.Quiet()
	if want := shmem.G(&w[2], 0); f != want {
		t.Errorf("%T AtomicFetchNBI = %v, want %v", w[0], f, want)
	}
	// A failing compare-and-swap leaves the value and fetches it.
	shmem.AtomicCompareSwapNBI(&cas, &w[2], T(n+5), T(99), 0)
	shmem.Quiet()
	if cas != f {
		t.Errorf("%T failing AtomicCompareSwapNBI fetched %v, want %v", w[0], cas, f)
	}
	shmem.BarrierAll()
	shmem.Free(winners)
	shmem.Free(got)
	shmem.Free(w)
}

func TestAtomicsFetchAddSwapNBI(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		fetchAddModel[int](t, me, n)
		fetchAddModel[int32](t, me, n)
		fetchAddModel[int64](t, me, n)
		fetchAddModel[uint](t, me, n)
		fetchAddModel[uint32](t, me, n)
		fetchAddModel[uint64](t, me, n)
		fetchAddModel[uintptr](t, me, n)
		swapModel[int](t, me, n)
		swapModel[int32](t, me, n)
		swapModel[int64](t, me, n)
		swapModel[uint](t, me, n)
		swapModel[uint32](t, me, n)
		swapModel[uint64](t, me, n)
		swapModel[uintptr](t, me, n)
	})
}

// extNBI checks the non-blocking fetch and swap of the floating-point
// types.
func extNBI[T float32 | float64](t *testing.T, me, n int) {
	t.Helper()
	x := calloc[T](t, 1)
	to, from := (me+1)%n, (me-1+n)%n
	shmem.AtomicSet(&x[0], T(me)+0.25, to)
	shmem.BarrierAll()
	var f, old T
	shmem.AtomicFetchNBI(&f, &x[0], to)
	shmem.Quiet()
	if f != T(me)+0.25 { // what this PE set there
		t.Fatalf("%T AtomicFetchNBI = %v, want %v", f, f, T(me)+0.25)
	}
	shmem.BarrierAll()
	shmem.AtomicSwapNBI(&old, &x[0], T(-me)-0.5, to)
	shmem.Quiet()
	if old != T(me)+0.25 {
		t.Fatalf("%T AtomicSwapNBI fetched %v, want %v", old, old, T(me)+0.25)
	}
	shmem.BarrierAll()
	if x[0] != T(-from)-0.5 {
		t.Fatalf("%T after AtomicSwapNBI: %v, want %v", x[0], x[0], T(-from)-0.5)
	}
	shmem.BarrierAll()
	shmem.Free(x)
}

func TestAtomicsExtendedNBI(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		extNBI[float32](t, me, n)
		extNBI[float64](t, me, n)
	})
}

// bitwise checks the and, or and xor atomics of T, fetching, posted and
// non-blocking, against a model: PE i owns bit i and bit 16+i of a word on
// every PE.
func bitwise[T shmem.Bitwise](t *testing.T, me, n int) {
	t.Helper()
	bit := func(pe int) T { return T(1) << pe }
	pat := func(pe int) T { return T(1)<<pe | T(1)<<(16+pe) }
	all, allPat := T(0), T(0)
	for pe := 0; pe < n; pe++ {
		all |= bit(pe)
		allPat ^= pat(pe)
	}
	w := calloc[T](t, 3)
	fetched := make([]T, n)
	check := func(op string, want T) {
		t.Helper()
		shmem.BarrierAll()
		if diff := cmp.Diff([]T{want, want, want}, w); diff != "" {
			t.Fatalf("%T words after %s (-want +got):\n%s", w[0], op, diff)
		}
		shmem.BarrierAll()
	}
	// Or sets each PE's bit; the old value never has it.
	for pe := 0; pe < n; pe++ {
		if old := shmem.AtomicFetchOr(&w[0], bit(me), pe); old&bit(me) != 0 {
			t.Errorf("%T AtomicFetchOr: old value %#x has the bit of this PE", w[0], old)
		}
		shmem.AtomicOr(&w[1], bit(me), pe)
		shmem.AtomicFetchOrNBI(&fetched[pe], &w[2], bit(me), pe)
	}
	shmem.Quiet()
	for pe, old := range fetched {
		if old&bit(me) != 0 {
			t.Errorf("%T AtomicFetchOrNBI on PE %d: old value %#x has the bit of this PE", w[0], pe, old)
		}
	}
	check("or", all)
	// And clears it again; the old value always has it.
	for pe := 0; pe < n; pe++ {
		if old := shmem.AtomicFetchAnd(&w[0], ^bit(me), pe); old&bit(me) == 0 {
			t.Errorf("%T AtomicFetchAnd: old value %#x lacks the bit of this PE", w[0], old)
		}
		shmem.AtomicAnd(&w[1], ^bit(me), pe)
		shmem.AtomicFetchAndNBI(&fetched[pe], &w[2], ^bit(me), pe)
	}
	shmem.Quiet()
	for pe, old := range fetched {
		if old&bit(me) == 0 {
			t.Errorf("%T AtomicFetchAndNBI on PE %d: old value %#x lacks the bit of this PE", w[0], pe, old)
		}
	}
	check("and", 0)
	// Xor toggles two bits of each PE.
	for pe := 0; pe < n; pe++ {
		if old := shmem.AtomicFetchXor(&w[0], pat(me), pe); old&pat(me) != 0 {
			t.Errorf("%T AtomicFetchXor: old value %#x has bits of this PE", w[0], old)
		}
		shmem.AtomicXor(&w[1], pat(me), pe)
		shmem.AtomicFetchXorNBI(&fetched[pe], &w[2], pat(me), pe)
	}
	shmem.Quiet()
	for pe, old := range fetched {
		if old&pat(me) != 0 {
			t.Errorf("%T AtomicFetchXorNBI on PE %d: old value %#x has bits of this PE", w[0], pe, old)
		}
	}
	check("xor", allPat)
	shmem.Free(w)
}

func TestAtomicsBitwise(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		bitwise[uint](t, me, n)
		bitwise[uint32](t, me, n)
		bitwise[uint64](t, me, n)
		bitwise[int32](t, me, n)
		bitwise[int64](t, me, n)
	})
}

func TestAMOBadInputPanics(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		x := calloc[int64](t, 2)
		var local int64
		var f int64
		misaligned := (*int64)(unsafe.Add(unsafe.Pointer(&x[0]), 4))
		for _, c := range []struct {
			name string
			fn   func()
			want string
		}{
			{"misaligned", func() { shmem.AtomicFetchAdd(misaligned, 1, 0) }, "shmem.AtomicFetchAdd: dest"},
			{"misaligned says so", func() { shmem.AtomicXor(misaligned, 1, 0) }, "is not aligned to 8 bytes"},
			{"nil fetch", func() { shmem.AtomicFetchIncNBI(nil, &x[0], 0) }, "shmem.AtomicFetchIncNBI: fetch is nil"},
			{"local dest", func() { shmem.AtomicFetchOrNBI(&f, &local, 1, 0) }, "shmem.AtomicFetchOrNBI: dest"},
			{"PE n", func() { shmem.AtomicFetchAnd(&x[0], 1, n) }, fmt.Sprintf("shmem.AtomicFetchAnd: PE %d is not a PE of the job", n)},
			{"PE -1", func() { shmem.AtomicSwapNBI(&f, &x[0], 1, -1) }, "shmem.AtomicSwapNBI: PE -1"},
		} {
			checkPanic(t, c.name, c.fn, c.want)
		}
		shmem.BarrierAll()
		shmem.Free(x)
	})
}
