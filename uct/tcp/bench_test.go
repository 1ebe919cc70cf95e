package tcp

import (
	"runtime"
	"testing"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// The benchmarks run between two ifaces of this process over the loopback,
// and call the EP through the uct.EP interface, as ucp does.
//
// Their waits spin on Progress, which reads the ready sockets itself, and
// yield between calls.

// idle is the wait step of the benchmarks.
func idle(int) { runtime.Gosched() }

// BenchmarkAMPingPong measures a round trip: an 8-byte AMShort from a to b,
// whose asynchronous handler (run by whichever reads it: b's Progress or
// its receiving goroutine) answers with an 8-byte AMShort; both progress
// until the answer arrives, as two processes would.
func BenchmarkAMPingPong(b *testing.B) {
	md := testMD(b)
	x, y := openIface(b, md, nil), openIface(b, md, nil)
	var ping uct.EP = connect(b, x, y)
	var pong uct.EP = connect(b, y, x)
	y.SetAMHandler(1, func(_ any, data []byte, _ uint32) ucs.Status {
		if st := pong.AMShort(2, 0, nil); st != ucs.OK {
			b.Errorf("pong: %v", st)
		}
		return ucs.OK
	}, nil, uct.CBFlagAsync)
	got := 0
	x.SetAMHandler(2, func(any, []byte, uint32) ucs.Status { got++; return ucs.OK }, nil, uct.CBFlagSync)
	for k := 0; b.Loop(); k++ {
		if st := ping.AMShort(1, uint64(k), nil); st != ucs.OK {
			b.Fatal(st)
		}
		for spins := 0; got == k; spins++ {
			if x.Progress()+y.Progress() == 0 {
				idle(spins)
			}
		}
	}
}

// BenchmarkPutZcopy1M measures the bandwidth of 1 MiB puts, flushed at the
// end (so the data is in the target's memory).
func BenchmarkPutZcopy1M(b *testing.B) {
	const size = 1 << 20
	md := testMD(b)
	x, y := openIface(b, md, nil), openIface(b, md, nil)
	e := connect(b, x, y)
	var ep uct.EP = e
	target := register(b, md, size)
	iov := []uct.IOV{{Buffer: make([]byte, size)}}
	b.SetBytes(size)
	for b.Loop() {
		for spins := 0; ; spins++ {
			st := ep.PutZcopy(iov, target.base(), target.rkey.Rkey, nil)
			if st == ucs.InProgress || st == ucs.OK {
				break
			}
			if st != ucs.ErrNoResource {
				b.Fatal(st)
			}
			x.Progress()
			idle(spins)
		}
	}
	if st := flush(b, e); st != ucs.OK {
		b.Fatal(st)
	}
}

// BenchmarkGetZcopy8 measures the round trip of an 8-byte get: the
// request, the peer's reply, and its completion; both ifaces progress.
func BenchmarkGetZcopy8(b *testing.B) {
	md := testMD(b)
	x, y := openIface(b, md, nil), openIface(b, md, nil)
	var ep uct.EP = connect(b, x, y)
	src := register(b, md, 8)
	iov := []uct.IOV{{Buffer: make([]byte, 8)}}
	done := 0
	comp := &uct.Completion{Func: func(*uct.Completion) { done++ }}
	for k := 0; b.Loop(); k++ {
		comp.Count = 1
		if st := ep.GetZcopy(iov, src.base(), src.rkey.Rkey, comp); st != ucs.InProgress {
			b.Fatal(st)
		}
		for spins := 0; done == k; spins++ {
			if x.Progress()+y.Progress() == 0 {
				idle(spins)
			}
		}
	}
}
