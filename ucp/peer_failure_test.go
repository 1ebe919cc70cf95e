package ucp

import (
	"errors"
	"testing"

	"github.com/goshmem/goshmem/ucs"
)

// swPair is a pair whose operations all go through the software protocols,
// towards a target worker that is not progressed: software gets, fetching
// atomics and flushes stay outstanding until something ends them. It runs
// over shared memory, whose active messages wait for the target's progress
// (tcp's would be answered by its receive goroutines).
func swPair(t *testing.T, params *EPParams) (a *Worker, p pair) {
	t.Helper()
	t.Setenv("UCX_TLS", "sm,self")
	c := newContext(t)
	a, b := newWorker(t, c), newWorker(t, c)
	aAddr, _ := a.Address()
	back, err := b.NewEndpoint(new(EPParams).SetAddress(aAddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { back.Close(CloseModeForce) })
	p = newPairWith(t, c, a, b, 1<<16, params)
	forceSoftware(p.rkey)
	return a, p
}

// outstanding starts a software get and a fetching software atomic that
// the unprogressed target does not answer.
func outstanding(t *testing.T, p pair) []*Request {
	t.Helper()
	get, err := p.ep.GetNBX(make([]byte, 16), p.base, p.rkey, nil)
	if err != nil || get == nil {
		t.Fatalf("software get: %v, %v; want a request", get, err)
	}
	var reply uint64
	amo, err := p.ep.AtomicOpNBX(AtomicOpAdd, 1, p.base+64, p.rkey, new(RequestParam).SetReply(&reply))
	if err != nil || amo == nil {
		t.Fatalf("software atomic: %v, %v; want a request", amo, err)
	}
	for _, r := range []*Request{get, amo} {
		if r.IsCompleted() {
			t.Fatalf("request %s completed without an answer", r.Query().DebugString)
		}
	}
	return []*Request{get, amo}
}

// TestEndpointFailureReport checks what a transport's report of a failed
// lane does, by error mode: in PEER the endpoint fails, its outstanding
// requests complete with the reported status and its handler runs once,
// from progress; in NONE nothing happens.
func TestEndpointFailureReport(t *testing.T) {
	for _, tt := range []struct {
		name string
		mode ErrHandlingMode
		fail bool
	}{
		{"peer", ErrHandlingModePeer, true},
		{"none", ErrHandlingModeNone, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var rec errRecorder
			a, p := swPair(t, new(EPParams).SetErrMode(tt.mode).SetErrHandler(rec.handler).SetUserData(7))
			reqs := outstanding(t, p)
			// What a transport's error handler does for one of the lanes.
			laneErrHandler(a, p.ep.lanesSnapshot()[0].ep, ucs.ErrConnectionReset)
			laneErrHandler(a, p.ep.lanesSnapshot()[0].ep, ucs.ErrIOError) // a second report changes nothing
			for range 10 {
				a.Progress()
			}
			if !tt.fail {
				if err := p.ep.Status(); err != nil || rec.calls.Load() != 0 {
					t.Fatalf("mode NONE: endpoint status %v, handler calls %d; want nil, 0", err, rec.calls.Load())
				}
				for _, r := range reqs {
					if r.IsCompleted() {
						t.Errorf("mode NONE: request completed by a lane failure: %v", r.Status())
					}
				}
				p.ep.Close(CloseModeForce) // ends them
				return
			}
			for _, r := range reqs {
				if err := noHang(t, "request of a failed endpoint", r.Wait); !errors.Is(err, ucs.ErrConnectionReset) {
					t.Errorf("request of the failed endpoint: %v, want ErrConnectionReset", err)
				}
				r.Free()
			}
			if rec.calls.Load() != 1 || rec.user.Load() != 7 {
				t.Errorf("handler: %d calls with user data %v, want 1 with 7", rec.calls.Load(), rec.user.Load())
			}
			if _, err := p.ep.GetNBX(make([]byte, 8), p.base, p.rkey, nil); !errors.Is(err, ucs.ErrConnectionReset) {
				t.Errorf("get after the failure: %v", err)
			}
			if err := p.ep.Flush(); !errors.Is(err, ucs.ErrConnectionReset) {
				t.Errorf("flush after the failure: %v", err)
			}
		})
	}
}

// TestCloseForceCancels closes endpoints with outstanding requests: in
// force mode they complete with ucs.ErrCanceled at once, and the error
// handler is not called; destroying the worker does the same.
func TestCloseForceCancels(t *testing.T) {
	for _, tt := range []struct {
		name  string
		close func(a *Worker, ep *Endpoint) error
	}{
		{"close force", func(_ *Worker, ep *Endpoint) error { return ep.Close(CloseModeForce) }},
		{"worker destroy", func(a *Worker, _ *Endpoint) error { a.Destroy(); return nil }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var rec errRecorder
			a, p := swPair(t, new(EPParams).SetErrMode(ErrHandlingModePeer).SetErrHandler(rec.handler))
			reqs := outstanding(t, p)
			if err := tt.close(a, p.ep); err != nil {
				t.Fatalf("close: %v", err)
			}
			for _, r := range reqs {
				if !r.IsCompleted() {
					t.Fatalf("request %s still runs after the close", r.Query().DebugString)
				}
				if err := r.Status(); !errors.Is(err, ucs.ErrCanceled) {
					t.Errorf("request after the close: %v, want ErrCanceled", err)
				}
				r.Free()
			}
			if rec.calls.Load() != 0 {
				t.Errorf("error handler called %d times by a close", rec.calls.Load())
			}
			if _, err := p.ep.GetNBX(make([]byte, 8), p.base, p.rkey, nil); !errors.Is(err, ErrClosed) {
				t.Errorf("get after the close: %v, want ErrClosed", err)
			}
			if err := p.ep.Close(CloseModeForce); err != nil {
				t.Errorf("second close: %v", err)
			}
		})
	}
	_, p := swPair(t, new(EPParams))
	if err := p.ep.Close(7); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("close mode 7: %v, want ErrInvalidParam", err)
	}
}

func TestEndpointParamsErrMode(t *testing.T) {
	c := newContext(t)
	w := newWorker(t, c)
	addr, _ := w.Address()
	if _, err := w.NewEndpoint(new(EPParams).SetAddress(addr).SetErrMode(ErrHandlingMode(5))); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("error mode 5: %v, want ErrInvalidParam", err)
	}
	t.Setenv("UCX_KEEPALIVE_INTERVAL", "often")
	if _, err := Init(new(Params).SetFeatures(FeatureRMA), nil); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("UCX_KEEPALIVE_INTERVAL=often: %v, want ErrInvalidParam", err)
	}
}
