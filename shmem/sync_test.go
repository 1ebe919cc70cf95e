package shmem_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/goshmem/goshmem/shmem"
)

// waitArrays checks the wait and test routines on arrays of T: ivars has
// one element per PE, which that PE writes on every PE, and two more that
// the status mask excludes and nobody writes.
func waitArrays[T shmem.Point](t *testing.T, me, n int) {
	t.Helper()
	ivars := calloc[T](t, n+2)
	status := make([]int, n+2)
	status[n], status[n+1] = -1, 7 // any nonzero value excludes
	indices := make([]int, n+2)
	want := make([]T, n+2) // the values once every PE wrote
	for i := 0; i < n; i++ {
		want[i] = T(i + 1)
	}
	zeros := make([]T, n+2)
	name := func(routine string) string { return routine + "[" + typeName(ivars) + "]" }

	// Nothing written yet.
	if i := shmem.TestAny(ivars, status, shmem.CmpNE, 0); i != -1 {
		t.Errorf("%s before any write = %d, want -1", name("TestAny"), i)
	}
	if k := shmem.TestSome(ivars, indices, status, shmem.CmpNE, 0); k != 0 {
		t.Errorf("%s before any write = %d, want 0", name("TestSome"), k)
	}
	if shmem.TestAll(ivars, status, shmem.CmpNE, 0) {
		t.Errorf("%s(!= 0) before any write = true", name("TestAll"))
	}
	if !shmem.TestAllVector(ivars, status, shmem.CmpEQ, zeros) {
		t.Errorf("%s(== 0) before any write = false", name("TestAllVector"))
	}
	shmem.BarrierAll()

	for pe := 0; pe < n; pe++ {
		shmem.P(&ivars[me], T(me+1), pe)
	}
	// Whatever has arrived when they return must satisfy them.
	k := shmem.WaitUntilSome(ivars, indices, status, shmem.CmpNE, 0)
	if k < 1 || k > n || !slices.IsSorted(indices[:k]) {
		t.Fatalf("%s returned %d, indices %v", name("WaitUntilSome"), k, indices[:max(k, 0)])
	}
	for _, i := range indices[:k] {
		if i >= n || ivars[i] != T(i+1) {
			t.Fatalf("%s gave index %d, where ivars holds %v", name("WaitUntilSome"), i, ivars)
		}
	}
	if i := shmem.WaitUntilAny(ivars, status, shmem.CmpNE, 0); i < 0 || i >= n || ivars[i] != T(i+1) {
		t.Fatalf("%s = %d, ivars %v", name("WaitUntilAny"), i, ivars)
	}
	shmem.WaitUntilAll(ivars, status, shmem.CmpNE, 0)
	if diff := cmp.Diff(want, ivars); diff != "" {
		t.Fatalf("%s returned with (-want +got):\n%s", name("WaitUntilAll"), diff)
	}

	// Everything written: the vector forms against the model.
	shmem.WaitUntilAllVector(ivars, status, shmem.CmpEQ, want)
	if i := shmem.WaitUntilAnyVector(ivars, status, shmem.CmpGE, want); i != 0 {
		t.Errorf("%s(>=) = %d, want 0", name("WaitUntilAnyVector"), i)
	}
	if k := shmem.WaitUntilSomeVector(ivars, indices, status, shmem.CmpEQ, want); k != n || !slices.Equal(indices[:k], seq(n)) {
		t.Errorf("%s(==) = %d, indices %v, want %d, %v", name("WaitUntilSomeVector"), k, indices[:k], n, seq(n))
	}
	if !shmem.TestAllVector(ivars, status, shmem.CmpLE, want) {
		t.Errorf("%s(<=) = false", name("TestAllVector"))
	}
	if i := shmem.TestAnyVector(ivars, status, shmem.CmpGT, want); i != -1 {
		t.Errorf("%s(>) = %d, want -1", name("TestAnyVector"), i)
	}
	// Without a status mask the unwritten elements count.
	if k := shmem.TestSomeVector(ivars, indices, nil, shmem.CmpEQ, want); k != n+2 {
		t.Errorf("%s(==, no mask) = %d, want %d", name("TestSomeVector"), k, n+2)
	}
	if shmem.TestAll(ivars, nil, shmem.CmpNE, 0) {
		t.Errorf("%s(!= 0, no mask) = true with unwritten elements", name("TestAll"))
	}
	if i := shmem.TestAny(ivars, nil, shmem.CmpEQ, 0); i != n {
		t.Errorf("%s(== 0, no mask) = %d, want %d", name("TestAny"), i, n)
	}
	if k := shmem.TestSome(ivars, indices, status, shmem.CmpGT, T(n/2)); k != n-n/2 || !slices.Equal(indices[:k], seq(n)[n/2:]) {
		t.Errorf("%s(> %d) = %d, indices %v", name("TestSome"), n/2, k, indices[:k])
	}

	// Nothing to wait for: every element excluded, or none at all.
	ones := slices.Repeat([]int{1}, n+2)
	if i := shmem.WaitUntilAny(ivars, ones, shmem.CmpEQ, 42); i != -1 {
		t.Errorf("%s with everything excluded = %d, want -1", name("WaitUntilAny"), i)
	}
	if k := shmem.WaitUntilSome(ivars, indices, ones, shmem.CmpEQ, 42); k != 0 {
		t.Errorf("%s with everything excluded = %d, want 0", name("WaitUntilSome"), k)
	}
	shmem.WaitUntilAll(ivars, ones, shmem.CmpEQ, 42)
	shmem.WaitUntilAllVector(ivars[:0], nil, shmem.CmpEQ, nil)
	if i := shmem.WaitUntilAnyVector(nil, nil, shmem.CmpEQ, []T{}); i != -1 {
		t.Errorf("%s of nothing = %d, want -1", name("WaitUntilAnyVector"), i)
	}
	if k := shmem.WaitUntilSomeVector(ivars[:0], nil, nil, shmem.CmpEQ, nil); k != 0 {
		t.Errorf("%s of nothing = %d, want 0", name("WaitUntilSomeVector"), k)
	}
	if !shmem.TestAll(ivars, ones, shmem.CmpEQ, 42) || !shmem.TestAll[T](nil, nil, shmem.CmpEQ, 42) {
		t.Errorf("%s with nothing to test = false", name("TestAll"))
	}
	if i := shmem.TestAny(ivars, ones, shmem.CmpNE, 42); i != -1 {
		t.Errorf("%s with everything excluded = %d", name("TestAny"), i)
	}
	shmem.BarrierAll()
	shmem.Free(ivars)
}

