package ucp

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/goshmem/goshmem/ucs"
)

// Where the receiver stands with a rendezvous message when its sender
// closes the endpoint (TestTagRndvSenderCloses).
const (
	rcvProbed    = "probed"     // TagProbeNB saw it, no receive yet
	rcvRemoved   = "removed"    // TagProbeNB removed it: the handle is the receiver's
	rcvPosted    = "posted"     // a receive matched it (the sender did not answer yet)
	rcvCanceled  = "canceled"   // a receive matched it, then was canceled
	rndvMsgBytes = 200 << 10    // rendezvous on every transport
	rndvMsgTag   = uint64(0x2a) // the message's tag
)

// TestTagRndvSenderCloses closes the sender's endpoint (flush or force
// mode) while a rendezvous message is announced and not taken yet, in every
// state of the receiver, over every transport and rendezvous scheme. The
// send completes (ucs.ErrCanceled unless the receiver took the data
// first), and the sender then overwrites its buffer. A receive never
// completes with OK and other data than what was sent: the announcement is
// revoked (a probed message is gone, a removed handle's receive fails with
// ucs.ErrCanceled), a receive that matched it and waits for data that can
// no longer come completes with an error, and Cancel ends any receive with
// ucs.ErrCanceled whatever the sender does.
func TestTagRndvSenderCloses(t *testing.T) {
	for _, sch := range []string{"auto", "am", "get_zcopy", "put_zcopy"} {
		for _, tr := range tagTransports {
			for _, mode := range []int{CloseModeFlush, CloseModeForce} {
				for _, st := range []string{rcvProbed, rcvRemoved, rcvPosted, rcvCanceled} {
					name := fmt.Sprintf("%s/%s/%s/%s", sch, tr.name, []string{"flush", "force"}[mode], st)
					t.Run(name, func(t *testing.T) {
						t.Setenv("UCX_RNDV_SCHEME", sch)
						tagRndvSenderCloses(t, newTagEnv(t, tr.sendTLS, tr.recvTLS, tr.self), mode, st)
					})
				}
			}
		}
	}
}

func tagRndvSenderCloses(t *testing.T, e *tagEnv, mode int, state string) {
	src := pattern(rndvMsgBytes, 1)
	sent := bytes.Clone(src)
	sr, err := e.ab.TagSendNBX(src, rndvMsgTag, nil)
	if err != nil || sr == nil {
		t.Fatalf("send: %v, %v; want a request", sr, err)
	}
	if sr.proto != protoTagRndv {
		t.Fatalf("a send of %d bytes took %s, want %s", rndvMsgBytes, sr.proto, protoTagRndv)
	}
	// Only the receiver progresses until the close: the sender answers
	// nothing before it.
	rprogress := func(what string, cond func() bool) {
		t.Helper()
		if e.a == e.b {
			e.wait(t, what, cond)
			return
		}
		progressUntil(t, e.b, what, cond)
	}
	var msg *TagMessage
	rprogress("the announcement", func() bool {
		msg = e.b.TagProbeNB(rndvMsgTag, tagMaskFull, state == rcvRemoved, nil)
		return msg != nil
	})
	buf := make([]byte, rndvMsgBytes)
	var rr *Request
	if state == rcvPosted || state == rcvCanceled {
		rr, err = e.b.TagRecvNBX(buf, rndvMsgTag, tagMaskFull, new(RequestParam).SetOpAttrFlags(OpAttrFlagNoImmCmpl))
		if err != nil {
			t.Fatal(err)
		}
		if rr.tr.where != notPosted {
			t.Fatal("the receive did not match the announced message")
		}
		if state == rcvCanceled {
			// Whatever the sender does (here: nothing), the receive
			// completes: with the data if it took it already. Only a get
			// the transport has started (tcp, where the sender's side
			// answers it) runs to its end.
			rr.Cancel()
			switch {
			case rr.IsCompleted():
				checkRecv(t, rr, buf, sent, "canceled receive")
				rr = nil
			case rr.proto != protoTagRecvGet:
				t.Fatalf("canceled receive (%s) still running", rr.proto)
			}
		}
	}

	cr, err := e.ab.EPCloseNB(mode)
	if err := e.done(t, "close", cr, err); err != nil {
		t.Fatalf("close: %v", err)
	}
	sst := sendEnded(t, func(what string, c func() bool) { e.wait(t, what, c) }, sr, src)

	switch state {
	case rcvProbed:
		rr, err = e.b.TagRecvNBX(buf, rndvMsgTag, tagMaskFull, new(RequestParam).SetOpAttrFlags(OpAttrFlagNoImmCmpl))
	case rcvRemoved:
		rr, err = e.b.TagMsgRecvNBX(buf, msg, new(RequestParam).SetOpAttrFlags(OpAttrFlagNoImmCmpl))
	}
	if err != nil {
		t.Fatalf("receive after the close: %v", err)
	}
	if rr != nil {
		checkLateRecv(t, e, rr, buf, sent, sst, state)
	}
	// The receiver answers every revoke: nothing waits for it at the end.
	e.wait(t, "the receiver's answer", func() bool {
		e.a.proto.lock()
		defer e.a.proto.unlock()
		return len(e.a.proto.sends) == 0
	})
}

