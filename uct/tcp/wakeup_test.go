package tcp

import (
	"fmt"
	"testing"
	"time"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// TestSignalEvents: a message that the poller reads for an iface that is
// not progressed signals the iface's worker with uct.EventRecv, and with
// uct.EventRecvSig too when it was sent with uct.SendFlagSignaled (the
// flag travels in the frame header), so that a worker armed for signaled
// messages only can sleep through the others.
func TestSignalEvents(t *testing.T) {
	send := []struct {
		name string
		f    func(ep *EP, flags uint32) ucs.Status
	}{
		{"bcopy", func(ep *EP, flags uint32) ucs.Status {
			_, s := ep.AMBcopy(1, func(d []byte) int { return copy(d, "x") }, flags)
			return s
		}},
		{"zcopy", func(ep *EP, flags uint32) ucs.Status {
			return ep.AMZcopy(1, []byte("h"), []uct.IOV{{Buffer: []byte("x")}}, flags, nil)
		}},
	}
	for _, sc := range send {
		for _, flags := range []uint32{0, uct.SendFlagSignaled} {
			t.Run(fmt.Sprintf("%s/flags=%d", sc.name, flags), func(t *testing.T) {
				md := testMD(t)
				w := uct.NewWorker(ucs.ThreadModeSingle)
				events := make(chan uint32, 64)
				w.SetSignal(func(ev uint32) {
					select {
					case events <- ev:
					default:
					}
				})
				// PASSIVE_DELAY=0: the poller reads every frame, as
				// for a worker that sleeps.
				ri, err := md.IfaceOpen(w, &uct.IfaceParams{TLName: TLName, DevName: loopbackDev(t), Logger: capturedLog}, testConfig(t, "PASSIVE_DELAY=0"))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(ri.Close)
				r := ri.(*Iface)
				got := make(chan []byte, 1)
				r.SetAMHandler(1, func(_ any, d []byte, _ uint32) ucs.Status {
					got <- append([]byte(nil), d...)
					return ucs.OK
				}, nil, uct.CBFlagSync)
				s := openIface(t, md, nil)
				ep := connect(t, s, r)
				if st := sc.f(ep, flags); st != ucs.OK && st != ucs.InProgress {
					t.Fatalf("send: %v", st)
				}
				deadline := time.After(time.Minute) // a guard against a hang, not a timed assertion
				for {
					var ev uint32
					select {
					case ev = <-events:
					case <-deadline:
						t.Fatal("the worker was not signalled for the message")
					}
					if ev == uct.EventAll || ev&uct.EventRecv == 0 {
						continue // not the message's signal
					}
					if sig := ev&uct.EventRecvSig != 0; sig != (flags != 0) {
						t.Errorf("signalled with %#x for a message of flags %d", ev, flags)
					}
					break
				}
				progressUntil(t, func() bool { return len(got) == 1 }, r, s)
			})
		}
	}
}

// TestFrameAMFlags: the flags byte of a frame header is accepted only on
// an active message, and only amSignaled.
func TestFrameAMFlags(t *testing.T) {
	for _, c := range []struct {
		typ, flags uint8
		ok         bool
	}{
		{frameAM, 0, true},
		{frameAM, amSignaled, true},
		{frameAM, 2, false},
		{framePut, amSignaled, false},
		{frameFlush, amSignaled, false},
	} {
		b := make([]byte, frameHeaderLen)
		n := 8
		if c.typ == framePut {
			n = putHeaderLen
		}
		if c.typ == frameFlush {
			n = 0
		}
		putFrameHeader(b, c.typ, 0, n)
		b[2] = c.flags
		h, err := decodeFrameHeader(b, clientToServer, 1<<20)
		if (err == nil) != c.ok {
			t.Errorf("type %d flags %#x: %v, want ok %v", c.typ, c.flags, err, c.ok)
		}
		if err == nil && h.flags != c.flags {
			t.Errorf("type %d: flags %#x decoded as %#x", c.typ, c.flags, h.flags)
		}
	}
}
