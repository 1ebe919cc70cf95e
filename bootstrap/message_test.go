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
	{kind: kindGather, jobID: "job-1", rank: 3, seq: 7, addr: "127.0.0.1:4000", payload: []byte("worker address")},
	{kind: kindGather, jobID: "j", rank: 0, seq: 1, addr: "[::1]:1", payload: []byte{}},
	{kind: kindTable, jobID: "job-1", rank: -1, seq: 7, table: [][]byte{[]byte("a"), {}, []byte("ccc")}},
	{kind: kindTable, jobID: "job-1", rank: -1, seq: 2, table: [][]byte{}},
	{kind: kindFinalize, jobID: "job-1", rank: 2, addr: "10.0.0.1:7946", payload: []byte{}},
	{kind: kindFinalizeAck, jobID: "job-1", rank: -1},
	{kind: kindFailure, jobID: "job-1", rank: -1, failRank: 5, host: "n1 (10.0.0.2)", reason: reasonGone},
	{kind: kindFailure, jobID: "job-1", rank: -1, failRank: -1, host: "", reason: reasonSeedGone},
	{kind: kindAbort, jobID: "job-1", rank: -1, seq: 3, reason: "too large"},
	{kind: kindGlobalExit, jobID: "job-1", rank: 2, addr: "127.0.0.1:4000", code: 3, host: "n1"},
	{kind: kindGlobalExit, jobID: "job-1", rank: 0, addr: "[::1]:1", code: -7},
	{kind: kindGlobalExitAck, jobID: "job-1", rank: -1},
	{kind: kindAgentReport, jobID: "job-1", rank: 1, seq: 4, addr: "10.0.0.1:7946", failRank: 3, code: 137, host: "h2", reason: "was killed by signal 9 (killed)"},
	{kind: kindAgentReport, jobID: "job-1", rank: 0, seq: 1, addr: "10.0.0.1:7946", failRank: 0, code: 143, host: "h1",
		reason: "was killed by signal 15 (terminated)", flags: flagEndedByAgent, why: reasonSeedGone},
	{kind: kindAgentAck, jobID: "job-1", rank: -1, seq: 4},
	{kind: kindLost, jobID: "job-1", rank: 2, addr: "127.0.0.1:4000", failRank: 1, reason: "connection reset by peer"},
	{kind: kindLostAck, jobID: "job-1", rank: -1},
	{kind: kindStallReport, jobID: "job-1", rank: -1, ranks: []int{0, 5, 2}},
	{kind: kindStallReport, jobID: "job-1", rank: -1, ranks: []int{}},
	{kind: kindTerminate, jobID: "job-1", rank: -1, reason: "PE 3 on host h2 was killed by signal 9 (killed)"},
}

func equalMessages(a, b *message) bool {
	if a.kind != b.kind || a.jobID != b.jobID || a.rank != b.rank || a.seq != b.seq ||
		a.addr != b.addr || !bytes.Equal(a.payload, b.payload) || len(a.table) != len(b.table) ||
		a.failRank != b.failRank || a.host != b.host || a.reason != b.reason || a.code != b.code ||
		a.flags != b.flags || a.why != b.why || !slices.Equal(a.ranks, b.ranks) {
		return false
	}
	for i := range a.table {
		if !bytes.Equal(a.table[i], b.table[i]) {
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
	good := appendMessage(nil, sampleMessages[0])
	table := appendMessage(nil, sampleMessages[2])
	tests := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"version", append([]byte{9}, good[1:]...)},
		{"unknown kind", append([]byte{wireVersion, 99}, good[2:]...)},
		{"truncated", good[:len(good)-1]},
		{"trailing", append(append([]byte{}, good...), 0)},
		{"truncated table", table[:len(table)-2]},
		{"huge count", func() []byte {
			m := appendMessage(nil, &message{kind: kindTable, jobID: "j", rank: -1, seq: 1})
			m[len(m)-1] = 0xff // count 255 with no entries
			return m
		}()},
		{"rank below -1", appendMessage(nil, &message{kind: kindGather, jobID: "j", rank: -2, seq: 1, addr: "127.0.0.1:1"})},
		{"long job id", appendMessage(nil, &message{kind: kindFinalizeAck, jobID: string(make([]byte, maxJobID+1)), rank: -1})},
		{"unknown report flag", appendMessage(nil, &message{kind: kindAgentReport, jobID: "j", rank: 0, seq: 1, addr: "127.0.0.1:1", flags: 2})},
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
	f.Add([]byte{wireVersion, byte(kindTable), 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff})
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
// nor count a contribution from outside the job.
func FuzzSeedHandle(f *testing.F) {
	for _, m := range sampleMessages {
		f.Add(appendMessage(nil, m))
	}
	f.Add(appendMessage(nil, &message{kind: kindGather, jobID: "job-1", rank: 1, seq: 1, addr: "127.0.0.1:9", payload: []byte("x")}))
	f.Add(appendMessage(nil, &message{kind: kindFinalize, jobID: "job-1", rank: 0, addr: "127.0.0.1:9"}))
	s, err := NewSeed(SeedConfig{Size: 2, Key: newTestKey(f), JobID: "job-1"})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })
	s.mu.Lock()
	s.send = func(int, net.IP, uint16, []byte) error { return nil }
	s.mu.Unlock()
	f.Fuzz(func(t *testing.T, b []byte) {
		s.handle(b)
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.count > s.size {
			t.Fatalf("seed counts %d contributions for %d PEs", s.count, s.size)
		}
	})
}

// FuzzMemberHandle feeds a member arbitrary messages from "the seed".
func FuzzMemberHandle(f *testing.F) {
	for _, m := range sampleMessages {
		f.Add(appendMessage(nil, m))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m := &Member{
			env:     Env{JobID: "job-1", Rank: 1, Size: 4, LocalRank: 1, LocalSize: 4},
			logger:  discardLogger(),
			finAck:  make(chan struct{}),
			exitAck: make(chan struct{}),
			lostAck: make(chan struct{}),
			failed:  make(map[int]bool),
			failCh:  make(chan struct{}),
			closeCh: make(chan struct{}),
			seq:     7,
			reply:   make(chan *message, 1),
		}
		m.handle(b)
		m.handle(b) // twice: a repeated reply or ack must not block or panic
		for _, f := range m.failures {
			if f.Rank < -1 || f.Rank >= m.env.Size {
				t.Fatalf("recorded a failure of rank %d in a job of %d", f.Rank, m.env.Size)
			}
		}
	})
}

// FuzzAgentHandle feeds an agent arbitrary messages from "the seed": it must
// never panic, and only a terminate message may end it.
func FuzzAgentHandle(f *testing.F) {
	for _, m := range sampleMessages {
		f.Add(appendMessage(nil, m))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		a := &Agent{
			env:     Env{JobID: "job-1", Size: 4},
			logger:  discardLogger(),
			done:    make(chan struct{}),
			closeCh: make(chan struct{}),
			seq:     4,
			ack:     make(chan struct{}),
		}
		a.handle(b)
		a.handle(b) // twice: a repeated ack or terminate must not panic
		select {
		case <-a.done:
			if m, err := decodeMessage(b); err != nil || m.kind != kindTerminate {
				t.Fatalf("agent terminated by %+v (%v)", m, err)
			}
		default:
		}
	})
}
