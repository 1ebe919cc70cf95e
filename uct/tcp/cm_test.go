package tcp

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/jobkey"
	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

var cmLoopback = netip.MustParseAddrPort("127.0.0.1:0")

// cmTestTimeout is the handshake timeout of the tests that wait for it: a
// second, so that the steps meant to succeed do so on a loaded machine.
const cmTestTimeout = time.Second

// otherKey is a job key other than testKey.
var otherKey = base64.StdEncoding.EncodeToString([]byte("another uct/tcp test key 0123456"))

// openCM opens a CM with key as its KEY ("" for none: GOSHMEM_KEY is
// cleared for the test).
func openCM(t testing.TB, key string) *cm {
	t.Helper()
	t.Setenv(jobkey.Env, "")
	cfg := ucs.ReadConfig("GOSHMEM_TCP_TEST_UNSET_", cmConfigTable)
	if err := cfg.Modify("KEY", key); err != nil {
		t.Fatal(err)
	}
	m, err := (&Component{}).CMOpen(&uct.CMParams{Logger: capturedLog}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m.(*cm)
}

// cmServer is a listener whose requests come out of reqs.
type cmServer struct {
	m    *cm
	l    *cmListener
	addr netip.AddrPort
	reqs chan *uct.ConnRequestArgs
}

func startCMServer(t testing.TB, m *cm, hs time.Duration) *cmServer {
	t.Helper()
	s := &cmServer{m: m, reqs: make(chan *uct.ConnRequestArgs, 16)}
	l, err := m.ListenerCreate(&uct.ListenerParams{SockAddr: cmLoopback, HandshakeTimeout: hs,
		ConnRequest: func(_ uct.Listener, _ any, a *uct.ConnRequestArgs) { s.reqs <- a }})
	if err != nil {
		t.Fatalf("ListenerCreate: %v", err)
	}
	t.Cleanup(l.Destroy)
	s.l, s.addr = l.(*cmListener), l.Query().SockAddr
	return s
}

// next returns the next request, or nil after wait.
func (s *cmServer) next(wait time.Duration) *uct.ConnRequestArgs {
	select {
	case a := <-s.reqs:
		return a
	case <-time.After(wait):
		return nil
	}
}

// accept accepts req with priv; the server's notification comes out of
// the channel.
func (s *cmServer) accept(req uct.ConnRequest, priv []byte) (uct.CMEP, <-chan error, error) {
	notified := make(chan error, 1)
	ep, err := s.m.EPCreate(&uct.CMEPParams{ConnRequest: req,
		PackPriv: func(any, *uct.CMPackArgs) ([]byte, error) { return priv, nil },
		Notify:   func(_ uct.CMEP, _ any, st error) { notified <- st }})
	return ep, notified, err
}

// cmDial connects a client of m to addr with priv; its result comes out of
// the channel.
func cmDial(t testing.TB, m *cm, addr netip.AddrPort, priv []byte) (uct.CMEP, <-chan *uct.CMConnectArgs) {
	t.Helper()
	res := make(chan *uct.CMConnectArgs, 1)
	ep, err := m.EPCreate(&uct.CMEPParams{SockAddr: addr, HandshakeTimeout: cmTestTimeout, AcceptTimeout: cmTestTimeout,
		PackPriv: func(any, *uct.CMPackArgs) ([]byte, error) { return priv, nil },
		Connect:  func(_ uct.CMEP, _ any, a *uct.CMConnectArgs) { res <- a }})
	if err != nil {
		t.Fatalf("EPCreate: %v", err)
	}
	t.Cleanup(ep.Destroy)
	return ep, res
}

func cmWait[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s after 30 s", what)
		var zero T
		return zero
	}
}

