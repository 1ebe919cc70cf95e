package ucp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goshmem/goshmem/internal/admit"
	"github.com/goshmem/goshmem/internal/jobkey"
	"github.com/goshmem/goshmem/ucs"
)

// Fields of ListenerParams (ucp_listener_params_field), and goshmem's own.
const (
	ListenerParamFieldSockAddr      uint64 = 1 << 0
	ListenerParamFieldAcceptHandler uint64 = 1 << 1
	ListenerParamFieldConnHandler   uint64 = 1 << 2
	// ListenerParamFieldFlags (goshmem): ListenerParams.Flags is set.
	ListenerParamFieldFlags uint64 = 1 << 16
	// ListenerParamFieldHandshakeTimeout (goshmem):
	// ListenerParams.HandshakeTimeout is set.
	ListenerParamFieldHandshakeTimeout uint64 = 1 << 17
)

// ListenerFlagAllowUnauthenticated, for ListenerParams.SetFlags, lets a
// listener without a key (neither UCX_TCP_KEY nor GOSHMEM_KEY is set) bind
// to an address other than loopback. ANY HOST THAT REACHES THE ADDRESS CAN
// THEN CONNECT, and with its endpoint read and write the memory the server
// exposes through remote keys it hands out. Without the flag such a
// listener binds only to loopback addresses; with a key it is not needed.
const ListenerFlagAllowUnauthenticated ListenerFlags = 1 << 0

// ListenerFlags are the flags of a listener (ListenerParams.Flags).
type ListenerFlags uint32

// ConnHandler receives a connection request that passed the listener's
// handshake (ucp_listener_conn_handler_t). It runs from Worker.Progress of
// the listener's worker. The application accepts the request by creating
// an endpoint from it (EPParams.SetConnRequest), now or later, or refuses
// it with Listener.Reject; arg is the one given with the handler.
type ConnHandler func(req *ConnRequest, arg any)

// AcceptHandler receives an endpoint the listener accepted and created
// with default parameters (ucp_listener_accept_handler_t), from
// Worker.Progress of the listener's worker; arg is the one given with the
// handler.
type AcceptHandler func(ep *Endpoint, arg any)

// ListenerParams are the parameters of Worker.NewListener
// (ucp_listener_params_t). Build them with the setters, which record the
// field mask.
type ListenerParams struct {
	FieldMask        uint64
	SockAddr         netip.AddrPort
	AcceptHandler    AcceptHandler
	ConnHandler      ConnHandler
	HandlerArg       any
	Flags            ListenerFlags
	HandshakeTimeout time.Duration
}

// SetSockAddr sets the address to listen on (mandatory): an IPv4 or IPv6
// address (the unspecified address for every one) and a port, 0 for one
// the system picks (Listener.Query tells which).
func (p *ListenerParams) SetSockAddr(a netip.AddrPort) *ListenerParams {
	p.SockAddr, p.FieldMask = a, p.FieldMask|ListenerParamFieldSockAddr
	return p
}

// SetAcceptHandler makes the listener accept every authenticated client
// itself and hand the endpoint to h, with arg. Exactly one of the accept
// and connection handlers must be set.
func (p *ListenerParams) SetAcceptHandler(h AcceptHandler, arg any) *ListenerParams {
	p.AcceptHandler, p.HandlerArg, p.FieldMask = h, arg, p.FieldMask|ListenerParamFieldAcceptHandler
	return p
}

// SetConnHandler makes the listener hand every authenticated client's
// request to h, with arg, to accept or reject.
func (p *ListenerParams) SetConnHandler(h ConnHandler, arg any) *ListenerParams {
	p.ConnHandler, p.HandlerArg, p.FieldMask = h, arg, p.FieldMask|ListenerParamFieldConnHandler
	return p
}

// SetFlags sets ListenerFlag* flags (default 0); unknown flags make
// NewListener fail with ucs.ErrInvalidParam.
func (p *ListenerParams) SetFlags(f ListenerFlags) *ListenerParams {
	p.Flags, p.FieldMask = f, p.FieldMask|ListenerParamFieldFlags
	return p
}

