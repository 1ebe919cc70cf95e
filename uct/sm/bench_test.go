package sm

import (
	"runtime"
	"testing"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// The benchmarks run against a peer process (see startPeer) and call the EP
// through the uct.EP interface, as ucp does.

func BenchmarkPutShort8(b *testing.B) {
	p := startPeer(b)
	var ep uct.EP = p.ep
	buf := make([]byte, 8)
	raddr, rkey := p.base+64, p.rkey.Rkey
	b.ResetTimer()
	for range b.N {
		ep.PutShort(buf, raddr, rkey)
	}
}

func BenchmarkAtomicFetchAdd64(b *testing.B) {
	p := startPeer(b)
	var ep uct.EP = p.ep
	raddr, rkey := p.base+64, p.rkey.Rkey
	var res uint64
	b.ResetTimer()
	for range b.N {
		ep.AtomicFetch64(uct.AtomicOpAdd, 1, raddr, rkey, &res, nil)
	}
}

// BenchmarkAMPingPong measures a round trip: an 8-byte AMShort to the peer,
// which echoes it back; the parent progresses until the echo arrives.
func BenchmarkAMPingPong(b *testing.B) {
	p := startPeer(b)
	var ep uct.EP = p.ep
	got := 0
	p.iface.SetAMHandler(amEchoReply, func(any, []byte, uint32) ucs.Status { got++; return ucs.OK }, nil, uct.CBFlagSync)
	b.ResetTimer()
	for k := range b.N {
		for ep.AMShort(amEcho, uint64(k), nil) != ucs.OK {
			p.iface.Progress()
		}
		for spins := 0; got == k; spins++ {
			if p.iface.Progress() == 0 && spins&255 == 255 {
				runtime.Gosched()
			}
		}
	}
}

func BenchmarkPutZcopy1M(b *testing.B) {
	const size = 1 << 20
	p := startPeer(b)
	var ep uct.EP = p.ep
	iov := []uct.IOV{{Buffer: make([]byte, size)}}
	raddr, rkey := p.base, p.rkey.Rkey
	b.SetBytes(size)
	b.ResetTimer()
	for range b.N {
		ep.PutZcopy(iov, raddr, rkey, nil)
	}
}

// BenchmarkAMShortLoop measures the send path of an 8-byte AMShort: the EP
// sends to its own iface, which Progress drains every 64 messages (the
// handler does nothing).
func BenchmarkAMShortLoop(b *testing.B) {
	i := openTestIface(b)
	ep, err := i.EPCreate(&uct.EPParams{DeviceAddr: i.DeviceAddress(), IfaceAddr: i.Address()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(ep.Destroy)
	i.SetAMHandler(1, func(any, []byte, uint32) ucs.Status { return ucs.OK }, nil, uct.CBFlagSync)
	payload := make([]byte, 8)
	b.ReportAllocs()
	b.ResetTimer()
	for k := range b.N {
		if ep.AMShort(1, uint64(k), payload) != ucs.OK {
			b.Fatal("send failed")
		}
		if k&63 == 63 {
			for i.Progress() != 0 {
			}
		}
	}
}
