package shmem_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goshmem/goshmem/shmem"
	"github.com/goshmem/goshmem/shmemtest"
)

// stallJob runs body as every PE of jobs of each size in nps (those in
// quick only, unless the full matrix is asked for, when quick is set) over
// shared memory and tcp, with env added, expecting the job to end with exit
// (0: success) and its output to satisfy check.
func stallJob(t *testing.T, nps, quick []int, env []string, exit int, check func(t *testing.T, np int, out string), body func(t *testing.T, me, n int)) {
	t.Helper()
	for _, np := range nps {
		shmemtest.RunWith(t, shmemtest.Options{Shared: true, NPs: []int{np}, QuickNPs: quick, Transports: transports[:2], Env: env, WantExit: exit, Timeout: 60 * time.Second,
			Check: func(t *testing.T, out string) { check(t, np, out) }}, func(t *testing.T) {
			body(t, shmem.MyPE(), shmem.NPEs())
		})
	}
}

// TestCollectiveMismatch: a PE that calls another collective than the
// rest of its team (here Broadcast against SumReduce, as call #3 of
// TeamWorld) used to hang the job forever with no output. Now the job ends
// with a report that names every PE's call, whichever PE makes it: the
// first report ends the job (a PE slower to reach its own check, over tcp
// with 5 PEs on 2 cores, may be ended before it writes one), so that first
// report must be complete by itself.
func TestCollectiveMismatch(t *testing.T) {
	stallJob(t, []int{2, 3, 5}, []int{3}, nil, 2, func(t *testing.T, np int, out string) {
		others := "PE 0"
		if np > 2 {
			others = "PEs 0"
			for pe := 1; pe < np-1; pe++ {
				others += fmt.Sprintf(", %d", pe)
			}
		}
		want := regexp.MustCompile(fmt.Sprintf(`goshmem: PE \d+: shmem\.(SumReduce|Broadcast): collective mismatch on TeamWorld: %s: collective #3, SumReduce; PE %d: collective #3, Broadcast \(`,
			others, np-1))
		if !want.MatchString(out) {
			t.Errorf("no report names every PE's call (%v); output:\n%s", want, out)
		}
	}, func(t *testing.T, me, n int) {
		src, dst := calloc[int64](t, 4), calloc[int64](t, 4) // calls #1 and #2 of TeamWorld
		if me == n-1 {
			shmem.Broadcast(shmem.TeamWorld, dst, src, 0)
		} else {
			shmem.SumReduce(shmem.TeamWorld, dst, src)
		}
		t.Error("the mismatched collective returned")
	})
}

