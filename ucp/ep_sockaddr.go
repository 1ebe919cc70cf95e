package ucp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"

	"github.com/goshmem/goshmem/internal/jobkey"
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
// p.SockAddr and returns it at once, connecting: the handshake runs in a
// goroutine of its own, and the worker's Progress wires the endpoint once
// the server accepted (ep_connect.go). Only bad parameters fail here.
func (w *Worker) connectSockAddr(p *EPParams) (*Endpoint, error) {
	sa := p.SockAddr
	if !sa.IsValid() || sa.Port() == 0 {
		return nil, fmt.Errorf("ucp ep create to %v: socket address %v: %w", sa, sa, ucs.ErrInvalidParam)
	}
	key, keyed, err := w.ctx.listenerKey()
	if err != nil {
		return nil, fmt.Errorf("ucp ep create to %v: %w", sa, err)
	}
	if p.FieldMask&EPParamFieldErrMode != 0 && p.ErrMode != ErrHandlingModeNone && p.ErrMode != ErrHandlingModePeer {
		return nil, fmt.Errorf("ucp ep create: error handling mode %d: %w", p.ErrMode, ucs.ErrInvalidParam)
	}
	ep := w.newEndpointShell(p, sa.String())
	st := &epConnect{sa: sa}
	ep.conn.Store(st)
	if err := w.cs.add(w, ep); err != nil {
		return nil, err
	}
	go w.csClientHandshake(st, p, key, keyed)
	return ep, nil
}

// csClientHandshake runs the client side of the handshake with the
// listener, up to the server's acceptance, and hands the result to the
// worker's Progress (epConnect.finish), which wires the endpoint and
// confirms.
//
// A listener drops a client it had no time for before its answer (newer
// clients displaced it, see maxHandshakes), or answers busy, and a client
// cannot tell a dropped connection from another failure: it tries again,
// csDialTries times at most, while its handshake timeout lasts.
func (w *Worker) csClientHandshake(st *epConnect, p *EPParams, key jobkey.HandshakeKey, keyed bool) {
	deadline := time.Now().Add(w.ctx.csHandshake)
	backoff := 5 * time.Millisecond
	var dropped error // why the last try failed, when it may be tried again
	for try := 1; ; try++ {
		acc, err := w.csClientTry(st, p, key, keyed, deadline)
		if acc == nil && err == nil {
			return // the endpoint was closed meanwhile
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
		if dropped == nil || try == csDialTries || time.Until(deadline) < backoff {
			st.finish(w, acc, err)
			return
		}
		time.Sleep(backoff)
		backoff *= 2
	}
}

// csDialTries bounds the connections a client makes to a listener that
// drops them (or answers busy) before it answers the request.
const csDialTries = 5

// csClientTry makes one connection to the listener at p.SockAddr and runs
// the handshake on it up to the server's acceptance, the hello and the
// challenge before deadline. It returns nothing when the endpoint was
// closed meanwhile; a failure is a status error: ucs.ErrUnreachable when
// no connection could be made, ucs.ErrConnectionReset when the listener
// closed it before its answer, ucs.ErrBusy when it answered busy.
func (w *Worker) csClientTry(st *epConnect, p *EPParams, key jobkey.HandshakeKey, keyed bool, deadline time.Time) (*csAccepted, error) {
	d := net.Dialer{Deadline: deadline}
	if p.FieldMask&EPParamFieldLocalSockAddr != 0 {
		d.LocalAddr = net.TCPAddrFromAddrPort(p.LocalSockAddr)
	}
	c, err := d.Dial("tcp", p.SockAddr.String())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", err, ucs.ErrUnreachable)
	}
	if !st.setConn(c) {
		c.Close()
		return nil, nil
	}
	acc, err := w.csClientTalk(c, p, key, keyed, deadline)
	if err != nil {
		c.Close()
	}
	return acc, err
}

// csClientTalk runs the client's side of the handshake on c.
func (w *Worker) csClientTalk(c net.Conn, p *EPParams, key jobkey.HandshakeKey, keyed bool, deadline time.Time) (*csAccepted, error) {
	hello := csMsg{typ: csHello, nonce: jobkey.NewNonce()}
	if p.FieldMask&EPParamFieldFlags != 0 && p.Flags&EPParamsFlagSendClientID != 0 {
		hello.flags, hello.clientID = csFlagClientID, w.params.ClientID
	}
	c.SetDeadline(deadline)
	if _, err := c.Write(hello.encode()); err != nil {
		return nil, csIOErr("sending the hello", err)
	}
	ch, err := readCSMsg(c, csChallenge, csReject)
	if err != nil {
		return nil, csIOErr("waiting for the challenge", err)
	}
	if ch.typ == csReject {
		return nil, csRejectErr(ch.reason)
	}
	if srvKeyed := ch.flags&csFlagKeyed != 0; srvKeyed != keyed {
		if keyed {
			return nil, fmt.Errorf("the listener does not authenticate, and this client has a key: %w", ucs.ErrRejected)
		}
		return nil, fmt.Errorf("the listener requires a key (UCX_TCP_KEY or GOSHMEM_KEY), and this client has none: %w", ucs.ErrRejected)
	}
	local := c.LocalAddr().(*net.TCPAddr).AddrPort()
	dev := w.csNetDev(local.Addr())
	addr := w.csAddress(dev)
	req := csMsg{typ: csRequest, addr: addr, mac: csMAC(key, jobkey.ClientProof, hello.clientID, &hello.nonce, &ch.nonce, addr)}
	if _, err := c.Write(req.encode()); err != nil {
		return nil, csIOErr("sending the request", err)
	}
	// The server's application decides, in its own time.
	c.SetDeadline(time.Now().Add(w.ctx.csAccept))
	m, err := readCSMsg(c, csAccept, csReject)
	if err != nil {
		return nil, csIOErr("waiting for the server to accept", err)
	}
	if m.typ == csReject {
		return nil, csRejectErr(m.reason)
	}
	if err := csVerify(key, &m.mac, jobkey.ServerProof, hello.clientID, &hello.nonce, &ch.nonce, m.addr); err != nil {
		return nil, fmt.Errorf("the server's answer: %w", err)
	}
	ra, err := decodeWorkerAddress(m.addr)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(w.ctx.csHandshake))
	ready := csMsg{typ: csReady, mac: csMAC(key, jobkey.ClientConfirm, hello.clientID, &hello.nonce, &ch.nonce, nil)}
	return &csAccepted{ra: ra, dev: dev, ready: ready.encode(),
		sock: sockAddrs{local: local, remote: c.RemoteAddr().(*net.TCPAddr).AddrPort()}}, nil
}

