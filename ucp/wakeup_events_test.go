package ucp

import (
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/uct"
)

// TestArmEvents checks what each events mask arms the interfaces for.
func TestArmEvents(t *testing.T) {
	for _, c := range []struct {
		events, want uint32
	}{
		{0, 0},
		{WakeupEdge, 0},
		{wakeupAll, uct.EventRecv | uct.EventRecvSig | uct.EventSendComp},
		{WakeupTagRecv, uct.EventRecv | uct.EventRecvSig | uct.EventSendComp},
		{WakeupRX | WakeupEdge, uct.EventRecv | uct.EventRecvSig | uct.EventSendComp},
		{WakeupTagSend, uct.EventRecvSig | uct.EventSendComp},
		{WakeupTX, uct.EventRecvSig | uct.EventSendComp},
		{WakeupRMA | WakeupAMO, uct.EventRecvSig | uct.EventSendComp},
	} {
		if got := armEvents(c.events); got != c.want {
			t.Errorf("armEvents(%#x) = %#x, want %#x", c.events, got, c.want)
		}
	}
}

// TestUCTSendFlags checks which messages go signaled: those that start no
// receive.
func TestUCTSendFlags(t *testing.T) {
	for _, c := range []struct {
		name string
		id   uint8
		sig  bool
	}{
		{"tag eager", amTagEager, false},
		{"tag eager sync", amTagEagerSync, false},
		{"tag first", amTagFirst, false},
		{"tag middle", amTagMiddle, false},
		{"tag RTS", amTagRTS, false},
		{"tag ack", amTagAck, true},
		{"tag ATS", amTagATS, true},
		{"tag RTR", amTagRTR, true},
		{"tag data", amTagData, true},
		{"tag ATP", amTagATP, true},
		{"tag revoke", amTagRevoke, true},
		{"stream data", amStreamData, false},
		{"sw put", amSwPut, true},
		{"sw get reply", amSwGetRep, true},
		{"sw atomic request", amSwAtomicReq, true},
		{"sw flush reply", amSwFlushRep, true},
		{"active message (every type starts a receive)", amUCP, false},
	} {
		if got := uctSendFlags(c.id) == uct.SendFlagSignaled; got != c.sig {
			t.Errorf("%s: signaled %v, want %v", c.name, got, c.sig)
		}
	}
}

// quietFor reports whether fd stays unreadable for d. A wakeup that should
// not come would come at once (the transports decide on the sender's or
// receiver's goroutine as the message arrives); a slow machine can only
// make this pass wrongly, never fail.
func quietFor(t testing.TB, fd int, d time.Duration) bool {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, int(d.Milliseconds()))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			t.Fatalf("poll: %v", err)
		}
		return n == 0
	}
}

// TestWakeupEvents: a worker armed with an events mask is woken by an
// incoming tag message only if it asked for receive events (or for every
// kind, the default); asked for TAG_SEND only, it sleeps through the
// message, which its next Progress delivers, and a synchronous send of its
// still completes through Wait, woken by the peer's acknowledgement.
func TestWakeupEvents(t *testing.T) {
	for _, tl := range []struct{ name, tls string }{
		{"self", "self"},
		{"sm", "sm,self"},
		{"tcp", "tcp,self"},
	} {
		for _, ev := range []struct {
			name   string
			events uint32 // 0: not set, every kind
			wake   bool   // an incoming tag message wakes the worker
		}{
			{"default", 0, true},
			{"tag_recv", WakeupTagRecv, true},
			{"rx", WakeupRX, true},
			{"tag_send", WakeupTagSend, false},
			{"tx", WakeupTX, false},
		} {
			t.Run(fmt.Sprintf("%s/%s", tl.name, ev.name), func(t *testing.T) {
				t.Setenv("UCX_TLS", tl.tls)
				c := newContextWith(t, FeatureWakeup|FeatureTag)
				params := new(WorkerParams)
				if ev.events != 0 {
					params.SetEvents(ev.events)
				}
				b, err := c.NewWorker(params)
				if err != nil {
					t.Fatalf("NewWorker: %v", err)
				}
				t.Cleanup(b.Destroy)
				// tcp reports its messages through the uct worker's
				// signal: see each one there, after the worker did.
				signalled := make(chan uint32, 64)
				b.uw.SetSignal(func(e uint32) {
					b.notifyEvents(e)
					select {
					case signalled <- e:
					default:
					}
				})
				a := b // the peer: the worker itself over self
				if tl.name != "self" {
					a = newWorker(t, c)
				}
				bAddr, _ := b.Address()
				ab, err := a.NewEndpoint(new(EPParams).SetAddress(bAddr))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { ab.Close(CloseModeForce) })
				ba := ab
				if a != b {
					aAddr, _ := a.Address()
					if ba, err = b.NewEndpoint(new(EPParams).SetAddress(aAddr)); err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { ba.Close(CloseModeForce) })
				}
				efd, err := b.EventFD()
				if err != nil {
					t.Fatal(err)
				}

				// An unrelated tag message comes to the armed worker.
				armQuiet(t, b)
				sr, err := ab.TagSendNBX([]byte("unasked"), 7, nil)
				if err != nil {
					t.Fatal(err)
				}
				if sr != nil && a != b {
					if err := noHang(t, "the tag send", sr.Wait); err != nil {
						t.Fatal(err)
					}
				}
				if tl.name == "tcp" {
					// Wait until the poller read the message.
					deadline := time.After(hangLimit)
				seen:
					for {
						select {
						case e := <-signalled:
							if e&uct.EventRecv != 0 && e != uct.EventAll {
								break seen
							}
						case <-deadline:
							t.Fatal("the message never reached the worker")
						}
					}
				}
				if ev.wake {
					waitReadable(t, efd)
				} else if !quietFor(t, efd, 100*time.Millisecond) {
					t.Fatalf("events %#x: an incoming tag message woke the worker", ev.events)
				}
				buf := make([]byte, 16)
				rr, err := b.TagRecvNBX(buf, 7, tagMaskFull, nil)
				if err != nil {
					t.Fatal(err)
				}
				progressUntil(t, b, "the tag message", func() bool { return rr == nil || rr.IsCompleted() })

				// A synchronous send of the worker's completes when the
				// peer's acknowledgement comes: that wakes it whatever
				// the mask asks for among the send events.
				if ev.events == WakeupRX {
					return // asked for receive events only
				}
				pr, err := a.TagRecvNBX(make([]byte, 16), 9, tagMaskFull, nil)
				if err != nil {
					t.Fatal(err)
				}
				ss, err := ba.TagSendSyncNBX([]byte("sync"), 9, nil)
				if err != nil {
					t.Fatal(err)
				}
				if a != b {
					// The peer receives on a goroutine of its own.
					stop, done := serve(a)
					defer func() { close(stop); <-done }()
				}
				if err := noHang(t, "a synchronous send waited for with Wait", func() error {
					for ss != nil && !ss.IsCompleted() {
						if err := b.Wait(); err != nil {
							return err
						}
						for b.Progress() != 0 {
						}
					}
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				if ss != nil {
					if err := ss.Status(); err != nil {
						t.Fatalf("synchronous send: %v", err)
					}
				}
				waitFor(t, "the peer's receive", func() bool {
					if a == b {
						b.Progress()
					}
					return pr == nil || pr.IsCompleted()
				})
			})
		}
	}
}
