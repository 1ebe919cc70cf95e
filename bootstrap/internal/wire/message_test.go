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
var sampleMessages = []*Message{
	{Kind: KindHello, JobID: "job-1", Rank: 3},
	{Kind: KindWelcome, JobID: "job-1", Rank: -1},
	{Kind: KindGather, JobID: "job-1", Rank: 3, Seq: 7, Payload: []byte("worker address")},
	{Kind: KindGather, JobID: "j", Rank: 0, Seq: 1, Flags: FlagBarrier, Payload: []byte{}},
	{Kind: KindResult, JobID: "job-1", Rank: -1, Seq: 7, Size: 4096},
	{Kind: KindResult, JobID: "job-1", Rank: -1, Seq: 8, Flags: FlagBarrier},
	{Kind: KindFinalize, JobID: "job-1", Rank: 2},
	{Kind: KindFinalizeAck, JobID: "job-1", Rank: -1},
	{Kind: KindPing, JobID: "job-1", Rank: -1},
	{Kind: KindPong, JobID: "job-1", Rank: 2},
	{Kind: KindGlobalExit, JobID: "job-1", Rank: 2, Code: 3, Host: "n1"},
	{Kind: KindGlobalExit, JobID: "job-1", Rank: 0, Code: -7},
	{Kind: KindGlobalExitAck, JobID: "job-1", Rank: -1},
	{Kind: KindLost, JobID: "job-1", Rank: 2, FailRank: 1, Reason: "connection reset by peer"},
	{Kind: KindLostAck, JobID: "job-1", Rank: -1},
	{Kind: KindFailure, JobID: "job-1", Rank: -1, FailRank: 5, Host: "n1 (10.0.0.2)", Reason: "exited with status 3"},
	{Kind: KindFailure, JobID: "job-1", Rank: -1, FailRank: -1, Host: "", Reason: reasonSeedGone},
	{Kind: KindDirectory, JobID: "job-1", Rank: -1, Agents: []AgentEntry{{0, 0, "10.0.0.1:7946", "h1"}, {1, 0, "10.0.0.2:7946", "h2"}}},
	{Kind: KindDirectory, JobID: "job-1", Rank: 0, Addr: "10.0.0.1:7946", Agents: []AgentEntry{{4, 2, "[::1]:1", ""}}},
	{Kind: KindUp, JobID: "job-1", Rank: 3, Seq: 2, Count: 2, Entries: []Entry{{5, 1, []byte("a")}, {6, 1, []byte{}}}},
	{Kind: KindUp, JobID: "job-1", Rank: 3, Seq: 3, Flags: FlagBarrier, Count: 7},
	{Kind: KindDown, JobID: "job-1", Rank: 0, Seq: 2, Entries: []Entry{{0, 0, []byte("a")}, {1, 0, []byte("bb")}}},
	{Kind: KindDown, JobID: "job-1", Rank: 0, Seq: 3, Flags: FlagBarrier},
	{Kind: KindAbort, JobID: "job-1", Rank: 0, Seq: 3, Reason: "too large"},
	{Kind: KindAgentReport, JobID: "job-1", Rank: 1, Seq: 4, Addr: "10.0.0.1:7946", Events: []Event{
		{Kind: EvExit, Rank: 3, Code: 137, Other: -1, Host: "h2", How: "was killed by signal 9 (killed)", Flags: FlagJoined},
		{Kind: EvExit, Rank: 0, Code: 143, Other: -1, Host: "h1", How: "was killed by signal 15 (terminated)",
			Flags: FlagEndedByAgent | FlagJoined | FlagFinalized, Why: reasonSeedGone},
		{Kind: EvJoined, Rank: 2, Other: -1},
		{Kind: EvLost, Rank: 2, Other: 1, How: "connection reset by peer"},
		{Kind: EvGlobalExit, Rank: 2, Code: 7, Other: -1, Host: "h1"},
	}},
	{Kind: KindAgentAck, JobID: "job-1", Rank: -1, Seq: 4},
	{Kind: KindTerminate, JobID: "job-1", Rank: -1, Reason: "PE 3 on host h2 was killed by signal 9 (killed)"},
	{Kind: KindStallReport, JobID: "job-1", Rank: -1, Ranks: []int{0, 5, 9}},
}

func equalMessages(a, b *Message) bool {
	if a.Kind != b.Kind || a.JobID != b.JobID || a.Rank != b.Rank || a.Seq != b.Seq || a.Flags != b.Flags ||
		!bytes.Equal(a.Payload, b.Payload) || a.Size != b.Size || a.Count != b.Count || a.Addr != b.Addr ||
		a.FailRank != b.FailRank || a.Host != b.Host || a.Reason != b.Reason || a.Code != b.Code ||
		len(a.Entries) != len(b.Entries) || !slices.Equal(a.Agents, b.Agents) || !slices.Equal(a.Events, b.Events) {
		return false
	}
	for i := range a.Entries {
		if x, y := a.Entries[i], b.Entries[i]; x.Rank != y.Rank || x.Node != y.Node || !bytes.Equal(x.Blob, y.Blob) {
			return false
		}
	}
	return true
}

