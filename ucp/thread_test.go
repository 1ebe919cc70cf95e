package ucp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
)

// TestThreadModeQuery checks that the worker is created with the thread
// mode asked for, single by default.
func TestThreadModeQuery(t *testing.T) {
	c := newContext(t)
	for _, m := range []ucs.ThreadMode{ucs.ThreadModeSingle, ucs.ThreadModeSerialized, ucs.ThreadModeMulti} {
		w, err := c.NewWorker(new(WorkerParams).SetThreadMode(m))
		if err != nil {
			t.Fatal(err)
		}
		if got := w.Query().ThreadMode; got != m {
			t.Errorf("thread mode %v granted as %v", m, got)
		}
		w.Destroy()
	}
	if got := newWorker(t, c).Query().ThreadMode; got != ucs.ThreadModeSingle {
		t.Errorf("default thread mode %v, want single", got)
	}
}

// TestMultiThreadStress has several goroutines use one worker in multi
// mode at once, over shared memory and over tcp: puts and gets (direct and
// in software), posted and fetching atomics on one shared counter, with
// callbacks, endpoint and worker flushes, fences, progress, and endpoints
// created, keyed and closed meanwhile. Run it with -race. Each goroutine
// checks its own data; the counter must end with every increment.
func TestMultiThreadStress(t *testing.T) {
	const (
		goroutines = 6
		rounds     = 150
		slot       = 512 // bytes of the target segment each goroutine owns
	)
	for _, tt := range []struct{ name, tls string }{{"sm", "sm,self"}, {"tcp", "tcp,self"}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("UCX_TLS", tt.tls)
			c := newContext(t)
			multi := new(WorkerParams).SetThreadMode(ucs.ThreadModeMulti)
			a, err := c.NewWorker(multi)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(a.Destroy)
			b, err := c.NewWorker(multi)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(b.Destroy)
			aAddr, _ := a.Address()
			bAddr, _ := b.Address()
			back, err := b.NewEndpoint(new(EPParams).SetAddress(aAddr))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { back.Close(CloseModeForce) })
			// The target serves the software protocols from its own goroutine.
			stop, served := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(served)
				for {
					select {
					case <-stop:
						return
					default:
						if b.Progress() == 0 {
							b.Idle()
						}
					}
				}
			}()
			t.Cleanup(func() { close(stop); <-served })
			p := newPair(t, c, a, b, goroutines*slot+64)
			packed, err := c.RkeyPack(p.rkey.memh(t, c, p))
			if err != nil {
				t.Fatal(err)
			}
			sw, err := p.ep.RkeyUnpack(packed)
			if err != nil {
				t.Fatal(err)
			}
			defer sw.Destroy()
			forceSoftware(sw)
			counter := p.base + goroutines*slot
			var adds atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, goroutines+1)
			for g := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := hammer(a, p, sw, g, p.base+uint64(g*slot), slot, counter, rounds, &adds); err != nil {
						errs <- fmt.Errorf("goroutine %d: %w", g, err)
					}
				}()
			}
			// Endpoints come and go meanwhile.
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 20 {
					ep, err := a.NewEndpoint(new(EPParams).SetAddress(bAddr))
					if err != nil {
						errs <- err
						return
					}
					rk, err := ep.RkeyUnpack(packed)
					if err != nil {
						errs <- err
						return
					}
					if i%2 == 1 {
						forceSoftware(rk)
					}
					if req, err := ep.AtomicOpNBX(AtomicOpAdd, 1, counter, rk, nil); err != nil {
						errs <- err
						return
					} else if req != nil {
						req.Wait()
						req.Free()
					}
					adds.Add(1)
					rk.Destroy()
					mode := CloseModeFlush
					if i%4 == 3 {
						ep.Flush() // a forced close does not flush
						mode = CloseModeForce
					}
					if err := ep.Close(mode); err != nil {
						errs <- err
						return
					}
				}
			}()
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if err := a.Flush(); err != nil {
				t.Fatal(err)
			}
			if got := binary.LittleEndian.Uint64(p.mem[goroutines*slot:]); got != uint64(adds.Load()) {
				t.Errorf("counter %d after %d atomic increments", got, adds.Load())
			}
		})
	}
}

