package ucp

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goshmem/goshmem/ucs"
)

// progressAll progresses the workers, from this goroutine alone, until
// done reports true (waitFor's limit).
func progressAll(t *testing.T, what string, done func() bool, ws ...*Worker) {
	t.Helper()
	waitFor(t, what, func() bool {
		for _, w := range ws {
			w.Progress()
		}
		return done()
	})
}

// closedPort returns a loopback address nobody listens on.
func closedPort(t *testing.T) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

// TestClientEndpointConnectsInBackground runs a server and a client in one
// goroutine, as a UCX program may: NewEndpoint returns at once, sends
// issued before the server even saw the request wait, and they arrive in
// order once the one goroutine progresses both workers.
func TestClientEndpointConnectsInBackground(t *testing.T) {
	for _, tls := range []string{"posix,tcp", "tcp"} {
		t.Run(tls, func(t *testing.T) {
			c := newCSContext(t, tls)
			sw, err := c.NewWorker(nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(sw.Destroy)
			cw, err := c.NewWorker(nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(cw.Destroy)
			var req *ConnRequest
			l, err := sw.NewListener(new(ListenerParams).SetSockAddr(loopback4).
				SetConnHandler(func(r *ConnRequest, _ any) { req = r }, nil))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Destroy()

			start := time.Now()
			cep, err := cw.NewEndpoint(new(EPParams).SetSockAddr(l.Query().SockAddr).SetFlags(EPParamsFlagClientServer))
			if err != nil {
				t.Fatal(err)
			}
			defer cep.Close(CloseModeForce)
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("NewEndpoint took %v", d)
			}
			// Issued while connecting: two tagged messages, a stream, an
			// active message, a flush; the force flag cannot wait.
			var reqs []*Request
			for i, m := range []string{"first", "second"} {
				r, err := cep.TagSendNBX([]byte(m), uint64(7), nil)
				if err != nil || r == nil {
					t.Fatalf("tag send %d while connecting: %v, %v", i, r, err)
				}
				if !strings.Contains(r.Query().DebugString, "connecting") {
					t.Errorf("request %q does not say it waits for the connection", r.Query().DebugString)
				}
				reqs = append(reqs, r)
			}
			if _, err := cep.TagSendNBX([]byte("x"), 7, new(RequestParam).SetOpAttrFlags(OpAttrFlagForceImmCmpl)); !errors.Is(err, ucs.ErrNoResource) {
				t.Errorf("force-immediate send while connecting: %v, want ErrNoResource", err)
			}
			sr, err := cep.StreamSendNBX([]byte("stream bytes"), nil)
			if err != nil {
				t.Fatal(err)
			}
			amGot := make(chan string, 1)
			if err := sw.SetAMRecvHandler(new(AMHandlerParam).SetID(5).SetFlags(AMFlagWholeMsg).SetCB(
				func(_ any, _, data []byte, _ *AMRecvParam) ucs.Status { amGot <- string(data); return ucs.OK })); err != nil {
				t.Fatal(err)
			}
			ar, err := cep.AMSendNBX(5, nil, []byte("am"), nil)
			if err != nil {
				t.Fatal(err)
			}
			fr, err := cep.EPFlushNBX(nil)
			if err != nil || fr == nil {
				t.Fatalf("flush while connecting: %v, %v", fr, err)
			}
			reqs = append(reqs, sr, ar, fr)

			progressAll(t, "connection request", func() bool { return req != nil }, sw, cw)
			sep, err := sw.NewEndpoint(new(EPParams).SetConnRequest(req))
			if err != nil {
				t.Fatal(err)
			}
			defer sep.Close(CloseModeForce)
			var bufs [2][16]byte
			var recvs []*Request
			for i := range bufs {
				r, err := sw.TagRecvNBX(bufs[i][:], 7, ^uint64(0), nil)
				if err != nil {
					t.Fatal(err)
				}
				if r != nil {
					recvs = append(recvs, r)
				}
			}
			progressAll(t, "the sends", func() bool {
				for _, r := range append(reqs, recvs...) {
					if !r.IsCompleted() {
						return false
					}
				}
				return true
			}, sw, cw)
			for i, r := range reqs {
				if err := r.Status(); err != nil {
					t.Errorf("request %d: %v", i, err)
				}
				r.Free()
			}
			for i, want := range []string{"first", "second"} {
				if got := string(bytes.TrimRight(bufs[i][:], "\x00")); got != want {
					t.Errorf("message %d: %q, want %q (order kept)", i, got, want)
				}
			}
			sbuf := make([]byte, len("stream bytes"))
			rr, _, err := sep.StreamRecvNBX(sbuf, new(RequestParam).SetStreamRecvFlags(StreamRecvFlagWaitAll))
			if err != nil {
				t.Fatal(err)
			}
			if rr != nil {
				progressAll(t, "the stream", rr.IsCompleted, sw, cw)
			}
			if string(sbuf) != "stream bytes" {
				t.Errorf("stream %q", sbuf)
			}
			select {
			case m := <-amGot:
				if m != "am" {
					t.Errorf("active message %q", m)
				}
			default:
				t.Error("no active message")
			}
			if a := cep.Query(); len(a.Lanes) == 0 || a.RemoteSockAddr != l.Query().SockAddr {
				t.Errorf("wired endpoint: %+v", a)
			}
			if err := cep.Status(); err != nil {
				t.Errorf("Status: %v", err)
			}
		})
	}
}

// TestClientEndpointConnectFails checks what a client's endpoint does when
// its connection fails: operations issued while it connected complete with
// the connection's error, later ones fail with it, Status reports it, and
// in error mode PEER the error handler is called once.
func TestClientEndpointConnectFails(t *testing.T) {
	c := newCSContext(t, "tcp")
	closed := closedPort(t)
	// A listener that rejects every client.
	rw, err := c.NewWorker(new(WorkerParams).SetThreadMode(ucs.ThreadModeMulti))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rw.Destroy)
	var rl *Listener
	rl, err = rw.NewListener(new(ListenerParams).SetSockAddr(loopback4).
		SetConnHandler(func(r *ConnRequest, _ any) { rl.Reject(r) }, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Destroy()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if rw.Progress() == 0 {
				time.Sleep(20 * time.Microsecond)
			}
		}
	}()

	for _, tt := range []struct {
		name string
		addr netip.AddrPort
		want error
	}{
		{"unreachable", closed, ucs.ErrUnreachable},
		{"rejected", rl.Query().SockAddr, ucs.ErrRejected},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w, err := c.NewWorker(nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(w.Destroy)
			calls := 0
			var herr error
			ep, err := w.NewEndpoint(new(EPParams).SetSockAddr(tt.addr).SetFlags(EPParamsFlagClientServer).
				SetErrMode(ErrHandlingModePeer).SetErrHandler(func(_ any, _ *Endpoint, st error) { calls++; herr = st }))
			if err != nil {
				t.Fatalf("NewEndpoint: %v (the failure must come later)", err)
			}
			r, err := ep.TagSendNBX([]byte("lost"), 1, nil)
			if err != nil || r == nil {
				t.Fatalf("send while connecting: %v, %v", r, err)
			}
			progressAll(t, "the failure", func() bool { return r.IsCompleted() && calls > 0 }, w)
			if err := r.Status(); !errors.Is(err, tt.want) {
				t.Errorf("waiting send: %v, want %v", err, tt.want)
			}
			r.Free()
			if _, err := ep.TagSendNBX([]byte("late"), 1, nil); !errors.Is(err, tt.want) {
				t.Errorf("later send: %v, want %v", err, tt.want)
			}
			if _, err := ep.RkeyUnpack([]byte{1}); !errors.Is(err, tt.want) {
				t.Errorf("rkey unpack: %v, want %v", err, tt.want)
			}
			if err := ep.Status(); !errors.Is(err, tt.want) {
				t.Errorf("Status: %v, want %v", err, tt.want)
			}
			for i := 0; i < 10; i++ {
				w.Progress()
			}
			if calls != 1 || !errors.Is(herr, tt.want) {
				t.Errorf("error handler: %d calls, last %v; want 1 with %v", calls, herr, tt.want)
			}
			// A failed endpoint closes at once, in either mode.
			if err := ep.Close(CloseModeFlush); err != nil && !errors.Is(err, tt.want) {
				t.Errorf("close in flush mode: %v", err)
			}
			if _, err := ep.TagSendNBX([]byte("closed"), 1, nil); !errors.Is(err, ErrClosed) {
				t.Errorf("send after close: %v, want ErrClosed", err)
			}
		})
	}
}

