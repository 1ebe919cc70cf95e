package self

import (
	"errors"
	"testing"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

func TestConnectToEP(t *testing.T) {
	iface, ep, _ := setup(t, make([]byte, 8))
	if _, err := ep.(uct.EPConnector).EPAddress(); !errors.Is(err, ucs.ErrUnsupported) {
		t.Errorf("EPAddress of an iface ep: %v, want ErrUnsupported", err)
	}
	if _, err := iface.EPCreate(&uct.EPParams{Unconnected: true, IfaceAddr: iface.Address()}); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("unconnected EPCreate with an address: %v, want ErrInvalidParam", err)
	}
	mk := func() (uct.EP, []byte) {
		e, err := iface.EPCreate(&uct.EPParams{Unconnected: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Destroy)
		a, err := e.(uct.EPConnector).EPAddress()
		if err != nil || len(a) != EPAddrLen {
			t.Fatalf("EPAddress = %x, %v", a, err)
		}
		return e, a
	}
	a, aAddr := mk()
	b, bAddr := mk()
	if st := a.AMShort(1, 0, nil); st != ucs.ErrNotConnected {
		t.Errorf("AMShort before connecting = %v, want ErrNotConnected", st)
	}
	if st := a.Flush(0, nil); st != ucs.ErrNotConnected {
		t.Errorf("Flush before connecting = %v, want ErrNotConnected", st)
	}
	if err := a.(uct.EPConnector).ConnectToEP(nil, aAddr[:5]); !errors.Is(err, ucs.ErrInvalidAddr) {
		t.Errorf("ConnectToEP(truncated) = %v, want ErrInvalidAddr", err)
	}
	unknown := append([]byte(nil), bAddr...)
	unknown[IfaceAddrLen] ^= 1
	if err := a.(uct.EPConnector).ConnectToEP(nil, unknown); !errors.Is(err, ucs.ErrUnreachable) {
		t.Errorf("ConnectToEP(unknown id) = %v, want ErrUnreachable", err)
	}
	if err := a.(uct.EPConnector).ConnectToEP(nil, bAddr); err != nil {
		t.Fatal(err)
	}
	if err := b.(uct.EPConnector).ConnectToEP(nil, aAddr); err != nil {
		t.Fatal(err)
	}
	if err := a.(uct.EPConnector).ConnectToEP(nil, bAddr); !errors.Is(err, ucs.ErrAlreadyExists) {
		t.Errorf("second ConnectToEP = %v, want ErrAlreadyExists", err)
	}
	if st := a.Flush(0, nil); st != ucs.OK {
		t.Errorf("Flush after connecting = %v", st)
	}
}