// memh returns the memory handle of the pair's target segment (the one
// newPair mapped): found by address among the context's mappings.
func (rk *Rkey) memh(t *testing.T, c *Context, p pair) *MemHandle {
	t.Helper()
	var m *MemHandle
	c.regions.Range(func(_, v any) bool {
		if h := v.(*MemHandle); uint64(uintptr(h.Address())) == p.base {
			m = h
			return false
		}
		return true
	})
	if m == nil {
		t.Fatal("the pair's segment is not mapped in the context")
	}
	return m
}

// hammer is one goroutine of TestMultiThreadStress: it writes and reads
// back its own slot, through the direct key and the software one, and adds
// to the shared counter, with flushes, fences and progress in between.
func hammer(w *Worker, p pair, sw *Rkey, g int, mine uint64, n int, counter uint64, rounds int, adds *atomic.Int64) error {
	var calls atomic.Int32
	cb := new(RequestParam).SetCallback(func(_ *Request, status error, _ any) {
		if status == nil {
			calls.Add(1)
		}
	}).SetOpAttrFlags(OpAttrFlagNoImmCmpl)
	data, got := make([]byte, n), make([]byte, n)
	for r := range rounds {
		rk := p.rkey
		if r%3 == 1 {
			rk = sw
		}
		for i := range data {
			data[i] = byte(g*31 + r + i)
		}
		req, err := p.ep.PutNBX(data, mine, rk, cb)
		if err != nil {
			return fmt.Errorf("put: %w", err)
		}
		if req != nil {
			if err := req.Wait(); err != nil {
				return fmt.Errorf("put request: %w", err)
			}
			req.Free()
		}
		if err := p.ep.Flush(); err != nil {
			return fmt.Errorf("flush: %w", err)
		}
		clear(got)
		req, err = p.ep.GetNBX(got, mine, rk, nil)
		if err != nil {
			return fmt.Errorf("get: %w", err)
		}
		if req != nil {
			if err := req.Wait(); err != nil {
				return fmt.Errorf("get request: %w", err)
			}
			req.Free()
		}
		if !bytes.Equal(got, data) {
			return fmt.Errorf("round %d: read back differs from what was written", r)
		}
		var reply uint64
		param := new(RequestParam).SetReply(&reply)
		if r%2 == 0 {
			param = nil // posted
		}
		req, err = p.ep.AtomicOpNBX(AtomicOpAdd, 1, counter, rk, param)
		if err != nil {
			return fmt.Errorf("atomic: %w", err)
		}
		adds.Add(1)
		if req != nil {
			if err := req.Wait(); err != nil {
				return fmt.Errorf("atomic request: %w", err)
			}
			req.Free()
		}
		switch r % 10 {
		case 3:
			if err := w.Fence(); err != nil {
				return fmt.Errorf("fence: %w", err)
			}
		case 6:
			w.Progress()
		case 9:
			if err := w.Flush(); err != nil {
				return fmt.Errorf("worker flush: %w", err)
			}
		}
	}
	if calls.Load() != int32(rounds) {
		return fmt.Errorf("%d put callbacks for %d puts", calls.Load(), rounds)
	}
	return nil
}

// TestSingleModeNoAllocs checks that the small direct put and Progress of
// a single-thread worker allocate nothing, now that operations check the
// endpoint's state and Progress looks for failed endpoints. (Operations
// through a network lane: TestNetworkRMANoAllocs.)
func TestSingleModeNoAllocs(t *testing.T) {
	t.Setenv("UCX_TLS", "sm,self")
	c := newContext(t)
	a, b := newWorker(t, c), newWorker(t, c)
	p := newPair(t, c, a, b, 4096)
	buf := make([]byte, 8)
	ops := map[string]func(){
		"put":      func() { p.ep.PutNBX(buf, p.base, p.rkey, nil) },
		"progress": func() { a.Progress() },
	}
	for name, op := range ops {
		if n := testing.AllocsPerRun(100, op); n != 0 {
			t.Errorf("%s: %v allocations per call, want 0", name, n)
		}
	}
	buf[0] = 42
	p.ep.PutNBX(buf, p.base, p.rkey, nil)
	if *(*byte)(unsafe.Pointer(&p.mem[0])) != 42 {
		t.Error("the put did not reach the target")
	}
	if _, err := p.ep.GetNBX(buf, p.base, nil, nil); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("get without a key: %v", err)
	}
}

