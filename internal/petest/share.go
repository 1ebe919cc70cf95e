package petest

import (
	"flag"
	"fmt"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Most of a small job's time is its start: np processes of the test binary
// and the job's bootstrap. Tests that set Options.Share run their bodies in
// jobs shared with the other such tests of the binary: one job per
// transport name, job size, environment and share key, whose PEs run the
// bodies one after another (each between its own Init and Finalize).
//
// A shared job can only hold the tests that registered before it starts,
// so registration happens in the tests' sequential phase: Share registers
// the test's jobs and then marks the test parallel; testing
// resumes the parallel tests only once every top-level test has passed
// that point. The first test to need a result starts every registered
// job, a few at a time. A test whose shared job failed, or did not report
// its pass, runs its body again in a job of its own, so that a failure is
// reported, with its output, by the test that has it.

// maxShareTimeout bounds a shared job, whatever the sum of its tests'
// timeouts.
const maxShareTimeout = 5 * time.Minute

// sharedJob is one job shared by several tests.
type sharedJob struct {
	np      int
	env     []string
	path    []string // the subtest path below the top-level tests: {"tcp", "np=3"}
	tests   []string // the top-level tests, in registration order
	timeout time.Duration

	started bool // under shared.mu
	done    chan struct{}
	code    int
	output  string
	err     error
	took    time.Duration
}

// shared holds the binary's shared jobs.
var shared struct {
	mu   sync.Mutex
	open map[string]*sharedJob // the jobs not started yet, by key
	jobs []*sharedJob
	sem  chan struct{} // bounds the shared jobs that run at once

	parallel []*testing.T // the tests Share marked parallel
}

// Share registers the jobs that the calls RunWith(t, o, body) will run, for
// each of opts, to be shared with other tests (Options.Share), and marks t
// parallel (t.Parallel) unless it did already. A test calls it from its
// top-level function before those calls: jobs registered once the test is
// parallel are shared only with those registered with them. In a PE it
// does nothing. The jobs of a subtest, and those of
// options that set WantExit or Check or not Share, are not shared: RunWith
// runs them alone.
func Share(t *testing.T, opts ...Options) {
	if IsPE() {
		return
	}
	if !strings.Contains(t.Name(), "/") {
		for _, o := range opts {
			if o.Share != "" && o.WantExit == 0 && o.Check == nil {
				register(t, o)
			}
		}
	}
	shared.mu.Lock()
	again := slices.Contains(shared.parallel, t)
	if !again {
		shared.parallel = append(shared.parallel, t)
	}
	shared.mu.Unlock()
	if !again {
		t.Parallel()
	}
}

// register adds t's jobs, as o asks, to the shared jobs.
func register(t *testing.T, o Options) {
	timeout := o.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	env := slices.Clone(o.Env)
	slices.Sort(env)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.open == nil {
		shared.open = make(map[string]*sharedJob)
	}
	for _, np := range o.NPs {
		var path []string
		if o.Name != "" {
			path = append(path, o.Name)
		}
		path = append(path, "np="+strconv.Itoa(np))
		if !selected(append([]string{t.Name()}, path...)) || (o.QuickNPs != nil && !slices.Contains(o.QuickNPs, np) && !Full()) {
			continue
		}
		key := strings.Join(append([]string{o.Share, strings.Join(path, "/")}, env...), "\x00")
		j := shared.open[key]
		if j == nil {
			j = &sharedJob{np: np, env: o.Env, path: path, done: make(chan struct{})}
			shared.open[key] = j
			shared.jobs = append(shared.jobs, j)
		}
		j.tests = append(j.tests, t.Name())
		j.timeout = min(j.timeout+timeout, maxShareTimeout)
	}
}

// sharedResult returns the ended shared job that holds the test named name
// (a subtest path ending in "np=N"), or nil if it has none. The first call
// starts every shared job registered so far, as many at once as there are
// cores.
func sharedResult(name string) *sharedJob {
	path := strings.Split(name, "/")
	shared.mu.Lock()
	var job *sharedJob
	for _, j := range shared.jobs {
		if slices.Equal(j.path, path[1:]) && slices.Contains(j.tests, path[0]) {
			job = j
			break
		}
	}
	if job != nil && !job.started {
		if shared.sem == nil {
			shared.sem = make(chan struct{}, max(1, runtime.NumCPU()))
		}
		var start []*sharedJob
		for _, j := range shared.jobs {
			if !j.started {
				j.started = true
				start = append(start, j)
			}
		}
		clear(shared.open)
		go func() {
			for _, j := range start {
				shared.sem <- struct{}{}
				go func() {
					defer func() { <-shared.sem }()
					j.run()
				}()
			}
		}()
	}
	shared.mu.Unlock()
	if job == nil {
		return nil
	}
	<-job.done
	return job
}

func (j *sharedJob) run() {
	defer close(j.done)
	start := time.Now()
	names := make([]string, len(j.tests))
	for i, n := range j.tests {
		names[i] = regexp.QuoteMeta(n)
	}
	pattern := "^(" + strings.Join(names, "|") + ")$/" + runPattern(strings.Join(j.path, "/"))
	var timedOut bool
	j.code, j.output, timedOut, j.err = launch(j.timeout, j.np, []string{"-test.run=" + pattern, "-test.count=1", "-test.v"}, j.env, true)
	if timedOut {
		j.err = fmt.Errorf("did not end within %v", j.timeout)
	}
	j.took = time.Since(start)
}

// passed reports whether the test named name passed in the job (in every
// PE), and, if PEs skipped it, why.
func (j *sharedJob) passed(name string) (ok bool, skip string) {
	// What came after the test (another test failing, the job's end) does
	// not change how it ended.
	pass, skipped := strings.Count(j.output, "--- PASS: "+name+" ("), strings.Count(j.output, "--- SKIP: "+name+" (")
	switch {
	case pass+skipped < j.np:
		return false, ""
	case skipped > 0:
		return true, skipReason(j.output, name)
	}
	return true, ""
}

// selected reports whether the flags -test.run and -test.skip let the test
// of this path run.
func selected(path []string) bool {
	flagValue := func(name string) string {
		if f := flag.Lookup(name); f != nil {
			return f.Value.String()
		}
		return ""
	}
	return selectedBy(flagValue("test.run"), flagValue("test.skip"), path)
}

// selectedBy reports whether the patterns run and skip (as -test.run and
// -test.skip; "" for none) let the test of this path run, as testing
// matches them: each element of a pattern against the name at its depth.
func selectedBy(run, skip string, path []string) bool {
	// matches reports whether the pattern's elements match the path's
	// names as far as both go, and whether the pattern went no deeper.
	matches := func(pattern string) (ok, whole bool) {
		for i, e := range splitPattern(pattern) {
			if i >= len(path) {
				return true, false
			}
			if re, err := regexp.Compile(e); err != nil || !re.MatchString(path[i]) {
				return false, false
			}
		}
		return true, true
	}
	if run != "" {
		if ok, _ := matches(run); !ok {
			return false
		}
	}
	if skip != "" {
		if ok, whole := matches(skip); ok && whole {
			return false
		}
	}
	return true
}

// splitPattern splits a -test.run pattern at the slashes outside brackets
// and parentheses, as testing does.
func splitPattern(p string) []string {
	var elems []string
	cs, cp, start := 0, 0, 0
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '[':
			cs++
		case ']':
			if cs > 0 {
				cs--
			}
		case '(':
			if cs == 0 {
				cp++
			}
		case ')':
			if cs == 0 {
				cp--
			}
		case '\\':
			i++
		case '/':
			if cs == 0 && cp == 0 {
				elems = append(elems, p[start:i])
				start = i + 1
			}
		}
	}
	return append(elems, p[start:])
}