// TestCM connects clients to a listener of the CM through every outcome:
// private data both ways and the server's notification of the client's
// confirmation; a rejection; clients without the key, with another, or
// with one where the listener has none, refused before the application
// sees them; private data of bad lengths; a client that leaves after the
// acceptance, and one destroyed while it waits for the application.
func TestCM(t *testing.T) {
	clientPriv, serverPriv := []byte("client private data"), []byte("server private data")
	for _, tt := range []struct {
		name                 string
		serverKey, clientKey string
		priv                 []byte
		// server: "accept", "reject" or "" (the request must not come);
		// client: after an accepted connection, "notify" or "leave";
		// "destroy" destroys the client while the request waits.
		server, client string
		wantClient     error // the client's status
		wantNotify     error // the server's notification
	}{
		{"connect and accept", testKey, testKey, clientPriv, "accept", "notify", nil, nil},
		{"no key on either side", "", "", clientPriv, "accept", "notify", nil, nil},
		{"largest private data", testKey, testKey, bytes.Repeat([]byte{7}, MaxConnPriv), "accept", "notify", nil, nil},
		{"reject", testKey, testKey, clientPriv, "reject", "", ucs.ErrRejected, nil},
		{"stranger without key", testKey, "", clientPriv, "", "", ucs.ErrRejected, nil},
		{"other key", testKey, otherKey, clientPriv, "", "", ucs.ErrRejected, nil},
		{"client with a key, listener without", "", testKey, clientPriv, "", "", ucs.ErrRejected, nil},
		{"empty private data", testKey, testKey, nil, "", "", ucs.ErrInvalidParam, nil},
		{"private data too long", testKey, testKey, make([]byte, MaxConnPriv+1), "", "", ucs.ErrInvalidParam, nil},
		{"client leaves after the accept", testKey, testKey, clientPriv, "accept", "leave", nil, ucs.ErrConnectionReset},
		{"client destroyed while connecting", testKey, testKey, clientPriv, "accept", "destroy", nil, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := startCMServer(t, openCM(t, tt.serverKey), cmTestTimeout)
			cep, res := cmDial(t, openCM(t, tt.clientKey), s.addr, tt.priv)
			if tt.server == "" {
				if a := cmWait(t, res, "client result"); !errors.Is(a.Status, tt.wantClient) {
					t.Fatalf("client: %v, want %v", a.Status, tt.wantClient)
				}
				if r := s.next(0); r != nil {
					t.Fatalf("the request of %v reached the callback", r.ClientAddress)
				}
				return
			}
			req := cmWait(t, s.reqs, "request")
			if !bytes.Equal(req.PrivData, tt.priv) || req.ClientAddress.Addr() != cmLoopback.Addr() || req.DevName == "" {
				t.Errorf("request: %d bytes of private data from %v on %q, want %d from %v on lo", len(req.PrivData), req.ClientAddress, req.DevName, len(tt.priv), cmLoopback.Addr())
			}
			switch {
			case tt.server == "reject":
				if err := s.l.Reject(req.Request); err != nil {
					t.Fatalf("Reject: %v", err)
				}
				if a := cmWait(t, res, "client result"); !errors.Is(a.Status, tt.wantClient) {
					t.Fatalf("client: %v, want %v", a.Status, tt.wantClient)
				}
				if _, _, err := s.accept(req.Request, serverPriv); !errors.Is(err, ucs.ErrInvalidParam) {
					t.Errorf("accept after Reject: %v, want ucs.ErrInvalidParam", err)
				}
				return
			case tt.client == "destroy":
				cep.Destroy()
				// The listener sees the client leave, or the accept
				// does; no callback reaches the destroyed client.
				_, notified, err := s.accept(req.Request, serverPriv)
				if err == nil {
					err = cmWait(t, notified, "notification")
				}
				if !errors.Is(err, ucs.ErrConnectionReset) {
					t.Errorf("server: %v, want ucs.ErrConnectionReset", err)
				}
				select {
				case a := <-res:
					t.Errorf("the destroyed client's callback ran: %+v", a)
				default:
				}
				return
			}
			sep, notified, err := s.accept(req.Request, serverPriv)
			if err != nil {
				t.Fatalf("accept: %v", err)
			}
			a := cmWait(t, res, "client result")
			if a.Status != nil || !bytes.Equal(a.PrivData, serverPriv) {
				t.Fatalf("client: %v, private data %q", a.Status, a.PrivData)
			}
			ca, sa := cep.Query(), sep.Query()
			if ca.RemoteAddress != s.addr || ca.LocalAddress != sa.RemoteAddress || sa.LocalAddress != s.addr {
				t.Errorf("client %v -> %v, server %v -> %v, listener %v", ca.LocalAddress, ca.RemoteAddress, sa.LocalAddress, sa.RemoteAddress, s.addr)
			}
			if tt.client == "notify" {
				if err := cep.ConnNotify(); err != nil {
					t.Fatalf("ConnNotify: %v", err)
				}
			} else {
				cep.Destroy()
			}
			if st := cmWait(t, notified, "notification"); !errors.Is(st, tt.wantNotify) || (st == nil) != (tt.wantNotify == nil) {
				t.Fatalf("server notified %v, want %v", st, tt.wantNotify)
			}
			if err := sep.ConnNotify(); !errors.Is(err, ucs.ErrInvalidParam) {
				t.Errorf("ConnNotify on a server EP: %v, want ucs.ErrInvalidParam", err)
			}
		})
	}
}

