package bootstrap

import (
	"bytes"
	"errors"
	"net"
	"slices"
	"testing"

	"github.com/goshmem/goshmem/ucs"
)

// sampleMessages is a message of each kind, the fuzz seed corpus.
var sampleMessages = []*message{
	{kind: kindHello, jobID: "job-1", rank: 3},
	{kind: kindWelcome, jobID: "job-1", rank: -1},
	{kind: kindGather, jobID: "job-1", rank: 3, seq: 7, payload: []byte("worker address")},
	{kind: kindGather, jobID: "j", rank: 0, seq: 1, flags: flagBarrier, payload: []byte{}},
	{kind: kindResult, jobID: "job-1", rank: -1, seq: 7, size: 4096},
	{kind: kindResult, jobID: "job-1", rank: -1, seq: 8, flags: flagBarrier},
	{kind: kindFinalize, jobID: "job-1", rank: 2},
	{kind: kindFinalizeAck, jobID: "job-1", rank: -1},
	{kind: kindPing, jobID: "job-1", rank: -1},
	{kind: kindPong, jobID: "job-1", rank: 2},
	{kind: kindGlobalExit, jobID: "job-1", rank: 2, code: 3, host: "n1"},
	{kind: kindGlobalExit, jobID: "job-1", rank: 0, code: -7},
	{kind: kindGlobalExitAck, jobID: "job-1", rank: -1},
	{kind: kindLost, jobID: "job-1", rank: 2, failRank: 1, reason: "connection reset by peer"},
	{kind: kindLostAck, jobID: "job-1", rank: -1},
	{kind: kindFailure, jobID: "job-1", rank: -1, failRank: 5, host: "n1 (10.0.0.2)", reason: "exited with status 3"},
	{kind: kindFailure, jobID: "job-1", rank: -1, failRank: -1, host: "", reason: reasonSeedGone},
	{kind: kindDirectory, jobID: "job-1", rank: -1, agents: []agentEntry{{0, 0, "10.0.0.1:7946", "h1"}, {1, 0, "10.0.0.2:7946", "h2"}}},
	{kind: kindDirectory, jobID: "job-1", rank: 0, addr: "10.0.0.1:7946", agents: []agentEntry{{4, 2, "[::1]:1", ""}}},
	{kind: kindUp, jobID: "job-1", rank: 3, seq: 2, count: 2, entries: []entry{{5, 1, []byte("a")}, {6, 1, []byte{}}}},
	{kind: kindUp, jobID: "job-1", rank: 3, seq: 3, flags: flagBarrier, count: 7},
	{kind: kindDown, jobID: "job-1", rank: 0, seq: 2, entries: []entry{{0, 0, []byte("a")}, {1, 0, []byte("bb")}}},
	{kind: kindDown, jobID: "job-1", rank: 0, seq: 3, flags: flagBarrier},
	{kind: kindAbort, jobID: "job-1", rank: 0, seq: 3, reason: "too large"},
	{kind: kindAgentReport, jobID: "job-1", rank: 1, seq: 4, addr: "10.0.0.1:7946", events: []event{
		{kind: evExit, rank: 3, code: 137, other: -1, host: "h2", how: "was killed by signal 9 (killed)", flags: flagJoined},
		{kind: evExit, rank: 0, code: 143, other: -1, host: "h1", how: "was killed by signal 15 (terminated)",
			flags: flagEndedByAgent | flagJoined | flagFinalized, why: reasonSeedGone},
		{kind: evJoined, rank: 2, other: -1},
		{kind: evLost, rank: 2, other: 1, how: "connection reset by peer"},
		{kind: evGlobalExit, rank: 2, code: 7, other: -1, host: "h1"},
	}},
	{kind: kindAgentAck, jobID: "job-1", rank: -1, seq: 4},
	{kind: kindTerminate, jobID: "job-1", rank: -1, reason: "PE 3 on host h2 was killed by signal 9 (killed)"},
	{kind: kindStallReport, jobID: "job-1", rank: -1, ranks: []int{0, 5, 9}},
}

func equalMessages(a, b *message) bool {
	if a.kind != b.kind || a.jobID != b.jobID || a.rank != b.rank || a.seq != b.seq || a.flags != b.flags ||
		!bytes.Equal(a.payload, b.payload) || a.size != b.size || a.count != b.count || a.addr != b.addr ||
		a.failRank != b.failRank || a.host != b.host || a.reason != b.reason || a.code != b.code ||
		len(a.entries) != len(b.entries) || !slices.Equal(a.agents, b.agents) || !slices.Equal(a.events, b.events) {
		return false
	}
	for i := range a.entries {
		if x, y := a.entries[i], b.entries[i]; x.rank != y.rank || x.node != y.node || !bytes.Equal(x.blob, y.blob) {
			return false
		}
	}
	return true
}

