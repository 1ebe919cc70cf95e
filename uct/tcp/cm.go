package tcp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goshmem/goshmem/internal/admit"
	"github.com/goshmem/goshmem/internal/jobkey"
	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// The tcp component's connection manager (uct.CM): listeners on TCP
// sockets, and the handshake of cm_wire.go on each connection. With a key
// configured (KEY, UCX_TCP_KEY, or else GOSHMEM_KEY: the key the tcp
// transport authenticates with) both sides prove with an HMAC over fresh
// nonces that they hold it, and a client that does not is refused; without
// one the CM authenticates no one, and its listeners bind only to loopback
// unless allowed. A client that does not complete its part of the
// handshake within the handshake timeout is dropped, and so is one that
// has not authenticated when many newer ones came (see maxCMHandshakes);
// nothing a client sends harms the listener or its other clients, and
// refusals are logged a few lines a minute, with a count of the rest.

// Defaults of the CM's timeouts, for parameters that leave them 0.
const (
	// DefaultCMHandshakeTimeout bounds each step of a handshake.
	DefaultCMHandshakeTimeout = 5 * time.Second
	// DefaultCMAcceptTimeout bounds a client's wait for the server
	// application's decision.
	DefaultCMAcceptTimeout = 30 * time.Second
)

// Limits of a listener's connections. Those not authenticated yet are
// bounded per source address and in all (internal/admit): a new one beyond
// a bound displaces the oldest (of its source, or of the source with the
// most), so that strangers' idle or slow connections never keep a client
// that has the key out; it authenticates within a few round trips. The
// authenticated ones (with the requests waiting for the application) are
// bounded apart: beyond maxCMConns a client is refused as busy, and
// strangers cannot bring that about.
const (
	maxCMHandshakes          = 256
	maxCMHandshakesPerSource = maxCMHandshakes / 2
	maxCMConns               = 4096
)

// cmDialTries bounds the connections a client makes to a listener that
// drops them (or answers busy) before it answers the request.
const cmDialTries = 5

// cmWarnBurst is the number of refusals a listener logs per minute; it
// counts the rest.
const cmWarnBurst = 10

var cmConfigTable = []ucs.ConfigField{
	{Name: "KEY", Default: "", Doc: "Job key authenticating client-server connections (listeners), standard base64 of 16, 24 or 32 bytes; empty: " + jobkey.Env + ", or else none: the connection manager authenticates no one and listens only on loopback unless allowed"},
}

// CMConfigTable is the configuration table of the CM: KEY, shared with the
// ifaces (UCX_TCP_KEY).
func (*Component) CMConfigTable() []ucs.ConfigField { return cmConfigTable }

// CMOpen opens the tcp connection manager (uct_cm_open). A KEY that
// jobkey.Decode refuses fails with ucs.ErrInvalidParam, naming the
// variable and never the value.
func (c *Component) CMOpen(params *uct.CMParams, config *ucs.Config) (uct.CM, error) {
	value, name := "", "KEY"
	if config != nil {
		value, name = strings.TrimSpace(config.Get("KEY")), config.Prefix()+"KEY"
	}
	k, _, err := jobkey.Lookup(value, name)
	if err != nil {
		return nil, fmt.Errorf("uct/tcp: cm open: %w", err)
	}
	m := &cm{comp: c, key: jobkey.Derive(k, jobkey.LabelCM), keyed: k != nil}
	if params != nil {
		m.log = params.Logger
	}
	m.log = ucs.LoggerOrDefault(m.log)
	return m, nil
}

// cm is the tcp connection manager.
type cm struct {
	comp  *Component
	key   jobkey.HandshakeKey // derived from the job key, or from nothing
	keyed bool                // a job key is configured
	log   ucs.Logger
}

func (m *cm) Component() uct.Component { return m.comp }

func (m *cm) Query() uct.CMAttr {
	return uct.CMAttr{MaxConnPriv: MaxConnPriv, Authenticated: m.keyed}
}

