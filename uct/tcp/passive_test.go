package tcp

import (
	"encoding/binary"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// wait starts op, which completes comp, and progresses i until it did;
// it returns the completion's status.
func wait(tb testing.TB, i *Iface, op func(comp *uct.Completion) ucs.Status) ucs.Status {
	tb.Helper()
	done := false
	comp := &uct.Completion{Count: 1, Func: func(*uct.Completion) { done = true }}
	if st := op(comp); st != ucs.InProgress {
		return st
	}
	progressUntil(tb, func() bool { return done }, i)
	return comp.Status()
}

// progressLoop calls i.Progress in a loop in a goroutine of its own until
// the function it returns is called (which may be called more than once),
// and returns once the loop ended.
func progressLoop(i *Iface) func() {
	var stop atomic.Bool
	var done sync.WaitGroup
	done.Add(1)
	go func() {
		defer done.Done()
		for !stop.Load() {
			i.Progress()
		}
	}()
	return func() {
		stop.Store(true)
		done.Wait()
	}
}

// TestComputingPeerAnswers checks passive progress: a peer process that
// computes, calling nothing, still applies puts, answers gets and atomics
// and acknowledges flushes, through its iface's poller, whatever the
// poller's delay.
func TestComputingPeerAnswers(t *testing.T) {
	for _, delay := range []string{"0", "1ms", "20ms"} {
		t.Run("PASSIVE_DELAY="+delay, func(t *testing.T) {
			p := startPeer(t, testKey, "PASSIVE_DELAY="+delay)
			i := openIface(t, testMD(t), nil)
			ep := connectPeer(t, i, p)
			// The peer computes for much longer than the operations take
			// (they are answered within about the delay).
			p.startSpin(20 * time.Second)
			const off = 64
			raddr := p.base + off
			rkey := p.rkey.Rkey
			var word [8]byte
			binary.LittleEndian.PutUint64(word[:], 40)
			if st := ep.PutShort(word[:], raddr, rkey); st != ucs.OK {
				t.Fatalf("put: %v", st)
			}
			if st := flush(t, ep, i); st != ucs.OK {
				t.Fatalf("flush: %v", st)
			}
			got := make([]byte, 8)
			if st := wait(t, i, func(c *uct.Completion) ucs.Status {
				return ep.GetZcopy([]uct.IOV{{Buffer: got}}, raddr, rkey, c)
			}); st != ucs.OK || binary.LittleEndian.Uint64(got) != 40 {
				t.Fatalf("get: %v, %d; want OK, 40", st, binary.LittleEndian.Uint64(got))
			}
			var old uint64
			if st := wait(t, i, func(c *uct.Completion) ucs.Status {
				return ep.AtomicFetch64(uct.AtomicOpAdd, 2, raddr, rkey, &old, c)
			}); st != ucs.OK || old != 40 {
				t.Fatalf("fetch-add: %v, old %d; want OK, 40", st, old)
			}
			if st := wait(t, i, func(c *uct.Completion) ucs.Status {
				return ep.AtomicCSwap64(42, 7, raddr, rkey, &old, c)
			}); st != ucs.OK || old != 42 {
				t.Fatalf("compare-swap: %v, old %d; want OK, 42", st, old)
			}
			if st := ep.AtomicPost64(uct.AtomicOpAdd, 1, raddr, rkey); st != ucs.OK {
				t.Fatalf("atomic add: %v", st)
			}
			if st := flush(t, ep, i); st != ucs.OK {
				t.Fatalf("flush: %v", st)
			}
			if st := wait(t, i, func(c *uct.Completion) ucs.Status {
				return ep.GetZcopy([]uct.IOV{{Buffer: got}}, raddr, rkey, c)
			}); st != ucs.OK || binary.LittleEndian.Uint64(got) != 8 {
				t.Fatalf("get after the atomics: %v, %d; want OK, 8", st, binary.LittleEndian.Uint64(got))
			}
			if p.Buffered() {
				t.Log("the peer finished computing before the operations did: they tested less")
			}
		})
	}
}

// TestFloodWhileProgress sends a flood of frames (synchronous active
// messages, puts, gets and fetching atomics, from several goroutines and
// EPs at once) to an iface whose Progress runs in a loop beside its poller,
// and checks that every message arrives once, every put lands and every
// reply matches.
func TestFloodWhileProgress(t *testing.T) {
	for _, delay := range []string{"0", "1ms"} {
		t.Run("PASSIVE_DELAY="+delay, func(t *testing.T) {
			md := testMD(t)
			target := openIface(t, md, nil, "PASSIVE_DELAY="+delay, "RX_QUEUE_LEN=4096")
			const senders, frames = 4, 1500
			var got [senders]atomic.Int64
			target.SetAMHandler(3, func(_ any, data []byte, _ uint32) ucs.Status {
				s := binary.LittleEndian.Uint64(data)
				seq := binary.LittleEndian.Uint64(data[8:])
				if s >= senders || int64(seq) != got[s].Load() {
					t.Errorf("message %d of sender %d out of order (expected %d)", seq, s, got[s].Load())
					return ucs.OK
				}
				got[s].Add(1)
				return ucs.OK
			}, nil, uct.CBFlagSync)
			region := register(t, md, senders*frames*8+senders*8)
			stopProgress := progressLoop(target)
			var wg sync.WaitGroup
			for s := range senders {
				wg.Add(1)
				go func() {
					defer wg.Done()
					src := openIface(t, md, nil)
					ep := connect(t, src, target)
					counter := region.base() + uint64(senders*frames*8+s*8)
					var msg [16]byte
					for k := range frames {
						binary.LittleEndian.PutUint64(msg[:], uint64(s))
						binary.LittleEndian.PutUint64(msg[8:], uint64(k))
						raddr := region.base() + uint64((s*frames+k)*8)
						for _, op := range []func() ucs.Status{
							func() ucs.Status { return ep.AMShort(3, binary.LittleEndian.Uint64(msg[:]), msg[8:]) },
							func() ucs.Status { return ep.PutShort(msg[8:], raddr, region.rkey.Rkey) },
						} {
							var st ucs.Status
							progressUntil(t, func() bool { st = op(); return st != ucs.ErrNoResource }, src)
							if st != ucs.OK {
								t.Errorf("sender %d frame %d: %v", s, k, st)
								return
							}
						}
						if k%16 != 0 {
							continue
						}
						var old uint64
						if st := wait(t, src, func(c *uct.Completion) ucs.Status {
							return ep.AtomicFetch64(uct.AtomicOpAdd, 1, counter, region.rkey.Rkey, &old, c)
						}); st != ucs.OK || old != uint64(k/16) {
							t.Errorf("sender %d fetch-add %d: %v, old %d", s, k/16, st, old)
							return
						}
						back := make([]byte, 8)
						if st := wait(t, src, func(c *uct.Completion) ucs.Status {
							return ep.GetZcopy([]uct.IOV{{Buffer: back}}, raddr, region.rkey.Rkey, c)
						}); st != ucs.OK || binary.LittleEndian.Uint64(back) != uint64(k) {
							t.Errorf("sender %d get %d: %v, %d", s, k, st, binary.LittleEndian.Uint64(back))
							return
						}
					}
					if st := flush(t, ep, src); st != ucs.OK {
						t.Errorf("sender %d flush: %v", s, st)
					}
				}()
			}
			wg.Wait()
			deadline := time.Now().Add(time.Minute)
			for s := range senders {
				for got[s].Load() < frames && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
			}
			stopProgress()
			mem := region.snapshot()
			for s := range senders {
				if n := got[s].Load(); n != frames {
					t.Errorf("sender %d: %d messages delivered, want %d", s, n, frames)
				}
				for k := range frames {
					if v := binary.LittleEndian.Uint64(mem[(s*frames+k)*8:]); v != uint64(k) {
						t.Fatalf("sender %d put %d: %d in memory", s, k, v)
					}
				}
			}
		})
	}
}

// openFDs returns the number of this process's open descriptors, once
// the runtime's network poller, which keeps its own, is running.
func openFDs(tb testing.TB) int {
	tb.Helper()
	if ln, err := net.Listen("tcp", "127.0.0.1:0"); err == nil {
		ln.Close()
	}
	fds, err := filepath.Glob("/proc/self/fd/*")
	if err != nil || len(fds) == 0 {
		tb.Skipf("cannot count open descriptors in /proc/self/fd: %v", err)
	}
	return len(fds)
}

// TestCloseAtEveryStage closes the target side (EP destroy or iface
// close) at every stage of a stream of gets, atomics and puts from
// another iface: before any frame, after a few, with replies outstanding,
// with the sender's queue full, and while the target's Progress and
// poller both read. Every operation completes (with OK or an error),
// nothing hangs, and once both ifaces closed no descriptor remains open.
func TestCloseAtEveryStage(t *testing.T) {
	captureLog(t)
	tests := []struct {
		name  string
		after int  // operations before the close
		full  bool // the sender's queue is filled first
		iface bool // close the target's iface (else destroy the sender's EP)
	}{
		{"iface before any frame", 0, false, true},
		{"iface after a few", 5, false, true},
		{"iface with replies outstanding", 200, false, true},
		{"iface with a full queue", 50, true, true},
		{"ep before any frame", 0, false, false},
		{"ep with replies outstanding", 200, false, false},
		{"ep with a full queue", 50, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := openFDs(t)
			md := testMD(t)
			target := openIface(t, md, nil, "PASSIVE_DELAY=0")
			src := openIface(t, md, nil, "TX_QUEUE_LEN=65536")
			region := register(t, md, 1<<20)
			uep, err := src.EPCreate(&uct.EPParams{DeviceAddr: target.DeviceAddress(), IfaceAddr: target.Address()})
			if err != nil {
				t.Fatal(err)
			}
			ep := uep.(*EP)
			stopProgress := progressLoop(target)
			comp := &uct.Completion{}
			var olds [256]uint64
			bufs := make([]byte, 256*8)
			for k := range tt.after {
				comp.Count++
				var st ucs.Status
				if k%2 == 0 {
					st = ep.GetZcopy([]uct.IOV{{Buffer: bufs[k%256*8:][:8]}}, region.base(), region.rkey.Rkey, comp)
				} else {
					st = ep.AtomicFetch64(uct.AtomicOpAdd, 1, region.base()+8, region.rkey.Rkey, &olds[k%256], comp)
				}
				if st != ucs.InProgress {
					comp.Count--
					if st.IsErr() && st != ucs.ErrNoResource {
						t.Fatalf("operation %d: %v", k, st)
					}
				}
			}
			if tt.full {
				big := make([]byte, 64<<10)
				for k := 0; k < 64; k++ {
					comp.Count++
					if st := ep.PutZcopy([]uct.IOV{{Buffer: big}}, region.base(), region.rkey.Rkey, comp); st != ucs.InProgress {
						comp.Count--
						if st == ucs.ErrNoResource {
							break
						}
					}
				}
			}
			if tt.iface {
				stopProgress()
				target.Close()
			} else {
				ep.Destroy()
			}
			// Every operation completes, with OK or the EP's error.
			progressUntil(t, func() bool { return atomic.LoadInt32(&comp.Count) == 0 }, src)
			stopProgress()
			if tt.iface {
				progressUntil(t, func() bool { return ep.status().IsErr() }, src)
				ep.Destroy()
			}
			src.Close()
			target.Close()
			if after := openFDs(t); after != before {
				t.Errorf("%d descriptors open before, %d after both ifaces closed", before, after)
			}
		})
	}
}
