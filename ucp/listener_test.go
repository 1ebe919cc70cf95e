package ucp

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
)

var loopback4 = netip.MustParseAddrPort("127.0.0.1:0")

// newCSContext is a context for client-server tests, with UCX_TLS=tls.
func newCSContext(t testing.TB, tls string) *Context {
	t.Helper()
	return newContextParams(t, new(Params).SetFeatures(FeatureTag|FeatureAM|FeatureRMA|FeatureStream), "TLS", tls)
}

// csServer is a worker in multi thread mode that a goroutine progresses,
// with a listener whose requests (unless params set a handler) come out of
// reqs.
type csServer struct {
	w    *Worker
	l    *Listener
	reqs chan *ConnRequest
	addr netip.AddrPort
}

func startCSServer(t testing.TB, c *Context, lp *ListenerParams) *csServer {
	t.Helper()
	w, err := c.NewWorker(new(WorkerParams).SetThreadMode(ucs.ThreadModeMulti))
	if err != nil {
		t.Fatalf("NewWorker: %v", err)
	}
	t.Cleanup(w.Destroy)
	s := &csServer{w: w, reqs: make(chan *ConnRequest, 256)}
	if lp == nil {
		lp = new(ListenerParams).SetSockAddr(loopback4)
	}
	if lp.FieldMask&(ListenerParamFieldAcceptHandler|ListenerParamFieldConnHandler) == 0 {
		lp.SetConnHandler(func(r *ConnRequest, _ any) { s.reqs <- r }, nil)
	}
	if s.l, err = w.NewListener(lp); err != nil {
		t.Fatalf("NewListener: %v", err)
	}
	s.addr = s.l.Query().SockAddr
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			default:
			}
			if w.Progress() == 0 {
				time.Sleep(20 * time.Microsecond)
			}
		}
	}()
	t.Cleanup(func() {
		close(done)
		<-stopped
		s.l.Destroy()
	})
	return s
}

// next returns the next connection request.
func (s *csServer) next(t testing.TB) *ConnRequest {
	t.Helper()
	select {
	case r := <-s.reqs:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("no connection request after 30 s")
		return nil
	}
}

type epResult struct {
	ep  *Endpoint
	err error
}

// dial connects w to addr in a goroutine, which progresses w until the
// endpoint, returned connecting, is wired or failed; the endpoint (nil on
// failure) comes out of the channel.
func dial(w *Worker, addr netip.AddrPort, params *EPParams) <-chan epResult {
	if params == nil {
		params = new(EPParams)
	}
	params.SetSockAddr(addr).SetFlags(params.Flags | EPParamsFlagClientServer)
	ch := make(chan epResult, 1)
	go func() {
		ep, err := w.NewEndpoint(params)
		if err == nil {
			if err = ep.waitConnected(); err != nil {
				ep.Close(CloseModeForce)
				ep = nil
			}
		}
		ch <- epResult{ep, err}
	}()
	return ch
}

// result waits for a dial.
func result(t testing.TB, ch <-chan epResult) epResult {
	t.Helper()
	select {
	case r := <-ch:
		if r.ep != nil {
			t.Cleanup(func() { r.ep.Close(CloseModeForce) })
		}
		return r
	case <-time.After(60 * time.Second):
		t.Fatal("NewEndpoint to the listener still running after 60 s")
		return epResult{}
	}
}

// acceptNext accepts the next request and returns both endpoints.
func (s *csServer) acceptNext(t testing.TB, ch <-chan epResult) (client, server *Endpoint, req *ConnRequest) {
	t.Helper()
	return s.accept(t, s.next(t), ch)
}

// accept accepts req, the request of the client whose endpoint comes out
// of ch, as acceptNext does.
func (s *csServer) accept(t testing.TB, req *ConnRequest, ch <-chan epResult) (client, server *Endpoint, _ *ConnRequest) {
	t.Helper()
	sep, err := s.w.NewEndpoint(new(EPParams).SetConnRequest(req))
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	t.Cleanup(func() { sep.Close(CloseModeForce) })
	r := result(t, ch)
	if r.err != nil {
		t.Fatalf("client: %v", r.err)
	}
	return r.ep, sep, req
}

