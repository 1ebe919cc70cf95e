package tcp

import (
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
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
// yield the goroutine every few hundred calls (idle).

// idle is the wait step of the benchmarks, after the spins-th call of
// Progress in a row that found nothing: it yields the goroutine every
// 256th, as ucp's Worker.Idle does. It does not yield the thread every
// 16th, as Worker.Idle also does for nodes with more runnable processes
// than cores: with the peer and the echo process of
// BenchmarkRoundTripOverFloor beside, on a quiet 2-core VM, that put a
// get or fetch-and-add 1.5-12 us above the floor, against 0.9-1.4 us
// without (5 interleaved runs each; shmem's waits, measured the same way
// with and without the yield, did not move).
func idle(spins int) {
	if spins%256 == 255 {
		runtime.Gosched()
	}
}

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
	r := dialPeer(b, p)
	b.ReportAllocs()
	for b.Loop() {
		r.roundTrip(b, op)
	}
}

// peerEP is an EP of an iface of this process to a peer process, and the
// completion of its operations.
type peerEP struct {
	i    *Iface
	ep   *EP
	p    *peer
	comp uct.Completion
	done int // operations completed
}

// dialPeer creates an EP to the peer p; it is destroyed at the end of the
// benchmark.
func dialPeer(b *testing.B, p *peer) *peerEP {
	i := openIface(b, testMD(b), nil)
	uep, err := i.EPCreate(&uct.EPParams{DeviceAddr: p.dev, IfaceAddr: p.addr})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(uep.Destroy)
	r := &peerEP{i: i, ep: uep.(*EP), p: p}
	r.comp.Func = func(*uct.Completion) { r.done++ }
	return r
}

// roundTrip starts op, one operation completing r.comp, and progresses
// until it completed.
func (r *peerEP) roundTrip(b *testing.B, op func(ep *EP, p *peer, comp *uct.Completion) ucs.Status) {
	want := r.done + 1
	r.comp.Count = 1
	if st := op(r.ep, r.p, &r.comp); st != ucs.InProgress {
		b.Fatal(st)
	}
	for spins := 0; r.done < want; spins++ {
		if r.i.Progress() == 0 {
			idle(spins)
		}
	}
	if st := r.comp.Status(); st != ucs.OK {
		b.Fatal(st)
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
	out, in := startEcho(b, split)
	msg, got := make([]byte, 8), make([]byte, 8)
	b.ReportAllocs()
	for b.Loop() {
		pingPong(b, out, in, msg, got)
	}
}

// startEcho starts the echo process of BenchmarkSocketPingPong and returns
// the socket that sends to it and the one its echo comes back on (the same
// unless split); they are closed at the end of the benchmark.
func startEcho(b *testing.B, split bool) (out, in *sock) {
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
		b.Cleanup(sk.close)
		return sk
	}
	out = dial()
	in = out
	if split {
		in = dial()
	}
	return out, in
}

// pingPong writes msg on out and reads len(got) bytes back from in,
// polling it with non-blocking reads.
func pingPong(b *testing.B, out, in *sock, msg, got []byte) {
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

// roundTripBlock is how many operations BenchmarkRoundTripOverFloor
// measures of one kind before it switches to the other.
const roundTripBlock = 200

// BenchmarkRoundTripOverFloor shows what a round trip of the transport
// costs above the floor, per operation: an 8-byte get and an 8-byte
// fetch-and-add to a peer process that progresses (as BenchmarkPeerGet8
// and BenchmarkPeerFetchAdd), interleaved, in blocks of roundTripBlock
// operations, with the floor: 8 bytes to an echo process and back on one
// loopback socket (BenchmarkSocketPingPong/shared). Both are measured in
// the same seconds, under the same load; the process not measured waits
// without polling (the peer pauses its Progress loop, the echo process
// waits in poll after a millisecond without data), so that it takes no
// processor from the other. Every operation is timed; the benchmark
// reports the medians, ours-ns/op and floor-ns/op, and their difference,
// over-floor-ns/op (ns/op is the time of both, and of nothing else: the
// switches are not timed). On a 2-core VM at load 8, in the rounds whose
// medians the load left alone, the floor was 12.1-12.9 us and a get or
// fetch-and-add 0.55-0.9 us above it; on a quiet one the floor was
// 10.9-11.4 us and they 0.9-1.4 us above it: each side makes one send per
// operation (the reply is written by the reader of the request), and the
// waiting goroutine reads the reply itself.
func BenchmarkRoundTripOverFloor(b *testing.B) {
	iov := []uct.IOV{{Buffer: make([]byte, 8)}}
	var old uint64
	for _, bc := range []struct {
		name string
		op   func(ep *EP, p *peer, comp *uct.Completion) ucs.Status
	}{
		{"get8", func(ep *EP, p *peer, comp *uct.Completion) ucs.Status {
			return ep.GetZcopy(iov, p.base, p.rkey.Rkey, comp)
		}},
		{"fadd8", func(ep *EP, p *peer, comp *uct.Completion) ucs.Status {
			return ep.AtomicFetch64(uct.AtomicOpAdd, 1, p.base, p.rkey.Rkey, &old, comp)
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			p := startPeer(b, testKey)
			r := dialPeer(b, p)
			out, in := startEcho(b, false)
			msg, got := make([]byte, 8), make([]byte, 8)
			var ours, floor []time.Duration
			b.ReportAllocs()
			for k := 0; b.Loop(); k++ {
				if k%roundTripBlock == 0 {
					// The peer progresses only while its round
					// trips are measured.
					b.StopTimer()
					if k/roundTripBlock%2 == 0 {
						p.progress()
					} else {
						p.pause()
					}
					b.StartTimer()
				}
				t := time.Now()
				if k/roundTripBlock%2 == 0 {
					r.roundTrip(b, bc.op)
					ours = append(ours, time.Since(t))
				} else {
					pingPong(b, out, in, msg, got)
					floor = append(floor, time.Since(t))
				}
			}
			if len(ours) == 0 || len(floor) == 0 {
				return // too few operations for both (-benchtime)
			}
			mo, mf := median(ours), median(floor)
			b.ReportMetric(float64(mo.Nanoseconds()), "ours-ns/op")
			b.ReportMetric(float64(mf.Nanoseconds()), "floor-ns/op")
			b.ReportMetric(float64((mo - mf).Nanoseconds()), "over-floor-ns/op")
		})
	}
}

// median returns the median of ds, which it sorts.
func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// runEcho is the peer of BenchmarkSocketPingPong (testpeer role
// "tcp-echo"): it listens on the loopback, prints its port, and sends back
// whatever its connection brings, polling the socket without waiting,
// until the connection ends; after a millisecond without data it waits in
// poll(2) for the next. With the argument "split" it accepts two
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
	heard := time.Now()
	for spins := 0; ; spins++ {
		n, err := readNB(in.fd, buf)
		switch {
		case err == unix.EAGAIN:
			if spins%1024 == 1023 && time.Since(heard) > time.Millisecond {
				// Nobody measures it now (BenchmarkRoundTripOverFloor
				// measures something else in between): it waits.
				unix.Poll([]unix.PollFd{{Fd: int32(in.fd), Events: unix.POLLIN}}, -1)
			}
			continue
		case err != nil || n == 0:
			return nil
		}
		spins, heard = 0, time.Now()
		for b := buf[:n]; len(b) > 0; {
			m, err := writeNB(out.fd, b)
			if err != nil && err != unix.EAGAIN {
				return err
			}
			b = b[max(m, 0):]
		}
	}
}
