// Package e2e_test runs goshmem-run as users do: the built command, with
// shmem programs, on this host, under Slurm's srun and Open MPI's mpirun,
// and across hosts made of network namespaces. The tests that need
// something this machine may lack (a Slurm cluster, mpirun, root for
// namespaces) say why they skip.
package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/petest"
	"github.com/goshmem/goshmem/launcher"
	"github.com/goshmem/goshmem/shmemtest"
)

// hangGuard bounds every job; reaching it is a failure (a hang), not a
// timing assertion.
const hangGuard = 120 * time.Second

// Binaries built once by TestMain.
var (
	goshmemRun string // launcher/cmd/goshmem-run
	peProgram  string // testdata/pe
	buildErr   error
)

func TestMain(m *testing.M) {
	if raceEnabled {
		// The tests run built binaries, which the race detector does not
		// watch: nothing to gain from running them again.
		fmt.Println("launcher/e2e: skipping under the race detector (the tests run binaries built without it)")
		os.Exit(0)
	}
	var cleanups []func()
	for _, b := range []struct {
		dir string
		out *string
	}{{"../cmd/goshmem-run", &goshmemRun}, {"./testdata/pe", &peProgram}} {
		bin, cleanup, err := launcher.BuildProgram(b.dir)
		if err != nil {
			buildErr = err
			break
		}
		*b.out = bin
		cleanups = append(cleanups, cleanup)
	}
	// The tests wait, mostly (for processes to start, for failure
	// timeouts): run more of them at once than there are processors,
	// unless -test.parallel says otherwise.
	flag.Parse()
	parallelSet := false
	flag.Visit(func(f *flag.Flag) { parallelSet = parallelSet || f.Name == "test.parallel" })
	if !parallelSet {
		flag.Set("test.parallel", "4")
	}
	code := m.Run()
	for _, c := range cleanups {
		c()
	}
	os.Exit(code)
}

// envRequire lists (comma-separated) what CI provides and the tests must
// not skip for want of: "srun", "mpirun", "netns".
const envRequire = "GOSHMEM_E2E_REQUIRE"

// skipUnless skips t with the reason why, unless what is required (see
// envRequire): then it fails.
func skipUnless(t *testing.T, what, why string) {
	t.Helper()
	if why == "" {
		return
	}
	for _, r := range strings.Split(os.Getenv(envRequire), ",") {
		if strings.TrimSpace(r) == what {
			t.Fatalf("%s is required (%s=%s) but: %s", what, envRequire, os.Getenv(envRequire), why)
		}
	}
	t.Skipf("skipping: %s", why)
}

func needBinaries(t testing.TB) {
	t.Helper()
	if buildErr != nil {
		t.Fatalf("building the test programs: %v", buildErr)
	}
}

// namedSegments makes the PEs use named /dev/shm segments (which a killed
// PE leaves behind unless someone removes them) for the heap and FIFOs.
var namedSegments = []string{"UCX_POSIX_USE_SHM_OPEN=y", "UCX_ALLOC_PRIO=md:posix"}

type jobResult struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

// run runs goshmem-run with args and extra environment, bounded by
// hangGuard.
func run(t testing.TB, env []string, args ...string) jobResult {
	t.Helper()
	return runIn(t, "", env, args...)
}

// runIn is run with stdin as goshmem-run's standard input.
func runIn(t testing.TB, stdin string, env []string, args ...string) jobResult {
	t.Helper()
	needBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	cmd := exec.CommandContext(ctx, goshmemRun, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := jobResult{stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start)}
	if ctx.Err() != nil {
		t.Fatalf("goshmem-run %q did not end within %v; stdout:\n%s\nstderr:\n%s", args, hangGuard, r.stdout, r.stderr)
	}
	if err != nil && cmd.ProcessState == nil {
		t.Fatalf("goshmem-run %q: %v", args, err)
	}
	r.code = cmd.ProcessState.ExitCode()
	return r
}

