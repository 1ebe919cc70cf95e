package launcher

import (
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goshmem/goshmem/bootstrap"
	"github.com/goshmem/goshmem/bootstrap/cluster"
)

// TestBlameFirstCause feeds the launcher's judge the ends of the PEs of a
// job in which PE 1 died and PE 2, having lost it, ended too: PE 1 must be
// named, whatever order the two ends arrive in; the PE that lost its peer
// is named only when the peer did not fail by itself. A PE that a signal
// killed failed by itself even when the seed counts it as told of another's
// end (told: it was dying when the seed passed on PE 2's end).
func TestBlameFirstCause(t *testing.T) {
	t.Parallel()
	signaled := func(sig syscall.Signal) bootstrap.EndCause {
		return bootstrap.EndCause{Kind: bootstrap.EndSignaled, Signal: sig}
	}
	exited := func(status int) bootstrap.EndCause {
		return bootstrap.EndCause{Kind: bootstrap.EndExited, Status: status}
	}
	killed := peEnd{rank: 1, host: "h1", end: signaled(syscall.SIGKILL), code: 137}
	lostIt := peEnd{rank: 2, host: "h2", end: exited(1), code: 1}
	terminated := peEnd{rank: 1, host: "h1", end: signaled(syscall.SIGTERM), code: 143, endedBy: "the launcher ends the job"}
	exitedTold := peEnd{rank: 1, host: "h1", end: exited(2), code: 2, endedBy: "the launcher ends the job"}
	other := peEnd{rank: 0, host: "h0", end: signaled(syscall.SIGTERM), code: 143, endedBy: "the launcher ends the job"}
	stopped := peEnd{rank: 1, host: "h1", end: bootstrap.EndCause{Kind: bootstrap.EndStopped, For: 1875 * time.Millisecond}, code: 1}
	hung := peEnd{rank: 1, host: "h1", end: bootstrap.EndCause{Kind: bootstrap.EndHung, For: 4375 * time.Millisecond, Limit: 5 * time.Second}, code: 1}
	left := peEnd{rank: 1, host: "h1", end: exited(0), code: 0}
	tests := []struct {
		name string
		told bool
		ends []peEnd
		rank int
		code int
		how  string
	}{
		{"cause first", false, []peEnd{killed, lostIt, other}, 1, 137, "was killed by signal 9"},
		{"consequence first", false, []peEnd{lostIt, killed, other}, 1, 137, "was killed by signal 9"},
		{"consequence first, others ended before the cause", false, []peEnd{lostIt, other, killed}, 1, 137, "was killed by signal 9"},
		{"consequence first, the cause told of it", true, []peEnd{lostIt, killed, other}, 1, 137, "was killed by signal 9"},
		{"consequence first, the stopped cause told of it", true, []peEnd{lostIt, stopped, other}, 1, 1, "was stopped (SIGSTOP or SIGTSTP) for"},
		{"consequence first, the hung cause told of it", true, []peEnd{lostIt, hung, other}, 1, 1, "stopped answering its agent for"},
		{"consequence first, the cause left without finalize", false, []peEnd{lostIt, other, left}, 1, 1, "exited without finalize"},
		{"cause left without finalize first", false, []peEnd{left, lostIt, other}, 1, 1, "exited without finalize"},
		{"the lost PE did not fail", false, []peEnd{lostIt, terminated, other}, 2, 1, "after it lost PE 1 (connection reset by peer)"},
		{"consequence first, the cause exited by itself after it was told to end", false, []peEnd{lostIt, exitedTold, other}, 1, 2, "exited with status 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := newJudgeJob(t, 3)
			m := joinPE(t, j, 2)
			if err := m.ReportLost(1, "connection reset by peer"); err != nil {
				t.Fatal(err)
			}
			if tt.told {
				if err := joinPE(t, j, 1).ReportLost(2, "the seed told it that PE 2 exited with status 1"); err != nil {
					t.Fatal(err)
				}
			}
			for _, e := range tt.ends {
				j.ended(e)
			}
			j.concludeBlame()
			if e := j.first; e == nil || e.Rank != tt.rank || e.Code != tt.code || !strings.Contains(e.How, tt.how) {
				t.Errorf("the job is named after %+v, want PE %d (%q) with code %d", e, tt.rank, tt.how, tt.code)
			}
		})
	}
}

