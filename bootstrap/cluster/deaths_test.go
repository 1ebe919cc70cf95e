package cluster

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/goshmem/goshmem/bootstrap"
)

// TestNotScheduled stops a member's process (SIGSTOP: to the others, and
// to its own timers, as if it were not scheduled) for 0.6 of the failure
// timeout: the job goes on, both with the stopped agent and with the
// stopped seed, whose timers expire while it is stopped; stopped for
// longer than the failure timeout, the agent is still declared dead.
// (Without the confirmation of deaths, memberlist declared the member dead
// within half of the timeout: as it did for members of a test process that
// went 2.5 s without running, beside other tests.)
func TestNotScheduled(t *testing.T) {
	t.Parallel() // none of these touches configHook; they run after the tests that do
	if testing.Short() {
		t.Skip("skipping: waits for failure timeouts")
	}
	// memberlist declares the stopped member dead after 0.36 to 0.5 of the
	// timeout, and the declaration would stand 0.5 later at the earliest:
	// resumed at 0.6, the member has a quarter of the timeout to answer.
	const timeout = 5 * time.Second
	tests := []struct {
		stopped string // "agent" or "seed": which runs in the stopped process
		stop    time.Duration
		dead    bool // the stopped member is declared dead
	}{
		{"agent", timeout * 6 / 10, false},
		{"seed", timeout * 6 / 10, false},
		{"agent", 2 * timeout, true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/stop=%v", tt.stopped, tt.stop), func(t *testing.T) {
			t.Parallel()
			key := newTestKey(t)
			const size, agents = 2, 2
			var seed *Seed
			var seedAddr, jobID string
			if tt.stopped == "seed" {
				jobID = "not-scheduled"
				h := startHelper(t, helperConfig{Role: "seed", Size: size, Agents: agents, Key: key, JobID: jobID, FailureTimeout: timeout}, nil)
				seedAddr = h.ready
				a := joinTestAgent(t, seedAddr, jobID, key, timeout, 0)
				b := joinTestAgent(t, seedAddr, jobID, key, timeout, 1)
				syscall.Kill(h.cmd.Process.Pid, syscall.SIGSTOP)
				time.Sleep(tt.stop)
				syscall.Kill(h.cmd.Process.Pid, syscall.SIGCONT)
				time.Sleep(timeout * 3 / 2) // for a confirmation under way to end
				for _, ag := range []*Agent{a, b} {
					select {
					case <-ag.Terminated():
						t.Errorf("agent %d took the seed, stopped for %v of a failure timeout of %v, for gone: %s", ag.ID(), tt.stop, timeout, ag.Why())
					default:
					}
				}
				if said := h.said(); len(said) > 0 {
					t.Errorf("the seed, stopped for %v, reported %q", tt.stop, said)
				}
				return
			}
			var err error
			seed, err = NewSeed(SeedConfig{Size: size, Agents: agents, Key: key, FailureTimeout: timeout})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { seed.Close() })
			seedAddr, jobID = seed.Addr(), seed.JobID()
			a := joinTestAgent(t, seedAddr, jobID, key, timeout, 0)
			h := startHelper(t, helperConfig{Role: "agent", Size: size, Agents: agents, ID: 1, Ranks: []int{1}, Seed: seedAddr, JobID: jobID, Key: key, FailureTimeout: timeout}, nil)
			syscall.Kill(h.cmd.Process.Pid, syscall.SIGSTOP)
			if tt.dead {
				r := nextReport(t, seed)
				if r.Kind != ReportAgentLeft || r.Agent != 1 {
					t.Errorf("seed passed on %+v, want agent 1 gone", r)
				}
				return
			}
			time.Sleep(tt.stop)
			syscall.Kill(h.cmd.Process.Pid, syscall.SIGCONT)
			time.Sleep(timeout * 3 / 2)
			noReport(t, seed)
			select {
			case <-a.Terminated():
				t.Errorf("agent 0 took the seed for gone: %s", a.Why())
			default:
			}
			for _, l := range h.said() {
				if strings.HasPrefix(l, "terminated") {
					t.Errorf("the stopped agent, resumed: %s", l)
				}
			}
		})
	}
}

// joinTestAgent joins agent id of a job of 2 PEs and 2 agents, its PE
// being rank id.
func joinTestAgent(t *testing.T, seed, jobID string, key []byte, timeout time.Duration, id int) *Agent {
	t.Helper()
	env := bootstrap.Env{JobID: jobID, Size: 2, Seed: seed, Key: key, FailureTimeout: timeout}
	a, err := JoinAgent(env, AgentConfig{ID: id, Agents: 2, Ranks: []int{id}})
	if err != nil {
		t.Fatalf("JoinAgent %d: %v", id, err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

// TestConfirmDeath runs the confirmation of a death against members that
// answer or not: a death stands when the member's port refuses
// connections, or when it stays unreachable and unheard for the whole
// wait, counted in timer ticks (each heard packet starting it again); not
// when the member answers as alive, or comes back meanwhile.
func TestConfirmDeath(t *testing.T) {
	t.Parallel()
	errTimeout := errors.New("i/o timeout")
	tests := []struct {
		name     string
		reach    error
		alive    bool
		heardFor int  // the member is heard from at each of the first heardFor ticks
		comeBack bool // memberlist takes it back (NotifyJoin)
		closed   bool // the watch closes
		want     bool
	}{
		{"refused", fmt.Errorf("failed: %w", syscall.ECONNREFUSED), false, 0, false, false, true},
		{"answers, alive", nil, true, 0, false, false, false},
		{"answers, not alive yet", nil, false, 0, false, false, true},
		{"unreachable", errTimeout, false, 0, false, false, true},
		{"unreachable, heard from", errTimeout, false, 20, false, false, true},
		{"comes back", errTimeout, false, 0, true, false, false},
		{"the watch closes", errTimeout, false, 0, false, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := newDeathWatch(8 * confirmTick)
			var heardCalls atomic.Int64
			start := time.Now()
			d.reach = func(string, string) error { return tt.reach }
			d.alive = func(string) bool { return tt.alive }
			d.heard = func(string) time.Time {
				if n := heardCalls.Add(1); n <= int64(tt.heardFor)+1 {
					return start.Add(time.Duration(n)) // a packet since the last step
				}
				return start.Add(time.Duration(tt.heardFor + 1))
			}
			back := make(chan struct{})
			if tt.comeBack {
				close(back)
			}
			if tt.closed {
				d.close()
			}
			if got := d.confirm("agent-1", "127.0.0.1:9", back); got != tt.want {
				t.Fatalf("confirm = %v, want %v", got, tt.want)
			}
			// Heard from at each of its first ticks, the member's wait
			// started again after the last of them.
			if n := heardCalls.Load(); tt.heardFor > 0 && n < int64(tt.heardFor+8) {
				t.Errorf("confirmed after %d ticks; heard from at the first %d, want at least 8 more", n-1, tt.heardFor)
			}
		})
	}
}