// SetHandshakeTimeout sets the time a client has, from its connection to
// its authenticated request, and again from the acceptance to its
// confirmation, before the listener drops it (default
// UCX_CS_HANDSHAKE_TIMEOUT of the context, 5s).
func (p *ListenerParams) SetHandshakeTimeout(d time.Duration) *ListenerParams {
	p.HandshakeTimeout, p.FieldMask = d, p.FieldMask|ListenerParamFieldHandshakeTimeout
	return p
}

// Limits of a listener's connections. Those not authenticated yet are
// bounded per source address and in all (internal/admit): a new one beyond
// a bound displaces the oldest (of its source, or of the source with the
// most), so that strangers' idle or slow connections never keep a client
// that has the key out; it authenticates within a few round trips. The
// authenticated ones (with the requests waiting for the application) are
// bounded apart: beyond maxListenerConns a client is refused as busy, and
// strangers cannot bring that about.
const (
	maxHandshakes          = 256
	maxHandshakesPerSource = maxHandshakes / 2
	maxListenerConns       = 4096
)

// Listener accepts client-server connections on a socket address for a
// worker (ucp_listener_h).
//
// Every client runs a handshake with it over TCP: when a key is configured
// (UCX_TCP_KEY, or the launcher's GOSHMEM_KEY: the key the tcp transport
// authenticates with) both sides prove with an HMAC over fresh nonces that
// they hold it, and a client that does not is refused. The two exchange
// their workers' addresses, and the endpoints that both make are wired as
// any endpoint made from a worker address: on one host over shared memory
// when the context has it, otherwise over tcp (which needs the same key on
// both sides). A client that does not complete its part of the handshake
// within the handshake timeout is dropped, and so is one that has not
// authenticated when many newer ones came (see maxHandshakes); nothing a
// client sends harms the listener or its other clients, and refusals are
// logged a few lines a minute, with a count of the rest.
type Listener struct {
	w         *Worker
	ln        *net.TCPListener
	addr      netip.AddrPort
	key       jobkey.HandshakeKey
	keyed     bool
	hsTimeout time.Duration
	params    ListenerParams
	progID    int
	gate      *admit.Gate[net.Conn] // the clients in the handshake
	refused   *ucs.LogLimiter       // refusals and displacements

	mu     sync.Mutex
	conns  map[*ConnRequest]struct{} // every open client connection
	authed int                       // of them, the authenticated
	queue  []*ConnRequest            // authenticated, for the handler
	closed bool
	queued atomic.Bool // queue is not empty
	wg     sync.WaitGroup
}

// Connection request states.
const (
	reqHandshake int32 = iota // authenticating
	reqPending                // waiting for the application
	reqTaken                  // being accepted or rejected
	reqGone                   // the client left or the listener closed
)

// ConnRequest is an authenticated client's request to connect
// (ucp_conn_request_h), which the application accepts by creating an
// endpoint from it or refuses with Listener.Reject, once.
type ConnRequest struct {
	l      *Listener
	c      net.Conn
	client netip.AddrPort
	local  netip.AddrPort
	hello  csMsg
	snonce jobkey.Nonce
	ra     *workerAddress
	state  atomic.Int32
	// accepted receives, from the accept or reject that took the
	// request, once it answered the client, the endpoint it made (nil
	// for none).
	accepted chan *Endpoint
}

// ConnRequestAttr describes a connection request (ucp_conn_request_attr_t).
type ConnRequestAttr struct {
	// ClientAddress is the client's socket address.
	ClientAddress netip.AddrPort
	// ClientID is the id the client's worker sent
	// (EPParamsFlagSendClientID), 0 if it sent none.
	ClientID uint64
}

// Query describes the request (ucp_conn_request_query).
func (r *ConnRequest) Query() ConnRequestAttr {
	return ConnRequestAttr{ClientAddress: r.client, ClientID: r.hello.clientID}
}

// ListenerAttr describes a listener (ucp_listener_attr_t).
type ListenerAttr struct {
	// SockAddr is the address it listens on, with the port the system
	// picked when it was asked for port 0.
	SockAddr netip.AddrPort
}

