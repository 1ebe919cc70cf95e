package ucp

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goshmem/goshmem/ucs"
)

// csTestTimeout is the handshake timeout of the tests that wait for it: a
// second, so that the steps meant to succeed do so on a loaded machine.
const csTestTimeout = time.Second

// rawClient speaks the client side of the handshake step by step, to
// stop, stall or lie at any point.
type rawClient struct {
	t     testing.TB
	c     net.Conn
	key   []byte
	hello csMsg
	ch    csMsg
}

func dialRaw(t testing.TB, addr netip.AddrPort) *rawClient {
	t.Helper()
	c, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatalf("dial %v: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawClient{t: t, c: c, key: deriveCSKey(nil)}
}

func (r *rawClient) write(b []byte) {
	r.t.Helper()
	if _, err := r.c.Write(b); err != nil {
		r.t.Fatalf("write: %v", err)
	}
}

func (r *rawClient) sendHello() {
	r.hello = csMsg{typ: csHello, flags: csFlagClientID, clientID: 7}
	rand.Read(r.hello.nonce[:])
	r.write(r.hello.encode())
}

func (r *rawClient) readChallenge() {
	r.t.Helper()
	var err error
	if r.ch, err = readCSMsg(r.c, csChallenge); err != nil {
		r.t.Fatalf("challenge: %v", err)
	}
}

func (r *rawClient) request(addr []byte) *csMsg {
	return &csMsg{typ: csRequest, addr: addr, mac: csMAC(r.key, 'C', r.hello.clientID, &r.hello.nonce, &r.ch.nonce, addr)}
}

// closed reports whether the listener closed the connection (a read ends
// other than by its deadline: 20 s, a hang guard), after whatever it sent.
func (r *rawClient) closed() bool {
	r.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	var b [4096]byte
	for {
		if _, err := r.c.Read(b[:]); err != nil {
			var ne net.Error
			return !(errors.As(err, &ne) && ne.Timeout())
		}
	}
}

// TestListenerBadClients sends the listener garbage, truncated, oversized,
// forged and stalled handshakes: each connection is dropped (in the
// handshake timeout at most), no request reaches the application, and a
// good client is served after it, and beside a stalled one.
func TestListenerBadClients(t *testing.T) {
	setKey(t, 0)
	c := newCSContext(t, "posix")
	s := startCSServer(t, c, new(ListenerParams).SetSockAddr(loopback4).SetHandshakeTimeout(csTestTimeout))
	cw := newWorker(t, c)
	junk := make([]byte, 1<<20)
	rand.Read(junk)
	hdr := func(typ, flags uint8) []byte {
		b := binary.LittleEndian.AppendUint32(nil, csMagic)
		b = binary.LittleEndian.AppendUint16(b, csVersion)
		return append(b, typ, flags)
	}
	stalled := dialRaw(t, s.addr) // holds a handshake slot meanwhile
	defer func() {
		if !stalled.closed() {
			t.Error("the listener kept a silent connection past its handshake timeout")
		}
	}()
	for _, tt := range []struct {
		name string
		send func(r *rawClient)
	}{
		{"nothing", func(r *rawClient) {}},
		{"garbage", func(r *rawClient) { r.write(junk[:64]) }},
		{"a megabyte of garbage", func(r *rawClient) { r.c.Write(junk) }},
		{"bad magic", func(r *rawClient) { r.write(append([]byte("XXXX\x01\x00\x01\x00"), junk[:40]...)) }},
		{"wrong first type", func(r *rawClient) { r.write(append(hdr(csRequest, 0), junk[:40]...)) }},
		{"unknown flags", func(r *rawClient) { r.write(append(hdr(csHello, 0x80), junk[:40]...)) }},
		{"truncated hello", func(r *rawClient) { r.write((&csMsg{typ: csHello}).encode()[:20]) }},
		{"oversized request", func(r *rawClient) {
			r.sendHello()
			r.readChallenge()
			b := append(hdr(csRequest, 0), make([]byte, csMACLen)...)
			r.write(append(b, 0xff, 0xff))
		}},
		{"empty address", func(r *rawClient) {
			r.sendHello()
			r.readChallenge()
			r.write(append(append(hdr(csRequest, 0), make([]byte, csMACLen)...), 0, 0))
		}},
		{"truncated request", func(r *rawClient) {
			r.sendHello()
			r.readChallenge()
			r.write(r.request(cw.address).encode()[:60])
		}},
		{"forged MAC", func(r *rawClient) {
			r.sendHello()
			r.readChallenge()
			m := r.request(cw.address)
			m.mac[0] ^= 1
			r.write(m.encode())
		}},
		{"junk worker address", func(r *rawClient) {
			r.sendHello()
			r.readChallenge()
			r.write(r.request([]byte("GWA\x01junk")).encode())
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := dialRaw(t, s.addr)
			tt.send(r)
			if !r.closed() {
				t.Fatal("the listener kept the connection past its handshake timeout")
			}
			s.acceptRetry(t, func() <-chan epResult { return dial(cw, s.addr, nil) })
			select {
			case req := <-s.reqs:
				t.Fatalf("a request from %v reached the application", req.Query().ClientAddress)
			default:
			}
		})
	}
}

// TestListenerClientDies ends a client at every stage of the handshake:
// the server's side ends with a clear error (the accept's, or the
// endpoint's failure in error mode PEER when the client does not confirm),
// the listener stays usable, and the worker keeps no endpoint of it.
func TestListenerClientDies(t *testing.T) {
	setKey(t, 0)
	c := newCSContext(t, "posix")
	s := startCSServer(t, c, new(ListenerParams).SetSockAddr(loopback4).SetHandshakeTimeout(csTestTimeout))
	cw := newWorker(t, c)
	// Before the request, the application sees nothing.
	for _, stop := range []func(r *rawClient){
		func(r *rawClient) {},
		func(r *rawClient) { r.sendHello() },
		func(r *rawClient) { r.sendHello(); r.readChallenge() },
	} {
		r := dialRaw(t, s.addr)
		stop(r)
		r.c.Close()
	}
	readAccept := func(r *rawClient) {
		if _, err := readCSMsg(r.c, csAccept); err != nil {
			t.Errorf("accept: %v", err)
		}
	}
	for _, tt := range []struct {
		name string
		// before runs once the application has the request, after once
		// it accepted it.
		before, after func(r *rawClient)
		want          error
		// alt is also right when the accept may take the request before
		// the listener read what the client did.
		alt error
	}{
		{"after its request", func(r *rawClient) { r.c.Close() }, func(r *rawClient) {}, ucs.ErrConnectionReset, nil},
		{"after the accept", func(r *rawClient) {}, func(r *rawClient) { readAccept(r); r.c.Close() }, ucs.ErrConnectionReset, nil},
		{"silent after the accept", func(r *rawClient) {}, func(r *rawClient) {}, ucs.ErrTimedOut, nil},
		{"confirms too early", func(r *rawClient) { r.write((&csMsg{typ: csReady}).encode()) }, func(r *rawClient) {}, ucs.ErrConnectionReset, ucs.ErrRejected},
		{"forged confirmation", func(r *rawClient) {}, func(r *rawClient) { readAccept(r); r.write((&csMsg{typ: csReady}).encode()) }, ucs.ErrRejected, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := dialRaw(t, s.addr)
			r.sendHello()
			r.readChallenge()
			r.write(r.request(cw.address).encode())
			req := s.next(t)
			if q := req.Query(); q.ClientID != 7 {
				t.Errorf("client id %d, want 7", q.ClientID)
			}
			tt.before(r)
			s.w.epMu.Lock()
			before := len(s.w.eps)
			s.w.epMu.Unlock()
			failed := make(chan error, 1)
			ep, err := s.w.NewEndpoint(new(EPParams).SetConnRequest(req).SetErrMode(ErrHandlingModePeer).
				SetErrHandler(func(_ any, ep *Endpoint, st error) { failed <- st }))
			if err == nil {
				tt.after(r)
				select {
				case err = <-failed:
				case <-time.After(20 * time.Second):
					t.Fatal("the accepted endpoint did not fail in 20 s")
				}
				ep.Close(CloseModeForce)
			}
			// A client that left before the accept may be seen to leave
			// by the accept or, once it was accepted, by the listener.
			if !errors.Is(err, tt.want) && (tt.alt == nil || !errors.Is(err, tt.alt)) {
				t.Fatalf("server side: %v, want %v", err, tt.want)
			}
			s.w.epMu.Lock()
			after := len(s.w.eps)
			s.w.epMu.Unlock()
			if after != before {
				t.Errorf("the worker has %d endpoints after the failure, %d before", after, before)
			}
		})
	}
	s.acceptNext(t, dial(cw, s.addr, nil))
}

