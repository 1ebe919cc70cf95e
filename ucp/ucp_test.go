package ucp

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
)

func newContext(t testing.TB) *Context {
	t.Helper()
	return newContextWith(t, 0)
}

// newContextWith is newContext with more features (FeatureWakeup).
func newContextWith(t testing.TB, more Feature) *Context {
	t.Helper()
	c, err := Init(new(Params).SetFeatures(FeatureRMA|FeatureAMO32|FeatureAMO64|more), nil)
	if err != nil {
		t.Fatalf("Init: %v", err)
	}
	t.Cleanup(c.Cleanup)
	return c
}

// newContextTLS is newContext with UCX_TLS set to tls, whatever the
// environment says.
func newContextTLS(t testing.TB, tls string) *Context {
	t.Helper()
	return newContextTLSWith(t, tls, 0)
}

// newContextTLSWith is newContextTLS with more features (FeatureTag).
func newContextTLSWith(t testing.TB, tls string, more Feature) *Context {
	t.Helper()
	cfg, err := ReadConfig("", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Modify("TLS", tls); err != nil {
		t.Fatal(err)
	}
	c, err := Init(new(Params).SetFeatures(FeatureRMA|FeatureAMO32|FeatureAMO64|more), cfg)
	if err != nil {
		t.Fatalf("Init with UCX_TLS=%s: %v", tls, err)
	}
	t.Cleanup(c.Cleanup)
	return c
}

// forceSoftware makes every operation on rk go in software over the AM
// lane, as if no lane could do it and no transport mapped the memory.
func forceSoftware(rk *Rkey) { rk.rma, rk.amo, rk.base = nil, nil, nil }

func newWorker(t testing.TB, c *Context) *Worker {
	t.Helper()
	w, err := c.NewWorker(nil)
	if err != nil {
		t.Fatalf("NewWorker: %v", err)
	}
	t.Cleanup(w.Destroy)
	return w
}

// pair is a mapped segment on worker b and an endpoint to it from worker a.
type pair struct {
	ep   *Endpoint
	rkey *Rkey
	base uint64
	mem  []byte
}

func newPair(t testing.TB, c *Context, a, b *Worker, size int) pair {
	t.Helper()
	return newPairWith(t, c, a, b, size, new(EPParams))
}

// newPairWith is newPair with the endpoint created from params (whose
// address it sets).
func newPairWith(t testing.TB, c *Context, a, b *Worker, size int, params *EPParams) pair {
	t.Helper()
	memh, err := c.MemMap(new(MemMapParams).SetLength(size).SetFlags(MemMapAllocate))
	if err != nil {
		t.Fatalf("MemMap: %v", err)
	}
	t.Cleanup(func() { c.MemUnmap(memh) })
	addr, _ := b.Address()
	ep, err := a.NewEndpoint(params.SetAddress(addr))
	if err != nil {
		t.Fatalf("NewEndpoint: %v", err)
	}
	t.Cleanup(func() { ep.Close(CloseModeFlush) })
	packed, err := c.RkeyPack(memh)
	if err != nil {
		t.Fatal(err)
	}
	rk, err := ep.RkeyUnpack(packed)
	if err != nil {
		t.Fatalf("RkeyUnpack: %v", err)
	}
	t.Cleanup(rk.Destroy)
	return pair{ep: ep, rkey: rk, base: uint64(uintptr(memh.Address())), mem: unsafe.Slice((*byte)(memh.Address()), size)}
}

func TestInitParams(t *testing.T) {
	if _, err := Init(new(Params), nil); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("Init without features: %v", err)
	}
	if _, err := Init(nil, nil); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("Init(nil): %v", err)
	}
	t.Setenv("UCX_TLS", "ib")
	if _, err := Init(new(Params).SetFeatures(FeatureRMA), nil); !errors.Is(err, ucs.ErrNoDevice) {
		t.Errorf("Init with UCX_TLS=ib, a transport this build lacks: %v", err)
	}
	t.Setenv("UCX_TLS", "^posix")
	c, err := Init(new(Params).SetFeatures(FeatureRMA).SetName("x").SetEstimatedNumEPs(7), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Cleanup()
	a := c.Query()
	if a.Name != "x" || c.numEPs != 7 {
		t.Errorf("params not applied: %+v numEPs %d", a, c.numEPs)
	}
	hasSelf := false
	for _, tr := range a.Transports {
		if strings.HasPrefix(tr, "posix/") {
			t.Errorf("UCX_TLS=^posix selected %s", tr)
		}
		hasSelf = hasSelf || tr == "self/memory0"
	}
	if !hasSelf {
		t.Errorf("UCX_TLS=^posix lost self: %v", a.Transports)
	}
	t.Setenv("UCX_TLS", "all")
	t.Setenv("UCX_NUM_EPS", "12")
	c2, err := Init(new(Params).SetFeatures(FeatureRMA).SetEstimatedNumEPs(7), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Cleanup()
	if c2.numEPs != 12 {
		t.Errorf("UCX_NUM_EPS did not override estimated_num_eps: %d", c2.numEPs)
	}
	t.Setenv("UCX_NUM_EPS", "many")
	if _, err := Init(new(Params).SetFeatures(FeatureRMA), nil); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("UCX_NUM_EPS=many: %v", err)
	}
}