// TestNetworkRMANoAllocs checks that puts, gets and atomics that go
// through a network lane (tcp) allocate nothing once their requests are
// pooled: they used to allocate the closures of their operations, one or
// two per call, on every blocking get and fetching atomic of shmem over
// tcp.
func TestNetworkRMANoAllocs(t *testing.T) {
	t.Setenv("UCX_TLS", "tcp,self")
	c := newContext(t)
	a, b := newWorker(t, c), newWorker(t, c)
	const size = 1 << 16
	p := newPair(t, c, a, b, size)
	if p.rkey.rma == nil || !p.rkey.rma.get || p.rkey.amo == nil {
		t.Skip("no network lane does gets and atomics here (tcp unavailable)")
	}
	small, large := make([]byte, 8), make([]byte, size)
	bcopy := make([]byte, min(p.rkey.rma.getBcopy, p.rkey.rma.putBcopy))
	if len(bcopy) <= p.rkey.rma.putShort || len(bcopy) >= size {
		t.Fatalf("bcopy size %d: not between the short limit %d and %d", len(bcopy), p.rkey.rma.putShort, size)
	}
	var reply uint64
	fetch := new(RequestParam).SetReply(&reply)
	fetch32 := new(RequestParam).SetReply(&reply).SetDatatype(DatatypeContig(4))
	wait := func(req *Request, err error) {
		if err != nil {
			t.Fatal(err)
		}
		if req == nil {
			// Done, or batched (a posted atomic): Progress writes the
			// batch, as a loop that waits for something would.
			a.Progress()
			b.Progress()
			return
		}
		for !req.IsCompleted() {
			a.Progress()
			b.Progress()
		}
		if err := req.Status(); err != nil {
			t.Fatal(err)
		}
		req.Free()
	}
	for _, tc := range []struct {
		name string
		op   func() (*Request, error)
	}{
		{"get short", func() (*Request, error) { return p.ep.GetNBX(small, p.base, p.rkey, nil) }},
		{"get bcopy", func() (*Request, error) { return p.ep.GetNBX(bcopy, p.base, p.rkey, nil) }},
		{"get zcopy", func() (*Request, error) { return p.ep.GetNBX(large, p.base, p.rkey, nil) }},
		{"put bcopy", func() (*Request, error) { return p.ep.PutNBX(bcopy, p.base, p.rkey, nil) }},
		{"put zcopy", func() (*Request, error) { return p.ep.PutNBX(large, p.base, p.rkey, nil) }},
		{"fetch-add", func() (*Request, error) { return p.ep.AtomicOpNBX(AtomicOpAdd, 1, p.base, p.rkey, fetch) }},
		{"fetch-add 32", func() (*Request, error) { return p.ep.AtomicOpNBX(AtomicOpAdd, 1, p.base, p.rkey, fetch32) }},
		{"compare-swap", func() (*Request, error) { return p.ep.AtomicOpNBX(AtomicOpCSwap, 1, p.base, p.rkey, fetch) }},
		{"compare-swap 32", func() (*Request, error) { return p.ep.AtomicOpNBX(AtomicOpCSwap, 1, p.base, p.rkey, fetch32) }},
		{"add", func() (*Request, error) { return p.ep.AtomicOpNBX(AtomicOpAdd, 1, p.base, p.rkey, nil) }},
	} {
		f := func() { wait(tc.op()) }
		f() // the request pool and the transport's buffers fill
		if n := testing.AllocsPerRun(200, f); n != 0 {
			t.Errorf("%s: %v allocations per call, want 0", tc.name, n)
		}
	}
	if err := p.ep.Flush(); err != nil {
		t.Fatal(err)
	}
}
