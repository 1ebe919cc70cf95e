package uct

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/goshmem/goshmem/ucs"
)

// A connection manager (uct_cm_h) sets up client-server connections on
// socket addresses for the layer above: a server listens on an address, a
// client connects to it, and the two exchange private data (ucp packs its
// worker address in it) over the CM's own handshake, with which the layer
// above then wires endpoints of its transports. What travels on the wire,
// how a client and a server authenticate each other, what strangers may
// cost a listener and how long each step may take are the CM's; the
// private data is opaque to it.
//
// The callbacks of a CM, its listeners and its EPs run on goroutines of
// the CM, concurrently with the caller's; they must not block, and must
// not destroy the object they were called for.

// CMComponent is implemented by a Component that has a connection manager
// (UCT_COMPONENT_FLAG_CM); users find it with a type assertion on the
// components of the registry.
type CMComponent interface {
	Component
	// CMOpen opens a connection manager (uct_cm_open), with the values of
	// CMConfigTable in config (nil for the defaults). A bad configuration
	// fails with ucs.ErrInvalidParam.
	CMOpen(params *CMParams, config *ucs.Config) (CM, error)
	// CMConfigTable is the configuration table of the CM (names without
	// prefix; the component's prefix, UCX_TCP_ for tcp, goes before them).
	CMConfigTable() []ucs.ConfigField
}

// CMParams are the parameters of CMComponent.CMOpen.
type CMParams struct {
	// Logger receives the CM's log lines (refused and displaced
	// connections, a few a minute); nil means ucs.DefaultLogger().
	Logger ucs.Logger
}

// CMAttr describes a CM (uct_cm_attr_t).
type CMAttr struct {
	// MaxConnPriv is the largest private data, in bytes, that either side
	// of a connection may send (UCT_CM_ATTR_FIELD_MAX_CONN_PRIV).
	MaxConnPriv int
	// Authenticated reports whether the CM authenticates its peers with
	// a key (goshmem): when it does not, a listener on an address other
	// than loopback needs ListenerParams.AllowUnauthenticated.
	Authenticated bool
}

// CM is a connection manager (uct_cm_h). Its methods may be called from
// any goroutine.
type CM interface {
	// Component returns the component the CM belongs to.
	Component() Component
	// Query describes the CM (uct_cm_query).
	Query() CMAttr
	// ListenerCreate listens on params.SockAddr (uct_listener_create).
	// It fails with ucs.ErrInvalidParam for a missing address or
	// callback, or an address other than loopback that an unauthenticated
	// CM would expose without params.AllowUnauthenticated; with
	// ucs.ErrBusy when the address is in use, ucs.ErrIOError for another
	// socket error.
	ListenerCreate(params *ListenerParams) (Listener, error)
	// EPCreate creates an EP of a client-server connection
	// (uct_ep_create with a CM): a client's, to params.SockAddr, which
	// connects in the background and reports to params.Connect; or a
	// server's, accepting params.ConnRequest, which sends the server's
	// private data at once and reports the client's confirmation to
	// params.Notify. Bad parameters fail with ucs.ErrInvalidParam; a
	// request taken already, or whose client left, fails with
	// ucs.ErrInvalidParam or ucs.ErrConnectionReset.
	EPCreate(params *CMEPParams) (CMEP, error)
	// Close releases the CM; its listeners and EPs must be destroyed
	// first.
	Close()
}

// ConnRequest is a connection request that reached a listener's callback
// (uct_conn_request_h): a client that passed the CM's handshake and waits
// for the server's answer, an EP made with it (CMEPParams.ConnRequest) or
// Listener.Reject, once.
type ConnRequest interface {
	// Listener returns the listener the request came to.
	Listener() Listener
}

// ConnRequestArgs are the arguments of a listener's connection request
// callback (uct_cm_listener_conn_request_args_t).
type ConnRequestArgs struct {
	// Request is the request, for CMEPParams.ConnRequest or
	// Listener.Reject.
	Request ConnRequest
	// DevName is the name of the local network device the request came
	// in on, "" when none has the connection's local address.
	DevName string
	// ClientAddress is the client's socket address.
	ClientAddress netip.AddrPort
	// PrivData is the client's private data; the callback may keep it.
	PrivData []byte
}

// ConnRequestCallback receives a listener's connection requests
// (uct_cm_listener_conn_request_callback_t), with ListenerParams.Arg.
type ConnRequestCallback func(l Listener, arg any, args *ConnRequestArgs)

// ListenerParams are the parameters of CM.ListenerCreate
// (uct_listener_params_t).
type ListenerParams struct {
	// SockAddr is the address to listen on (mandatory): an IPv4 or IPv6
	// address, the unspecified one for every one, and a port, 0 for one
	// the system picks (Listener.Query tells which).
	SockAddr netip.AddrPort
	// ConnRequest receives the requests of the clients that passed the
	// handshake (mandatory), with Arg.
	ConnRequest ConnRequestCallback
	Arg         any
	// HandshakeTimeout bounds each step of a client's handshake, from its
	// connection to its request and from the acceptance to its
	// confirmation (goshmem); 0 for the CM's default.
	HandshakeTimeout time.Duration
	// AllowUnauthenticated lets a listener of a CM that authenticates no
	// one (CMAttr.Authenticated false) listen on an address other than
	// loopback (goshmem): ANY HOST THAT REACHES IT CAN THEN CONNECT.
	AllowUnauthenticated bool
}