// rawServer is a listening socket that runs a scripted server side for
// each client connection, one at a time; conns counts them.
func rawServer(t *testing.T, script func(c net.Conn)) (addr netip.AddrPort, conns *atomic.Int32) {
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

// TestListenerServerDies ends or corrupts the server's side at every stage
// of the handshake: the client's NewEndpoint returns a clear error, in the
// timeouts at most. A server that closes the connection before its answer
// or says it is busy (as a listener does to a client that newer ones
// displaced) is tried csDialTries times; any other failure ends the first
// try.
func TestListenerServerDies(t *testing.T) {
	setKey(t, 0)
	t.Setenv("UCX_CS_HANDSHAKE_TIMEOUT", csTestTimeout.String())
	t.Setenv("UCX_CS_ACCEPT_TIMEOUT", csTestTimeout.String())
	c := newCSContext(t, "posix")
	cw := newWorker(t, c)
	sw := newWorker(t, c)
	key := deriveCSKey(nil)
	// challenge reads the hello and answers it.
	challenge := func(c net.Conn) (hello, ch csMsg) {
		hello, _ = readCSMsg(c, csHello)
		ch = csMsg{typ: csChallenge}
		c.Write(ch.encode())
		return hello, ch
	}
	accept := func(c net.Conn, forge bool) {
		hello, ch := challenge(c)
		readCSMsg(c, csRequest)
		m := csMsg{typ: csAccept, addr: sw.address, mac: csMAC(key, 'S', hello.clientID, &hello.nonce, &ch.nonce, sw.address)}
		if forge {
			m.mac[1] ^= 1
		}
		c.Write(m.encode())
		io.Copy(io.Discard, c)
	}
	for _, tt := range []struct {
		name   string
		script func(c net.Conn)
		want   error
	}{
		{"closes at once", func(c net.Conn) {}, ucs.ErrConnectionReset},
		{"closes after the hello", func(c net.Conn) { readCSMsg(c, csHello) }, ucs.ErrConnectionReset},
		{"silent", func(c net.Conn) { io.Copy(io.Discard, c) }, ucs.ErrTimedOut},
		{"garbage challenge", func(c net.Conn) { c.Write(bytes.Repeat([]byte{0xee}, 40)); io.Copy(io.Discard, c) }, ucs.ErrInvalidParam},
		{"closes after the request", func(c net.Conn) { challenge(c); readCSMsg(c, csRequest) }, ucs.ErrConnectionReset},
		{"never decides", func(c net.Conn) { challenge(c); io.Copy(io.Discard, c) }, ucs.ErrTimedOut},
		{"busy", func(c net.Conn) { c.Write((&csMsg{typ: csReject, reason: csReasonBusy}).encode()) }, ucs.ErrBusy},
		{"rejects", func(c net.Conn) {
			challenge(c)
			readCSMsg(c, csRequest)
			c.Write((&csMsg{typ: csReject, reason: csReasonRefused}).encode())
		}, ucs.ErrRejected},
		{"forged accept", func(c net.Conn) { accept(c, true) }, ucs.ErrRejected},
		{"oversized accept", func(c net.Conn) {
			challenge(c)
			readCSMsg(c, csRequest)
			b := (&csMsg{typ: csAccept, addr: []byte{1}}).encode()
			binary.LittleEndian.PutUint16(b[len(b)-3:], 0xffff)
			c.Write(b[:len(b)-1])
			io.Copy(io.Discard, c)
		}, ucs.ErrInvalidParam},
		{"accepts", func(c net.Conn) { accept(c, false) }, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			addr, conns := rawServer(t, tt.script)
			r := result(t, dial(cw, addr, nil))
			if !errors.Is(r.err, tt.want) || (tt.want == nil) != (r.err == nil) {
				t.Fatalf("client: %v, want %v", r.err, tt.want)
			}
			tries := int32(1)
			if errors.Is(tt.want, ucs.ErrConnectionReset) || errors.Is(tt.want, ucs.ErrBusy) {
				tries = csDialTries
			}
			if got := conns.Load(); got != tries {
				t.Errorf("%d connections, want %d", got, tries)
			}
		})
	}
	// A listener destroyed while its client waits for the application.
	s := startCSServer(t, c, nil)
	ch := dial(cw, s.addr, nil)
	s.next(t)
	s.l.Destroy()
	if r := result(t, ch); !errors.Is(r.err, ucs.ErrConnectionReset) {
		t.Fatalf("client of a listener destroyed while it waited: %v, want ucs.ErrConnectionReset", r.err)
	}
}