// mustWait waits for r (waitDone) and fails the test on an
// error.
func mustWait(t testing.TB, what string, r *Request, err error) {
	t.Helper()
	if err := waitDone(r, err); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// TestListenerConnect connects a client and a server of one process over
// loopback (IPv4 and IPv6) and checks the lanes chosen, the addresses the
// queries report, and tag, AM and RMA traffic both ways.
func TestListenerConnect(t *testing.T) {
	for _, tt := range []struct {
		tls, lane string
		addr      string
	}{
		{"posix,tcp", "posix", "127.0.0.1:0"},
		{"tcp", "tcp", "127.0.0.1:0"},
		{"posix,tcp", "posix", "[::1]:0"},
	} {
		t.Run(tt.tls+"/"+tt.addr, func(t *testing.T) {
			sa := netip.MustParseAddrPort(tt.addr)
			if sa.Addr().Is6() {
				if ln, err := net.Listen("tcp6", "[::1]:0"); err != nil {
					t.Skipf("no IPv6 loopback here: %v", err)
				} else {
					ln.Close()
				}
			}
			c := newCSContext(t, tt.tls)
			s := startCSServer(t, c, new(ListenerParams).SetSockAddr(sa))
			if got := s.addr; got.Addr() != sa.Addr() || got.Port() == 0 {
				t.Fatalf("listener address %v, want %v with a port", got, sa.Addr())
			}
			cw, err := c.NewWorker(new(WorkerParams).SetClientID(42))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(cw.Destroy)
			cep, sep, req := s.acceptNext(t, dial(cw, s.addr, new(EPParams).SetFlags(EPParamsFlagSendClientID)))

			ca, sa2, ra := cep.Query(), sep.Query(), req.Query()
			if ca.RemoteSockAddr != s.addr || ca.LocalSockAddr != sa2.RemoteSockAddr || sa2.LocalSockAddr != s.addr {
				t.Errorf("client %v -> %v, server %v -> %v; listener %v", ca.LocalSockAddr, ca.RemoteSockAddr, sa2.LocalSockAddr, sa2.RemoteSockAddr, s.addr)
			}
			if ra.ClientID != 42 || ra.ClientAddress != ca.LocalSockAddr {
				t.Errorf("request: id %d from %v, want 42 from %v", ra.ClientID, ra.ClientAddress, ca.LocalSockAddr)
			}
			for _, a := range []EPAttr{ca, sa2} {
				if len(a.Lanes) == 0 {
					t.Errorf("%s: no lanes", a.Name)
				}
				for _, l := range a.Lanes {
					if l.Transport != tt.lane || (l.Transport == "tcp" && l.Device != "lo") {
						t.Errorf("%s: lane %+v, want %s (on lo, the connection's device, for tcp)", a.Name, l, tt.lane)
					}
				}
			}
			csTraffic(t, c, cw, s.w, cep, sep)
		})
	}
}

// csTraffic sends a tag message and a stream each way and an active
// message from the client, and puts into memory of the server that it
// mapped.
func csTraffic(t testing.TB, c *Context, cw, sw *Worker, cep, sep *Endpoint) {
	t.Helper()
	for _, d := range []struct {
		name     string
		from, to *Endpoint
	}{{"client to server", cep, sep}, {"server to client", sep, cep}} {
		want := bytes.Repeat([]byte(d.name), 1000)
		buf := make([]byte, len(want))
		rr, _, err := d.to.StreamRecvNBX(buf, new(RequestParam).SetStreamRecvFlags(StreamRecvFlagWaitAll))
		if err != nil {
			t.Fatal(err)
		}
		sr, err := d.from.StreamSendNBX(want, nil)
		if err != nil {
			t.Fatal(err)
		}
		// A stream send of this size goes by rendezvous, which both
		// workers progress: the server's goroutine progresses its worker,
		// the client's is progressed by the wait for its own request.
		if d.from == cep {
			mustWait(t, d.name+": stream send", sr, nil)
			mustWait(t, d.name+": stream receive", rr, nil)
		} else {
			mustWait(t, d.name+": stream receive", rr, nil)
			mustWait(t, d.name+": stream send", sr, nil)
		}
		if !bytes.Equal(buf, want) {
			t.Errorf("%s: the stream's bytes differ", d.name)
		}
	}
	for _, d := range []struct {
		name     string
		from     *Endpoint
		to       *Worker
		msg, tag uint64
	}{{"client to server", cep, sw, 1, 10}, {"server to client", sep, cw, 2, 20}} {
		buf := make([]byte, 64)
		rr, err := d.to.TagRecvNBX(buf, d.tag, ^uint64(0), nil)
		if err != nil {
			t.Fatal(err)
		}
		sr, err := d.from.TagSendNBX([]byte(d.name), d.tag, nil)
		mustWait(t, d.name+": tag send", sr, err)
		mustWait(t, d.name+": tag receive", rr, nil)
		if !bytes.HasPrefix(buf, []byte(d.name)) {
			t.Errorf("%s: received %q", d.name, buf)
		}
	}

	got := make(chan []byte, 1)
	err := sw.SetAMRecvHandler(new(AMHandlerParam).SetID(3).SetFlags(AMFlagWholeMsg).SetCB(
		func(_ any, header, data []byte, _ *AMRecvParam) ucs.Status {
			got <- bytes.Clone(data)
			return ucs.OK
		}))
	if err != nil {
		t.Fatal(err)
	}
	r, err := cep.AMSendNBX(3, nil, []byte("am"), nil)
	mustWait(t, "am send", r, err)
	select {
	case b := <-got:
		if string(b) != "am" {
			t.Errorf("active message %q", b)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no active message after 30 s")
	}

	memh, err := c.MemMap(new(MemMapParams).SetLength(4096).SetFlags(MemMapAllocate))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.MemUnmap(memh) })
	packed, err := c.RkeyPack(memh)
	if err != nil {
		t.Fatal(err)
	}
	rk, err := cep.RkeyUnpack(packed)
	if err != nil {
		t.Fatalf("RkeyUnpack: %v", err)
	}
	defer rk.Destroy()
	r, err = cep.PutNBX([]byte("put"), uint64(uintptr(memh.Address()))+100, rk, nil)
	mustWait(t, "put", r, err)
	if err := cep.Flush(); err != nil {
		t.Fatal(err)
	}
	if m := unsafe.Slice((*byte)(memh.Address()), 4096); string(m[100:103]) != "put" {
		t.Errorf("put landed as %q", m[100:103])
	}
}

