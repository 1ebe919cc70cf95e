package launcher

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goshmem/goshmem/bootstrap"
	"github.com/goshmem/goshmem/ucs"
)

// The test binary doubles as the agent (started with AgentArg), as the PE
// program (with envPEMode set, TestMain runs peMain instead of the tests),
// and as a launcher to kill (envLauncherMode).
const (
	envPEMode       = "GOSHMEM_LAUNCHER_TEST_PE"
	envLauncherMode = "GOSHMEM_LAUNCHER_TEST_LAUNCHER"
)

func TestMain(m *testing.M) {
	if err := setTestLimits(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if len(os.Args) > 1 && os.Args[1] == AgentArg && os.Getenv(envAgentCrash) != "" {
		os.Exit(crashLikeRuntime(os.Stderr))
	}
	if code, ok := AgentMain(); ok {
		os.Exit(code)
	}
	if mode := os.Getenv(envPEMode); mode != "" {
		os.Exit(peMain(mode))
	}
	if mode := os.Getenv(envLauncherMode); mode != "" {
		os.Exit(launcherMain(mode))
	}
	dir, err := os.MkdirTemp("", "launcher-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := writeScripts(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// peMain is a PE of the test jobs. It returns the exit status.
func peMain(mode string) int {
	rank, _ := strconv.Atoi(os.Getenv(bootstrap.EnvRank))
	join := func() *bootstrap.Member {
		m, err := bootstrap.JoinFromOS()
		if err != nil {
			fmt.Fprintf(os.Stderr, "PE %d: join: %v\n", rank, err)
			os.Exit(10)
		}
		return m
	}
	// blockInBarrier waits in a barrier that a failed PE never joins, until
	// the launcher ends this PE (or the barrier reports the failure).
	blockInBarrier := func(m *bootstrap.Member) int {
		if err := m.Barrier(); err != nil {
			fmt.Printf("PE %d: barrier: %v\n", rank, err)
			select {} // the launcher ends us
		}
		return 0
	}
	switch mode {
	case "env":
		m := join()
		var pairs []string
		for _, v := range []string{bootstrap.EnvJobID, bootstrap.EnvSize, bootstrap.EnvSeed, bootstrap.EnvFailureTimeout, "EXTRA"} {
			pairs = append(pairs, v+"="+os.Getenv(v))
		}
		table, err := m.Allgather([]byte(strconv.Itoa(m.Rank())))
		if err != nil {
			fmt.Fprintf(os.Stderr, "PE %d: allgather: %v\n", rank, err)
			return 11
		}
		fmt.Printf("rank=%d size=%d local=%d/%d key=%t table=%q %s\n", m.Rank(), m.Size(), m.LocalRank(), m.LocalSize(),
			os.Getenv(bootstrap.EnvKey) != "", table, strings.Join(pairs, " "))
		if err := m.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "PE %d: close: %v\n", rank, err)
			return 12
		}
		return 0
	case "output":
		fmt.Printf("out line 1 of %d\nout line 2 of %d\n", rank, rank)
		fmt.Fprintf(os.Stderr, "err line of %d\n", rank)
		fmt.Printf("partial of %d", rank) // no newline
		return 0
	case "stdin":
		if rank == 0 {
			s := bufio.NewScanner(os.Stdin)
			for s.Scan() {
				fmt.Printf("echo %s\n", s.Text())
			}
		}
		return 0
	case "exit":
		m := join()
		if rank == 1 {
			return 3
		}
		if rank == 2 {
			// Exits too, but after PE 1 (whose failure makes the
			// launcher end this one, normally, before this).
			m.Barrier()
			return 4
		}
		return blockInBarrier(m)
	case "sigkill":
		m := join()
		if rank == 1 {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
		return blockInBarrier(m)
	case "stop":
		m := join()
		if rank == 1 {
			syscall.Kill(os.Getpid(), syscall.SIGSTOP) // alive but silent
			select {}                                  // the stop may take effect a little later
		}
		return blockInBarrier(m)
	case "nofinalize":
		m := join()
		if rank == 0 {
			return 0 // without Close
		}
		return blockInBarrier(m)
	case "ignoreterm":
		signal.Ignore(syscall.SIGTERM)
		m := join()
		if err := m.Barrier(); err != nil { // every PE ignores SIGTERM now
			return 13
		}
		if rank == 0 {
			return 5
		}
		return blockInBarrier(m)
	case "sleep":
		fmt.Printf("ready %d\n", rank)
		select {}
	case "globalexit":
		m := join()
		if rank == 1 {
			code, _ := strconv.Atoi(os.Getenv("TEST_GLOBAL_EXIT_CODE"))
			if err := m.GlobalExit(code); err != nil {
				fmt.Fprintf(os.Stderr, "PE %d: global exit: %v\n", rank, err)
				return 14
			}
			return code
		}
		return blockInBarrier(m)
	case "pidfile":
		// Leaves its pid (and, with TEST_FAKE_SEGMENT, a file named like a
		// shared-memory segment of its own) for the test, joins, and waits
		// to be ended.
		pid := os.Getpid()
		if os.Getenv("TEST_FAKE_SEGMENT") != "" {
			seg := ucs.ShmSegmentPath(uint32(pid), 0xfeed0000+uint64(rank))
			if err := os.WriteFile(seg, []byte("x"), 0o600); err != nil {
				fmt.Fprintf(os.Stderr, "PE %d: %v\n", rank, err)
				return 15
			}
		}
		join()
		f := filepath.Join(os.Getenv("TEST_PID_DIR"), fmt.Sprintf("pe-%d.pid", rank))
		if err := os.WriteFile(f+".tmp", []byte(strconv.Itoa(pid)), 0o644); err != nil || os.Rename(f+".tmp", f) != nil {
			fmt.Fprintf(os.Stderr, "PE %d: writing %s: %v\n", rank, f, err)
			return 16
		}
		select {}
	}
	if f, ok := morePEModes[mode]; ok {
		return f(rank)
	}
	fmt.Fprintf(os.Stderr, "unknown PE mode %q\n", mode)
	return 100
}

// morePEModes are PE modes that tests in other files define.
var morePEModes = map[string]func(rank int) int{}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitLimit bounds every job in these tests; reaching it is a failure.
const waitLimit = 90 * time.Second

type result struct {
	code           int
	err            error
	stdout, stderr string
	logs           []string
}

// launchMode is a way of starting the PEs: by the launcher itself, by a
// local agent, by agents on two "hosts" reached through a remote shell that
// runs the command here, or by a spawner that starts one agent per PE.
type launchMode struct {
	name string
	set  func(t *testing.T, o *Options)
}

var launchModes = []launchMode{
	{"inprocess", func(t *testing.T, o *Options) {}},
	{"agent", func(t *testing.T, o *Options) { o.AgentPath = testBinary(t) }},
	{"rsh", func(t *testing.T, o *Options) {
		o.AgentPath = testBinary(t)
		o.RSH = []string{fakeRSH(t)}
		o.BindAddr = "127.0.0.1"
		half := (o.NP + 1) / 2
		o.Hosts = []Host{{"fake1", half}, {"fake2", max(o.NP-half, 1)}}
	}},
	{"spawner", func(t *testing.T, o *Options) {
		o.AgentPath = testBinary(t)
		o.Spawner = []string{fakeSpawner(t)}
		o.BindAddr = "127.0.0.1"
	}},
}

// forEachMode runs f as a subtest for each launch mode. Under the race
// detector, whose agents and PEs (this test binary) start slowly, only in
// the modes where the launcher starts the PEs itself or talks to several
// agents: the others run the same launcher code.
func forEachMode(t *testing.T, f func(t *testing.T, lm launchMode)) {
	for _, lm := range launchModes {
		t.Run(lm.name, func(t *testing.T) {
			t.Parallel() // the jobs mostly wait: for their PEs, their timeouts
			if raceEnabled && (lm.name == "agent" || lm.name == "spawner") {
				t.Skip("skipping under the race detector: the rsh mode runs the same launcher code with more agents")
			}
			f(t, lm)
		})
	}
}

// localOf returns the local rank and size that a PE of rank gets in a job
// of np PEs started in mode.
func localOf(mode string, rank, np int) (int, int) {
	switch mode {
	case "rsh":
		half := (np + 1) / 2
		if rank < half {
			return rank, half
		}
		return rank - half, np - half
	}
	return rank, np
}

func testBinary(t *testing.T) string {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return self
}

// The scripts of the tests, written before any test runs: one written
// while a parallel test forks could not be run (ETXTBSY, as long as the
// forked child holds the file open).
var fakeRSHPath, fakeSpawnerPath string

// writeScripts writes the scripts into dir.
func writeScripts(dir string) error {
	fakeRSHPath = filepath.Join(dir, "fake-rsh")
	fakeSpawnerPath = filepath.Join(dir, "fake-spawner")
	for path, body := range map[string]string{fakeRSHPath: fakeRSHScript, fakeSpawnerPath: fakeSpawnerScript} {
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// fakeRSH is a remote shell that runs the command on this host; for the
// host named in FAKE_RSH_FAIL it fails as ssh does when it cannot connect.
func fakeRSH(*testing.T) string { return fakeRSHPath }

const fakeRSHScript = `host=$1; shift
if [ "$host" = "$FAKE_RSH_FAIL" ]; then
	echo "ssh: connect to host $host port 22: Connection refused" >&2
	exit 255
fi
exec "$@"
`

// fakeSpawner starts GOSHMEM_SIZE copies of its arguments, each with its
// place in GOSHMEM_RANK, GOSHMEM_LOCAL_RANK and GOSHMEM_LOCAL_SIZE, the
// first one with the spawner's standard input.
func fakeSpawner(*testing.T) string { return fakeSpawnerPath }

const fakeSpawnerScript = `i=1
exec 3<&0 # background commands read /dev/null, unless told otherwise
GOSHMEM_RANK=0 GOSHMEM_LOCAL_RANK=0 GOSHMEM_LOCAL_SIZE=$GOSHMEM_SIZE "$@" <&3 3<&- &
while [ $i -lt "$GOSHMEM_SIZE" ]; do
	GOSHMEM_RANK=$i GOSHMEM_LOCAL_RANK=$i GOSHMEM_LOCAL_SIZE=$GOSHMEM_SIZE "$@" </dev/null &
	i=$((i+1))
done
wait
`

// runJob runs np PEs of this test binary in the given mode.
func runJob(t *testing.T, ctx context.Context, np int, mode string, change func(*Options)) result {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr syncBuffer
	var logMu sync.Mutex
	var logs []string
	opts := Options{
		NP:      np,
		Program: self,
		Env:     []string{envPEMode + "=" + mode},
		Stdin:   strings.NewReader(""),
		Stdout:  &stdout,
		Stderr:  &stderr,
		Logf: func(format string, args ...any) {
			logMu.Lock()
			logs = append(logs, fmt.Sprintf(format, args...))
			logMu.Unlock()
		},
	}
	if change != nil {
		change(&opts)
	}
	ctx, cancel := context.WithTimeout(ctx, waitLimit)
	defer cancel()
	done := make(chan result, 1)
	go func() {
		code, err := Run(ctx, opts)
		done <- result{code: code, err: err}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(waitLimit + 30*time.Second):
		t.Fatalf("Run did not return within %v of its deadline", 30*time.Second)
	}
	if ctx.Err() == context.DeadlineExceeded {
		t.Fatalf("job still running after %v; stdout:\n%s\nstderr:\n%s", waitLimit, stdout.String(), stderr.String())
	}
	r.stdout, r.stderr = stdout.String(), stderr.String()
	logMu.Lock()
	r.logs = logs
	logMu.Unlock()
	t.Logf("exit code %d, err %v, launcher log %q\nstdout:\n%s\nstderr:\n%s", r.code, r.err, r.logs, r.stdout, r.stderr)
	return r
}

func TestEnvAndRanks(t *testing.T) {
	t.Parallel()
	forEachMode(t, testEnvAndRanks)
}

func testEnvAndRanks(t *testing.T, lm launchMode) {
	for _, np := range []int{1, 4} {
		t.Run(fmt.Sprintf("np=%d", np), func(t *testing.T) {
			r := runJob(t, context.Background(), np, "env", func(o *Options) {
				o.Env = append(o.Env, "EXTRA=yes")
				lm.set(t, o)
			})
			if r.code != 0 || r.err != nil {
				t.Fatalf("Run = %d, %v; stderr:\n%s", r.code, r.err, r.stderr)
			}
			lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
			if len(lines) != np {
				t.Fatalf("got %d lines, want %d:\n%s", len(lines), np, r.stdout)
			}
			sort.Strings(lines)
			var table []string
			for i := range np {
				table = append(table, strconv.Itoa(i))
			}
			wantTable := fmt.Sprintf("%q", table)
			for i, line := range lines {
				lr, ls := localOf(lm.name, i, np)
				want := fmt.Sprintf("rank=%d size=%d local=%d/%d key=true table=%s ", i, np, lr, ls, wantTable)
				if !strings.HasPrefix(line, want) {
					t.Errorf("line %q, want prefix %q", line, want)
				}
				// The failure timeout, the default too: the PEs' tcp
				// endpoints time out with the job's.
				for _, s := range []string{"EXTRA=yes", bootstrap.EnvSize + "=" + strconv.Itoa(np), bootstrap.EnvSeed + "=127.0.0.1:",
					bootstrap.EnvFailureTimeout + "=" + bootstrap.DefaultFailureTimeout.String() + " "} {
					if !strings.Contains(line, s) {
						t.Errorf("line %q lacks %q", line, s)
					}
				}
			}
		})
	}
}

func TestOutput(t *testing.T) {
	t.Parallel()
	forEachMode(t, testOutput)
}

func testOutput(t *testing.T, lm launchMode) {
	const np = 3
	for _, tag := range []bool{false, true} {
		t.Run(fmt.Sprintf("tag=%t", tag), func(t *testing.T) {
			r := runJob(t, context.Background(), np, "output", func(o *Options) { o.TagOutput = tag; lm.set(t, o) })
			if r.code != 0 || r.err != nil {
				t.Fatalf("Run = %d, %v; stderr:\n%s", r.code, r.err, r.stderr)
			}
			prefix := func(rank int) string {
				if tag {
					return fmt.Sprintf("[pe %d] ", rank)
				}
				return ""
			}
			for rank := range np {
				for _, want := range []string{
					prefix(rank) + fmt.Sprintf("out line 1 of %d\n", rank),
					prefix(rank) + fmt.Sprintf("out line 2 of %d\n", rank),
				} {
					if !strings.Contains(r.stdout, want) {
						t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
					}
				}
				if want := prefix(rank) + fmt.Sprintf("err line of %d\n", rank); !strings.Contains(r.stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
				}
				partial := prefix(rank) + fmt.Sprintf("partial of %d", rank)
				if tag {
					partial += "\n"
				}
				if !strings.Contains(r.stdout, partial) {
					t.Errorf("stdout lacks %q:\n%s", partial, r.stdout)
				}
			}
			for _, line := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
				if strings.HasPrefix(line, "[pe ") != tag {
					t.Errorf("line %q: want tagged %v", line, tag)
				}
			}
		})
	}
}

func TestStdinToPE0(t *testing.T) {
	t.Parallel()
	forEachMode(t, func(t *testing.T, lm launchMode) {
		r := runJob(t, context.Background(), 2, "stdin", func(o *Options) {
			o.Stdin = strings.NewReader("a\nb\n")
			o.TagOutput = true
			lm.set(t, o)
		})
		if r.code != 0 || r.err != nil {
			t.Fatalf("Run = %d, %v; stderr:\n%s", r.code, r.err, r.stderr)
		}
		if want := "[pe 0] echo a\n[pe 0] echo b\n"; r.stdout != want {
			t.Errorf("stdout %q, want %q", r.stdout, want)
		}
	})
}

// checkFailure checks that a job ended with code and a JobError and a log
// naming PE rank with how.
func checkFailure(t *testing.T, r result, code, rank int, how string) {
	t.Helper()
	if r.code != code {
		t.Errorf("exit code %d, want %d", r.code, code)
	}
	var je *JobError
	if !errors.As(r.err, &je) || je.Rank != rank || !strings.Contains(je.How, how) || je.Code != code {
		t.Errorf("error %v, want a JobError of PE %d that %s", r.err, rank, how)
	}
	want := fmt.Sprintf("PE %d on host ", rank)
	found := false
	for _, l := range r.logs {
		if strings.Contains(l, want) && strings.Contains(l, how) {
			found = true
		}
	}
	if !found {
		t.Errorf("launcher log %q does not say %q ... %q", r.logs, want, how)
	}
}

func TestFirstFailingExitCode(t *testing.T) {
	t.Parallel()
	forEachMode(t, func(t *testing.T, lm launchMode) {
		r := runJob(t, context.Background(), 4, "exit", func(o *Options) { lm.set(t, o) })
		checkFailure(t, r, 3, 1, "exited with status 3")
	})
}

func TestPEKilled(t *testing.T) {
	t.Parallel()
	forEachMode(t, func(t *testing.T, lm launchMode) {
		r := runJob(t, context.Background(), 3, "sigkill", func(o *Options) { lm.set(t, o) })
		checkFailure(t, r, 128+int(syscall.SIGKILL), 1, "killed by signal 9")
	})
}

// TestPEStopped stops a PE: its process lives, silent; the agent or the
// launcher that started it sees it stopped (before memberlist declares it
// dead) and ends the job naming it.
func TestPEStopped(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("skipping: memberlist takes seconds to declare a node dead")
	}
	for _, lm := range launchModes[:2] {
		t.Run(lm.name, func(t *testing.T) {
			t.Parallel() // each waits for the stop to be seen
			r := runJob(t, context.Background(), 3, "stop", func(o *Options) {
				lm.set(t, o)
				o.KillGrace = 100 * time.Millisecond
				o.FailureTimeout = 3 * time.Second
			})
			checkFailure(t, r, 1, 1, "was stopped (SIGSTOP or SIGTSTP)")
		})
	}
}

func TestExitWithoutFinalize(t *testing.T) {
	t.Parallel()
	forEachMode(t, func(t *testing.T, lm launchMode) {
		r := runJob(t, context.Background(), 3, "nofinalize", func(o *Options) { lm.set(t, o) })
		checkFailure(t, r, 1, 0, "without finalize")
	})
}

func TestKillAfterGrace(t *testing.T) {
	t.Parallel()
	forEachMode(t, func(t *testing.T, lm launchMode) {
		r := runJob(t, context.Background(), 3, "ignoreterm", func(o *Options) {
			lm.set(t, o)
			o.KillGrace = 100 * time.Millisecond
		})
		checkFailure(t, r, 5, 0, "exited with status 5")
		// The launcher or the agents kill the PEs that ignore SIGTERM.
		killed := strings.Contains(r.stderr, "killing it")
		for _, l := range r.logs {
			killed = killed || strings.Contains(l, "killing it")
		}
		if !killed {
			t.Errorf("launcher log %q and stderr do not say the PEs that ignore SIGTERM were killed", r.logs)
		}
	})
}

func TestCancel(t *testing.T) {
	t.Parallel()
	forEachMode(t, func(t *testing.T, lm launchMode) {
		const np = 3
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ready := &readyWriter{n: np, ready: cancel}
		r := runJob(t, ctx, np, "sleep", func(o *Options) { lm.set(t, o); o.Stdout = ready })
		if r.code == 0 || !errors.Is(r.err, context.Canceled) {
			t.Errorf("Run = %d, %v; want non-zero and context.Canceled", r.code, r.err)
		}
	})
}

// readyWriter calls ready once it has seen n "ready" lines.
type readyWriter struct {
	mu    sync.Mutex
	n     int
	seen  int
	ready func()
}

func (w *readyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen += bytes.Count(p, []byte("ready "))
	if w.seen == w.n {
		w.ready()
	}
	return len(p), nil
}

func TestStartFailure(t *testing.T) {
	code, err := Run(context.Background(), Options{NP: 2, Program: filepath.Join(t.TempDir(), "missing"),
		Logf: func(string, ...any) {}})
	if code != 127 || err == nil {
		t.Errorf("Run of a missing program = %d, %v; want 127 and an error", code, err)
	}
}

func TestBadOptions(t *testing.T) {
	if code, err := Run(context.Background(), Options{NP: 0, Program: "true"}); code == 0 || err == nil {
		t.Errorf("Run with NP 0 = %d, %v; want an error", code, err)
	}
}

func TestBuildProgram(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("skipping: no go command in PATH to build with")
	}
	if testing.Short() {
		t.Skip("skipping: building a program is slow in -short mode")
	}
	bin, cleanup, err := BuildProgram("./testdata/hello")
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	var out syncBuffer
	code, err := Run(context.Background(), Options{NP: 2, Program: bin, Args: []string{"arg"}, Stdout: &out, TagOutput: true})
	if code != 0 || err != nil {
		t.Fatalf("Run = %d, %v", code, err)
	}
	for _, want := range []string{"[pe 0] hello arg from 0 of 2\n", "[pe 1] hello arg from 1 of 2\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output %q lacks %q", out.String(), want)
		}
	}
	cleanup()
	if _, err := os.Stat(bin); !os.IsNotExist(err) {
		t.Errorf("binary %s still there after cleanup: %v", bin, err)
	}

	if _, _, err := BuildProgram("./testdata/nosuchdir"); err == nil {
		t.Error("BuildProgram of a missing package succeeded")
	}
}

// TestShareOfCores: the PEs of a host with fewer cores than PEs start with
// their share of the cores as GOMAXPROCS, unless the environment sets it.
func TestShareOfCores(t *testing.T) {
	cores := runtime.NumCPU()
	for _, tt := range []struct {
		env  []string
		pes  int
		want string
	}{
		{nil, cores, ""},
		{nil, 1, ""},
		{nil, 2*cores + 1, "GOMAXPROCS=1"},
		{[]string{"PATH=/bin", "GOMAXPROCS=3"}, 4 * cores, ""},
	} {
		if got := shareOfCores(tt.env, tt.pes); got != tt.want {
			t.Errorf("shareOfCores(%q, %d) on %d cores = %q, want %q", tt.env, tt.pes, cores, got, tt.want)
		}
	}
}
