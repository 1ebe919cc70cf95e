package tcp

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"syscall"
	"time"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
	"github.com/goshmem/goshmem/uct/internal/base"
)

// Connect to EP (uct.EPConnector, IfaceFlagConnectToEP).
//
// An EP created with EPParams.Unconnected has a random 64-bit id, recorded
// in its iface, and no connection: its operations fail with
// ucs.ErrNotConnected (PendingAdd returns ucs.ErrBusy, so that the
// operation reports it), or ucs.ErrCanceled once its iface closed.
// EPAddress is the iface address followed by the id.
//
// ConnectToEP(deviceAddr, epAddr) does what EPCreate does for the iface in
// epAddr, with one difference: the handshake's hello (hsHelloEP) also
// names the peer's EP id, and is covered by both MACs. The peer iface
// refuses the connection, before its challenge, when no live EP created
// unconnected has that id, or when a connection naming it was accepted
// already (each EP id is bound at most once). Once the handshake succeeded
// the connection is exactly that of a connect-to-iface EP: it carries this
// EP's frames (active messages, puts, acknowledgement requests) to the
// peer iface, whose handlers and memory receive them as from any other
// connection, and the peer's acknowledgements back. The peer EP's own
// frames travel on the connection its own ConnectToEP opens: a bound pair
// is two connections, one each way. Binding does not tie the peer EP's
// lifetime to the connection: destroying it does not close the connection
// already accepted for it (destroying the connecting EP does).

// EPAddrLen is the length of a tcp EP address: an IfaceAddrLen-byte iface
// address followed by the EP id (uint64, little-endian, non-zero).
const EPAddrLen = IfaceAddrLen + 8

var _ uct.EPConnector = (*EP)(nil)

// decodeEPAddr decodes an EP address strictly; malformed input fails with
// ucs.ErrInvalidAddr.
func decodeEPAddr(b []byte) (ifaceAddr, uint64, error) {
	ia, id, err := base.SplitEPAddr("uct/tcp", b, IfaceAddrLen)
	if err != nil {
		return ifaceAddr{}, 0, err
	}
	a, err := decodeIfaceAddr(ia)
	if err != nil {
		return ifaceAddr{}, 0, err
	}
	return a, id, nil
}

// createUnconnected is EPCreate for params.Unconnected.
func (i *Iface) createUnconnected(params *uct.EPParams) (uct.EP, error) {
	if len(params.DeviceAddr) != 0 || len(params.IfaceAddr) != 0 {
		return nil, fmt.Errorf("uct/tcp: ep create: unconnected ep with an address: %w", ucs.ErrInvalidParam)
	}
	e := &EP{iface: i, id: randomID(), st: stateUnconnected}
	e.err.Store(int32(ucs.ErrNotConnected))
	e.pending.Room = e.hasRoom
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.closed {
		return nil, fmt.Errorf("uct/tcp: ep create: iface closed: %w", ucs.ErrCanceled)
	}
	for i.epIDs[e.id] != nil {
		e.id = randomID()
	}
	i.epIDs[e.id] = e
	i.eps[e] = struct{}{}
	return e, nil
}

// EPAddress returns the EPAddrLen-byte address of an EP created with
// EPParams.Unconnected: its iface's address and its id. An EP connected to
// an iface has none (ucs.ErrUnsupported).
func (e *EP) EPAddress() ([]byte, error) {
	if e.id == 0 {
		return nil, fmt.Errorf("uct/tcp: ep address of an ep connected to an iface: %w", ucs.ErrUnsupported)
	}
	return base.EncodeEPAddr(e.iface.addr, e.id), nil
}

