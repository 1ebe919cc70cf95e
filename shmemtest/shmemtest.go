// Package shmemtest runs tests of SPMD code as the PEs of real goshmem
// jobs, from a plain `go test`.
//
// A test calls Run (or RunWith) with a body. In the test process, Run
// starts, for every job size and transport asked for, a job whose PEs are
// the test binary itself, started by the launcher goshmem-run uses, and
// restricted to the calling test; each PE initializes the library, runs the
// body with a *testing.T of its own, and finalizes. The job's output is
// tagged by PE ("[pe 2] "); a PE whose body fails ends the job at once, and
// the parent test fails, first listing each failing PE's messages with its
// number, then the whole output. A job that runs past its timeout fails
// the test, listing where each PE waited (its stall report), and so does
// one that leaves goshmem segments in /dev/shm.
//
//	func TestRing(t *testing.T) {
//		shmemtest.Run(t, []int{2, 4}, func(t *testing.T) {
//			me, n := shmem.MyPE(), shmem.NPEs()
//			x, err := shmem.Calloc[int64](1)
//			if err != nil {
//				t.Fatal(err)
//			}
//			shmem.P(&x[0], int64(me), (me+1)%n)
//			shmem.BarrierAll()
//			if want := int64((me + n - 1) % n); x[0] != want {
//				t.Errorf("got %d, want %d", x[0], want)
//			}
//			shmem.Free(x)
//		})
//	}
//
// The subtests are named after the transport and the job size
// ("TestRing/sm/np=4"), so `go test -run 'TestRing/tcp/np=2'` runs one job.
// Code outside the body runs in the test process and in every PE alike;
// IsPE tells them apart.
package shmemtest

import (
	"cmp"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/petest"
	"github.com/goshmem/goshmem/shmem"
)

// Transport is a way the PEs of a job reach each other: a name for the
// subtests and the environment that selects it.
type Transport struct {
	Name string
	Env  []string
	// QuickNPs, if set, replaces Options.QuickNPs over this transport.
	QuickNPs []int
}

// The transports of the tests.
var (
	// SharedMemory is goshmem's default on one host: the PEs map each
	// other's heaps, over the sm transports.
	SharedMemory = Transport{Name: "sm"}
	// TCP makes every PE use loopback TCP only (UCX_TLS=tcp,self), as PEs
	// on different hosts do.
	TCP = Transport{Name: "tcp", Env: []string{"UCX_TLS=tcp,self"}}
)

// DefaultTimeout bounds one job when Options.Timeout is zero: 90 seconds.
// A job that runs longer is asked where its PEs wait: each PE in the
// library prints a stall report (the routine, the program's line that
// called it, the team and the PEs it waits for, or the variable and
// value), which the failure lists, PE by PE, before the job is ended.
const DefaultTimeout = 90 * time.Second

// Options tune RunWith.
type Options struct {
	// NPs are the job sizes to run; {1, 2, 4} if empty.
	NPs []int
	// QuickNPs, if set, are the sizes of NPs that run unless the
	// environment asks for the full matrices (GOSHMEM_TEST_FULL=1, as
	// .ci/run sets it); the others are then skipped subtests that say so.
	QuickNPs []int
	// Transports are the transports to run every job size over;
	// {SharedMemory, TCP} if empty.
	Transports []Transport
	// Env is added to the environment of every PE (for example
	// SHMEM_SYMMETRIC_SIZE=64M).
	Env []string
	// Timeout bounds each job; DefaultTimeout if zero. A job that runs
	// longer fails the test, listing the stall report of each PE.
	Timeout time.Duration
	// ThreadLevel is the level each PE asks of shmem.InitThread; the zero
	// value is ThreadSingle, which is shmem.Init.
	ThreadLevel shmem.ThreadLevel
	// NoInit leaves Init and Finalize to the body.
	NoInit bool
	// Setup, if set, runs in each PE before Init (to set a PE's own
	// environment, say).
	Setup func(t *testing.T)
	// WantExit is the exit code the job must end with: 0, the default,
	// for a job whose PEs all pass. A test of failures sets it and checks
	// the output with Check.
	WantExit int
	// Check, if set, is called in the test process with each job's output
	// (its lines tagged by PE) after the job ended with WantExit.
	Check func(t *testing.T, output string)
	// Shared lets the test's jobs be shared with those of the other tests
	// of the package that set it with the same options (Env, ThreadLevel,
	// NoInit and Setup): one job per transport and size, whose PEs run the
	// tests' bodies one after another, each between its own Init and
	// Finalize. Most of a small job's time is its start, so a package of
	// many such tests runs several times faster. RunWith then marks the
	// test parallel (t.Parallel) in the test process, so a test that sets
	// Shared calls RunWith once, from its top-level function. A body must
	// leave nothing behind for the next: what it allocates, it frees. A
	// test that fails in a shared job runs again alone, so that its failure
	// comes with its own output; WantExit and Check, and subtests, get jobs
	// of their own.
	Shared bool
}

