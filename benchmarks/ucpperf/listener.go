package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/goshmem/goshmem/ucp"
)

// listenerWait bounds how long the server waits for the client's
// connection request, and the client for the listener's address.
const listenerWait = 30 * time.Second

// connectListener makes the endpoint of the server/client mode the way a
// client-server UCX application does: the server opens a ucp.Listener on
// the address the client reached it on (port 0: the system picks one) and
// sends its port over the socket; the client creates its endpoint to that
// socket address, and the server accepts the connection request from its
// handler. Both sides share UCX_TCP_KEY (or GOSHMEM_KEY) by then, which
// authenticates the listener's handshake.
func connectListener(s *sockRTE, w *ucp.Worker) (*ucp.Endpoint, error) {
	if s.isClient {
		b, err := s.recv()
		if err != nil {
			return nil, err
		}
		if len(b) != 2 {
			return nil, fmt.Errorf("the server sent a listener port of %d bytes", len(b))
		}
		ip := s.conn.RemoteAddr().(*net.TCPAddr).AddrPort().Addr()
		sa := netip.AddrPortFrom(ip, binary.LittleEndian.Uint16(b))
		ep, err := w.NewEndpoint(new(ucp.EPParams).SetSockAddr(sa).
			SetFlags(ucp.EPParamsFlagClientServer | ucp.EPParamsFlagSendClientID))
		if err != nil {
			return nil, err
		}
		return ep, nil
	}
	var req *ucp.ConnRequest
	local := s.conn.LocalAddr().(*net.TCPAddr).AddrPort().Addr()
	l, err := w.NewListener(new(ucp.ListenerParams).SetSockAddr(netip.AddrPortFrom(local, 0)).
		SetConnHandler(func(r *ucp.ConnRequest, _ any) { req = r }, nil))
	if err != nil {
		return nil, err
	}
	defer l.Destroy()
	var port [2]byte
	binary.LittleEndian.PutUint16(port[:], l.Query().SockAddr.Port())
	if err := s.send(port[:]); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(listenerWait)
	for req == nil {
		if w.Progress() == 0 {
			if time.Now().After(deadline) {
				return nil, errors.New("no connection request from the client")
			}
			w.Idle()
		}
	}
	return w.NewEndpoint(new(ucp.EPParams).SetConnRequest(req))
}
