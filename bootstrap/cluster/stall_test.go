package cluster

import (
	"slices"
	"testing"
	"time"
)

// TestStallReportRequest checks that a request of the seed reaches the
// agent it is for, with the ranks to ask, and that a request that finds
// one pending is dropped.
func TestStallReportRequest(t *testing.T) {
	const size = 4
	key := newTestKey(t)
	seed, err := NewSeed(SeedConfig{Size: size, Agents: 2, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	defer seed.Close()
	var agents []*Agent
	for id := range 2 {
		a, err := JoinAgent(agentEnv(seed, key, size), AgentConfig{ID: id, Agents: 2, Ranks: []int{id, id + 2}})
		if err != nil {
			t.Fatalf("JoinAgent %d: %v", id, err)
		}
		defer a.Close()
		agents = append(agents, a)
	}
	for _, a := range agents {
		select {
		case <-a.StallReports():
			t.Fatalf("agent %d: a stall report before any request", a.ID())
		default:
		}
	}
	// No PE joined yet: a request asks none (a PE before Init would die
	// of the signal).
	agents[0].stallReport([]int{0, 2})
	select {
	case r := <-agents[0].StallReports():
		t.Fatalf("a request passed on PEs %v that had not joined", r)
	default:
	}
	// The agents' PEs join (as a hello would mark them), but for rank 3;
	// they have no connection to close when the agents close.
	for i, a := range agents {
		a.mu.Lock()
		for _, r := range []int{i, i + 2} {
			a.pes[r] = &localPE{rank: r, joined: r != 3}
		}
		a.mu.Unlock()
		defer func() {
			a.mu.Lock()
			clear(a.pes)
			a.mu.Unlock()
		}()
	}
	// The seed learns of an agent's address a little after its join
	// returns: ask until each agent has heard.
	deadline := time.Now().Add(waitLimit)
	for i, a := range agents {
		want := []int{i, i + 2}
		if i == 1 {
			want = []int{1} // rank 3 did not join
		}
		for heard := false; !heard; {
			if time.Now().After(deadline) {
				t.Fatalf("agent %d: no stall report request within %v", i, waitLimit)
			}
			seed.RequestStallReport(i, []int{i, i + 2})
			select {
			case got := <-a.StallReports():
				if !slices.Equal(got, want) {
					t.Errorf("agent %d asked for ranks %v, want %v", i, got, want)
				}
				heard = true
			case <-time.After(100 * time.Millisecond):
			}
		}
		if i == 0 {
			select {
			case r := <-agents[1].StallReports():
				t.Errorf("agent 1 got the request for agent 0: %v", r)
			default:
			}
		}
	}
	// A request that finds one pending is dropped.
	a := agents[0]
	a.stallReport([]int{0})
	a.stallReport([]int{2})
	if got := <-a.StallReports(); !slices.Equal(got, []int{0}) {
		t.Errorf("pending request %v, want [0]", got)
	}
	select {
	case r := <-a.StallReports():
		t.Errorf("the second request %v was not dropped", r)
	default:
	}
}