func TestTransportConfigPrefix(t *testing.T) {
	// A transport setting is read under the transport's own prefix.
	t.Setenv("UCX_POSIX_FIFO_SIZE", "not-a-number")
	c := newContext(t)
	if _, err := c.NewWorker(nil); err != nil {
		t.Logf("worker with a bad UCX_POSIX_FIFO_SIZE: %v", err)
	}
	for _, r := range c.resources {
		if r.tl.TLName == "posix" {
			// The bad value must have reached the posix iface: either the
			// iface failed to open (and was skipped) or it rejected it.
			w, err := c.NewWorker(nil)
			if err == nil {
				for _, wi := range w.ifaces {
					if wi.rsc.tl.TLName == "posix" {
						t.Errorf("posix iface opened with UCX_POSIX_FIFO_SIZE=not-a-number")
					}
				}
				w.Destroy()
			}
		}
	}
	if got := ComponentEnvPrefix("", "posix"); got != "UCX_POSIX_" {
		t.Errorf("ComponentEnvPrefix = %q", got)
	}
}

// TestWireupLanes checks the lanes wireup picks, by UCX_TLS: the self
// transport to the worker itself, shared memory to another worker of the
// node, tcp where nothing else is selected.
func TestWireupLanes(t *testing.T) {
	var a *Worker
	for _, tt := range []struct{ tls, self, other string }{
		{"all", "self", "posix"},
		{"sm", "posix", "posix"},
		{"tcp", "tcp", "tcp"},
		{"tcp,self", "self", "tcp"},
		{"self,sysv", "self", "sysv"},
	} {
		c := newContextTLS(t, tt.tls)
		a = newWorker(t, c)
		b := newWorker(t, c)
		for _, to := range []struct {
			name string
			w    *Worker
			tl   string
		}{{"to itself", a, tt.self}, {"to another worker", b, tt.other}} {
			addr, _ := to.w.Address()
			ep, err := a.NewEndpoint(new(EPParams).SetAddress(addr))
			if err != nil {
				t.Fatalf("UCX_TLS=%s %s: %v", tt.tls, to.name, err)
			}
			for _, l := range ep.Query().Lanes {
				if l.Transport != to.tl {
					t.Errorf("UCX_TLS=%s %s: lane %+v, want transport %s", tt.tls, to.name, l, to.tl)
				}
			}
			ep.Close(CloseModeForce)
		}
	}
	if _, err := a.NewEndpoint(new(EPParams)); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("no address: %v", err)
	}
	if _, err := a.NewEndpoint(new(EPParams).SetAddress([]byte("GWA\x01junk"))); !errors.Is(err, ucs.ErrInvalidAddr) {
		t.Errorf("junk address: %v", err)
	}
}

// TestRMAAndAtomics runs every operation over the self lane and the posix
// lane, against a model kept in Go memory.
func TestRMAAndAtomics(t *testing.T) {
	c := newContext(t)
	a, b := newWorker(t, c), newWorker(t, c)
	for _, tt := range []struct {
		name string
		to   *Worker
	}{{"self", a}, {"posix", b}} {
		t.Run(tt.name, func(t *testing.T) {
			exercise(t, newPair(t, c, a, tt.to, 4<<20))
		})
	}
}

// TestSoftwareRMA runs every operation through the software protocols, as
// on a lane without RMA or atomics (tcp): the target's worker applies them,
// progressed here by its own goroutine, and answers on its endpoint back.
// TestSoftwareRMA runs RMA and atomics in software over the AM lane, with
// and without an endpoint from the target back to the initiator: without
// one, the target creates it from the initiator's wireup message.
func TestSoftwareRMA(t *testing.T) {
	for _, back := range []bool{true, false} {
		name := "with back endpoint"
		if !back {
			name = "wireup creates the back endpoint"
		}
		t.Run(name, func(t *testing.T) { testSoftwareRMA(t, back) })
	}
}

