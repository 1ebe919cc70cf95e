package shmem_test

import (
	"runtime"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/goshmem/goshmem/shmem"
	"github.com/goshmem/goshmem/shmemtest"
)

// threadJob is job with InitThread(level) in place of Init: it runs body
// as every PE of jobs of each size in nps over each transport.
func threadJob(t *testing.T, level shmem.ThreadLevel, nps []int, body func(t *testing.T, me, n int)) {
	t.Helper()
	jobWith(t, jobOptions{nps: nps, thread: true, level: level}, body)
}

func TestInitThreadLevels(t *testing.T) {
	for _, level := range []shmem.ThreadLevel{shmem.ThreadSingle, shmem.ThreadFunneled, shmem.ThreadSerialized} {
		t.Run(level.String(), func(t *testing.T) {
			threadJob(t, level, []int{2}, func(t *testing.T, me, n int) {
				// A second InitThread keeps the level Init provided; its
				// Finalize is a barrier (OpenSHMEM 1.6).
				if got, err := shmem.InitThread(shmem.ThreadMultiple); err != nil || got != level {
					t.Errorf("second InitThread = %v, %v, want %v", got, err, level)
				}
				shmem.Finalize()
				x := calloc[int64](t, 1)
				shmem.AtomicAdd(&x[0], int64(me+1), (me+1)%n)
				shmem.BarrierAll()
				if want := int64((me-1+n)%n + 1); x[0] != want {
					t.Errorf("after AtomicAdd from the previous PE: %d, want %d", x[0], want)
				}
				shmem.BarrierAll()
				shmem.Free(x)
			})
		})
	}
}

func TestInitThreadInvalidLevel(t *testing.T) {
	if shmemtest.IsPE() {
		t.Skip("runs in the test process only")
	}
	if _, err := shmem.InitThread(shmem.ThreadMultiple + 1); err == nil {
		shmem.Finalize()
		t.Fatal("InitThread of an unknown level succeeded")
	}
	if shmem.QueryThread() != shmem.ThreadSingle {
		t.Errorf("QueryThread before Init = %v, want ThreadSingle", shmem.QueryThread())
	}
}

// TestThreadMultiple: with ThreadMultiple, goroutines locked to distinct OS
// threads use the default context at once: each puts its own pattern into
// its own slots on every PE, gets them back, and adds to counters shared
// by all goroutines of all PEs with fetching and non-fetching atomics. The
// counters and slots are then compared with the model. Run it with -race
// too.
func TestThreadMultiple(t *testing.T) {
	const goroutines, rounds, per = 4, 50, 5
	threadJob(t, shmem.ThreadMultiple, []int{1, 2, 3}, func(t *testing.T, me, n int) {
		slots := calloc[int64](t, n*goroutines*per)
		ctr := calloc[int64](t, 2)
		var wg sync.WaitGroup
		errs := make(chan string, goroutines)
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				base := (me*goroutines + g) * per
				src, back := make([]int64, per), make([]int64, per)
				for r := 1; r <= rounds; r++ {
					for pe := 0; pe < n; pe++ {
						for i := range src {
							src[i] = int64(me*1e6 + g*1e4 + r*10 + i)
						}
						shmem.Put(slots[base:base+per], src, pe)
						shmem.Quiet()
						shmem.Get(back, slots[base:base+per], pe)
						if !cmp.Equal(src, back) {
							errs <- "Get after Put and Quiet returned another goroutine's or round's data"
							return
						}
						shmem.AtomicFetchAdd(&ctr[0], int64(g+1), pe)
						shmem.AtomicInc(&ctr[1], pe)
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Error(e)
		}
		shmem.BarrierAll()
		// Every goroutine of every PE added g+1 and 1 to each PE's
		// counters once per round.
		wantCtr := []int64{int64(n * rounds * goroutines * (goroutines + 1) / 2), int64(n * rounds * goroutines)}
		if diff := cmp.Diff(wantCtr, ctr); diff != "" {
			t.Errorf("counters (-want +got):\n%s", diff)
		}
		want := make([]int64, len(slots))
		for pe := 0; pe < n; pe++ {
			for g := 0; g < goroutines; g++ {
				for i := 0; i < per; i++ {
					want[(pe*goroutines+g)*per+i] = int64(pe*1e6 + g*1e4 + rounds*10 + i)
				}
			}
		}
		if diff := cmp.Diff(want, slots); diff != "" {
			t.Errorf("slots (-want +got):\n%s", diff)
		}
		shmem.BarrierAll()
		shmem.Free(ctr)
		shmem.Free(slots)
	})
}
