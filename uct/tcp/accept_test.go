package tcp

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/flood"
	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// closedByPeer reports whether the server closed c: a read ends with EOF
// (or a reset) instead of waiting. It waits for at most a minute, a guard.
func closedByPeer(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(time.Minute))
	_, err := c.Read(make([]byte, 1))
	return err != nil && !isTimeout(err)
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestHandshakeCap opens more idle connections than the iface lets
// authenticate at once, from one source address or from several: the
// iface keeps the newest of each source within MAX_HANDSHAKES_PER_SOURCE,
// and beyond MAX_HANDSHAKES closes the oldest of the source with the most
// (never the connection of a source that holds one), logging a few of
// them; a client with the key still connects.
func TestHandshakeCap(t *testing.T) {
	type batch struct {
		from string
		n    int
	}
	for _, tt := range []struct {
		name     string
		settings []string
		batches  []batch
		kept     []int // of the connections, in order, those left waiting
		// ousts: the client with the key, from 127.0.0.1, displaces
		// one of them.
		ousts bool
	}{
		{"one source", []string{"MAX_HANDSHAKES=4", "MAX_HANDSHAKES_PER_SOURCE=4"},
			[]batch{{"127.0.0.1", 40}}, []int{36, 37, 38, 39}, true},
		{"per source", []string{"MAX_HANDSHAKES=16", "MAX_HANDSHAKES_PER_SOURCE=4"},
			[]batch{{"127.0.0.2", 40}}, []int{36, 37, 38, 39}, false},
		{"total, the heaviest source gives way", []string{"MAX_HANDSHAKES=4", "MAX_HANDSHAKES_PER_SOURCE=4"},
			[]batch{{"127.0.0.9", 1}, {"127.0.0.2", 40}}, []int{0, 38, 39, 40}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			logs := captureLog(t)
			md := testMD(t)
			b := openIface(t, md, nil, append(tt.settings, "HANDSHAKE_TIMEOUT=1m")...)
			var conns []net.Conn
			for _, bt := range tt.batches {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(bt.from)}}
				for range bt.n {
					c, err := d.Dial("tcp", b.ln.Addr().String())
					if err != nil {
						t.Fatal(err)
					}
					defer c.Close()
					conns = append(conns, c)
				}
			}
			for k, c := range conns {
				if !slices.Contains(tt.kept, k) && !closedByPeer(c) {
					t.Fatalf("connection %d of %d still open, want only %v", k, len(conns), tt.kept)
				}
			}
			progressUntil(t, func() bool { return b.handshakes.Len() == len(tt.kept) })
			var waiting []string
			for _, c := range b.handshakes.Values() {
				waiting = append(waiting, c.RemoteAddr().String())
			}
			var want []string
			for _, k := range tt.kept {
				want = append(want, conns[k].LocalAddr().String())
			}
			if !slices.Equal(waiting, want) {
				t.Errorf("waiting: %v, want %v", waiting, want)
			}
			// A client with the key gets through.
			a := openIface(t, md, nil)
			ep := connect(t, a, b)
			if st := ep.AMShort(1, 0, nil); st != ucs.OK {
				t.Fatal(st)
			}
			refusals := len(conns) - len(tt.kept)
			if tt.ousts {
				refusals++
			}
			if got := b.warn.refused.Count(); got != uint64(refusals) {
				t.Errorf("%d refusals counted, want %d", got, refusals)
			}
			if got := strings.Count(logs.String(), "\n"); got > warnBurst {
				t.Errorf("%d lines logged for %d refusals, want at most %d:\n%s", got, refusals, warnBurst, logs)
			}
		})
	}
}