// TestListenerManyClients connects 100 clients at once to a listener with
// an accept handler; each then sends the server a tagged message.
func TestListenerManyClients(t *testing.T) {
	c := newCSContext(t, "posix")
	s, eps := startAcceptServer(t, c, new(ListenerParams).SetSockAddr(loopback4))
	connectClients(t, c, s, eps, 100)
}

// acceptedEPs are the endpoints an accept handler got.
type acceptedEPs struct {
	mu  sync.Mutex
	eps []*Endpoint
}

func (a *acceptedEPs) len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.eps)
}

// startAcceptServer starts a server whose listener (lp, with an accept
// handler added) accepts every client; the endpoints come out of eps.
func startAcceptServer(t testing.TB, c *Context, lp *ListenerParams) (s *csServer, eps *acceptedEPs) {
	eps = new(acceptedEPs)
	s = startCSServer(t, c, lp.SetAcceptHandler(func(ep *Endpoint, _ any) {
		eps.mu.Lock()
		eps.eps = append(eps.eps, ep)
		eps.mu.Unlock()
	}, nil))
	return s, eps
}

// connectClients connects n clients, each with a worker of its own, at
// once to s (a startAcceptServer, which accepted len(eps) before); each
// sends s a tagged message, which s receives, and closes its endpoint.
func connectClients(t testing.TB, c *Context, s *csServer, eps *acceptedEPs, n int) {
	before := eps.len()
	recvs := make([]*Request, n)
	bufs := make([][]byte, n)
	tag0 := uint64(1000 + before)
	for i := range recvs {
		bufs[i] = make([]byte, 8)
		var err error
		if recvs[i], err = s.w.TagRecvNBX(bufs[i], tag0+uint64(i), ^uint64(0), nil); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := c.NewWorker(nil)
			if err != nil {
				errs <- err
				return
			}
			defer w.Destroy()
			r := <-dial(w, s.addr, nil)
			if r.err != nil {
				errs <- fmt.Errorf("client %d: %w", i, r.err)
				return
			}
			req, err := r.ep.TagSendNBX([]byte(fmt.Sprintf("c%07d", i)), tag0+uint64(i), nil)
			if err == nil && req != nil {
				err = req.Wait()
			}
			if err == nil {
				err = r.ep.Close(CloseModeFlush)
			}
			if err != nil {
				errs <- fmt.Errorf("client %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		t.Error(err)
		failed++
	}
	if failed > 0 {
		t.Fatalf("%d of %d clients failed", failed, n)
	}
	for i, r := range recvs {
		if err := r.Wait(); err != nil {
			t.Fatalf("receive %d: %v", i, err)
		}
		if want := fmt.Sprintf("c%07d", i); string(bufs[i]) != want {
			t.Errorf("receive %d: %q, want %q", i, bufs[i], want)
		}
	}
	// The server's accepts return after their clients' confirmation,
	// which may be after the clients' messages came.
	for deadline := time.Now().Add(30 * time.Second); eps.len() != before+n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d endpoints accepted after 30 s, want %d", eps.len()-before, n)
		}
	}
}

