package uctest

import (
	"bytes"
	"testing"
	"time"

	"github.com/goshmem/goshmem/uct"
)

// testIfaceAttr checks that the iface attributes describe what the iface
// does: the address lengths are those of the addresses it gives (and an
// iface with IfaceFlagConnectToEP gives its EP address length,
// EPAddrLen), and the resource's latency and bandwidth are the iface's,
// a bandwidth above zero and a latency that is not negative (above zero
// on a network).
func testIfaceAttr(t *testing.T, e *env) {
	a := e.attr
	bw := a.Bandwidth.Dedicated + a.Bandwidth.Shared
	if lat := time.Duration(a.Latency.C * 1e9); e.tl.Latency != lat || e.tl.Bandwidth != bw {
		t.Errorf("resource latency %v and bandwidth %g B/s; the iface's are %v and %g B/s", e.tl.Latency, e.tl.Bandwidth, lat, bw)
	}
	if bw <= 0 || a.Latency.C < 0 || e.devType == uct.DeviceTypeNet && a.Latency.C <= 0 {
		t.Errorf("%v device: latency %gs, bandwidth %g B/s", e.devType, a.Latency.C, bw)
	}
	for _, c := range []struct {
		name      string
		attr, got int
	}{
		{"DeviceAddrLen", a.DeviceAddrLen, len(e.iface.DeviceAddress())},
		{"IfaceAddrLen", a.IfaceAddrLen, len(e.iface.Address())},
		{"EPAddrLen", a.EPAddrLen, e.epAddrLen(t)},
	} {
		if c.attr != c.got {
			t.Errorf("%s is %d; the address is %d bytes", c.name, c.attr, c.got)
		}
	}
}

// epAddrLen returns the length of the address of an unconnected EP of the
// iface, or 0 when the iface does not connect to EPs.
func (e *env) epAddrLen(t *testing.T) int {
	if e.attr.Flags&uct.IfaceFlagConnectToEP == 0 {
		return 0
	}
	ep, _, addr := e.unconnectedEP(t)
	ep.Destroy()
	return len(addr)
}

// testIfaceMemAlloc checks IfaceMemAlloc on the resource's MD: the memory
// it gives is keyed for the MD (MkeyPack takes its handle, and appends
// its key of RkeyPackedSize bytes to what the buffer holds) whichever
// method allocated it, unless the MD registers no memory and another
// method did, and MemFree releases it.
func testIfaceMemAlloc(t *testing.T, e *env) {
	for _, methods := range [][]uct.AllocMethod{nil, {uct.AllocMethodMmap}, {uct.AllocMethodMD, uct.AllocMethodHeap}} {
		mem, err := uct.IfaceMemAlloc(e.md, 8192, methods, "uctest")
		if err != nil {
			if e.mdAttr.Flags&(uct.MDFlagAlloc|uct.MDFlagReg) == 0 {
				continue // the MD can key no memory
			}
			t.Fatalf("IfaceMemAlloc with %v: %v", methods, err)
		}
		if mem.Length < 8192 || mem.MD != e.md {
			t.Errorf("IfaceMemAlloc with %v: %d bytes by %v on %v", methods, mem.Length, mem.Method, mem.MD)
		}
		if mem.Memh == nil && (mem.Method == uct.AllocMethodMD || e.mdAttr.Flags&uct.MDFlagReg != 0) {
			t.Errorf("IfaceMemAlloc with %v: memory allocated by %v has no handle", methods, mem.Method)
		} else if mem.Memh != nil {
			prefix := []byte("prefix")
			key, err := e.md.MkeyPack(nil, mem.Memh)
			more, err2 := e.md.MkeyPack(prefix, mem.Memh)
			switch {
			case err != nil || err2 != nil:
				t.Errorf("MkeyPack of memory allocated by %v: %v, %v", mem.Method, err, err2)
			case len(key) != e.mdAttr.RkeyPackedSize || !bytes.Equal(more, append(bytes.Clone(prefix), key...)):
				t.Errorf("MkeyPack of memory allocated by %v: %x alone (RkeyPackedSize %d), %x after %q",
					mem.Method, key, e.mdAttr.RkeyPackedSize, more, prefix)
			}
		}
		if err := uct.MemFree(&mem); err != nil {
			t.Errorf("MemFree of memory allocated by %v: %v", mem.Method, err)
		}
	}
}
