package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goshmem/goshmem/ucs"
	"github.com/hashicorp/memberlist"

	"github.com/goshmem/goshmem/bootstrap"
	"github.com/goshmem/goshmem/bootstrap/internal/wire"
)

// nextReport returns the next report of the seed, failing the test after
// waitLimit.
func nextReport(t *testing.T, s *Seed) Report {
	t.Helper()
	select {
	case r, ok := <-s.Reports():
		if !ok {
			t.Fatal("seed reports closed")
		}
		return r
	case <-time.After(waitLimit):
		t.Fatalf("no report from the seed within %v", waitLimit)
	}
	return Report{}
}

func noReport(t *testing.T, s *Seed) {
	t.Helper()
	select {
	case r := <-s.Reports():
		t.Errorf("unexpected report %+v", r)
	default:
	}
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitLimit):
		t.Fatalf("%s: not within %v", what, waitLimit)
	}
}

// agentEnv is the environment an agent of s gets.
func agentEnv(s *Seed, key []byte, size int) bootstrap.Env {
	return bootstrap.Env{JobID: s.JobID(), Size: size, Seed: s.Addr(), Key: key}
}

func TestAgentReports(t *testing.T) {
	const size = 4
	key := newTestKey(t)
	seed, err := NewSeed(SeedConfig{Size: size, Agents: 2, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	defer seed.Close()
	a0, err := JoinAgent(agentEnv(seed, key, size), AgentConfig{ID: 0, Agents: 2, Ranks: []int{0, 1, 2}})
	if err != nil {
		t.Fatalf("JoinAgent 0: %v", err)
	}
	defer a0.Close()

	tests := []struct {
		rank    int
		end     bootstrap.EndCause
		code    int
		endedBy string
	}{
		{1, bootstrap.EndCause{Kind: bootstrap.EndExited, Status: 3}, 3, ""},
		{0, bootstrap.EndCause{Kind: bootstrap.EndSignaled, Signal: syscall.SIGKILL}, 137, ""},
		{1, bootstrap.EndCause{Kind: bootstrap.EndExited, Status: 1, Detail: "a second report of PE 1"}, 1, ""}, // acknowledged, not passed on
		{2, bootstrap.EndCause{Kind: bootstrap.EndSignaled, Signal: syscall.SIGTERM}, 143, "the launcher ends the job"},
		{3, bootstrap.EndCause{Kind: bootstrap.EndHung, For: 4375 * time.Millisecond, Limit: 5 * time.Second}, 1, ""},
	}
	for i, tt := range tests {
		if err := a0.Report(tt.rank, "h0", tt.end, tt.code, tt.endedBy); err != nil {
			t.Fatalf("report %d: %v", i, err)
		}
		if i == 2 {
			noReport(t, seed)
			continue
		}
		want := Report{Kind: ReportExit, Rank: tt.rank, Agent: 0, Host: "h0", End: tt.end, Code: tt.code,
			EndedByAgent: tt.endedBy != "", Why: tt.endedBy}
		if got := nextReport(t, seed); got != want {
			t.Errorf("report %d: seed passed on %+v, want %+v", i, got, want)
		}
	}
	if err := a0.Report(size, "h0", exited(1), 1, ""); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("report of PE %d: got %v, want ucs.ErrInvalidParam", size, err)
	}

	// Terminate reaches the agent there, and one that joins later.
	seed.Terminate("PE 1 on host h0 exited with status 3")
	waitClosed(t, a0.Terminated(), "agent 0 told to terminate")
	if why := a0.Why(); why != "PE 1 on host h0 exited with status 3" {
		t.Errorf("agent 0: Why() = %q", why)
	}
	a1, err := JoinAgent(agentEnv(seed, key, size), AgentConfig{ID: 1, Agents: 2, Ranks: []int{3}})
	if err != nil {
		t.Fatalf("JoinAgent 1: %v", err)
	}
	defer a1.Close()
	waitClosed(t, a1.Terminated(), "agent 1, joining after Terminate, told to terminate")

	// An agent that leaves is reported once.
	if err := a1.Close(); err != nil {
		t.Errorf("agent 1 Close: %v", err)
	}
	if got := nextReport(t, seed); got.Kind != ReportAgentLeft || got.Agent != 1 || got.End.Kind != bootstrap.EndAgentLeft {
		t.Errorf("after agent 1 left: %+v", got)
	}
	if err := a1.Report(2, "h1", exited(1), 1, ""); !errors.Is(err, bootstrap.ErrClosed) {
		t.Errorf("Report after Close: got %v, want ErrClosed", err)
	}
}

func TestAgentBadJoin(t *testing.T) {
	key := newTestKey(t)
	seed, err := NewSeed(SeedConfig{Size: 2, Agents: 1, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	defer seed.Close()
	for _, cfg := range []AgentConfig{
		{ID: -1, Agents: 1},
		{ID: 1, Agents: 1},
		{ID: 0, Agents: 0},
		{ID: 0, Agents: 1, Ranks: []int{2}},
		{ID: 0, Agents: 1, Ranks: []int{1, 1}},
		{ID: 0, Agents: 1, Node: strings.Repeat("n", maxNodeName+1)},
	} {
		if _, err := JoinAgent(agentEnv(seed, key, 2), cfg); !errors.Is(err, ucs.ErrInvalidParam) {
			t.Errorf("agent %+v: got %v, want ucs.ErrInvalidParam", cfg, err)
		}
	}
	if _, err := JoinAgent(bootstrap.Env{JobID: seed.JobID(), Size: 2, Key: key}, AgentConfig{Agents: 1}); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("agent without seed: got %v, want ucs.ErrInvalidParam", err)
	}
	if a, err := JoinAgent(agentEnv(seed, newTestKey(t), 2), AgentConfig{Agents: 1}); !errors.Is(err, ucs.ErrUnreachable) {
		if err == nil {
			a.Close()
		}
		t.Errorf("agent with another key: got %v, want ucs.ErrUnreachable", err)
	}
	// An agent id the seed does not expect is ignored: its report times
	// out (sooner here than in a job).
	defer func(d time.Duration) { reportTimeout = d }(reportTimeout)
	reportTimeout = 500 * time.Millisecond
	a, err := JoinAgent(agentEnv(seed, key, 2), AgentConfig{ID: 5, Agents: 6})
	if err != nil {
		t.Fatalf("JoinAgent 5: %v", err)
	}
	defer a.Close()
	done := make(chan error, 1)
	go func() { done <- a.Report(0, "h", exited(0), 0, "") }()
	select {
	case err := <-done:
		if !errors.Is(err, ucs.ErrTimedOut) {
			t.Errorf("report of an unexpected agent: got %v, want ucs.ErrTimedOut", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("report of an unexpected agent still blocked")
	}
	noReport(t, seed)
	if _, err := a.Attach(0); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("Attach of a PE that is not the agent's: got %v, want ucs.ErrInvalidParam", err)
	}
}

// TestAgentSeedGone: an agent learns that the seed left, or died.
func TestAgentSeedGone(t *testing.T) {
	fastFailureDetection(t)
	for _, vanishes := range []bool{false, true} {
		t.Run(fmt.Sprintf("vanishes=%v", vanishes), func(t *testing.T) {
			key := newTestKey(t)
			seed, err := NewSeed(SeedConfig{Size: 1, Agents: 1, Key: key})
			if err != nil {
				t.Fatal(err)
			}
			defer seed.Close()
			a, err := JoinAgent(agentEnv(seed, key, 1), AgentConfig{Agents: 1, Ranks: []int{0}})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			if vanishes {
				vanishSeed(seed) // no leave: as if the launcher was killed
			} else {
				seed.Close()
			}
			waitClosed(t, a.Terminated(), "agent noticing the seed gone")
			if a.Why() != wire.ReasonSeedGone {
				t.Errorf("Why() = %q, want %q", a.Why(), wire.ReasonSeedGone)
			}
			if err := a.Report(0, "h", exited(0), 0, ""); !errors.Is(err, ucs.ErrConnectionReset) && !errors.Is(err, ucs.ErrTimedOut) {
				t.Errorf("report to a seed that is gone: %v", err)
			}
		})
	}
}

// TestAgentSeedRefuses: an agent whose report finds the seed's port closed
// (the launcher's process is gone) takes the seed for gone at once, instead
// of retrying until the report times out or memberlist, within the failure
// timeout, declares the seed dead.
func TestAgentSeedRefuses(t *testing.T) {
	key := newTestKey(t)
	seed, err := NewSeed(SeedConfig{Size: 2, Agents: 1, Key: key, FailureTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	env := agentEnv(seed, key, 2)
	env.FailureTimeout = time.Hour
	a, err := JoinAgent(env, AgentConfig{Agents: 1, Ranks: []int{0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	vanishSeed(seed)
	for rank := range 2 {
		if err := a.Report(rank, "h", bootstrap.EndCause{Kind: bootstrap.EndSignaled, Signal: syscall.SIGTERM}, 143, "the agent got signal terminated"); !errors.Is(err, ucs.ErrConnectionReset) {
			t.Errorf("report of PE %d to a seed whose port is closed: %v, want ucs.ErrConnectionReset", rank, err)
		}
	}
	if !a.SeedGone() || a.Why() != wire.ReasonSeedGone {
		t.Errorf("after a refused report: SeedGone() = %v, Why() = %q; want true, %q", a.SeedGone(), a.Why(), wire.ReasonSeedGone)
	}
}

// vanishSeed shuts the seed's memberlist down without Leave, as if the
// launcher was killed, and marks it closed.
func vanishSeed(s *Seed) {
	s.mu.Lock()
	s.closed = true
	close(s.reports)
	s.mu.Unlock()
	s.list.Shutdown()
}

func TestGlobalExit(t *testing.T) {
	j := startJob(t, 3)
	if err := j.members[2].GlobalExit(7); err != nil {
		t.Fatalf("GlobalExit: %v", err)
	}
	got := nextReport(t, j.seed)
	if got.Kind != ReportGlobalExit || got.Rank != 2 || got.Code != 7 || got.Agent != -1 {
		t.Errorf("seed passed on %+v, want a global exit of PE 2 with code 7", got)
	}
	if got.Host == "" {
		t.Errorf("global exit report %+v names no host", got)
	}
	// A second request of the same PE is acknowledged and not passed on.
	if err := j.members[2].GlobalExit(8); err != nil {
		t.Errorf("second GlobalExit: %v", err)
	}
	noReport(t, j.seed)

	single, err := bootstrap.Join(bootstrap.Env{Size: 1, LocalSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := single.GlobalExit(3); err != nil {
		t.Errorf("singleton GlobalExit: %v", err)
	}
	single.Close()
	if err := single.GlobalExit(3); !errors.Is(err, bootstrap.ErrClosed) {
		t.Errorf("GlobalExit after Close: got %v, want ErrClosed", err)
	}
}

// TestGlobalExitBeforeJoin: a global exit request that reaches the seed
// before memberlist tells it of the agent's node names the host as every
// other report does, by name and address.
func TestGlobalExitBeforeJoin(t *testing.T) {
	s, err := NewSeed(SeedConfig{Size: 3, Agents: 1, Key: newTestKey(t), JobID: "job-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.mu.Lock()
	s.sendAgent = func(int, net.IP, uint16, []byte) error { return nil }
	s.mu.Unlock()
	s.handle(wire.AppendMessage(nil, &wire.Message{Kind: wire.KindAgentReport, JobID: "job-1", Rank: 0, Seq: 1, Addr: "192.0.2.2:7946",
		Events: []wire.Event{{Kind: wire.EvGlobalExit, Rank: 1, Code: 7, Other: -1, Host: "n2"}}}))
	got := nextReport(t, s)
	want := Report{Kind: ReportGlobalExit, Rank: 1, Agent: -1, Host: "n2 (192.0.2.2)", Code: 7}
	if got != want {
		t.Errorf("seed passed on %+v, want %+v", got, want)
	}
	if s.Joined(1) {
		t.Errorf("PE 1 counts as joined before its agent said so")
	}
}

// TestTuneFailureDetection checks that the memberlist settings and the
// confirmation of a death put the time to declare a silent member dead
// within the failure timeout: a probe interval until it is probed, the
// probe timeout, the suspicion, and the confirmation (deathWatch).
func TestTuneFailureDetection(t *testing.T) {
	for _, timeout := range []time.Duration{0, time.Second, 5 * time.Second, 30 * time.Second} {
		for _, nodes := range []int{2, 9, 129, 2049} {
			c := memberlist.DefaultLocalConfig()
			tuneFailureDetection(c, timeout, nodes)
			want := timeout
			if want == 0 {
				want = bootstrap.DefaultFailureTimeout
			}
			scale := math.Max(1, math.Log10(float64(nodes)))
			suspicion := time.Duration(float64(c.SuspicionMult) * scale * float64(c.ProbeInterval))
			confirm := confirmWait(want)
			total := c.ProbeInterval + c.ProbeTimeout + suspicion + confirm
			if total > want || total < want*3/4 || confirm < want/4 {
				t.Errorf("timeout %v, %d nodes: probe %v + timeout %v + suspicion %v + confirmation %v = %v; want about %v, not more",
					timeout, nodes, c.ProbeInterval, c.ProbeTimeout, suspicion, confirm, total, want)
			}
			if c.SuspicionMaxTimeoutMult != 1 || c.ProbeTimeout >= c.ProbeInterval {
				t.Errorf("timeout %v, %d nodes: SuspicionMaxTimeoutMult %d, probe timeout %v, interval %v",
					timeout, nodes, c.SuspicionMaxTimeoutMult, c.ProbeTimeout, c.ProbeInterval)
			}
		}
	}
	if _, err := NewSeed(SeedConfig{Size: 1, Key: newTestKey(t), FailureTimeout: time.Millisecond}); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("NewSeed with a 1ms failure timeout: got %v, want ucs.ErrInvalidParam", err)
	}
}

// TestFailureTimeout: with a short failure timeout configured the way the
// launcher does (no test hook), an agent that vanishes is reported, and
// the PEs of the other agents learn that its PE failed.
func TestFailureTimeout(t *testing.T) {
	const n = 3
	key := newTestKey(t)
	seed, err := NewSeed(SeedConfig{Size: n, Agents: n, Key: key, FailureTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer seed.Close()
	var agents []*Agent
	for id := range n {
		env := agentEnv(seed, key, n)
		env.FailureTimeout = time.Second
		a, err := JoinAgent(env, AgentConfig{ID: id, Agents: n, Ranks: []int{id}})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		agents = append(agents, a)
	}
	start := time.Now()
	vanishAgent(agents[1])
	got := nextReport(t, seed)
	if got.Kind != ReportAgentLeft || got.Agent != 1 {
		t.Errorf("seed reported %+v, want agent 1 gone", got)
	}
	t.Logf("declared dead after %v (failure timeout 1s)", time.Since(start).Round(time.Millisecond))
	for _, r := range []int{0, 2} {
		if peer, _, ok := seed.Lost(r); !ok || peer != 1 {
			t.Errorf("PE %d was not told that PE 1 failed: %d, %v", r, peer, ok)
		}
	}
}

// vanishAgent shuts a's memberlist down without Leave, as if its process
// died, and marks it closed.
func vanishAgent(a *Agent) {
	a.mu.Lock()
	a.closed = true
	close(a.closeCh)
	close(a.stopPing)
	a.mu.Unlock()
	a.list.Shutdown()
}

// TestSilentPE: the agent names a PE that joined and then stopped
// answering its pings, once; a PE that answers is not named.
func TestSilentPE(t *testing.T) {
	key := newTestKey(t)
	seed, err := NewSeed(SeedConfig{Size: 2, Agents: 1, Key: key, FailureTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer seed.Close()
	env := agentEnv(seed, key, 2)
	env.FailureTimeout = time.Second
	a, err := JoinAgent(env, AgentConfig{Agents: 1, Ranks: []int{0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	j := &job{key: key, seed: seed, agents: []*Agent{a}, members: make([]*bootstrap.Member, 2), agentOf: []int{0, 0}}
	m0, err := j.join(t, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer m0.Close()
	// PE 1 says hello on its channel and then nothing: it is hung.
	f, err := a.Attach(1)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := wire.FileConn(f)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Send(&wire.Message{Kind: wire.KindHello, JobID: seed.JobID(), Rank: 1}, -1); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	select {
	case r := <-a.Silent():
		if r != 1 {
			t.Errorf("agent named PE %d silent, want PE 1", r)
		}
		t.Logf("named after %v (failure timeout 1s)", time.Since(start).Round(time.Millisecond))
	case <-time.After(waitLimit):
		t.Fatalf("the silent PE was not named within %v", waitLimit)
	}
	// PE 0 answers: a few more pings do not name it.
	if err := m0.Finalize(); err != nil { // a round trip on its channel
		t.Fatal(err)
	}
	select {
	case r := <-a.Silent():
		t.Errorf("agent named PE %d silent again, or PE 0", r)
	default:
	}
}

// TestPlaintextRefused: a memberlist node without the job's key, or without
// encryption at all, cannot join, and raw bytes sent to the seed's TCP port
// do nothing.
func TestPlaintextRefused(t *testing.T) {
	key := newTestKey(t)
	seed, err := NewSeed(SeedConfig{Size: 2, Agents: 1, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	defer seed.Close()

	for _, tt := range []struct {
		name string
		key  []byte
	}{{"no key", nil}, {"another key", newTestKey(t)}} {
		t.Run(tt.name, func(t *testing.T) {
			c := newConfig(agentName(0), "127.0.0.1", seed.JobID(), tt.key, wire.DiscardLogger(), 0, 3)
			list, err := memberlist.Create(c)
			if err != nil {
				t.Fatal(err)
			}
			defer list.Shutdown()
			if _, err := list.Join([]string{seed.Addr()}); err == nil {
				t.Errorf("a node with %s joined the job", tt.name)
			}
		})
	}

	conn, err := net.DialTimeout("tcp", seed.Addr(), waitLimit)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(waitLimit))
	// A plaintext user message (memberlist's userMsg type byte, 8), then an
	// agent report that would count if it were accepted.
	raw := append([]byte{8}, wire.AppendMessage(nil, &wire.Message{Kind: wire.KindAgentReport, JobID: seed.JobID(), Rank: 0, Seq: 1, Addr: "127.0.0.1:9",
		Events: []wire.Event{{Kind: wire.EvJoined, Rank: 0, Other: -1}}})...)
	conn.Write(raw)
	if _, err := io.ReadAll(conn); err != nil && !strings.Contains(err.Error(), "reset") {
		t.Logf("reading the seed's answer: %v", err)
	}
	conn.Close() // the seed closed it (EOF or reset) without answering
	if seed.Joined(0) || seed.AnyJoined() {
		t.Errorf("the seed accepted a plaintext message")
	}
}

// TestAgentOtherVersion: a PE whose program was built from another goshmem
// says hello in another version of the messages. The agent answers with a
// welcome that the PE can read whatever its version (it names the agent's
// goshmem), closes the channel, and names both versions, with what to do,
// for the launcher (VersionMismatch).
func TestAgentOtherVersion(t *testing.T) {
	key := newTestKey(t)
	seed, err := NewSeed(SeedConfig{Size: 2, Agents: 1, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	defer seed.Close()
	a, err := JoinAgent(agentEnv(seed, key, 2), AgentConfig{Agents: 1, Ranks: []int{0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	f, err := a.Attach(1)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	hello := wire.AppendMessage(make([]byte, 4), &wire.Message{Kind: wire.KindHello, JobID: seed.JobID(), Rank: 1, Build: "v9.9.9-fake"})
	binary.BigEndian.PutUint32(hello, uint32(len(hello)-4))
	hello[4] = 9 // the version
	if _, err := f.Write(hello); err != nil {
		t.Fatal(err)
	}
	c, err := wire.FileConn(f)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	v, build := wire.Speaks()
	if m, _, err := c.Recv(); err != nil || m.Kind != wire.KindWelcome || m.Build != build {
		t.Fatalf("the agent's answer: %+v, %v; want a welcome that says %q", m, err, build)
	}
	if _, _, err := c.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("after the welcome: %v, want the channel closed", err)
	}
	want := "the program is built from another goshmem version than goshmem-run: the program speaks version 9 (goshmem v9.9.9-fake) of the bootstrap's messages, goshmem-run version " +
		strconv.Itoa(v) + " (goshmem " + build + "): " + wire.AdviceRebuild
	if err := a.VersionMismatch(1); err == nil || err.Error() != want {
		t.Errorf("VersionMismatch(1) = %v, want %q", err, want)
	}
	if err := a.VersionMismatch(0); err != nil {
		t.Errorf("VersionMismatch(0) = %v for a PE that said nothing", err)
	}
}
