package ucp

import (
	"errors"
	"testing"

	"github.com/goshmem/goshmem/ucs"
)

// TestPeerExitsInOrder checks that a peer that destroys its worker and
// exits, as every process does at the end of a job, is no failure of an
// endpoint in error mode PEER: over tcp its error handler is not called and
// the endpoint's status stays good, while a killed peer (TestPeerFailure)
// is reported.
func TestPeerExitsInOrder(t *testing.T) {
	for _, tls := range []string{"tcp,self", "tcp"} {
		t.Run(tls, func(t *testing.T) {
			t.Setenv("GOSHMEM_KEY", testJobKey)
			t.Setenv("UCX_TLS", tls)
			p := startPeer(t, []string{"UCX_TLS=" + tls})
			w := newWorker(t, newContext(t))
			var rec errRecorder
			ep, err := w.NewEndpoint(new(EPParams).SetAddress(p.addr).SetErrMode(ErrHandlingModePeer).SetErrHandler(rec.handler).SetUserData("peer"))
			if err != nil {
				t.Fatal(err)
			}
			defer ep.Close(CloseModeForce)
			p.connect(t, w)
			rk, err := ep.RkeyUnpack(p.rkey)
			if err != nil {
				t.Fatal(err)
			}
			defer rk.Destroy()
			forceSoftware(rk) // a reply comes back on the peer's endpoint to this worker
			if req, err := ep.GetNBX(make([]byte, 8), p.base, rk, nil); err != nil {
				t.Fatal(err)
			} else if req != nil {
				if err := req.Wait(); err != nil {
					t.Fatalf("get from the live peer: %v", err)
				}
				req.Free()
			}
			if err := ep.Flush(); err != nil {
				t.Fatal(err)
			}
			p.CloseInput()
			if err := p.Wait(); err != nil {
				t.Fatalf("peer: %v", err)
			}
			// The goodbyes have arrived once its connections ended: an EP to
			// it fails its next operation.
			progressUntil(t, w, "the tcp lane to notice", func() bool {
				_, err := ep.PutNBX([]byte{1}, p.base, rk, nil)
				return errors.Is(err, ucs.ErrConnectionReset)
			})
			for range 100 {
				w.Progress()
			}
			if n := rec.calls.Load(); n != 0 {
				t.Errorf("error handler called %d times (%v) for a peer that exited in order", n, rec.status.Load())
			}
			if err := ep.Status(); err != nil {
				t.Errorf("Status = %v, want nil", err)
			}
		})
	}
}