func testSoftwareRMA(t *testing.T, withBack bool) {
	c := newContext(t)
	a, b := newWorker(t, c), newWorker(t, c)
	// Cleanups run last-registered first: a's endpoint flushes through b
	// while b still progresses, then b's goroutine stops, then b's
	// endpoint back closes.
	if withBack {
		aAddr, _ := a.Address()
		back, err := b.NewEndpoint(new(EPParams).SetAddress(aAddr))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { back.Close(CloseModeForce) })
	}
	p := newPair(t, c, a, b, 4<<20)
	stop, done := serve(b)
	t.Cleanup(func() { close(stop); <-done })
	if p.rkey.swToken == 0 {
		t.Fatal("packed rkey carries no software token")
	}
	forceSoftware(p.rkey) // as if no lane could do them
	exercise(t, p)
	if b.epByUID(a.uid) == nil {
		t.Error("the target has no endpoint back to the initiator")
	}
	// A key with a forged token is refused by the target.
	forged := *p.rkey
	forged.swToken ^= 0xff
	got := make([]byte, 8)
	req, err := p.ep.GetNBX(got, p.base, &forged, nil)
	if err == nil && req != nil {
		err = req.Wait()
	}
	if !errors.Is(err, ucs.ErrInvalidAddr) {
		t.Errorf("get with a forged token: %v, want ErrInvalidAddr", err)
	}
}

func exercise(t *testing.T, p pair) {
	t.Helper()
	// Put and get of every size class, unaligned.
	for _, n := range []int{0, 1, 7, 8, 100, 4095, 8193, 1 << 20, 3<<20 + 5} {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(i*31 + n)
		}
		req, err := p.ep.PutNBX(src, p.base+3, p.rkey, nil)
		if err != nil {
			t.Fatalf("put %d: %v", n, err)
		}
		if req != nil {
			if err := req.Wait(); err != nil {
				t.Fatal(err)
			}
			req.Free()
		}
		if err := p.ep.Flush(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(src, p.mem[3:3+n]) {
			t.Fatalf("put %d bytes: target differs", n)
		}
		got := make([]byte, n)
		req, err = p.ep.GetNBX(got, p.base+3, p.rkey, nil)
		if err != nil {
			t.Fatalf("get %d: %v", n, err)
		}
		if req != nil {
			req.Wait()
			req.Free()
		}
		if !bytes.Equal(src, got) {
			t.Fatalf("get %d bytes differs", n)
		}
	}
	// Atomics, 32 and 64 bit, against a model.
	for _, size := range []int{4, 8} {
		word := (*uint64)(unsafe.Pointer(&p.mem[64]))
		*word = 0
		model := uint64(0)
		mask := uint64(1<<(8*size) - 1)
		apply := func(op AtomicOp, v, cmpv uint64) uint64 {
			old := model
			switch op {
			case AtomicOpAdd:
				model = (model + v) & mask
			case AtomicOpAnd:
				model &= v
			case AtomicOpOr:
				model |= v
			case AtomicOpXor:
				model ^= v
			case AtomicOpSwap:
				model = v & mask
			case AtomicOpCSwap:
				if model == cmpv&mask {
					model = v & mask
				}
			}
			return old
		}
		ops := []struct {
			op     AtomicOp
			v, cmp uint64
			fetch  bool
		}{
			{AtomicOpAdd, 5, 0, false}, {AtomicOpAdd, 1<<32 + 3, 0, true}, {AtomicOpOr, 0xf0f0, 0, false},
			{AtomicOpAnd, 0xff00ff, 0, true}, {AtomicOpXor, 0x1234, 0, false}, {AtomicOpXor, 0xffff, 0, true},
			{AtomicOpSwap, 77, 0, true}, {AtomicOpCSwap, 99, 77, true}, {AtomicOpCSwap, 11, 77, true},
			{AtomicOpAdd, ^uint64(0), 0, true},
		}
		for i, o := range ops {
			param := new(RequestParam).SetDatatype(DatatypeContig(size))
			var reply uint64
			if o.fetch {
				reply = o.cmp
				param.SetReply(&reply)
			}
			req, err := p.ep.AtomicOpNBX(o.op, o.v, p.base+64, p.rkey, param)
			if err != nil {
				t.Fatalf("size %d op %d %v: %v", size, i, o.op, err)
			}
			if req != nil {
				req.Wait()
				req.Free()
			}
			want := apply(o.op, o.v, o.cmp)
			if o.fetch && reply != want {
				t.Fatalf("size %d op %d %v: fetched %#x, want %#x", size, i, o.op, reply, want)
			}
			// A posted atomic is complete at the target after a flush.
			if err := p.ep.Flush(); err != nil {
				t.Fatal(err)
			}
			got := *word & mask
			if size == 4 {
				got = uint64(*(*uint32)(unsafe.Pointer(word)))
			}
			if got != model {
				t.Fatalf("size %d op %d %v: memory %#x, want %#x", size, i, o.op, got, model)
			}
		}
	}
	// Bad atomics.
	if _, err := p.ep.AtomicOpNBX(AtomicOpSwap, 1, p.base+64, p.rkey, nil); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("swap without reply: %v", err)
	}
	if _, err := p.ep.AtomicOpNBX(AtomicOpAdd, 1, p.base+65, p.rkey, nil); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("unaligned atomic: %v", err)
	}
	if _, err := p.ep.AtomicOpNBX(AtomicOpAdd, 1, p.base, p.rkey, new(RequestParam).SetDatatype(DatatypeContig(2))); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("2-byte atomic: %v", err)
	}
	// Direct access through the rkey, where a transport maps the memory.
	ptr, err := p.rkey.Ptr(p.base + 128)
	if errors.Is(err, ucs.ErrUnreachable) && p.rkey.ptr == nil {
		t.Logf("no direct access: no selected transport maps the memory (UCX_TLS=%q)", os.Getenv("UCX_TLS"))
		return
	}
	if err != nil {
		t.Fatalf("Ptr: %v", err)
	}
	*(*uint64)(ptr) = 0xabcdef
	if got := *(*uint64)(unsafe.Pointer(&p.mem[128])); got != 0xabcdef {
		t.Errorf("store through Ptr not seen: %#x", got)
	}
	if _, err := p.rkey.Ptr(p.base + uint64(len(p.mem))); !errors.Is(err, ucs.ErrOutOfRange) {
		t.Errorf("Ptr past the end: %v", err)
	}
}

