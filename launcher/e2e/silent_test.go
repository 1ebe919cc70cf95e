package e2e_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// silentTimeout is the failure timeout of the jobs of TestSilentPeers:
// short, to keep them short, and long enough that a loaded machine does not
// starve a healthy PE that long.
const silentTimeout = "3s"

// computeFor is how long the computing PE of TestSilentPeers stays silent:
// twice the failure timeout.
const computeFor = "6s"

// TestSilentPeers: a PE that is stopped, or hung (frozen: it neither runs
// nor exits), ends the job within the failure timeout, which names it; so
// does an agent that is stopped; a PE that computes for far longer than the
// failure timeout without calling the library is never declared dead. Over
// shared memory and over tcp.
func TestSilentPeers(t *testing.T) {
	t.Parallel() // its jobs wait for failure timeouts
	h := hostname(t)
	for _, tr := range []struct{ name, tls string }{{"sm", ""}, {"tcp", "tcp,self"}} {
		env := []string{"FAIL_PE=1"}
		if tr.tls != "" {
			env = append(env, "UCX_TLS="+tr.tls)
		}
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			t.Run("stopped", func(t *testing.T) {
				t.Parallel()
				// Its agent sees it stopped.
				r := run(t, env, "-np", "3", "-failure-timeout", silentTimeout, peProgram, "stop")
				checkFault(t, r, 1, 1, h, "was stopped (SIGSTOP or SIGTSTP) for")
				t.Logf("ended after %v", r.took.Round(time.Millisecond))
				noLeftovers(t)
			})
			t.Run("hung", func(t *testing.T) {
				t.Parallel()
				// Frozen, it is not stopped: it stops answering its agent.
				fz := newFreezer(t)
				cmd, pids, stderr := startBlocked(t, env, "-np", "3", "-failure-timeout", silentTimeout, peProgram, "block")
				start := time.Now()
				fz.freeze(pids[1])
				for !strings.Contains(stderr(), "goshmem-run: PE ") && time.Since(start) < hangGuard {
					time.Sleep(20 * time.Millisecond)
				}
				took := time.Since(start)
				fz.thaw() // a frozen process cannot die
				if err := waitTimeout(cmd, hangGuard); err != nil {
					t.Fatal(err)
				}
				r := jobResult{code: cmd.ProcessState.ExitCode(), stderr: stderr(), took: took}
				checkFault(t, r, 1, 1, h, "stopped answering its agent for")
				t.Logf("ended after %v", took.Round(time.Millisecond))
				waitGone(t, pids, "the job ended")
				noLeftovers(t)
			})
			t.Run("agent stopped", func(t *testing.T) {
				t.Parallel()
				cmd, pids, stderr := startBlocked(t, env, "-np", "3", "-failure-timeout", silentTimeout, peProgram, "block")
				agent := parentOf(t, pids[0])
				start := time.Now()
				syscall.Kill(agent, syscall.SIGSTOP)
				if err := waitTimeout(cmd, hangGuard); err != nil {
					syscall.Kill(agent, syscall.SIGKILL)
					t.Fatal(err)
				}
				r := jobResult{code: cmd.ProcessState.ExitCode(), stderr: stderr(), took: time.Since(start)}
				checkFault(t, r, 1, 0, h, "was lost: the agent that started it left the job")
				t.Logf("ended after %v", r.took.Round(time.Millisecond))
				waitGone(t, append(pids, agent), "the job ended")
				noLeftovers(t)
			})
			t.Run("computing", func(t *testing.T) {
				if tr.name == "tcp" {
					// Its waiting PEs and the computing one hold both
					// cores for the whole computation.
					fullMatrixOnly(t)
				}
				t.Parallel()
				r := run(t, append(env, "COMPUTE="+computeFor), "-np", "3", "-failure-timeout", silentTimeout, peProgram, "compute")
				if r.code != 0 || !strings.Contains(r.stdout, "computed ") {
					t.Errorf("a PE that computed for %s, with a failure timeout of %s: %v", computeFor, silentTimeout, r)
				}
			})
		})
	}
}

// freezer freezes processes with the cgroup freezer (v1's freezer.state,
// or v2's cgroup.freeze): they neither run nor take signals until thawed.
type freezer struct {
	t              *testing.T
	dir            string
	file           string // in dir: the freezer's state
	frozen, thawed string // what file takes
}

// freezers numbers the freezers of this process: tests that run in
// parallel each have their own.
var freezers atomic.Int64

// newFreezer makes a cgroup to freeze processes in, removed when the test
// ends; it skips the test, saying why, where it cannot.
func newFreezer(t *testing.T) *freezer {
	name := fmt.Sprintf("goshmem-e2e-%d-%d", os.Getpid(), freezers.Add(1))
	f := &freezer{t: t}
	if _, err := os.Stat("/sys/fs/cgroup/freezer/cgroup.procs"); err == nil {
		f.dir, f.file, f.frozen, f.thawed = filepath.Join("/sys/fs/cgroup/freezer", name), "freezer.state", "FROZEN", "THAWED"
	} else if _, err := os.Stat("/sys/fs/cgroup/cgroup.subtree_control"); err == nil {
		f.dir, f.file, f.frozen, f.thawed = filepath.Join("/sys/fs/cgroup", name), "cgroup.freeze", "1", "0"
	} else {
		t.Skip("skipping: no cgroup freezer (v1 or v2) to hang a PE with")
	}
	if err := os.Mkdir(f.dir, 0o755); err != nil {
		t.Skipf("skipping: cannot make a cgroup to freeze a PE in: %v", err)
	}
	t.Cleanup(func() {
		f.set(f.thawed)
		for deadline := time.Now().Add(hangGuard); os.Remove(f.dir) != nil && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond) // until its processes are gone
		}
	})
	return f
}

func (f *freezer) set(state string) error {
	return os.WriteFile(filepath.Join(f.dir, f.file), []byte(state), 0)
}

// freeze moves process pid into the freezer's cgroup and freezes it.
func (f *freezer) freeze(pid int) {
	f.t.Helper()
	if err := os.WriteFile(filepath.Join(f.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		f.t.Fatalf("moving PE process %d into %s: %v", pid, f.dir, err)
	}
	if err := f.set(f.frozen); err != nil {
		f.t.Fatalf("freezing %s: %v", f.dir, err)
	}
}

// thaw lets the processes of the freezer run again.
func (f *freezer) thaw() {
	f.t.Helper()
	if err := f.set(f.thawed); err != nil {
		f.t.Errorf("thawing %s: %v", f.dir, err)
	}
}
