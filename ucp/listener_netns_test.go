package ucp

import (
	"fmt"
	"io"
	"net/netip"
	"strings"
	"testing"

	"github.com/goshmem/goshmem/internal/nstest"
	"github.com/goshmem/goshmem/internal/testpeer"
)

// runCSServerProcess is a client-server test's server process (testpeer
// role "ucp-listener"): it listens on the address of its argument, prints
// "listening on ADDR", accepts one client, prints the lanes of the
// endpoint ("server lane TRANSPORT"), echoes its tagged messages (tag|1)
// until the tag 0, and exits.
func runCSServerProcess(args []string, _ io.Reader, out io.Writer) error {
	if len(args) != 1 {
		return fmt.Errorf("arguments %q, want an address", args)
	}
	sa, err := netip.ParseAddrPort(args[0])
	if err != nil {
		return err
	}
	c, err := Init(new(Params).SetFeatures(FeatureTag), nil)
	if err != nil {
		return err
	}
	defer c.Cleanup()
	w, err := c.NewWorker(nil)
	if err != nil {
		return err
	}
	defer w.Destroy()
	var eps []*Endpoint
	l, err := w.NewListener(new(ListenerParams).SetSockAddr(sa).SetAcceptHandler(func(ep *Endpoint, _ any) { eps = append(eps, ep) }, nil))
	if err != nil {
		return err
	}
	defer l.Destroy()
	fmt.Fprintf(out, "listening on %v\n", l.Query().SockAddr)
	for len(eps) == 0 {
		if w.Progress() == 0 {
			w.Idle()
		}
	}
	ep := eps[0]
	for _, ln := range ep.Query().Lanes {
		fmt.Fprintf(out, "server lane %s\n", ln.Transport)
	}
	buf := make([]byte, 256)
	for {
		var info TagRecvInfo
		r, err := w.TagRecvNBX(buf, 0, 0, new(RequestParam).SetOpAttrFlags(OpAttrFlagNoImmCmpl))
		if err == nil {
			err = r.Wait()
			r.Test(&info)
			r.Free()
		}
		if err != nil {
			return err
		}
		if info.SenderTag == 0 {
			return ep.Close(CloseModeFlush)
		}
		if err := waitDone(ep.TagSendNBX(buf[:info.Length], info.SenderTag|1, nil)); err != nil {
			return err
		}
	}
}

// TestListenerNetns connects to a server in another network namespace (and
// IPC, UTS and mount namespace: another host): the handshake crosses the
// veth pair, the lanes are tcp, and tagged messages go both ways.
func TestListenerNetns(t *testing.T) {
	h := nstest.New(t)
	t.Setenv("GOSHMEM_KEY", testJobKey)
	t.Setenv("UCX_TCP_KEY", "")
	// Hosts meet over tcp, whatever transports the suite runs with (CI
	// runs it with UCX_TLS=sm too).
	t.Setenv("UCX_TLS", "posix,tcp")
	srv := testpeer.Start(t, "ucp-listener", testpeer.Options{
		Args:    []string{netip.AddrPortFrom(h.IP, 0).String()},
		Command: h.Command,
	})
	line, err := srv.Next()
	if err != nil {
		t.Fatalf("the server did not say where it listens: %v", err)
	}
	addr, err := netip.ParseAddrPort(strings.TrimPrefix(line, "listening on "))
	if err != nil {
		t.Fatalf("the server said %q: %v", line, err)
	}
	c := newCSContext(t, "posix,tcp")
	w := newWorker(t, c)
	r := result(t, dial(w, addr, nil))
	if r.err != nil {
		srv.Kill()
		srv.Wait() // for its last words
		t.Fatalf("connect to %v: %v\nserver: %s", addr, r.err, srv.Stderr())
	}
	a := r.ep.Query()
	if a.RemoteSockAddr != addr || a.LocalSockAddr.Addr() != h.PeerIP {
		t.Errorf("connection %v -> %v, want %v -> %v", a.LocalSockAddr, a.RemoteSockAddr, h.PeerIP, addr)
	}
	for _, l := range a.Lanes {
		if l.Transport != "tcp" {
			t.Errorf("lane %+v, want tcp to another host", l)
		}
	}
	for i := uint64(1); i <= 3; i++ {
		tag := i << 8
		got := make([]byte, 16)
		rr, err := w.TagRecvNBX(got, tag|1, ^uint64(0), nil)
		if err != nil {
			t.Fatal(err)
		}
		sr, err := r.ep.TagSendNBX([]byte(fmt.Sprintf("message %d", i)), tag, nil)
		mustWait(t, "send", sr, err)
		mustWait(t, "echo", rr, nil)
		if want := fmt.Sprintf("message %d", i); !strings.HasPrefix(string(got), want) {
			t.Errorf("echo %q, want %q", got, want)
		}
	}
	sr, err := r.ep.TagSendNBX(nil, 0, nil)
	mustWait(t, "goodbye", sr, err)
	r.ep.Close(CloseModeFlush)
	rest, err := srv.Rest()
	sout := strings.Join(rest, "\n")
	if err != nil {
		t.Fatalf("server: %v\n%s", err, sout)
	}
	if !strings.Contains(sout, "server lane tcp") || strings.Contains(sout, "server lane posix") {
		t.Errorf("server lanes:\n%s", sout)
	}
}
