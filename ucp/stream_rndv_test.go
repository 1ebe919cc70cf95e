package ucp

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/goshmem/goshmem/ucs"
)

// streamRndvSchemes are the values of UCX_RNDV_SCHEME the rendezvous tests run
// under.
var streamRndvSchemes = []string{"auto", "get_zcopy", "put_zcopy", "am"}

// streamRndvRecvProto is the protocol a stream receive posted before a
// rendezvous send takes its data with, under scheme over the transports
// tr: the data goes into its buffer (rkey_ptr, get or put) or is pushed
// and unpacked there.
func streamRndvRecvProto(scheme, tr string) string {
	switch scheme {
	case "get_zcopy":
		return protoStreamRecvGet
	case "put_zcopy":
		return protoStreamRecvPut
	case "am":
		return protoStreamRecvAM
	}
	switch tr {
	case "self":
		return protoStreamRecvRkeyPtr // the sender's memory is this process's
	case "sm":
		return protoStreamRecvGet // cma
	}
	return protoStreamRecvPut // over the network the sender puts
}

// TestStreamRndv sends a stream message above the rendezvous threshold
// over every transport and rendezvous scheme: it goes as an RTS, and the
// receiver takes the data into the buffer of a receive posted before
// (zero-copy where the scheme allows: rkey_ptr, get, put; pushed
// otherwise), or, with no receive posted, into the stream's queue at
// once: the send completes without a receive, and a receive posted later
// finds the data.
func TestStreamRndv(t *testing.T) {
	for _, sch := range streamRndvSchemes {
		for _, tr := range tagTransports {
			for _, early := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/%s/early=%v", sch, tr.name, early), func(t *testing.T) {
					t.Setenv("UCX_RNDV_SCHEME", sch)
					e := newStreamEnv(t, tr.sendTLS, tr.recvTLS, tr.self)
					n := rndvMsgBytes
					buf := make([]byte, n)
					var rr *Request
					if early {
						var err error
						if rr, _, err = e.ba.StreamRecvNBX(buf, nil); err != nil || rr == nil {
							t.Fatalf("stream recv: %v, %v; want a request", rr, err)
						}
					}
					sr, err := e.ab.StreamSendNBX(streamBytes(0, n), nil)
					if err != nil || sr == nil {
						t.Fatalf("stream send of %d bytes: %v, %v; want a request", n, sr, err)
					}
					if sr.proto != protoStreamRndv {
						t.Fatalf("a stream send of %d bytes took %s, want %s", n, sr.proto, protoStreamRndv)
					}
					if err := e.done(t, "the send", sr, nil); err != nil {
						t.Fatalf("stream send: %v", err)
					}
					if !early {
						// The data is in the queue: read it where it lies.
						e.wait(t, "the data", func() bool { return e.ba.strm.bytes == n })
						d, err := e.ba.StreamRecvDataNB()
						if err != nil || len(d) != n {
							t.Fatalf("stream recv data: %d bytes, %v; want %d", len(d), err, n)
						}
						checkStream(t, d, 0)
						e.ba.StreamDataRelease(d)
						return
					}
					e.wait(t, "the receive", rr.IsCompleted)
					var got int
					if err := rr.StreamRecvRequestTest(&got); err != nil || got != n {
						t.Fatalf("stream recv: %v, %d bytes; want %d", err, got, n)
					}
					if want := streamRndvRecvProto(sch, tr.name); rr.proto != want {
						t.Errorf("the receive took %s, want %s", rr.proto, want)
					}
					rr.Free()
					checkStream(t, buf, 0)
				})
			}
		}
	}
}

// streamTail is what the stream rendezvous tests send behind the large
// message: it must arrive, after all of the large one or none of it.
var streamTail = []byte("the tail of the stream")

