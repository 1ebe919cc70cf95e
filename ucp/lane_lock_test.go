package ucp

import (
	"testing"
	"time"

	"github.com/goshmem/goshmem/ucs"
)

// TestShortSendsTakeNoLaneLock checks that the two-sided protocols' sends
// of a worker in single or serialized thread mode do not take their lane's
// sendMu: there one goroutine at a time uses the worker, and the mutex,
// which the keepalive's peer check holds meanwhile, cost every short send
// a lock and an unlock. The test holds the mutex, as the check does, and
// sends a short tag message, a short stream message and a copied one
// (amPack): each must go out meanwhile. (In multi mode the sends take it:
// TestMultiThreadStress and the race run cover that.)
func TestShortSendsTakeNoLaneLock(t *testing.T) {
	t.Setenv("UCX_TLS", "sm,self")
	for _, m := range []ucs.ThreadMode{ucs.ThreadModeSingle, ucs.ThreadModeSerialized} {
		t.Run(m.String(), func(t *testing.T) {
			c := newTagContext(t, "sm,self", withStream)
			w, err := c.NewWorker(new(WorkerParams).SetThreadMode(m))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(w.Destroy)
			ep := connect(t, w, w, nil)
			if err := ep.waitConnected(); err != nil {
				t.Fatal(err)
			}
			small, big := []byte("8 bytes!"), make([]byte, 2000)
			sends := []struct {
				name string
				send func() (*Request, error)
			}{
				{"tag short", func() (*Request, error) { return ep.TagSendNBX(small, 1, nil) }},
				{"stream short", func() (*Request, error) { return ep.StreamSendNBX(small, nil) }},
				{"tag bcopy", func() (*Request, error) { return ep.TagSendNBX(big, 2, nil) }},
			}
			l := ep.am
			l.sendMu.Lock()
			done := make(chan error, 1)
			go func() {
				for _, s := range sends {
					r, err := s.send()
					if err == nil && r != nil {
						r.Free()
					}
					if err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			select {
			case err := <-done:
				l.sendMu.Unlock()
				if err != nil {
					t.Error(err)
				}
			case <-time.After(30 * time.Second):
				l.sendMu.Unlock()
				<-done
				t.Fatal("the sends waited for the lane's sendMu (30 s)")
			}
		})
	}
}