func TestMessageRoundTrip(t *testing.T) {
	for _, m := range sampleMessages {
		b := appendMessage(nil, m)
		got, err := decodeMessage(b)
		if err != nil {
			t.Errorf("%v message: decode: %v", m.kind, err)
			continue
		}
		if !equalMessages(got, m) {
			t.Errorf("%v message: decoded %+v, want %+v", m.kind, got, m)
		}
	}
}

func TestDecodeMalformed(t *testing.T) {
	good := appendMessage(nil, sampleMessages[2])
	down := appendMessage(nil, sampleMessages[21])
	tests := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"version", append([]byte{9}, good[1:]...)},
		{"unknown kind", append([]byte{wireVersion, 99}, good[2:]...)},
		{"truncated", good[:len(good)-1]},
		{"trailing", append(append([]byte{}, good...), 0)},
		{"truncated entries", down[:len(down)-2]},
		{"huge count", func() []byte {
			m := appendMessage(nil, &message{kind: kindDown, jobID: "j", rank: 0, seq: 1})
			m[len(m)-1] = 0xff // count 255 with no entries
			return m
		}()},
		{"rank below -1", appendMessage(nil, &message{kind: kindGather, jobID: "j", rank: -2, seq: 1})},
		{"negative entry rank", appendMessage(nil, &message{kind: kindDown, jobID: "j", rank: 0, seq: 1, entries: []entry{{-1, 0, nil}}})},
		{"long job id", appendMessage(nil, &message{kind: kindFinalizeAck, jobID: string(make([]byte, maxJobID+1)), rank: -1})},
		{"unknown flag", appendMessage(nil, &message{kind: kindGather, jobID: "j", rank: 0, seq: 1, flags: 2})},
		{"unknown event flag", appendMessage(nil, &message{kind: kindAgentReport, jobID: "j", rank: 0, seq: 1, addr: "127.0.0.1:1",
			events: []event{{kind: evExit, flags: 8}}})},
		{"unknown event", appendMessage(nil, &message{kind: kindAgentReport, jobID: "j", rank: 0, seq: 1, addr: "127.0.0.1:1",
			events: []event{{kind: evLast + 1}}})},
		{"huge table", appendMessage(nil, &message{kind: kindResult, jobID: "j", rank: -1, seq: 1, size: 1 << 40})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if m, err := decodeMessage(tt.b); !errors.Is(err, ucs.ErrInvalidParam) || !errors.Is(err, errMalformed) {
				t.Errorf("decodeMessage = %+v, %v; want a malformed-message error", m, err)
			}
		})
	}
}

func TestParseNodeAddr(t *testing.T) {
	tests := []struct {
		in   string
		ok   bool
		ip   string
		port uint16
	}{
		{"127.0.0.1:80", true, "127.0.0.1", 80},
		{"[::1]:7946", true, "::1", 7946},
		{"localhost:80", false, "", 0},
		{"127.0.0.1:0", false, "", 0},
		{"127.0.0.1:65536", false, "", 0},
		{"127.0.0.1", false, "", 0},
		{"", false, "", 0},
	}
	for _, tt := range tests {
		ip, port, err := parseNodeAddr(tt.in)
		if (err == nil) != tt.ok || (tt.ok && (!ip.Equal(net.ParseIP(tt.ip)) || port != tt.port)) {
			t.Errorf("parseNodeAddr(%q) = %v, %d, %v", tt.in, ip, port, err)
		}
	}
}

// FuzzDecodeMessage checks that decoding never panics and that what
// decodes re-encodes to the same bytes.
func FuzzDecodeMessage(f *testing.F) {
	for _, m := range sampleMessages {
		f.Add(appendMessage(nil, m))
	}
	f.Add([]byte{})
	f.Add([]byte{wireVersion, byte(kindDown), 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMessage(b)
		if err != nil {
			if !errors.Is(err, ucs.ErrInvalidParam) {
				t.Fatalf("error %v does not wrap ucs.ErrInvalidParam", err)
			}
			return
		}
		if again := appendMessage(nil, m); !bytes.Equal(again, b) {
			t.Fatalf("re-encoding %+v gives\n%x\nwant\n%x", m, again, b)
		}
	})
}