// ConnectToEP connects the EP to the iface of the EP whose address is
// epAddr and binds it to that EP, within UCX_TCP_CONN_TIMEOUT (see the
// comment at the top of epconn.go for what binding means). Malformed
// addresses fail with ucs.ErrInvalidAddr; an unreachable iface, one that
// refuses the connection or the handshake (another job key, an unknown ep
// id or one bound already) with ucs.ErrUnreachable (and ucs.ErrRejected
// for a refused handshake); an EP connected already (or connecting, or
// connected to an iface) with ucs.ErrAlreadyExists; a destroyed EP or a
// closed iface with ucs.ErrCanceled.
func (e *EP) ConnectToEP(deviceAddr, epAddr []byte) error {
	i := e.iface
	a, peerID, err := decodeEPAddr(epAddr)
	if err != nil {
		return err
	}
	if err := i.reachable(deviceAddr, epAddr[:IfaceAddrLen]); err != nil {
		return fmt.Errorf("uct/tcp: connect to ep: %w", err)
	}
	e.mu.Lock()
	switch {
	case e.id == 0 || e.st.conn != connUnconnected:
		e.mu.Unlock()
		return fmt.Errorf("uct/tcp: connect to ep: connected already: %w", ucs.ErrAlreadyExists)
	case e.st.ops != opsNotConnected:
		e.mu.Unlock()
		return fmt.Errorf("uct/tcp: connect to ep: ep destroyed or iface closed: %w", ucs.ErrCanceled)
	}
	e.to(evConnect)
	e.mu.Unlock()
	c, err := i.dialEP(a, peerID)
	if err == nil {
		// The socket and the state change together: Destroy and the
		// iface's Close, which read the state, say goodbye on a
		// connection exactly when it is there.
		e.mu.Lock()
		e.peer = a.tcpAddr().String()
		if err = e.open(c, false); err != nil {
			err = fmt.Errorf("uct/tcp: connect to ep: %w: %w", ucs.ErrIOError, err)
		} else {
			// From here on the EP is an ordinary connected EP: fail
			// (Destroy, iface Close) closes the connection.
			e.to(evConnected)
			if e.st.ops == opsLive {
				e.err.Store(0)
			}
		}
		e.mu.Unlock()
	}
	if err != nil {
		e.mu.Lock()
		e.to(evConnectFailed)
		e.mu.Unlock()
		return err
	}
	i.mu.Lock()
	if i.closed || i.epIDs[e.id] != e {
		i.mu.Unlock()
		e.fail(ucs.ErrCanceled, nil)
		return fmt.Errorf("uct/tcp: connect to ep: ep destroyed or iface closed: %w", ucs.ErrCanceled)
	}
	i.conns[e] = struct{}{}
	i.pollAdd(e.in)
	i.mu.Unlock()
	return nil
}

// dialEP connects to the iface a and authenticates naming the ep peerID.
func (i *Iface) dialEP(a ifaceAddr, peerID uint64) (*net.TCPConn, error) {
	c, err := i.dial(a, handshake{ifaceID: a.id, epID: peerID, clientID: i.id, connID: randomID(), flags: hsFlagOneWay})
	if err != nil {
		return nil, fmt.Errorf("uct/tcp: connect to ep %#x: %w", peerID, err)
	}
	return c, nil
}

// dialTries is how many times dial tries a handshake that the server ended
// before answering, and dialBackoff the first pause between two tries
// (doubled each time, with jitter).
const (
	dialTries   = 4
	dialBackoff = 20 * time.Millisecond
)

// dial connects to the iface a and runs the client handshake hello on the
// connection, within UCX_TCP_CONN_TIMEOUT. A server that closes or resets
// the connection before it answers the hello may have refused it, or may
// have been too busy to authenticate it in time (a storm of connections:
// its handshake timeout, UCX_TCP_MAX_HANDSHAKES; a reset even before the
// connect returned): dial tries again, up to
// dialTries times while the time allows, before it gives up. Failures wrap
// ucs.ErrUnreachable.
func (i *Iface) dial(a ifaceAddr, hello handshake) (*net.TCPConn, error) {
	deadline := time.Now().Add(i.cfg.connTimeout)
	d := net.Dialer{Deadline: deadline, LocalAddr: &net.TCPAddr{IP: i.ip}}
	peer := a.tcpAddr().String()
	pause := dialBackoff
	for try := 1; ; try++ {
		what := "connect to"
		c, err := d.Dial("tcp", peer)
		if err == nil {
			what = "handshake with"
			if err = clientHandshake(c, i.cfg.key, hello, deadline); err == nil {
				return c.(*net.TCPConn), nil
			}
			c.Close()
		}
		pause += time.Duration(rand.Int64N(int64(pause)))
		again := errors.Is(err, errNoChallenge) || errors.Is(err, syscall.ECONNRESET)
		if !again || try == dialTries || time.Now().Add(pause).After(deadline) {
			return nil, fmt.Errorf("%s %s (try %d): %w: %w", what, peer, try, ucs.ErrUnreachable, err)
		}
		time.Sleep(pause)
		pause *= 2
	}
}

// reserveEP accepts the id of a live EP created unconnected that no
// connection was bound to yet, and binds it to the connection whose hello
// named it: at once, before the handshake answers, so that a second
// connection for the same EP is refused while the first one authenticates.
// releaseEP undoes it when that handshake fails.
func (i *Iface) reserveEP(id uint64) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	e := i.epIDs[id]
	switch {
	case e == nil:
		return fmt.Errorf("hello for unknown ep %#x: %w", id, ucs.ErrRejected)
	case e.bound:
		return fmt.Errorf("hello for ep %#x, bound already: %w", id, ucs.ErrRejected)
	}
	e.bound = true
	return nil
}

// releaseEP unbinds the EP id that reserveEP bound to a connection whose
// handshake then failed.
func (i *Iface) releaseEP(id uint64) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if e := i.epIDs[id]; e != nil {
		e.bound = false
	}
}