// TestCMListenerParams checks what ListenerCreate and EPCreate refuse, among
// them a listener without a key on an address other than loopback.
func TestCMListenerParams(t *testing.T) {
	m := openCM(t, "")
	cb := func(uct.Listener, any, *uct.ConnRequestArgs) {}
	any4 := netip.MustParseAddrPort("0.0.0.0:0")
	for _, tt := range []struct {
		name string
		p    *uct.ListenerParams
		want error
	}{
		{"no address", &uct.ListenerParams{ConnRequest: cb}, ucs.ErrInvalidParam},
		{"no callback", &uct.ListenerParams{SockAddr: cmLoopback}, ucs.ErrInvalidParam},
		{"bad timeout", &uct.ListenerParams{SockAddr: cmLoopback, ConnRequest: cb, HandshakeTimeout: -1}, ucs.ErrInvalidParam},
		{"unauthenticated, all addresses", &uct.ListenerParams{SockAddr: any4, ConnRequest: cb}, ucs.ErrInvalidParam},
		{"unauthenticated, all addresses, allowed", &uct.ListenerParams{SockAddr: any4, ConnRequest: cb, AllowUnauthenticated: true}, nil},
		{"IPv4-mapped loopback", &uct.ListenerParams{SockAddr: netip.MustParseAddrPort("[::ffff:127.0.0.1]:0"), ConnRequest: cb}, nil},
	} {
		l, err := m.ListenerCreate(tt.p)
		if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
		if l != nil {
			l.Destroy()
			l.Destroy()
		}
	}
	l, err := m.ListenerCreate(&uct.ListenerParams{SockAddr: cmLoopback, ConnRequest: cb})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Destroy()
	if _, err := m.ListenerCreate(&uct.ListenerParams{SockAddr: l.Query().SockAddr, ConnRequest: cb}); !errors.Is(err, ucs.ErrBusy) {
		t.Errorf("port in use: %v, want ucs.ErrBusy", err)
	}
	pack := func(any, *uct.CMPackArgs) ([]byte, error) { return []byte{1}, nil }
	connect := func(uct.CMEP, any, *uct.CMConnectArgs) {}
	for _, p := range []*uct.CMEPParams{
		{},
		{SockAddr: cmLoopback, PackPriv: pack, Connect: connect},
		{SockAddr: l.Query().SockAddr, PackPriv: pack},
		{SockAddr: l.Query().SockAddr, Connect: connect},
		{SockAddr: l.Query().SockAddr, PackPriv: pack, Connect: connect, HandshakeTimeout: -1},
		{ConnRequest: &cmConnRequest{l: l.(*cmListener)}, PackPriv: pack},
	} {
		if _, err := m.EPCreate(p); !errors.Is(err, ucs.ErrInvalidParam) {
			t.Errorf("EP params %+v: %v, want ucs.ErrInvalidParam", p, err)
		}
	}
}

// rawCMClient speaks the client side of the handshake step by step, to
// stop, stall or lie at any point.
type rawCMClient struct {
	t     testing.TB
	c     net.Conn
	key   jobkey.HandshakeKey
	hello cmMsg
	ch    cmMsg
}

