package ucp

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
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

// Listener accepts client-server connections on a socket address for a
// worker (ucp_listener_h).
//
// It listens through the connection manager of a transport (uct.CM; the
// tcp one, whose handshake, authentication and limits uct/tcp documents):
// when a key is configured (UCX_TCP_KEY, or the launcher's GOSHMEM_KEY)
// a client must prove that it holds it. The client and the server exchange
// their workers' addresses, and the endpoints that both make are wired as
// any endpoint made from a worker address: on one host over shared memory
// when the context has it, otherwise over tcp (which needs the same key on
// both sides).
type Listener struct {
	w         *Worker
	ul        uct.Listener
	addr      netip.AddrPort
	hsTimeout time.Duration
	params    ListenerParams
	progID    int
	refused   *ucs.LogLimiter // requests refused for malformed data

	mu     sync.Mutex
	queue  []*ConnRequest // for the handler
	closed bool
	queued atomic.Bool // queue is not empty
}

// ConnRequest is an authenticated client's request to connect
// (ucp_conn_request_h), which the application accepts by creating an
// endpoint from it or refuses with Listener.Reject, once.
type ConnRequest struct {
	l        *Listener
	req      uct.ConnRequest
	client   netip.AddrPort
	dev      string
	clientID uint64
	ra       *workerAddress
}

// ConnRequestAttr describes a connection request (ucp_conn_request_attr_t).
type ConnRequestAttr struct {
	// ClientAddress is the client's socket address.
	ClientAddress netip.AddrPort
	// ClientID is the id the client's worker sent
	// (EPParamsFlagSendClientID, with WorkerParamFieldClientID), 0 if it
	// sent none.
	ClientID uint64
}

// Query describes the request (ucp_conn_request_query).
func (r *ConnRequest) Query() ConnRequestAttr {
	return ConnRequestAttr{ClientAddress: r.client, ClientID: r.clientID}
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
	hs := w.ctx.csHandshake
	if params.FieldMask&ListenerParamFieldHandshakeTimeout != 0 {
		if hs = params.HandshakeTimeout; hs <= 0 {
			return bad("handshake timeout %v", hs)
		}
	}
	cm, err := w.connManager()
	if err != nil {
		return nil, fmt.Errorf("ucp listener create: %w", err)
	}
	l := &Listener{w: w, hsTimeout: hs, params: *params}
	// The connection manager may call l.connRequest before it returned:
	// what that uses is set before, or under l.mu.
	l.refused = ucs.NewLogLimiter("refused connections", listenerWarnBurst, time.Minute,
		func(format string, args ...any) {
			w.warnf("ucp: worker %s: listener on %v: "+format, append([]any{w.name, l.sockAddr()}, args...)...)
		})
	ul, err := cm.ListenerCreate(&uct.ListenerParams{SockAddr: params.SockAddr, ConnRequest: l.connRequest,
		HandshakeTimeout: hs, AllowUnauthenticated: flags&ListenerFlagAllowUnauthenticated != 0})
	if err != nil {
		return nil, fmt.Errorf("ucp listener create: %w", err)
	}
	l.mu.Lock()
	l.ul, l.addr = ul, ul.Query().SockAddr
	l.mu.Unlock()
	if !w.listeners.add(l) {
		ul.Destroy()
		return nil, fmt.Errorf("ucp listener create: %w", ErrClosed)
	}
	l.progID = w.uw.ProgressRegister(l.progress)
	return l, nil
}

// Query describes the listener (ucp_listener_query).
func (l *Listener) Query() ListenerAttr { return ListenerAttr{SockAddr: l.sockAddr()} }

// sockAddr returns the address the listener listens on.
func (l *Listener) sockAddr() netip.AddrPort {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.addr
}

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
	l.queue = nil
	ul := l.ul
	l.mu.Unlock()
	ul.Destroy()
	l.w.uw.ProgressUnregister(l.progID)
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
	if err := req.req.Listener().Reject(req.req); err != nil {
		return fmt.Errorf("ucp listener reject: %w", err)
	}
	return nil
}

// listenerWarnBurst is the number of refusals a listener logs per minute;
// it counts the rest.
const listenerWarnBurst = 10

// connRequest receives a request from the connection manager, on a
// goroutine of its own: it decodes the client's private data, refusing
// the client when that is malformed, and queues the request for Progress.
func (l *Listener) connRequest(ul uct.Listener, _ any, a *uct.ConnRequestArgs) {
	clientID, ra, err := decodeCSPriv(a.PrivData)
	if err != nil {
		l.refused.Logf("refused the connection from %v: %v", a.ClientAddress, err)
		ul.Reject(a.Request)
		return
	}
	r := &ConnRequest{l: l, req: a.Request, client: a.ClientAddress, dev: a.DevName, clientID: clientID, ra: ra}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return // the connection manager's Destroy closes it
	}
	l.queue = append(l.queue, r)
	l.queued.Store(true)
	l.mu.Unlock()
	l.w.notify()
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
	for _, r := range q {
		if l.params.ConnHandler != nil {
			l.params.ConnHandler(r, l.params.HandlerArg)
			continue
		}
		ep, err := l.w.NewEndpoint(new(EPParams).SetConnRequest(r))
		if err != nil {
			// The client learns of it too (rejected, or its
			// connection closed); the server has no one else to tell,
			// and a client that left tells nothing.
			if !errors.Is(err, ucs.ErrConnectionReset) {
				l.w.warnf("ucp: worker %s: listener on %v: %v", l.w.name, l.sockAddr(), err)
			}
			continue
		}
		l.params.AcceptHandler(ep, l.params.HandlerArg)
	}
	return len(q)
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

// workerCM is a worker's connection manager, which its listeners and
// client-server endpoints use, opened when first needed (UCX opens its CMs
// with the worker).
type workerCM struct {
	once sync.Once
	cm   uct.CM
	err  error
}

// connManager returns the worker's connection manager: that of the first
// registered component that has one, with its configuration read under
// the component's prefix (UCX_TCP_KEY for tcp). It fails with
// ucs.ErrUnsupported when no component has one, ucs.ErrInvalidParam for
// a bad configuration.
func (w *Worker) connManager() (uct.CM, error) {
	w.cm.once.Do(func() {
		comp, err := uct.LookupCM()
		if err != nil {
			w.cm.err = err
			return
		}
		cfg := w.ctx.config.ReadAlso(w.ctx.componentPrefix(comp.Name()), comp.CMConfigTable())
		w.cm.cm, w.cm.err = comp.CMOpen(&uct.CMParams{Logger: w.ctx.log}, cfg)
	})
	return w.cm.cm, w.cm.err
}

// closeCM closes the connection manager, once the listeners and the
// endpoints that connect are gone (Worker.Destroy).
func (w *Worker) closeCM() {
	w.cm.once.Do(func() { w.cm.err = fmt.Errorf("ucp: %w", ErrClosed) })
	if w.cm.cm != nil {
		w.cm.cm.Close()
	}
}
