package tcp

import (
	"errors"
	"sync"
	"time"
)

// Connection matching: the decisions that let a pair of ifaces share one
// connection, both ways, rather than use one per direction (the way
// UCX's tcp transport matches its connections, ucs_conn_match).
//
// An iface tells connMatch of every connection between it and a peer iface
// that an EP may send on: its own dials (claimOrDial, handshakeDone),
// and the connections a peer dialed to it (hello, handshakeDone).
// An EP to a peer (connect) first looks for a connection the peer dialed
// that no EP of this iface sends on yet, and takes it; only when there is
// none does it dial, and the lookup and the record of the dial are one
// step (claimOrDial), so that a peer's hello sees either the dial or the
// taken connection.
//
// Both ifaces dialing at once is the common case (every process creates
// its EPs at start): the server side of the peer's hello then sees a dial
// of its own to the same peer. The lower iface id's dial wins: a server
// whose iface id is lower than the client's, and which has a dial to the
// client that no peer was pointed at yet, answers hsUseMine with that
// dial's conn id (and points no other client at it); the client forgets
// its dial and waits for the named connection to reach its own iface,
// which it then takes. A server with the higher id accepts the hello; its
// own dial will be answered hsUseMine by the client's iface, which applies
// the same rule. A connection that never comes (the winner's dial failed,
// or an EP of the client's iface took it first) is waited for at most half
// the time left, and the client then dials one-way (hsFlagOneWay), which
// no server answers hsUseMine: the pair then uses two connections, one
// each way, as it would without matching. An EP never changes
// connections: it gets one before it can send anything.
//
// Wiring (ep.go, accept.go): EPCreate runs connect, with a dial that
// opens the connection's EP (openConn) before the handshake is recorded
// done; an accepted hello goes through hello, and an accepted connection
// that may be shared gets its EP before handshakeDone, so that the EP an
// EP of this iface takes (claim) is there. Only one EP per peer iface
// shares a connection: claimOrDial dials one-way when this iface shares
// one with the peer already (a dial of its own that is not one-way, or an
// inbound connection taken). A connection that no EP of this iface took
// is released (release) when the peer's EP says goodbye on it; the record
// of every other one is forgotten when it ends. One writer per socket
// (the EP, with the iface's answers queued behind the frame started) and
// a goodbye per role (close.go) make the sharing safe: no reader stops
// reading because its answers cannot be written.

// matchState is the state of a matchConn.
type matchState uint8

const (
	matchHandshaking matchState = iota // the handshake runs
	matchOpen                          // authenticated; an inbound one is free to take
	matchClaimed                       // inbound: an EP of this iface took it
)

// matchConn is a connection between this iface and the peer iface peer,
// as connection matching knows it.
type matchConn struct {
	peer     uint64
	id       uint64 // the conn id its dialer chose
	dialed   bool   // this iface dialed it
	oneWay   bool   // dialed with hsFlagOneWay: never pointed at
	promised bool   // dialed: a peer's client was told to use it (hsUseMine)
	state    matchState
	ep       *EP // its EP, once authenticated (set before handshakeDone)
}

// connMatch is an iface's record of its connections by peer iface; its
// methods may be called concurrently.
type connMatch struct {
	self    uint64 // the iface's id
	mu      sync.Mutex
	peers   map[uint64][]*matchConn
	changed chan struct{} // closed and replaced at every change
}

func newConnMatch(self uint64) *connMatch {
	return &connMatch{self: self, peers: make(map[uint64][]*matchConn), changed: make(chan struct{})}
}

// notifyLocked wakes those who wait for a change; m.mu is held.
func (m *connMatch) notifyLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// removeLocked forgets c; m.mu is held.
func (m *connMatch) removeLocked(c *matchConn) {
	cs := m.peers[c.peer]
	for k, x := range cs {
		if x == c {
			cs = append(cs[:k], cs[k+1:]...)
			break
		}
	}
	if len(cs) == 0 {
		delete(m.peers, c.peer)
	} else {
		m.peers[c.peer] = cs
	}
	m.notifyLocked()
}