// sendEnded waits (with wait) for sr, a send whose endpoint closed or
// that was canceled, and returns its status: nil or ucs.ErrCanceled
// (anything else fails the test). The send completed: src, its buffer,
// is the sender's again, and sendEnded overwrites it.
func sendEnded(t *testing.T, wait func(what string, cond func() bool), sr *Request, src []byte) error {
	t.Helper()
	wait("the send", sr.IsCompleted)
	sst := sr.Status()
	sr.Free()
	if sst != nil && !errors.Is(sst, ucs.ErrCanceled) {
		t.Fatalf("send ended with %v, want nil or ucs.ErrCanceled", sst)
	}
	copy(src, pattern(len(src), 2))
	return sst
}

// checkLateRecv checks rr, a receive of the message posted before the
// sender closed (and not done then) or after, whose send ended with sst.
func checkLateRecv(t *testing.T, e *tagEnv, rr *Request, buf, sent []byte, sst error, state string) {
	t.Helper()
	if state != rcvProbed {
		// The data can no longer come, or came: the receive completes by
		// itself.
		e.wait(t, "the receive", rr.IsCompleted)
	} else {
		// A probed message was revoked: the receive waits for another one.
		for range 200 {
			e.progress()
		}
		rr.Cancel()
		e.wait(t, "the canceled receive", rr.IsCompleted)
	}
	rst := rr.Status()
	checkRecv(t, rr, buf, sent, "receive after the close")
	if sst == nil && rst != nil && state != rcvProbed {
		t.Fatalf("the send succeeded, its receive failed: %v", rst)
	}
	if sst != nil && rst == nil {
		t.Fatalf("the send was canceled, its receive succeeded")
	}
	t.Logf("send: %v; receive: %v", sst, rst)
	if m := e.b.TagProbeNB(rndvMsgTag, tagMaskFull, false, nil); m != nil {
		t.Fatal("the revoked message is still there")
	}
}

// checkRecv checks the completed receive r (then frees it): if it succeeded,
// buf holds what was sent.
func checkRecv(t *testing.T, r *Request, buf, sent []byte, what string) {
	t.Helper()
	err := r.Status()
	proto := r.proto
	r.Free()
	if err == nil && !bytes.Equal(buf, sent) {
		t.Fatalf("%s (%s) succeeded with other data than was sent (first difference at %d)", what, proto, firstDiff(buf, sent))
	}
}

