package tcp

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/goshmem/goshmem/internal/admit"
	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct/internal/base"
)

// Accepting connections.
//
// Anyone who reaches the listener can connect, with the job key or
// without. What a stranger costs is bounded: an accepted connection has
// UCX_TCP_HANDSHAKE_TIMEOUT to authenticate, at most
// UCX_TCP_MAX_HANDSHAKES_PER_SOURCE of one source address and
// UCX_TCP_MAX_HANDSHAKES in all authenticate at once (internal/admit: a
// new one closes the oldest of its source, or of the source with the
// most, so that idle strangers cannot hold the listener: a client that
// means it answers within a few round trips, and one dropped before the
// challenge tries again), and the refusals are logged through a limiter,
// a few lines a minute and a count of the rest, whatever the rate of
// attempts. Nothing a client can exhaust is allocated for it before it
// authenticated but its connection and the goroutine that reads it.

// accept accepts connections until the listener is closed.
func (i *Iface) accept() {
	defer i.wg.Done()
	base.BindThread(i.log, "uct/tcp", "accept", i.cpus)
	var backoff time.Duration
	for {
		c, err := i.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors, or the like: wait for some to be
			// given back rather than give up listening.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			i.warn.refused.Logf("accept: %v", err)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		i.mu.Lock()
		if i.closed {
			i.mu.Unlock()
			c.Close()
			return
		}
		tk, old, ousted := i.handshakes.Admit(c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr(), c)
		i.hsConns[c] = struct{}{}
		i.wg.Add(1)
		i.mu.Unlock()
		if ousted {
			old.Close()
			i.warn.refused.Logf("closed the connection from %v, which had not authenticated when newer ones came (UCX_TCP_MAX_HANDSHAKES_PER_SOURCE %d, UCX_TCP_MAX_HANDSHAKES %d)",
				old.RemoteAddr(), i.cfg.maxHSSource, i.cfg.maxHS)
		}
		go i.serve(c, tk)
	}
}

// serve authenticates an accepted connection (tk, in i.handshakes), takes
// it out of Go's poller and enters its stream in the poll set, where
// Progress and the poller read it (rx.go). A hello that may share the
// connection goes through connection matching (connmatch.go): the
// connection gets an EP, which an EP of this iface to the client's iface
// may take (EPCreate), or the client is told to use a connection this
// iface dialed to it. A one-way hello (a connection to an EP, or a second
// EP of the client's iface) gets a one-way stream. A connection
// authenticated after Close began hears the goodbye at once.
func (i *Iface) serve(c net.Conn, tk *admit.Ticket[net.Conn]) {
	defer i.wg.Done()
	base.BindThread(i.log, "uct/tcp", "handshake", i.cpus)
	from := c.RemoteAddr()
	var reserved uint64
	var mc *matchConn
	hello, err := serverHandshake(c, i.cfg.key, i.id, time.Now().Add(i.cfg.hsTimeout), func(h *handshake) (uint8, uint64, error) {
		if h.typ == hsHelloEP {
			if err := i.reserveEP(h.epID); err != nil {
				return 0, 0, err
			}
			reserved = h.epID
			return hsAccept, 0, nil
		}
		verdict, mine, m := i.match.hello(h.clientID, h.connID, h.flags&hsFlagOneWay != 0)
		mc = m
		return verdict, mine, nil
	})
	ousted := tk.Done()
	if err == nil && ousted {
		// A newer connection displaced it, and closed it, in the
		// moment between its proof and this check: lost, as any
		// connection that fails.
		err = fmt.Errorf("displaced as it authenticated: %w", net.ErrClosed)
	}
	if err != nil && reserved != 0 {
		i.releaseEP(reserved)
	}
	if err != nil && mc != nil {
		i.match.handshakeDone(mc, false)
	}
	i.mu.Lock()
	delete(i.hsConns, c)
	closed := i.closed
	i.mu.Unlock()
	if err != nil {
		c.Close()
		var u *useMineError
		if !closed && !ousted && !errors.As(err, &u) {
			i.warn.refused.Logf("refused a connection from %v: %v", from, err)
		}
		return
	}
	tc := c.(*net.TCPConn)
	if mc != nil {
		e, err := i.openConn(tc, from.String(), true, mc, true)
		if err != nil {
			i.match.handshakeDone(mc, false)
			if !errors.Is(err, ucs.ErrCanceled) {
				i.warn.closed.Logf("closed the connection from %v: %v", from, err)
			}
			return
		}
		mc.ep = e
		i.match.handshakeDone(mc, true)
		return
	}
	i.cfg.setLiveness(tc)
	sk, err := detach(tc)
	if err != nil {
		i.warn.closed.Logf("closed the connection from %v: %v", from, err)
		return
	}
	s := &rxConn{iface: i, from: from, peerID: hello.clientID}
	s.in = newInStream(i, sk, s, clientToServer, i.cfg.rxSegSize, 64<<10, i.cfg.beatEvery())
	i.mu.Lock()
	i.rxConns[s] = struct{}{}
	i.pollAdd(s.in)
	closed = i.closed
	i.mu.Unlock()
	if closed {
		// Close did not see the stream: it says goodbye before reading
		// anything, so that the client learns what was lost. The
		// poller, which Close keeps until the handshakes returned, ends
		// it.
		s.closeInOrder(time.Now().Add(closeLinger))
	}
}
