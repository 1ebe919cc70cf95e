package tcp

import (
	"errors"
	"strings"
	"testing"
)

// st spells a state in the tables below.
func st(c connPhase, o opsPhase, s saidPhase, p peerPhase) epState {
	return epState{conn: c, ops: o, said: s, peer: p}
}

// TestEPStateValid checks that next takes every transition of an EP's
// life, from the states it happens in, to the state it leads to.
func TestEPStateValid(t *testing.T) {
	tests := []struct {
		from epState
		ev   epEvent
		to   epState
	}{
		{st(connUnconnected, opsNotConnected, saidNothing, peerSends), evConnect, st(connConnecting, opsNotConnected, saidNothing, peerSends)},
		{st(connConnecting, opsNotConnected, saidNothing, peerSends), evConnectFailed, st(connUnconnected, opsNotConnected, saidNothing, peerSends)},
		{st(connConnecting, opsFailed, saidNothing, peerSends), evConnectFailed, st(connUnconnected, opsFailed, saidNothing, peerSends)},
		{st(connConnecting, opsNotConnected, saidNothing, peerSends), evConnected, st(connOpen, opsLive, saidNothing, peerBye)},
		{st(connConnecting, opsFailed, saidNothing, peerSends), evConnected, st(connOpen, opsFailed, saidNothing, peerBye)},
		{st(connOpen, opsUntaken, saidNothing, peerSends), evClaim, st(connOpen, opsLive, saidNothing, peerSends)},
		{st(connOpen, opsUntaken, saidNothing, peerBye), evClaim, st(connOpen, opsLive, saidNothing, peerBye)},
		{st(connUnconnected, opsNotConnected, saidNothing, peerSends), evFail, st(connUnconnected, opsFailed, saidNothing, peerSends)},
		{st(connConnecting, opsNotConnected, saidNothing, peerSends), evFail, st(connConnecting, opsFailed, saidNothing, peerSends)},
		{st(connOpen, opsUntaken, saidNothing, peerSends), evFail, st(connOpen, opsFailed, saidNothing, peerSends)},
		{st(connOpen, opsLive, saidNothing, peerBye), evFail, st(connOpen, opsFailed, saidNothing, peerBye)},
		{st(connOpen, opsLive, saidNothing, peerSends), evPeerClosed, st(connOpen, opsPeerClosed, saidNothing, peerSends)},
		{st(connOpen, opsUntaken, saidNothing, peerSends), evPeerClosed, st(connOpen, opsPeerClosed, saidNothing, peerSends)},
		{st(connOpen, opsFailed, saidNothing, peerSends), evEPBye, st(connOpen, opsFailed, saidEPBye, peerSends)},
		{st(connOpen, opsPeerClosed, saidNothing, peerBye), evEPBye, st(connOpen, opsPeerClosed, saidEPBye, peerBye)},
		{st(connOpen, opsFailed, saidNothing, peerSends), evAllBye, st(connOpen, opsFailed, saidAll, peerSends)},
		{st(connOpen, opsFailed, saidEPBye, peerSends), evAllBye, st(connOpen, opsFailed, saidAll, peerSends)},
		{st(connShut, opsFailed, saidEPBye, peerBye), evAllBye, st(connShut, opsFailed, saidAll, peerBye)},
		{st(connOpen, opsLive, saidNothing, peerSends), evPeerBye, st(connOpen, opsLive, saidNothing, peerBye)},
		{st(connOpen, opsFailed, saidEPBye, peerSends), evPeerBye, st(connOpen, opsFailed, saidEPBye, peerBye)},
		{st(connClosed, opsFailed, saidNothing, peerSends), evPeerBye, st(connClosed, opsFailed, saidNothing, peerBye)},
		{st(connOpen, opsFailed, saidEPBye, peerBye), evShut, st(connShut, opsFailed, saidEPBye, peerBye)},
		{st(connOpen, opsFailed, saidAll, peerSends), evShut, st(connShut, opsFailed, saidAll, peerSends)},
		{st(connOpen, opsFailed, saidNothing, peerSends), evClose, st(connClosed, opsFailed, saidNothing, peerSends)},
		{st(connOpen, opsPeerClosed, saidNothing, peerSends), evClose, st(connClosed, opsPeerClosed, saidNothing, peerSends)},
		{st(connShut, opsFailed, saidEPBye, peerBye), evClose, st(connClosed, opsFailed, saidEPBye, peerBye)},
	}
	reachable := reachableStates(t)
	covered := make(map[epEvent]bool)
	for _, tt := range tests {
		t.Run(tt.ev.String()+" from "+tt.from.String(), func(t *testing.T) {
			if !reachable[tt.from] {
				t.Errorf("state %v is not reachable: the table tests what cannot happen", tt.from)
			}
			got, err := tt.from.next(tt.ev)
			if err != nil {
				t.Fatalf("next: %v", err)
			}
			if got != tt.to {
				t.Errorf("next = %v, want %v", got, tt.to)
			}
		})
		covered[tt.ev] = true
	}
	for ev := range numEPEvents {
		if !covered[ev] {
			t.Errorf("no valid transition on %v in the table", ev)
		}
	}
}