// Run runs body as every PE of a job of each size in nps, over shared
// memory and over TCP, between shmem.Init and shmem.Finalize.
func Run(t *testing.T, nps []int, body func(t *testing.T)) {
	t.Helper()
	RunWith(t, Options{NPs: nps}, body)
}

// RunWith runs body as the PEs of jobs as o says.
func RunWith(t *testing.T, o Options, body func(t *testing.T)) {
	t.Helper()
	if len(o.NPs) == 0 {
		o.NPs = []int{1, 2, 4}
	}
	if len(o.Transports) == 0 {
		o.Transports = []Transport{SharedMemory, TCP}
	}
	jobs := make([]petest.Options, len(o.Transports))
	for i, tr := range o.Transports {
		quick := o.QuickNPs
		if tr.QuickNPs != nil {
			quick = tr.QuickNPs
		}
		jobs[i] = petest.Options{Name: tr.Name, NPs: o.NPs, QuickNPs: quick, Env: append(append([]string(nil), o.Env...), tr.Env...),
			Timeout: cmp.Or(o.Timeout, DefaultTimeout), WantExit: o.WantExit, Check: o.Check}
		if o.Shared {
			// Jobs can be shared by PEs that start alike.
			jobs[i].Share = fmt.Sprintf("level=%v noinit=%v setup=%#x", o.ThreadLevel, o.NoInit, reflect.ValueOf(o.Setup).Pointer())
		}
	}
	if o.Shared {
		petest.Share(t, jobs...)
	}
	for _, j := range jobs {
		petest.RunWith(t, j, func(t *testing.T) { runPE(t, o, body) })
	}
}

// runPE is one PE of a job: setup, Init, the body, and Finalize; a body
// that failed ends the PE before Finalize, which the other PEs would never
// join, so that the job ends at once. A body that panicked does not
// finalize either (Finalize does not during a panic): the panic ends the
// PE, and the launcher the job.
func runPE(t *testing.T, o Options, body func(t *testing.T)) {
	if o.Setup != nil {
		o.Setup(t)
	}
	if !o.NoInit {
		if o.ThreadLevel == shmem.ThreadSingle {
			if err := shmem.Init(); err != nil {
				t.Fatalf("shmem.Init: %v", err)
			}
		} else if got, err := shmem.InitThread(o.ThreadLevel); err != nil {
			t.Fatalf("shmem.InitThread(%v): %v", o.ThreadLevel, err)
		} else if got != o.ThreadLevel {
			t.Fatalf("shmem.InitThread(%v) provided %v", o.ThreadLevel, got)
		}
		defer shmem.Finalize()
	}
	defer petest.ExitIfFailed(t)
	body(t)
}

// IsPE reports whether this process is a PE of a job that Run started (as
// opposed to the test process).
func IsPE() bool { return petest.IsPE() }

// Leftovers lists the goshmem files in /dev/shm whose creating process is
// gone: a job that ended well leaves none.
func Leftovers() []string { return petest.ShmLeftovers() }

// Bench runs a benchmark in a real job of np PEs, between shmem.Init and
// shmem.Finalize. In every PE, body runs once and calls measure with a
// function that does the operation n times; PE 0 times it (with n growing
// until a run lasts a second) and counts its allocations, the others skip
// it, and the benchmark reports PE 0's ns/op, B/op and allocs/op, and MB/s
// when bytesPerOp is positive. Every PE must make the same collective
// calls around measure.
func Bench(b *testing.B, np int, bytesPerOp int64, body func(measure func(fn func(n int)))) {
	b.Helper()
	petest.Bench(b, np, bytesPerOp, func(measure func(fn func(n int))) {
		if err := shmem.Init(); err != nil {
			b.Fatalf("shmem.Init: %v", err)
		}
		defer shmem.Finalize()
		body(measure)
	})
}