// acceptConnRequest accepts a connection request: it wires the endpoint to
// the client's worker address and sends the server's. The listener's
// goroutine of the request waits for the client's confirmation (see
// Listener.serve), so that a slow client does not hold up the caller,
// which is often Progress.
func (w *Worker) acceptConnRequest(p *EPParams) (*Endpoint, error) {
	r := p.ConnRequest
	if r == nil || r.l.w != w {
		return nil, fmt.Errorf("ucp ep create: connection request of another worker: %w", ucs.ErrInvalidParam)
	}
	if err := r.take(); err != nil {
		return nil, fmt.Errorf("ucp ep create: accept %v: %w", r.client, err)
	}
	var ep *Endpoint
	defer func() { r.accepted <- ep }()
	dev := w.csNetDev(r.local.Addr())
	ep, err := w.newEndpointTo(p, r.ra, dev)
	deadline := time.Now().Add(r.l.hsTimeout)
	r.c.SetWriteDeadline(deadline)
	if err != nil {
		r.c.Write((&csMsg{typ: csReject, reason: csReasonRefused}).encode())
		return nil, err
	}
	// The listener's goroutine reads the confirmation: bound its wait.
	r.c.SetReadDeadline(deadline)
	h := &r.hello
	addr := w.csAddress(dev)
	m := csMsg{typ: csAccept, addr: addr, mac: csMAC(r.l.key, jobkey.ServerProof, h.clientID, &h.nonce, &r.snonce, addr)}
	if _, err = r.c.Write(m.encode()); err != nil {
		ep.Close(CloseModeForce)
		ep = nil
		return nil, fmt.Errorf("ucp ep create: accept %v: %w", r.client, csIOErr("sending the acceptance", err))
	}
	ep.sock = sockAddrs{local: r.local, remote: r.client}
	return ep, nil
}

// csNetDev returns the network device that a client-server connection
// whose local end is ip went through, when the worker has a network
// interface on it, or "". As UCX's client-server wireup does, the
// endpoint's network lanes are then only on that device, on both sides:
// the worker offers only its network interfaces on it (csAddress) and
// connects only from them (newEndpointTo), so that neither side picks an
// interface the other cannot reach, or be answered from (another network,
// the other side of a network namespace).
func (w *Worker) csNetDev(ip netip.Addr) string {
	dev := netDevOf(ip.Unmap())
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

// netDevOf returns the name of the network interface that has ip, or "".
func netDevOf(ip netip.Addr) string {
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
				if p, ok := netip.AddrFromSlice(n.IP); ok && p.Unmap() == ip.WithZone("") {
					return ifi.Name
				}
			}
		}
	}
	return ""
}

// csRejectErr is the error of a client the server refused for reason.
func csRejectErr(reason uint8) error {
	switch reason {
	case csReasonAuth:
		return fmt.Errorf("the server refused the connection: authentication failed (not the same key): %w", ucs.ErrRejected)
	case csReasonBusy:
		return fmt.Errorf("the server refused the connection: too many connections: %w", ucs.ErrBusy)
	}
	return fmt.Errorf("the server rejected the connection: %w", ucs.ErrRejected)
}

// csIOErr names what a handshake's read or write failed doing, with a
// status: ucs.ErrTimedOut past a deadline, ucs.ErrConnectionReset when the
// peer closed the connection.
func csIOErr(doing string, err error) error {
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%s: the peer did not answer in time: %w", doing, ucs.ErrTimedOut)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, net.ErrClosed):
		return fmt.Errorf("%s: the peer closed the connection: %w", doing, ucs.ErrConnectionReset)
	case errors.Is(err, ucs.ErrInvalidParam), errors.Is(err, ucs.ErrRejected), errors.Is(err, ucs.ErrInvalidAddr):
		return fmt.Errorf("%s: %w", doing, err)
	}
	return fmt.Errorf("%s: %w: %w", doing, err, ucs.ErrIOError)
}