// Listener listens for client-server connections on a socket address
// (uct_listener_h).
type Listener interface {
	// Query describes the listener (uct_listener_query).
	Query() ListenerAttr
	// Reject refuses a request of this listener (uct_listener_reject):
	// the client's connection fails with ucs.ErrRejected. A request of
	// another listener, or one taken already, fails with
	// ucs.ErrInvalidParam; one whose client left with
	// ucs.ErrConnectionReset.
	Reject(req ConnRequest) error
	// Destroy stops the listener (uct_listener_destroy): it closes its
	// socket and every connection of a client whose request was not
	// accepted, or not confirmed, and returns once its goroutines ended.
	// EPs made from its requests stay. A second call does nothing.
	Destroy()
}

// ListenerAttr describes a listener (uct_listener_attr_t).
type ListenerAttr struct {
	// SockAddr is the address it listens on, with the port the system
	// picked when it was asked for port 0.
	SockAddr netip.AddrPort
}

// CMPackArgs are the arguments of CMEPParams.PackPriv
// (uct_cm_ep_priv_data_pack_args_t).
type CMPackArgs struct {
	// DevName is the local network device the connection goes through,
	// "" when none has its local address.
	DevName string
}

// CMConnectArgs are the arguments of a client EP's connect callback
// (uct_cm_ep_client_connect_args_t).
type CMConnectArgs struct {
	// Status is nil when the server accepted, with PrivData; otherwise the
	// reason the connection failed: ucs.ErrRejected (the server, or its
	// authentication, refused it), ucs.ErrBusy, ucs.ErrUnreachable,
	// ucs.ErrConnectionReset, ucs.ErrTimedOut, ucs.ErrInvalidParam (a
	// malformed answer) or ucs.ErrIOError.
	Status error
	// PrivData is the server's private data; the callback may keep it.
	PrivData []byte
}

// CMEPParams are the parameters of CM.EPCreate (uct_ep_params_t with a
// CM). Exactly one of SockAddr (a client) and ConnRequest (a server) is
// set.
type CMEPParams struct {
	// SockAddr is the listener's address (client).
	SockAddr netip.AddrPort
	// LocalSockAddr is the local address, and port (0 for any), to
	// connect from (client; the zero value lets the system choose).
	LocalSockAddr netip.AddrPort
	// ConnRequest is the request to accept (server).
	ConnRequest ConnRequest
	// PackPriv returns the private data to send, at most
	// CMAttr.MaxConnPriv bytes and not empty (uct_cm_ep_priv_data_pack_callback_t);
	// an error fails the connection with it. A client's is called once
	// per connection the CM makes; a server's once, in EPCreate.
	PackPriv func(arg any, args *CMPackArgs) ([]byte, error)
	// Connect receives a client's result (uct_cm_ep_client_connect_callback_t),
	// once; the client then calls CMEP.ConnNotify once it is ready.
	Connect func(ep CMEP, arg any, args *CMConnectArgs)
	// Notify receives a server's result (uct_cm_ep_server_conn_notify_callback_t),
	// once: nil when the client confirmed, or the reason it did not
	// (ucs.ErrConnectionReset, ucs.ErrTimedOut, ucs.ErrRejected).
	Notify func(ep CMEP, arg any, status error)
	// Arg is passed to the callbacks.
	Arg any
	// HandshakeTimeout bounds each step of the handshake, and
	// AcceptTimeout a client's wait for the server application's decision
	// (goshmem); 0 for the CM's defaults.
	HandshakeTimeout, AcceptTimeout time.Duration
}

// CMEPAttr describes a CM EP (uct_ep_attr_t of a CM EP).
type CMEPAttr struct {
	// LocalAddress and RemoteAddress are the socket addresses of the
	// connection, once there is one.
	LocalAddress, RemoteAddress netip.AddrPort
}

// CMEP is one side of a client-server connection of a CM. It carries the
// CM's handshake only: the layer above wires its own endpoints with the
// private data, and destroys the CM EP once done.
type CMEP interface {
	// Query describes the EP.
	Query() CMEPAttr
	// ConnNotify tells the server that the client is ready
	// (uct_cm_client_ep_conn_notify), after a successful Connect; the
	// server's Notify then gets nil. It fails with ucs.ErrInvalidParam on
	// a server EP or before the connection, and with the connection's
	// error when the confirmation cannot be sent.
	ConnNotify() error
	// Destroy ends the EP: a client that connects stops, and a connection
	// not confirmed yet closes (the other side sees it leave). No callback
	// of the EP runs after Destroy returned. A second call does nothing.
	Destroy()
}

// LookupCM returns the first registered component, by name, that has a
// connection manager, or an error wrapping ucs.ErrUnsupported when none
// does (no transport with one was linked in).
func LookupCM() (CMComponent, error) {
	for _, c := range Components() {
		if cm, ok := c.(CMComponent); ok {
			return cm, nil
		}
	}
	return nil, errNoCM
}

var errNoCM = fmt.Errorf("uct: no registered component has a connection manager (link in a transport that has one, such as uct/tcp): %w", ucs.ErrUnsupported)