// TestClientEndpointClosedWhileConnecting closes a client's endpoint, and
// destroys a worker, while the server has not answered: the waiting
// operations complete with ucs.ErrCanceled, the server sees the client
// leave, and nothing is left behind.
func TestClientEndpointClosedWhileConnecting(t *testing.T) {
	c := newCSContext(t, "tcp")
	s := startCSServer(t, c, nil)
	w, err := c.NewWorker(nil)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := w.NewEndpoint(new(EPParams).SetSockAddr(s.addr).SetFlags(EPParamsFlagClientServer))
	if err != nil {
		t.Fatal(err)
	}
	r, err := ep.TagSendNBX([]byte("never"), 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	req := s.next(t) // the server's application has it, and waits
	if err := ep.Close(CloseModeForce); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := r.Status(); !errors.Is(err, ucs.ErrCanceled) {
		t.Errorf("waiting send after close: %v, want ErrCanceled", err)
	}
	r.Free()
	if _, err := s.w.NewEndpoint(new(EPParams).SetConnRequest(req)); err == nil {
		// Accepting may still succeed (the client's leaving is seen on
		// the next read); the client never confirms then, which the
		// listener handles. Either way the server goes on.
		t.Log("the server accepted a client that left")
	}

	// A worker destroyed with an endpoint that connects.
	ep2, err := w.NewEndpoint(new(EPParams).SetSockAddr(s.addr).SetFlags(EPParamsFlagClientServer))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := ep2.StreamSendNBX([]byte("never"), nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Destroy()
	if err := r2.Status(); !errors.Is(err, ucs.ErrCanceled) {
		t.Errorf("waiting send after Destroy: %v, want ErrCanceled", err)
	}
	if _, err := ep2.TagSendNBX([]byte("x"), 1, nil); err == nil {
		t.Error("send on an endpoint of a destroyed worker succeeded")
	}
}

// TestClientEndpointConnectFailsModeNone: in error mode NONE a failed
// connection calls no handler; operations fail with its error, and a close
// in flush mode reports it and closes the endpoint.
func TestClientEndpointConnectFailsModeNone(t *testing.T) {
	c := newCSContext(t, "tcp")
	closed := closedPort(t)
	w, err := c.NewWorker(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Destroy()
	ep, err := w.NewEndpoint(new(EPParams).SetSockAddr(closed).SetFlags(EPParamsFlagClientServer))
	if err != nil {
		t.Fatal(err)
	}
	err = ep.Flush() // waits for the connection
	if !errors.Is(err, ucs.ErrUnreachable) {
		t.Fatalf("flush: %v, want ErrUnreachable", err)
	}
	if err := ep.Close(CloseModeFlush); !errors.Is(err, ucs.ErrUnreachable) {
		t.Errorf("close in flush mode: %v, want ErrUnreachable", err)
	}
	if _, err := ep.StreamSendNBX([]byte("x"), nil); !errors.Is(err, ErrClosed) {
		t.Errorf("send after close: %v, want ErrClosed", err)
	}
}
