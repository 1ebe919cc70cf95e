package ucp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"testing"
	"weak"

	"github.com/goshmem/goshmem/ucs"
)

// TestOpFlagsEveryCall checks that every nbx call honours
// OpAttrFlagNoImmCmpl and OpAttrFlagForceImmCmpl the same way, whether
// they are set in OpAttrMask (as in UCX) or in the raw Flags word: an operation
// that completes at once returns, under NoImmCmpl, a completed request
// whose callback ran; under ForceImmCmpl one that cannot fails with
// ucs.ErrNoResource.
func TestOpFlagsEveryCall(t *testing.T) {
	for _, tls := range []string{"sm", "tcp,self"} {
		t.Run(tls, func(t *testing.T) {
			c := newContextCfg(t, FeatureRMA|FeatureAMO64|FeatureAM|FeatureTag, "TLS", tls)
			a, b := newWorker(t, c), newWorker(t, c)
			p := newPair(t, c, a, b, 4096)
			ops := []struct {
				name string
				op   func(param *RequestParam) (*Request, error)
			}{
				{"put", func(param *RequestParam) (*Request, error) { return p.ep.PutNBX([]byte("x"), p.base, p.rkey, param) }},
				{"atomic", func(param *RequestParam) (*Request, error) {
					return p.ep.AtomicOpNBX(AtomicOpAdd, 1, p.base, p.rkey, param)
				}},
				{"get", func(param *RequestParam) (*Request, error) {
					return p.ep.GetNBX(make([]byte, 8), p.base, p.rkey, param)
				}},
				{"am", func(param *RequestParam) (*Request, error) { return p.ep.AMSendNBX(1, nil, []byte("x"), param) }},
				{"tag", func(param *RequestParam) (*Request, error) { return p.ep.TagSendNBX([]byte("x"), 1, param) }},
			}
			for _, how := range []string{"mask", "flags"} {
				for _, o := range ops {
					t.Run(how+"/"+o.name, func(t *testing.T) {
						calls := 0
						param := new(RequestParam).SetCallback(func(*Request, error, any) { calls++ })
						if how == "mask" {
							param.OpAttrMask |= OpAttrFlagNoImmCmpl
						} else {
							param.SetFlags(uint32(OpAttrFlagNoImmCmpl))
						}
						r, err := o.op(param)
						if err != nil || r == nil {
							t.Fatalf("NoImmCmpl: %v, %v; want a request", r, err)
						}
						if r.IsCompleted() && calls != 1 {
							t.Errorf("NoImmCmpl: completed request, callback called %d times", calls)
						}
						if err := waitDone(r, nil); err != nil {
							t.Fatal(err)
						}
						force := new(RequestParam)
						if how == "mask" {
							force.OpAttrMask |= OpAttrFlagForceImmCmpl
						} else {
							force.SetFlags(uint32(OpAttrFlagForceImmCmpl))
						}
						r, err = o.op(force)
						switch {
						case errors.Is(err, ucs.ErrNoResource):
						case err != nil:
							t.Errorf("ForceImmCmpl: %v", err)
						case r != nil:
							t.Errorf("ForceImmCmpl: a request (%s)", r.Query().DebugString)
							waitDone(r, nil)
						}
					})
				}
			}
			if err := a.Flush(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRequestHints checks what the doc comments of OpAttrFlagFastCmpl and
// RequestParam.MemoryType promise: both are hints that change nothing, so
// puts and gets given them move the same bytes as without.
func TestRequestHints(t *testing.T) {
	c := newContextCfg(t, FeatureRMA, "TLS", "sm,tcp,self")
	a, b := newWorker(t, c), newWorker(t, c)
	p := newPair(t, c, a, b, 64)
	for i, tc := range []struct {
		name  string
		param *RequestParam
	}{
		{"fast completion", new(RequestParam).SetOpAttrFlags(OpAttrFlagFastCmpl)},
		{"memory type host", &RequestParam{OpAttrMask: OpAttrFieldMemoryType, MemoryType: ucs.MemoryTypeHost}},
		{"memory type unknown", &RequestParam{OpAttrMask: OpAttrFieldMemoryType, MemoryType: ucs.MemoryTypeUnknown}},
		{"both", &RequestParam{OpAttrMask: OpAttrFieldMemoryType | OpAttrFlagFastCmpl, MemoryType: ucs.MemoryTypeHost}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := []byte{byte(i + 1), 2, 3, 4, 5, 6, 7, 8}
			if err := waitDone(p.ep.PutNBX(want, p.base, p.rkey, tc.param)); err != nil {
				t.Fatalf("put: %v", err)
			}
			got := make([]byte, len(want))
			if err := waitDone(p.ep.GetNBX(got, p.base, p.rkey, tc.param)); err != nil {
				t.Fatalf("get: %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("got %v, want %v", got, want)
			}
		})
	}
}

// TestRequestStatusCalls checks CheckStatus, Test and TagRecvRequestTest
// on a receive before and after it completes.
func TestRequestStatusCalls(t *testing.T) {
	e := newTagEnv(t, "sm,self", "sm,self", false)
	r, err := e.b.TagRecvNBX(make([]byte, 4), 3, tagMaskFull, nil)
	if err != nil {
		t.Fatal(err)
	}
	info := TagRecvInfo{SenderTag: 99}
	if err := r.CheckStatus(); err != ucs.InProgress {
		t.Errorf("CheckStatus of a posted receive: %v", err)
	}
	if err := r.Test(&info); err != ucs.InProgress || info.SenderTag != 99 {
		t.Errorf("Test of a posted receive: %v, %+v", err, info)
	}
	if _, err := e.ab.TagSendNBX([]byte("abcd"), 3, nil); err != nil {
		t.Fatal(err)
	}
	e.wait(t, "recv", r.IsCompleted)
	for name, test := range map[string]func(*TagRecvInfo) error{"Test": r.Test, "TagRecvRequestTest": r.TagRecvRequestTest} {
		info = TagRecvInfo{}
		if err := test(&info); err != nil || info != (TagRecvInfo{SenderTag: 3, Length: 4}) {
			t.Errorf("%s of a completed receive: %v, %+v", name, err, info)
		}
	}
	if err := r.CheckStatus(); err != nil {
		t.Errorf("CheckStatus: %v", err)
	}
	r.Release()
}

// TestRequestPoolGoesWithContext checks that nothing in the package keeps a
// context alive once it is cleaned up: request pools are its workers', not
// entries of a package-wide table.
func TestRequestPoolGoesWithContext(t *testing.T) {
	gone := func() weak.Pointer[Context] {
		c, err := Init(new(Params).SetFeatures(FeatureRMA).SetRequestSize(16), nil)
		if err != nil {
			t.Fatal(err)
		}
		w, err := c.NewWorker(nil)
		if err != nil {
			t.Fatal(err)
		}
		r := w.newRequest(nil)
		r.complete(ucs.OK)
		r.Free()
		w.Destroy()
		c.Cleanup()
		return weak.Make(c)
	}()
	for i := 0; i < 10 && gone.Value() != nil; i++ {
		runtime.GC()
	}
	if gone.Value() != nil {
		t.Error("a cleaned-up context is still reachable")
	}
}

// TestRequestPoolLocal checks where freed requests wait: in single and
// serialized mode on the worker's lock-free stack, the latest first, up to
// localRequests (the rest in the sync.Pool), and in multi mode, where
// goroutines free requests at once, never there.
func TestRequestPoolLocal(t *testing.T) {
	c := newContextParams(t, new(Params).SetFeatures(FeatureRMA))
	for _, tc := range []struct {
		mode  ucs.ThreadMode
		local bool
	}{
		{ucs.ThreadModeSingle, true},
		{ucs.ThreadModeSerialized, true},
		{ucs.ThreadModeMulti, false},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			w, err := c.NewWorker(new(WorkerParams).SetThreadMode(tc.mode))
			if err != nil {
				t.Fatal(err)
			}
			defer w.Destroy()
			var rs []*Request
			for range localRequests + 4 {
				r := w.newRequest(nil)
				r.complete(ucs.OK)
				rs = append(rs, r)
			}
			for _, r := range rs {
				r.Free()
			}
			if !tc.local {
				if n := w.requests.depth(); n != 0 {
					t.Fatalf("multi mode: %d requests on the lock-free stack", n)
				}
				return
			}
			if got := len(w.requests.stacked()); got != localRequests {
				t.Fatalf("%d requests on the stack after freeing %d, want %d", got, len(rs), localRequests)
			}
			// The latest freed of those the stack kept comes back first.
			if r := w.newRequest(nil); r != rs[localRequests-1] {
				t.Errorf("the next request is not the latest the stack kept")
			} else if r.IsCompleted() || r.w != w {
				t.Errorf("a reused request is not reset: completed %v, worker %p", r.IsCompleted(), r.w)
			}
		})
	}
}

// TestRequestCleanup checks that the context's RequestCleanup is called, at
// the latest when the worker is destroyed, once on each request the
// worker's pool initialized, and never on a request in the caller's memory.
func TestRequestCleanup(t *testing.T) {
	for _, tc := range []struct {
		name     string
		pooled   int  // requests taken from the pool at once, then freed
		external bool // one more request in the caller's memory
	}{
		{"none", 0, false},
		{"one", 1, false},
		{"three at once", 3, false},
		{"external only", 0, true},
		{"pooled and external", 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var inits, cleanups int
			seen := map[*Request]int{}
			c := newContextParams(t, new(Params).SetFeatures(FeatureRMA).
				SetRequestInit(func(*Request) { inits++ }).
				SetRequestCleanup(func(r *Request) { cleanups++; seen[r]++ }))
			w := newWorker(t, c)
			var rs []*Request
			for range tc.pooled {
				rs = append(rs, w.newRequest(nil))
			}
			if tc.external {
				ext := new(Request)
				rs = append(rs, w.newRequest(&RequestParam{OpAttrMask: OpAttrFieldRequest, Request: ext}))
			}
			for _, r := range rs {
				r.complete(ucs.OK)
				r.Free()
			}
			// Reuse must not count again.
			for range tc.pooled {
				r := w.newRequest(nil)
				r.complete(ucs.OK)
				r.Free()
			}
			if cleanups != 0 {
				t.Fatalf("%d cleanups before Destroy", cleanups)
			}
			// Every pooled request that was initialized is cleaned up: at
			// least those taken at once (the pool may have dropped some
			// and made new ones for the reuse).
			want := inits
			if tc.external {
				want--
			}
			w.Destroy()
			if n := w.requests.depth(); n != 0 {
				t.Errorf("%d requests on the stack of a destroyed worker", n)
			}
			if cleanups != want || cleanups < tc.pooled {
				t.Errorf("%d cleanups at Destroy (%d inits), want %d", cleanups, inits, want)
			}
			for r, n := range seen {
				if n != 1 || r.external {
					t.Errorf("request %p cleaned up %d times (external %v)", r, n, r.external)
				}
			}
			w.Destroy()
			if cleanups != want {
				t.Errorf("after a second Destroy: %d cleanups, want %d", cleanups, want)
			}
		})
	}
}

// TestRequestLifeCycle checks who reports and who releases a request, in
// every thread mode and shared or not (the life-cycle words are plain in
// single and serialized mode, atomic in multi mode and for a shared
// request, one that waits for a software reply): the callback runs once whatever
// the order of completion and Free, a second completion is ignored, a
// completion inside hold..unhold is left to the call, and the request is
// released once, by the side that comes last.
func TestRequestLifeCycle(t *testing.T) {
	c := newContextParams(t, new(Params).SetFeatures(FeatureRMA))
	for _, cfg := range []struct {
		mode   ucs.ThreadMode
		shared bool
	}{{ucs.ThreadModeSingle, false}, {ucs.ThreadModeSerialized, false}, {ucs.ThreadModeMulti, false}, {ucs.ThreadModeSingle, true}} {
		w, err := c.NewWorker(new(WorkerParams).SetThreadMode(cfg.mode))
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name      string
			run       func(r *Request)
			calls     int        // callbacks
			st        ucs.Status // the request's status after run (when not released)
			released  bool
			freeAfter bool // Free still owed after run
		}{
			{"complete, then free", func(r *Request) { r.complete(ucs.OK) }, 1, ucs.OK, false, true},
			{"free, then complete", func(r *Request) { r.Free(); r.complete(ucs.OK) }, 1, 0, true, false},
			{"completed twice", func(r *Request) { r.complete(ucs.ErrIOError); r.complete(ucs.OK) }, 1, ucs.ErrIOError, false, true},
			{"freed in its callback", func(r *Request) { r.cb = func(r *Request, _ error, _ any) { r.Free() }; r.complete(ucs.OK) }, 0, 0, true, false},
			{"completed while held", func(r *Request) {
				r.hold()
				r.complete(ucs.ErrCanceled)
				if got, st := r.heldResult(0); got != nil || st != ucs.ErrCanceled {
					t.Errorf("heldResult: %p, %v; want nil, %v", got, st, ucs.ErrCanceled)
				}
			}, 0, 0, true, false},
			{"completed while held, a request asked for", func(r *Request) {
				r.hold()
				r.complete(ucs.ErrCanceled)
				if got, st := r.heldResult(flagNoImmCmpl); got != r || st != ucs.ErrCanceled {
					t.Errorf("heldResult: %p, %v; want the request, %v", got, st, ucs.ErrCanceled)
				}
			}, 1, ucs.ErrCanceled, false, true},
			{"held, completed after", func(r *Request) {
				r.hold()
				if got, st := r.heldResult(0); got != r || st != ucs.InProgress {
					t.Errorf("heldResult: %p, %v; want the request, in progress", got, st)
				}
				r.complete(ucs.OK)
			}, 1, ucs.OK, false, true},
		} {
			t.Run(fmt.Sprintf("%v/shared=%v/%s", cfg.mode, cfg.shared, tc.name), func(t *testing.T) {
				calls := 0
				r := w.newRequest(new(RequestParam).SetCallback(func(*Request, error, any) { calls++ }))
				r.untracked = true // not counted as in flight
				r.shared = r.shared || cfg.shared
				tc.run(r)
				if calls != tc.calls {
					t.Errorf("%d callbacks, want %d", calls, tc.calls)
				}
				if released := requestReleased(w, r); released != tc.released {
					t.Fatalf("released %v, want %v", released, tc.released)
				}
				if tc.released {
					if r.shared && slices.Contains(w.requests.stacked(), r) {
						t.Error("a shared request was released to the lock-free stack")
					}
					return
				}
				if got := ucs.Status(r.state); got != tc.st {
					t.Errorf("status %v, want %v", got, tc.st)
				}
				if tc.freeAfter {
					r.Free()
					if !requestReleased(w, r) {
						t.Error("Free of a completed request did not release it")
					}
				}
			})
		}
		w.Destroy()
	}
}

// requestReleased reports whether r, which every case of
// TestRequestLifeCycle gives a callback, went back to w's pool: to the
// stack, which keeps its operation until it is taken again, or cleared to
// the sync.Pool.
func requestReleased(w *Worker, r *Request) bool {
	return slices.Contains(w.requests.stacked(), r) || r.cb == nil
}

// TestRequestFreeTwice checks that a second Free of a request released to
// the worker's stack leaves the stack a list: the request is on it once,
// and the next two operations get two requests.
func TestRequestFreeTwice(t *testing.T) {
	c := newContextParams(t, new(Params).SetFeatures(FeatureRMA))
	w := newWorker(t, c)
	w.requests.drop()
	r := w.newRequest(nil)
	r.complete(ucs.OK)
	r.Free()
	r.Free()
	if n := w.requests.depth(); n != 1 {
		t.Fatalf("%d requests on the stack after freeing one twice, want 1", n)
	}
	if a, b := w.newRequest(nil), w.newRequest(nil); a == b {
		t.Fatal("two operations got the same request")
	}
}

// requestKept are the fields of Request that are not its operation's:
// the request's own (its worker, completion, memory, its place on the
// worker's stack, its life-cycle words, reset for the next operation) and
// those every operation sets anew.
var requestKept = map[string]bool{
	"comp": true, "w": true, "state": true, "fate": true, "claimed": true, "held": true,
	"shared": true, "size": true, "proto": true, "result": true, "result32": true,
	"pending": true, "reserved": true, "inited": true, "external": true,
	"pack": true, "unpack": true, "nextFree": true,
}

// opFields returns the operation's fields of r that are not zero, each
// field of a struct by its path ("tr.sn"), those of reqOp by their own
// name.
func opFields(r *Request) []string {
	var nonzero []string
	var walk func(v reflect.Value, path string)
	walk = func(v reflect.Value, path string) {
		if v.Kind() != reflect.Struct {
			if !v.IsZero() {
				nonzero = append(nonzero, path)
			}
			return
		}
		for i := range v.NumField() {
			f := v.Type().Field(i)
			switch {
			case path == "" && requestKept[f.Name]:
			case f.Anonymous:
				walk(v.Field(i), path)
			case path == "":
				walk(v.Field(i), f.Name)
			default:
				walk(v.Field(i), path+"."+f.Name)
			}
		}
	}
	walk(reflect.ValueOf(r).Elem(), "")
	return nonzero
}

// TestRequestHandedOutClear checks that a request handed out for an
// operation holds nothing of the one it served before, whatever that was
// (a released request on the worker's stack keeps its operation but for
// its data, dropData, until requestPool.pop clears it): takeRequest and
// newRequest hand out requests whose operation fields are all zero but
// those their params set, and the receives that take the worker's request
// inline (TagRecvNBX, StreamRecvNBX) return one whose fields that are not
// zero are among those the same receive sets in a request that served
// nothing before; each is a request that runs (its life-cycle words). A
// request released to the sync.Pool (a full stack, multi mode, a shared
// request) is cleared at once.
func TestRequestHandedOutClear(t *testing.T) {
	c := newContextParams(t, new(Params).SetFeatures(FeatureTag|FeatureStream|FeatureRMA|FeatureAMO64), "TLS", "self")
	w := newWorker(t, c)
	p := newPair(t, c, w, w, 1<<20)
	// Puts and gets through the lane (their requests' rma), not as the
	// direct copy into mapped memory.
	p.rkey.base = nil
	ep := p.ep
	reqParam := func() *RequestParam { return new(RequestParam).SetOpAttrFlags(OpAttrFlagNoImmCmpl) }
	var freed []*Request // the requests of the operation, freed
	wait := func(t *testing.T, r *Request, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		// Not Wait: a request that kept its last operation may never
		// complete.
		progressUntil(t, w, "the operation", r.IsCompleted)
		if err := r.Status(); err != nil {
			t.Fatal(err)
		}
		r.Free()
		freed = append(freed, r)
	}
	tagPair := func(size int, sync bool) func(t *testing.T) {
		return func(t *testing.T) {
			rbuf := make([]byte, size)
			rr, err := w.TagRecvNBX(rbuf, 7, tagMaskFull, reqParam().SetTagRecvCallback(func(*Request, error, *TagRecvInfo, any) {}))
			if err != nil {
				t.Fatal(err)
			}
			send := ep.TagSendNBX
			if sync {
				send = ep.TagSendSyncNBX
			}
			sr, err := send(make([]byte, size), 7, reqParam().SetUserData(size))
			wait(t, sr, err)
			wait(t, rr, nil)
		}
	}
	streamPair := func(size int) func(t *testing.T) {
		return func(t *testing.T) {
			rr, _, err := ep.StreamRecvNBX(make([]byte, size), reqParam().SetStreamRecvFlags(StreamRecvFlagWaitAll))
			if err != nil {
				t.Fatal(err)
			}
			sr, err := ep.StreamSendNBX(make([]byte, size), reqParam())
			wait(t, sr, err)
			if rr != nil {
				wait(t, rr, nil)
			}
		}
	}
	ops := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"tag/eager", tagPair(8, false)},
		{"tag/bcopy", tagPair(4096, false)},
		{"tag/sync", tagPair(64, true)},
		{"tag/rndv", tagPair(512<<10, false)},
		{"tag/unexpected", func(t *testing.T) {
			sr, err := ep.TagSendNBX(make([]byte, 64), 9, reqParam())
			wait(t, sr, err)
			rr, err := w.TagRecvNBX(make([]byte, 64), 9, tagMaskFull, reqParam())
			wait(t, rr, err)
		}},
		{"stream/short", streamPair(8)},
		{"stream/rndv", streamPair(512 << 10)},
		{"put", func(t *testing.T) {
			r, err := ep.PutNBX(make([]byte, 4096), p.base, p.rkey, reqParam())
			wait(t, r, err)
		}},
		{"get", func(t *testing.T) {
			r, err := ep.GetNBX(make([]byte, 4096), p.base, p.rkey, reqParam())
			wait(t, r, err)
		}},
		{"atomic/fetch", func(t *testing.T) {
			var old uint64
			r, err := ep.AtomicOpNBX(AtomicOpSwap, 5, p.base, p.rkey, reqParam().SetReply(&old))
			wait(t, r, err)
		}},
		{"canceled recv", func(t *testing.T) {
			r, err := w.TagRecvNBX(make([]byte, 8), 11, tagMaskFull, reqParam())
			if err != nil {
				t.Fatal(err)
			}
			r.Cancel()
			progressUntil(t, w, "the canceled receive", r.IsCompleted)
			if err := r.Status(); !errors.Is(err, ucs.ErrCanceled) {
				t.Fatalf("canceled receive: %v", err)
			}
			r.Free()
			freed = append(freed, r)
		}},
	}
	// The takers: each hands out a request and returns it with what ends
	// the operation it started.
	ended := func(t *testing.T, r *Request) func() {
		return func() {
			r.Cancel()
			progressUntil(t, w, "the canceled receive", r.IsCompleted)
			if err := r.Status(); !errors.Is(err, ucs.ErrCanceled) {
				t.Errorf("canceled receive: %v", err)
			}
			r.Free()
		}
	}
	takers := []struct {
		name string
		take func(t *testing.T) (*Request, func())
	}{
		{"takeRequest", func(*testing.T) (*Request, func()) {
			r := w.takeRequest()
			return r, r.release
		}},
		{"newRequest", func(*testing.T) (*Request, func()) {
			r := w.newRequest(new(RequestParam).SetCallback(func(*Request, error, any) {}).SetUserData(1))
			return r, r.release
		}},
		{"TagRecvNBX", func(t *testing.T) (*Request, func()) {
			r, err := w.TagRecvNBX(make([]byte, 8), 13, tagMaskFull, nil)
			if err != nil || r == nil {
				t.Fatalf("TagRecvNBX: %p, %v", r, err)
			}
			return r, ended(t, r)
		}},
		{"TagRecvNBX/param", func(t *testing.T) (*Request, func()) {
			r, err := w.TagRecvNBX(make([]byte, 8), 13, tagMaskFull, reqParam().SetTagRecvCallback(func(*Request, error, *TagRecvInfo, any) {}).SetUserData(1))
			if err != nil || r == nil {
				t.Fatalf("TagRecvNBX: %p, %v", r, err)
			}
			return r, ended(t, r)
		}},
		{"StreamRecvNBX", func(t *testing.T) (*Request, func()) {
			r, _, err := ep.StreamRecvNBX(make([]byte, 8), nil)
			if err != nil || r == nil {
				t.Fatalf("StreamRecvNBX: %p, %v", r, err)
			}
			return r, ended(t, r)
		}},
	}
	// fresh lists the fields that are not zero in n requests the taker
	// hands out, held at once, that served nothing before: requests of
	// the sync.Pool, cleared when they went there, on the stack.
	fresh := func(t *testing.T, take func(t *testing.T) (*Request, func()), n int) map[string]bool {
		w.requests.drop()
		var rs []*Request
		for range n {
			rs = append(rs, w.takeRequest())
		}
		for _, r := range rs {
			r.release()
		}
		fs := map[string]bool{}
		var ends []func()
		for range n {
			r, end := take(t)
			ends = append(ends, end)
			for _, f := range opFields(r) {
				fs[f] = true
			}
		}
		for _, end := range ends {
			end()
		}
		w.requests.drop()
		return fs
	}
	for _, tk := range takers {
		for _, op := range ops {
			t.Run(tk.name+"/after "+op.name, func(t *testing.T) {
				w.requests.drop()
				op.run(t)
				stacked := w.requests.stacked()
				if len(stacked) == 0 {
					t.Fatal("no request was released to the worker's stack")
				}
				kept := false
				for _, r := range stacked {
					kept = kept || len(opFields(r)) != 0
					if r.dt.contig != nil || !reflect.ValueOf(r.rma).IsZero() {
						t.Error("a released request keeps its data (dt.contig, rma)")
					}
				}
				if !kept {
					t.Fatal("no request on the stack kept anything of its operation: nothing to clear")
				}
				// The same taker, as many times, on requests that served
				// nothing before, the stack set aside meanwhile.
				top, n := w.requests.top, w.requests.n
				want := fresh(t, tk.take, n)
				switch tk.name {
				case "takeRequest":
					if len(want) != 0 {
						t.Fatalf("a request of the sync.Pool is not cleared: %v", want)
					}
				case "newRequest":
					if len(want) != 2 || !want["cb"] || !want["userData"] {
						t.Fatalf("newRequest with a callback and user data sets %v", want)
					}
				}
				w.requests.top, w.requests.n = top, n
				var ends []func()
				defer func() {
					for _, end := range ends {
						end()
					}
				}()
				for range n {
					r, end := tk.take(t)
					ends = append(ends, end)
					if !slices.Contains(stacked, r) {
						t.Fatal("the taker did not take a request of the stack")
					}
					for _, f := range opFields(r) {
						if !want[f] {
							t.Errorf("a request handed out keeps its %s", f)
						}
					}
					if ucs.Status(r.state) != ucs.InProgress || r.fate != fateRunning || r.claimed != 0 || r.held != heldNone {
						t.Errorf("a request handed out does not run: state %v, fate %d, claimed %d, held %d", ucs.Status(r.state), r.fate, r.claimed, r.held)
					}
				}
			})
		}
	}
	// Released to the sync.Pool (the stack bound of multi mode, which a
	// full stack and a shared request take too): cleared at once.
	max := w.requests.max
	w.requests.max = 0
	defer func() { w.requests.max = max }()
	for _, op := range ops {
		t.Run("sync.Pool/"+op.name, func(t *testing.T) {
			w.requests.drop()
			freed = freed[:0]
			op.run(t)
			for _, r := range freed {
				if fs := opFields(r); len(fs) != 0 {
					t.Errorf("a request released to the sync.Pool keeps its %v", fs)
				}
			}
		})
	}
}