// TestStallReport: with GOSHMEM_STALL_REPORT, a PE whose wait lasts
// longer says where it waits, from which line of the program, and for
// whom or what: the others wait in a barrier for PE 0, which sleeps; PE 0
// then waits in WaitUntil for a put that comes late; PE 1 then waits in
// SetLock for the lock PE 0 holds. SIGUSR2 (what goshmem-run sends on
// SIGQUIT) makes a PE report at once.
func TestStallReport(t *testing.T) {
	stallJob(t, []int{3}, nil, []string{"GOSHMEM_STALL_REPORT=400ms"}, 0, func(t *testing.T, np int, out string) {
		for pe := 1; pe < np; pe++ {
			want := fmt.Sprintf("PE %d: stall report: waiting", pe)
			found := false
			for _, line := range strings.Split(out, "\n") {
				if strings.Contains(line, want) && strings.Contains(line, "in shmem.BarrierAll at stall_test.go:") &&
					strings.Contains(line, ", collective #") && strings.Contains(line, "of TeamWorld; waits for PE 0 (at its #") {
					found = true
				}
			}
			if !found {
				t.Errorf("PE %d did not report its wait in the barrier for PE 0, from its line; output:\n%s", pe, out)
			}
		}
		for _, want := range []*regexp.Regexp{
			regexp.MustCompile(`PE 0: stall report: waiting \S+ in shmem\.WaitUntil at stall_test\.go:\d+ \(shmem_test\.TestStallReport\.func\d+\) until \*0x[0-9a-f]+ \(heap offset 0x[0-9a-f]+\) CmpEQ 1 \(it holds 0; another PE's store`),
			regexp.MustCompile(`PE 1: stall report: waiting \S+ in shmem\.SetLock at stall_test\.go:\d+ \(shmem_test\.TestStallReport\.func\d+\) for the lock at 0x[0-9a-f]+ \(heap offset 0x[0-9a-f]+\), queued behind PE 0 \(which holds the lock`),
		} {
			if !want.MatchString(out) {
				t.Errorf("no line matching %q in the output:\n%s", want, out)
			}
		}
		if strings.Count(out, "PE 1: stall report: not waiting in the library") != 1 {
			t.Errorf("PE 1 did not answer SIGUSR2 once with 'not waiting in the library'; output:\n%s", out)
		}
	}, func(t *testing.T, me, n int) {
		flag := calloc[int64](t, 1)
		// The PEs start the waits together (started under load, they
		// may come seconds apart), and each wait lasts several times
		// GOSHMEM_STALL_REPORT, so that a loaded machine still reports it.
		shmem.BarrierAll()
		if me == 0 {
			time.Sleep(1500 * time.Millisecond)
		}
		shmem.BarrierAll()
		if me == 1 {
			syscall.Kill(os.Getpid(), syscall.SIGUSR2)
			time.Sleep(200 * time.Millisecond) // the report, outside the library
			time.Sleep(1500 * time.Millisecond)
			shmem.P(&flag[0], 1, 0)
		}
		if me == 0 {
			shmem.WaitUntil(&flag[0], shmem.CmpEQ, 1)
		}
		lock := calloc[int64](t, 1)
		if me == 0 {
			shmem.SetLock(&lock[0])
		}
		shmem.BarrierAll()
		switch me {
		case 0:
			time.Sleep(1500 * time.Millisecond)
			shmem.ClearLock(&lock[0])
		case 1:
			shmem.SetLock(&lock[0])
			shmem.ClearLock(&lock[0])
		}
		shmem.BarrierAll()
		shmem.Free(lock)
		shmem.Free(flag)
	})
}

// TestWaitsWithContext: the context.Context forms of the blocking waits
// give up when the context is done, and succeed when the wait ends first.
func TestWaitsWithContext(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		x := calloc[int64](t, 1)
		sig := calloc[uint64](t, 1)
		lock := calloc[int64](t, 1)
		short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if err := shmem.WaitUntilContext(short, &x[0], shmem.CmpEQ, 1); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("WaitUntilContext for a value nobody writes: %v", err)
		}
		if v, err := shmem.SignalWaitUntilContext(short, &sig[0], shmem.CmpGE, 1); !errors.Is(err, context.DeadlineExceeded) || v != 0 {
			t.Errorf("SignalWaitUntilContext for a signal nobody sends: %d, %v", v, err)
		}
		shmem.BarrierAll()
		shmem.P(&x[0], 1, (me+1)%n)
		shmem.AddSignal(&sig[0], 5, (me+1)%n)
		if err := shmem.WaitUntilContext(context.Background(), &x[0], shmem.CmpEQ, 1); err != nil {
			t.Errorf("WaitUntilContext for a put: %v", err)
		}
		if v, err := shmem.SignalWaitUntilContext(context.Background(), &sig[0], shmem.CmpGE, 5); err != nil || v != 5 {
			t.Errorf("SignalWaitUntilContext for a signal: %d, %v", v, err)
		}
		// The lock: PE 0 holds it while the others try with a deadline.
		if me == 0 {
			shmem.SetLock(&lock[0])
		}
		shmem.BarrierAll()
		if me != 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			if err := shmem.SetLockContext(ctx, &lock[0]); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("SetLockContext on a held lock: %v", err)
			}
			cancel()
		}
		shmem.BarrierAll()
		if me == 0 {
			shmem.ClearLock(&lock[0])
		}
		if err := shmem.SetLockContext(context.Background(), &lock[0]); err != nil {
			t.Errorf("SetLockContext on a free lock: %v", err)
		}
		shmem.ClearLock(&lock[0])
		shmem.BarrierAll()
		shmem.Free(lock)
		shmem.Free(sig)
		shmem.Free(x)
	})
}
