package ucp

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// csTestTimeout is the handshake timeout of the tests that wait for it: a
// second, so that the steps meant to succeed do so on a loaded machine.
const csTestTimeout = time.Second

// cmClient connects to addr through w's connection manager with priv as
// its private data, below ucp's client: its result comes out of the
// channel, and it confirms only when the test calls ConnNotify.
func cmClient(t testing.TB, w *Worker, addr netip.AddrPort, priv []byte) (uct.CMEP, <-chan *uct.CMConnectArgs) {
	t.Helper()
	cm, err := w.connManager()
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan *uct.CMConnectArgs, 1)
	ep, err := cm.EPCreate(&uct.CMEPParams{SockAddr: addr,
		PackPriv: func(any, *uct.CMPackArgs) ([]byte, error) { return priv, nil },
		Connect:  func(_ uct.CMEP, _ any, a *uct.CMConnectArgs) { res <- a }})
	if err != nil {
		t.Fatalf("CM EPCreate: %v", err)
	}
	t.Cleanup(ep.Destroy)
	return ep, res
}

// cmResult waits for a cmClient's result.
func cmResult(t testing.TB, ch <-chan *uct.CMConnectArgs) *uct.CMConnectArgs {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(60 * time.Second):
		t.Fatal("no answer from the listener after 60 s")
		return nil
	}
}

// TestListenerBadPrivData connects clients whose private data is not
// ucp's: each is rejected before the application sees it, and a good
// client is served after them.
func TestListenerBadPrivData(t *testing.T) {
	setKey(t, 0)
	c := newCSContext(t, "posix")
	s := startCSServer(t, c, nil)
	cw := newWorker(t, c)
	good := encodeCSPriv(cw.address, 0, false)
	for _, tt := range []struct {
		name string
		priv []byte
	}{
		{"short", []byte{csPrivVersion}},
		{"other version", append([]byte{9}, good[1:]...)},
		{"unknown flags", append([]byte{csPrivVersion, 0x80}, good[2:]...)},
		{"client id without its flag", append([]byte{csPrivVersion, 0, 1}, good[3:]...)},
		{"junk worker address", encodeCSPriv([]byte("GWA\x01junk"), 0, false)},
		{"no worker address", good[:csPrivHeaderLen]},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, ch := cmClient(t, cw, s.addr, tt.priv)
			if a := cmResult(t, ch); !errors.Is(a.Status, ucs.ErrRejected) {
				t.Fatalf("client: %v, want ucs.ErrRejected", a.Status)
			}
			select {
			case req := <-s.reqs:
				t.Fatalf("a request from %v reached the application", req.Query().ClientAddress)
			default:
			}
		})
	}
	s.acceptNext(t, dial(cw, s.addr, nil))
}

// TestListenerClientNoConfirm accepts a client that never confirms (it
// leaves, or stays silent): the server's endpoint, in error mode PEER,
// fails as on the loss of its peer, and the worker keeps no endpoint of
// it.
func TestListenerClientNoConfirm(t *testing.T) {
	setKey(t, 0)
	c := newCSContext(t, "posix")
	s := startCSServer(t, c, new(ListenerParams).SetSockAddr(loopback4).SetHandshakeTimeout(csTestTimeout))
	cw := newWorker(t, c)
	for _, tt := range []struct {
		name  string
		after func(ep uct.CMEP)
		want  error
	}{
		{"leaves", func(ep uct.CMEP) { ep.Destroy() }, ucs.ErrConnectionReset},
		{"silent", func(uct.CMEP) {}, ucs.ErrTimedOut},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cep, ch := cmClient(t, cw, s.addr, encodeCSPriv(cw.address, 0, false))
			req := s.next(t)
			s.w.epMu.Lock()
			before := len(s.w.eps)
			s.w.epMu.Unlock()
			failed := make(chan error, 1)
			ep, err := s.w.NewEndpoint(new(EPParams).SetConnRequest(req).SetErrMode(ErrHandlingModePeer).
				SetErrHandler(func(_ any, ep *Endpoint, st error) { failed <- st }))
			if err != nil {
				t.Fatalf("accept: %v", err)
			}
			if a := cmResult(t, ch); a.Status != nil {
				t.Fatalf("client: %v", a.Status)
			}
			tt.after(cep)
			select {
			case err = <-failed:
			case <-time.After(20 * time.Second):
				t.Fatal("the accepted endpoint did not fail in 20 s")
			}
			ep.Close(CloseModeForce)
			if !errors.Is(err, tt.want) {
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
	_, ch := cmClient(t, cw, s.addr, encodeCSPriv(cw.address, 0, false))
	if a := cmResult(t, ch); a.Status != nil {
		t.Fatalf("the slow client's accept: %v", a.Status)
	}
	if r := result(t, dial(cw, s.addr, nil)); r.err != nil {
		t.Fatalf("the good client: %v", r.err)
	}
	for range 2 {
		(<-accepted).Close(CloseModeForce)
	}
}

// TestListenerServerDestroyed destroys a listener while its client waits
// for the application: the client fails with ucs.ErrConnectionReset.
func TestListenerServerDestroyed(t *testing.T) {
	setKey(t, 0)
	c := newCSContext(t, "posix")
	cw := newWorker(t, c)
	s := startCSServer(t, c, nil)
	ch := dial(cw, s.addr, nil)
	s.next(t)
	s.l.Destroy()
	if r := result(t, ch); !errors.Is(r.err, ucs.ErrConnectionReset) {
		t.Fatalf("client of a listener destroyed while it waited: %v, want ucs.ErrConnectionReset", r.err)
	}
}

// closedByPeer reports whether the peer closed c (a read ends other than
// by its deadline: 20 s, a hang guard), after whatever it sent.
func closedByPeer(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	var b [4096]byte
	for {
		if _, err := c.Read(b[:]); err != nil {
			var ne net.Error
			return !(errors.As(err, &ne) && ne.Timeout())
		}
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
			if strings.Contains(g, "ucp.(*Listener)") || strings.Contains(g, "tcp.(*cmListener)") {
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
			silent, err := net.Dial("tcp", addr.String())
			if err != nil {
				t.Fatal(err)
			}
			defer silent.Close()
			_, pending := cmClient(t, cw, addr, encodeCSPriv(cw.address, 0, false))
			for len(reqs) == 0 {
				sw.Progress()
			}
			if how == "Listener.Destroy" {
				l.Destroy()
			} else {
				sw.Destroy()
			}
			if !closedByPeer(silent) {
				t.Error("a silent client's connection stayed open")
			}
			silent.Close()
			if a := cmResult(t, pending); !errors.Is(a.Status, ucs.ErrConnectionReset) {
				t.Errorf("a pending client: %v, want ucs.ErrConnectionReset", a.Status)
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

// FuzzCSPriv feeds ucp's decoder of client-server private data arbitrary
// bytes: nothing panics, and what decodes encodes back to the same bytes.
func FuzzCSPriv(f *testing.F) {
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
	for _, b := range [][]byte{encodeCSPriv(addr, 9, true), encodeCSPriv(addr, 0, false), {}} {
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		id, ra, err := decodeCSPriv(b)
		if err != nil {
			return
		}
		if ra == nil {
			t.Fatalf("%x decodes without an address", b)
		}
		if got := encodeCSPriv(b[csPrivHeaderLen:], id, b[1]&csPrivClientID != 0); !bytes.Equal(got, b) {
			t.Fatalf("%x decodes to id %d, which encodes to %x", b, id, got)
		}
	})
}