// Close does nothing: the CM holds nothing of its own.
func (m *cm) Close() {}

// cmListener is a listener of the CM.
type cmListener struct {
	cm        *cm
	ln        *net.TCPListener
	addr      netip.AddrPort
	hsTimeout time.Duration
	cb        uct.ConnRequestCallback
	arg       any
	gate      *admit.Gate[net.Conn] // the clients in the handshake
	refused   *ucs.LogLimiter       // refusals and displacements

	mu     sync.Mutex
	conns  map[*cmConnRequest]struct{} // every open client connection
	authed int                         // of them, the authenticated
	closed bool
	wg     sync.WaitGroup
}

// Connection request states.
const (
	reqHandshake int32 = iota // authenticating
	reqPending                // waiting for the application
	reqTaken                  // being accepted or rejected
	reqGone                   // the client left or the listener closed
)

// cmConnRequest is a client's connection to a listener, from its accept to
// its end; a uct.ConnRequest once it authenticated.
type cmConnRequest struct {
	l      *cmListener
	c      net.Conn
	client netip.AddrPort
	local  netip.AddrPort
	cnonce jobkey.Nonce
	snonce jobkey.Nonce
	state  atomic.Int32
	// accepted receives, from the accept or reject that took the
	// request, once it answered the client, the EP it made (nil for
	// none).
	accepted chan *cmEP
}

func (r *cmConnRequest) Listener() uct.Listener { return r.l }

// ListenerCreate listens on params.SockAddr (see uct.CM).
func (m *cm) ListenerCreate(params *uct.ListenerParams) (uct.Listener, error) {
	bad := func(why string, args ...any) (uct.Listener, error) {
		return nil, fmt.Errorf("uct/tcp: listener create: %s: %w", fmt.Sprintf(why, args...), ucs.ErrInvalidParam)
	}
	if params == nil || !params.SockAddr.IsValid() {
		return bad("no socket address")
	}
	if params.ConnRequest == nil {
		return bad("no connection request callback")
	}
	sa := params.SockAddr
	if !m.keyed && !sa.Addr().Unmap().IsLoopback() && !params.AllowUnauthenticated {
		return bad("no key is configured (UCX_TCP_KEY or %s), so %v, which is not loopback, must be allowed to be unauthenticated", jobkey.Env, sa)
	}
	hs := params.HandshakeTimeout
	switch {
	case hs < 0:
		return bad("handshake timeout %v", hs)
	case hs == 0:
		hs = DefaultCMHandshakeTimeout
	}
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(sa))
	if err != nil {
		st := ucs.ErrIOError
		if errors.Is(err, syscall.EADDRINUSE) {
			st = ucs.ErrBusy
		}
		return nil, fmt.Errorf("uct/tcp: listener create on %v: %w: %w", sa, err, st)
	}
	l := &cmListener{cm: m, ln: ln, hsTimeout: hs, cb: params.ConnRequest, arg: params.Arg,
		gate:  admit.New[net.Conn](admit.Limits{PerSource: maxCMHandshakesPerSource, Total: maxCMHandshakes}),
		conns: make(map[*cmConnRequest]struct{})}
	l.addr = ln.Addr().(*net.TCPAddr).AddrPort()
	prefix := fmt.Sprintf("uct/tcp: listener on %v: ", l.addr)
	logf := ucs.LogfAt(m.log, ucs.LogWarn)
	l.refused = ucs.NewLogLimiter("refused connections", cmWarnBurst, time.Minute,
		func(format string, args ...any) { logf(prefix+format, args...) })
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

func (l *cmListener) Query() uct.ListenerAttr { return uct.ListenerAttr{SockAddr: l.addr} }

// Destroy stops the listener (see uct.Listener).
func (l *cmListener) Destroy() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	for r := range l.conns {
		r.c.Close()
	}
	l.mu.Unlock()
	l.ln.Close()
	l.wg.Wait()
	l.refused.Flush()
}