func dialRawCM(t testing.TB, addr netip.AddrPort, key jobkey.HandshakeKey) *rawCMClient {
	t.Helper()
	c, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatalf("dial %v: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawCMClient{t: t, c: c, key: key}
}

func (r *rawCMClient) write(b []byte) {
	r.t.Helper()
	if _, err := r.c.Write(b); err != nil {
		r.t.Fatalf("write: %v", err)
	}
}

func (r *rawCMClient) sendHello() {
	r.hello = cmMsg{typ: cmHello, nonce: jobkey.NewNonce()}
	r.write(r.hello.encode())
}

func (r *rawCMClient) readChallenge() {
	r.t.Helper()
	var err error
	if r.ch, err = readCMMsg(r.c, cmChallenge); err != nil {
		r.t.Fatalf("challenge: %v", err)
	}
}

func (r *rawCMClient) request(priv []byte) *cmMsg {
	return &cmMsg{typ: cmRequest, priv: priv, mac: cmMAC(r.key, jobkey.ClientProof, &r.hello.nonce, &r.ch.nonce, priv)}
}

// closed reports whether the listener closed the connection (a read ends
// other than by its deadline: 20 s, a hang guard), after whatever it sent.
func (r *rawCMClient) closed() bool {
	r.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	var b [4096]byte
	for {
		if _, err := r.c.Read(b[:]); err != nil {
			return !isTimeout(err)
		}
	}
}

// cmHdr returns a message header of type typ with flags.
func cmHdr(typ, flags uint8) []byte {
	b := binary.LittleEndian.AppendUint32(nil, cmMagic)
	b = binary.LittleEndian.AppendUint16(b, cmVersion)
	return append(b, typ, flags)
}

// TestCMBadClients sends a listener garbage, truncated, oversized, forged
// and stalled handshakes: each connection is dropped (in the handshake
// timeout at most), no request reaches the callback, and a good client is
// served after it, and beside a stalled one.
func TestCMBadClients(t *testing.T) {
	m := openCM(t, testKey)
	s := startCMServer(t, m, cmTestTimeout)
	junk := make([]byte, 1<<20)
	rand.Read(junk)
	stalled := dialRawCM(t, s.addr, m.key) // holds a handshake slot meanwhile
	defer func() {
		if !stalled.closed() {
			t.Error("the listener kept a silent connection past its handshake timeout")
		}
	}()
	for _, tt := range []struct {
		name string
		send func(r *rawCMClient)
	}{
		{"nothing", func(r *rawCMClient) {}},
		{"garbage", func(r *rawCMClient) { r.write(junk[:64]) }},
		{"a megabyte of garbage", func(r *rawCMClient) { r.c.Write(junk) }},
		{"bad magic", func(r *rawCMClient) { r.write(append([]byte("XXXX\x03\x00\x01\x00"), junk[:40]...)) }},
		{"old version", func(r *rawCMClient) { r.write(append([]byte("GSLC\x02\x00\x01\x00"), junk[:40]...)) }},
		{"wrong first type", func(r *rawCMClient) { r.write(append(cmHdr(cmRequest, 0), junk[:40]...)) }},
		{"unknown flags", func(r *rawCMClient) { r.write(append(cmHdr(cmHello, 0x80), junk[:40]...)) }},
		{"truncated hello", func(r *rawCMClient) { r.write((&cmMsg{typ: cmHello}).encode()[:20]) }},
		{"oversized request", func(r *rawCMClient) {
			r.sendHello()
			r.readChallenge()
			r.write(append(append(cmHdr(cmRequest, 0), make([]byte, jobkey.MACLen)...), 0xff, 0xff))
		}},
		{"empty private data", func(r *rawCMClient) {
			r.sendHello()
			r.readChallenge()
			r.write(append(append(cmHdr(cmRequest, 0), make([]byte, jobkey.MACLen)...), 0, 0))
		}},
		{"truncated request", func(r *rawCMClient) {
			r.sendHello()
			r.readChallenge()
			r.write(r.request([]byte("private")).encode()[:45])
		}},
		{"forged MAC", func(r *rawCMClient) {
			r.sendHello()
			r.readChallenge()
			m := r.request([]byte("private"))
			m.mac[0] ^= 1
			r.write(m.encode())
		}},
		{"MAC of another key", func(r *rawCMClient) {
			r.sendHello()
			r.readChallenge()
			r.key = jobkey.Derive([]byte("another key of 32 bytes, exactly"), jobkey.LabelCM)
			r.write(r.request([]byte("private")).encode())
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := dialRawCM(t, s.addr, m.key)
			tt.send(r)
			if !r.closed() {
				t.Fatal("the listener kept the connection past its handshake timeout")
			}
			if a := s.next(0); a != nil {
				t.Fatalf("a request from %v reached the callback", a.ClientAddress)
			}
			_, res := cmDial(t, m, s.addr, []byte("good"))
			req := cmWait(t, s.reqs, "request of a good client")
			if _, _, err := s.accept(req.Request, []byte("ok")); err != nil {
				t.Fatalf("accept: %v", err)
			}
			if a := cmWait(t, res, "client result"); a.Status != nil {
				t.Fatalf("good client: %v", a.Status)
			}
		})
	}
}

// TestCMAdmission opens more idle connections than a listener lets
// authenticate at once: the listener holds no more than its bound, and a
// client with the key still connects.
func TestCMAdmission(t *testing.T) {
	m := openCM(t, testKey)
	s := startCMServer(t, m, time.Minute)
	for range maxCMHandshakes + 20 {
		dialRawCM(t, s.addr, m.key)
	}
	_, res := cmDial(t, m, s.addr, []byte("good"))
	req := cmWait(t, s.reqs, "request of a good client")
	if _, _, err := s.accept(req.Request, []byte("ok")); err != nil {
		t.Fatalf("accept: %v", err)
	}
	if a := cmWait(t, res, "client result"); a.Status != nil {
		t.Fatalf("good client: %v", a.Status)
	}
	if n := s.l.gate.Len(); n > maxCMHandshakes {
		t.Errorf("%d connections in the handshake, at most %d allowed", n, maxCMHandshakes)
	}
}

// rawCMServer is a listening socket that runs a scripted server side for
// each client connection, one at a time; conns counts them.
func rawCMServer(t *testing.T, script func(c net.Conn)) (addr netip.AddrPort, conns *atomic.Int32) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	conns = new(atomic.Int32)
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			script(c)
			c.Close()
		}
	}()
	return ln.Addr().(*net.TCPAddr).AddrPort(), conns
}