// TestListenerReject rejects a client, which fails with ucs.ErrRejected,
// and then serves the next one.
func TestListenerReject(t *testing.T) {
	c := newCSContext(t, "posix")
	s := startCSServer(t, c, nil)
	cw := newWorker(t, c)
	ch := dial(cw, s.addr, nil)
	req := s.next(t)
	if err := s.l.Reject(req); err != nil {
		t.Fatalf("Reject: %v", err)
	}
	if r := result(t, ch); !errors.Is(r.err, ucs.ErrRejected) {
		t.Fatalf("rejected client: %v, want ucs.ErrRejected", r.err)
	}
	if err := s.l.Reject(req); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("second Reject: %v, want ucs.ErrInvalidParam", err)
	}
	if _, err := s.w.NewEndpoint(new(EPParams).SetConnRequest(req)); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("accept after Reject: %v, want ucs.ErrInvalidParam", err)
	}
	s.acceptNext(t, dial(cw, s.addr, nil))
}

// setKey sets GOSHMEM_KEY to a key made of b, or unsets it for 0.
func setKey(t *testing.T, b byte) {
	t.Setenv("UCX_TCP_KEY", "")
	if b == 0 {
		t.Setenv("GOSHMEM_KEY", "")
		return
	}
	t.Setenv("GOSHMEM_KEY", base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, 32)))
}

// TestListenerKey checks the authentication: a client without the
// listener's key, or with another, is refused before the application sees
// it; one with the key gets in.
func TestListenerKey(t *testing.T) {
	for _, tt := range []struct {
		name           string
		server, client byte // key bytes; 0: none
		want           error
	}{
		{"same key", 1, 1, nil},
		{"client without key", 1, 0, ucs.ErrRejected},
		{"other key", 1, 2, ucs.ErrRejected},
		{"server without key, client with one", 0, 1, ucs.ErrRejected},
		{"no key on either side", 0, 0, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			setKey(t, tt.server)
			c := newCSContext(t, "posix")
			s := startCSServer(t, c, nil)
			setKey(t, tt.client)
			cw := newWorker(t, c)
			ch := dial(cw, s.addr, nil)
			if tt.want == nil {
				s.acceptNext(t, ch)
				return
			}
			if r := result(t, ch); !errors.Is(r.err, tt.want) {
				t.Fatalf("client: %v, want %v", r.err, tt.want)
			}
			select {
			case r := <-s.reqs:
				t.Fatalf("the application got the request of %v", r.Query().ClientAddress)
			default:
			}
		})
	}
}