// Reject refuses a request (see uct.Listener).
func (l *cmListener) Reject(req uct.ConnRequest) error {
	r, ok := req.(*cmConnRequest)
	if !ok || r == nil || r.l != l {
		return fmt.Errorf("uct/tcp: listener reject: not a request of this listener: %w", ucs.ErrInvalidParam)
	}
	if err := r.take(); err != nil {
		return fmt.Errorf("uct/tcp: listener reject: %w", err)
	}
	r.c.SetWriteDeadline(time.Now().Add(l.hsTimeout))
	_, err := r.c.Write((&cmMsg{typ: cmReject, reason: cmReasonRefused}).encode())
	r.c.Close()
	r.accepted <- nil
	if err != nil {
		return fmt.Errorf("uct/tcp: listener reject %v: %w: %w", r.client, err, ucs.ErrConnectionReset)
	}
	return nil
}

// take claims a pending request for an accept or a reject.
func (r *cmConnRequest) take() error {
	if r.state.CompareAndSwap(reqPending, reqTaken) {
		return nil
	}
	if r.state.Load() == reqGone {
		return fmt.Errorf("client %v left: %w", r.client, ucs.ErrConnectionReset)
	}
	return fmt.Errorf("request of %v already accepted or rejected: %w", r.client, ucs.ErrInvalidParam)
}

// acceptLoop accepts clients until the listener closes. A new client
// enters the gate before anything else is done for it, displacing (and
// closing) an older one that has not authenticated when the gate is full.
func (l *cmListener) acceptLoop() {
	defer l.wg.Done()
	var backoff time.Duration
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors or the like: wait rather than spin.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			l.refused.Logf("accept: %v", err)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		r := &cmConnRequest{l: l, c: c, accepted: make(chan *cmEP, 1)}
		r.client = c.RemoteAddr().(*net.TCPAddr).AddrPort()
		r.local = c.LocalAddr().(*net.TCPAddr).AddrPort()
		if !l.track(r) {
			continue
		}
		tk, old, ousted := l.gate.Admit(r.client.Addr(), c)
		if ousted {
			old.Close()
			l.refused.Logf("closed the connection from %v, which had not authenticated when newer ones came", old.RemoteAddr())
		}
		l.wg.Add(1)
		go l.serve(r, tk)
	}
}

// track adds a new connection, or closes it when the listener is closed.
func (l *cmListener) track(r *cmConnRequest) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		r.c.Close()
		return false
	}
	l.conns[r] = struct{}{}
	return true
}

// refuseBusy tells a client the listener is busy and closes its
// connection. The few bytes fit the new socket's buffer: the write does not
// wait for the client, and its deadline only bounds the unexpected.
func refuseBusy(c net.Conn) {
	c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	c.Write((&cmMsg{typ: cmReject, reason: cmReasonBusy}).encode())
	c.Close()
}

