package shmem_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/goshmem/goshmem/shmem"
)

// scanVal is element j of the source of the team's PE i in call it.
func scanVal(i, j, it int) int { return 1 + (3*i+j+it)%7 }

// checkScan runs SumInscan and SumExscan of T over team, with sources of
// each length in lens, apart and in place, and compares dest with the
// prefix sums of the model; the elements of dest past the source stay.
func checkScan[T shmem.Arith](t *testing.T, what string, team *shmem.Team, bufs collBufs[T], lens []int) {
	t.Helper()
	me := team.MyPE()
	for it, nr := range lens {
		for _, c := range []struct {
			name      string
			exclusive bool
			inPlace   bool
		}{{"SumInscan", false, false}, {"SumExscan", true, false}, {"SumInscan in place", false, true}, {"SumExscan in place", true, true}} {
			src, dst := bufs.a[:nr], bufs.b
			if c.inPlace {
				dst = bufs.a
			}
			fill(dst, func(int) int { return sentinel })
			fill(src, func(j int) int { return scanVal(me, j, it) })
			var err error
			if c.exclusive {
				err = shmem.SumExscan(team, dst[:nr], src)
			} else {
				err = shmem.SumInscan(team, dst[:nr], src)
			}
			if err != nil {
				t.Fatalf("%s: %s of %d: %v", what, c.name, nr, err)
			}
			want := make([]T, nr)
			last := me
			if c.exclusive {
				last = me - 1
			}
			for j := range want {
				s := 0
				for i := 0; i <= last; i++ {
					s += scanVal(i, j, it)
				}
				want[j] = num[T](s)
			}
			checkSlice(t, fmt.Sprintf("%s: %s of %d elements on team PE %d", what, c.name, nr, me), want, dst[:nr])
			if !c.inPlace {
				checkUntouched(t, what+": "+c.name, dst, nr)
			}
			team.Sync() // every PE has read before the next call writes
		}
	}
}

// TestScans: the OpenSHMEM 1.6 scans over TeamWorld, a team of every other
// PE, and the whole job in reverse order, for several types and lengths.
func TestScans(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		const most = 3000
		i64, f64 := newCollBufs[int64](t, most+8), newCollBufs[float64](t, most+8)
		c128, u8 := newCollBufs[complex128](t, most+8), newCollBufs[uint8](t, most+8)
		lens := []int{1, 7, 300, most}
		rev, err := shmem.TeamSplitStrided(shmem.TeamWorld, n-1, -1, n, shmem.TeamConfig{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		evens, err := shmem.TeamSplitStrided(shmem.TeamWorld, 0, 2, (n+1)/2, shmem.TeamConfig{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			what string
			team *shmem.Team
		}{{"TeamWorld", shmem.TeamWorld}, {"the whole job reversed", rev}, {"the even PEs", evens}} {
			if c.team == nil {
				continue
			}
			checkScan(t, c.what, c.team, i64, lens)
			checkScan(t, c.what, c.team, f64, lens[:2])
			checkScan(t, c.what, c.team, c128, lens[:2])
			checkScan(t, c.what, c.team, u8, lens[:3])
		}
		shmem.BarrierAll()
		// Errors, alike on every PE and without communicating.
		if err := shmem.SumInscan(shmem.TeamWorld, i64.b[:3], i64.a[:4]); !errors.Is(err, shmem.ErrInvalidArgument) {
			t.Errorf("SumInscan with a short dest: %v", err)
		}
		if err := shmem.SumExscan(shmem.TeamWorld, i64.a[1:5], i64.a[:4]); !errors.Is(err, shmem.ErrInvalidArgument) {
			t.Errorf("SumExscan with overlapping arrays: %v", err)
		}
		if err := shmem.SumInscan(nil, i64.b, i64.a); !errors.Is(err, shmem.ErrInvalidTeam) {
			t.Errorf("SumInscan on the invalid team: %v", err)
		}
		if err := shmem.SumExscan(shmem.TeamWorld, i64.b[:2], make([]int64, 2)); !errors.Is(err, shmem.ErrInvalidArgument) {
			t.Errorf("SumExscan from a source outside the heap: %v", err)
		}
		rev.Destroy()
		evens.Destroy()
		shmem.BarrierAll()
		for _, f := range []func(){i64.free, f64.free, c128.free, u8.free} {
			f()
		}
	})
}