// TestTagRndvSenderClosesRace has the receiver post its receive while the
// sender, on a goroutine of its own, sends and closes its endpoint at
// once, again and again: the receive may take the data before the revoke
// comes, be taking it (copying or getting the sender's buffer) while it
// comes, or find the message revoked. Whatever the timing, a receive that
// succeeds holds what was sent, although the sender overwrites its buffer
// as soon as its send completes; one that found nothing is canceled.
func TestTagRndvSenderClosesRace(t *testing.T) {
	const rounds = 20
	for _, sch := range []string{"auto", "am"} {
		for _, tr := range tagTransports[1:3] { // sm, tcp: two workers
			t.Run(sch+"/"+tr.name, func(t *testing.T) {
				t.Setenv("UCX_RNDV_SCHEME", sch)
				e := newTagEnv(t, tr.sendTLS, tr.recvTLS, false)
				var took, dropped int
				for i := range rounds {
					tag := uint64(100 + i)
					ep := connect(t, e.a, e.b, nil)
					sent := pattern(rndvMsgBytes, i)
					done := make(chan error, 1)
					// Each side progresses a while first, from none to many
					// calls: the revoke comes at different stages.
					go func() { done <- sendAndClose(e.a, ep, bytes.Clone(sent), tag, i%2, i*7%60) }()
					for range i * 37 % 300 {
						e.b.Progress()
					}
					buf := make([]byte, rndvMsgBytes)
					rr, err := e.b.TagRecvNBX(buf, tag, tagMaskFull, new(RequestParam).SetOpAttrFlags(OpAttrFlagNoImmCmpl))
					if err != nil {
						t.Fatal(err)
					}
					var serr error
					senderDone := false
					n := 0
					progressUntil(t, e.b, fmt.Sprintf("round %d: the receive", i), func() bool {
						if !senderDone {
							select {
							case serr = <-done:
								senderDone = true
							default:
							}
						} else if n++; n == 200 {
							rr.Cancel() // the message was revoked before it matched
						}
						return rr.IsCompleted()
					})
					if !senderDone {
						serr = <-done
					}
					if serr != nil {
						t.Fatalf("round %d: sender: %v", i, serr)
					}
					if rr.Status() == nil {
						took++
					} else {
						dropped++
					}
					checkRecv(t, rr, buf, sent, fmt.Sprintf("round %d: receive", i))
				}
				t.Logf("%d receives took the data, %d did not", took, dropped)
			})
		}
	}
}

// sendAndClose sends src with tag on ep, progresses spins times, closes ep
// (CloseModeFlush or CloseModeForce) and, once the send completed,
// overwrites src, as the caller may; it progresses only w, ep's worker.
func sendAndClose(w *Worker, ep *Endpoint, src []byte, tag uint64, mode, spins int) error {
	sr, err := ep.TagSendNBX(src, tag, nil)
	if err != nil || sr == nil {
		return fmt.Errorf("send: %v, %v; want a request", sr, err)
	}
	for range spins {
		w.Progress()
	}
	cr, err := ep.EPCloseNB(mode)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(hangLimit)
	for !sr.IsCompleted() || (cr != nil && !cr.IsCompleted()) {
		if time.Now().After(deadline) {
			return fmt.Errorf("send or close still running after %v", hangLimit)
		}
		w.Progress()
	}
	if cr != nil {
		cr.Free()
	}
	st := sr.Status()
	sr.Free()
	copy(src, bytes.Repeat([]byte{0xdd}, len(src)))
	if st != nil && !errors.Is(st, ucs.ErrCanceled) {
		return fmt.Errorf("send ended with %w", st)
	}
	return nil
}

