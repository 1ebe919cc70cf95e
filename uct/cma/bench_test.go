package cma

import (
	"testing"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// The benchmarks run against a peer process (see startPeer) and call the EP
// through the uct.EP interface, as ucp does.

func benchZcopy(b *testing.B, put bool, size int) {
	p := startPeer(b)
	var ep uct.EP = p.ep
	iov := []uct.IOV{{Buffer: make([]byte, size)}}
	raddr, rkey := p.base, p.rkey.Rkey
	op := ep.PutZcopy
	if !put {
		op = ep.GetZcopy
	}
	b.SetBytes(int64(size))
	b.ResetTimer()
	for range b.N {
		if s := op(iov, raddr, rkey, nil); s != ucs.OK {
			b.Fatal(s)
		}
	}
}

func BenchmarkPutZcopy1M(b *testing.B) { benchZcopy(b, true, 1<<20) }

func BenchmarkGetZcopy1M(b *testing.B) { benchZcopy(b, false, 1<<20) }

// BenchmarkPutShort8 measures the latency of one small transfer.
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

// BenchmarkGetBcopy8 measures the latency of one small read.
func BenchmarkGetBcopy8(b *testing.B) {
	p := startPeer(b)
	var ep uct.EP = p.ep
	raddr, rkey := p.base+64, p.rkey.Rkey
	unpack := func([]byte) {}
	b.ResetTimer()
	for range b.N {
		ep.GetBcopy(unpack, 8, raddr, rkey, nil)
	}
}
