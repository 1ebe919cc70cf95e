package launcher

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// launcherMain is a launcher for TestLauncherKilled: it runs the job that
// TEST_NP, TEST_AGENT and the PE mode describe, and is killed by the test.
func launcherMain(mode string) int {
	np, _ := strconv.Atoi(os.Getenv("TEST_NP"))
	o := Options{NP: np, Program: os.Args[0], Env: []string{envPEMode + "=" + mode}}
	if os.Getenv("TEST_AGENT") != "" {
		o.AgentPath = os.Args[0]
	}
	o.FailureTimeout, _ = time.ParseDuration(os.Getenv("TEST_FAILURE_TIMEOUT"))
	code, err := Run(context.Background(), o)
	fmt.Fprintf(os.Stderr, "launcher: Run = %d, %v\n", code, err)
	return code
}

// alive reports whether process pid exists and is not a zombie.
func alive(pid int) bool {
	return syscall.Kill(pid, 0) == nil && procState(pid) != 'Z' && procState(pid) != 0
}

// readPids waits for the pid files of np PEs in dir.
func readPids(t *testing.T, dir string, np int, launcher *exec.Cmd) []int {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	var pids []int
	for r := 0; r < np; {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("pe-%d.pid", r)))
		if err == nil {
			pid, _ := strconv.Atoi(string(b))
			pids = append(pids, pid)
			r++
			continue
		}
		if launcher.ProcessState != nil || time.Now().After(deadline) {
			t.Fatalf("PE %d did not start within %v", r, waitLimit)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return pids
}

// startLauncher starts this test binary as a launcher (launcherMain) of np
// PEs in the pidfile mode, with env added to its environment, and returns
// it, its output, and the pids of the PEs once they are ready. The test's
// end kills it.
func startLauncher(t *testing.T, np int, env ...string) (*exec.Cmd, *syncBuffer, []int) {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(testBinary(t), "-test.run=^$")
	cmd.Env = append(append(os.Environ(), envLauncherMode+"=pidfile", "TEST_NP="+strconv.Itoa(np), "TEST_PID_DIR="+dir), env...)
	out := new(syncBuffer)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	return cmd, out, readPids(t, dir, np, cmd)
}

