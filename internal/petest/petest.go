// Package petest is the harness for multi-PE tests: it runs a test body as
// every PE of a real job, started by the launcher goshmem-run uses, with the
// real bootstrap and transports.
//
// The harness re-executes the test binary: in the parent, Run starts a job
// of np processes of os.Args[0] restricted to the calling test; in those
// processes (the PEs), the same call runs the body. A PE that fails its
// *testing.T exits non-zero, which fails the parent's test with the job's
// output.
//
//	func TestPut(t *testing.T) {
//		petest.Run(t, []int{1, 2, 4}, func(t *testing.T) {
//			... shmem.Init(), work, checks with t.Errorf ...
//		})
//	}
package petest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goshmem/goshmem/launcher"
)

// childEnv marks a process started by the harness as a PE.
const childEnv = "GOSHMEM_PETEST"

// DefaultTimeout bounds one job; a job that runs longer fails its test,
// with the stall report of each PE (where it waits, and for whom).
const DefaultTimeout = 90 * time.Second

// stallReportGrace bounds the wait for the stall reports of a job that
// timed out, before it is ended.
const stallReportGrace = 5 * time.Second

// FullEnv is the environment variable that asks for the full matrices of
// job sizes: set to 1 (as .ci/run sets it), every size of Options.NPs
// runs; unset, only Options.QuickNPs do, so that `go test ./...` stays
// quick.
const FullEnv = "GOSHMEM_TEST_FULL"

// Full reports whether the full matrices were asked for (FullEnv=1).
func Full() bool { return os.Getenv(FullEnv) == "1" }

// Options tune RunWith.
type Options struct {
	// NPs lists the job sizes to run, each as a subtest "np=N".
	NPs []int
	// QuickNPs, if set, are the sizes of NPs that run unless Full: the
	// others are then skipped subtests that say so.
	QuickNPs []int
	// Env is added to every PE's environment (UCX_TLS=tcp,self, ...).
	Env []string
	// Name, if set, names the subtest level above "np=N" (for example the
	// transport, "tls=tcp").
	Name string
	// Timeout bounds each job; DefaultTimeout if zero.
	Timeout time.Duration
	// WantExit is the exit code the job must end with (default 0); a test of
	// failures sets it non-zero and checks the output with Check.
	WantExit int
	// Check, if set, is called in the parent with the job's combined output
	// after the job ends with WantExit.
	Check func(t *testing.T, output string)
	// Share, if not empty, lets the test's jobs be shared with those of the
	// other tests of the binary that set the same Share, Name, Env and job
	// size: one job whose PEs run the tests' bodies one after another. The
	// test registers them first, with the function Share.
	Share string
}

// IsPE reports whether this process is a PE started by the harness.
func IsPE() bool { return os.Getenv(childEnv) != "" }

// Run runs body as each PE of a job of np PEs, for every np in nps.
func Run(t *testing.T, nps []int, body func(t *testing.T)) {
	t.Helper()
	RunWith(t, Options{NPs: nps}, body)
}

// RunWith is Run with options.
func RunWith(t *testing.T, o Options, body func(t *testing.T)) {
	t.Helper()
	// Every function between the caller's RunWith and the checks is a
	// helper, in the subtests too: a failure names the caller's line.
	run := func(t *testing.T) {
		t.Helper()
		for _, np := range o.NPs {
			t.Run("np="+strconv.Itoa(np), func(t *testing.T) {
				t.Helper()
				if o.QuickNPs != nil && !slices.Contains(o.QuickNPs, np) && !Full() {
					t.Skipf("np=%d is in the full matrix only: %s=1 runs it (.ci/run does)", np, FullEnv)
				}
				if IsPE() {
					body(t)
					return
				}
				if o.Share != "" && fromShared(t) {
					return
				}
				runJob(t, np, o)
			})
		}
	}
	if o.Name != "" {
		t.Run(o.Name, run)
	} else {
		run(t)
	}
}

// runPattern turns a test name ("TestPut/tls=tcp/np=4") into a -test.run
// pattern that selects exactly that test.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

