package shmem_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unsafe"

	"github.com/goshmem/goshmem/shmem"
	"github.com/goshmem/goshmem/shmemtest"
)

// lengthCase is a collective call in which the team's last PE passes
// other arguments than the others.
type lengthCase struct {
	name string
	// call makes this PE's call into dest (its own part: the first own
	// elements, the rest holding the sentinel), last telling whether this
	// PE is the one that differs.
	call func(dest, src []int64, last bool) (own int, err error)
	// want are what every PE's error says (%[1]d: the job's last PE).
	want []string
	// rootOnly: without SHMEM_DEBUG, the root of a broadcast may not find
	// the difference (it reads no other PE's arguments), and on one node
	// only the PEs whose arguments differ from the root's find it (the
	// others read the root's only).
	rootOnly bool
}

// lengthCases are the collectives that take lengths, each called with a
// length (or element type, or stride) of its own on the last PE.
func lengthCases(n int) []lengthCase {
	w := shmem.TeamWorld
	pick := func(last bool, others, mine int) int {
		if last {
			return mine
		}
		return others
	}
	return []lengthCase{
		{"SumReduce, longer on the last PE",
			func(d, s []int64, last bool) (int, error) {
				k := pick(last, 4, 12)
				return k, shmem.SumReduce(w, d[:k], s[:k])
			},
			[]string{"PE %[1]d: 12 elements of 8 bytes", ": 4 elements of 8 bytes"}, false},
		{"SumReduce, shorter on the last PE",
			func(d, s []int64, last bool) (int, error) {
				k := pick(last, 12, 3)
				return k, shmem.SumReduce(w, d[:k], s[:k])
			},
			[]string{"PE %[1]d: 3 elements of 8 bytes", ": 12 elements of 8 bytes"}, false},
		// On one node a short vector and a long one take different
		// algorithms (slots, sources): the lengths still meet.
		{"MaxReduce, short against long",
			func(d, s []int64, last bool) (int, error) {
				k := pick(last, 8, 3000)
				return k, shmem.MaxReduce(w, d[:k], s[:k])
			},
			[]string{"PE %[1]d: 3000 elements of 8 bytes", ": 8 elements of 8 bytes"}, false},
		{"ProdReduce, none against some",
			func(d, s []int64, last bool) (int, error) {
				k := pick(last, 5, 0)
				return k, shmem.ProdReduce(w, d[:k], s[:k])
			},
			[]string{"PE %[1]d: 0 elements of 8 bytes", ": 5 elements of 8 bytes"}, false},
		{"OrReduce, same bytes of another type",
			func(d, s []int64, last bool) (int, error) {
				if last {
					return 4, shmem.OrReduce(w, asInt32(d[:4]), asInt32(s[:4]))
				}
				return 4, shmem.OrReduce(w, d[:4], s[:4])
			},
			[]string{"PE %[1]d: 8 elements of 4 bytes", ": 4 elements of 8 bytes"}, false},
		{"Broadcast, longer on the root",
			func(d, s []int64, last bool) (int, error) {
				k := pick(last, 6, 4) // PE 0 is the root
				return k, shmem.Broadcast(w, d[:k], s[:k], 0)
			},
			[]string{"PE %[1]d", "6 elements of 8 bytes, root 0", "4 elements of 8 bytes, root 0"}, true},
		{"Broadcast, shorter on the root",
			func(d, s []int64, last bool) (int, error) {
				k := pick(last, 2, 5)
				return k, shmem.Broadcast(w, d[:k], s[:k], 0)
			},
			[]string{"PE %[1]d", "2 elements of 8 bytes, root 0", "5 elements of 8 bytes, root 0"}, true},
		// Across nodes a short broadcast pushes its data with the keys,
		// a long one moves it after them.
		{"Broadcast, past the push on the last PE",
			func(d, s []int64, last bool) (int, error) {
				k := pick(last, 4, 700)
				return k, shmem.Broadcast(w, d[:k], s[:k], 0)
			},
			[]string{"PE %[1]d", "4 elements of 8 bytes, root 0", "700 elements of 8 bytes, root 0"}, true},
		{"FCollect, short against long",
			func(d, s []int64, last bool) (int, error) {
				k := pick(last, 2, 600)
				return n * k, shmem.FCollect(w, d[:n*k], s[:k])
			},
			[]string{"PE %[1]d: 600 elements of 8 bytes", ": 2 elements of 8 bytes"}, false},
		{"FCollect",
			func(d, s []int64, last bool) (int, error) {
				k := pick(last, 2, 3)
				return n * k, shmem.FCollect(w, d[:n*k], s[:k])
			},
			[]string{"PE %[1]d: 3 elements of 8 bytes", ": 2 elements of 8 bytes"}, false},
		{"Collect of another element type",
			func(d, s []int64, last bool) (int, error) {
				if last {
					return 2 * n, shmem.Collect(w, asInt32(d[:2*n]), asInt32(s[:2]))
				}
				return 2 * n, shmem.Collect(w, d[:2*n], s[:2])
			},
			[]string{"PE %[1]d: elements of 4 bytes", ": elements of 8 bytes"}, false},
		{"Alltoall",
			func(d, s []int64, last bool) (int, error) {
				k := pick(last, 2, 3) * n
				return k, shmem.Alltoall(w, d[:k], s[:k])
			},
			[]string{fmt.Sprintf("PE %s: %d elements of 8 bytes", "%[1]d", 3*n), fmt.Sprintf(": %d elements of 8 bytes", 2*n)}, false},
		{"Alltoalls, other strides",
			func(d, s []int64, last bool) (int, error) {
				st := pick(last, 1, 2)
				return 2 * n * st, shmem.Alltoalls(w, d[:2*n*st], s[:2*n], st, 1, 2)
			},
			[]string{"PE %[1]d: 2 elements of 8 bytes, strides dst 2 and sst 1", "strides dst 1 and sst 1"}, false},
		{"SumInscan",
			func(d, s []int64, last bool) (int, error) {
				k := pick(last, 4, 5)
				return k, shmem.SumInscan(w, d[:k], s[:k])
			},
			[]string{"PE %[1]d: 5 elements of 8 bytes", ": 4 elements of 8 bytes"}, false},
	}
}

