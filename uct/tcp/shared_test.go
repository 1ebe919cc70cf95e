package tcp

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// connCount returns the connections of i: those with an EP (shared or
// dialed) and the one-way ones it accepted.
func connCount(i *Iface) (eps, oneWay int) {
	i.mu.Lock()
	defer i.mu.Unlock()
	return len(i.conns), len(i.rxConns)
}

// connectBoth creates EPs from a to b and from b to a at once.
func connectBoth(t *testing.T, a, b *Iface) (ab, ba *EP) {
	t.Helper()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); ab = connect(t, a, b) }()
	go func() { defer wg.Done(); ba = connect(t, b, a) }()
	wg.Wait()
	if ab == nil || ba == nil {
		t.FailNow()
	}
	return ab, ba
}

// TestSharedConnection has two ifaces create EPs to each other at once,
// many times: each pair must end up on one connection, which carries
// both EPs' frames and the answers to them both ways.
func TestSharedConnection(t *testing.T) {
	md := testMD(t)
	rounds := 20
	if testing.Short() {
		rounds = 5
	}
	for r := range rounds {
		a, b := openIface(t, md, nil), openIface(t, md, nil)
		var aGot, bGot atomic.Int32
		a.SetAMHandler(1, func(any, []byte, uint32) ucs.Status { aGot.Add(1); return ucs.OK }, nil, uct.CBFlagSync)
		b.SetAMHandler(1, func(any, []byte, uint32) ucs.Status { bGot.Add(1); return ucs.OK }, nil, uct.CBFlagSync)
		ab, ba := connectBoth(t, a, b)
		if ea, oa := connCount(a); ea != 1 || oa != 0 {
			t.Fatalf("round %d: a has %d connections with an EP and %d one-way, want 1 and 0", r, ea, oa)
		}
		if eb, ob := connCount(b); eb != 1 || ob != 0 {
			t.Fatalf("round %d: b has %d connections with an EP and %d one-way, want 1 and 0", r, eb, ob)
		}
		if ab.rx == nil || ba.rx == nil {
			t.Fatalf("round %d: an EP has no target role", r)
		}
		ra, rb := register(t, md, 64), register(t, md, 64)
		if st := ab.PutShort([]byte("to b"), rb.base(), rb.rkey.Rkey); st != ucs.OK {
			t.Fatal(st)
		}
		if st := ba.PutShort([]byte("to a"), ra.base(), ra.rkey.Rkey); st != ucs.OK {
			t.Fatal(st)
		}
		for _, ep := range []*EP{ab, ba} {
			if st := ep.AMShort(1, 7, nil); st != ucs.OK {
				t.Fatal(st)
			}
		}
		if st := flush(t, ab, b); st != ucs.OK {
			t.Fatal(st)
		}
		if st := flush(t, ba, a); st != ucs.OK {
			t.Fatal(st)
		}
		progressUntil(t, func() bool { return aGot.Load() == 1 && bGot.Load() == 1 }, a, b)
		if !bytes.HasPrefix(rb.snapshot(), []byte("to b")) || !bytes.HasPrefix(ra.snapshot(), []byte("to a")) {
			t.Fatalf("round %d: puts not applied", r)
		}
		// A get and a fetching atomic each way.
		for _, p := range []struct {
			ep   *EP
			reg  *testRegion
			want string
		}{{ab, rb, "to b"}, {ba, ra, "to a"}} {
			buf := make([]byte, 4)
			var old uint64
			done := 0
			comp := &uct.Completion{Count: 2, Func: func(*uct.Completion) { done++ }}
			if st := p.ep.GetZcopy([]uct.IOV{{Buffer: buf}}, p.reg.base(), p.reg.rkey.Rkey, comp); st != ucs.InProgress {
				t.Fatal(st)
			}
			if st := p.ep.AtomicFetch64(uct.AtomicOpAdd, 1, p.reg.base()+8, p.reg.rkey.Rkey, &old, comp); st != ucs.InProgress {
				t.Fatal(st)
			}
			progressUntil(t, func() bool { return done == 1 }, a, b)
			if comp.Status() != ucs.OK || string(buf) != p.want {
				t.Fatalf("get %q, %v", buf, comp.Status())
			}
		}
		if r < rounds-1 {
			a.Close()
			b.Close()
		}
	}
}

// TestSharedSecondEP checks that a second EP to the same peer iface, which
// cannot share the connection the first pair shares, works over a one-way
// connection of its own.
func TestSharedSecondEP(t *testing.T) {
	md := testMD(t)
	a, b := openIface(t, md, nil), openIface(t, md, nil)
	ab, ba := connectBoth(t, a, b)
	ab2 := connect(t, a, b)
	if ab2.rx != nil {
		t.Error("the second EP shares a connection")
	}
	// b registers the connection once it read the client's proof.
	progressUntil(t, func() bool { _, ob := connCount(b); return ob == 1 }, a, b)
	rb := register(t, md, 64)
	for k, ep := range []*EP{ab, ab2} {
		if st := ep.PutShort([]byte{byte(k + 1)}, rb.base()+uint64(k), rb.rkey.Rkey); st != ucs.OK {
			t.Fatal(st)
		}
		if st := flush(t, ep, b); st != ucs.OK {
			t.Fatal(st)
		}
	}
	if got := rb.snapshot()[:2]; !bytes.Equal(got, []byte{1, 2}) {
		t.Errorf("region %x", got)
	}
	if st := flush(t, ba, a); st != ucs.OK {
		t.Fatal(st)
	}
}