// csTimeouts parses the client-server timeouts of a context
// configuration: UCX_CS_HANDSHAKE_TIMEOUT and UCX_CS_ACCEPT_TIMEOUT,
// positive durations.
func csTimeouts(cfg *ucs.Config) (hs, accept time.Duration, err error) {
	get := func(name string) (time.Duration, error) {
		s := cfg.Get(name)
		d, err := ucs.ParseDuration(s)
		if err != nil || d <= 0 {
			return 0, fmt.Errorf("%s%s=%q is not a positive duration: %w", cfg.Prefix(), name, s, ucs.ErrInvalidParam)
		}
		return d, nil
	}
	if hs, err = get("CS_HANDSHAKE_TIMEOUT"); err != nil {
		return 0, 0, err
	}
	accept, err = get("CS_ACCEPT_TIMEOUT")
	return hs, accept, err
}

// NewListener listens on params' socket address (ucp_listener_create).
// Clients that pass the handshake reach the connection or accept handler
// from Worker.Progress. It fails with ucs.ErrInvalidParam when the address
// is missing or invalid, when not exactly one handler is set, for unknown
// flags, or when no key is configured and the address is not loopback
// without ListenerFlagAllowUnauthenticated; with ucs.ErrBusy when the
// address is in use, and ucs.ErrIOError for another socket error.
func (w *Worker) NewListener(params *ListenerParams) (*Listener, error) {
	if w.closed.Load() {
		return nil, fmt.Errorf("ucp listener create: %w", ErrClosed)
	}
	bad := func(why string, args ...any) (*Listener, error) {
		return nil, fmt.Errorf("ucp listener create: %s: %w", fmt.Sprintf(why, args...), ucs.ErrInvalidParam)
	}
	if params == nil || params.FieldMask&ListenerParamFieldSockAddr == 0 || !params.SockAddr.IsValid() {
		return bad("no socket address")
	}
	accept := params.FieldMask&ListenerParamFieldAcceptHandler != 0 && params.AcceptHandler != nil
	conn := params.FieldMask&ListenerParamFieldConnHandler != 0 && params.ConnHandler != nil
	if accept == conn {
		return bad("exactly one of the accept and connection handlers must be set")
	}
	var flags ListenerFlags
	if params.FieldMask&ListenerParamFieldFlags != 0 {
		if flags = params.Flags; flags&^ListenerFlagAllowUnauthenticated != 0 {
			return bad("flags %#x", flags)
		}
	}
	key, keyed, err := w.ctx.listenerKey()
	if err != nil {
		return nil, fmt.Errorf("ucp listener create: %w", err)
	}
	sa := params.SockAddr
	if !keyed && !sa.Addr().IsLoopback() && flags&ListenerFlagAllowUnauthenticated == 0 {
		return bad("no key is configured (UCX_TCP_KEY or GOSHMEM_KEY), so %v, which is not loopback, needs ListenerFlagAllowUnauthenticated", sa)
	}
	hs := w.ctx.csHandshake
	if params.FieldMask&ListenerParamFieldHandshakeTimeout != 0 {
		if hs = params.HandshakeTimeout; hs <= 0 {
			return bad("handshake timeout %v", hs)
		}
	}
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(sa))
	if err != nil {
		st := ucs.ErrIOError
		if errors.Is(err, syscall.EADDRINUSE) {
			st = ucs.ErrBusy
		}
		return nil, fmt.Errorf("ucp listener create on %v: %w: %w", sa, err, st)
	}
	l := &Listener{w: w, ln: ln, key: key, keyed: keyed, hsTimeout: hs, params: *params,
		gate:  admit.New[net.Conn](admit.Limits{PerSource: maxHandshakesPerSource, Total: maxHandshakes}),
		conns: make(map[*ConnRequest]struct{})}
	l.addr = ln.Addr().(*net.TCPAddr).AddrPort()
	prefix := fmt.Sprintf("ucp: worker %s: listener on %v: ", w.name, l.addr)
	l.refused = ucs.NewLogLimiter("refused connections", listenerWarnBurst, time.Minute,
		func(format string, args ...any) { w.warnf(prefix+format, args...) })
	if !w.listeners.add(l) {
		ln.Close()
		return nil, fmt.Errorf("ucp listener create: %w", ErrClosed)
	}
	l.progID = w.uw.ProgressRegister(l.progress)
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

// Query describes the listener (ucp_listener_query).
func (l *Listener) Query() ListenerAttr { return ListenerAttr{SockAddr: l.addr} }