// FuzzSeedHandle feeds the seed arbitrary messages: it must never panic
// nor count a PE outside the job.
func FuzzSeedHandle(f *testing.F) {
	for _, m := range sampleMessages {
		f.Add(appendMessage(nil, m))
	}
	s, err := NewSeed(SeedConfig{Size: 4, Agents: 2, Key: newTestKey(f), JobID: "job-1"})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })
	s.mu.Lock()
	s.sendAgent = func(int, net.IP, uint16, []byte) error { return nil }
	s.mu.Unlock()
	go func() {
		for range s.Reports() {
		}
	}()
	f.Fuzz(func(t *testing.T, b []byte) {
		s.handle(b)
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.pes) != 4 {
			t.Fatalf("seed has %d PEs for 4", len(s.pes))
		}
	})
}

// newFuzzAgent returns an agent of a job of 4 PEs, agent 1 of 6 with PEs
// 1 and 2, that sends nothing and has no memberlist.
func newFuzzAgent() *Agent {
	a := &Agent{
		id: 1, agents: 6,
		env:      Env{JobID: "job-1", Size: 4},
		ranks:    []int{1, 2},
		logger:   discardLogger(),
		send:     func(int, string, []byte) error { return nil },
		silent:   make(chan int, 2),
		pes:      map[int]*localPE{},
		term:     make(chan struct{}),
		closeCh:  make(chan struct{}),
		repKick:  make(chan struct{}, 1),
		repAck:   make(chan uint64, 1),
		stopPing: make(chan struct{}),
	}
	return a
}

// FuzzAgentHandle feeds an agent arbitrary messages from "the seed" and
// "other agents": it must never panic, and only a terminate message may end
// it.
func FuzzAgentHandle(f *testing.F) {
	for _, m := range sampleMessages {
		f.Add(appendMessage(nil, m))
	}
	f.Add(appendMessage(nil, &message{kind: kindDirectory, jobID: "job-1", rank: 0, addr: "127.0.0.1:9",
		agents: []agentEntry{{1, 0, "127.0.0.1:9", "h"}, {5, 1, "127.0.0.1:10", "h"}, {6, 1, "127.0.0.1:11", "h"}}}))
	f.Add(appendMessage(nil, &message{kind: kindUp, jobID: "job-1", rank: 5, seq: 1, count: 1, entries: []entry{{3, 0, []byte("x")}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		a := newFuzzAgent()
		a.handle(b)
		a.handle(b) // twice: a repeated message must not panic
		a.sends.Wait()
		select {
		case <-a.term:
			if m, err := decodeMessage(b); err != nil || m.kind != kindTerminate {
				t.Fatalf("agent terminated by %+v (%v)", m, err)
			}
		default:
		}
		if a.done > 1 {
			t.Fatalf("agent completed %d collectives out of nothing", a.done)
		}
	})
}

// FuzzMemberHandle feeds a member arbitrary frames from "its agent".
func FuzzMemberHandle(f *testing.F) {
	for _, m := range sampleMessages {
		f.Add(appendMessage(nil, m))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		msg, err := decodeMessage(b)
		if err != nil {
			return // the channel's reader drops it before handle
		}
		agent, pe, err := newLocalPair()
		if err != nil {
			t.Fatal(err)
		}
		defer agent.close()
		conn, err := fileConn(pe)
		pe.Close()
		if err != nil {
			t.Fatal(err)
		}
		defer conn.close()
		m := &Member{
			env:     Env{JobID: "job-1", Rank: 1, Size: 4, LocalRank: 1, LocalSize: 4},
			conn:    conn,
			logger:  discardLogger(),
			welcome: make(chan struct{}),
			finAck:  make(chan struct{}),
			exitAck: make(chan struct{}),
			lostAck: make(chan struct{}),
			failed:  make(map[int]bool),
			failCh:  make(chan struct{}),
			closeCh: make(chan struct{}),
			seq:     7,
			reply:   make(chan reply, 1),
		}
		m.handle(msg, -1)
		m.handle(msg, -1) // twice: a repeated reply or ack must not block or panic
		for _, f := range m.failures {
			if f.Rank < -1 || f.Rank >= m.env.Size {
				t.Fatalf("recorded a failure of rank %d in a job of %d", f.Rank, m.env.Size)
			}
		}
	})
}
