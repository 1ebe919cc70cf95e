package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucs"
	"github.com/hashicorp/memberlist"

	"github.com/goshmem/goshmem/bootstrap"
	"github.com/goshmem/goshmem/bootstrap/internal/wire"
)

// waitLimit bounds every wait in these tests; reaching it is a failure,
// not a timing assertion.
const waitLimit = 60 * time.Second

// fastFailureDetection makes memberlist declare dead nodes quickly, for
// the tests that kill a node. It must not run in parallel with other tests.
func fastFailureDetection(t *testing.T) {
	t.Helper()
	configHook = func(c *memberlist.Config) {
		c.ProbeInterval = 100 * time.Millisecond
		c.ProbeTimeout = 50 * time.Millisecond
		c.SuspicionMult = 2
		c.SuspicionMaxTimeoutMult = 2
	}
	t.Cleanup(func() { configHook = nil })
}

// job is a seed, its agents and their PEs, all in this process.
type job struct {
	key     []byte
	seed    *Seed
	agents  []*Agent
	members []*bootstrap.Member
	agentOf []int // by rank
	// inode is the inode of each PE's end of its channel (see kill).
	inode []uint64
}

func newTestKey(t testing.TB) []byte {
	t.Helper()
	k, err := bootstrap.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// startJob starts a seed, one agent and n PEs.
func startJob(t testing.TB, n int) *job { return startJobOn(t, n, 1, nil) }

// startJobOn starts a seed, agents agents (PEs spread in order, as the
// launcher places them), and n PEs joining through them concurrently;
// node(id) names agent id's node (nil: one node for all).
func startJobOn(t testing.TB, n, agents int, node func(id int) string) *job {
	t.Helper()
	j := startAgents(t, n, agents, node)
	j.joinAll(t)
	return j
}

// startAgents starts the seed and the agents of startJobOn, and no PE.
func startAgents(t testing.TB, n, agents int, node func(id int) string) *job {
	t.Helper()
	key := newTestKey(t)
	seed, err := NewSeed(SeedConfig{Size: n, Agents: agents, Key: key})
	if err != nil {
		t.Fatalf("NewSeed: %v", err)
	}
	t.Cleanup(func() { seed.Close() })
	j := &job{key: key, seed: seed, agents: make([]*Agent, agents), members: make([]*bootstrap.Member, n), agentOf: make([]int, n), inode: make([]uint64, n)}
	per := (n + agents - 1) / agents
	for id := range agents {
		var ranks []int
		for r := id * per; r < min(n, (id+1)*per); r++ {
			ranks = append(ranks, r)
			j.agentOf[r] = id
		}
		cfg := AgentConfig{ID: id, Agents: agents, Ranks: ranks, Node: "node"}
		if node != nil {
			cfg.Node = node(id)
		}
		a, err := JoinAgent(agentEnv(seed, key, n), cfg)
		if err != nil {
			t.Fatalf("JoinAgent %d: %v", id, err)
		}
		t.Cleanup(func() { a.Close() })
		j.agents[id] = a
	}
	return j
}

// joinAll joins every PE of j through its agent, concurrently.
func (j *job) joinAll(t testing.TB) {
	t.Helper()
	n := len(j.members)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j.members[r], errs[r] = j.join(t, r)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("Join rank %d: %v", r, err)
		}
		m := j.members[r]
		t.Cleanup(func() { m.Close() })
	}
}

// join joins the PE rank through its agent's channel.
func (j *job) join(t testing.TB, rank int) (*bootstrap.Member, error) {
	a := j.agents[j.agentOf[rank]]
	f, err := a.Attach(rank)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err == nil && rank < len(j.inode) {
		j.inode[rank] = st.Ino
	}
	fd, err := unix.Dup(int(f.Fd()))
	f.Close()
	if err != nil {
		return nil, err
	}
	n := len(j.members)
	return bootstrap.Join(bootstrap.Env{JobID: j.seed.JobID(), Rank: rank, Size: n, LocalRank: 0, LocalSize: 1, Seed: j.seed.Addr(), Key: j.key, AgentFD: fd})
}