// seq returns 0, 1, ..., n-1.
func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

func typeName[T any](s []T) string {
	var z T
	return fmt.Sprintf("%T", z)
}

func TestWaitTestArrays(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		waitArrays[int16](t, me, n)
		waitArrays[uint16](t, me, n)
		waitArrays[int32](t, me, n)
		waitArrays[uint32](t, me, n)
		waitArrays[int64](t, me, n)
		waitArrays[uint64](t, me, n)
		waitArrays[int](t, me, n)
		waitArrays[uint](t, me, n)
		waitArrays[uintptr](t, me, n)
	})
}

// TestFenceAndQuietOrderPuts: data put before a Fence, or completed by
// Quiet, is in place when a flag put after it is seen.
func TestFenceAndQuietOrderPuts(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		const rounds, per = 8, 20_000
		to, from := (me+1)%n, (me-1+n)%n
		data := calloc[int64](t, rounds*per)
		flags := calloc[int64](t, 2)
		srcs := make([][]int64, rounds)
		for r := 1; r <= rounds; r++ {
			srcs[r-1] = make([]int64, per)
			for i := range srcs[r-1] {
				srcs[r-1][i] = int64(me*1_000_000 + r*per + i)
			}
			slot := data[(r-1)*per : r*per]
			if r%2 == 1 {
				shmem.Put(slot, srcs[r-1], to)
				shmem.Fence()
				shmem.P(&flags[0], int64(r), to)
			} else {
				shmem.PutNBI(slot, srcs[r-1], to)
				shmem.Quiet()
				shmem.AtomicSet(&flags[0], int64(r), to)
			}
		}
		// Each flag value seen covers the data of its round and those before.
		checked := 0
		for checked < rounds {
			shmem.WaitUntil(&flags[0], shmem.CmpGT, int64(checked))
			seen := int(shmem.AtomicFetch(&flags[0], me))
			for r := checked + 1; r <= seen; r++ {
				for i, v := range data[(r-1)*per : r*per] {
					if want := int64(from*1_000_000 + r*per + i); v != want {
						t.Fatalf("round %d: flag %d seen, element %d = %d, want %d", r, seen, i, v, want)
					}
				}
			}
			checked = seen
		}
		shmem.BarrierAll()
		shmem.Free(flags)
		shmem.Free(data)
	})
}

func TestSyncBadInputPanics(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		x := calloc[int32](t, 4)
		local := make([]int32, 4)
		idx := make([]int, 4)
		for _, c := range []struct {
			name string
			fn   func()
			want string
		}{
			{"status too short", func() { shmem.WaitUntilAll(x, []int{0}, shmem.CmpEQ, 0) }, "shmem.WaitUntilAll: status has 1 elements, ivars 4"},
			{"indices too short", func() { shmem.TestSome(x, idx[:3], nil, shmem.CmpEQ, 0) }, "shmem.TestSome: indices has room for 3 elements, fewer than the 4 of ivars"},
			{"values too short", func() { shmem.TestAllVector(x, nil, shmem.CmpEQ, local[:2]) }, "shmem.TestAllVector: cmpValues has 2 elements, ivars 4"},
			{"values nil", func() { shmem.WaitUntilAnyVector(x, nil, shmem.CmpEQ, nil) }, "shmem.WaitUntilAnyVector: cmpValues has 0 elements"},
			{"local ivars", func() { shmem.WaitUntilSome(local, idx, nil, shmem.CmpEQ, 0) }, "shmem.WaitUntilSome: ivars"},
			{"bad comparison", func() { shmem.TestAny(x, nil, shmem.Cmp(9), 0) }, "shmem.TestAny: invalid comparison 9"},
			{"bad comparison of one", func() { shmem.WaitUntil(&x[0], shmem.Cmp(-1), 0) }, "shmem.WaitUntil: invalid comparison -1"},
		} {
			checkPanic(t, c.name, c.fn, c.want)
		}
		shmem.BarrierAll()
		shmem.Free(x)
	})
}
