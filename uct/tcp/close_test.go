package tcp

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// errCounter is an iface error handler that counts its calls.
type errCounter struct {
	calls atomic.Int32
	last  atomic.Int32 // the last status
}

func (c *errCounter) params() *uct.IfaceParams {
	return &uct.IfaceParams{ErrHandler: func(_ any, _ uct.EP, st ucs.Status) {
		c.calls.Add(1)
		c.last.Store(int32(st))
	}}
}

// TestOrderlyClose checks that a peer's normal teardown is no failure: when
// the peer iface closes, or the peer destroys its EP, after everything sent
// was processed, no error handler is called and nothing is logged, on
// either side; the EP to the closed iface then refuses operations with
// ucs.ErrConnectionReset, and a flush of what it sent succeeds.
func TestOrderlyClose(t *testing.T) {
	tests := []struct {
		name  string
		close func(t *testing.T, a, b *Iface, ab, ba *EP)
	}{
		{"peer iface closes", func(t *testing.T, a, b *Iface, ab, ba *EP) { b.Close() }},
		{"peer destroys its ep, then closes", func(t *testing.T, a, b *Iface, ab, ba *EP) {
			ba.Destroy()
			b.Close()
		}},
		{"both close at once", func(t *testing.T, a, b *Iface, ab, ba *EP) {
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); a.Close() }()
			go func() { defer wg.Done(); b.Close() }()
			wg.Wait()
		}},
		{"peer closes with a flush in flight", func(t *testing.T, a, b *Iface, ab, ba *EP) {
			if st := ab.Flush(0, nil); st != ucs.InProgress && st != ucs.OK {
				t.Fatalf("flush: %v", st)
			}
			b.Close()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs := captureLog(t)
			md := testMD(t)
			var aErr, bErr errCounter
			a, b := openIface(t, md, aErr.params()), openIface(t, md, bErr.params())
			ra, rb := register(t, md, 4096), register(t, md, 4096)
			ab, ba := connect(t, a, b), connect(t, b, a)
			// Traffic both ways, every kind, all processed.
			for _, x := range []struct {
				ep  *EP
				dst *testRegion
				it  *Iface
			}{{ab, rb, b}, {ba, ra, a}} {
				if st := x.ep.PutShort([]byte("hello"), x.dst.base(), x.dst.rkey.Rkey); st != ucs.OK {
					t.Fatal(st)
				}
				got := make([]byte, 5)
				done := false
				comp := &uct.Completion{Count: 1, Func: func(*uct.Completion) { done = true }}
				if st := x.ep.GetZcopy([]uct.IOV{{Buffer: got}}, x.dst.base(), x.dst.rkey.Rkey, comp); st != ucs.InProgress {
					t.Fatal(st)
				}
				progressUntil(t, func() bool { return done }, a, b)
				if !bytes.Equal(got, []byte("hello")) {
					t.Fatalf("got %q", got)
				}
				if st := flush(t, x.ep, a, b); st != ucs.OK {
					t.Fatal(st)
				}
			}
			tt.close(t, a, b, ab, ba)
			// Wait for the EP to the closed side to notice.
			progressUntil(t, func() bool { return ab.status().IsErr() }, a)
			for range 100 {
				a.Progress()
			}
			if n := aErr.calls.Load() + bErr.calls.Load(); n != 0 {
				t.Errorf("error handlers called %d times (last status %v, %v) on a normal teardown",
					n, ucs.Status(aErr.last.Load()), ucs.Status(bErr.last.Load()))
			}
			a.Close()
			b.Close()
			if s := logs.String(); s != "" {
				t.Errorf("a normal teardown logged:\n%s", s)
			}
			if st := ab.PutShort([]byte{1}, rb.base(), rb.rkey.Rkey); st != ucs.ErrConnectionReset && st != ucs.ErrCanceled {
				t.Errorf("put after the peer closed = %v, want ErrConnectionReset (or ErrCanceled once closed here)", st)
			}
		})
	}
}

// TestOrderlyCloseQuietEP checks the EP's side of a peer iface's orderly
// close while this side stays open: its operations fail with
// ucs.ErrConnectionReset, a flush of what it sent succeeds (the peer
// processed it), and no error handler is called.
func TestOrderlyCloseQuietEP(t *testing.T) {
	logs := captureLog(t)
	md := testMD(t)
	var aErr errCounter
	a, b := openIface(t, md, aErr.params()), openIface(t, md, nil)
	rb := register(t, md, 64)
	ab := connect(t, a, b)
	if st := ab.PutShort([]byte{7}, rb.base(), rb.rkey.Rkey); st != ucs.OK {
		t.Fatal(st)
	}
	// Processed, not acknowledged: the goodbye says it was.
	progressUntil(t, func() bool { return rb.snapshot()[0] == 7 }, a)
	b.Close()
	progressUntil(t, func() bool { return ab.status().IsErr() }, a)
	for range 100 {
		a.Progress()
	}
	if st := ab.Flush(0, nil); st != ucs.OK {
		t.Errorf("flush of a put the closed peer processed = %v, want OK", st)
	}
	if st := ab.AMShort(1, 0, nil); st != ucs.ErrConnectionReset {
		t.Errorf("AMShort to a closed peer = %v, want ErrConnectionReset", st)
	}
	if st := a.Flush(0, nil); st != ucs.OK {
		t.Errorf("iface flush = %v, want OK", st)
	}
	if n := aErr.calls.Load(); n != 0 {
		t.Errorf("error handler called %d times (%v)", n, ucs.Status(aErr.last.Load()))
	}
	if s := logs.String(); s != "" {
		t.Errorf("logged:\n%s", s)
	}
}

// TestCloseWithLostOperations checks that a peer iface that closes before
// it processed what the EP sent is a failure: the peer cannot read (its
// receive queue is full and nobody progresses it), so the messages sent
// after are lost, and the EP's error handler hears of it.
func TestCloseWithLostOperations(t *testing.T) {
	captureLog(t)
	md := testMD(t)
	var aErr errCounter
	a := openIface(t, md, aErr.params())
	b := openIface(t, md, nil, "RX_QUEUE_LEN=1")
	b.SetAMHandler(1, func(any, []byte, uint32) ucs.Status { return ucs.OK }, nil, uct.CBFlagSync)
	ab := connect(t, a, b)
	// The first message fills b's queue; b's reader then waits with the
	// second in hand, and the rest stay in the socket.
	for range 10 {
		if st := ab.AMShort(1, 0, make([]byte, 64)); st != ucs.OK {
			t.Fatal(st)
		}
	}
	progressUntil(t, func() bool { return b.rxFull() }, a)
	b.Close()
	progressUntil(t, func() bool { return aErr.calls.Load() != 0 }, a)
	if st := ucs.Status(aErr.last.Load()); st != ucs.ErrConnectionReset {
		t.Errorf("error handler status %v, want ErrConnectionReset", st)
	}
	if st := ab.Flush(0, nil); st != ucs.ErrConnectionReset {
		t.Errorf("flush of lost messages = %v, want ErrConnectionReset", st)
	}
}
