package cluster

import (
	"github.com/goshmem/goshmem/bootstrap/internal/wire"
)

// RequestStallReport asks the agent of that id to have the PEs of the given
// ranks report where they wait (see Agent.StallReports). It returns at
// once: the request goes out in the background, and an agent that did not
// join yet, or left, misses it.
func (s *Seed) RequestStallReport(agent int, ranks []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || agent < 0 || agent >= len(s.agentSt) || s.agentSt[agent].left {
		return
	}
	s.sendAgentsLocked([]int{agent}, wire.AppendMessage(nil, &wire.Message{Kind: wire.KindStallReport, JobID: s.jobID, Rank: -1, Ranks: ranks}))
}

// StallReports returns a channel that receives the ranks of the PEs to
// signal each time the launcher asks for a stall report
// (Seed.RequestStallReport): each of them then reports where it waits. A
// request that arrives while one is pending is dropped: the pending one
// asks the same PEs or, the job having changed in the meantime, the PEs
// still there.
func (a *Agent) StallReports() <-chan []int { return a.stall }

// stallReport passes on a request of the seed for a stall report, for
// those of its PEs that joined and are still connected: a PE that has not
// joined yet may not listen for the signal (its default action ends it).
func (a *Agent) stallReport(ranks []int) {
	a.mu.Lock()
	var ask []int
	for _, r := range ranks {
		if p := a.pes[r]; p != nil && p.joined && !p.gone {
			ask = append(ask, r)
		}
	}
	a.mu.Unlock()
	if len(ask) == 0 {
		return
	}
	select {
	case a.stall <- ask:
	default: // one is pending
	}
}
