package tcp

import (
	"container/list"
	"errors"
	"net"
	"time"
)

// Accepting connections.
//
// Anyone who reaches the listener can connect, with the job key or
// without. What a stranger costs is bounded: an accepted connection has
// UCX_TCP_HANDSHAKE_TIMEOUT to authenticate, at most UCX_TCP_MAX_HANDSHAKES
// authenticate at once (a new one closes the oldest, so that idle
// strangers cannot hold the listener: a client that means it answers
// within a few round trips), and the refusals are logged through a
// limiter, a few lines a minute and a count of the rest, whatever the rate
// of attempts.

// handshaking is an accepted connection that authenticates.
type handshaking struct {
	conn    net.Conn
	evicted bool // closed for a newer one; guarded by Iface.mu
}

// accept accepts connections until the listener is closed.
func (i *Iface) accept() {
	defer i.wg.Done()
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
		var old *handshaking
		if i.handshakes.Len() >= i.cfg.maxHS {
			old = i.handshakes.Remove(i.handshakes.Front()).(*handshaking)
			old.evicted = true
		}
		el := i.handshakes.PushBack(&handshaking{conn: c})
		i.conns[c] = nil
		i.wg.Add(1)
		i.mu.Unlock()
		if old != nil {
			old.conn.Close()
			i.warn.refused.Logf("closed the connection from %v, which had not authenticated when %d newer ones came (UCX_TCP_MAX_HANDSHAKES)", old.conn.RemoteAddr(), i.cfg.maxHS)
		}
		go i.serve(c, el)
	}
}

// serve authenticates an accepted connection (el, in i.handshakes) and
// then applies its frames until it ends.
func (i *Iface) serve(c net.Conn, el *list.Element) {
	defer i.wg.Done()
	defer func() {
		c.Close()
		i.mu.Lock()
		delete(i.conns, c)
		i.mu.Unlock()
	}()
	from := c.RemoteAddr()
	epID, err := serverHandshakeEP(c, i.cfg.key, i.id, time.Now().Add(i.cfg.hsTimeout), i.checkEP)
	if err == nil && epID != 0 {
		err = i.bindEP(epID)
	}
	i.mu.Lock()
	hs := el.Value.(*handshaking)
	if !hs.evicted {
		i.handshakes.Remove(el)
	}
	closed := i.closed
	i.mu.Unlock()
	if err != nil {
		if !closed && !hs.evicted {
			i.warn.refused.Logf("refused a connection from %v: %v", from, err)
		}
		return
	}
	tc := c.(*net.TCPConn)
	i.cfg.setLiveness(tc)
	s := &rxConn{iface: i, conn: c}
	in, err := newInStream(i, tc, s, clientToServer, i.cfg.rxSegSize, 64<<10, i.cfg.beatEvery())
	if err != nil {
		i.warn.closed.Logf("closed the connection from %v: %v", from, err)
		return
	}
	s.in = in
	i.mu.Lock()
	closed = i.closed
	if !closed {
		i.conns[c] = s
	}
	i.mu.Unlock()
	if closed {
		// Close did not see the stream: say goodbye before reading
		// anything, so that the client learns what was lost.
		s.goodbye()
		return
	}
	err = in.run()
	switch {
	case errors.Is(err, errEPClosed):
		// The client closed its EP in order: nothing follows.
	case i.isClosed():
		s.goodbye()
	case err == nil:
		i.warn.closed.Logf("the connection from %v ended without a goodbye (the peer exited or was killed)", from)
	default:
		i.warn.closed.Logf("closed the connection from %v: %v", from, err)
	}
}
