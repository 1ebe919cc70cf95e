package sm

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

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

// BenchmarkLargeCopy compares the copies a large put or get between this
// process's memory and the peer's segment could use: the runtime's copy
// (non-temporal stores from 1 MiB on amd64) and ucs.Memcpy, which PutZcopy
// and GetZcopy use. Each iteration runs both, one after the other, and the
// benchmark reports each one's median time (copy-µs, Memcpy-µs) and their
// ratio: interleaved medians hold on a loaded machine, where ns/op, a mean
// of wall time, counts the time the process waited for a core. The peer's
// segment stays in this core's caches from one iteration to the next, as in
// a put or get latency loop.
func BenchmarkLargeCopy(b *testing.B) {
	p := startPeer(b)
	remote := mem(p.base, p.rkey.Rkey, childSegSize)
	local := make([]byte, childSegSize)
	for i := range local {
		local[i] = byte(i)
	}
	const maxSamples = 1 << 14
	copies := [...]struct {
		name string
		copy func(dst, src []byte) int
	}{
		{"copy", func(dst, src []byte) int { return copy(dst, src) }},
		{"Memcpy", ucs.Memcpy},
	}
	var samples [len(copies)][]time.Duration
	for k := range samples {
		samples[k] = make([]time.Duration, 0, maxSamples)
	}
	for _, n := range []int{64 << 10, 256 << 10, 1 << 20, 4 << 20} {
		for _, dir := range []struct {
			name     string
			dst, src []byte
		}{{"put", remote[:n], local[:n]}, {"get", local[:n], remote[:n]}} {
			b.Run(fmt.Sprintf("%s/%dKiB", dir.name, n>>10), func(b *testing.B) {
				for k := range samples {
					samples[k] = samples[k][:0]
				}
				b.SetBytes(int64(len(copies) * n))
				for b.Loop() {
					for k := range copies {
						t := time.Now()
						copies[k].copy(dir.dst, dir.src)
						if d := time.Since(t); len(samples[k]) < maxSamples {
							samples[k] = append(samples[k], d)
						}
					}
				}
				var med [len(copies)]float64
				for k := range copies {
					slices.Sort(samples[k])
					med[k] = float64(samples[k][len(samples[k])/2]) / float64(time.Microsecond)
					b.ReportMetric(med[k], copies[k].name+"-µs")
				}
				b.ReportMetric(med[1]/med[0], "Memcpy/copy")
			})
		}
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