// checkStreamAllOrNone receives what the stream holds after a rendezvous
// send of sent that ended with sst, followed by streamTail: all of sent
// (the receiver took it before any revoke; the send then succeeded,
// unless it was canceled) or none of it (revoked: the send was
// canceled), then the tail.
func checkStreamAllOrNone(t *testing.T, e *tagEnv, sent []byte, sst error, canceled bool) {
	t.Helper()
	e.wait(t, "the tail", func() bool {
		b := e.ba.strm.bytes
		return b == len(streamTail) || b == len(sent)+len(streamTail)
	})
	got := streamRecvAll(t, e, e.ba, e.ba.strm.bytes, 1<<20)
	all := len(got) > len(streamTail)
	switch {
	case all && !bytes.Equal(got[:len(sent)], sent):
		t.Fatalf("the stream holds other data than was sent (first difference at %d)", firstDiff(got[:len(sent)], sent))
	case !bytes.Equal(got[len(got)-len(streamTail):], streamTail):
		t.Fatalf("the stream ends with %q, want the tail", got[len(got)-len(streamTail):])
	case !all && sst == nil:
		t.Fatalf("the send succeeded, its data is not in the stream")
	case all && sst != nil && !canceled:
		t.Fatalf("the send ended with %v, its data is in the stream", sst)
	}
	t.Logf("send: %v; the stream took its data: %v", sst, all)
}

// TestStreamRndvSenderCloses closes the sender's endpoint (flush or
// force mode) right after a rendezvous stream send, before the receiver
// answered, with a receive posted or not, over every transport and
// scheme. The send completes (ucs.ErrCanceled unless the receiver took the
// data first), and the sender then overwrites its buffer. The receiver
// never holds other data than was sent: a receive that waited for data
// that can no longer come ends with ucs.ErrCanceled, and the stream holds
// all of the message or none of it.
func TestStreamRndvSenderCloses(t *testing.T) {
	for _, sch := range streamRndvSchemes {
		for _, tr := range tagTransports {
			for _, mode := range []int{CloseModeFlush, CloseModeForce} {
				for _, early := range []bool{true, false} {
					name := fmt.Sprintf("%s/%s/%s/early=%v", sch, tr.name, []string{"flush", "force"}[mode], early)
					t.Run(name, func(t *testing.T) {
						t.Setenv("UCX_RNDV_SCHEME", sch)
						streamRndvSenderCloses(t, newStreamEnv(t, tr.sendTLS, tr.recvTLS, tr.self), mode, early)
					})
				}
			}
		}
	}
}

func streamRndvSenderCloses(t *testing.T, e *tagEnv, mode int, early bool) {
	src := streamBytes(0, rndvMsgBytes)
	sent := bytes.Clone(src)
	buf := make([]byte, rndvMsgBytes)
	var rr *Request
	if early {
		var err error
		if rr, _, err = e.ba.StreamRecvNBX(buf, new(RequestParam).SetStreamRecvFlags(StreamRecvFlagWaitAll)); err != nil || rr == nil {
			t.Fatalf("stream recv: %v, %v; want a request", rr, err)
		}
	}
	sr, err := e.ab.StreamSendNBX(src, nil)
	if err != nil || sr == nil || sr.proto != protoStreamRndv {
		t.Fatalf("send: %v, %v; want a request of %s", sr, err, protoStreamRndv)
	}
	cr, err := e.ab.EPCloseNB(mode)
	if err := e.done(t, "close", cr, err); err != nil {
		t.Fatalf("close: %v", err)
	}
	sst := sendEnded(t, func(what string, c func() bool) { e.wait(t, what, c) }, sr, src)
	// The receiver answers every revoke: nothing waits for it at the end.
	e.wait(t, "the receiver's answer", func() bool {
		e.a.proto.lock()
		defer e.a.proto.unlock()
		return len(e.a.proto.sends) == 0
	})
	if early {
		e.wait(t, "the receive", rr.IsCompleted)
		rst := rr.Status()
		checkRecv(t, rr, buf, sent, "receive")
		// (To self, the receive is the closed endpoint's own: the close
		// ends it, whatever became of the send.)
		if (sst == nil) != (rst == nil) && e.a != e.b {
			t.Fatalf("send: %v, receive: %v; want both to succeed or neither", sst, rst)
		}
		if rst != nil && !errors.Is(rst, ucs.ErrCanceled) {
			t.Fatalf("receive ended with %v, want ucs.ErrCanceled", rst)
		}
		return
	}
	if e.a == e.b {
		return // the endpoint to self is the receiver's too: closed
	}
	// Nothing more comes from the closed endpoint: what the stream holds
	// is all of the message or nothing.
	for range 100 {
		e.progress()
	}
	switch b := e.ba.strm.bytes; {
	case b == rndvMsgBytes && sst == nil:
		got := streamRecvAll(t, e, e.ba, b, b)
		checkStream(t, got, 0)
	case b != 0 || sst == nil:
		t.Fatalf("send: %v; the stream holds %d bytes", sst, b)
	}
}

