package tcp

import "fmt"

// The life of an EP.
//
// An EP's state is four parts, each of which moves forward on its own
// events (close.go tells the goodbyes apart; epconn.go the connect to
// EP):
//
//	conn: unconnected ──connect──▶ connecting ──connected──▶ open ──shut──▶ shut
//	         ▲                         │                      │               │
//	         └─────connect-failed──────┘                      └─────close─────┴──▶ closed
//
//	ops:  not-connected ──connected──▶ live ──fail──▶ failed
//	      untaken ──claim──▶ live ──peer-closed──▶ peer-closed
//	      (not-connected and untaken fail too; untaken ends peer-closed too)
//
//	said: none ──ep-bye──▶ ep-bye ──all-bye──▶ all-bye   (none ──all-bye──▶ all-bye)
//
//	peer: sends ──peer-bye──▶ bye
//
// An EP created unconnected starts unconnected/not-connected; the EP of
// a connection that EPCreate dialed, or that this iface accepted and may
// share, starts open/untaken (with peer bye on a one-way connection).
//
// conn is the socket's life: none yet (an EP created unconnected, and
// one whose ConnectToEP dials), open, its sending side shut down once
// this side said all it will and wrote it (it reads on until the peer
// closes its side), closed (at the end, in order or not: nothing more is
// written). ops is the EP role's: the operations of the user, who holds
// an EP that EPCreate claimed or that ConnectToEP connected (live; an
// inbound connection that no EP of this iface took yet is untaken), until
// they fail (failed, with the status in EP.err) or the peer iface closed
// in order after processing every one of them (peer-closed: a flush of
// them succeeds). said is what this side's goodbyes said: nothing yet,
// frameEPClose (no more operations), or everything (its target role
// answers nothing more either: frameIfaceClose, or the last frameEPClose
// of a closing iface). peer is whether the peer may still send
// operations on the connection: it says frameEPClose once it will not; a
// connection dialed one-way carries none from the start.
//
// A product of four small parts rather than one list of states: the
// roles end independently (a peer's EP says goodbye while this side's
// EP goes on sending, and the other way round), and a flat list would
// spell out every combination. next is the one place that says which
// event may happen in which state; an EP moves only through EP.to, which
// panics on an event that cannot happen: the goodbyes' accounting is
// off, a bug.
type epState struct {
	conn connPhase
	ops  opsPhase
	said saidPhase
	peer peerPhase
}

// connPhase is the life of an EP's socket.
type connPhase uint8

const (
	connUnconnected connPhase = iota // no socket: created unconnected, ConnectToEP not called or failed
	connConnecting                   // ConnectToEP dials and authenticates
	connOpen                         // the socket reads and writes
	connShut                         // this side shut its sending side down; it reads until the peer closes
	connClosed                       // the connection ended or broke: nothing more is written
)

// opsPhase is the life of an EP's role: the user's operations. The
// order matters: fails and ended are one comparison each.
type opsPhase uint8

const (
	opsUntaken      opsPhase = iota // an inbound connection no EP of this iface took yet (connmatch.go)
	opsLive                         // the user holds the EP: operations go
	opsNotConnected                 // created unconnected: operations fail with ucs.ErrNotConnected
	opsFailed                       // operations fail with EP.err (also after Destroy and iface Close)
	opsPeerClosed                   // the peer iface closed in order after processing every operation
)

// saidPhase is what this side's goodbyes said on the connection.
type saidPhase uint8

const (
	saidNothing saidPhase = iota
	saidEPBye             // frameEPClose is queued: no more operations from this side
	saidAll               // the target role ended too: this side will send nothing more but what is queued
)

// peerPhase is whether the peer may send operations on the connection.
type peerPhase uint8

const (
	peerSends peerPhase = iota // the peer's EP may send operations, which the target role answers
	peerBye                    // the peer said frameEPClose, or the connection carries none of its operations
)

// epEvent is what moves an EP from one state to the next.
type epEvent uint8

const (
	evConnect       epEvent = iota // ConnectToEP starts to dial
	evConnectFailed                // its dial or handshake failed
	evConnected                    // its connection is up: a one-way connection, operations go
	evClaim                        // EPCreate took the connection
	evFail                         // operations end (endTxLocked): a failure, Destroy, iface Close, an untaken connection released
	evPeerClosed                   // the peer iface closed in order after processing every operation
	evEPBye                        // this side queued frameEPClose
	evAllBye                       // this side's target role ended too (its iface closes)
	evPeerBye                      // the peer said frameEPClose
	evShut                         // the sending side was shut down
	evClose                        // the connection ended or broke (killLocked)
	numEPEvents
)