// TestLauncherKilled kills the launcher with SIGKILL: every PE must end,
// and, with an agent, the named segments of the PEs must be removed.
func TestLauncherKilled(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("skipping: kills a launcher and waits for its PEs to end")
	}
	for _, agent := range []bool{false, true} {
		t.Run(fmt.Sprintf("agent=%v", agent), func(t *testing.T) {
			const np = 3
			var env []string
			if agent {
				env = []string{"TEST_AGENT=1", "TEST_FAKE_SEGMENT=1"}
			}
			cmd, out, pids := startLauncher(t, np, env...)
			go cmd.Wait()
			cmd.Process.Signal(syscall.SIGKILL)
			deadline := time.Now().Add(waitLimit)
			for _, pid := range pids {
				for alive(pid) {
					if time.Now().After(deadline) {
						syscall.Kill(pid, syscall.SIGKILL)
						t.Fatalf("PE process %d still there %v after the launcher was killed; output:\n%s", pid, waitLimit, out.String())
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			if agent {
				// The agent removes the segments of each PE once it is gone.
				for _, pid := range pids {
					pattern := fmt.Sprintf("/dev/shm/goshmem-%d-*", pid)
					for {
						left, _ := filepath.Glob(pattern)
						if len(left) == 0 {
							break
						}
						if time.Now().After(deadline) {
							for _, f := range left {
								os.Remove(f)
							}
							t.Fatalf("%v left after the launcher was killed; output:\n%s", left, out.String())
						}
						time.Sleep(20 * time.Millisecond)
					}
				}
			}
			t.Logf("output:\n%s", out.String())
		})
	}
}

// TestLauncherStopped stops the launcher (SIGSTOP) for longer than the
// failure timeout, and resumes it once the PEs are gone (their agent, or
// their memberlist nodes, took the launcher for gone). The launcher must
// then name itself, not a PE its agent ended.
func TestLauncherStopped(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("skipping: waits for the failure timeout")
	}
	for _, agent := range []bool{false, true} {
		t.Run(fmt.Sprintf("agent=%v", agent), func(t *testing.T) {
			t.Parallel() // each waits for the failure timeout
			env := []string{"TEST_FAILURE_TIMEOUT=2s"}
			if agent {
				env = append(env, "TEST_AGENT=1")
			}
			cmd, out, pids := startLauncher(t, 2, env...)
			done := make(chan error, 1)
			cmd.Process.Signal(syscall.SIGSTOP)
			if agent {
				// The agent ends the PEs once it takes the launcher for gone.
				deadline := time.Now().Add(waitLimit)
				for _, pid := range pids {
					for alive(pid) {
						if time.Now().After(deadline) {
							cmd.Process.Signal(syscall.SIGCONT)
							t.Fatalf("PE process %d still there %v after the launcher was stopped", pid, waitLimit)
						}
						time.Sleep(20 * time.Millisecond)
					}
				}
			} else {
				time.Sleep(3 * time.Second) // longer than the failure timeout
			}
			cmd.Process.Signal(syscall.SIGCONT)
			go func() { done <- cmd.Wait() }()
			select {
			case <-done:
			case <-time.After(waitLimit):
				t.Fatalf("the launcher did not end within %v of its resumption; output:\n%s", waitLimit, out.String())
			}
			s := out.String()
			if !strings.Contains(s, "the bootstrap seed on host") || !strings.Contains(s, "did not run for") ||
				!strings.Contains(s, "launcher: Run = 1,") {
				t.Errorf("the resumed launcher does not name itself, stopped, with exit code 1; output:\n%s", s)
			}
			if strings.Contains(s, "goshmem-run: PE ") {
				t.Errorf("the resumed launcher blames a PE; output:\n%s", s)
			}
		})
	}
}

// TestRemoteShellFails: a host the remote shell cannot reach ends the job
// with a message that names it.
func TestRemoteShellFails(t *testing.T) {
	r := runJob(t, context.Background(), 4, "env", func(o *Options) {
		launchModes[2].set(t, o) // rsh: fake1:2, fake2:2
		o.Env = append(o.Env, "FAKE_RSH_FAIL=fake2")
	})
	checkFailure(t, r, 255, 2, "never reported how it ended")
	if !strings.Contains(r.stderr, "ssh: connect to host fake2") {
		t.Errorf("stderr lacks the remote shell's error:\n%s", r.stderr)
	}
	var je *JobError
	if errors.As(r.err, &je) && je.Host != "fake2" {
		t.Errorf("JobError names host %q, want fake2", je.Host)
	}
}

func TestGlobalExitCode(t *testing.T) {
	t.Parallel()
	forEachMode(t, func(t *testing.T, lm launchMode) {
		for _, code := range []int{42, 0} {
			t.Run(fmt.Sprintf("code=%d", code), func(t *testing.T) {
				r := runJob(t, context.Background(), 3, "globalexit", func(o *Options) {
					lm.set(t, o)
					o.Env = append(o.Env, "TEST_GLOBAL_EXIT_CODE="+strconv.Itoa(code))
				})
				if code == 0 {
					if r.code != 0 || r.err != nil {
						t.Errorf("global exit 0: Run = %d, %v; want 0, nil", r.code, r.err)
					}
					return
				}
				checkFailure(t, r, code, 1, "called global exit with status 42")
			})
		}
	})
}

func TestOutputDir(t *testing.T) {
	t.Parallel()
	forEachMode(t, func(t *testing.T, lm launchMode) {
		const np = 3
		dir := filepath.Join(t.TempDir(), "out")
		r := runJob(t, context.Background(), np, "output", func(o *Options) {
			lm.set(t, o)
			o.OutputDir = dir
			o.TagOutput = true
		})
		if r.code != 0 || r.err != nil {
			t.Fatalf("Run = %d, %v", r.code, r.err)
		}
		if r.stdout != "" {
			t.Errorf("output went to stdout too: %q", r.stdout)
		}
		for rank := range np {
			b, err := os.ReadFile(filepath.Join(dir, OutputFileName(rank)))
			if err != nil {
				t.Fatal(err)
			}
			var lines []string
			for s := bufio.NewScanner(strings.NewReader(string(b))); s.Scan(); {
				lines = append(lines, s.Text())
			}
			want := []string{fmt.Sprintf("out line 1 of %d", rank), fmt.Sprintf("out line 2 of %d", rank),
				fmt.Sprintf("err line of %d", rank), fmt.Sprintf("partial of %d", rank)}
			for _, w := range want {
				found := false
				for _, l := range lines {
					found = found || l == w
				}
				if !found {
					t.Errorf("%s lacks the line %q (untagged):\n%s", OutputFileName(rank), w, b)
				}
			}
			if len(lines) != len(want) {
				t.Errorf("%s has %d lines, want %d:\n%s", OutputFileName(rank), len(lines), len(want), b)
			}
		}
	})
}
