package launcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/bootstrap"
	"github.com/goshmem/goshmem/bootstrap/cluster"
)

// The environment of the test binary that lowers its limits (setTestLimits),
// and that makes it, started as an agent, die as a Go runtime that cannot
// create a thread does (crashLikeRuntime).
const (
	envNproc      = "GOSHMEM_LAUNCHER_TEST_NPROC"
	envNofile     = "GOSHMEM_LAUNCHER_TEST_NOFILE"
	envAgentCrash = "GOSHMEM_LAUNCHER_TEST_AGENT_CRASH"
)

// setTestLimits sets the soft and hard RLIMIT_NPROC and RLIMIT_NOFILE of
// this process to the values of envNproc and envNofile, when set: the
// test binary runs as a launcher, agent or PE under those limits (as after
// ulimit -u, ulimit -n), and passes them on to what it starts.
func setTestLimits() error {
	for _, l := range []struct {
		env string
		res int
	}{{envNproc, unix.RLIMIT_NPROC}, {envNofile, syscall.RLIMIT_NOFILE}} {
		v := os.Getenv(l.env)
		if v == "" {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return fmt.Errorf("%s=%q: %w", l.env, v, err)
		}
		// syscall's, not unix's: for RLIMIT_NOFILE it also stops the os
		// package from giving children the limit it found at start.
		if err := syscall.Setrlimit(l.res, &syscall.Rlimit{Cur: n, Max: n}); err != nil {
			return fmt.Errorf("%s=%d: %w", l.env, n, err)
		}
	}
	return nil
}

// runtimeDumpStarts are the first lines of what the Go runtime writes when
// it cannot create a thread, with cgo and without.
var runtimeDumpStarts = []string{
	"runtime/cgo: pthread_create failed: Resource temporarily unavailable",
	"runtime: failed to create new OS thread (have 7 already; errno=11)\nruntime: may need to increase max user processes (ulimit -u)\nfatal error: newosproc",
}

// dumpLines is the number of goroutine lines of the simulated crash dumps.
const dumpLines = 300

// crashLikeRuntime writes what the Go runtime writes when it cannot create
// a thread, a dump of dumpLines goroutines included, and returns its exit
// status.
func crashLikeRuntime(w io.Writer) int {
	var b strings.Builder
	b.WriteString(runtimeDumpStarts[1] + "\n\nruntime stack:\n")
	for i := range dumpLines {
		fmt.Fprintf(&b, "goroutine %d [running]:\n", i)
	}
	io.WriteString(w, b.String())
	return 2
}

// checkNoDump fails when out holds a line of a runtime's crash dump.
func checkNoDump(t *testing.T, out string) {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimPrefix(l, "[pe 1] ")
		if strings.HasPrefix(l, "goroutine ") || hasAnyPrefix([]byte(l), threadMarkers) || strings.HasPrefix(l, "fatal error") {
			t.Errorf("a line of the crash dump was forwarded: %q", l)
			return
		}
	}
}

// TestThreadLimit: a PE whose runtime cannot create a thread says so, and
// dies with a dump of hundreds of lines; its agent (or the launcher) puts
// one line that names the limits to raise in place of the dump, and names
// them in the job's failure.
func TestThreadLimit(t *testing.T) {
	t.Parallel()
	for i, start := range runtimeDumpStarts {
		script := `if [ "$GOSHMEM_RANK" = 1 ]; then
	echo "before the crash" >&2
	printf '%s\n' "$DUMP_START" >&2
	i=0; while [ $i -lt ` + strconv.Itoa(dumpLines) + ` ]; do echo "goroutine $i [running]:" >&2; i=$((i+1)); done
	kill -ABRT $$
fi
sleep 60`
		for _, lm := range launchModes[:2] {
			t.Run(fmt.Sprintf("%s/dump%d", lm.name, i), func(t *testing.T) {
				t.Parallel()
				r := runJob(t, context.Background(), 2, "", func(o *Options) {
					lm.set(t, o)
					o.Program, o.Args = "sh", []string{"-c", script}
					o.Env = append(o.Env, "DUMP_START="+start)
				})
				checkFailure(t, r, 134, 1, "could not create a thread, a limit on processes and threads was reached: the processes and threads of the user (ulimit -u: ")
				checkNoDump(t, r.stderr)
				if !strings.Contains(r.stderr, "before the crash\n") {
					t.Errorf("the PE's line before the crash was not forwarded:\n%s", r.stderr)
				}
				// One line stands for the dump (and the replay of the PE's
				// last lines shows it again, tagged).
				const instead = "goshmem-run: PE 1 could not create a thread, a limit on processes and threads was reached: the processes and threads of the user (ulimit -u: "
				if n := strings.Count("\n"+r.stderr, "\n"+instead); n != 1 {
					t.Errorf("%d lines %q..., want 1:\n%s", n, instead, r.stderr)
				}
			})
		}
	}
}