// Destroy stops the listener (ucp_listener_destroy): it closes its socket
// and every client connection still in the handshake or waiting for the
// application (those clients fail), and returns when its goroutines have
// ended. Endpoints it accepted are not affected. A second call does
// nothing.
func (l *Listener) Destroy() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	for r := range l.conns {
		r.c.Close()
	}
	l.queue = nil
	l.mu.Unlock()
	l.ln.Close()
	l.w.uw.ProgressUnregister(l.progID)
	l.wg.Wait()
	l.refused.Flush()
	l.w.listeners.remove(l)
}

// Reject refuses a connection request (ucp_listener_reject): the client's
// endpoint creation fails with ucs.ErrRejected. It fails with
// ucs.ErrInvalidParam for a request of another listener or one already
// accepted or rejected, and ucs.ErrConnectionReset when the client left.
func (l *Listener) Reject(req *ConnRequest) error {
	if req == nil || req.l != l {
		return fmt.Errorf("ucp listener reject: not a request of this listener: %w", ucs.ErrInvalidParam)
	}
	if err := req.take(); err != nil {
		return fmt.Errorf("ucp listener reject: %w", err)
	}
	req.c.SetWriteDeadline(time.Now().Add(l.hsTimeout))
	_, err := req.c.Write((&csMsg{typ: csReject, reason: csReasonRefused}).encode())
	req.c.Close()
	req.accepted <- nil
	if err != nil {
		return fmt.Errorf("ucp listener reject %v: %w: %w", req.client, err, ucs.ErrConnectionReset)
	}
	return nil
}

// take claims a pending request for an accept or a reject.
func (r *ConnRequest) take() error {
	if r.state.CompareAndSwap(reqPending, reqTaken) {
		return nil
	}
	if r.state.Load() == reqGone {
		return fmt.Errorf("client %v left: %w", r.client, ucs.ErrConnectionReset)
	}
	return fmt.Errorf("request of %v already accepted or rejected: %w", r.client, ucs.ErrInvalidParam)
}

// listenerWarnBurst is the number of refusals a listener logs per minute;
// it counts the rest.
const listenerWarnBurst = 10

// acceptLoop accepts clients until the listener closes. A new client
// enters the gate before anything else is done for it, displacing (and
// closing) an older one that has not authenticated when the gate is full.
func (l *Listener) acceptLoop() {
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
		req := &ConnRequest{l: l, c: c, accepted: make(chan *Endpoint, 1)}
		req.client = c.RemoteAddr().(*net.TCPAddr).AddrPort()
		req.local = c.LocalAddr().(*net.TCPAddr).AddrPort()
		if !l.track(req) {
			continue
		}
		tk, old, ousted := l.gate.Admit(req.client.Addr(), c)
		if ousted {
			old.Close()
			l.refused.Logf("closed the connection from %v, which had not authenticated when newer ones came", old.RemoteAddr())
		}
		l.wg.Add(1)
		go l.serve(req, tk)
	}
}

// track adds a new connection, or closes it when the listener is closed.
func (l *Listener) track(r *ConnRequest) bool {
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
func (l *Listener) refuseBusy(c net.Conn) {
	c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	c.Write((&csMsg{typ: csReject, reason: csReasonBusy}).encode())
	c.Close()
}

// serve runs the handshake with one client (tk, its place in the gate),
// queues its request for the application, and then waits for the client's
// confirmation (after an accept) or its departure.
func (l *Listener) serve(r *ConnRequest, tk *admit.Ticket[net.Conn]) {
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
	hello, snonce, ra, err := serverHandshake(r.c, l.key, l.keyed)
	if tk.Done() {
		return // a newer client displaced it, and closed its connection
	}
	if err != nil {
		if errors.Is(err, jobkey.ErrAuth) {
			r.c.Write((&csMsg{typ: csReject, reason: csReasonAuth}).encode())
		}
		if !l.isClosed() {
			l.refused.Logf("refused the connection from %v: %v", r.client, err)
		}
		return
	}
	r.hello, r.snonce, r.ra = hello, snonce, ra
	r.c.SetDeadline(time.Time{})
	if authed = l.enqueue(r); !authed {
		return
	}
	// The next message is the client's confirmation of an accept; one
	// before the application took the request means that the client left
	// (or misbehaved, or the listener closed).
	m, err := readCSMsg(r.c, csReady)
	if err == nil {
		err = csVerify(l.key, &m.mac, jobkey.ClientConfirm, hello.clientID, &hello.nonce, &snonce, nil)
	}
	if r.state.CompareAndSwap(reqPending, reqGone) {
		return
	}
	ep := <-r.accepted
	if err == nil || ep == nil {
		return
	}
	// The client did not confirm: it left, or could not wire its side.
	// The endpoint fails as on any loss of its peer.
	st := ucs.ErrConnectionReset
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		st = ucs.ErrTimedOut
	case errors.Is(err, ucs.ErrRejected):
		st = ucs.ErrRejected
	}
	if ep.params.ErrMode == ErrHandlingModePeer {
		ep.setFailed(st)
	}
}

