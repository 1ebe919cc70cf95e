package cluster

import (
	"net"
	"testing"

	"github.com/goshmem/goshmem/bootstrap"
	"github.com/goshmem/goshmem/bootstrap/internal/wire"
)

// FuzzSeedHandle feeds the seed arbitrary messages: it must never panic
// nor count a PE outside the job.
func FuzzSeedHandle(f *testing.F) {
	for _, m := range wire.SampleMessages() {
		f.Add(wire.AppendMessage(nil, m))
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
		env:      bootstrap.Env{JobID: "job-1", Size: 4},
		ranks:    []int{1, 2},
		logger:   wire.DiscardLogger(),
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
	for _, m := range wire.SampleMessages() {
		f.Add(wire.AppendMessage(nil, m))
	}
	f.Add(wire.AppendMessage(nil, &wire.Message{Kind: wire.KindDirectory, JobID: "job-1", Rank: 0, Addr: "127.0.0.1:9",
		Agents: []wire.AgentEntry{{ID: 1, Node: 0, Addr: "127.0.0.1:9", Host: "h"}, {ID: 5, Node: 1, Addr: "127.0.0.1:10", Host: "h"}, {ID: 6, Node: 1, Addr: "127.0.0.1:11", Host: "h"}}}))
	f.Add(wire.AppendMessage(nil, &wire.Message{Kind: wire.KindUp, JobID: "job-1", Rank: 5, Seq: 1, Count: 1, Entries: []wire.Entry{{Rank: 3, Node: 0, Blob: []byte("x")}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		a := newFuzzAgent()
		a.handle(b)
		a.handle(b) // twice: a repeated message must not panic
		a.sends.Wait()
		select {
		case <-a.term:
			if m, err := wire.DecodeMessage(b); err != nil || m.Kind != wire.KindTerminate {
				t.Fatalf("agent terminated by %+v (%v)", m, err)
			}
		default:
		}
		if a.done > 1 {
			t.Fatalf("agent completed %d collectives out of nothing", a.done)
		}
	})
}