var (
	connNames  = [...]string{"unconnected", "connecting", "open", "shut", "closed"}
	opsNames   = [...]string{"untaken", "live", "not-connected", "failed", "peer-closed"}
	saidNames  = [...]string{"none", "ep-bye", "all-bye"}
	peerNames  = [...]string{"sends", "bye"}
	eventNames = [...]string{"connect", "connect-failed", "connected", "claim", "fail", "peer-closed", "ep-bye", "all-bye", "peer-bye", "shut", "close"}
)

func name[T ~uint8](names []string, v T) string {
	if int(v) < len(names) {
		return names[v]
	}
	return fmt.Sprintf("%d?", v)
}

func (p connPhase) String() string { return name(connNames[:], p) }
func (p opsPhase) String() string  { return name(opsNames[:], p) }
func (p saidPhase) String() string { return name(saidNames[:], p) }
func (p peerPhase) String() string { return name(peerNames[:], p) }
func (ev epEvent) String() string  { return name(eventNames[:], ev) }

// String returns the state for diagnostics, as conn/ops/said/peer.
func (s epState) String() string {
	return fmt.Sprintf("conn=%v ops=%v said=%v peer=%v", s.conn, s.ops, s.said, s.peer)
}

// The initial states.
var (
	// stateUnconnected is an EP created unconnected.
	stateUnconnected = epState{conn: connUnconnected, ops: opsNotConnected}
	// stateUntaken is the EP of a connection EPCreate dialed, or of an
	// inbound one that may be shared, before EPCreate takes it (a
	// one-way connection carries no operations of the peer's).
	stateUntaken = epState{conn: connOpen, ops: opsUntaken}
)

// invalidTransition is the error of an event that cannot happen in a
// state.
type invalidTransition struct {
	from epState
	ev   epEvent
}

func (e *invalidTransition) Error() string {
	return fmt.Sprintf("uct/tcp: ep event %v in state %v", e.ev, e.from)
}

// ended reports whether the EP's operations ended.
func (s epState) ended() bool { return s.ops >= opsFailed }

// fails reports whether operations fail now (with EP.err).
func (s epState) fails() bool { return s.ops > opsLive }

// hasSocket reports whether the EP has its socket (open, or ended).
func (s epState) hasSocket() bool { return s.conn >= connOpen }

// socketOpen reports whether the socket is open: it reads, and writes
// unless shut.
func (s epState) socketOpen() bool { return s.conn == connOpen || s.conn == connShut }

// rxDone reports whether the target role answers nothing more: the peer
// will send no operation, or this side said its last goodbye.
func (s epState) rxDone() bool { return s.peer == peerBye || s.said == saidAll }

// saidAll reports whether this side said every goodbye due: its
// operations' (or it had none), and its target role's (or it has none).
func (s epState) saidAll() bool { return s.said != saidNothing && s.rxDone() }

// next returns the state that ev moves s to, or an *invalidTransition
// when ev cannot happen in s. Every event changes the state: the callers
// of an event that may come again (a second failure, a second goodbye)
// check first.
func (s epState) next(ev epEvent) (epState, error) {
	n, ok := s, false
	switch ev {
	case evConnect:
		ok = s.conn == connUnconnected && s.ops == opsNotConnected
		n.conn = connConnecting
	case evConnectFailed:
		ok = s.conn == connConnecting
		n.conn = connUnconnected
	case evConnected:
		// Destroy or the iface's Close may have failed it meanwhile
		// (ops failed): the caller then ends the connection.
		ok = s.conn == connConnecting
		n.conn, n.peer = connOpen, peerBye
		if s.ops == opsNotConnected {
			n.ops = opsLive
		}
	case evClaim:
		ok = s.conn == connOpen && s.ops == opsUntaken
		n.ops = opsLive
	case evFail:
		ok = !s.ended()
		n.ops = opsFailed
	case evPeerClosed:
		ok = !s.fails() // live or untaken, on its socket
		n.ops = opsPeerClosed
	case evEPBye:
		ok = s.conn == connOpen && s.ended() && s.said == saidNothing
		n.said = saidEPBye
	case evAllBye:
		// Shut already (its goodbye said, the peer's too): the iface's
		// close still ends the target role.
		ok = s.socketOpen() && s.ended() && s.said != saidAll
		n.said = saidAll
	case evPeerBye:
		// A frame read before the stream saw its socket closed may
		// still be applied.
		ok = s.hasSocket() && s.peer == peerSends
		n.peer = peerBye
	case evShut:
		ok = s.conn == connOpen && s.saidAll()
		n.conn = connShut
	case evClose:
		ok = s.socketOpen() && s.ended()
		n.conn = connClosed
	}
	if !ok {
		return s, &invalidTransition{s, ev}
	}
	return n, nil
}

// to moves the EP on ev; e.mu is held. An event that cannot happen in
// the EP's state is a bug: it panics.
func (e *EP) to(ev epEvent) {
	n, err := e.st.next(ev)
	if err != nil {
		panic(fmt.Errorf("%w (ep to %s)", err, e.peer))
	}
	e.st = n
}
