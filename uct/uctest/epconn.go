package uctest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// testConnectToEP checks connect to EP (uct.EPConnector) on transports
// that claim IfaceFlagConnectToEP: the test and the target each create an
// unconnected EP, exchange EP addresses and connect; then an active
// message is echoed (sent on the test's EP, answered on the target's) and
// puts are written through the test's EP.
func testConnectToEP(t *testing.T, e *env) {
	if e.attr.Flags&uct.IfaceFlagConnectToEP == 0 {
		t.Skipf("skipped: transport does not claim connect to EP (flags %#x)", e.attr.Flags)
	}
	c := e.main
	ep, conn, addr := e.unconnectedEP(t)
	defer ep.Destroy()
	if st := ep.Flush(uct.FlushFlagLocal, nil); st != ucs.ErrNotConnected {
		t.Errorf("flush of an unconnected EP: %v, want %v", st, ucs.ErrNotConnected)
	}
	f := e.call(t, c, "epcreate")
	if len(f) != 1 {
		t.Fatalf("epcreate answered %q", f)
	}
	peer, err := unhexOrDash(f[0])
	if err != nil {
		t.Fatalf("epcreate answered %q: %v", f, err)
	}
	if len(peer) > 0 {
		if err := conn.ConnectToEP(c.addr.devAddr, peer[:len(peer)-1]); !errors.Is(err, ucs.ErrInvalidAddr) {
			t.Errorf("ConnectToEP with a truncated EP address: %v, want ucs.ErrInvalidAddr", err)
		}
	}
	var connErr error
	if !bounded(t, "ConnectToEP", func() { connErr = conn.ConnectToEP(c.addr.devAddr, peer) }) {
		return
	}
	if connErr != nil {
		t.Fatalf("ConnectToEP: %v", connErr)
	}
	e.call(t, c, fmt.Sprintf("epconnect %s %s", hexOrDash(e.iface.DeviceAddress()), hexOrDash(addr)))
	defer e.call(t, c, "epdone")

	cc := *c
	cc.ep = ep
	cc.unpacked = false // the key stays c's
	echoed := false
	for _, m := range []method{short, bcopy, zcopy} {
		if !e.claims(amNeed[m]) {
			continue
		}
		n := min(61, capped(e.maxAM(m)))
		if m == short && n < 8 {
			continue
		}
		e.echo(t, &cc, m, pattern(n, 900+uint64(m)))
		echoed = true
	}
	for i, m := range e.claimedPuts() {
		e.guardedPut(t, &cc, m, rmaOff, pattern(min(1000, capped(e.maxPut(m))), 910+uint64(i)))
	}
	if !echoed {
		t.Log("no active message method claimed: only puts were tried")
	}
}

// unconnectedEP creates an unconnected EP on a transport that claims
// connect to EP, and returns it as an EP and as an EPConnector, with its
// address. The caller destroys it.
func (e *env) unconnectedEP(t *testing.T) (uct.EP, uct.EPConnector, []byte) {
	t.Helper()
	ep, err := e.iface.EPCreate(&uct.EPParams{Unconnected: true})
	if err != nil {
		t.Fatalf("EPCreate of an unconnected EP: %v", err)
	}
	conn, ok := ep.(uct.EPConnector)
	if !ok {
		ep.Destroy()
		t.Fatalf("transport claims connect to EP, but its EP %T does not implement uct.EPConnector", ep)
	}
	addr, err := conn.EPAddress()
	if err != nil {
		ep.Destroy()
		t.Fatalf("EPAddress: %v", err)
	}
	return ep, conn, addr
}