func TestRequestCallbacks(t *testing.T) {
	c := newContext(t)
	a, b := newWorker(t, c), newWorker(t, c)
	p := newPair(t, c, a, b, 1<<20)
	var calls atomic.Int32
	var gotUser any
	param := new(RequestParam).SetOpAttrFlags(OpAttrFlagNoImmCmpl).SetUserData("ud").
		SetCallback(func(r *Request, status error, user any) {
			if status != nil {
				t.Errorf("callback status %v", status)
			}
			gotUser = user
			calls.Add(1)
		})
	req, err := p.ep.PutNBX([]byte("hello"), p.base, p.rkey, param)
	if err != nil || req == nil {
		t.Fatalf("put with NoImmCmpl: %v, %v", req, err)
	}
	if err := req.Wait(); err != nil || !req.IsCompleted() || calls.Load() != 1 || gotUser != "ud" {
		t.Fatalf("request: err %v completed %v calls %d user %v", err, req.IsCompleted(), calls.Load(), gotUser)
	}
	if q := req.Query(); q.Status != nil || q.DebugString == "" {
		t.Errorf("Query: %+v", q)
	}
	req.Free()
	// Without NoImmCmpl a completed put returns no request and no callback.
	param = new(RequestParam).SetCallback(func(*Request, error, any) { calls.Add(1) })
	if req, err := p.ep.PutNBX([]byte("x"), p.base, p.rkey, param); req != nil || err != nil {
		t.Fatalf("immediate put: %v %v", req, err)
	}
	if calls.Load() != 1 {
		t.Errorf("callback called on immediate completion")
	}
	// User-provided request memory.
	var mine Request
	req, err = p.ep.PutNBX([]byte("y"), p.base, p.rkey, new(RequestParam).SetRequest(&mine).SetOpAttrFlags(OpAttrFlagNoImmCmpl))
	if err != nil || req != &mine {
		t.Fatalf("user request: %p %v", req, err)
	}
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := a.Fence(); err != nil {
		t.Fatal(err)
	}
}

