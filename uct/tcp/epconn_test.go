package tcp

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// unconnected creates an unconnected EP on i, destroyed at the end of the
// test, and returns it with its address.
func unconnected(tb testing.TB, i *Iface) (*EP, []byte) {
	tb.Helper()
	ep, err := i.EPCreate(&uct.EPParams{Unconnected: true})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(ep.Destroy)
	a, err := ep.(uct.EPConnector).EPAddress()
	if err != nil || len(a) != EPAddrLen {
		tb.Fatalf("EPAddress = %x, %v", a, err)
	}
	return ep.(*EP), a
}

func TestConnectToEP(t *testing.T) {
	logs := captureLog(t)
	md := testMD(t)
	a, b := openIface(t, md, nil), openIface(t, md, nil)
	if _, err := a.EPCreate(&uct.EPParams{Unconnected: true, IfaceAddr: b.Address()}); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("unconnected EPCreate with an address: %v, want ErrInvalidParam", err)
	}
	ea, aAddr := unconnected(t, a)
	eb, bAddr := unconnected(t, b)
	if st := ea.AMShort(1, 0, nil); st != ucs.ErrNotConnected {
		t.Errorf("AMShort before connecting = %v, want ErrNotConnected", st)
	}
	if st := ea.Flush(0, nil); st != ucs.ErrNotConnected {
		t.Errorf("Flush before connecting = %v, want ErrNotConnected", st)
	}
	if err := ea.ConnectToEP(b.DeviceAddress(), bAddr[:EPAddrLen-1]); !errors.Is(err, ucs.ErrInvalidAddr) {
		t.Errorf("ConnectToEP(truncated) = %v, want ErrInvalidAddr", err)
	}
	unknown := append([]byte(nil), bAddr...)
	unknown[IfaceAddrLen] ^= 1
	if err := ea.ConnectToEP(b.DeviceAddress(), unknown); !errors.Is(err, ucs.ErrUnreachable) {
		t.Errorf("ConnectToEP(unknown ep) = %v, want ErrUnreachable", err)
	}
	// The iface logs the refusal after it closed the connection, which
	// is what the caller saw.
	progressUntil(t, func() bool { return strings.Contains(logs.String(), "unknown ep") }, a, b)
	if err := ea.ConnectToEP(b.DeviceAddress(), bAddr); err != nil {
		t.Fatal(err)
	}
	if err := eb.ConnectToEP(a.DeviceAddress(), aAddr); err != nil {
		t.Fatal(err)
	}
	if err := ea.ConnectToEP(b.DeviceAddress(), bAddr); !errors.Is(err, ucs.ErrAlreadyExists) {
		t.Errorf("second ConnectToEP = %v, want ErrAlreadyExists", err)
	}
	// A third EP may not bind to eb, which is bound already.
	ec, _ := unconnected(t, a)
	if err := ec.ConnectToEP(b.DeviceAddress(), bAddr); !errors.Is(err, ucs.ErrUnreachable) {
		t.Errorf("ConnectToEP to a bound ep = %v, want ErrUnreachable", err)
	}
	var got atomic.Int32
	for _, i := range []*Iface{a, b} {
		if err := i.SetAMHandler(3, func(arg any, data []byte, flags uint32) ucs.Status {
			got.Add(1)
			return ucs.OK
		}, nil, uct.CBFlagSync); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range []*EP{ea, eb} {
		if st := e.AMShort(3, 7, []byte("hi")); st.IsErr() {
			t.Fatalf("AMShort = %v", st)
		}
		if st := flush(t, e, a, b); st != ucs.OK {
			t.Fatalf("flush = %v", st)
		}
	}
	progressUntil(t, func() bool { return got.Load() == 2 }, a, b)
}

// TestConnectToEPClosedIface checks an unconnected EP whose iface closes:
// before ConnectToEP, its operations and ConnectToEP then fail with
// ucs.ErrCanceled (as after Destroy; they failed with
// ucs.ErrNotConnected, as if the EP could still connect); while ConnectToEP dials, it
// either connected first (Close then ends the connection) or fails with
// ucs.ErrCanceled, and operations fail with ucs.ErrCanceled either way.
// Under the race detector the second case also checks that Close and
// ConnectToEP agree on whether the EP has its connection.
func TestConnectToEPClosedIface(t *testing.T) {
	for _, tt := range []struct {
		name    string
		dialing bool // Close runs while ConnectToEP dials
	}{
		{"closed before", false},
		{"closed while dialing", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			captureLog(t)
			md := testMD(t)
			for range 10 {
				a, b := openIface(t, md, nil), openIface(t, md, nil)
				ea, _ := unconnected(t, a)
				_, bAddr := unconnected(t, b)
				errc := make(chan error, 1)
				if tt.dialing {
					go func() { errc <- ea.ConnectToEP(b.DeviceAddress(), bAddr) }()
					a.Close()
				} else {
					a.Close()
					if st := ea.AMShort(1, 0, nil); st != ucs.ErrCanceled {
						t.Errorf("AMShort after the iface closed, before ConnectToEP = %v, want ErrCanceled", st)
					}
					errc <- ea.ConnectToEP(b.DeviceAddress(), bAddr)
				}
				if err := <-errc; err != nil && !errors.Is(err, ucs.ErrCanceled) || err == nil && !tt.dialing {
					t.Errorf("ConnectToEP = %v, want ErrCanceled", err)
				}
				if st := ea.AMShort(1, 0, nil); st != ucs.ErrCanceled {
					t.Errorf("AMShort after the iface closed = %v, want ErrCanceled", st)
				}
				b.Close()
			}
		})
	}
}