// serve runs the handshake with one client (tk, its place in the gate),
// hands its request to the callback, and then waits for the client's
// confirmation (after an accept) or its departure.
func (l *cmListener) serve(r *cmConnRequest, tk *admit.Ticket[net.Conn]) {
	defer l.wg.Done()
	authed := false
	defer func() {
		r.state.CompareAndSwap(reqPending, reqGone)
		r.state.CompareAndSwap(reqHandshake, reqGone)
		r.c.Close()
		l.mu.Lock()
		delete(l.conns, r)
		if authed {
			l.authed--
		}
		l.mu.Unlock()
	}()
	r.c.SetDeadline(time.Now().Add(l.hsTimeout))
	priv, err := l.handshake(r)
	if tk.Done() {
		return // a newer client displaced it, and closed its connection
	}
	if err != nil {
		if errors.Is(err, jobkey.ErrAuth) {
			r.c.Write((&cmMsg{typ: cmReject, reason: cmReasonAuth}).encode())
		}
		if !l.isClosed() {
			l.refused.Logf("refused the connection from %v: %v", r.client, err)
		}
		return
	}
	r.c.SetDeadline(time.Time{})
	if authed = l.admit(r); !authed {
		return
	}
	l.cb(l, l.arg, &uct.ConnRequestArgs{Request: r, DevName: netDevOf(r.local.Addr()), ClientAddress: r.client, PrivData: priv})
	// The next message is the client's confirmation of an accept; one
	// before the application took the request means that the client left
	// (or misbehaved, or the listener closed).
	m, err := readCMMsg(r.c, cmReady)
	if err == nil {
		err = cmVerify(l.cm.key, &m.mac, jobkey.ClientConfirm, &r.cnonce, &r.snonce, nil)
	}
	if r.state.CompareAndSwap(reqPending, reqGone) {
		return
	}
	ep := <-r.accepted
	if ep == nil {
		return
	}
	if err != nil {
		// The client did not confirm: it left, or could not wire its
		// side.
		st := ucs.ErrConnectionReset
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			st = ucs.ErrTimedOut
		case errors.Is(err, ucs.ErrRejected):
			st = ucs.ErrRejected
		}
		err = fmt.Errorf("uct/tcp: client %v did not confirm: %w: %w", r.client, err, st)
	}
	ep.finish(func() { ep.params.Notify(ep, ep.params.Arg, err) })
}

// handshake runs the listener's side of the handshake with r's client up
// to its verified request, and returns the client's private data.
func (l *cmListener) handshake(r *cmConnRequest) ([]byte, error) {
	hello, err := readCMMsg(r.c, cmHello)
	if err != nil {
		return nil, err
	}
	r.cnonce = hello.nonce
	return cmServerHandshake(r.c, l.cm.key, l.cm.keyed, &r.cnonce, &r.snonce)
}

// cmServerHandshake answers the hello whose nonce is cnonce on c with a
// challenge (its nonce stored in snonce) and returns the private data of
// the client's verified request.
func cmServerHandshake(c io.ReadWriter, key jobkey.HandshakeKey, keyed bool, cnonce, snonce *jobkey.Nonce) ([]byte, error) {
	ch := cmMsg{typ: cmChallenge, nonce: jobkey.NewNonce()}
	if keyed {
		ch.flags = cmFlagKeyed
	}
	*snonce = ch.nonce
	if _, err := c.Write(ch.encode()); err != nil {
		return nil, err
	}
	req, err := readCMMsg(c, cmRequest)
	if err != nil {
		return nil, err
	}
	if err := cmVerify(key, &req.mac, jobkey.ClientProof, cnonce, snonce, req.priv); err != nil {
		return nil, err
	}
	return req.priv, nil
}

// isClosed reports whether Destroy began.
func (l *cmListener) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// admit counts an authenticated request among the authenticated
// connections and makes it pending. It refuses the client as busy when
// there are maxCMConns of them already, and does nothing when the listener
// is closed.
func (l *cmListener) admit(r *cmConnRequest) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	if l.authed >= maxCMConns {
		refuseBusy(r.c)
		l.refused.Logf("refused the connection from %v: %d authenticated connections wait already", r.client, maxCMConns)
		return false
	}
	l.authed++
	r.state.Store(reqPending)
	return true
}

// cmEP is a CM EP: a client's, which connects in a goroutine of its own,
// or a server's, made from a request.
type cmEP struct {
	cm     *cm
	params uct.CMEPParams
	server bool

	mu        sync.Mutex
	c         net.Conn // the handshake's connection, while it is open
	destroyed bool
	ready     []byte // client: the confirmation, once accepted
	local     netip.AddrPort
	remote    netip.AddrPort

	cbMu  sync.Mutex // held while a callback runs
	ended bool       // under cbMu: the callback ran, or Destroy came
}