// TestListenerParams checks the parameters NewListener refuses, among them
// a listener without a key on an address other than loopback.
func TestListenerParams(t *testing.T) {
	setKey(t, 0)
	c := newCSContext(t, "posix")
	w := newWorker(t, c)
	h := func(*ConnRequest, any) {}
	any4 := netip.MustParseAddrPort("0.0.0.0:0")
	for _, tt := range []struct {
		name string
		p    *ListenerParams
		want error
	}{
		{"no address", new(ListenerParams).SetConnHandler(h, nil), ucs.ErrInvalidParam},
		{"no handler", new(ListenerParams).SetSockAddr(loopback4), ucs.ErrInvalidParam},
		{"two handlers", new(ListenerParams).SetSockAddr(loopback4).SetConnHandler(h, nil).SetAcceptHandler(func(*Endpoint, any) {}, nil), ucs.ErrInvalidParam},
		{"unknown flag", new(ListenerParams).SetSockAddr(loopback4).SetConnHandler(h, nil).SetFlags(1 << 7), ucs.ErrInvalidParam},
		{"bad timeout", new(ListenerParams).SetSockAddr(loopback4).SetConnHandler(h, nil).SetHandshakeTimeout(-1), ucs.ErrInvalidParam},
		{"unauthenticated, all addresses", new(ListenerParams).SetSockAddr(any4).SetConnHandler(h, nil), ucs.ErrInvalidParam},
		{"unauthenticated, all addresses, allowed", new(ListenerParams).SetSockAddr(any4).SetConnHandler(h, nil).SetFlags(ListenerFlagAllowUnauthenticated), nil},
		{"loopback", new(ListenerParams).SetSockAddr(loopback4).SetConnHandler(h, nil), nil},
		{"IPv4-mapped loopback", new(ListenerParams).SetSockAddr(netip.MustParseAddrPort("[::ffff:127.0.0.1]:0")).SetConnHandler(h, nil), nil},
	} {
		l, err := w.NewListener(tt.p)
		if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
		if l != nil {
			l.Destroy()
			l.Destroy()
		}
	}
	for _, v := range []string{"CS_HANDSHAKE_TIMEOUT=0", "CS_ACCEPT_TIMEOUT=soon", "CS_HANDSHAKE_TIMEOUT=-1s"} {
		cfg, err := ReadConfig("", "")
		if err != nil {
			t.Fatal(err)
		}
		name, val, _ := strings.Cut(v, "=")
		if err := cfg.Modify(name, val); err != nil {
			t.Fatal(err)
		}
		if c, err := Init(new(Params).SetFeatures(FeatureTag), cfg); !errors.Is(err, ucs.ErrInvalidParam) {
			t.Errorf("Init with UCX_%s: %v, want ucs.ErrInvalidParam", v, err)
			if c != nil {
				c.Cleanup()
			}
		}
	}
	// The port of a live listener is busy.
	l, err := w.NewListener(new(ListenerParams).SetSockAddr(loopback4).SetConnHandler(h, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Destroy()
	if _, err := w.NewListener(new(ListenerParams).SetSockAddr(l.Query().SockAddr).SetConnHandler(h, nil)); !errors.Is(err, ucs.ErrBusy) {
		t.Errorf("port in use: %v, want ucs.ErrBusy", err)
	}
	for _, p := range []*EPParams{
		new(EPParams).SetFlags(EPParamsFlagClientServer),
		new(EPParams).SetSockAddr(l.Query().SockAddr).SetAddress(w.address),
		new(EPParams).SetSockAddr(netip.AddrPortFrom(loopback4.Addr(), 0)),
		new(EPParams).SetConnRequest(nil),
	} {
		if _, err := w.NewEndpoint(p); !errors.Is(err, ucs.ErrInvalidParam) {
			t.Errorf("endpoint params %#x: %v, want ucs.ErrInvalidParam", p.FieldMask, err)
		}
	}
}

// TestListenerClientID checks that a client sends its worker's client id
// only when the endpoint asks to (EPParamsFlagSendClientID) and the
// worker has one (WorkerParamFieldClientID set in its mask: a ClientID
// without its bit does not count), and that the server reads 0 otherwise.
func TestListenerClientID(t *testing.T) {
	c := newCSContext(t, "posix")
	s := startCSServer(t, c, nil)
	for _, tt := range []struct {
		name   string
		wp     *WorkerParams
		flags  EPParamsFlags
		wantID uint64
	}{
		{"id and flag", new(WorkerParams).SetClientID(42), EPParamsFlagSendClientID, 42},
		{"id without flag", new(WorkerParams).SetClientID(42), 0, 0},
		{"flag, id without its mask bit", &WorkerParams{ClientID: 42}, EPParamsFlagSendClientID, 0},
		{"flag, no id", nil, EPParamsFlagSendClientID, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cw, err := c.NewWorker(tt.wp)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(cw.Destroy)
			p := new(EPParams)
			if tt.flags != 0 {
				p.SetFlags(tt.flags)
			}
			_, _, req := s.acceptNext(t, dial(cw, s.addr, p))
			if got := req.Query().ClientID; got != tt.wantID {
				t.Errorf("client id %d, want %d", got, tt.wantID)
			}
		})
	}
}