// claimOrDial takes for an EP an open connection that peer dialed to this
// iface (the one with conn id want, or any for 0), or records a dial of
// this iface to peer (one-way when oneWay) when there is none to take or
// wait for. It returns the connection taken or the dial (dialed set), or,
// while an inbound connection to take still authenticates (or, for want,
// has not come yet), nil and a channel closed at the next change. gone
// reports that the connection want was taken by another EP, or failed.
func (m *connMatch) claimOrDial(peer, want uint64, oneWay bool) (c *matchConn, wait <-chan struct{}, gone bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !oneWay && want == 0 {
		// An EP of this iface shares a connection with the peer, or
		// dials one to share, already: only one pair of EPs shares.
		for _, x := range m.peers[peer] {
			if x.dialed && !x.oneWay || !x.dialed && x.state == matchClaimed {
				oneWay = true
			}
		}
	}
	if !oneWay {
		var handshaking bool
		for _, x := range m.peers[peer] {
			switch {
			case x.dialed || want != 0 && x.id != want:
			case x.state == matchOpen:
				x.state = matchClaimed
				return x, nil, false
			case x.state == matchHandshaking:
				handshaking = true
			case want != 0: // claimed by another EP
				return nil, nil, true
			}
		}
		if handshaking || want != 0 {
			return nil, m.changed, false
		}
	}
	c = &matchConn{peer: peer, id: randomID(), dialed: true, oneWay: oneWay, promised: oneWay}
	m.peers[peer] = append(m.peers[peer], c)
	return c, nil, false
}

// handshakeDone records the end of the handshake of c, a dial of this
// iface or an inbound connection: authenticated (ok), a dial stays known,
// and a simultaneous dial of the peer may be pointed at it, and an
// inbound connection may be taken by an EP of this iface; otherwise c is
// forgotten.
func (m *connMatch) handshakeDone(c *matchConn, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !ok {
		m.removeLocked(c)
		return
	}
	c.state = matchOpen
	m.notifyLocked()
}

// hello decides the server's answer to the hello of a connection conn id
// id from the iface peer: hsUseMine with the conn id of a dial of this
// iface to peer that wins the tie-break (see the top of the file), or
// hsAccept with the record of the inbound connection (nil for a one-way
// one, which no EP of this iface takes).
func (m *connMatch) hello(peer, id uint64, oneWay bool) (verdict uint8, mine uint64, c *matchConn) {
	if oneWay {
		return hsAccept, 0, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.self < peer {
		for _, x := range m.peers[peer] {
			if x.dialed && !x.promised {
				x.promised = true
				return hsUseMine, x.id, nil
			}
		}
	}
	c = &matchConn{peer: peer, id: id}
	m.peers[peer] = append(m.peers[peer], c)
	m.notifyLocked()
	return hsAccept, 0, c
}

// release forgets c, an inbound connection, when no EP of this iface took
// it yet (its peer's EP said goodbye: none will): true then.
func (m *connMatch) release(c *matchConn) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c.dialed || c.state != matchOpen {
		return false
	}
	m.removeLocked(c)
	return true
}

// forget removes c, whose connection ended (or whose peer's EP said
// goodbye before an EP of this iface took it): no EP takes it any more.
func (m *connMatch) forget(c *matchConn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.removeLocked(c)
}

// connect returns the connection an EP of this iface to peer sends on,
// before deadline: one that peer dialed, taken, or else one that dial
// makes. dial runs the dial and handshake of c (one-way when oneWay) and
// returns nil when the peer accepted it, a *useMineError when the peer
// pointed at its own connection, or another error, which connect returns.
// See the top of the file.
func (m *connMatch) connect(peer uint64, deadline time.Time, dial func(c *matchConn, oneWay bool) error) (*matchConn, error) {
	var want uint64
	oneWay := false
	waitUntil := deadline
	for {
		c, wait, gone := m.claimOrDial(peer, want, oneWay)
		if wait != nil {
			if left := time.Until(waitUntil); left > 0 {
				t := time.NewTimer(left)
				select {
				case <-wait:
				case <-t.C:
				}
				t.Stop()
				continue
			}
			gone = true
		}
		if gone {
			// The connection the peer pointed at is not coming: a
			// one-way dial of this EP's own.
			oneWay = true
			continue
		}
		if !c.dialed {
			return c, nil
		}
		err := dial(c, c.oneWay)
		m.handshakeDone(c, err == nil)
		var u *useMineError
		if errors.As(err, &u) && !c.oneWay {
			want = u.connID
			waitUntil = time.Now().Add(time.Until(deadline) / 2)
			continue
		}
		if err != nil {
			return nil, err
		}
		return c, nil
	}
}