// newJudgeJob returns a job of np PEs that has a seed and started nothing,
// for the judge (job.ended) alone.
func newJudgeJob(t *testing.T, np int) *job {
	t.Helper()
	key, err := bootstrap.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := cluster.NewSeed(cluster.SeedConfig{Size: np, Agents: 1, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { seed.Close() })
	j := &job{opts: Options{Logf: t.Logf}, np: np, seed: seed, key: key, host: "h", pes: make([]peState, np), running: np}
	j.failureTimeout, j.alive = bootstrap.DefaultFailureTimeout, time.Now()
	return j
}

// joinPE joins the job of j as the PE of rank, in this process, through an
// agent of its own.
func joinPE(t *testing.T, j *job, rank int) *bootstrap.Member {
	t.Helper()
	agent, err := cluster.JoinAgent(bootstrap.Env{JobID: j.seed.JobID(), Size: j.np, Seed: j.seed.Addr(), Key: j.key},
		cluster.AgentConfig{Agents: 1, Ranks: []int{rank}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Close() })
	f, err := agent.Attach(rank)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Dup(int(f.Fd()))
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	m, err := bootstrap.Join(bootstrap.Env{JobID: j.seed.JobID(), Rank: rank, Size: j.np, LocalRank: 0, LocalSize: 1,
		Seed: j.seed.Addr(), Key: j.key, AgentFD: fd})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// TestEndedBySignal: a PE the group had signalled ended by the group's
// doing, unless it died of a signal the group never sent (its own SIGKILL,
// still under way when the group's SIGTERM found it running).
func TestEndedBySignal(t *testing.T) {
	const (
		exit1    = syscall.WaitStatus(1 << 8)
		killed9  = syscall.WaitStatus(syscall.SIGKILL)
		killed15 = syscall.WaitStatus(syscall.SIGTERM)
	)
	tests := []struct {
		name string
		sent []syscall.Signal
		ws   syscall.WaitStatus
		want bool
	}{
		{"not signalled, exit 1", nil, exit1, false},
		{"not signalled, killed by 9", nil, killed9, false},
		{"sent 15, exit 1", []syscall.Signal{syscall.SIGTERM}, exit1, true},
		{"sent 15, killed by 15", []syscall.Signal{syscall.SIGTERM}, killed15, true},
		{"sent 15, killed by 9", []syscall.Signal{syscall.SIGTERM}, killed9, false},
		{"sent 15 and 9, killed by 9", []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL}, killed9, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &proc{}
			for _, s := range tt.sent {
				p.sent.Or(1 << uint(s))
				p.signalled.Store(true)
			}
			if got := p.endedByStatus(tt.ws); got != tt.want {
				t.Errorf("endedByStatus(%#x) = %v, want %v", uint32(tt.ws), got, tt.want)
			}
		})
	}
}

// TestPEExitEndedBy: an agent reports a PE that it ended as ended by it
// (why), but not one that ended by itself, nor one that it killed for
// stalling, even when the job's end signalled it while it died: the stall
// is a failure of its own, which the launcher names as the job's first
// cause (TestSilentPeers/tcp/stopped named the PE that lost it instead,
// once, under load).
func TestPEExitEndedBy(t *testing.T) {
	const why = "the launcher ends the job: PE 2 failed"
	for _, tt := range []struct {
		name string
		e    peExit
		want string
	}{
		{"by itself", peExit{}, ""},
		{"signalled", peExit{signalled: true}, why},
		{"stalled", peExit{stalled: &bootstrap.EndCause{Kind: bootstrap.EndStopped}}, ""},
		{"stalled, then signalled", peExit{signalled: true, stalled: &bootstrap.EndCause{Kind: bootstrap.EndStopped}}, ""},
	} {
		if got := tt.e.endedBy(why); got != tt.want {
			t.Errorf("%s: endedBy = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestBlameFlood: a PE whose end is never reported (its agent left, or
// exited, first) while strangers flooded the bootstrap's ports is not
// named: the flood is, which may have kept its agent's reports out.
// Without a flood, the PE is named.
func TestBlameFlood(t *testing.T) {
	t.Parallel()
	for _, flooded := range []bool{false, true} {
		for _, how := range []string{"agent left", "agent exited"} {
			t.Run(fmt.Sprintf("%s/flooded=%v", how, flooded), func(t *testing.T) {
				j := newJudgeJob(t, 2)
				if flooded {
					c, err := net.Dial("tcp", j.seed.Addr())
					if err != nil {
						t.Fatal(err)
					}
					c.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
					io.Copy(io.Discard, c) // until the seed closes it
					c.Close()
					for deadline := time.Now().Add(time.Minute); !j.seed.Strangers().Any(); time.Sleep(time.Millisecond) {
						if time.Now().After(deadline) {
							t.Fatal("the seed did not count the stranger")
						}
					}
				}
				u := &unit{name: "agent on h0", host: "h0", cancel: func() {}}
				j.units, j.unitsUp = []*unit{u}, 1
				switch how {
				case "agent left":
					j.report(cluster.Report{Kind: cluster.ReportAgentLeft, Rank: -1, Agent: 0, Host: "h0", End: bootstrap.EndCause{Kind: bootstrap.EndAgentLeft}})
				case "agent exited":
					j.unitExited(unitExit{u: u, code: 1}, nil)
				}
				e := j.first
				switch {
				case e == nil:
					t.Fatal("the job is named after nothing")
				case flooded && (e.Rank != -1 || !strings.Contains(e.How, "was flooded by strangers") || !strings.Contains(e.How, "127.0.0.1") || !strings.Contains(e.How, "PE 0 on host h0")):
					t.Errorf("the job is named after %v; want the flood, and PE 0's loss", e)
				case !flooded && e.Rank != 0:
					t.Errorf("the job is named after %v; want PE 0", e)
				}
			})
		}
	}
}

// TestBlameAbandoned: a PE that finalized and left while the others
// waited for it in a collective ended well by itself, but the job cannot
// go on: the seed's report of it ends the job, naming it.
func TestBlameAbandoned(t *testing.T) {
	t.Parallel()
	j := newJudgeJob(t, 2)
	j.ended(peEnd{rank: 1, host: "h1", end: bootstrap.EndCause{Kind: bootstrap.EndExited}, code: 0})
	if j.first != nil {
		t.Fatalf("the job is named after %v, an end with status 0", j.first)
	}
	j.report(cluster.Report{Kind: cluster.ReportAbandoned, Rank: 1, Agent: 0, Host: "h1", Code: 1,
		End: bootstrap.EndCause{Kind: bootstrap.EndAbandoned, Detail: "PE(s) 0 wait in it (collective 1, on agent 0)"}})
	const want = "PE 1 on host h1 left the job after it finalized, while a collective that cannot complete without it was pending: PE(s) 0 wait in it (collective 1, on agent 0)"
	if e := j.first; e == nil || e.Rank != 1 || e.Code != 1 || e.Error() != want {
		t.Errorf("the job is named after %v, want %q with code 1", e, want)
	}
}