// kill shuts the PE rank's end of its channel down, as if the PE died:
// its agent reads the end of the channel. The descriptor is the Member's
// own, found by the socket's inode in /proc/self/fd.
func (j *job) kill(t testing.TB, rank int) {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("socket:[%d]", j.inode[rank])
	for _, e := range ents {
		if target, _ := os.Readlink("/proc/self/fd/" + e.Name()); target == want {
			fd, _ := strconv.Atoi(e.Name())
			if err := unix.Shutdown(fd, unix.SHUT_RDWR); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("PE %d: no descriptor of its channel (%s) in /proc/self/fd", rank, want)
}

// each runs f for every member concurrently and fails the test on errors.
func (j *job) each(t testing.TB, what string, f func(m *bootstrap.Member) error) {
	t.Helper()
	eachOf(t, j.members, what, f)
}

func eachOf(t testing.TB, members []*bootstrap.Member, what string, f func(m *bootstrap.Member) error) {
	t.Helper()
	errs := make(chan error, len(members))
	for _, m := range members {
		go func() {
			if err := f(m); err != nil {
				errs <- fmt.Errorf("%s on PE %d: %w", what, m.Rank(), err)
				return
			}
			errs <- nil
		}()
	}
	timeout := time.After(waitLimit)
	for range members {
		select {
		case err := <-errs:
			if err != nil {
				t.Error(err)
			}
		case <-timeout:
			t.Fatalf("%s: still blocked after %v", what, waitLimit)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

func blobFor(rank, round, size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(rank*31 + round*7 + i)
	}
	return b
}

// TestAllgather runs allgathers of several sizes and barriers among PEs of
// one agent and of trees of agents (6 agents make a tree of two levels, 22
// of three), and checks that every PE finalized.
func TestAllgather(t *testing.T) {
	t.Parallel() // none of these touches configHook; they run after the tests that do
	type shape struct{ n, agents int }
	shapes := []shape{{1, 1}, {2, 1}, {4, 2}, {16, 1}, {16, 6}, {16, 16}}
	if !testing.Short() && !raceEnabled {
		shapes = append(shapes, shape{64, 22}, shape{64, 1})
	}
	for _, sh := range shapes {
		t.Run(fmt.Sprintf("N=%d/agents=%d", sh.n, sh.agents), func(t *testing.T) {
			n := sh.n
			j := startJobOn(t, n, sh.agents, nil)
			// Blob sizes per round: empty, tiny, uneven, 1 MiB in all.
			rounds := []func(rank int) int{
				func(int) int { return 0 },
				func(int) int { return 1 },
				func(rank int) int { return 200 + rank*13 },
				func(int) int { return (1 << 20) / n },
			}
			for round, size := range rounds {
				j.each(t, fmt.Sprintf("allgather round %d", round), func(m *bootstrap.Member) error {
					got, err := m.Allgather(blobFor(m.Rank(), round, size(m.Rank())))
					if err != nil {
						return err
					}
					if len(got) != n {
						return fmt.Errorf("got %d blobs, want %d", len(got), n)
					}
					for r, b := range got {
						if want := blobFor(r, round, size(r)); !bytes.Equal(b, want) {
							return fmt.Errorf("blob of rank %d: got %d bytes, want %d (or contents differ)", r, len(b), len(want))
						}
					}
					return nil
				})
				j.each(t, "barrier", func(m *bootstrap.Member) error { return m.Barrier() })
			}
			j.each(t, "close", func(m *bootstrap.Member) error { return m.Close() })
			for r, m := range j.members {
				if err := j.agents[j.agentOf[r]].Report(r, "h", exited(0), 0, ""); err != nil {
					t.Fatalf("report of PE %d: %v", m.Rank(), err)
				}
				if got := nextReport(t, j.seed); got.Kind != ReportExit || got.Rank != r {
					t.Errorf("seed passed on %+v, want the end of PE %d", got, r)
				}
				if !j.seed.Finalized(r) || !j.seed.Joined(r) {
					t.Errorf("seed: PE %d finalized %v, joined %v after Close; want both", r, j.seed.Finalized(r), j.seed.Joined(r))
				}
			}
			if err := j.seed.Close(); err != nil {
				t.Errorf("seed Close: %v", err)
			}
		})
	}
}

// TestExchangeTable: the table of an Exchange numbers the nodes of the
// agents (agents on one node share a number), is mapped read-only from a
// file the agent wrote once, and is the same file for the PEs of an agent.
func TestExchangeTable(t *testing.T) {
	const n, agents = 8, 4
	nodes := []string{"a", "b", "a", "c"} // agents 0 and 2 share a node
	j := startJobOn(t, n, agents, func(id int) string { return nodes[id] })
	tables := make([]*bootstrap.Table, n)
	j.each(t, "exchange", func(m *bootstrap.Member) error {
		tab, err := m.Exchange([]byte(fmt.Sprintf("blob of %d", m.Rank())))
		tables[m.Rank()] = tab
		return err
	})
	wantNode := []int{0, 0, 1, 1, 0, 0, 2, 2} // agent 0 first: node a is 0
	for r, tab := range tables {
		if tab.Len() != n || tab.Nodes() != 3 {
			t.Errorf("PE %d: table of %d PEs on %d nodes, want %d on 3", r, tab.Len(), tab.Nodes(), n)
		}
		for pe := range n {
			if got, want := string(tab.Blob(pe)), fmt.Sprintf("blob of %d", pe); got != want {
				t.Errorf("PE %d: blob of PE %d = %q, want %q", r, pe, got, want)
			}
			if tab.Node(pe) != wantNode[pe] {
				t.Errorf("PE %d: node of PE %d = %d, want %d", r, pe, tab.Node(pe), wantNode[pe])
			}
		}
	}
	// The PEs of one agent map the same memory: what the kernel says of
	// the mapping's page is the same file, read-only.
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	if c := strings.Count(string(maps), "memfd:goshmem-table"); c != n {
		t.Errorf("%d mappings of table files, want %d (one per PE)", c, n)
	}
	for _, l := range strings.Split(string(maps), "\n") {
		if strings.Contains(l, "memfd:goshmem-table") && !strings.Contains(l, " r--s ") {
			t.Errorf("a table mapping is not read-only and shared: %s", l)
		}
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Blob(-1) did not panic")
			}
		}()
		tables[0].Blob(-1)
	}()
	for _, tab := range tables {
		if err := tab.Close(); err != nil {
			t.Error(err)
		}
	}
}

func TestAllgatherAfterClose(t *testing.T) {
	j := startJob(t, 2)
	j.each(t, "close", func(m *bootstrap.Member) error { return m.Close() })
	for _, m := range j.members {
		if _, err := m.Allgather([]byte("x")); !errors.Is(err, bootstrap.ErrClosed) {
			t.Errorf("PE %d: Allgather after Close: got %v, want ErrClosed", m.Rank(), err)
		}
		if err := m.Close(); err != nil {
			t.Errorf("PE %d: second Close: %v", m.Rank(), err)
		}
	}
}

func TestAllgatherTooLarge(t *testing.T) {
	t.Parallel() // none of these touches configHook; they run after the tests that do
	m, err := bootstrap.Join(bootstrap.Env{Size: 1, LocalSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Allgather(make([]byte, wire.MaxAllgather+1)); !errors.Is(err, ucs.ErrExceedsLimit) {
		t.Errorf("Allgather of %d bytes: got %v, want ucs.ErrExceedsLimit", wire.MaxAllgather+1, err)
	}
	// Blobs within the limit each, too large together: every PE learns it.
	j := startJobOn(t, 3, 2, nil)
	j.each(t, "allgather of 3 times 6 MiB", func(m *bootstrap.Member) error {
		_, err := m.Allgather(make([]byte, 6<<20))
		if !errors.Is(err, ucs.ErrExceedsLimit) {
			return fmt.Errorf("got %v, want ucs.ErrExceedsLimit", err)
		}
		return nil
	})
	j.each(t, "barrier after", func(m *bootstrap.Member) error { return m.Barrier() })
}

// TestMemberFailure: a PE that ends without finalize, as its agent
// reports, fails the pending collectives of the others, which learn it
// through their agents; the seed counts their ends as consequences.
func TestMemberFailure(t *testing.T) {
	const n, victim = 6, 5
	j := startJobOn(t, n, 3, nil)
	notified := make(chan bootstrap.Failure, n)
	for _, m := range j.members[:victim] {
		m.OnFailure(func(f bootstrap.Failure) { notified <- f })
	}
	j.kill(t, victim) // as if it died
	if err := j.agents[j.agentOf[victim]].Report(victim, "h2", bootstrap.EndCause{Kind: bootstrap.EndSignaled, Signal: syscall.SIGKILL}, 137, ""); err != nil {
		t.Fatal(err)
	}
	if got := nextReport(t, j.seed); got.Kind != ReportExit || got.Rank != victim || got.Code != 137 {
		t.Errorf("seed passed on %+v, want PE %d killed", got, victim)
	}
	eachOf(t, j.members[:victim], "barrier with a dead PE", func(m *bootstrap.Member) error {
		err := m.Barrier()
		var f bootstrap.Failure
		switch {
		case err == nil:
			return errors.New("Barrier succeeded without the dead PE")
		case !errors.As(err, &f) || f.Rank != victim || f.Host != "h2" || f.Cause.Kind != bootstrap.EndSignaled || f.Cause.Signal != syscall.SIGKILL:
			return fmt.Errorf("got %v, want a Failure of PE %d", err, victim)
		case !errors.Is(err, ucs.ErrConnectionReset):
			return fmt.Errorf("got %v, want an error wrapping ucs.ErrConnectionReset", err)
		}
		return nil
	})
	for range victim {
		select {
		case f := <-notified:
			if f.Rank != victim {
				t.Errorf("OnFailure got %+v, want PE %d", f, victim)
			}
		case <-time.After(waitLimit):
			t.Fatalf("OnFailure not called within %v", waitLimit)
		}
	}
	// OnFailure reports past failures.
	late := make(chan bootstrap.Failure, 1)
	j.members[0].OnFailure(func(f bootstrap.Failure) { late <- f })
	select {
	case f := <-late:
		if f.Rank != victim {
			t.Errorf("late OnFailure got %+v, want PE %d", f, victim)
		}
	case <-time.After(waitLimit):
		t.Fatalf("late OnFailure not called within %v", waitLimit)
	}
	if j.seed.Finalized(victim) {
		t.Errorf("seed: Finalized(%d) for a PE that did not Close", victim)
	}
	// The PEs the seed told of the failure end as its consequences.
	for r := range victim {
		if peer, why, ok := j.seed.Lost(r); !ok || peer != victim || !strings.Contains(why, "seed told it") {
			t.Errorf("seed: Lost(%d) = %d, %q, %v; want PE %d, told by the seed", r, peer, why, ok, victim)
		}
	}
}

// TestExitWithoutJoin: a PE that exits 0 without joining fails nobody (it
// may not be a goshmem program); one that exits with an error does.
func TestExitWithoutJoin(t *testing.T) {
	key := newTestKey(t)
	seed, err := NewSeed(SeedConfig{Size: 3, Agents: 1, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	defer seed.Close()
	a, err := JoinAgent(agentEnv(seed, key, 3), AgentConfig{Agents: 1, Ranks: []int{0, 1, 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for _, r := range []int{0, 1} {
		code := r // PE 0 exits 0, PE 1 with 1
		if err := a.Report(r, "h", exited(code), code, ""); err != nil {
			t.Fatal(err)
		}
		nextReport(t, seed)
		if seed.Joined(r) || seed.AnyJoined() {
			t.Errorf("PE %d counts as joined", r)
		}
	}
	if _, _, ok := seed.Lost(2); !ok {
		t.Error("PE 2 was not told that PE 1 failed")
	}
	if peer, _, _ := seed.Lost(2); peer != 1 {
		t.Errorf("PE 2 lost PE %d, want 1 (PE 0 ended without joining, with status 0)", peer)
	}
}

// TestReportLost: a PE that tells the seed it lost a peer ends as a
// consequence of that peer's failure; the first loss it reports counts.
func TestReportLost(t *testing.T) {
	j := startJob(t, 3)
	m := j.members[2]
	if err := m.ReportLost(1, "connection reset by peer"); err != nil {
		t.Fatalf("ReportLost: %v", err)
	}
	if err := m.ReportLost(0, "a later loss"); err != nil {
		t.Fatalf("second ReportLost: %v", err)
	}
	if peer, why, ok := j.seed.Lost(2); !ok || peer != 1 || why != "connection reset by peer" {
		t.Errorf("seed: Lost(2) = %d, %q, %v; want 1, %q, true", peer, why, ok, "connection reset by peer")
	}
	for _, r := range []int{0, 1, -1, 3} {
		if peer, _, ok := j.seed.Lost(r); ok {
			t.Errorf("seed: Lost(%d) = %d, true for a PE that reported no loss", r, peer)
		}
	}
	for _, bad := range []int{2, -1, 3} {
		if err := m.ReportLost(bad, "x"); !errors.Is(err, ucs.ErrInvalidParam) {
			t.Errorf("ReportLost(%d): %v, want ucs.ErrInvalidParam", bad, err)
		}
	}
	// A forged event naming the sender itself is dropped.
	j.seed.handle(wire.AppendMessage(nil, &wire.Message{Kind: wire.KindAgentReport, JobID: j.seed.JobID(), Rank: 0, Seq: 99, Addr: "127.0.0.1:9",
		Events: []wire.Event{{Kind: wire.EvLost, Rank: 0, Other: 0}}}))
	if _, _, ok := j.seed.Lost(0); ok {
		t.Error("seed: PE 0 lost itself")
	}
}

// TestSeedLeaves closes the seed under PEs blocked in Barrier: their agent
// takes the launcher for gone, and so do they.
func TestSeedLeaves(t *testing.T) {
	const n = 3
	j := startJob(t, n)
	notified := make(chan bootstrap.Failure, n)
	for _, m := range j.members {
		m.OnFailure(func(f bootstrap.Failure) { notified <- f })
	}
	// PEs 0 and 1 enter a barrier that PE 2 never joins.
	started := make(chan struct{}, 2)
	go func() {
		for range 2 {
			<-started
		}
		j.seed.Close()
	}()
	eachOf(t, j.members[:2], "barrier while the seed leaves", func(m *bootstrap.Member) error {
		started <- struct{}{}
		err := m.Barrier()
		var f bootstrap.Failure
		if !errors.As(err, &f) || f.Rank != -1 {
			return fmt.Errorf("got %v, want a Failure of the launcher (rank -1)", err)
		}
		return nil
	})
	waitClosed(t, j.agents[0].Terminated(), "agent noticing the seed gone")
	for range n {
		select {
		case f := <-notified:
			if f.Rank != -1 || f.Cause.Kind != bootstrap.EndSeedGone {
				t.Errorf("OnFailure got %+v, want rank -1, the seed gone", f)
			}
		case <-time.After(waitLimit):
			t.Fatalf("OnFailure not called within %v", waitLimit)
		}
	}
	// Close does not wait for a seed that is gone.
	j.each(t, "close", func(m *bootstrap.Member) error { return m.Close() })
}

// TestAgentGone: a PE whose agent closes its channel (the agent died)
// takes the launcher for gone.
func TestAgentGone(t *testing.T) {
	j := startJob(t, 2)
	j.agents[0].Close()
	j.each(t, "barrier without the agent", func(m *bootstrap.Member) error {
		err := m.Barrier()
		var f bootstrap.Failure
		if !errors.As(err, &f) || f.Rank != -1 || f.Cause.Kind != bootstrap.EndAgentGone {
			return fmt.Errorf("got %v, want a Failure of the launcher (rank -1): %s", err, wire.ReasonAgentGone)
		}
		return nil
	})
}

// TestMessagesPerAgent checks that a collective costs each agent at most
// one message up and one down to each child, and the seed nothing,
// whatever the number of PEs.
func TestMessagesPerAgent(t *testing.T) {
	t.Parallel() // none of these touches configHook; they run after the tests that do
	for _, sh := range []struct{ n, agents int }{{4, 4}, {16, 6}, {32, 16}} {
		t.Run(fmt.Sprintf("N=%d/agents=%d", sh.n, sh.agents), func(t *testing.T) {
			j := startJobOn(t, sh.n, sh.agents, nil)
			j.each(t, "first barrier", func(m *bootstrap.Member) error { return m.Barrier() }) // the directory came
			// Each agent reported that one of its PEs joined.
			for id := range j.agents {
				for deadline := time.Now().Add(waitLimit); !agentJoinedSeen(j, id); time.Sleep(time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("the seed does not know that a PE of agent %d joined", id)
					}
				}
			}
			before := make([]Stats, sh.agents)
			for id, a := range j.agents {
				before[id] = a.Stats()
			}
			const rounds = 3
			for range rounds {
				j.each(t, "barrier", func(m *bootstrap.Member) error { return m.Barrier() })
				j.each(t, "allgather", func(m *bootstrap.Member) error { _, err := m.Allgather([]byte("x")); return err })
			}
			for id, a := range j.agents {
				s := a.Stats()
				up := 1
				if id == 0 {
					up = 0
				}
				want := uint64(2 * rounds * (up + len(treeChildren(id, sh.agents))))
				if got := s.MsgsSent - before[id].MsgsSent; got != want {
					t.Errorf("agent %d sent %d messages for %d collectives, want %d", id, got, 2*rounds, want)
				}
				if s.Collectives != before[id].Collectives+2*rounds {
					t.Errorf("agent %d completed %d collectives, want %d", id, s.Collectives-before[id].Collectives, 2*rounds)
				}
				if s.LocalFrames > 0 && s.MaxSilence <= 0 {
					// Its PEs said hello, then gathered: some time passed.
					t.Errorf("agent %d heard its PEs several times, and its longest silence is %v", id, s.MaxSilence)
				}
			}
		})
	}
}

// BenchmarkAllgather measures one allgather of 200-byte blobs among N
// in-process PEs of 4 agents (and, reported separately, the time they took
// to join).
func BenchmarkAllgather(b *testing.B) {
	for _, n := range []int{16, 64} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			start := time.Now()
			j := startJobOn(b, n, 4, nil)
			join := time.Since(start)
			b.ResetTimer()
			for round := range b.N {
				j.each(b, "allgather", func(m *bootstrap.Member) error {
					_, err := m.Allgather(blobFor(m.Rank(), round, 200))
					return err
				})
			}
			b.ReportMetric(float64(join.Microseconds())/1000, "join-ms")
		})
	}
}

// agentJoinedSeen reports whether the seed knows that a PE of agent id
// joined.
func agentJoinedSeen(j *job, id int) bool {
	for r, a := range j.agentOf {
		if a == id && j.seed.Joined(r) {
			return true
		}
	}
	return false
}

// TestAbandonedCollective: a PE that finalizes and exits 0 while the
// others wait for it in a collective (its Init failed, say), or before
// they enter one, leaves them waiting for one that will never come: the
// seed passes that on (ReportAbandoned, naming it and the PEs that wait),
// and the collectives return a Failure of that PE. On one agent, and with
// the PE alone on a leaf agent, which never hears of the collective.
func TestAbandonedCollective(t *testing.T) {
	const n, victim = 3, 2
	for _, tt := range []struct {
		name       string
		agents     int
		enterFirst bool // the others enter the barrier before the victim leaves
	}{
		{"one agent, left first", 1, false},
		{"one agent, entered first", 1, true},
		{"leaf agent, left first", 3, false},
		{"leaf agent, entered first", 3, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			j := startJobOn(t, n, tt.agents, nil)
			others := j.members[:victim]
			errs := make(chan error, len(others))
			barrier := func() {
				for _, m := range others {
					go func() { errs <- m.Barrier() }()
				}
			}
			if tt.enterFirst {
				barrier()
			}
			if err := j.members[victim].Close(); err != nil { // finalizes
				t.Fatal(err)
			}
			if err := j.agents[j.agentOf[victim]].Report(victim, "h2", exited(0), 0, ""); err != nil {
				t.Fatal(err)
			}
			if got := nextReport(t, j.seed); got.Kind != ReportExit || got.Rank != victim || !j.seed.Finalized(victim) {
				t.Fatalf("seed passed on %+v (finalized %v), want the finalized end of PE %d", got, j.seed.Finalized(victim), victim)
			}
			if !tt.enterFirst {
				barrier()
			}
			got := nextReport(t, j.seed)
			if got.Kind != ReportAbandoned || got.Rank != victim || got.Host != "h2" || got.End.Kind != bootstrap.EndAbandoned || !strings.Contains(got.End.Detail, "wait") {
				t.Errorf("seed passed on %+v, want PE %d's abandoned collective", got, victim)
			}
			for range others {
				select {
				case err := <-errs:
					var f bootstrap.Failure
					if !errors.As(err, &f) || f.Rank != victim || f.Cause.Kind != bootstrap.EndAbandoned {
						t.Errorf("Barrier = %v, want a Failure of PE %d that left after it finalized", err, victim)
					}
				case <-time.After(waitLimit):
					t.Fatalf("Barrier still waits for PE %d after %v", victim, waitLimit)
				}
			}
			noReport(t, j.seed) // once per job
		})
	}
}