func TestMessageRoundTrip(t *testing.T) {
	for _, m := range sampleMessages {
		b := AppendMessage(nil, m)
		got, err := DecodeMessage(b)
		if err != nil {
			t.Errorf("%v message: decode: %v", m.Kind, err)
			continue
		}
		if !equalMessages(got, m) {
			t.Errorf("%v message: decoded %+v, want %+v", m.Kind, got, m)
		}
	}
}

func TestDecodeMalformed(t *testing.T) {
	good := AppendMessage(nil, sampleMessages[2])
	down := AppendMessage(nil, sampleMessages[21])
	tests := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"version", append([]byte{9}, good[1:]...)},
		{"unknown kind", append([]byte{Version, 99}, good[2:]...)},
		{"truncated", good[:len(good)-1]},
		{"trailing", append(append([]byte{}, good...), 0)},
		{"truncated entries", down[:len(down)-2]},
		{"huge count", func() []byte {
			m := AppendMessage(nil, &Message{Kind: KindDown, JobID: "j", Rank: 0, Seq: 1})
			m[len(m)-1] = 0xff // count 255 with no entries
			return m
		}()},
		{"rank below -1", AppendMessage(nil, &Message{Kind: KindGather, JobID: "j", Rank: -2, Seq: 1})},
		{"negative entry rank", AppendMessage(nil, &Message{Kind: KindDown, JobID: "j", Rank: 0, Seq: 1, Entries: []Entry{{-1, 0, nil}}})},
		{"long job id", AppendMessage(nil, &Message{Kind: KindFinalizeAck, JobID: string(make([]byte, MaxJobID+1)), Rank: -1})},
		{"unknown flag", AppendMessage(nil, &Message{Kind: KindGather, JobID: "j", Rank: 0, Seq: 1, Flags: 2})},
		{"unknown event flag", AppendMessage(nil, &Message{Kind: KindAgentReport, JobID: "j", Rank: 0, Seq: 1, Addr: "127.0.0.1:1",
			Events: []Event{{Kind: EvExit, Flags: 8}}})},
		{"unknown event", AppendMessage(nil, &Message{Kind: KindAgentReport, JobID: "j", Rank: 0, Seq: 1, Addr: "127.0.0.1:1",
			Events: []Event{{Kind: evLast + 1}}})},
		{"huge table", AppendMessage(nil, &Message{Kind: KindResult, JobID: "j", Rank: -1, Seq: 1, Size: 1 << 40})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if m, err := DecodeMessage(tt.b); !errors.Is(err, ucs.ErrInvalidParam) || !errors.Is(err, errMalformed) {
				t.Errorf("DecodeMessage = %+v, %v; want a malformed-message error", m, err)
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
		ip, port, err := ParseNodeAddr(tt.in)
		if (err == nil) != tt.ok || (tt.ok && (!ip.Equal(net.ParseIP(tt.ip)) || port != tt.port)) {
			t.Errorf("ParseNodeAddr(%q) = %v, %d, %v", tt.in, ip, port, err)
		}
	}
}

// FuzzDecodeMessage checks that decoding never panics and that what
// decodes re-encodes to the same bytes.
func FuzzDecodeMessage(f *testing.F) {
	for _, m := range sampleMessages {
		f.Add(AppendMessage(nil, m))
	}
	f.Add([]byte{})
	f.Add([]byte{Version, byte(KindDown), 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMessage(b)
		if err != nil {
			if !errors.Is(err, ucs.ErrInvalidParam) {
				t.Fatalf("error %v does not wrap ucs.ErrInvalidParam", err)
			}
			return
		}
		if again := AppendMessage(nil, m); !bytes.Equal(again, b) {
			t.Fatalf("re-encoding %+v gives\n%x\nwant\n%x", m, again, b)
		}
	})
}

// FuzzSeedHandle feeds the seed arbitrary messages: it must never panic
// nor count a PE outside the job.
func FuzzSeedHandle(f *testing.F) {
	for _, m := range sampleMessages {
		f.Add(AppendMessage(nil, m))
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
		logger:   DiscardLogger(),
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
		f.Add(AppendMessage(nil, m))
	}
	f.Add(AppendMessage(nil, &Message{Kind: KindDirectory, JobID: "job-1", Rank: 0, Addr: "127.0.0.1:9",
		Agents: []AgentEntry{{1, 0, "127.0.0.1:9", "h"}, {5, 1, "127.0.0.1:10", "h"}, {6, 1, "127.0.0.1:11", "h"}}}))
	f.Add(AppendMessage(nil, &Message{Kind: KindUp, JobID: "job-1", Rank: 5, Seq: 1, Count: 1, Entries: []Entry{{3, 0, []byte("x")}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		a := newFuzzAgent()
		a.handle(b)
		a.handle(b) // twice: a repeated message must not panic
		a.sends.Wait()
		select {
		case <-a.term:
			if m, err := DecodeMessage(b); err != nil || m.Kind != KindTerminate {
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
		f.Add(AppendMessage(nil, m))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		msg, err := DecodeMessage(b)
		if err != nil {
			return // the channel's reader drops it before handle
		}
		agent, pe, err := NewLocalPair()
		if err != nil {
			t.Fatal(err)
		}
		defer agent.Close()
		conn, err := FileConn(pe)
		pe.Close()
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		m := &Member{
			env:     Env{JobID: "job-1", Rank: 1, Size: 4, LocalRank: 1, LocalSize: 4},
			conn:    conn,
			logger:  DiscardLogger(),
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