// TestCollDifferentLengths: a collective whose PEs pass different lengths
// (or element types, or strides) returns an error wrapping
// ErrInvalidArgument on every PE, naming the PEs and their arguments, and
// writes nothing past any PE's own length; the team then works on. The
// reductions gave wrong answers silently (over tcp, PE 0 got 10 where 30
// was right and wrote past its length), and a PE of a short vector and one
// of a long one hung on one node. With 4 PEs across nodes, PE 2 hears of
// the last PE's arguments only through what the root of a broadcast
// would forward, which the PE before the root relays now that the root
// does not wait.
func TestCollDifferentLengths(t *testing.T) {
	jobWith(t, jobOptions{nps: []int{3, 4}}, func(t *testing.T, me, n int) {
		checkLengthCases(t, me, n, false)
	})
}

// TestDebugCollDifferentLengths: with SHMEM_DEBUG, the root of a
// broadcast finds different lengths too, on one node and across nodes.
func TestDebugCollDifferentLengths(t *testing.T) {
	debugJobOver(t, 4, []shmemtest.Transport{shmemtest.SharedMemory, shmemtest.TCP}, nil, func(t *testing.T, me, n int) {
		checkLengthCases(t, me, n, true)
	})
}

func checkLengthCases(t *testing.T, me, n int, debug bool) {
	const size = 3000 * 3
	src, dest := calloc[int64](t, size), calloc[int64](t, size)
	defer shmem.Free(dest)
	defer shmem.Free(src)
	last := me == n-1
	for _, c := range lengthCases(n) {
		for i := range src {
			src[i] = int64(me + 1)
			dest[i] = sentinel
		}
		own, err := c.call(dest, src, last)
		for i := own; i < len(dest); i++ {
			if dest[i] != sentinel {
				t.Fatalf("%s: dest[%d] = %d, past this PE's %d elements, was written", c.name, i, dest[i], own)
			}
		}
		if err == nil && c.rootOnly && !debug && (me == 0 || !last && sameNode()) {
			continue
		}
		if !errors.Is(err, shmem.ErrInvalidArgument) {
			t.Fatalf("%s: %v, want an error wrapping ErrInvalidArgument", c.name, err)
		}
		for _, w := range c.want {
			if w := strings.ReplaceAll(w, "%[1]d", fmt.Sprint(n-1)); !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v\ndoes not say %q", c.name, err, w)
			}
		}
	}
	// The team works on: a reduction of matching lengths is right.
	for i := range 5 {
		src[i] = int64(me + i)
	}
	if err := shmem.SumReduce(shmem.TeamWorld, dest[:5], src[:5]); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if want := int64(n*i + n*(n-1)/2); dest[i] != want {
			t.Fatalf("SumReduce after the errors: dest[%d] = %d, want %d", i, dest[i], want)
		}
	}
	shmem.BarrierAll()
}

// asInt32 views s as twice as many int32s.
func asInt32(s []int64) []int32 {
	return unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(s))), 2*len(s))
}

// TestSameNodeCollectivesAllocateNothing: the collectives on one node,
// with the checks of their arguments, allocate nothing: reductions of each
// algorithm (in the slots, whole, sliced), broadcast, fcollect, alltoall
// and a scan.
func TestSameNodeCollectivesAllocateNothing(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		if !sameNode() {
			t.Skip("the allocation-free collectives are those on one node; this variant uses the network")
		}
		src, dest := calloc[int64](t, 3000*n), calloc[int64](t, 3000*n)
		w := shmem.TeamWorld
		for _, c := range []struct {
			name string
			fn   func()
		}{
			{"SumReduce of 8", func() { shmem.SumReduce(w, dest[:8], src[:8]) }},
			{"SumReduce of 1000", func() { shmem.SumReduce(w, dest[:1000], src[:1000]) }},
			{"SumReduce of 3000", func() { shmem.SumReduce(w, dest[:3000], src[:3000]) }},
			{"Broadcast", func() { shmem.Broadcast(w, dest[:8], src[:8], 0) }},
			{"FCollect", func() { shmem.FCollect(w, dest[:8*n], src[:8]) }},
			{"Alltoall", func() { shmem.Alltoall(w, dest[:8*n], src[:8*n]) }},
			{"SumInscan", func() { shmem.SumInscan(w, dest[:8], src[:8]) }},
		} {
			if a := allocsPerCall(c.fn); a != 0 {
				t.Errorf("%s allocates %v times per call", c.name, a)
			}
		}
		shmem.BarrierAll()
		shmem.Free(dest)
		shmem.Free(src)
	})
}
