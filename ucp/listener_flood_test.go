package ucp

import (
	"net/netip"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/flood"
)

// loopbacks returns n loopback addresses other than 127.0.0.1, from
// 127.0.0.first on: sources that are not the real clients'.
func loopbacks(first, n int) []netip.Addr {
	a := make([]netip.Addr, n)
	for i := range a {
		a[i] = netip.AddrFrom4([4]byte{127, 0, 0, byte(first + i)})
	}
	return a
}

// TestListenerFlood holds floods of hostile connections open on a
// listener, connected before its real clients and held while they run:
// idle, garbage, trickling and half-closed ones, from the clients' own
// address and from many others, beyond the bounds per source and in all.
// Every real client connects, exchanges a message and closes, however
// long the handshake timeout: the listener displaces the strangers' oldest
// connections (internal/admit) rather than refuse its clients.
func TestListenerFlood(t *testing.T) {
	setKey(t, 0)
	const clients = 10
	for _, tt := range []struct {
		name  string
		specs []flood.Spec
	}{
		{"idle", []flood.Spec{{Kind: flood.Idle, N: 1000}}},
		{"garbage", []flood.Spec{{Kind: flood.Garbage, N: 1000}}},
		{"slow", []flood.Spec{{Kind: flood.Slow, N: 300}}},
		{"half-closed", []flood.Spec{{Kind: flood.HalfClosed, N: 1000}}},
		{"silent, every handshake slot (uct/tcp's CM holds 256)", []flood.Spec{{Kind: flood.Idle, N: 256}}},
		{"idle and garbage from many sources", []flood.Spec{
			{Kind: flood.Idle, N: 1000, From: loopbacks(2, 8)},
			{Kind: flood.Garbage, N: 1000, From: loopbacks(10, 8)},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := 0
			for _, s := range tt.specs {
				n += s.N
			}
			// Each connection takes a descriptor on both sides.
			if err := flood.RaiseFDLimit(2*n + 1024); err != nil {
				t.Skipf("not enough file descriptors for the flood: %v", err)
			}
			c := newCSContext(t, "posix")
			s, eps := startAcceptServer(t, c, new(ListenerParams).SetSockAddr(loopback4).SetHandshakeTimeout(time.Minute))
			f, err := flood.Start(s.addr, tt.specs...)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Stop()
			start := time.Now()
			connectClients(t, c, s, eps, clients)
			t.Logf("%d clients in %v, flood %+v", clients, time.Since(start).Round(time.Millisecond), f.Stats())
			if st := f.Stats(); st.Opened+st.Failed != n {
				t.Errorf("flood: %+v, want %d connections", st, n)
			}
		})
	}
}