// TestSharedBothWays puts large buffers both ways at once on a shared
// connection, each side flushing, and floods active messages both ways,
// with small send and receive queues too: nothing may deadlock (each side
// reads on while its own answers wait behind its partly written put).
func TestSharedBothWays(t *testing.T) {
	for _, tt := range []struct {
		name     string
		settings []string
	}{
		{"default queues", nil},
		{"tiny queues", []string{"TX_QUEUE_LEN=1", "RX_QUEUE_LEN=1"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			md := testMD(t)
			a, b := openIface(t, md, nil, tt.settings...), openIface(t, md, nil, tt.settings...)
			ab, ba := connectBoth(t, a, b)
			if ab.rx == nil {
				t.Fatal("not a shared connection")
			}
			const size = 8 << 20
			ra, rb := register(t, md, size), register(t, md, size)
			srcA, srcB := pattern(size, 1), pattern(size, 2)
			var wg sync.WaitGroup
			var stop atomic.Bool
			// Both ifaces progress all along, from one goroutine each.
			for _, i := range []*Iface{a, b} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for !stop.Load() {
						if i.Progress() == 0 {
							time.Sleep(10 * time.Microsecond)
						}
					}
				}()
			}
			var aGot, bGot atomic.Int32
			a.SetAMHandler(1, func(any, []byte, uint32) ucs.Status { aGot.Add(1); return ucs.OK }, nil, uct.CBFlagSync)
			b.SetAMHandler(1, func(any, []byte, uint32) ucs.Status { bGot.Add(1); return ucs.OK }, nil, uct.CBFlagSync)
			const rounds, ams = 3, 2000
			errs := make(chan error, 2)
			run := func(ep *EP, src []byte, dst *testRegion) {
				defer wg.Done()
				for range rounds {
					var put, fl atomic.Bool
					pc := &uct.Completion{Count: 1, Func: func(*uct.Completion) { put.Store(true) }}
					for {
						st := ep.PutZcopy([]uct.IOV{{Buffer: src}}, dst.base(), dst.rkey.Rkey, pc)
						if st == ucs.OK {
							put.Store(true)
						}
						if st != ucs.ErrNoResource {
							if st.IsErr() {
								errs <- st
								return
							}
							break
						}
						time.Sleep(10 * time.Microsecond)
					}
					fc := &uct.Completion{Count: 1, Func: func(*uct.Completion) { fl.Store(true) }}
					if st := ep.Flush(0, fc); st == ucs.OK {
						fl.Store(true)
					} else if st != ucs.InProgress {
						errs <- st
						return
					}
					for !put.Load() || !fl.Load() {
						time.Sleep(10 * time.Microsecond)
					}
					if fc.Status().IsErr() {
						errs <- fc.Status()
						return
					}
				}
				for k := 0; k < ams; {
					switch st := ep.AMShort(1, uint64(k), make([]byte, 100)); st {
					case ucs.OK:
						k++
					case ucs.ErrNoResource:
						time.Sleep(10 * time.Microsecond)
					default:
						errs <- st
						return
					}
				}
			}
			var senders sync.WaitGroup
			senders.Add(2)
			wg.Add(2)
			go func() { defer senders.Done(); run(ab, srcA, rb) }()
			go func() { defer senders.Done(); run(ba, srcB, ra) }()
			done := make(chan struct{})
			go func() { senders.Wait(); close(done) }()
			select {
			case <-done:
			case err := <-errs:
				stop.Store(true)
				t.Fatal(err)
			case <-time.After(2 * time.Minute):
				stop.Store(true)
				t.Fatal("deadlock: puts and flushes both ways did not complete in two minutes")
			}
			deadline := time.Now().Add(time.Minute)
			for (aGot.Load() != ams || bGot.Load() != ams) && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			stop.Store(true)
			wg.Wait()
			if aGot.Load() != ams || bGot.Load() != ams {
				t.Fatalf("messages: a got %d, b got %d, want %d", aGot.Load(), bGot.Load(), ams)
			}
			if !bytes.Equal(rb.snapshot(), srcA) || !bytes.Equal(ra.snapshot(), srcB) {
				t.Fatal("the puts' data differ")
			}
		})
	}
}

