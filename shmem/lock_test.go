package shmem_test

import (
	"slices"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"

	"github.com/goshmem/goshmem/shmem"
)

// TestLockContention: every PE takes two locks (whose home PEs differ when
// there are several PEs) in turn, many times; inside, it checks that
// nobody else is inside and increments a counter on PE 0 with a get and a
// put, which loses increments unless the lock excludes. Every increment
// must be there, and every PE must have had the lock every time it asked.
func TestLockContention(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		const iters = 30
		locks := calloc[int64](t, 2)
		counter := calloc[int64](t, 2) // on PE 0
		inside := calloc[int64](t, 2)  // on PE 0
		got := calloc[int64](t, n)     // on PE 0: times each PE had a lock
		for i := 0; i < iters; i++ {
			k := i % 2
			shmem.SetLock(&locks[k])
			if in := shmem.AtomicFetchInc(&inside[k], 0); in != 0 {
				t.Errorf("lock %d: %d other PEs inside with this one", k, in)
			}
			v := shmem.G(&counter[k], 0)
			shmem.P(&counter[k], v+1, 0)
			shmem.AtomicAdd(&inside[k], -1, 0)
			shmem.AtomicInc(&got[me], 0)
			shmem.ClearLock(&locks[k])
		}
		shmem.BarrierAll()
		if me == 0 {
			want := []int64{int64(n * (iters / 2)), int64(n * (iters - iters/2))}
			if diff := cmp.Diff(want, counter); diff != "" {
				t.Errorf("counters incremented under the locks (-want +got):\n%s", diff)
			}
			wantGot := make([]int64, n)
			for i := range wantGot {
				wantGot[i] = iters
			}
			if diff := cmp.Diff(wantGot, got); diff != "" {
				t.Errorf("times each PE had a lock (-want +got):\n%s", diff)
			}
		}
		shmem.BarrierAll()
		shmem.Free(got)
		shmem.Free(inside)
		shmem.Free(counter)
		shmem.Free(locks)
	})
}

// TestLockHandOver: while PE 0 holds the lock, every other PE queues for it
// with SetLock; each must get it, after PE 0 let go, in turn.
func TestLockHandOver(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		lock := calloc[int64](t, 1)
		order := calloc[int64](t, n+1) // on PE 0: [0] next ticket, [1+i] the holder's ticket
		released := calloc[int64](t, 1)
		if me == 0 {
			shmem.SetLock(&lock[0])
		}
		shmem.BarrierAll()
		if me == 0 {
			shmem.AtomicInc(&order[0], 0)
			for pe := 1; pe < n; pe++ {
				shmem.P(&released[0], 1, pe)
			}
			shmem.ClearLock(&lock[0])
		} else {
			shmem.SetLock(&lock[0])
			if released[0] != 1 {
				t.Errorf("PE %d got the lock before PE 0 released it", me)
			}
			ticket := shmem.AtomicFetchInc(&order[0], 0)
			shmem.P(&order[1+me], ticket, 0)
			shmem.ClearLock(&lock[0])
		}
		shmem.BarrierAll()
		if me == 0 {
			if order[0] != int64(n) {
				t.Errorf("%d PEs had the lock, want %d", order[0], n)
			}
			tickets := append([]int64{}, order[2:]...)
			slices.Sort(tickets)
			want := make([]int64, n-1)
			for i := range want {
				want[i] = int64(i + 1)
			}
			if diff := cmp.Diff(want, tickets); diff != "" {
				t.Errorf("turns of PEs 1..%d, sorted (-want +got):\n%s", n-1, diff)
			}
		}
		shmem.BarrierAll()
		shmem.Free(released)
		shmem.Free(order)
		shmem.Free(lock)
	})
}

func TestTestLock(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		lock := calloc[int64](t, 1)
		won := calloc[int64](t, 1)
		if me == 0 {
			if !shmem.TestLock(&lock[0]) {
				t.Fatal("TestLock of a free lock failed")
			}
		}
		shmem.BarrierAll()
		if me != 0 && shmem.TestLock(&lock[0]) {
			t.Errorf("TestLock acquired a lock PE 0 holds")
		}
		shmem.BarrierAll()
		if me == 0 {
			shmem.ClearLock(&lock[0])
		}
		shmem.BarrierAll()
		// Everyone tries at once: exactly one gets it.
		ok := shmem.TestLock(&lock[0])
		if ok {
			shmem.AtomicInc(&won[0], 0)
		}
		shmem.BarrierAll()
		if me == 0 && won[0] != 1 {
			t.Errorf("%d PEs acquired the lock with TestLock at once, want 1", won[0])
		}
		shmem.BarrierAll()
		if ok {
			shmem.ClearLock(&lock[0])
		}
		// A lock released after TestLock works with SetLock.
		shmem.SetLock(&lock[0])
		shmem.ClearLock(&lock[0])
		shmem.BarrierAll()
		shmem.Free(won)
		shmem.Free(lock)
	})
}

func TestLockBadInputPanics(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		x := calloc[int64](t, 2)
		var local int64
		misaligned := (*int64)(unsafe.Add(unsafe.Pointer(&x[0]), 4))
		checkPanic(t, "SetLock of a Go variable", func() { shmem.SetLock(&local) }, "shmem.SetLock: lock")
		checkPanic(t, "TestLock misaligned", func() { shmem.TestLock(misaligned) }, "shmem.TestLock: lock")
		checkPanic(t, "ClearLock of a Go variable", func() { shmem.ClearLock(&local) }, "shmem.ClearLock: lock")
		shmem.BarrierAll()
		shmem.Free(x)
	})
}
