package tcp

import (
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/internal/testpeer"
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

// The two-process benchmarks measure a round trip to a peer process (the
// test binary run as testpeer role "tcp") that calls Progress in a loop, as a
// process waiting in a barrier does: 8-byte gets and fetch-and-adds, each
// completed before the next, with their allocations; and, beside them as
// the floor, BenchmarkSocketPingPong, 8 bytes there and back on a plain
// loopback socket between two processes that both poll it.

// peerRoundTrip connects to a progressing peer and times op, which starts
// one operation completing comp, waiting for each.
func peerRoundTrip(b *testing.B, op func(ep *EP, p *peer, comp *uct.Completion) ucs.Status) {
	peerRoundTripTo(b, false, nil, op)
}

// peerRoundTripTo is peerRoundTrip to a peer with the iface settings
// (NAME=value) that progresses, or that computes, calling nothing, when
// computing is set.
func peerRoundTripTo(b *testing.B, computing bool, settings []string, op func(ep *EP, p *peer, comp *uct.Completion) ucs.Status) {
	p := startPeer(b, testKey, settings...)
	if computing {
		p.startSpin(600 * time.Second)
	} else {
		p.progress()
	}
	i := openIface(b, testMD(b), nil)
	uep, err := i.EPCreate(&uct.EPParams{DeviceAddr: p.dev, IfaceAddr: p.addr})
	if err != nil {
		b.Fatal(err)
	}
	defer uep.Destroy()
	ep := uep.(*EP)
	done := 0
	comp := &uct.Completion{Func: func(*uct.Completion) { done++ }}
	b.ReportAllocs()
	for k := 0; b.Loop(); k++ {
		comp.Count = 1
		if st := op(ep, p, comp); st != ucs.InProgress {
			b.Fatal(st)
		}
		for spins := 0; done == k; spins++ {
			if i.Progress() == 0 {
				idle(spins)
			}
		}
		if comp.Status() != ucs.OK {
			b.Fatal(comp.Status())
		}
	}
}

// BenchmarkPeerGet8 measures an 8-byte get from another process.
func BenchmarkPeerGet8(b *testing.B) {
	iov := []uct.IOV{{Buffer: make([]byte, 8)}}
	peerRoundTrip(b, func(ep *EP, p *peer, comp *uct.Completion) ucs.Status {
		return ep.GetZcopy(iov, p.base, p.rkey.Rkey, comp)
	})
}

// BenchmarkPassiveGet8 measures what UCX_TCP_PASSIVE_DELAY costs: an
// 8-byte get from a peer that progresses (which the poller then leaves
// alone, looking every delay whether Progress still runs), and from one
// that computes on every processor, calling nothing (its poller answers,
// once it gets a processor).
func BenchmarkPassiveGet8(b *testing.B) {
	iov := []uct.IOV{{Buffer: make([]byte, 8)}}
	for _, computing := range []bool{false, true} {
		for _, delay := range []string{"0", "100us", "1ms", "10ms"} {
			name := "progressing"
			if computing {
				name = "computing"
			}
			b.Run(name+"/PASSIVE_DELAY="+delay, func(b *testing.B) {
				peerRoundTripTo(b, computing, []string{"PASSIVE_DELAY=" + delay}, func(ep *EP, p *peer, comp *uct.Completion) ucs.Status {
					return ep.GetZcopy(iov, p.base, p.rkey.Rkey, comp)
				})
			})
		}
	}
}

// BenchmarkPeerFetchAdd measures an 8-byte fetch-and-add on a word of
// another process.
func BenchmarkPeerFetchAdd(b *testing.B) {
	var old uint64
	peerRoundTrip(b, func(ep *EP, p *peer, comp *uct.Completion) ucs.Status {
		return ep.AtomicFetch64(uct.AtomicOpAdd, 1, p.base, p.rkey.Rkey, &old, comp)
	})
}

// BenchmarkSocketPingPong is the floor of the round trips: 8 bytes to an
// echoing process and back over loopback TCP (TCP_NODELAY, as the
// transport's), both sides polling with non-blocking reads, nothing else.
//
// shared sends both ways on one connection; split sends each way on a
// connection of its own, as the transport does (an EP's connection
// carries its frames one way, the peer's EP opens another): then no
// acknowledgement rides on data, and every read that empties the socket
// makes the kernel send one, on the loopback inside the read (tcp_recvmsg
// -> tcp_cleanup_rbuf -> tcp_send_ack). On a 2-core VM a round trip took
// 12.0 us shared and 16.8 us split: 2.4 us more each way.
func BenchmarkSocketPingPong(b *testing.B) {
	for _, split := range []bool{false, true} {
		name := "shared"
		if split {
			name = "split"
		}
		b.Run(name, func(b *testing.B) { benchSocketPingPong(b, split) })
	}
}

func benchSocketPingPong(b *testing.B, split bool) {
	var args []string
	if split {
		args = []string{"split"}
	}
	echo := testpeer.Start(b, "tcp-echo", testpeer.Options{Args: args})
	line, err := echo.Next()
	if err != nil {
		b.Fatalf("reading the echo process's port: %v", err)
	}
	port, err := strconv.Atoi(line)
	if err != nil {
		b.Fatalf("the echo process's port %q: %v", line, err)
	}
	dial := func() *sock {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			b.Fatal(err)
		}
		sk, err := detach(c.(*net.TCPConn))
		if err != nil {
			b.Fatal(err)
		}
		return sk
	}
	out := dial()
	defer out.close()
	in := out
	if split {
		in = dial()
		defer in.close()
	}
	msg, got := make([]byte, 8), make([]byte, 8)
	b.ReportAllocs()
	for b.Loop() {
		if n, err := writeNB(out.fd, msg); n != len(msg) || err != nil {
			b.Fatalf("write: %d, %v", n, err)
		}
		for k := 0; k < len(got); {
			n, err := readNB(in.fd, got[k:])
			switch {
			case err == unix.EAGAIN:
				continue
			case err != nil || n == 0:
				b.Fatalf("read: %d, %v", n, err)
			}
			k += n
		}
	}
}

// runEcho is the peer of BenchmarkSocketPingPong (testpeer role
// "tcp-echo"): it listens on the loopback, prints its port, and sends back
// whatever its connection brings, polling the socket without waiting,
// until the connection ends. With the argument "split" it accepts two
// connections, and sends back on the second what the first brings.
func runEcho(args []string, _ io.Reader, stdout io.Writer) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, ln.Addr().(*net.TCPAddr).Port)
	accept := func() (*sock, error) {
		c, err := ln.Accept()
		if err != nil {
			return nil, err
		}
		return detach(c.(*net.TCPConn))
	}
	in, err := accept()
	if err != nil {
		return err
	}
	out := in
	if len(args) > 0 && args[0] == "split" {
		if out, err = accept(); err != nil {
			return err
		}
	}
	buf := make([]byte, 64)
	for {
		n, err := readNB(in.fd, buf)
		switch {
		case err == unix.EAGAIN:
			continue
		case err != nil || n == 0:
			return nil
		}
		for b := buf[:n]; len(b) > 0; {
			m, err := writeNB(out.fd, b)
			if err != nil && err != unix.EAGAIN {
				return err
			}
			b = b[max(m, 0):]
		}
	}
}