// TestEPStateInvalid checks that next refuses events that cannot happen
// in a state, and leaves the state as it was.
func TestEPStateInvalid(t *testing.T) {
	tests := []struct {
		from epState
		ev   epEvent
	}{
		{st(connConnecting, opsNotConnected, saidNothing, peerSends), evConnect}, // a second ConnectToEP
		{st(connOpen, opsLive, saidNothing, peerBye), evConnect},                 // connected already
		{st(connUnconnected, opsFailed, saidNothing, peerSends), evConnect},      // destroyed
		{st(connUnconnected, opsNotConnected, saidNothing, peerSends), evConnectFailed},
		{st(connOpen, opsLive, saidNothing, peerBye), evConnectFailed},
		{st(connUnconnected, opsNotConnected, saidNothing, peerSends), evConnected}, // not dialing
		{st(connOpen, opsLive, saidNothing, peerBye), evConnected},
		{st(connOpen, opsLive, saidNothing, peerSends), evClaim},        // claimed twice
		{st(connOpen, opsFailed, saidNothing, peerSends), evClaim},      // the connection ended
		{st(connClosed, opsFailed, saidNothing, peerSends), evClaim},    // the connection ended
		{st(connOpen, opsFailed, saidNothing, peerSends), evFail},       // ends once
		{st(connOpen, opsPeerClosed, saidNothing, peerSends), evFail},   // ended quietly already
		{st(connOpen, opsFailed, saidNothing, peerSends), evPeerClosed}, // ended already
		{st(connUnconnected, opsNotConnected, saidNothing, peerSends), evPeerClosed},
		{st(connOpen, opsLive, saidNothing, peerSends), evEPBye},     // a goodbye before the role ended
		{st(connOpen, opsFailed, saidEPBye, peerSends), evEPBye},     // said twice
		{st(connClosed, opsFailed, saidNothing, peerSends), evEPBye}, // nothing is written any more
		{st(connUnconnected, opsFailed, saidNothing, peerSends), evEPBye},
		{st(connOpen, opsFailed, saidAll, peerSends), evAllBye},      // said twice
		{st(connOpen, opsUntaken, saidNothing, peerSends), evAllBye}, // a goodbye before the role ended
		{st(connClosed, opsFailed, saidEPBye, peerSends), evAllBye},
		{st(connOpen, opsLive, saidNothing, peerBye), evPeerBye}, // twice, or on a one-way connection
		{st(connUnconnected, opsNotConnected, saidNothing, peerSends), evPeerBye},
		{st(connOpen, opsFailed, saidEPBye, peerSends), evShut}, // the target role still answers
		{st(connOpen, opsFailed, saidNothing, peerBye), evShut}, // this side's goodbye not said
		{st(connShut, opsFailed, saidAll, peerBye), evShut},     // shut twice
		{st(connClosed, opsFailed, saidAll, peerBye), evShut},
		{st(connClosed, opsFailed, saidNothing, peerSends), evClose},      // closed twice
		{st(connOpen, opsLive, saidNothing, peerSends), evClose},          // the role must end first
		{st(connUnconnected, opsFailed, saidNothing, peerSends), evClose}, // no socket
		{st(connOpen, opsLive, saidNothing, peerSends), numEPEvents},      // no such event
	}
	for _, tt := range tests {
		t.Run(tt.ev.String()+" from "+tt.from.String(), func(t *testing.T) {
			got, err := tt.from.next(tt.ev)
			var inv *invalidTransition
			if !errors.As(err, &inv) || inv.from != tt.from || inv.ev != tt.ev {
				t.Fatalf("next = %v, %v; want an invalid transition", got, err)
			}
			if got != tt.from {
				t.Errorf("next changed the state to %v", got)
			}
		})
	}
}