// TestTagSendCancelWaiting cancels tag sends that wait for their receiver,
// which has the message but neither receives it nor answers: a sync send
// (eager, and by rendezvous) and a rendezvous send. Cancel completes each
// with ucs.ErrCanceled, with only the sender progressing ("the request will
// complete regardless of what the remote side is doing"). A rendezvous
// message is revoked then: the receiver drops it; a sync eager message
// stays, and a receive takes it. Either way the sender forgets the send
// once the receiver answered.
func TestTagSendCancelWaiting(t *testing.T) {
	for _, tr := range tagTransports {
		for _, c := range []struct {
			name string
			n    int
			sync bool
		}{{"sync", 64, true}, {"sync-rndv", rndvMsgBytes, true}, {"rndv", rndvMsgBytes, false}} {
			t.Run(tr.name+"/"+c.name, func(t *testing.T) {
				e := newTagEnv(t, tr.sendTLS, tr.recvTLS, tr.self)
				sent := pattern(c.n, 1)
				send := e.ab.TagSendNBX
				if c.sync {
					send = e.ab.TagSendSyncNBX
				}
				sr, err := send(bytes.Clone(sent), rndvMsgTag, nil)
				if err != nil || sr == nil {
					t.Fatalf("send: %v, %v; want a request", sr, err)
				}
				rndv := sr.proto == protoTagRndv
				if rndv != (c.n == rndvMsgBytes) {
					t.Fatalf("a send of %d bytes took %s", c.n, sr.proto)
				}
				// The message arrives; the receiver leaves it there.
				e.wait(t, "the message", func() bool {
					return e.b.TagProbeNB(rndvMsgTag, tagMaskFull, false, nil) != nil
				})
				sr.Cancel()
				progressUntil(t, e.a, "the canceled send", sr.IsCompleted)
				if err := sr.Status(); !errors.Is(err, ucs.ErrCanceled) {
					t.Fatalf("canceled send ended with %v, want ucs.ErrCanceled", err)
				}
				sr.Free()
				if rndv {
					e.wait(t, "the revoke", func() bool {
						return e.b.TagProbeNB(rndvMsgTag, tagMaskFull, false, nil) == nil
					})
				} else {
					buf := make([]byte, c.n)
					rr, err := e.b.TagRecvNBX(buf, rndvMsgTag, tagMaskFull, nil)
					if err := e.done(t, "the receive", rr, err); err != nil || !bytes.Equal(buf, sent) {
						t.Fatalf("receive of the sync message: %v (data equal: %v)", err, bytes.Equal(buf, sent))
					}
				}
				e.wait(t, "the receiver's answer", func() bool {
					e.a.proto.lock()
					defer e.a.proto.unlock()
					return len(e.a.proto.sends) == 0
				})
			})
		}
	}
}

// TestRndvAllocatesNothing: a round trip of rendezvous messages, tag and
// stream, over shared memory (the receiver gets with the sender's key) and
// tcp (the sender puts with the receiver's), allocates nothing once warm:
// the registrations made for one transfer, their packed keys, the keys the
// peer unpacks and the gets' bookkeeping are recycled, while each
// registration still ends with its transfer.
func TestRndvAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop what is put back: allocations mean nothing")
	}
	for _, tr := range tagTransports[1:3] {
		for _, fam := range []string{"tag", "stream"} {
			for _, n := range []int{64 << 10, 1 << 20} {
				t.Run(fmt.Sprintf("%s/%s/%d", tr.name, fam, n), func(t *testing.T) {
					e := newTagEnv(t, tr.sendTLS, tr.recvTLS, false, withStream)
					src, dst := make([]byte, n), make([]byte, n)
					wait := new(RequestParam).SetStreamRecvFlags(StreamRecvFlagWaitAll)
					// The message goes by rendezvous.
					var sr *Request
					var err error
					if fam == "tag" {
						sr, err = e.ab.TagSendNBX(src, 1, nil)
					} else {
						sr, err = e.ab.StreamSendNBX(src, nil)
					}
					if err != nil || sr == nil || !strings.HasPrefix(sr.proto, fam+"/rndv") {
						t.Fatalf("send of %d bytes: %v, %v; want a rendezvous", n, sr, err)
					}
					if fam == "tag" {
						rr, err := e.b.TagRecvNBX(dst, 1, tagMaskFull, nil)
						e.finish(t, rr, err)
					} else {
						rr, _, err := e.ba.StreamRecvNBX(dst, wait)
						e.finish(t, rr, err)
					}
					e.finish(t, sr, nil)
					roundTrip := func() { e.tagRoundTrip(t, src, dst) }
					if fam == "stream" {
						roundTrip = func() { e.streamRoundTrip(t, src, dst, wait) }
					}
					roundTrip()
					if a := allocsPerRun(20, roundTrip); a != 0 {
						t.Errorf("%v allocations per round trip", a)
					}
				})
			}
		}
	}
}

// allocsPerRun is the least of three testing.AllocsPerRun of f: a
// goroutine of the runtime or of a transport that allocates meanwhile
// counts against f in one of them, rarely in all three.
func allocsPerRun(runs int, f func()) float64 {
	a := testing.AllocsPerRun(runs, f)
	for range 2 {
		a = min(a, testing.AllocsPerRun(runs, f))
	}
	return a
}