// TestStreamRndvSendCancel cancels a rendezvous stream send whose receiver
// has not answered (it does not progress meanwhile), then sends a tail:
// the send completes with ucs.ErrCanceled with only the sender
// progressing, and the receiver's stream holds all of the message (its
// receiver took it before the revoke) or none of it, then the tail.
func TestStreamRndvSendCancel(t *testing.T) {
	for _, sch := range streamRndvSchemes {
		for _, tr := range tagTransports[1:] { // two workers: the receiver stands still
			t.Run(sch+"/"+tr.name, func(t *testing.T) {
				t.Setenv("UCX_RNDV_SCHEME", sch)
				e := newStreamEnv(t, tr.sendTLS, tr.recvTLS, tr.self)
				sent := streamBytes(0, rndvMsgBytes)
				sr, err := e.ab.StreamSendNBX(sent, nil)
				if err != nil || sr == nil || sr.proto != protoStreamRndv {
					t.Fatalf("send: %v, %v; want a request of %s", sr, err, protoStreamRndv)
				}
				sr.Cancel()
				progressUntil(t, e.a, "the canceled send", sr.IsCompleted)
				sst := sr.Status()
				sr.Free()
				if !errors.Is(sst, ucs.ErrCanceled) {
					t.Fatalf("canceled send ended with %v, want ucs.ErrCanceled", sst)
				}
				tr, err := e.ab.StreamSendNBX(streamTail, nil)
				if err := e.done(t, "the tail", tr, err); err != nil {
					t.Fatal(err)
				}
				checkStreamAllOrNone(t, e, sent, sst, true)
				e.wait(t, "the receiver's answer", func() bool {
					e.a.proto.lock()
					defer e.a.proto.unlock()
					return len(e.a.proto.sends) == 0
				})
			})
		}
	}
}

// TestStreamRndvRecvCancel cancels a stream receive while the rendezvous
// data it takes is pushed or put into its buffer (the receiver asked the
// sender, which did not answer yet): the receive ends with that data,
// with ucs.ErrCanceled, and none of the stream is lost: the next receive
// gets the bytes sent next.
func TestStreamRndvRecvCancel(t *testing.T) {
	for _, sch := range []string{"am", "put_zcopy"} {
		for _, tr := range tagTransports[1:] {
			t.Run(sch+"/"+tr.name, func(t *testing.T) {
				t.Setenv("UCX_RNDV_SCHEME", sch)
				e := newStreamEnv(t, tr.sendTLS, tr.recvTLS, tr.self)
				n := rndvMsgBytes
				buf := make([]byte, n)
				rr, _, err := e.ba.StreamRecvNBX(buf, nil)
				if err != nil || rr == nil {
					t.Fatalf("stream recv: %v, %v; want a request", rr, err)
				}
				sr, err := e.ab.StreamSendNBX(streamBytes(0, n), nil)
				if err != nil || sr == nil {
					t.Fatalf("send: %v, %v; want a request", sr, err)
				}
				want := streamRndvRecvProto(sch, tr.name)
				progressUntil(t, e.b, "the receiver's request for the data", func() bool { return rr.proto == want })
				rr.Cancel()
				if rr.IsCompleted() {
					t.Fatal("the receive completed while its data was on the way")
				}
				e.wait(t, "the canceled receive", rr.IsCompleted)
				var got int
				if err := rr.StreamRecvRequestTest(&got); !errors.Is(err, ucs.ErrCanceled) || got != n {
					t.Fatalf("canceled receive: %v, %d bytes; want ucs.ErrCanceled with %d", err, got, n)
				}
				rr.Free()
				checkStream(t, buf, 0)
				if err := e.done(t, "the send", sr, nil); err != nil {
					t.Fatal(err)
				}
				tail, err := e.ab.StreamSendNBX(streamBytes(n, 100), nil)
				if err := e.done(t, "the tail", tail, err); err != nil {
					t.Fatal(err)
				}
				checkStream(t, streamRecvAll(t, e, e.ba, 100, 100), n)
			})
		}
	}
}