// reachableStates returns every state an EP can reach from its initial
// states, and checks on each the invariants the rest of the package
// relies on.
func reachableStates(t *testing.T) map[epState]bool {
	t.Helper()
	oneWay := stateUntaken
	oneWay.peer = peerBye
	seen := map[epState]bool{}
	todo := []epState{stateUnconnected, stateUntaken, oneWay}
	for len(todo) > 0 {
		s := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if seen[s] {
			continue
		}
		seen[s] = true
		for ev := range numEPEvents {
			if n, err := s.next(ev); err == nil {
				if n == s {
					t.Errorf("%v from %v changes nothing", ev, s)
				}
				todo = append(todo, n)
			}
		}
	}
	for s := range seen {
		for _, inv := range []struct {
			what string
			ok   bool
		}{
			{"a goodbye is said only once the role ended", s.said == saidNothing || s.ended()},
			{"a closed connection ended the role", s.conn != connClosed || s.ended()},
			{"the sending side shuts once every goodbye was said", s.conn != connShut || s.saidAll()},
			{"without a socket nothing was said", s.hasSocket() || s.said == saidNothing && s.peer == peerSends},
			{"operations wait for a connection only without a socket", s.ops != opsNotConnected || !s.hasSocket()},
			{"an untaken connection is open", s.ops != opsUntaken || s.conn == connOpen},
			{"live operations have a socket", s.ops != opsLive || s.hasSocket()},
			{"without a socket operations wait for one or failed", s.hasSocket() || s.ops == opsNotConnected || s.ops == opsFailed},
			{"operations fail unless live or untaken", s.fails() == (s.ops != opsLive && s.ops != opsUntaken)},
		} {
			if !inv.ok {
				t.Errorf("reachable state %v breaks the rule: %s", s, inv.what)
			}
		}
	}
	return seen
}

// TestEPStateReachable checks the invariants of every reachable state,
// and that every event happens in some state.
func TestEPStateReachable(t *testing.T) {
	seen := reachableStates(t)
	for ev := range numEPEvents {
		happens := false
		for s := range seen {
			if _, err := s.next(ev); err == nil {
				happens = true
				break
			}
		}
		if !happens {
			t.Errorf("event %v happens in no reachable state", ev)
		}
	}
	t.Logf("%d reachable states", len(seen))
}

// TestEPStateString checks that every phase and event has its name, and
// that an invalid event panics in EP.to, naming the state.
func TestEPStateString(t *testing.T) {
	for s := range reachableStates(t) {
		if str := s.String(); strings.Contains(str, "?") {
			t.Errorf("state without a name: %s", str)
		}
	}
	for ev := range numEPEvents {
		if strings.Contains(ev.String(), "?") {
			t.Errorf("event %d has no name", ev)
		}
	}
	e := &EP{st: stateUnconnected, peer: "127.0.0.1:1"}
	defer func() {
		r := recover()
		err, _ := r.(error)
		var inv *invalidTransition
		if !errors.As(err, &inv) || !strings.Contains(err.Error(), "conn=unconnected") {
			t.Errorf("to(evClose) on an unconnected ep: recovered %v, want an invalid transition", r)
		}
	}()
	e.to(evClose)
	t.Errorf("to(evClose) on an unconnected ep did not panic")
}