func (e *cmEP) Query() uct.CMEPAttr {
	e.mu.Lock()
	defer e.mu.Unlock()
	return uct.CMEPAttr{LocalAddress: e.local, RemoteAddress: e.remote}
}

// finish runs the EP's callback, once, unless the EP was destroyed.
func (e *cmEP) finish(cb func()) {
	e.cbMu.Lock()
	defer e.cbMu.Unlock()
	e.mu.Lock()
	destroyed := e.destroyed // Destroy sets it before it closes anything
	e.mu.Unlock()
	if !e.ended && !destroyed {
		e.ended = true
		cb()
	}
}

// Destroy ends the EP (see uct.CMEP).
func (e *cmEP) Destroy() {
	e.mu.Lock()
	if e.destroyed {
		e.mu.Unlock()
		return
	}
	e.destroyed = true
	c := e.c
	e.c = nil
	e.mu.Unlock()
	if c != nil {
		c.Close()
	}
	// A callback that runs now ends before Destroy returns, and none runs
	// after.
	e.cbMu.Lock()
	e.ended = true
	e.cbMu.Unlock()
}

// ConnNotify sends a client's confirmation and closes its connection: the
// EP holds nothing after it.
func (e *cmEP) ConnNotify() error {
	e.mu.Lock()
	c, ready := e.c, e.ready
	if e.server || ready == nil || c == nil {
		e.mu.Unlock()
		return fmt.Errorf("uct/tcp: cm conn notify: not a client EP that the server accepted: %w", ucs.ErrInvalidParam)
	}
	e.c, e.ready = nil, nil
	e.mu.Unlock()
	_, err := c.Write(ready)
	c.Close()
	if err != nil {
		return fmt.Errorf("uct/tcp: cm conn notify: %w", cmIOErr("confirming", err))
	}
	return nil
}

// EPCreate creates a client's or a server's EP (see uct.CM).
func (m *cm) EPCreate(p *uct.CMEPParams) (uct.CMEP, error) {
	if p == nil || p.SockAddr.IsValid() == (p.ConnRequest != nil) {
		return nil, fmt.Errorf("uct/tcp: cm ep create: exactly one of the socket address and the connection request must be set: %w", ucs.ErrInvalidParam)
	}
	if p.PackPriv == nil || p.HandshakeTimeout < 0 || p.AcceptTimeout < 0 {
		return nil, fmt.Errorf("uct/tcp: cm ep create: no private data callback, or a negative timeout: %w", ucs.ErrInvalidParam)
	}
	e := &cmEP{cm: m, params: *p, server: p.ConnRequest != nil}
	if e.params.HandshakeTimeout == 0 {
		e.params.HandshakeTimeout = DefaultCMHandshakeTimeout
	}
	if e.params.AcceptTimeout == 0 {
		e.params.AcceptTimeout = DefaultCMAcceptTimeout
	}
	if e.server {
		return m.accept(e)
	}
	if p.Connect == nil || p.SockAddr.Port() == 0 {
		return nil, fmt.Errorf("uct/tcp: cm ep create to %v: no connect callback, or no port: %w", p.SockAddr, ucs.ErrInvalidParam)
	}
	go e.connect()
	return e, nil
}

// packPriv calls the EP's PackPriv for dev and checks the length of what
// it returns.
func (e *cmEP) packPriv(dev string) ([]byte, error) {
	priv, err := e.params.PackPriv(e.params.Arg, &uct.CMPackArgs{DevName: dev})
	if err != nil {
		return nil, err
	}
	if len(priv) == 0 || len(priv) > MaxConnPriv {
		return nil, fmt.Errorf("private data of %d bytes, want 1 to %d: %w", len(priv), MaxConnPriv, ucs.ErrInvalidParam)
	}
	return priv, nil
}