// TestCMServerDies ends or corrupts the server's side at every stage of
// the handshake: the client reports a clear error, in the timeouts at
// most. A server that closes the connection before its answer or says it
// is busy (as a listener does to a client that newer ones displaced) is
// tried cmDialTries times; any other failure ends the first try.
func TestCMServerDies(t *testing.T) {
	m := openCM(t, testKey)
	challenge := func(c net.Conn) (hello, ch cmMsg) {
		hello, _ = readCMMsg(c, cmHello)
		ch = cmMsg{typ: cmChallenge, flags: cmFlagKeyed, nonce: jobkey.NewNonce()}
		c.Write(ch.encode())
		return hello, ch
	}
	accept := func(c net.Conn, forge bool) {
		hello, ch := challenge(c)
		readCMMsg(c, cmRequest)
		priv := []byte("server")
		msg := cmMsg{typ: cmAccept, priv: priv, mac: cmMAC(m.key, jobkey.ServerProof, &hello.nonce, &ch.nonce, priv)}
		if forge {
			msg.mac[1] ^= 1
		}
		c.Write(msg.encode())
		io.Copy(io.Discard, c)
	}
	for _, tt := range []struct {
		name   string
		script func(c net.Conn)
		want   error
	}{
		{"closes at once", func(c net.Conn) {}, ucs.ErrConnectionReset},
		{"closes after the hello", func(c net.Conn) { readCMMsg(c, cmHello) }, ucs.ErrConnectionReset},
		{"silent", func(c net.Conn) { io.Copy(io.Discard, c) }, ucs.ErrTimedOut},
		{"garbage challenge", func(c net.Conn) { c.Write(bytes.Repeat([]byte{0xee}, 40)); io.Copy(io.Discard, c) }, ucs.ErrInvalidParam},
		{"unkeyed challenge", func(c net.Conn) {
			readCMMsg(c, cmHello)
			c.Write((&cmMsg{typ: cmChallenge}).encode())
			io.Copy(io.Discard, c)
		}, ucs.ErrRejected},
		{"closes after the request", func(c net.Conn) { challenge(c); readCMMsg(c, cmRequest) }, ucs.ErrConnectionReset},
		{"never decides", func(c net.Conn) { challenge(c); io.Copy(io.Discard, c) }, ucs.ErrTimedOut},
		{"busy", func(c net.Conn) { c.Write((&cmMsg{typ: cmReject, reason: cmReasonBusy}).encode()) }, ucs.ErrBusy},
		{"rejects", func(c net.Conn) {
			challenge(c)
			readCMMsg(c, cmRequest)
			c.Write((&cmMsg{typ: cmReject, reason: cmReasonRefused}).encode())
		}, ucs.ErrRejected},
		{"forged accept", func(c net.Conn) { accept(c, true) }, ucs.ErrRejected},
		{"oversized accept", func(c net.Conn) {
			challenge(c)
			readCMMsg(c, cmRequest)
			b := (&cmMsg{typ: cmAccept, priv: []byte{1}}).encode()
			binary.LittleEndian.PutUint16(b[len(b)-3:], 0xffff)
			c.Write(b[:len(b)-1])
			io.Copy(io.Discard, c)
		}, ucs.ErrInvalidParam},
		{"accepts", func(c net.Conn) { accept(c, false) }, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			addr, conns := rawCMServer(t, tt.script)
			_, res := cmDial(t, m, addr, []byte("client"))
			a := cmWait(t, res, "client result")
			if !errors.Is(a.Status, tt.want) || (tt.want == nil) != (a.Status == nil) {
				t.Fatalf("client: %v, want %v", a.Status, tt.want)
			}
			tries := int32(1)
			if errors.Is(tt.want, ucs.ErrConnectionReset) || errors.Is(tt.want, ucs.ErrBusy) {
				tries = cmDialTries
			}
			if got := conns.Load(); got != tries {
				t.Errorf("%d connections, want %d", got, tries)
			}
		})
	}
}