func runJob(t *testing.T, np int, o Options) {
	t.Helper()
	timeout := o.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	start := time.Now()
	code, output, timedOut, err := launch(timeout, np, []string{"-test.run=" + runPattern(t.Name()), "-test.count=1", "-test.v"}, o.Env, true)
	if timedOut {
		for _, r := range StallReports(output) {
			t.Errorf("PE %d: %s", r.PE, r.Message)
		}
		t.Fatalf("job of %d PEs did not end within %v (the stall reports of its PEs are above); output:\n%s", np, timeout, output)
	}
	if err != nil && code == 0 {
		t.Fatalf("job of %d PEs: %v; output:\n%s", np, err, output)
	}
	if code != o.WantExit {
		for _, f := range PEFailures(output) {
			t.Errorf("PE %d: %s", f.PE, f.Message)
		}
		t.Fatalf("job of %d PEs exited with %d, want %d (err %v); output:\n%s", np, code, o.WantExit, err, output)
	}
	if o.WantExit == 0 && !strings.Contains(output, "--- PASS: "+t.Name()) {
		if strings.Contains(output, "--- SKIP: "+t.Name()) {
			t.Skipf("the PEs skipped: %s", skipReason(output, t.Name()))
		}
		t.Fatalf("job of %d PEs ran no test; output:\n%s", np, output)
	}
	if o.Check != nil {
		o.Check(t, output)
	}
	if leftovers := ShmLeftovers(); len(leftovers) > 0 {
		t.Errorf("job of %d PEs left %v in /dev/shm", np, leftovers)
	}
	if testing.Verbose() {
		t.Logf("job of %d PEs took %v", np, time.Since(start).Round(time.Millisecond))
	}
}

// ShmLeftovers lists the goshmem files in /dev/shm that nobody will remove:
// those whose creating process is gone. Files of live processes belong to
// whatever runs beside the test (packages are tested in parallel).
func ShmLeftovers() []string {
	ents, _ := os.ReadDir("/dev/shm")
	var names []string
	for _, e := range ents {
		name := e.Name()
		if !strings.Contains(name, "goshmem") {
			continue
		}
		// Named segments are goshmem-<pid>-<id>.
		if f := strings.Split(name, "-"); len(f) == 3 && f[0] == "goshmem" {
			if pid, err := strconv.Atoi(f[1]); err == nil && syscall.Kill(pid, 0) == nil {
				continue
			}
		}
		names = append(names, name)
	}
	return names
}

// ExitIfFailed ends this PE with status 1 when t has failed, so that the job
// ends at once (the launcher then stops the other PEs) instead of waiting in
// a collective the failed PE will never join. Defer it after deferring
// shmem.Finalize, so that it runs first:
//
//	defer shmem.Finalize()
//	defer petest.ExitIfFailed(t)
func ExitIfFailed(t *testing.T) {
	if IsPE() && t.Failed() {
		fmt.Printf("--- FAIL: %s (PE ends the job)\n", t.Name())
		os.Exit(1)
	}
}

