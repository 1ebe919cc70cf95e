package ucp

import (
	"fmt"
	"net/netip"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// SetSockAddr sets the socket address of a listener to connect to, the
// client side of a client-server connection (ucp_ep_params_t.sockaddr;
// goes with EPParamsFlagClientServer). See Worker.NewEndpoint.
func (p *EPParams) SetSockAddr(a netip.AddrPort) *EPParams {
	p.SockAddr, p.FieldMask = a, p.FieldMask|EPParamFieldSockAddr
	return p
}

// SetLocalSockAddr sets the local address (and port, 0 for any) the
// client's connection to the listener is made from (default: the system
// chooses).
func (p *EPParams) SetLocalSockAddr(a netip.AddrPort) *EPParams {
	p.LocalSockAddr, p.FieldMask = a, p.FieldMask|EPParamFieldLocalSockAddr
	return p
}

// SetConnRequest sets the connection request to accept, the server side of
// a client-server connection (ucp_ep_params_t.conn_request).
func (p *EPParams) SetConnRequest(r *ConnRequest) *EPParams {
	p.ConnRequest, p.FieldMask = r, p.FieldMask|EPParamFieldConnRequest
	return p
}

// sockAddrs are the socket addresses of the connection a client-server
// endpoint was set up over, for Endpoint.Query.
type sockAddrs struct {
	local, remote netip.AddrPort
}

// newSockaddrEndpoint creates an endpoint of a client-server connection:
// a client's, to params' socket address, or a server's, from a connection
// request.
func (w *Worker) newSockaddrEndpoint(p *EPParams) (*Endpoint, error) {
	n := 0
	for _, f := range []uint64{EPParamFieldRemoteAddress, EPParamFieldSockAddr, EPParamFieldConnRequest} {
		if p.FieldMask&f != 0 {
			n++
		}
	}
	if n != 1 {
		return nil, fmt.Errorf("ucp ep create: exactly one of the remote address, the socket address and the connection request must be set: %w", ucs.ErrInvalidParam)
	}
	if p.FieldMask&EPParamFieldConnRequest != 0 {
		return w.acceptConnRequest(p)
	}
	return w.connectSockAddr(p)
}

// connectSockAddr creates the client's endpoint to the listener at
// p.SockAddr and returns it at once, connecting: the worker's connection
// manager runs the handshake in the background, and the worker's Progress
// wires the endpoint once the server accepted (ep_connect.go). Only bad
// parameters fail here.
func (w *Worker) connectSockAddr(p *EPParams) (*Endpoint, error) {
	sa := p.SockAddr
	if !sa.IsValid() || sa.Port() == 0 {
		return nil, fmt.Errorf("ucp ep create to %v: socket address %v: %w", sa, sa, ucs.ErrInvalidParam)
	}
	if p.FieldMask&EPParamFieldErrMode != 0 && p.ErrMode != ErrHandlingModeNone && p.ErrMode != ErrHandlingModePeer {
		return nil, fmt.Errorf("ucp ep create: error handling mode %d: %w", p.ErrMode, ucs.ErrInvalidParam)
	}
	cm, err := w.connManager()
	if err != nil {
		return nil, fmt.Errorf("ucp ep create to %v: %w", sa, err)
	}
	ep := w.newEndpointShell(p, sa.String())
	st := &epConnect{sa: sa}
	ep.conn.Store(st)
	if err := w.cs.add(w, ep); err != nil {
		return nil, err
	}
	// The client id goes only where the worker has one and the endpoint
	// asks to send it (ucp_worker_params_t.client_id,
	// UCP_EP_PARAMS_FLAGS_SEND_CLIENT_ID).
	sendID := p.FieldMask&EPParamFieldFlags != 0 && p.Flags&EPParamsFlagSendClientID != 0
	clientID, hasID := w.clientID()
	cp := &uct.CMEPParams{SockAddr: sa, HandshakeTimeout: w.ctx.csHandshake, AcceptTimeout: w.ctx.csAccept,
		PackPriv: func(_ any, a *uct.CMPackArgs) ([]byte, error) {
			dev := w.csNetDev(a.DevName)
			st.setDev(dev)
			return encodeCSPriv(w.csAddress(dev), clientID, sendID && hasID), nil
		},
		Connect: func(cmep uct.CMEP, _ any, a *uct.CMConnectArgs) { st.finish(w, cmep, a) },
	}
	if p.FieldMask&EPParamFieldLocalSockAddr != 0 {
		cp.LocalSockAddr = p.LocalSockAddr
	}
	cmep, err := cm.EPCreate(cp)
	if err != nil {
		ep.closeNow(ucs.ErrCanceled)
		return nil, fmt.Errorf("ucp ep create to %v: %w", sa, err)
	}
	st.setCMEP(cmep)
	return ep, nil
}

// clientID returns the worker's client id, and whether it has one
// (WorkerParamFieldClientID).
func (w *Worker) clientID() (uint64, bool) {
	if w.params.FieldMask&WorkerParamFieldClientID == 0 {
		return 0, false
	}
	return w.params.ClientID, true
}

// acceptConnRequest accepts a connection request: it wires the endpoint to
// the client's worker address, and the connection manager sends the
// server's. Its goroutine of the request waits for the client's
// confirmation (and the endpoint fails, in error mode PEER, when none
// comes), so that a slow client does not hold up the caller, which is
// often Progress.
func (w *Worker) acceptConnRequest(p *EPParams) (*Endpoint, error) {
	r := p.ConnRequest
	if r == nil || r.l.w != w {
		return nil, fmt.Errorf("ucp ep create: connection request of another worker: %w", ucs.ErrInvalidParam)
	}
	cm, err := w.connManager()
	if err != nil {
		return nil, fmt.Errorf("ucp ep create: accept %v: %w", r.client, err)
	}
	var ep *Endpoint
	cmep, err := cm.EPCreate(&uct.CMEPParams{ConnRequest: r.req, HandshakeTimeout: r.l.hsTimeout,
		PackPriv: func(_ any, a *uct.CMPackArgs) ([]byte, error) {
			dev := w.csNetDev(a.DevName)
			e, err := w.newEndpointTo(p, r.ra, dev)
			if err != nil {
				return nil, err
			}
			ep = e
			return encodeCSPriv(w.csAddress(dev), 0, false), nil
		},
		// The client did not confirm: it left, or could not wire its
		// side. The endpoint fails as on any loss of its peer.
		Notify: func(_ uct.CMEP, _ any, status error) {
			if status != nil && ep.params.ErrMode == ErrHandlingModePeer {
				ep.setFailed(statusOf(status))
			}
		},
	})
	if err != nil {
		if ep != nil {
			ep.Close(CloseModeForce)
		}
		return nil, fmt.Errorf("ucp ep create: %w", err)
	}
	a := cmep.Query()
	ep.sock = sockAddrs{local: a.LocalAddress, remote: a.RemoteAddress}
	return ep, nil
}

// csNetDev returns dev, the network device that a client-server
// connection went through (from the connection manager), when the worker
// has a network interface on it, or "". As UCX's client-server wireup
// does, the endpoint's network lanes are then only on that device, on both
// sides: the worker offers only its network interfaces on it (csAddress)
// and connects only from them (newEndpointTo), so that neither side picks
// an interface the other cannot reach, or be answered from (another
// network, the other side of a network namespace).
func (w *Worker) csNetDev(dev string) string {
	for _, wi := range w.ifaces {
		if dev != "" && wi.rsc.tl.DevType == uct.DeviceTypeNet && wi.rsc.tl.DevName == dev {
			return dev
		}
	}
	return ""
}

// csAddress returns the worker's address with, of its network interfaces,
// only those on dev (all of them when dev is "").
func (w *Worker) csAddress(dev string) []byte {
	if dev == "" {
		return w.address
	}
	return w.packAddressOf(0, func(wi *workerIface) bool { return onNetDev(wi, dev) })
}

// onNetDev reports whether wi is not a network interface or one on dev
// (any, for "").
func onNetDev(wi *workerIface, dev string) bool {
	return dev == "" || wi.rsc.tl.DevType != uct.DeviceTypeNet || wi.rsc.tl.DevName == dev
}