// TestSharedDestroyOneSide destroys one side's EP of a shared connection
// while the other side keeps sending on its own: the target role of the
// destroyed side goes on serving it, and nothing fails or is logged on
// either side; once the other EP is destroyed too, the connection closes.
func TestSharedDestroyOneSide(t *testing.T) {
	logs := captureLog(t)
	md := testMD(t)
	var aErr, bErr errCounter
	a, b := openIface(t, md, aErr.params()), openIface(t, md, bErr.params())
	ab, ba := connectBoth(t, a, b)
	if ab.rx == nil {
		t.Fatal("not a shared connection")
	}
	rb, ra := register(t, md, 1<<16), register(t, md, 1<<16)
	if st := ba.PutShort([]byte{9}, ra.base(), ra.rkey.Rkey); st != ucs.OK {
		t.Fatal(st)
	}
	// b's EP ends, with a large put written in part perhaps.
	big := pattern(1<<16, 3)
	ba.PutZcopy([]uct.IOV{{Buffer: big}}, ra.base(), ra.rkey.Rkey, nil)
	ba.Destroy()
	for k := range 100 {
		for {
			st := ab.PutShort([]byte{byte(k)}, rb.base()+uint64(k), rb.rkey.Rkey)
			if st == ucs.OK {
				break
			}
			if st != ucs.ErrNoResource {
				t.Fatalf("put %d after the peer's EP ended: %v", k, st)
			}
			a.Progress()
			b.Progress()
		}
		if k%10 == 9 {
			if st := flush(t, ab, b); st != ucs.OK {
				t.Fatalf("flush after the peer's EP ended: %v", st)
			}
		}
	}
	buf := make([]byte, 8)
	done := false
	comp := &uct.Completion{Count: 1, Func: func(*uct.Completion) { done = true }}
	if st := ab.GetZcopy([]uct.IOV{{Buffer: buf}}, rb.base(), rb.rkey.Rkey, comp); st != ucs.InProgress {
		t.Fatal(st)
	}
	progressUntil(t, func() bool { return done }, a, b)
	if comp.Status() != ucs.OK || !bytes.Equal(buf, []byte{0, 1, 2, 3, 4, 5, 6, 7}) {
		t.Fatalf("get after the peer's EP ended: %v %x", comp.Status(), buf)
	}
	ab.Destroy()
	progressUntil(t, func() bool {
		ea, _ := connCount(a)
		eb, _ := connCount(b)
		return ea == 0 && eb == 0
	}, a, b)
	if aErr.calls.Load() != 0 || bErr.calls.Load() != 0 {
		t.Errorf("error handlers called: a %d, b %d", aErr.calls.Load(), bErr.calls.Load())
	}
	if s := logs.String(); s != "" {
		t.Errorf("logged:\n%s", s)
	}
}

// TestSharedGetReplyPinsRegion checks that a large get reply queued on a
// shared connection is sent from the registered memory, which it pins:
// MemDereg of that memory waits until it was written.
func TestSharedGetReplyPinsRegion(t *testing.T) {
	md := testMD(t)
	// a's poller does not step in: a reads only when the test progresses it.
	a, b := openIface(t, md, nil, "PASSIVE_DELAY=10s"), openIface(t, md, nil)
	ab, ba := connectBoth(t, a, b)
	if ba.rx == nil {
		t.Fatal("not a shared connection")
	}
	const size = 32 << 20 // more than the sockets' buffers hold
	src := pattern(size, 5)
	bmem := make([]byte, size)
	copy(bmem, src)
	h, err := md.MemReg(unsafe.Pointer(&bmem[0]), size, uct.MemAccessDefault)
	if err != nil {
		t.Fatal(err)
	}
	packed, _ := md.MkeyPack(nil, h)
	rk, err := (&Component{}).RkeyUnpack(packed)
	if err != nil {
		t.Fatal(err)
	}
	defer (&Component{}).RkeyRelease(rk)
	dst := make([]byte, size)
	done := false
	comp := &uct.Completion{Count: 1, Func: func(*uct.Completion) { done = true }}
	if st := ab.GetZcopy([]uct.IOV{{Buffer: dst}}, uint64(uintptr(unsafe.Pointer(&bmem[0]))), rk.Rkey, comp); st != ucs.InProgress {
		t.Fatal(st)
	}
	// b reads the get and answers; a does not read, so the reply waits.
	pinned := func() bool { return h.(*Memh).r.pins.Load() > 0 }
	progressUntil(t, pinned, b)
	dereg := make(chan error, 1)
	go func() { dereg <- md.MemDereg(h) }()
	time.Sleep(20 * time.Millisecond)
	select {
	case err := <-dereg:
		t.Fatalf("MemDereg returned (%v) while a reply from the region waits", err)
	default:
	}
	progressUntil(t, func() bool { return done }, a, b)
	if comp.Status() != ucs.OK || !bytes.Equal(dst, src) {
		t.Fatalf("get: %v, data equal %v", comp.Status(), bytes.Equal(dst, src))
	}
	if err := <-dereg; err != nil {
		t.Fatal(err)
	}
}