// TestAgentThreadLimit: an agent whose runtime cannot create a thread dies
// with a dump of hundreds of lines on its standard error, which the
// launcher reads: one line that names the limits to raise (those of the
// agent's host, or, for another host, what to look at there) stands for
// it, and the job's failure names them.
func TestAgentThreadLimit(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		mode   string
		agents int
		limits string
	}{
		{"agent", 1, "a limit on processes and threads was reached: the processes and threads of the user (ulimit -u: "},
		{"rsh", 2, "a limit on processes and threads of host fake"},
	} {
		t.Run(tt.mode, func(t *testing.T) {
			t.Parallel()
			var lm launchMode
			for _, m := range launchModes {
				if m.name == tt.mode {
					lm = m
				}
			}
			r := runJob(t, context.Background(), 2, "sleep", func(o *Options) {
				lm.set(t, o)
				o.Env = append(o.Env, envAgentCrash+"=1")
			})
			var je *JobError
			if !errors.As(r.err, &je) || r.code != 2 || je.Code != 2 ||
				!strings.Contains(je.How, "never reported how it ended: the agent for host ") ||
				!strings.Contains(je.How, "exited with status 2: it could not create a thread, "+tt.limits) {
				t.Errorf("Run = %d, %v; want 2 and a JobError that names the agent's thread limit (%q)", r.code, r.err, tt.limits)
			}
			checkNoDump(t, r.stderr)
			instead := "could not create a thread, " + tt.limits
			if n := strings.Count(r.stderr, "goshmem-run: the agent for host "); n != tt.agents || strings.Count(r.stderr, instead) != tt.agents {
				t.Errorf("%d lines for the agents' dumps, want %d, each with %q:\n%s", n, tt.agents, instead, r.stderr)
			}
		})
	}
}

// limitedCommand returns a command that runs this test binary (a copy that
// any user may run) with env added, as an unprivileged user: user 65534
// when the test runs as root, whom RLIMIT_NPROC does not bind, or else the
// test's user.
func limitedCommand(t *testing.T, env ...string) *exec.Cmd {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "launcher.test")
	src, err := os.ReadFile(testBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, src, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, bin, "-test.run=^$")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	if os.Getuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	return cmd
}

// TestProcessRoom runs a launcher, and an agent, under ulimit -u 25 (as
// user 65534; a user that is not root gets 20 more than it has), with 8 PEs
// of a Go program to start, which take at least 32: they refuse at once,
// with one line that names the limit and exit status 71, instead of
// starting processes that die for want of threads with crash dumps of
// hundreds of lines (the launcher and the agent among them).
func TestProcessRoom(t *testing.T) {
	t.Parallel()
	const np = 8
	nproc := int64(25)
	if uid := os.Getuid(); uid != 0 {
		nproc = userTasks(uid) + 20 // room for the runtime of the test binary
	}
	ranks := make([]int, np)
	for r := range ranks {
		ranks[r] = r
	}
	for _, tt := range []struct {
		name  string
		env   []string
		stdin func(bin string) string
		want  string
	}{
		{"launcher", []string{envLauncherMode + "=sleep", "TEST_NP=" + strconv.Itoa(np)}, nil,
			"launcher: Run = 71, launcher: cannot start the job on this host: 8 PE(s) of "},
		{"agent", nil, func(bin string) string {
			line, err := json.Marshal(agentConfig{JobID: "j", Seed: "127.0.0.1:9", Key: make([]byte, 32), Size: np, Agents: 1,
				Ranks: ranks, Program: bin})
			if err != nil {
				t.Fatal(err)
			}
			return string(line) + "\n"
		}, ": cannot start 8 PE(s): 8 PE(s) of "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cmd := limitedCommand(t, append(tt.env, envNproc+"="+strconv.FormatInt(nproc, 10))...)
			if tt.stdin != nil {
				cmd.Args = []string{cmd.Path, AgentArg}
				cmd.Stdin = strings.NewReader(tt.stdin(cmd.Path))
			}
			out, err := cmd.CombinedOutput()
			t.Logf("%v: %v\n%s", cmd.Args, err, out)
			if cmd.ProcessState == nil {
				t.Skipf("skipping: cannot run the test binary as an unprivileged user: %v", err)
			}
			if code := cmd.ProcessState.ExitCode(); code != exitNoResources {
				t.Errorf("exit status %d, want %d", code, exitNoResources)
			}
			checkNoDump(t, string(out))
			want := tt.want + cmd.Path + " take at least 32 processes and threads, and user "
			if !strings.Contains(string(out), want) || !strings.Contains(string(out), "that ulimit -u allows: raise it") {
				t.Errorf("output lacks %q ... ulimit -u", want)
			}
		})
	}
}