// FuzzListenerHandshake feeds the listener's side of the handshake, and
// the message decoder, arbitrary client bytes: nothing panics or reads
// past what a message announces, and what decodes encodes back to the same
// bytes. The seeds are a whole valid exchange and its pieces.
func FuzzListenerHandshake(f *testing.F) {
	c, err := Init(new(Params).SetFeatures(FeatureTag), nil)
	if err != nil {
		f.Fatal(err)
	}
	defer c.Cleanup()
	w, err := c.NewWorker(nil)
	if err != nil {
		f.Fatal(err)
	}
	addr := bytes.Clone(w.address)
	w.Destroy()
	hello := csMsg{typ: csHello, flags: csFlagClientID, clientID: 9}
	req := csMsg{typ: csRequest, addr: addr}
	for _, m := range []csMsg{hello, {typ: csChallenge, flags: csFlagKeyed}, req, {typ: csAccept, addr: addr},
		{typ: csReject, reason: csReasonAuth}, {typ: csReady}} {
		b := m.encode()
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add(append(hello.encode(), req.encode()...))
	f.Add([]byte{})
	key := deriveCSKey(nil)
	all := []uint8{csHello, csChallenge, csRequest, csAccept, csReject, csReady}
	f.Fuzz(func(t *testing.T, b []byte) {
		if m, err := decodeCSMsg(b, all...); err == nil {
			if !bytes.Equal(m.encode(), b) {
				t.Fatalf("%x decodes to %+v, which encodes to %x", b, m, m.encode())
			}
			if len(m.addr) > 0 {
				decodeWorkerAddress(m.addr)
			}
		}
		rw := struct {
			io.Reader
			io.Writer
		}{bytes.NewReader(b), io.Discard}
		if _, _, _, err := serverHandshake(rw, key, false); err == nil {
			t.Fatalf("%x passed the handshake without the server's nonce", b)
		}
	})
}

// TestListenerSlowClient keeps a client that never confirms its accept
// beside a good one: the listener's accept handler (which runs from the
// server's Progress) does not wait for the slow one, so the good one is
// served long before the slow one's handshake timeout (10 minutes here).
func TestListenerSlowClient(t *testing.T) {
	setKey(t, 0)
	c := newCSContext(t, "posix")
	accepted := make(chan *Endpoint, 2)
	s := startCSServer(t, c, new(ListenerParams).SetSockAddr(loopback4).SetHandshakeTimeout(10*time.Minute).
		SetAcceptHandler(func(ep *Endpoint, _ any) { accepted <- ep }, nil))
	cw := newWorker(t, c)
	slow := dialRaw(t, s.addr)
	slow.sendHello()
	slow.readChallenge()
	slow.write(slow.request(cw.address).encode())
	if _, err := readCSMsg(slow.c, csAccept); err != nil {
		t.Fatalf("the slow client's accept: %v", err)
	}
	if r := result(t, dial(cw, s.addr, nil)); r.err != nil {
		t.Fatalf("the good client: %v", r.err)
	}
	for range 2 {
		(<-accepted).Close(CloseModeForce)
	}
}

// TestListenerDestroy destroys a listener with clients in every state,
// and a worker with a live listener: their goroutines end and their
// descriptors are closed.
func TestListenerDestroy(t *testing.T) {
	setKey(t, 0)
	c := newCSContext(t, "posix")
	cw := newWorker(t, c)
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skipf("cannot count descriptors: %v", err)
		}
		return len(ents)
	}
	listenerStacks := func() string {
		buf := make([]byte, 1<<20)
		var found []string
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, "ucp.(*Listener)") {
				found = append(found, g)
			}
		}
		return strings.Join(found, "\n\n")
	}
	for _, how := range []string{"Listener.Destroy", "Worker.Destroy"} {
		t.Run(how, func(t *testing.T) {
			sw, err := c.NewWorker(nil)
			if err != nil {
				t.Fatal(err)
			}
			defer sw.Destroy()
			var reqs []*ConnRequest
			l, err := sw.NewListener(new(ListenerParams).SetSockAddr(loopback4).
				SetConnHandler(func(r *ConnRequest, _ any) { reqs = append(reqs, r) }, nil))
			if err != nil {
				t.Fatal(err)
			}
			addr := l.Query().SockAddr
			before := fds()
			silent := dialRaw(t, addr)
			pending := dialRaw(t, addr)
			pending.sendHello()
			pending.readChallenge()
			pending.write(pending.request(cw.address).encode())
			for len(reqs) == 0 {
				sw.Progress()
			}
			if how == "Listener.Destroy" {
				l.Destroy()
			} else {
				sw.Destroy()
			}
			for _, r := range []*rawClient{silent, pending} {
				if !r.closed() {
					t.Error("a client connection stayed open")
				}
				r.c.Close()
			}
			if n := fds(); n > before {
				t.Errorf("%d descriptors open after %s, %d before the clients came", n, how, before)
			}
			// A goroutine that has signalled its wait group may still be
			// on its way out (runnable at its last line): give it a
			// moment, bounded, before calling it left behind.
			g := listenerStacks()
			for deadline := time.Now().Add(5 * time.Second); g != "" && time.Now().Before(deadline); g = listenerStacks() {
				time.Sleep(time.Millisecond)
			}
			if g != "" {
				t.Errorf("listener goroutines after %s:\n%s", how, g)
			}
			if _, err := sw.NewEndpoint(new(EPParams).SetConnRequest(reqs[0])); err == nil {
				t.Error("accepted a request of a destroyed listener")
			}
			if _, err := net.Dial("tcp", addr.String()); err == nil {
				t.Errorf("%v still accepts connections", addr)
			}
		})
	}
}