// accept makes the server's EP e of its request: it takes the request,
// packs the private data and sends the acceptance. The listener's
// goroutine of the request reads the client's confirmation (see
// cmListener.serve), so that a slow client does not hold up the caller.
func (m *cm) accept(e *cmEP) (uct.CMEP, error) {
	r, ok := e.params.ConnRequest.(*cmConnRequest)
	if !ok || r == nil || r.l.cm != m {
		return nil, fmt.Errorf("uct/tcp: cm ep create: a connection request of another CM: %w", ucs.ErrInvalidParam)
	}
	if e.params.Notify == nil {
		return nil, fmt.Errorf("uct/tcp: cm ep create: no notify callback: %w", ucs.ErrInvalidParam)
	}
	if err := r.take(); err != nil {
		return nil, fmt.Errorf("uct/tcp: cm ep create: accept %v: %w", r.client, err)
	}
	var ep *cmEP
	defer func() { r.accepted <- ep }()
	deadline := time.Now().Add(r.l.hsTimeout)
	r.c.SetWriteDeadline(deadline)
	priv, err := e.packPriv(netDevOf(r.local.Addr()))
	if err != nil {
		r.c.Write((&cmMsg{typ: cmReject, reason: cmReasonRefused}).encode())
		return nil, fmt.Errorf("uct/tcp: cm ep create: accept %v: %w", r.client, err)
	}
	// The listener's goroutine reads the confirmation: bound its wait.
	r.c.SetReadDeadline(deadline)
	msg := cmMsg{typ: cmAccept, priv: priv, mac: cmMAC(m.key, jobkey.ServerProof, &r.cnonce, &r.snonce, priv)}
	if _, err = r.c.Write(msg.encode()); err != nil {
		return nil, fmt.Errorf("uct/tcp: cm ep create: accept %v: %w", r.client, cmIOErr("sending the acceptance", err))
	}
	e.c, e.local, e.remote = r.c, r.local, r.client
	ep = e
	return e, nil
}

// connect runs the client's side of the handshake with the listener, up
// to the server's acceptance, and reports the result to Connect.
//
// A listener drops a client it had no time for before its answer (newer
// clients displaced it, see maxCMHandshakes), or answers busy, and a
// client cannot tell a dropped connection from another failure: it tries
// again, cmDialTries times at most, while its handshake timeout lasts.
func (e *cmEP) connect() {
	deadline := time.Now().Add(e.params.HandshakeTimeout)
	backoff := 5 * time.Millisecond
	var dropped error // why the last try failed, when it may be tried again
	for try := 1; ; try++ {
		priv, err := e.try(deadline)
		if priv == nil && err == nil {
			return // destroyed meanwhile
		}
		if dropped != nil && errors.Is(err, ucs.ErrUnreachable) {
			// The listener is gone: what happened to the last try
			// says more than the refusal of this one.
			err = fmt.Errorf("%w (and then: %v)", dropped, err)
		}
		dropped = nil
		if errors.Is(err, ucs.ErrConnectionReset) || errors.Is(err, ucs.ErrBusy) {
			dropped = err
		}
		if dropped == nil || try == cmDialTries || time.Until(deadline) < backoff {
			if err != nil {
				e.mu.Lock()
				c := e.c
				e.c = nil
				e.mu.Unlock()
				if c != nil {
					c.Close() // tells the server
				}
				err = fmt.Errorf("uct/tcp: connecting to %v: %w", e.params.SockAddr, err)
			}
			e.finish(func() { e.params.Connect(e, e.params.Arg, &uct.CMConnectArgs{Status: err, PrivData: priv}) })
			return
		}
		time.Sleep(backoff)
		backoff *= 2
	}
}