// launch runs np PEs of this test binary with args, through the launcher,
// and returns the exit code and the PEs' combined output. A job that runs
// past timeout is asked for stall reports (each PE in the library says
// where it waits), which it gets stallReportGrace to give, and is then
// ended; timedOut says so.
func launch(timeout time.Duration, np int, args, env []string, tag bool) (code int, output string, timedOut bool, err error) {
	w := &lockedWriter{buf: new(bytes.Buffer)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stalls := make(chan struct{}, 1)
	expired := make(chan struct{})
	timer := time.AfterFunc(timeout, func() {
		close(expired)
		stalls <- struct{}{}
		grace := time.NewTimer(stallReportGrace)
		defer grace.Stop()
		poll := time.NewTicker(50 * time.Millisecond)
		defer poll.Stop()
		for len(StallReports(w.String())) < np {
			select {
			case <-grace.C:
				cancel()
				return
			case <-ctx.Done():
				return
			case <-poll.C:
			}
		}
		cancel()
	})
	defer timer.Stop()
	code, err = launcher.Run(ctx, launcher.Options{
		NP:           np,
		Program:      os.Args[0],
		Args:         args,
		Env:          append([]string{childEnv + "=1"}, env...),
		TagOutput:    tag,
		Stdin:        strings.NewReader(""),
		Stdout:       w,
		Stderr:       w,
		StallReports: stalls,
		Logf:         func(format string, args ...any) { fmt.Fprintf(w, "goshmem-run: "+format+"\n", args...) },
	})
	select {
	case <-expired:
		timedOut = true
	default:
	}
	return code, w.String(), timedOut, err
}

// stallRequested is what the launcher logs when it asks for stall
// reports; the reports follow it.
const stallRequested = "goshmem-run: stall report requested"

// StallReports finds, in a job's output tagged by PE, the stall reports
// the PEs gave after the launcher asked for them (a job that timed out),
// each line of a report once, in the order they came. A PE waiting in
// several places gives several lines.
func StallReports(output string) []Failure {
	i := strings.Index(output, stallRequested)
	if i < 0 {
		return nil
	}
	var reports []Failure
	for _, line := range strings.Split(output[i:], "\n") {
		pe, msg, ok := peLine(line)
		if ok && strings.Contains(msg, fmt.Sprintf("goshmem: PE %d: stall report: ", pe)) {
			reports = append(reports, Failure{pe, strings.TrimSpace(msg)})
		}
	}
	return reports
}

// peLine splits a line of output tagged by PE ("[pe 3] text") into the
// PE and its text.
func peLine(line string) (pe int, msg string, ok bool) {
	rest, ok := strings.CutPrefix(line, "[pe ")
	if !ok {
		return 0, "", false
	}
	num, msg, ok := strings.Cut(rest, "] ")
	pe, err := strconv.Atoi(num)
	if !ok || err != nil {
		return 0, "", false
	}
	return pe, msg, true
}

// Failure is a failure a PE's test reported: a line its *testing.T
// logged (t.Error, t.Fatal and the like) in a test that failed.
type Failure struct {
	PE      int
	Message string // "file_test.go:42: what went wrong"
}

// PEFailures finds, in a job's output tagged by PE ("[pe N] "), the lines
// the PEs' tests logged with a file and line ("    x_test.go:12: ..."),
// in the order they came, for the PEs whose test failed. A PE's test that
// panicked reports its panic message.
func PEFailures(output string) []Failure {
	var logged []Failure
	failed := map[int]bool{}
	for _, line := range strings.Split(output, "\n") {
		pe, msg, ok := peLine(line)
		if !ok {
			continue
		}
		switch trimmed := strings.TrimSpace(msg); {
		case strings.HasPrefix(trimmed, "--- FAIL"), strings.HasPrefix(msg, "FAIL"):
			failed[pe] = true
		case strings.HasPrefix(msg, "panic: "):
			failed[pe] = true
			logged = append(logged, Failure{pe, trimmed})
		case strings.HasPrefix(msg, "    ") && strings.Contains(trimmed, ".go:"):
			logged = append(logged, Failure{pe, trimmed})
		}
	}
	var out []Failure
	for _, f := range logged {
		if failed[f.PE] {
			out = append(out, f)
		}
	}
	return out
}

// skipReason returns the reason the test named name gave t.Skip in the
// PEs: with -test.v the
// test's log lines stream out before its "--- SKIP" line, so it is the last
// line the skipping PE logged before that one (without -test.v, the line
// after it).
func skipReason(output, name string) string {
	lines := strings.Split(output, "\n")
	for i, l := range lines {
		j := strings.Index(l, "--- SKIP: "+name+" (")
		if j < 0 {
			continue
		}
		tag := "" // "[pe N] " when the output is tagged
		if k := strings.Index(l[:j], "] "); strings.HasPrefix(l, "[") && k >= 0 {
			tag = l[:k+2]
		}
		for b := i - 1; b >= 0; b-- {
			if rest, ok := strings.CutPrefix(lines[b], tag); ok && strings.HasPrefix(rest, "    ") && strings.Contains(rest, ".go:") {
				return strings.TrimSpace(rest)
			}
			if strings.Contains(lines[b], tag+"=== RUN") {
				break
			}
		}
		if i+1 < len(lines) {
			return strings.TrimSpace(lines[i+1])
		}
	}
	return "(no reason given)"
}