// TestAcceptFlood holds a thousand idle connections and a thousand that
// sent garbage open on an iface (internal/flood), from the clients' own
// address and from others, with a handshake timeout longer than the test:
// ifaces with the key still connect to it, as many as come, and the
// iface never holds more connections in the handshake than its bounds.
func TestAcceptFlood(t *testing.T) {
	captureLog(t)
	const n, clients = 1000, 8
	if err := flood.RaiseFDLimit(4*n + 1024); err != nil {
		t.Skipf("not enough file descriptors for the flood: %v", err)
	}
	md := testMD(t)
	b := openIface(t, md, nil, "HANDSHAKE_TIMEOUT=1m")
	target := b.ln.Addr().(*net.TCPAddr).AddrPort()
	f, err := flood.Start(target,
		flood.Spec{Kind: flood.Idle, N: n},
		flood.Spec{Kind: flood.Garbage, N: n / 2},
		flood.Spec{Kind: flood.Garbage, N: n / 2, From: []netip.Addr{netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.3")}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	var seen atomic.Int32
	b.SetAMHandler(1, func(any, []byte, uint32) ucs.Status { seen.Add(1); return ucs.OK }, nil, uct.CBFlagAsync)
	for k := range clients {
		a := openIface(t, md, nil)
		ep := connect(t, a, b)
		if st := ep.AMShort(1, 0, nil); st != ucs.OK {
			t.Fatalf("client %d: %v", k, st)
		}
		progressUntil(t, func() bool { return int(seen.Load()) == k+1 }, a, b)
		if held := b.handshakes.Len(); held > b.cfg.maxHS {
			t.Fatalf("%d connections in the handshake, at most %d allowed", held, b.cfg.maxHS)
		}
	}
	t.Logf("flood: %+v", f.Stats())
}

// TestHandshakeTimeout checks that a connection that says nothing is
// closed after HANDSHAKE_TIMEOUT, however long CONN_TIMEOUT is.
func TestHandshakeTimeout(t *testing.T) {
	captureLog(t)
	b := openIface(t, testMD(t), nil, "HANDSHAKE_TIMEOUT=50ms", "CONN_TIMEOUT=1h")
	c, err := net.Dial("tcp", b.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !closedByPeer(c) {
		t.Error("an idle connection was not closed within a minute, with UCX_TCP_HANDSHAKE_TIMEOUT=50ms")
	}
}

// TestRefusalFlood connects many times without the key (a wrong MAC, or
// garbage): each is refused, and the log says so a few times and then
// counts, instead of writing a line for each.
func TestRefusalFlood(t *testing.T) {
	logs := captureLog(t)
	const n = 300
	b := openIface(t, testMD(t), nil)
	wrongKey := deriveKey([]byte("not the job key, not the job key"))
	for k := range n {
		c, err := net.Dial("tcp", b.ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if k%2 == 0 {
			if err := clientHandshake(c, wrongKey, testHello(b), time.Now().Add(time.Minute)); err == nil {
				t.Fatal("handshake with the wrong key succeeded")
			}
		} else {
			c.Write(bytes.Repeat([]byte("garbage!"), 8))
			io.Copy(io.Discard, c) // until the iface closes it
		}
		c.Close()
	}
	progressUntil(t, func() bool { return b.warn.refused.Count() == n })
	b.Close()
	s := logs.String()
	if got := strings.Count(s, "refused a connection"); got != warnBurst {
		t.Errorf("%d refusals logged of %d, want %d", got, n, warnBurst)
	}
	if !strings.Contains(s, "290 more refused connections not logged") {
		t.Errorf("the log has no summary of the %d refusals not logged:\n%s", n-warnBurst, s)
	}
}

// TestRejectionFlood sends a stream of puts and gets outside registered
// memory on an authenticated connection, as a peer with the key but a bug
// could: each is dropped or refused, the connection stays usable, and the
// log says so a few times and then counts.
func TestRejectionFlood(t *testing.T) {
	logs := captureLog(t)
	const n = 1000
	md := testMD(t)
	b := openIface(t, md, nil)
	var seen atomic.Int32
	b.SetAMHandler(1, func(any, []byte, uint32) ucs.Status { seen.Add(1); return ucs.OK }, nil, uct.CBFlagAsync)
	c := rawClient(t, b)
	go io.Copy(io.Discard, c) // the refused gets' replies
	put := make([]byte, frameHeaderLen+putHeaderLen+8)
	putFrameHeader(put, framePut, 0, putHeaderLen+8)
	(&putHeader{key: 12345, token: 1, raddr: 4096}).encode(put[frameHeaderLen:])
	get := make([]byte, frameHeaderLen+getHeaderLen)
	putFrameHeader(get, frameGet, 0, getHeaderLen)
	(&getHeader{key: 12345, token: 1, raddr: 4096, length: 8, id: 1}).encode(get[frameHeaderLen:])
	var stream []byte
	for k := range n {
		if k%2 == 0 {
			stream = append(stream, put...)
		} else {
			stream = append(stream, get...)
		}
	}
	am := make([]byte, frameHeaderLen+8)
	putFrameHeader(am, frameAM, 1, 8)
	stream = append(stream, am...)
	if _, err := c.Write(stream); err != nil {
		t.Fatal(err)
	}
	progressUntil(t, func() bool { return seen.Load() == 1 }, b)
	if got := b.warn.rejected.Count(); got != n {
		t.Errorf("%d rejections counted, want %d", got, n)
	}
	b.warn.flush()
	s := logs.String()
	if got := strings.Count(s, "rejected a"); got != warnBurst {
		t.Errorf("%d rejections logged of %d, want %d", got, n, warnBurst)
	}
	if !strings.Contains(s, "990 more rejected puts and gets not logged") {
		t.Errorf("the log has no summary of the rejections not logged:\n%s", s)
	}
}

// TestDialRetriesDroppedHandshake: a server too busy to authenticate a
// connection in time (its handshake timeout, or newer connections that
// evicted it) closes or resets it before answering the hello; the client
// tries again, within UCX_TCP_CONN_TIMEOUT, instead of failing the EP. A
// proxy in front of the iface drops the first connections that way, then
// forwards; a proxy that drops every one still makes EPCreate fail, after
// dialTries tries.
func TestDialRetriesDroppedHandshake(t *testing.T) {
	md := testMD(t)
	a, b := openIface(t, md, nil), openIface(t, md, nil)
	real, err := decodeIfaceAddr(b.Address())
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		drop    int // connections dropped before the rest are forwarded
		reset   bool
		wantErr bool
	}{
		{"closed once", 1, false, false},
		{"reset twice", 2, true, false},
		{"dropped always", dialTries, false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", net.JoinHostPort(real.ip.String(), "0"))
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			var accepted atomic.Int32
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					if int(accepted.Add(1)) <= tt.drop {
						if tt.reset {
							c.(*net.TCPConn).SetLinger(0)
						}
						c.Close()
						continue
					}
					go forward(c, real.tcpAddr().String())
				}
			}()
			via := real
			via.port = uint16(ln.Addr().(*net.TCPAddr).Port)
			ep, err := a.EPCreate(&uct.EPParams{DeviceAddr: b.DeviceAddress(), IfaceAddr: via.encode()})
			if tt.wantErr {
				if err == nil {
					ep.Destroy()
					t.Fatal("EPCreate through a proxy that drops every connection succeeded")
				}
				if !errors.Is(err, ucs.ErrUnreachable) || int(accepted.Load()) != dialTries {
					t.Fatalf("EPCreate: %v after %d connections; want ErrUnreachable after %d", err, accepted.Load(), dialTries)
				}
				return
			}
			if err != nil {
				t.Fatalf("EPCreate after %d dropped handshakes: %v", tt.drop, err)
			}
			defer ep.Destroy()
			if got := int(accepted.Load()); got != tt.drop+1 {
				t.Errorf("%d connections, want %d", got, tt.drop+1)
			}
			if st := flush(t, ep.(*EP), a, b); st != ucs.OK {
				t.Errorf("flush over the retried connection: %v", st)
			}
		})
	}
}

// forward copies c to and from a new connection to addr, until either
// side ends.
func forward(c net.Conn, addr string) {
	defer c.Close()
	d, err := net.Dial("tcp", addr)
	if err != nil {
		return
	}
	defer d.Close()
	done := make(chan struct{}, 2)
	go func() { io.Copy(d, c); done <- struct{}{} }()
	go func() { io.Copy(c, d); done <- struct{}{} }()
	<-done
}
