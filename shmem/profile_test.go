package shmem_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/goshmem/goshmem/internal/petest"
	"github.com/goshmem/goshmem/shmem"
	"github.com/goshmem/goshmem/shmemtest"
)

// TestProfile runs 3 PEs with GOSHMEM_PROFILE: each writes its CPU profile
// and a communication summary that counts what it did, per routine and
// target PE (in the job's numbering, for a context of a split team too),
// and counting allocates nothing.
func TestProfile(t *testing.T) {
	dir := os.Getenv("GOSHMEM_PROFILE") // set in the PEs
	if !petest.IsPE() {
		dir = t.TempDir()
	}
	const np = 3
	petest.RunWith(t, petest.Options{NPs: []int{np}, Env: []string{"GOSHMEM_PROFILE=" + dir},
		Check: func(t *testing.T, _ string) {
			for me := range np {
				if fi, err := os.Stat(filepath.Join(dir, shmem.CPUProfileFile(me))); err != nil || fi.Size() == 0 {
					t.Errorf("PE %d: CPU profile: %v (size %v)", me, err, fi)
				}
				b, err := os.ReadFile(filepath.Join(dir, shmem.CommSummaryFile(me)))
				if err != nil {
					t.Fatal(err)
				}
				var got shmem.CommSummary
				if err := json.Unmarshal(b, &got); err != nil {
					t.Fatalf("PE %d: %s: %v", me, shmem.CommSummaryFile(me), err)
				}
				next, prev := (me+1)%np, (me+np-1)%np
				want := map[string][]shmem.PEComm{
					"Put":            {{PE: next, Ops: 3, Bytes: 3 * 64}},
					"Get":            {{PE: prev, Ops: 2, Bytes: 2 * 32}},
					"P":              {{PE: next, Ops: 102, Bytes: 102 * 8}},
					"AtomicFetchAdd": {{PE: 0, Ops: 1, Bytes: 4}},
				}
				if me > 0 {
					// Team PE 0 of the team of PEs 1 and 2 is PE 1.
					want["CtxP"] = []shmem.PEComm{{PE: 1, Ops: 1, Bytes: 2}}
				}
				for _, r := range got.Routines {
					if w, ok := want[r.Routine]; ok {
						if diff := cmp.Diff(w, r.Targets); diff != "" {
							t.Errorf("PE %d: %s (-want +got):\n%s", me, r.Routine, diff)
						}
						delete(want, r.Routine)
					}
				}
				for r := range want {
					t.Errorf("PE %d: no %s in the summary %s", me, r, b)
				}
				if got.PE != me || got.NPEs != np {
					t.Errorf("PE %d: summary of PE %d of %d", me, got.PE, got.NPEs)
				}
			}
		}}, func(t *testing.T) {
		if err := shmem.Init(); err != nil {
			t.Fatal(err)
		}
		defer shmem.Finalize()
		me, n := shmem.MyPE(), shmem.NPEs()
		buf, err := shmem.Calloc[int64](8)
		if err != nil {
			t.Fatal(err)
		}
		word, err := shmem.Calloc[int32](1)
		if err != nil {
			t.Fatal(err)
		}
		small, err := shmem.Calloc[int16](1)
		if err != nil {
			t.Fatal(err)
		}
		src := make([]int64, 8)
		for range 3 {
			shmem.Put(buf, src, (me+1)%n)
		}
		for range 2 {
			shmem.Get(src[:4], buf[:4], (me+n-1)%n)
		}
		shmem.P(&buf[0], 1, (me+1)%n)
		if a := testing.AllocsPerRun(100, func() { shmem.P(&buf[0], 1, (me+1)%n) }); a != 0 {
			t.Errorf("P allocates %v times per call while profiling", a)
		}
		shmem.AtomicFetchAdd(&word[0], 1, 0)
		team, err := shmem.TeamSplitStrided(shmem.TeamWorld, 1, 1, 2, shmem.TeamConfig{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if team != nil {
			ctx, err := team.CreateCtx(0)
			if err != nil {
				t.Fatal(err)
			}
			shmem.CtxP(ctx, &small[0], 7, 0)
			ctx.Destroy()
			team.Destroy()
		}
		shmem.BarrierAll()
	})
}

// TestProfileCollectives: the collectives count the data of their
// definition, per call and member, and their calls, the same over shared
// memory and TCP; barriers and allocations count their calls only, and
// no routine counts the library's own traffic. Over shared memory 12
// MaxReduce on 4 PEs showed as 8 operations and Collect, FCollect and
// Broadcast did not show; Calloc and Free showed as bytes sent to PE 0.
func TestProfileCollectives(t *testing.T) {
	dir := os.Getenv("GOSHMEM_PROFILE") // set in the PEs
	if !petest.IsPE() {
		dir = t.TempDir()
	}
	const np, nr, nb = 4, 5, 6
	others := func(me, from int, ops, bytes uint64) []shmem.PEComm {
		c := []shmem.PEComm{}
		for pe := from; pe < np; pe++ {
			if pe != me {
				c = append(c, shmem.PEComm{PE: pe, Ops: ops, Bytes: bytes})
			}
		}
		return c
	}
	shmemtest.RunWith(t, shmemtest.Options{NPs: []int{np}, Env: []string{"GOSHMEM_PROFILE=" + dir},
		Check: func(t *testing.T, _ string) {
			for me := range np {
				b, err := os.ReadFile(filepath.Join(dir, shmem.CommSummaryFile(me)))
				if err != nil {
					t.Fatal(err)
				}
				var got shmem.CommSummary
				if err := json.Unmarshal(b, &got); err != nil {
					t.Fatalf("PE %d: %v", me, err)
				}
				broadcast := []shmem.PEComm{}
				if me == 1 { // the root
					broadcast = others(me, 0, 3, 3*nb*8)
				}
				want := []shmem.RoutineComm{
					{Routine: "Alltoall", Calls: 1, Targets: others(me, 0, 1, 3*8)},
					{Routine: "BarrierAll", Calls: 1, Targets: []shmem.PEComm{}},
					{Routine: "Broadcast", Calls: 3, Targets: broadcast},
					{Routine: "Calloc", Calls: 3, Targets: []shmem.PEComm{}},
					{Routine: "Collect", Calls: 2, Targets: others(me, 0, 2, uint64(2*(me+1)*8))},
					{Routine: "FCollect", Calls: 1, Targets: others(me, 0, 1, 2*8)},
					{Routine: "Free", Calls: 3, Targets: []shmem.PEComm{}},
					{Routine: "MaxReduce", Calls: 12, Targets: others(me, 0, 12, 12*nr*8)},
					{Routine: "SumInscan", Calls: 1, Targets: others(me, me+1, 1, 4*8)},
				}
				if diff := cmp.Diff(want, got.Routines); diff != "" {
					t.Errorf("PE %d: routines (-want +got):\n%s", me, diff)
				}
			}
		}}, func(t *testing.T) {
		me, n := shmem.MyPE(), shmem.NPEs()
		src, dest := calloc[int64](t, 64), calloc[int64](t, 64*n)
		w := shmem.TeamWorld
		for range 12 {
			if err := shmem.MaxReduce(w, dest[:nr], src[:nr]); err != nil {
				t.Fatal(err)
			}
		}
		for range 3 {
			if err := shmem.Broadcast(w, dest[:nb], src[:nb], 1); err != nil {
				t.Fatal(err)
			}
		}
		for range 2 {
			if err := shmem.Collect(w, dest[:n*n], src[:me+1]); err != nil {
				t.Fatal(err)
			}
		}
		for _, err := range []error{
			shmem.FCollect(w, dest[:2*n], src[:2]),
			shmem.Alltoall(w, dest[:3*n], src[:3*n]),
			shmem.SumInscan(w, dest[:4], src[:4]),
		} {
			if err != nil {
				t.Fatal(err)
			}
		}
		x := calloc[int64](t, 8)
		shmem.Free(x)
		shmem.BarrierAll()
		shmem.Free(dest)
		shmem.Free(src)
	})
}
