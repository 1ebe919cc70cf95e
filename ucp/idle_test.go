package ucp

import (
	"testing"
	"time"
)

// TestIdleWokenByInput: a goroutine that sleeps in Idle on a worker that
// receives over tcp is woken by the frame that comes for it, before any
// goroutine of the transport read it, and by Wake; not by the end of the
// sleep's bound (an hour here). The worker's tcp poller, which reads the
// sockets of a process whose Progress does not run, would apply the put
// only after UCX_TCP_PASSIVE_DELAY (10s here), and its put is checked
// unapplied when Idle returns: Progress, in the goroutine that slept,
// applies it. (Before Idle waited on the sockets, its sleep could only
// be ended by a signal from such a goroutine: a put to a PE that waited
// in a barrier waited for its next look, 30 µs and the kernel's timer
// slack later, or for the poller.) A sleep allocates nothing.
func TestIdleWokenByInput(t *testing.T) {
	t.Setenv("UCX_TCP_PASSIVE_DELAY", "10s")
	saved := idleWait
	t.Cleanup(func() { idleWait = saved })
	idleWait = time.Hour
	for _, tc := range []struct {
		name string
		// wake makes b's sleep end; it returns whether b received a put
		// that its Progress applies.
		wake func(t *testing.T, a, b *Worker, p pair) bool
	}{
		{"tcp put", func(t *testing.T, a, _ *Worker, p pair) bool {
			req, err := p.ep.PutNBX([]byte{7}, p.base, p.rkey, nil)
			if err != nil {
				t.Error(err)
				return false
			}
			// Out of a batch now, with no flush whose acknowledgement
			// b would have to send.
			a.Progress()
			if req != nil {
				req.Free()
			}
			return true
		}},
		{"Wake", func(_ *testing.T, _, b *Worker, _ pair) bool {
			b.Wake()
			return false
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newContextTLS(t, "tcp")
			b := newWorker(t, c)
			t.Setenv("UCX_TCP_PASSIVE_DELAY", "1ms") // a's: its closing flush is served
			a := newWorker(t, c)
			if len(b.idlePoll) == 0 {
				t.Fatal("a tcp worker has no descriptors to sleep on")
			}
			// Once the checks are done, b progresses until its endpoint's
			// closing flush (a cleanup of newPair, which runs before this
			// one) was acknowledged.
			var stop, done chan struct{}
			t.Cleanup(func() {
				if stop != nil {
					close(stop)
					<-done
				}
			})
			defer func() { stop, done = serve(b) }()
			p := newPair(t, c, a, b, 64)
			slept := make(chan struct{})
			go func() {
				b.idleRun.Store(idleSpin) // past the polls: the next Idle sleeps
				b.Idle()
				close(slept)
			}()
			put := tc.wake(t, a, b, p)
			noHang(t, "Idle", func() error { <-slept; return nil })
			if !put {
				return
			}
			if p.mem[0] != 0 {
				t.Fatal("the put was applied before the sleeping goroutine's Progress: the transport's poller woke it")
			}
			for p.mem[0] != 7 {
				b.Progress()
			}
		})
	}
	t.Run("allocations", func(t *testing.T) {
		c := newContextTLS(t, "tcp")
		b := newWorker(t, c)
		idleWait = time.Microsecond
		if n := testing.AllocsPerRun(100, func() {
			b.idleRun.Store(idleSpin)
			b.Idle()
		}); n != 0 {
			t.Errorf("Idle's sleep: %v allocations", n)
		}
	})
}