// isClosed reports whether Destroy began.
func (l *Listener) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// enqueue queues an authenticated request for the handler, and counts it
// among the authenticated connections. It refuses the client as busy when
// there are maxListenerConns of them already, and does nothing when the
// listener is closed.
func (l *Listener) enqueue(r *ConnRequest) bool {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return false
	}
	if l.authed >= maxListenerConns {
		l.mu.Unlock()
		l.refuseBusy(r.c)
		l.refused.Logf("refused the connection from %v: %d authenticated connections wait already", r.client, maxListenerConns)
		return false
	}
	l.authed++
	r.state.Store(reqPending)
	l.queue = append(l.queue, r)
	l.queued.Store(true)
	l.mu.Unlock()
	l.w.notify()
	return true
}

// progress hands the queued requests to the handler; it is one of the
// worker's progress callbacks.
func (l *Listener) progress() int {
	if !l.queued.Load() {
		return 0
	}
	l.mu.Lock()
	q := l.queue
	l.queue = nil
	l.queued.Store(false)
	l.mu.Unlock()
	n := 0
	for _, r := range q {
		if r.state.Load() != reqPending {
			continue // the client left meanwhile
		}
		n++
		if l.params.ConnHandler != nil {
			l.params.ConnHandler(r, l.params.HandlerArg)
			continue
		}
		ep, err := l.w.NewEndpoint(new(EPParams).SetConnRequest(r))
		if err != nil {
			// The client learns of it too (rejected, or its
			// connection closed); the server has no one else to tell.
			l.w.warnf("ucp: worker %s: listener on %v: %v", l.w.name, l.addr, err)
			continue
		}
		l.params.AcceptHandler(ep, l.params.HandlerArg)
	}
	return n
}

// serverHandshake runs the listener's side of the handshake on rw up to
// the client's verified request: it returns the client's hello, the
// server nonce and the client's worker address.
func serverHandshake(rw io.ReadWriter, key jobkey.HandshakeKey, keyed bool) (hello csMsg, snonce jobkey.Nonce, ra *workerAddress, err error) {
	if hello, err = readCSMsg(rw, csHello); err != nil {
		return
	}
	ch := csMsg{typ: csChallenge}
	if keyed {
		ch.flags = csFlagKeyed
	}
	ch.nonce = jobkey.NewNonce()
	snonce = ch.nonce
	if _, err = rw.Write(ch.encode()); err != nil {
		return
	}
	req, err := readCSMsg(rw, csRequest)
	if err != nil {
		return
	}
	if err = csVerify(key, &req.mac, jobkey.ClientProof, hello.clientID, &hello.nonce, &snonce, req.addr); err != nil {
		return
	}
	ra, err = decodeWorkerAddress(req.addr)
	return
}

// listenerSet is a worker's listeners, which Worker.Destroy destroys.
type listenerSet struct {
	mu     sync.Mutex
	m      map[*Listener]struct{}
	closed bool
}

func (s *listenerSet) add(l *Listener) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.m == nil {
		s.m = make(map[*Listener]struct{})
	}
	s.m[l] = struct{}{}
	return true
}

func (s *listenerSet) remove(l *Listener) {
	s.mu.Lock()
	delete(s.m, l)
	s.mu.Unlock()
}

// destroyAll destroys every listener and refuses new ones.
func (s *listenerSet) destroyAll() {
	s.mu.Lock()
	s.closed = true
	ls := make([]*Listener, 0, len(s.m))
	for l := range s.m {
		ls = append(ls, l)
	}
	s.mu.Unlock()
	for _, l := range ls {
		l.Destroy()
	}
}
