package shmem_test

import (
	"errors"
	"testing"

	"github.com/goshmem/goshmem/shmem"
	"github.com/goshmem/goshmem/shmemtest"
)

// checkErr fails unless err wraps want.
func checkErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: error %v, want one wrapping %v", what, err, want)
	}
}

func TestCollBeforeInit(t *testing.T) {
	if shmemtest.IsPE() {
		t.Skip("runs in the test process, before Init")
	}
	// Use before Init is a programming error: it panics, in the
	// collectives as everywhere.
	buf := make([]int64, 4)
	checkPanic(t, "Broadcast before Init", func() { shmem.Broadcast(shmem.TeamWorld, buf, buf, 0) }, "called before shmem.Init")
	checkPanic(t, "SumReduce before Init", func() { shmem.SumReduce(shmem.TeamWorld, buf, buf) }, "called before shmem.Init")
	checkPanic(t, "Collect before Init", func() { shmem.Collect(shmem.TeamWorld, buf, buf) }, "called before shmem.Init")
	checkPanic(t, "Broadcast on nil before Init", func() { shmem.Broadcast(nil, buf, buf, 0) }, "called before shmem.Init")
}

func TestCollErrors(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		a, b := calloc[int64](t, 4*n+8), calloc[int64](t, 4*n+8)
		local := make([]int64, 4*n)
		inv, arg := shmem.ErrInvalidTeam, shmem.ErrInvalidArgument

		var nilTeam *shmem.Team
		checkErr(t, "Broadcast on a nil team", shmem.Broadcast(nilTeam, b, a[:1], 0), inv)
		checkErr(t, "BroadcastMem on a nil team", shmem.BroadcastMem(nilTeam, nil, nil, 0), inv)
		checkErr(t, "Collect on a nil team", shmem.Collect(nilTeam, b, a[:1]), inv)
		checkErr(t, "FCollect on a nil team", shmem.FCollect(nilTeam, b, a[:1]), inv)
		checkErr(t, "Alltoall on a nil team", shmem.Alltoall(nilTeam, b, a[:n]), inv)
		checkErr(t, "Alltoalls on a nil team", shmem.Alltoalls(nilTeam, b, a, 1, 1, 1), inv)
		checkErr(t, "AndReduce on a nil team", shmem.AndReduce(nilTeam, b, a), inv)
		checkErr(t, "ProdReduce on a nil team", shmem.ProdReduce(nilTeam, b, a), inv)

		team, err := shmem.TeamSplitStrided(shmem.TeamWorld, 0, 1, n, shmem.TeamConfig{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		team.Destroy()
		// A destroyed team is a programming error: a panic.
		checkPanic(t, "Broadcast on a destroyed team", func() { shmem.Broadcast(team, b, a[:1], 0) }, "was destroyed")
		checkPanic(t, "MaxReduce on a destroyed team", func() { shmem.MaxReduce(team, b, a) }, "was destroyed")

		w := shmem.TeamWorld
		checkErr(t, "Broadcast from root -1", shmem.Broadcast(w, b, a[:1], -1), arg)
		checkErr(t, "Broadcast from root n", shmem.Broadcast(w, b, a[:1], n), arg)
		checkErr(t, "Broadcast into a short dest", shmem.Broadcast(w, b[:1], a[:2], 0), arg)
		checkErr(t, "Broadcast from a Go slice", shmem.Broadcast(w, b, local[:2], 0), arg)
		checkErr(t, "Broadcast into a Go slice", shmem.Broadcast(w, local, a[:2], 0), arg)
		checkErr(t, "FCollect into a short dest", shmem.FCollect(w, b[:2*n-1], a[:2]), arg)
		checkErr(t, "FCollect from a Go slice", shmem.FCollect(w, b, local[:2]), arg)
		checkErr(t, "Alltoall into a short dest", shmem.Alltoall(w, b[:2*n-1], a[:2*n]), arg)
		if n > 1 {
			checkErr(t, "Alltoall of a source that does not split", shmem.Alltoall(w, b, a[:n+1]), arg)
		}
		checkErr(t, "Alltoalls with dst 0", shmem.Alltoalls(w, b, a, 0, 1, 1), arg)
		checkErr(t, "Alltoalls with sst 0", shmem.Alltoalls(w, b, a, 1, 0, 1), arg)
		checkErr(t, "Alltoalls with nelems -1", shmem.Alltoalls(w, b, a, 1, 1, -1), arg)
		checkErr(t, "Alltoalls past source", shmem.Alltoalls(w, b, a[:2*n], 1, 2, 2), arg)
		checkErr(t, "Alltoalls past dest", shmem.Alltoalls(w, b[:2*n], a, 2, 1, 2), arg)
		checkErr(t, "SumReduce into a short dest", shmem.SumReduce(w, b[:2], a[:3]), arg)
		checkErr(t, "SumReduce with overlapping arrays", shmem.SumReduce(w, a[1:4], a[:3]), arg)
		checkErr(t, "XorReduce from a Go slice", shmem.XorReduce(w, b[:3], local[:3]), arg)

		// Collect finds a short dest only once the lengths are known, and
		// every PE then reports it; the team goes on working.
		checkErr(t, "Collect into a short dest", shmem.Collect(w, b[:2*n-1], a[:2]), arg)
		for i := range 2 {
			a[i] = int64(10*me + i)
		}
		if err := shmem.Collect(w, b[:2*n], a[:2]); err != nil {
			t.Fatalf("Collect after the error: %v", err)
		}
		for pe := range n {
			for i := range 2 {
				if got, want := b[2*pe+i], int64(10*pe+i); got != want {
					t.Fatalf("Collect after the error: dest[%d] = %d, want %d", 2*pe+i, got, want)
				}
			}
		}
		shmem.BarrierAll()
		shmem.Free(a)
		shmem.Free(b)
	})
}