// TestStreamRndvReceiverCloses closes the receiver's endpoint while the
// data of a rendezvous stream send waits to be pushed into the stream's
// queue (no receive posted, UCX_RNDV_SCHEME=am): the fetch ends with the
// stream, nothing of it stays in the receiver's worker, and the send
// completes.
func TestStreamRndvReceiverCloses(t *testing.T) {
	for _, tr := range tagTransports[1:] {
		t.Run(tr.name, func(t *testing.T) {
			t.Setenv("UCX_RNDV_SCHEME", "am")
			e := newStreamEnv(t, tr.sendTLS, tr.recvTLS, tr.self)
			sr, err := e.ab.StreamSendNBX(streamBytes(0, rndvMsgBytes), nil)
			if err != nil || sr == nil || sr.proto != protoStreamRndv {
				t.Fatalf("send: %v, %v; want a request of %s", sr, err, protoStreamRndv)
			}
			q := e.ba.strm
			progressUntil(t, e.b, "the receiver's request for the data", func() bool {
				e.b.stream.lock()
				defer e.b.stream.unlock()
				return q.fetching != nil && q.fetching.tr.rreq != 0
			})
			e.ba.Close(CloseModeForce)
			e.wait(t, "the send", sr.IsCompleted)
			sr.Free()
			e.b.proto.lock()
			waits := len(e.b.proto.waits)
			e.b.proto.unlock()
			if q.fetching != nil || waits != 0 || len(e.b.stream.qs) != 0 {
				t.Fatalf("after the close: a fetch in flight: %v, %d receives waiting, %d streams", q.fetching != nil, waits, len(e.b.stream.qs))
			}
		})
	}
}

// TestRndvFamilyMissing sends a stream message by rendezvous to a worker
// whose context has no FeatureStream: its receiver answers that it cannot
// take it, and the send ends with ucs.ErrUnsupported instead of waiting
// for ever.
func TestRndvFamilyMissing(t *testing.T) {
	for _, tr := range tagTransports[1:3] {
		t.Run(tr.name, func(t *testing.T) {
			e := &tagEnv{ca: newTagContext(t, tr.sendTLS, withStream), cb: newTagContext(t, tr.recvTLS)}
			e.a, e.b = newWorker(t, e.ca), newWorker(t, e.cb)
			e.ab, e.ba = connect(t, e.a, e.b, nil), connect(t, e.b, e.a, nil)
			sr, err := e.ab.StreamSendNBX(streamBytes(0, rndvMsgBytes), nil)
			if err != nil || sr == nil || sr.proto != protoStreamRndv {
				t.Fatalf("send: %v, %v; want a request of %s", sr, err, protoStreamRndv)
			}
			if err := e.done(t, "the send", sr, nil); !errors.Is(err, ucs.ErrUnsupported) {
				t.Fatalf("send to a worker without streams: %v, want ucs.ErrUnsupported", err)
			}
		})
	}
}