func (r jobResult) String() string {
	return fmt.Sprintf("exit %d after %v\nstdout:\n%s\nstderr:\n%s", r.code, r.took.Round(time.Millisecond), r.stdout, r.stderr)
}

// shmBefore lists the segments in /dev/shm that processes gone before the
// tests started left behind: not this test's doing.
var shmBefore = map[string]bool{}

func init() {
	for _, f := range shmemtest.Leftovers() {
		shmBefore[f] = true
	}
}

// noLeftovers fails t when a process that is gone left segments in
// /dev/shm; the files of a PE are removed right after it exits, so it
// waits (up to hangGuard) for those of PEs that just ended.
func noLeftovers(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for {
		var left []string
		for _, f := range shmemtest.Leftovers() {
			if !shmBefore[f] {
				left = append(left, f)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("left in /dev/shm: %v", left)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func hostname(t testing.TB) string {
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// checkHello checks the output of the hello mode: one line per PE, on the
// host hostOf(rank) gives.
func checkHello(t *testing.T, r jobResult, np int, hostOf func(rank int) string) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("hello with %d PEs: %v", np, r)
	}
	for pe := range np {
		line := fmt.Sprintf("hello %d of %d on %s\n", pe, np, hostOf(pe))
		if strings.Count(r.stdout, line) != 1 {
			t.Errorf("%q printed %d times; %v", line, strings.Count(r.stdout, line), r)
		}
	}
}

func TestHello(t *testing.T) {
	h := hostname(t)
	for _, np := range []int{1, 4} {
		r := run(t, nil, "-np", strconv.Itoa(np), peProgram, "hello")
		checkHello(t, r, np, func(int) string { return h })
	}
	noLeftovers(t)
}

// stdinArgs is a job whose PE 0 prefixes each line of its standard input
// with "got:"; the other PEs exit at once.
var stdinArgs = []string{"-np", "3", "-tag-output", "sh", "-c", `[ "$GOSHMEM_RANK" != 0 ] || exec sed s/^/got:/`}

// checkStdin checks the output of a job of stdinArgs given "a\nb\n".
func checkStdin(t *testing.T, r jobResult) {
	t.Helper()
	if want := "[pe 0] got:a\n[pe 0] got:b\n"; r.code != 0 || r.stdout != want {
		t.Errorf("stdout %q, want %q; %v", r.stdout, want, r)
	}
}

func TestStdin(t *testing.T) {
	checkStdin(t, runIn(t, "a\nb\n", nil, stdinArgs...))
}

// TestHello64 starts 64 PEs on this (2-core) host. It is in the full
// matrix only (GOSHMEM_TEST_FULL=1, as .ci/run sets it): 64 PEs take some
// ten seconds of CPU here.
func TestHello64(t *testing.T) {
	t.Parallel()
	if testing.Short() || !petest.Full() {
		t.Skipf("skipping 64 PEs: in the full matrix only (%s=1 runs it; .ci/run does), and not in -short mode", petest.FullEnv)
	}
	h := hostname(t)
	r := run(t, nil, "-np", "64", peProgram, "hello")
	checkHello(t, r, 64, func(int) string { return h })
	t.Logf("64 PEs: %v", r.took.Round(time.Millisecond))
	noLeftovers(t)
}

// faults are the ways a PE fails, and what goshmem-run must say.
var faults = []struct {
	mode string
	code int
	how  string
}{
	{"exit3", 3, "exited with status 3"},
	{"panic", 2, "exited with status 2"},
	{"kill9", 137, "was killed by signal 9 (killed)"},
	{"nofinalize", 1, "exited without finalize (status 0) while other PEs still run"},
}

// checkFault checks that a job ended by a failure of PE rank on host says
// so and exits with code.
func checkFault(t *testing.T, r jobResult, code, rank int, host, how string) {
	t.Helper()
	if r.code != code {
		t.Errorf("exit code %d, want %d; %v", r.code, code, r)
	}
	// The host as the agent names it, or as the bootstrap knows it (with
	// its address).
	want := regexp.MustCompile(fmt.Sprintf(`goshmem-run: PE %d on host %s( \([^)]*\))? %s`,
		rank, regexp.QuoteMeta(host), regexp.QuoteMeta(how)))
	if !want.MatchString(r.stderr) {
		t.Errorf("stderr does not match %q; %v", want, r)
	}
}

// TestFaults: a PE that fails after Init ends the job within the hang
// guard, with a message naming it, its host and how it ended, and the
// job's exit code; its named segments are removed. Its agent sees it end at
// once: the failure timeout plays no part, and the default one keeps a
// loaded machine, which can starve a healthy PE for a second or two, from
// having memberlist declare that one dead.
func TestFaults(t *testing.T) {
	h := hostname(t)
	for _, f := range faults {
		t.Run(f.mode, func(t *testing.T) {
			env := append([]string{"FAIL_PE=2"}, namedSegments...)
			r := run(t, env, "-np", "4", peProgram, f.mode)
			checkFault(t, r, f.code, 2, h, f.how)
			t.Logf("ended after %v", r.took.Round(time.Millisecond))
			noLeftovers(t)
		})
	}
}

// TestFailureSaidOnce: the output of a job that a PE's failure ends over
// tcp says the cause once: a panic's report once, tagged, and nothing from
// the survivors' transports, which only notice the PE's end (they said it
// was reset, or closed without a goodbye, once the job was already
// ending).
func TestFailureSaidOnce(t *testing.T) {
	for _, f := range faults[:2] {
		t.Run(f.mode, func(t *testing.T) {
			r := run(t, []string{"FAIL_PE=1", "UCX_TLS=tcp,self"}, "-np", "3", peProgram, f.mode)
			checkFault(t, r, f.code, 1, hostname(t), f.how)
			if n := strings.Count(r.stderr, "panic: the test asked for it"); f.mode == "panic" && n != 1 {
				t.Errorf("the panic is in the output %d times, want once; %v", n, r)
			}
			for _, line := range strings.Split(r.stdout+r.stderr, "\n") {
				if strings.Contains(line, "uct/tcp:") || strings.Contains(line, "connection reset") || strings.Contains(line, "without a goodbye") {
					t.Errorf("a survivor's transport repeats the failure: %q; %v", line, r)
				}
			}
		})
	}
}

// TestBlameUnderTraffic kills a PE while every PE talks to every other over
// tcp: the survivors that lose it end too, and their ends may reach
// goshmem-run first, yet the job must be named after the killed PE, with
// its status. GOSHMEM_E2E_BLAME_RUNS sets the number of jobs (default 3);
// the test logs which PE each job named.
func TestBlameUnderTraffic(t *testing.T) {
	runs := 3
	if v := os.Getenv("GOSHMEM_E2E_BLAME_RUNS"); v != "" {
		var err error
		if runs, err = strconv.Atoi(v); err != nil || runs < 1 {
			t.Fatalf("GOSHMEM_E2E_BLAME_RUNS=%q: want a positive number", v)
		}
	}
	h := hostname(t)
	named := regexp.MustCompile(`goshmem-run: (PE \d+ on host .*?(exited with status \d+|was killed by signal \d+))`)
	histogram := map[string]int{}
	for i := range runs {
		env := []string{"FAIL_PE=1", "UCX_TLS=tcp,self"}
		r := run(t, env, "-np", "4", peProgram, "kill9-traffic")
		checkFault(t, r, 137, 1, h, "was killed by signal 9 (killed)")
		what := "nothing"
		if m := named.FindStringSubmatch(r.stderr); m != nil {
			what = regexp.MustCompile(` \(.*?\)`).ReplaceAllString(m[1], "")
		}
		histogram[fmt.Sprintf("%s, exit %d", what, r.code)]++
		if t.Failed() {
			t.Fatalf("run %d of %d: %v", i+1, runs, r)
		}
	}
	t.Logf("named in %d runs: %v", runs, histogram)
	noLeftovers(t)
}

// TestGlobalExit: the status a PE gives for the whole job is goshmem-run's.
func TestGlobalExit(t *testing.T) {
	for _, mode := range []string{"globalexit", "shmem-globalexit"} {
		t.Run(mode, func(t *testing.T) {
			r := run(t, []string{"FAIL_PE=1"}, "-np", "3", peProgram, mode)
			checkFault(t, r, 7, 1, hostname(t), "called global exit with status 7")
		})
	}
}

// TestLauncherKilled kills goshmem-run with SIGKILL while its PEs run: the
// PEs end, and their segments are removed.
func TestLauncherKilled(t *testing.T) {
	killLauncher(t, namedSegments, "-np", "4", peProgram, "block")
	noLeftovers(t)
}

// startBlocked starts goshmem-run with args (PEs in the block mode, which
// print "ready PE pid PID") and returns once every PE is ready, with their
// pids in rank order, and a function that returns what goshmem-run wrote on
// its standard error so far. The caller waits for cmd.
func startBlocked(t *testing.T, env []string, args ...string) (cmd *exec.Cmd, pids []int, stderr func() string) {
	t.Helper()
	needBinaries(t)
	np := 0
	for i, a := range args {
		if a == "-np" && i+1 < len(args) {
			np, _ = strconv.Atoi(args[i+1])
		}
	}
	cmd = exec.Command(goshmemRun, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	// A file, which the test may read while goshmem-run writes it.
	errFile, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer errFile.Close()
	cmd.Stderr = errFile
	stderr = func() string {
		b, _ := os.ReadFile(errFile.Name())
		return string(b)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	ready := regexp.MustCompile(`^ready (\d+) pid (\d+)$`)
	pids = make([]int, np)
	lines := make(chan string)
	go func() {
		for s := bufio.NewScanner(out); s.Scan(); {
			lines <- s.Text()
		}
		close(lines)
	}()
	guard := time.After(hangGuard)
	for n := 0; n < np; {
		select {
		case l, ok := <-lines:
			if !ok {
				cmd.Wait()
				t.Fatalf("goshmem-run ended before its PEs were ready; stderr:\n%s", stderr())
			}
			if m := ready.FindStringSubmatch(l); m != nil {
				rank, _ := strconv.Atoi(m[1])
				pids[rank], _ = strconv.Atoi(m[2])
				n++
			}
		case <-guard:
			t.Fatalf("PEs not ready within %v; stderr:\n%s", hangGuard, stderr())
		}
	}
	go func() {
		for range lines { // the rest of the output
		}
	}()
	return cmd, pids, stderr
}

// killLauncher starts goshmem-run with args (PEs in the block mode), kills
// it with SIGKILL once every PE is ready, and waits (up to hangGuard) for
// every PE process to be gone.
func killLauncher(t *testing.T, env []string, args ...string) {
	t.Helper()
	cmd, pids, _ := startBlocked(t, env, args...)
	start := time.Now()
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	waitGone(t, pids, "goshmem-run was killed")
	t.Logf("%d PEs gone %v after goshmem-run was killed", len(pids), time.Since(start).Round(time.Millisecond))
}

// waitGone waits (up to hangGuard) for the processes pids to be gone, after
// what (for the message).
func waitGone(t *testing.T, pids []int, what string) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				syscall.Kill(pid, syscall.SIGKILL)
				t.Fatalf("process %d still there %v after %s", pid, hangGuard, what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// waitTimeout waits for cmd, killing it after limit.
func waitTimeout(cmd *exec.Cmd, limit time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if _, ok := err.(*exec.ExitError); ok {
			return nil
		}
		return err
	case <-time.After(limit):
		cmd.Process.Kill()
		<-done
		return fmt.Errorf("still running after %v", limit)
	}
}

// parentOf returns the parent pid of process pid.
func parentOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	// pid (comm) S ppid ...: the fields after the last ')'.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	return ppid
}

// alive reports whether process pid exists and is not a zombie.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// TestSingleHostLoopback: every listening or bound socket of the PEs of a
// job on one host is on the loopback.
func TestSingleHostLoopback(t *testing.T) {
	for _, tls := range []string{"all", "tcp,self"} {
		t.Run("tls="+tls, func(t *testing.T) {
			const np = 3
			r := run(t, []string{"UCX_TLS=" + tls}, "-np", strconv.Itoa(np), peProgram, "listeners")
			if r.code != 0 {
				t.Fatalf("%v", r)
			}
			tcp := map[string]bool{}
			for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
				f := strings.Fields(l)
				if len(f) != 4 || f[0] != "listener" {
					continue
				}
				if !strings.HasPrefix(f[3], "127.0.0.1:") {
					t.Errorf("PE %s listens on %s %s, not on the loopback", f[1], f[2], f[3])
				}
				if f[2] == "tcp" {
					tcp[f[1]] = true
				}
			}
			if len(tcp) != np {
				t.Errorf("found listening tcp sockets for %d PEs, want %d; %v", len(tcp), np, r)
			}
		})
	}
}

// TestSegmentMode: named segments are readable and writable by their
// owner only, and have no name left once Init returns: every peer mapped
// them, so nothing is left in /dev/shm however the PE ends.
func TestSegmentMode(t *testing.T) {
	r := run(t, namedSegments, "-np", "2", peProgram, "segments")
	if r.code != 0 {
		t.Fatalf("%v", r)
	}
	n := 0
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		f := strings.Fields(l)
		if len(f) != 5 || f[0] != "segment" {
			continue
		}
		n++
		if f[3] != "-rw-------" && f[3] != "?" {
			t.Errorf("segment %s mapped by PE %s has mode %s, want -rw-------", f[2], f[1], f[3])
		}
		if f[4] != "unlinked" {
			t.Errorf("segment %s mapped by PE %s is still in /dev/shm after Init", f[2], f[1])
		}
	}
	if n < 4 {
		t.Errorf("found %d named segments mapped, want at least the 2 heaps in each of the 2 PEs; %v", n, r)
	}
	noLeftovers(t)
}

// TestAgentKilled kills the agent of the PEs with SIGKILL: the PEs die
// with it, nobody is left to remove their named segments, and yet none is
// left in /dev/shm; goshmem-run names a PE the agent never reported.
func TestAgentKilled(t *testing.T) {
	cmd, pids, stderr := startBlocked(t, namedSegments, "-np", "3", peProgram, "block")
	agent := parentOf(t, pids[0])
	if agent == cmd.Process.Pid {
		t.Fatalf("PE %d is a child of goshmem-run, not of an agent", pids[0])
	}
	syscall.Kill(agent, syscall.SIGKILL)
	waitGone(t, pids, "their agent was killed")
	if err := waitTimeout(cmd, hangGuard); err != nil {
		t.Fatalf("goshmem-run did not end within %v of its agent's death: %v; stderr:\n%s", hangGuard, err, stderr())
	}
	if code := cmd.ProcessState.ExitCode(); code != 137 || !strings.Contains(stderr(), "never reported how it ended") {
		t.Errorf("goshmem-run exited with %d, want 137, naming a PE its agent never reported; stderr:\n%s", code, stderr())
	}
	// The PEs are gone (perhaps zombies of an init that reaps late): what
	// bears their pids now, nobody removes.
	for _, pid := range pids {
		left, _ := filepath.Glob(fmt.Sprintf("/dev/shm/goshmem-%d-*", pid))
		for _, f := range left {
			os.Remove(f)
			t.Errorf("%s left in /dev/shm by PE process %d", f, pid)
		}
	}
	noLeftovers(t)
}

// writeScript writes an executable shell script into dir.
func writeScript(t *testing.T, dir, name, body string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}