// FuzzCMHandshake feeds the listener's side of the handshake, and the
// message decoder, arbitrary client bytes: nothing panics or reads past
// what a message announces, and what decodes encodes back to the same
// bytes. The seeds are a whole valid exchange and its pieces.
func FuzzCMHandshake(f *testing.F) {
	hello := cmMsg{typ: cmHello}
	req := cmMsg{typ: cmRequest, priv: []byte("private data")}
	for _, m := range []cmMsg{hello, {typ: cmChallenge, flags: cmFlagKeyed}, req, {typ: cmAccept, priv: []byte{1}},
		{typ: cmReject, reason: cmReasonAuth}, {typ: cmReady}} {
		b := m.encode()
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add(append(hello.encode(), req.encode()...))
	f.Add([]byte{})
	key := jobkey.Derive(nil, jobkey.LabelCM)
	all := []uint8{cmHello, cmChallenge, cmRequest, cmAccept, cmReject, cmReady}
	f.Fuzz(func(t *testing.T, b []byte) {
		if m, err := decodeCMMsg(b, all...); err == nil {
			if !bytes.Equal(m.encode(), b) {
				t.Fatalf("%x decodes to %+v, which encodes to %x", b, m, m.encode())
			}
		}
		rw := struct {
			io.Reader
			io.Writer
		}{bytes.NewReader(b), io.Discard}
		var cn, sn jobkey.Nonce
		if _, err := cmServerHandshake(rw, key, false, &cn, &sn); err == nil {
			t.Fatalf("%x passed the handshake without the server's nonce", b)
		}
	})
}