func TestMemMap(t *testing.T) {
	// Every transport, whatever UCX_TLS says: the heap-sized allocation
	// below comes from a shared-memory domain (TestMemMapAllocatesWithSelectedMD
	// checks the selections without one).
	c := newContextCfg(t, FeatureRMA|FeatureAMO32|FeatureAMO64, "TLS", "all")
	if _, err := c.MemMap(new(MemMapParams).SetFlags(MemMapAllocate)); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("no length: %v", err)
	}
	m, err := c.MemMap(new(MemMapParams).SetLength(1 << 30).SetFlags(MemMapAllocate))
	if err != nil {
		t.Fatalf("1 GiB: %v", err)
	}
	q := m.Query()
	if q.Length != 1<<30 || (q.Method != "md:sysv" && q.Method != "md:posix") {
		t.Errorf("Query: %+v", q)
	}
	if err := c.MemUnmap(m); err != nil {
		t.Fatal(err)
	}
	if err := c.MemUnmap(m); err == nil {
		t.Error("double unmap succeeded")
	}
	buf := make([]byte, 4096)
	m, err = c.MemMap(new(MemMapParams).SetAddress(unsafe.Pointer(&buf[0])).SetLength(len(buf)))
	if err != nil {
		t.Fatalf("register Go memory: %v", err)
	}
	if q := m.Query(); q.Method != "" || len(q.MDs) == 0 {
		t.Errorf("registered memory: %+v", q)
	}
	c.MemUnmap(m)
}

func TestDecodersRejectGarbage(t *testing.T) {
	c := newContext(t)
	w := newWorker(t, c)
	addr, _ := w.Address()
	if _, err := decodeWorkerAddress(addr); err != nil {
		t.Fatalf("own address: %v", err)
	}
	for i := 0; i < len(addr); i++ {
		if _, err := decodeWorkerAddress(addr[:i]); !errors.Is(err, ucs.ErrInvalidAddr) {
			t.Fatalf("address truncated to %d bytes: %v", i, err)
		}
	}
	if _, err := decodeWorkerAddress(append(append([]byte(nil), addr...), 0)); !errors.Is(err, ucs.ErrInvalidAddr) {
		t.Errorf("trailing byte accepted: %v", err)
	}
	m, _ := c.MemMap(new(MemMapParams).SetLength(4096).SetFlags(MemMapAllocate))
	defer c.MemUnmap(m)
	rk, _ := c.RkeyPack(m)
	for i := 0; i < len(rk); i++ {
		if err := checkRkey(rk[:i]); !errors.Is(err, ucs.ErrInvalidParam) {
			t.Fatalf("rkey truncated to %d bytes: %v", i, err)
		}
	}
}

func FuzzWorkerAddress(f *testing.F) {
	c := newContext(f)
	w := newWorker(f, c)
	addr, _ := w.Address()
	f.Add(addr)
	f.Add([]byte("GWA\x01"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := decodeWorkerAddress(b)
		if err != nil {
			if !errors.Is(err, ucs.ErrInvalidAddr) {
				t.Fatalf("error %v is not ErrInvalidAddr", err)
			}
			return
		}
		// What decodes re-encodes to the same bytes.
		if !bytes.Equal(b, a.encode()) {
			t.Fatalf("re-encoding differs")
		}
	})
}

func FuzzRkey(f *testing.F) {
	c := newContext(f)
	m, _ := c.MemMap(new(MemMapParams).SetLength(4096).SetFlags(MemMapAllocate))
	rk, _ := c.RkeyPack(m)
	f.Add(rk)
	f.Add([]byte("GRK\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		k := new(packedRkey)
		if err := decodeRkey(b, k); err != nil {
			if !errors.Is(err, ucs.ErrInvalidParam) {
				t.Fatalf("error %v is not ErrInvalidParam", err)
			}
			return
		}
		if !bytes.Equal(b, encodeRkey(k)) {
			t.Fatalf("%x decodes to %+v, which encodes differently", b, k)
		}
	})
}

// TestSelectionWith: the UCX_TLS that adds transports left out, for the
// advice on a selection that loses a fast path.
func TestSelectionWith(t *testing.T) {
	tests := []struct {
		tls   string
		names []string
		want  string
	}{
		{"tcp", []string{"self"}, "tcp,self"},
		{"tcp", []string{"self", "sm"}, "tcp,self,sm"},
		{"sm,tcp", []string{"self"}, "sm,tcp,self"},
		{"posix", []string{"sm"}, "posix,sm"}, // sysv is left out
		{"tcp,self", []string{"self"}, ""},    // selected already
		{"all", []string{"self", "sm"}, ""},
		{"tcp", []string{"ib"}, ""}, // not offered here
		{"^sm", []string{"sm"}, "all"},
		{"^posix", []string{"sm"}, "all"},
		{"^sm,tcp", []string{"sm"}, "^tcp"},
		{"^self,tcp", []string{"self", "sm"}, "^tcp"},
	}
	for _, tt := range tests {
		c := newContextTLS(t, tt.tls)
		if got := c.SelectionWith(tt.names...); got != tt.want {
			t.Errorf("UCX_TLS=%s: SelectionWith(%q) = %q, want %q", tt.tls, tt.names, got, tt.want)
		}
	}
}