// fromShared reports whether the shared job of t (an "np=N" subtest in the
// parent) decided t: it passed there, or the PEs skipped it. A test that
// failed there, or did not get to run before the job ended, runs alone
// next, so that its failure comes with its own output; one that failed in
// the shared job and passes alone fails all the same, since something the
// tests before it left behind (in the PE or the library) broke it.
func fromShared(t *testing.T) bool {
	j := sharedResult(t.Name())
	if j == nil {
		return false
	}
	ok, skip := j.passed(t.Name())
	switch {
	case ok && skip != "":
		t.Skipf("the PEs skipped: %s", skip)
	case ok:
		if testing.Verbose() {
			t.Logf("shared job of %d PEs and %d tests took %v", j.np, len(j.tests), j.took.Round(time.Millisecond))
		}
		return true
	case strings.Contains(j.output, "--- FAIL: "+t.Name()+" ("):
		t.Cleanup(func() {
			if !t.Failed() {
				t.Errorf("failed in a job shared with %d other tests, and passed in a job of its own: a test before it left something behind; the shared job's output:\n%s", len(j.tests)-1, j.output)
			}
		})
	default:
		t.Logf("the job shared with %d other tests ended (exit %d, %v) before this test passed in every PE; it runs alone", len(j.tests)-1, j.code, j.err)
	}
	return false
}