// try makes one connection to the listener and runs the handshake on it
// up to the server's acceptance, the hello and the challenge before
// deadline; it returns the server's private data. It returns nothing when
// the EP was destroyed meanwhile; a failure is a status error:
// ucs.ErrUnreachable when no connection could be made,
// ucs.ErrConnectionReset when the listener closed it before its answer,
// ucs.ErrBusy when it answered busy.
func (e *cmEP) try(deadline time.Time) ([]byte, error) {
	d := net.Dialer{Deadline: deadline}
	if e.params.LocalSockAddr.IsValid() {
		d.LocalAddr = net.TCPAddrFromAddrPort(e.params.LocalSockAddr)
	}
	c, err := d.Dial("tcp", e.params.SockAddr.String())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", err, ucs.ErrUnreachable)
	}
	e.mu.Lock()
	if e.destroyed {
		e.mu.Unlock()
		c.Close()
		return nil, nil
	}
	e.c = c
	e.local, e.remote = c.LocalAddr().(*net.TCPAddr).AddrPort(), c.RemoteAddr().(*net.TCPAddr).AddrPort()
	e.mu.Unlock()
	priv, err := e.talk(c, deadline)
	if err != nil {
		e.mu.Lock()
		if e.c == c {
			e.c = nil
		}
		e.mu.Unlock()
		c.Close()
	}
	return priv, err
}

// talk runs the client's side of the handshake on c.
func (e *cmEP) talk(c net.Conn, deadline time.Time) ([]byte, error) {
	m := e.cm
	hello := cmMsg{typ: cmHello, nonce: jobkey.NewNonce()}
	c.SetDeadline(deadline)
	if _, err := c.Write(hello.encode()); err != nil {
		return nil, cmIOErr("sending the hello", err)
	}
	ch, err := readCMMsg(c, cmChallenge, cmReject)
	if err != nil {
		return nil, cmIOErr("waiting for the challenge", err)
	}
	if ch.typ == cmReject {
		return nil, cmRejectErr(ch.reason)
	}
	if srvKeyed := ch.flags&cmFlagKeyed != 0; srvKeyed != m.keyed {
		if m.keyed {
			return nil, fmt.Errorf("the listener does not authenticate, and this client has a key: %w", ucs.ErrRejected)
		}
		return nil, fmt.Errorf("the listener requires a key (UCX_TCP_KEY or %s), and this client has none: %w", jobkey.Env, ucs.ErrRejected)
	}
	priv, err := e.packPriv(netDevOf(c.LocalAddr().(*net.TCPAddr).AddrPort().Addr()))
	if err != nil {
		return nil, err
	}
	req := cmMsg{typ: cmRequest, priv: priv, mac: cmMAC(m.key, jobkey.ClientProof, &hello.nonce, &ch.nonce, priv)}
	if _, err := c.Write(req.encode()); err != nil {
		return nil, cmIOErr("sending the request", err)
	}
	// The server's application decides, in its own time.
	c.SetDeadline(time.Now().Add(e.params.AcceptTimeout))
	ans, err := readCMMsg(c, cmAccept, cmReject)
	if err != nil {
		return nil, cmIOErr("waiting for the server to accept", err)
	}
	if ans.typ == cmReject {
		return nil, cmRejectErr(ans.reason)
	}
	if err := cmVerify(m.key, &ans.mac, jobkey.ServerProof, &hello.nonce, &ch.nonce, ans.priv); err != nil {
		return nil, fmt.Errorf("the server's answer: %w", err)
	}
	c.SetDeadline(time.Now().Add(e.params.HandshakeTimeout))
	ready := cmMsg{typ: cmReady, mac: cmMAC(m.key, jobkey.ClientConfirm, &hello.nonce, &ch.nonce, nil)}
	e.mu.Lock()
	e.ready = ready.encode()
	e.mu.Unlock()
	return ans.priv, nil
}

// netDevOf returns the name of the network interface that has ip, or "".
func netDevOf(ip netip.Addr) string {
	ip = ip.Unmap().WithZone("")
	ifis, err := net.Interfaces()
	if err != nil {
		return ""
	}
	for _, ifi := range ifis {
		addrs, err := ifi.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if p, ok := netip.AddrFromSlice(n.IP); ok && p.Unmap() == ip {
					return ifi.Name
				}
			}
		}
	}
	return ""
}
