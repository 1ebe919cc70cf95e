package ucp

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/nstest"
)

// csServerEnv makes the test binary a client-server test's server process
// (TestListenerServerProcess): it listens on the address in the variable,
// prints "listening on ADDR", accepts one client, echoes its tagged
// messages (tag|1) until the tag 0, and exits.
const csServerEnv = "GOSHMEM_UCP_TEST_CS_SERVER"

func TestListenerServerProcess(t *testing.T) {
	if os.Getenv(csServerEnv) == "" {
		t.Skip("helper process of TestListenerNetns: runs only with " + csServerEnv + " set")
	}
	if err := runCSServerProcess(netip.MustParseAddrPort(os.Getenv(csServerEnv))); err != nil {
		fmt.Fprintln(os.Stderr, "ucp test server:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runCSServerProcess(sa netip.AddrPort) error {
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
	fmt.Printf("listening on %v\n", l.Query().SockAddr)
	for len(eps) == 0 {
		if w.Progress() == 0 {
			w.Idle()
		}
	}
	ep := eps[0]
	for _, ln := range ep.Query().Lanes {
		fmt.Printf("server lane %s\n", ln.Transport)
	}
	buf := make([]byte, 256)
	for {
		var info TagRecvInfo
		r, err := w.TagRecvNBX(buf, 0, 0, new(RequestParam).SetFlags(OpAttrFlagNoImmCmpl))
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
	srv := h.Command(os.Args[0], "-test.run=^TestListenerServerProcess$")
	srv.Env = append(os.Environ(), csServerEnv+"="+netip.AddrPortFrom(h.IP, 0).String())
	var serr strings.Builder
	srv.Stderr = &serr
	out, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	exited := false
	t.Cleanup(func() {
		if !exited {
			srv.Process.Kill()
			srv.Wait()
		}
	})
	sc := bufio.NewScanner(out)
	var addr netip.AddrPort
	if sc.Scan() {
		addr, _ = netip.ParseAddrPort(strings.TrimPrefix(sc.Text(), "listening on "))
	}
	if !addr.IsValid() {
		t.Fatalf("the server did not say where it listens: %s", serr.String())
	}
	c := newCSContext(t, "posix,tcp")
	w := newWorker(t, c)
	r := result(t, dial(w, addr, nil))
	if r.err != nil {
		srv.Process.Kill()
		srv.Wait() // for its last words
		exited = true
		t.Fatalf("connect to %v: %v\nserver: %s", addr, r.err, serr.String())
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
	var sout strings.Builder
	for sc.Scan() {
		sout.WriteString(sc.Text() + "\n")
	}
	done := make(chan error, 1)
	go func() { done <- srv.Wait() }()
	select {
	case err := <-done:
		exited = true
		if err != nil {
			t.Fatalf("server: %v\n%s%s", err, sout.String(), serr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the server did not exit in 30 s:\n%s%s", sout.String(), serr.String())
	}
	if !strings.Contains(sout.String(), "server lane tcp") || strings.Contains(sout.String(), "server lane posix") {
		t.Errorf("server lanes:\n%s", sout.String())
	}
}