// TestStartNoResources runs a launcher under ulimit -n 30: PEs that cannot
// be started for want of descriptors (pipe2, fork/exec: too many open
// files) end the job with exit status 71, not 127 (program not found), and
// a message that names the limit.
func TestStartNoResources(t *testing.T) {
	t.Parallel()
	cmd := limitedCommand(t, envLauncherMode+"=sleep", "TEST_NP=16", envNofile+"=30")
	cmd.SysProcAttr = nil // root is bound by RLIMIT_NOFILE
	out, err := cmd.CombinedOutput()
	t.Logf("%v\n%s", err, out)
	if code := cmd.ProcessState.ExitCode(); code != exitNoResources {
		t.Errorf("exit status %d, want %d", code, exitNoResources)
	}
	for _, want := range []string{"could not be started: ", "too many open files (a limit on open files was reached: those of a process (ulimit -n: 30); raise it"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// A few PEs start before the descriptors run out: the count of those
	// terminated leaves out the others, which never ran.
	if m := regexp.MustCompile(`terminating the (\d+) running PE\(s\)`).FindSubmatch(out); m == nil {
		t.Errorf("output lacks the count of running PEs")
	} else if n, _ := strconv.Atoi(string(m[1])); n >= 15 {
		t.Errorf("%d PEs counted as running, of the 16 of which some could not be started", n)
	}
}

// TestNotStartedCount: the PEs that an agent could not start, reported
// together, are not counted as running when the first of them ends the
// job.
func TestNotStartedCount(t *testing.T) {
	t.Parallel()
	j := newJudgeJob(t, 4)
	var logs []string
	j.opts.Logf = func(format string, args ...any) { logs = append(logs, fmt.Sprintf(format, args...)) }
	agent, err := cluster.JoinAgent(bootstrap.Env{JobID: j.seed.JobID(), Size: j.np, Seed: j.seed.Addr(), Key: j.key},
		cluster.AgentConfig{Agents: 1, Ranks: []int{0, 1, 2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	notStarted := bootstrap.EndCause{Kind: bootstrap.EndNotStarted, Detail: "pipe2: too many open files"}
	if err := <-agent.Post(cluster.PEEnd{Rank: 2, Host: "h", End: notStarted, Code: exitNoResources},
		cluster.PEEnd{Rank: 3, Host: "h", End: notStarted, Code: exitNoResources}); err != nil {
		t.Fatal(err)
	}
	j.report(<-j.seed.Reports())
	const want = "PE 2 on host h could not be started: pipe2: too many open files; terminating the 2 running PE(s)"
	if len(logs) != 1 || logs[0] != want {
		t.Errorf("launcher log %q, want %q", logs, want)
	}
}

// TestStartStatus: the exit status and the message of a process that could
// not be started say why: 127 only for a program that is not there.
func TestStartStatus(t *testing.T) {
	for _, tt := range []struct {
		err  error
		code int
		says string
	}{
		{&os.PathError{Op: "fork/exec", Path: "/x", Err: syscall.EAGAIN}, exitNoResources, "(ulimit -u: "},
		{os.NewSyscallError("pipe2", syscall.EMFILE), exitNoResources, "those of a process (ulimit -n: "},
		{os.NewSyscallError("pipe2", syscall.ENFILE), exitNoResources, "(fs.file-max: "},
		{&os.PathError{Op: "fork/exec", Path: "/x", Err: syscall.ENOMEM}, exitNoResources, "(ulimit -v: "},
		{&os.PathError{Op: "fork/exec", Path: "/x", Err: syscall.ENOENT}, 127, "no such file"},
		{&exec.Error{Name: "x", Err: exec.ErrNotFound}, 127, "not found"},
	} {
		if code := startStatus(tt.err); code != tt.code {
			t.Errorf("startStatus(%v) = %d, want %d", tt.err, code, tt.code)
		}
		if msg := startError(tt.err).Error(); !strings.Contains(msg, tt.says) {
			t.Errorf("startError(%v) = %q, want it to say %q", tt.err, msg, tt.says)
		}
		if !errors.Is(startError(tt.err), tt.err) {
			t.Errorf("startError(%v) does not wrap it", tt.err)
		}
	}
}

// TestLostCount: when an agent is lost (it left, or its process ended)
// before reporting its PEs, the failure that ends the job counts as
// running only the PEs of the other agents.
func TestLostCount(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"left", "exited"} {
		t.Run(how, func(t *testing.T) {
			j := newJudgeJob(t, 6)
			var logs []string
			j.opts.Logf = func(format string, args ...any) { logs = append(logs, fmt.Sprintf(format, args...)) }
			for r := range j.pes {
				j.pes[r].agent = r / 2 // 3 agents of 2 PEs each
			}
			j.ended(peEnd{rank: 0, host: "h0", end: bootstrap.EndCause{Kind: bootstrap.EndExited}, code: 0}) // before any joined: idle
			switch how {
			case "left":
				j.report(cluster.Report{Kind: cluster.ReportAgentLeft, Agent: 1, Host: "h1", End: bootstrap.EndCause{Kind: bootstrap.EndAgentLeft}})
			case "exited":
				j.unitsUp = 1
				j.unitExited(unitExit{u: &unit{name: "the agent for host h1", host: "h1", ranks: []int{2, 3}}, code: 1}, nil)
			}
			want := "PE 2 on host h1 "
			if len(logs) != 1 || !strings.HasPrefix(logs[0], want) || !strings.HasSuffix(logs[0], "; terminating the 3 running PE(s)") {
				t.Errorf("launcher log %q, want one line %q...%q", logs, want, "; terminating the 3 running PE(s)")
			}
		})
	}
}
