package bootstrap

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goshmem/goshmem/ucs"
	"github.com/hashicorp/memberlist"
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

// vanish shuts m's memberlist down without Close or Leave, as if its
// process died, and marks m closed so that the test's cleanup leaves it be.
func vanish(m *Member) {
	m.mu.Lock()
	m.closed = true
	close(m.closeCh)
	m.mu.Unlock()
	m.list.Shutdown()
}

// job is a seed and its members, all in this process.
type job struct {
	seed    *Seed
	members []*Member
}

func newTestKey(t testing.TB) []byte {
	t.Helper()
	k, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// startJob starts a seed and n members joining it concurrently.
func startJob(t testing.TB, n int) *job {
	t.Helper()
	key := newTestKey(t)
	seed, err := NewSeed(SeedConfig{Size: n, Key: key})
	if err != nil {
		t.Fatalf("NewSeed: %v", err)
	}
	t.Cleanup(func() { seed.Close() })
	j := &job{seed: seed, members: make([]*Member, n)}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			env := Env{JobID: seed.JobID(), Rank: r, Size: n, LocalRank: r, LocalSize: n, Seed: seed.Addr(), Key: key}
			j.members[r], errs[r] = Join(env)
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
	return j
}

// each runs f for every member concurrently and fails the test on errors.
func (j *job) each(t testing.TB, what string, f func(m *Member) error) {
	t.Helper()
	errs := make(chan error, len(j.members))
	for _, m := range j.members {
		go func() {
			if err := f(m); err != nil {
				errs <- fmt.Errorf("%s on PE %d: %w", what, m.Rank(), err)
				return
			}
			errs <- nil
		}()
	}
	timeout := time.After(waitLimit)
	for range j.members {
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

func TestAllgather(t *testing.T) {
	sizes := []int{1, 2, 4, 16}
	if !testing.Short() && !raceEnabled {
		sizes = append(sizes, 64)
	}
	for _, n := range sizes {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			j := startJob(t, n)
			// Blob sizes per round: empty, tiny, uneven, 1 MiB in all.
			rounds := []func(rank int) int{
				func(int) int { return 0 },
				func(int) int { return 1 },
				func(rank int) int { return 200 + rank*13 },
				func(int) int { return (1 << 20) / n },
			}
			for round, size := range rounds {
				j.each(t, fmt.Sprintf("allgather round %d", round), func(m *Member) error {
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
			}
			j.each(t, "barrier", func(m *Member) error { return m.Barrier() })
			j.each(t, "close", func(m *Member) error { return m.Close() })
			for r := range n {
				if !j.seed.Finalized(r) {
					t.Errorf("seed: Finalized(%d) = false after Close", r)
				}
			}
			select {
			case f := <-j.seed.Failures():
				t.Errorf("seed reported a failure of a job that finalized: %v", f)
			default:
			}
			if err := j.seed.Close(); err != nil {
				t.Errorf("seed Close: %v", err)
			}
		})
	}
}

func TestAllgatherAfterClose(t *testing.T) {
	j := startJob(t, 2)
	j.each(t, "close", func(m *Member) error { return m.Close() })
	for _, m := range j.members {
		if _, err := m.Allgather([]byte("x")); !errors.Is(err, ErrClosed) {
			t.Errorf("PE %d: Allgather after Close: got %v, want ErrClosed", m.Rank(), err)
		}
		if err := m.Close(); err != nil {
			t.Errorf("PE %d: second Close: %v", m.Rank(), err)
		}
	}
}

func TestAllgatherTooLarge(t *testing.T) {
	m, err := Join(Env{Size: 1, LocalSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Allgather(make([]byte, MaxAllgather+1)); !errors.Is(err, ucs.ErrExceedsLimit) {
		t.Errorf("Allgather of %d bytes: got %v, want ucs.ErrExceedsLimit", MaxAllgather+1, err)
	}
}

func TestWrongKey(t *testing.T) {
	seed, err := NewSeed(SeedConfig{Size: 2, Key: newTestKey(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer seed.Close()
	done := make(chan error, 1)
	go func() {
		m, err := Join(Env{JobID: seed.JobID(), Rank: 0, Size: 2, LocalSize: 2, Seed: seed.Addr(), Key: newTestKey(t)})
		if err == nil {
			m.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Join with the wrong key succeeded")
		}
		if !errors.Is(err, ucs.ErrUnreachable) {
			t.Errorf("Join with the wrong key: got %v, want an error wrapping ucs.ErrUnreachable", err)
		}
		t.Logf("Join with the wrong key: %v", err)
	case <-time.After(waitLimit):
		t.Fatalf("Join with the wrong key still blocked after %v", waitLimit)
	}
	if seed.Joined(0) {
		t.Error("seed: Joined(0) after a join with the wrong key")
	}
}

func TestSingleton(t *testing.T) {
	for _, v := range contractVars {
		if _, ok := os.LookupEnv(v); ok {
			t.Skipf("skipping: %s is set in the test environment", v)
		}
	}
	m, err := JoinFromOS()
	if err != nil {
		t.Fatalf("JoinFromOS without launcher: %v", err)
	}
	if m.Rank() != 0 || m.Size() != 1 || m.LocalRank() != 0 || m.LocalSize() != 1 {
		t.Errorf("singleton: rank %d size %d local %d/%d, want 0 1 0/1", m.Rank(), m.Size(), m.LocalRank(), m.LocalSize())
	}
	blob := []byte("hello")
	got, err := m.Allgather(blob)
	if err != nil || len(got) != 1 || !bytes.Equal(got[0], blob) {
		t.Errorf("singleton Allgather = %q, %v; want [%q]", got, err, blob)
	}
	if err := m.Barrier(); err != nil {
		t.Errorf("singleton Barrier: %v", err)
	}
	m.OnFailure(func(f Failure) { t.Errorf("singleton failure: %v", f) })
	if err := m.Close(); err != nil {
		t.Errorf("singleton Close: %v", err)
	}
	if err := m.Barrier(); !errors.Is(err, ErrClosed) {
		t.Errorf("singleton Barrier after Close: got %v, want ErrClosed", err)
	}
}

func TestJoinBadEnv(t *testing.T) {
	key := newTestKey(t)
	tests := []struct {
		name string
		env  Env
	}{
		{"size 0", Env{Size: 0, LocalSize: 1}},
		{"rank out of range", Env{Rank: 2, Size: 2, LocalSize: 1, Seed: "127.0.0.1:1", Key: key, JobID: "j"}},
		{"no seed for 2", Env{Size: 2, LocalSize: 1, Key: key, JobID: "j"}},
		{"short key", Env{Size: 2, LocalSize: 1, Seed: "127.0.0.1:1", Key: key[:5], JobID: "j"}},
		{"bad job id", Env{Size: 2, LocalSize: 1, Seed: "127.0.0.1:1", Key: key, JobID: "a b"}},
		{"local rank", Env{Size: 2, LocalRank: 1, LocalSize: 1, Seed: "127.0.0.1:1", Key: key, JobID: "j"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Join(tt.env); !errors.Is(err, ucs.ErrInvalidParam) {
				t.Errorf("Join(%+v): got %v, want ucs.ErrInvalidParam", tt.env, err)
			}
		})
	}
}

// TestMemberFailure kills a member's memberlist without Close: the seed
// must report it, and the other members' pending Barrier must fail.
func TestMemberFailure(t *testing.T) {
	fastFailureDetection(t)
	const n, victim = 4, 3
	j := startJob(t, n)
	notified := make(chan Failure, n)
	for _, m := range j.members[:victim] {
		m.OnFailure(func(f Failure) { notified <- f })
	}
	vanish(j.members[victim])

	survivors := &job{seed: j.seed, members: j.members[:victim]}
	survivors.each(t, "barrier with a dead PE", func(m *Member) error {
		err := m.Barrier()
		var f Failure
		switch {
		case err == nil:
			return errors.New("Barrier succeeded without the dead PE")
		case !errors.As(err, &f) || f.Rank != victim:
			return fmt.Errorf("got %v, want a Failure of PE %d", err, victim)
		case !errors.Is(err, ucs.ErrConnectionReset):
			return fmt.Errorf("got %v, want an error wrapping ucs.ErrConnectionReset", err)
		}
		return nil
	})
	select {
	case f := <-j.seed.Failures():
		if f.Rank != victim || f.Reason != reasonGone {
			t.Errorf("seed reported %+v, want PE %d %q", f, victim, reasonGone)
		}
		t.Logf("seed reported: %v", f)
	case <-time.After(waitLimit):
		t.Fatalf("seed did not report the dead PE within %v", waitLimit)
	}
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
	// A later collective fails at once, and OnFailure reports past failures.
	if err := j.members[0].Barrier(); err == nil {
		t.Error("Barrier after a failure succeeded")
	}
	late := make(chan Failure, 1)
	j.members[0].OnFailure(func(f Failure) { late <- f })
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
	// A forged message naming the sender itself is dropped.
	j.seed.handle(appendMessage(nil, &message{kind: kindLost, jobID: j.seed.JobID(), rank: 0, addr: "127.0.0.1:9", failRank: 0}))
	if _, _, ok := j.seed.Lost(0); ok {
		t.Error("seed: PE 0 lost itself")
	}
}

// TestSeedLeaves closes the seed under members blocked in Barrier.
func TestSeedLeaves(t *testing.T) {
	const n = 3
	j := startJob(t, n)
	notified := make(chan Failure, n)
	for _, m := range j.members {
		m.OnFailure(func(f Failure) { notified <- f })
	}
	// PEs 0 and 1 enter a barrier that PE 2 never joins.
	pending := &job{seed: j.seed, members: j.members[:2]}
	started := make(chan struct{}, 2)
	go func() {
		for range 2 {
			<-started
		}
		time.Sleep(50 * time.Millisecond) // let the gathers reach the seed; correctness does not depend on it
		j.seed.Close()
	}()
	pending.each(t, "barrier while the seed leaves", func(m *Member) error {
		started <- struct{}{}
		err := m.Barrier()
		var f Failure
		if !errors.As(err, &f) || f.Rank != -1 {
			return fmt.Errorf("got %v, want a Failure of the seed (rank -1)", err)
		}
		return nil
	})
	for range n {
		select {
		case f := <-notified:
			if f.Rank != -1 || f.Reason != reasonSeedGone {
				t.Errorf("OnFailure got %+v, want rank -1 %q", f, reasonSeedGone)
			}
		case <-time.After(waitLimit):
			t.Fatalf("OnFailure not called within %v", waitLimit)
		}
	}
	// Close does not wait for a seed that is gone.
	j.each(t, "close", func(m *Member) error { return m.Close() })
}

// TestSeedValidates feeds the seed bad messages directly.
func TestSeedValidates(t *testing.T) {
	const n = 3
	s, err := NewSeed(SeedConfig{Size: n, Key: newTestKey(t), JobID: "job-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var sent sync.Mutex
	var got []int
	s.mu.Lock()
	s.send = func(rank int, _ net.IP, _ uint16, _ []byte) error {
		sent.Lock()
		got = append(got, rank)
		sent.Unlock()
		return nil
	}
	s.mu.Unlock()

	gather := func(job string, rank int, seq uint64, addr string) []byte {
		return appendMessage(nil, &message{kind: kindGather, jobID: job, rank: rank, seq: seq, addr: addr, payload: []byte("p")})
	}
	const addr = "127.0.0.1:9"
	bad := []struct {
		name string
		msg  []byte
	}{
		{"garbage", []byte("hello, seed")},
		{"empty", nil},
		{"other job", gather("job-2", 0, 1, addr)},
		{"rank too large", gather("job-1", n, 1, addr)},
		{"rank negative", gather("job-1", -1, 1, addr)},
		{"future sequence", gather("job-1", 0, 2, addr)},
		{"past sequence", gather("job-1", 0, 0, addr)},
		{"bad address", gather("job-1", 0, 1, "localhost:9")},
		{"no port", gather("job-1", 0, 1, "127.0.0.1")},
		{"table to the seed", appendMessage(nil, &message{kind: kindTable, jobID: "job-1", rank: 0, seq: 1, table: [][]byte{{1}}})},
	}
	for _, b := range bad {
		s.handle(b.msg)
		s.mu.Lock()
		count := s.count
		s.mu.Unlock()
		if count != 0 {
			t.Fatalf("%s: seed accepted it (count %d)", b.name, count)
		}
	}
	s.handle(gather("job-1", 1, 1, addr))
	s.handle(gather("job-1", 1, 1, addr)) // duplicate
	s.mu.Lock()
	count := s.count
	s.mu.Unlock()
	if count != 1 {
		t.Fatalf("after one gather and its duplicate: count %d, want 1", count)
	}
	s.handle(gather("job-1", 0, 1, addr))
	s.handle(gather("job-1", 2, 1, addr))
	s.Close() // waits for the replies
	if len(got) != n {
		t.Errorf("seed sent %d tables, want %d", len(got), n)
	}
}

// BenchmarkAllgather measures one allgather of 200-byte blobs among N
// in-process members (and, reported separately, the time they took to
// join the seed).
func BenchmarkAllgather(b *testing.B) {
	for _, n := range []int{16, 64} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			start := time.Now()
			j := startJob(b, n)
			join := time.Since(start)
			b.ResetTimer()
			for round := range b.N {
				j.each(b, "allgather", func(m *Member) error {
					_, err := m.Allgather(blobFor(m.Rank(), round, 200))
					return err
				})
			}
			b.ReportMetric(float64(join.Microseconds())/1000, "join-ms")
		})
	}
}
