package ucp

import (
	"bytes"
	"fmt"
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
			ep := loopbackEP(t, "sm,self", m)
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
			l.sendMu.mu.Lock()
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
				l.sendMu.mu.Unlock()
				if err != nil {
					t.Error(err)
				}
			case <-time.After(30 * time.Second):
				l.sendMu.mu.Unlock()
				<-done
				t.Fatal("the sends waited for the lane's sendMu (30 s)")
			}
		})
	}
}

// TestMultiModeConcurrentSends has goroutines send short and copied tag
// and stream messages on one endpoint of a multi-mode worker at once:
// there the sends take the lane's sendMu (sendMu.lock), which serializes
// them with each other and with the lane's packer. Run it with -race. Each
// message must arrive whole.
func TestMultiModeConcurrentSends(t *testing.T) {
	const (
		goroutines = 4
		msgs       = 40
	)
	for _, tls := range []string{"sm,self", "tcp,self"} {
		t.Run(tls, func(t *testing.T) {
			t.Setenv("UCX_TLS", tls)
			ep := loopbackEP(t, tls, ucs.ThreadModeMulti)
			w := ep.w
			size := func(i int) int { return []int{8, 100, 1500}[i%3] }
			payload := func(g, i int) []byte {
				b := make([]byte, size(i))
				for k := range b {
					b[k] = byte(g*31 + i*7 + k)
				}
				return b
			}
			type recv struct {
				r   *Request
				buf []byte
				g   int
				i   int
			}
			var recvs []recv
			for g := range goroutines {
				for i := range msgs {
					buf := make([]byte, size(i))
					r, err := w.TagRecvNBX(buf, uint64(g)<<32|uint64(i), ^uint64(0), nil)
					if err != nil {
						t.Fatal(err)
					}
					recvs = append(recvs, recv{r, buf, g, i})
				}
			}
			errs := make(chan error, goroutines)
			for g := range goroutines {
				go func() {
					for i := range msgs {
						r, err := ep.TagSendNBX(payload(g, i), uint64(g)<<32|uint64(i), nil)
						if err == nil && r != nil {
							for !r.IsCompleted() {
								w.Progress()
							}
							err = r.Status()
							r.Free()
						}
						if err == nil {
							// A stream byte per message: stream sends race too.
							r, err = ep.StreamSendNBX([]byte{byte(g)}, nil)
							if err == nil && r != nil {
								for !r.IsCompleted() {
									w.Progress()
								}
								err = r.Status()
								r.Free()
							}
						}
						if err != nil {
							errs <- fmt.Errorf("goroutine %d, message %d: %w", g, i, err)
							return
						}
					}
					errs <- nil
				}()
			}
			for range goroutines {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			deadline := time.Now().Add(60 * time.Second)
			for _, rv := range recvs {
				for !rv.r.IsCompleted() {
					w.Progress()
					if time.Now().After(deadline) {
						t.Fatalf("receive %d/%d still waits after 60 s", rv.g, rv.i)
					}
				}
				if err := rv.r.Status(); err != nil {
					t.Fatalf("receive %d/%d: %v", rv.g, rv.i, err)
				}
				rv.r.Free()
				if want := payload(rv.g, rv.i); !bytes.Equal(rv.buf, want) {
					t.Fatalf("receive %d/%d: got %x, want %x", rv.g, rv.i, rv.buf, want)
				}
			}
			got := make([]byte, goroutines*msgs)
			for n := 0; n < len(got); {
				r, k, err := ep.StreamRecvNBX(got[n:], nil)
				if err == nil && r != nil {
					for !r.IsCompleted() {
						w.Progress()
					}
					err = r.StreamRecvRequestTest(&k)
					r.Free()
				}
				if err != nil {
					t.Fatal(err)
				}
				n += k
			}
			var count [goroutines]int
			for _, b := range got {
				count[b]++
			}
			for g, n := range count {
				if n != msgs {
					t.Errorf("stream: %d bytes of goroutine %d, want %d", n, g, msgs)
				}
			}
		})
	}
}

// loopbackEP returns a connected endpoint from a worker of thread mode m,
// with tags and streams over tls, to itself.
func loopbackEP(t *testing.T, tls string, m ucs.ThreadMode) *Endpoint {
	t.Helper()
	c := newTagContext(t, tls, withStream)
	w, err := c.NewWorker(new(WorkerParams).SetThreadMode(m))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Destroy)
	ep := connect(t, w, w, nil)
	if err := ep.waitConnected(); err != nil {
		t.Fatal(err)
	}
	return ep
}