// TestRequestAfterRndvGet checks that a request that received a rendezvous
// message through a get, and so lent its completion to the get (rndvGet),
// completes as a request of its own when it is reused: an atomic over tcp
// gets the request's own completion, and ends with its result.
func TestRequestAfterRndvGet(t *testing.T) {
	t.Setenv("UCX_RNDV_SCHEME", "get_zcopy")
	c := newContextParams(t, new(Params).SetFeatures(FeatureTag|FeatureRMA|FeatureAMO64), "TLS", "tcp")
	w := newWorker(t, c)
	p := newPair(t, c, w, w, 4096)
	p.rkey.base = nil // the atomic through the lane
	noImm := func() *RequestParam { return new(RequestParam).SetOpAttrFlags(OpAttrFlagNoImmCmpl) }
	const n = 512 << 10
	rr, err := w.TagRecvNBX(make([]byte, n), 1, tagMaskFull, noImm())
	if err != nil {
		t.Fatal(err)
	}
	sr, err := p.ep.TagSendNBX(make([]byte, n), 1, noImm())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*Request{sr, rr} {
		if err := r.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	if want := rndvRecvProtos[famTag].get; rr.proto != want {
		t.Fatalf("the receive's protocol is %q, want %q", rr.proto, want)
	}
	sr.Free()
	rr.Free()
	binary.LittleEndian.PutUint64(p.mem, 3)
	var old uint64
	ar, err := p.ep.AtomicOpNBX(AtomicOpSwap, 5, p.base, p.rkey, noImm().SetReply(&old))
	if err != nil {
		t.Fatal(err)
	}
	if ar != rr {
		t.Fatal("the atomic did not reuse the receive's request")
	}
	if reflect.ValueOf(ar.comp.Func).Pointer() != reflect.ValueOf(requestCompleted).Pointer() || ar.comp.Arg != any(ar) {
		t.Fatal("the reused request's completion is still the rendezvous get's")
	}
	if err := ar.Wait(); err != nil {
		t.Fatal(err)
	}
	ar.Free()
	if got := binary.LittleEndian.Uint64(p.mem); old != 3 || got != 5 {
		t.Fatalf("swap: fetched %d, memory %d; want 3, 5", old, got)
	}
}
