package ucp

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/goshmem/goshmem/ucs"
)

func withStream(p *Params) { p.Features |= FeatureStream }

// newStreamEnv is newTagEnv with FeatureStream.
func newStreamEnv(t testing.TB, sendTLS, recvTLS string, self bool) *tagEnv {
	t.Helper()
	return newTagEnv(t, sendTLS, recvTLS, self, withStream)
}

// streamBytes returns n bytes of the stream pattern from offset off: a
// byte sequence whose every window differs, so that a reordered, lost or
// repeated piece shows.
func streamBytes(off, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		k := off + i
		b[i] = byte(k*7 + k>>8 + k>>16)
	}
	return b
}

// streamRecvAll receives n bytes on ep, in receives of at most chunk
// bytes each (partial completions allowed), and returns them.
func streamRecvAll(t testing.TB, e *tagEnv, ep *Endpoint, n, chunk int) []byte {
	t.Helper()
	got := make([]byte, 0, n)
	for len(got) < n {
		buf := make([]byte, min(chunk, n-len(got)))
		r, k, err := ep.StreamRecvNBX(buf, nil)
		if err != nil {
			t.Fatalf("stream recv after %d of %d bytes: %v", len(got), n, err)
		}
		if r != nil {
			e.wait(t, "stream recv", r.IsCompleted)
			if err := r.StreamRecvRequestTest(&k); err != nil {
				t.Fatalf("stream recv after %d of %d bytes: %v", len(got), n, err)
			}
			r.Free()
		}
		if k <= 0 || k > len(buf) {
			t.Fatalf("stream recv completed with %d bytes into a buffer of %d", k, len(buf))
		}
		got = append(got, buf[:k]...)
	}
	return got
}

// checkStream fails the test at the first byte of got that differs from
// the stream pattern.
func checkStream(t testing.TB, got []byte, off int) {
	t.Helper()
	want := streamBytes(off, len(got))
	if i := firstDiff(got, want); i >= 0 {
		t.Fatalf("stream byte %d of %d: got %#x, want %#x", off+i, off+len(got), got[i], want[i])
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// streamSizes interleaves small sends with ones of every protocol: one
// copied message, zero-copy, many fragments.
var streamSizes = []int{1, 7, 100000, 8, 200, 8 << 10, 3, 20 << 10, 64 << 10, 1, 300 << 10, 1000, 1 << 20, 5}

// TestStreamOrder sends a stream of mixed sizes, all at once, and
// receives it in pieces of other sizes: the bytes arrive in order, none
// lost or repeated, over every path: every transport, eager and, from the
// default threshold or from 16 KiB under every UCX_RNDV_SCHEME, by
// rendezvous; the receives posted after the data (it waits in the
// queue) or before it: in pieces of 3000 bytes, one for all of it (which
// rendezvous data fills behind what it holds already), or one per send
// (whose large ones take their data zero-copy).
func TestStreamOrder(t *testing.T) {
	for _, sch := range append([]string{"default"}, streamRndvSchemes...) {
		for _, tr := range tagTransports {
			for _, mode := range []string{"late", "pieces", "all", "each"} {
				t.Run(fmt.Sprintf("%s/%s/%s", sch, tr.name, mode), func(t *testing.T) {
					if sch != "default" {
						t.Setenv("UCX_RNDV_SCHEME", sch)
						t.Setenv("UCX_RNDV_THRESH", "16384")
					}
					streamOrder(t, newStreamEnv(t, tr.sendTLS, tr.recvTLS, tr.self), mode, streamRndvRecvProto(sch, tr.name))
				})
			}
		}
	}
}

func streamOrder(t *testing.T, e *tagEnv, mode, rndvProto string) {
	rndvFrom := e.ab.thresholds().rndv
	total := 0
	for _, n := range streamSizes {
		total += n
	}
	var posted []*Request
	var bufs [][]byte
	post := func(n int) {
		// Each waits for all of its buffer: an eager send may arrive in
		// pieces.
		b := make([]byte, n)
		r, _, err := e.ba.StreamRecvNBX(b, new(RequestParam).SetStreamRecvFlags(StreamRecvFlagWaitAll))
		if err != nil || r == nil {
			t.Fatalf("early stream recv: %v, %v; want a request", r, err)
		}
		posted, bufs = append(posted, r), append(bufs, b)
	}
	switch mode {
	case "pieces":
		for off := 0; off < total; off += 3000 {
			post(min(3000, total-off))
		}
	case "all":
		post(total)
	case "each":
		for _, n := range streamSizes {
			post(n)
		}
	}
	var sends []*Request
	off := 0
	for _, n := range streamSizes {
		r, err := e.ab.StreamSendNBX(streamBytes(off, n), nil)
		if err != nil {
			t.Fatalf("stream send of %d bytes: %v", n, err)
		}
		if rndv := r != nil && r.proto == protoStreamRndv; rndv != (n >= rndvFrom) {
			t.Fatalf("a stream send of %d bytes went by rendezvous: %v (threshold %d)", n, rndv, rndvFrom)
		}
		if r != nil {
			sends = append(sends, r)
		}
		off += n
	}
	var got []byte
	if mode == "late" {
		got = streamRecvAll(t, e, e.ba, total, 4099)
	}
	for i, r := range posted {
		e.wait(t, "early stream recv", r.IsCompleted)
		var k int
		if err := r.StreamRecvRequestTest(&k); err != nil || k != len(bufs[i]) {
			t.Fatalf("early stream recv %d: %v, %d of %d bytes", i, err, k, len(bufs[i]))
		}
		if mode == "each" && k >= rndvFrom && r.proto != rndvProto {
			t.Errorf("the receive of %d bytes took %s, want %s", k, r.proto, rndvProto)
		}
		r.Free()
		got = append(got, bufs[i]...)
	}
	checkStream(t, got, 0)
	for _, r := range sends {
		if err := e.done(t, "stream send", r, nil); err != nil {
			t.Fatalf("stream send: %v", err)
		}
	}
	if d, err := e.ba.StreamRecvDataNB(); d != nil || err != nil {
		t.Fatalf("after the whole stream, %d bytes more (%v)", len(d), err)
	}
}

// TestStreamPartialAndWaitAll checks when receives complete: without the
// wait-all flag with what arrived (whole elements of the datatype), with
// it only once the buffer is full.
func TestStreamPartialAndWaitAll(t *testing.T) {
	for _, tr := range tagTransports[:3] {
		t.Run(tr.name, func(t *testing.T) {
			e := newStreamEnv(t, tr.sendTLS, tr.recvTLS, tr.self)
			var cbLen, cbCalls int
			param := new(RequestParam).SetStreamRecvCallback(func(_ *Request, err error, n int, _ any) {
				cbCalls++
				cbLen = n
			})
			// A partial receive posted first completes with the 100 bytes
			// that came.
			buf := make([]byte, 1000)
			r, _, err := e.ba.StreamRecvNBX(buf, param)
			if err != nil || r == nil {
				t.Fatalf("stream recv: %v, %v; want a request", r, err)
			}
			if _, err := e.ab.StreamSendNBX(streamBytes(0, 100), nil); err != nil {
				t.Fatal(err)
			}
			e.wait(t, "partial recv", r.IsCompleted)
			var n int
			if err := r.StreamRecvRequestTest(&n); err != nil || n != 100 || cbLen != 100 || cbCalls != 1 {
				t.Fatalf("partial recv: %v, length %d, callback %d times with %d; want 100 once", err, n, cbCalls, cbLen)
			}
			r.Free()
			checkStream(t, buf[:100], 0)

			// Elements of 4 bytes: of 10 bytes queued, a receive takes 8.
			if _, err := e.ab.StreamSendNBX(streamBytes(100, 10), nil); err != nil {
				t.Fatal(err)
			}
			e.wait(t, "10 bytes queued", func() bool { return e.ba.strm.bytes == 10 })
			r, n, err = e.ba.StreamRecvNBX(buf, new(RequestParam).SetDatatype(DatatypeContig(4)))
			if r != nil || err != nil || n != 8 {
				t.Fatalf("recv of 4-byte elements: %v, %d, %v; want 8 bytes at once", r, n, err)
			}
			checkStream(t, buf[:8], 100)

			// Wait-all: 2 bytes queued, 5000 wanted, sent in 3 pieces.
			wa := make([]byte, 5000)
			r, _, err = e.ba.StreamRecvNBX(wa, new(RequestParam).SetStreamRecvFlags(StreamRecvFlagWaitAll))
			if err != nil || r == nil {
				t.Fatalf("wait-all recv: %v, %v; want a request", r, err)
			}
			off := 110
			for _, k := range []int{1000, 2000, 1998} {
				if r.IsCompleted() {
					t.Fatalf("wait-all recv completed at stream offset %d, before its buffer was full", off)
				}
				if _, err := e.ab.StreamSendNBX(streamBytes(off, k), nil); err != nil {
					t.Fatal(err)
				}
				off += k
				for range 50 {
					e.progress()
				}
			}
			e.wait(t, "wait-all recv", r.IsCompleted)
			if err := r.StreamRecvRequestTest(&n); err != nil || n != 5000 {
				t.Fatalf("wait-all recv: %v, %d bytes; want 5000", err, n)
			}
			r.Free()
			checkStream(t, wa, 108)

			// Forced immediate completion without enough data.
			if _, _, err := e.ba.StreamRecvNBX(wa, new(RequestParam).SetOpAttrFlags(OpAttrFlagForceImmCmpl)); !errors.Is(err, ucs.ErrNoResource) {
				t.Fatalf("forced recv with nothing queued: %v, want ErrNoResource", err)
			}
			// A forced wait-all receive that the queued bytes do not fill
			// fails without taking them: the next receive gets them.
			if _, err := e.ab.StreamSendNBX(streamBytes(5110, 3), nil); err != nil {
				t.Fatal(err)
			}
			e.wait(t, "3 stream bytes queued", func() bool { return e.ba.strm.bytes == 3 })
			forced := new(RequestParam).SetOpAttrFlags(OpAttrFlagForceImmCmpl).SetStreamRecvFlags(StreamRecvFlagWaitAll)
			if _, _, err := e.ba.StreamRecvNBX(wa, forced); !errors.Is(err, ucs.ErrNoResource) {
				t.Fatalf("forced wait-all recv of %d bytes with 3 queued: %v, want ErrNoResource", len(wa), err)
			}
			checkStream(t, streamRecvAll(t, e, e.ba, 3, 3), 5110)
			// A canceled receive completes with ErrCanceled.
			r, _, err = e.ba.StreamRecvNBX(wa, nil)
			if err != nil || r == nil {
				t.Fatal(r, err)
			}
			r.Cancel()
			if err := r.Status(); !errors.Is(err, ucs.ErrCanceled) {
				t.Fatalf("canceled stream recv: %v", err)
			}
			r.Free()
		})
	}
}

// TestStreamRecvData receives a stream where it arrived, piece by piece,
// and gives each piece back.
func TestStreamRecvData(t *testing.T) {
	for _, tr := range tagTransports {
		t.Run(tr.name, func(t *testing.T) {
			e := newStreamEnv(t, tr.sendTLS, tr.recvTLS, tr.self)
			const total = 3<<20 + 17
			r, err := e.ab.StreamSendNBX(streamBytes(0, total), nil)
			if err != nil {
				t.Fatal(err)
			}
			var got []byte
			pieces := 0
			e.wait(t, "stream data", func() bool {
				d, err := e.ba.StreamRecvDataNB()
				if err != nil {
					t.Fatal(err)
				}
				if d != nil {
					got = append(got, d...)
					pieces++
					e.ba.StreamDataRelease(d)
				}
				return len(got) >= total
			})
			checkStream(t, got, 0)
			if len(got) != total {
				t.Fatalf("got %d bytes, want %d", len(got), total)
			}
			if err := e.done(t, "send", r, nil); err != nil {
				t.Fatal(err)
			}
			if n := len(e.b.stream.lent); n != 0 {
				t.Fatalf("%d pieces still lent after their release", n)
			}
			t.Logf("%d bytes in %d pieces", total, pieces)
		})
	}
}

// TestStreamDatatypes sends with each datatype and receives with each,
// in one stream of several sends.
func TestStreamDatatypes(t *testing.T) {
	var gen strided2
	g, err := DatatypeCreateGeneric(gen.ops(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer DatatypeDestroy(g)
	for _, tr := range tagTransports[:3] {
		for _, n := range []int{5, 3000, 100 << 10} {
			t.Run(fmt.Sprintf("%s/%d", tr.name, n), func(t *testing.T) {
				e := newStreamEnv(t, tr.sendTLS, tr.recvTLS, tr.self)
				kinds := []string{"contig", "iov", "generic"}
				off := 0
				for _, sk := range kinds {
					for _, rk := range kinds {
						want := streamBytes(off, n)
						off += n
						// Send.
						var sr *Request
						switch sk {
						case "contig":
							sr, err = e.ab.StreamSendNBX(want, nil)
						case "iov":
							sr, err = e.ab.StreamSendNBX(nil, new(RequestParam).SetIOV([][]byte{want[:n/3], nil, want[n/3:]}))
						case "generic":
							sp := make([]byte, 2*n)
							for i, v := range want {
								sp[2*i] = v
							}
							sr, err = e.ab.StreamSendNB(sp, n, g, nil, 0)
						}
						if err != nil {
							t.Fatalf("%s send: %v", sk, err)
						}
						// Receive all of it.
						got := make([]byte, n)
						var rr *Request
						wait := new(RequestParam).SetStreamRecvFlags(StreamRecvFlagWaitAll)
						var sp []byte
						switch rk {
						case "contig":
							rr, _, err = e.ba.StreamRecvNBX(got, wait)
						case "iov":
							rr, _, err = e.ba.StreamRecvNBX(nil, wait.SetIOV([][]byte{got[:1], got[1 : n/2], got[n/2:]}))
						case "generic":
							sp = make([]byte, 2*n)
							rr, _, err = e.ba.StreamRecvNB(sp, n, g, nil, StreamRecvFlagWaitAll)
						}
						if err := e.done(t, rk+" recv", rr, err); err != nil {
							t.Fatalf("%s recv: %v", rk, err)
						}
						if err := e.done(t, sk+" send", sr, nil); err != nil {
							t.Fatalf("%s send: %v", sk, err)
						}
						if sp != nil {
							for i := range got {
								got[i] = sp[2*i]
							}
						}
						if !bytes.Equal(got, want) {
							t.Fatalf("%s to %s: data differs at %d", sk, rk, firstDiff(got, want))
						}
					}
				}
				if gen.started != gen.finished {
					t.Fatalf("generic datatype: %d states started, %d finished", gen.started, gen.finished)
				}
			})
		}
	}
}

// TestStreamWorkerPoll checks that poll names the endpoints with data,
// with their user data, once per arrival.
func TestStreamWorkerPoll(t *testing.T) {
	c := newTagContext(t, "sm,self", withStream)
	b := newWorker(t, c)
	a1, a2 := newWorker(t, c), newWorker(t, c)
	s1, s2 := connect(t, a1, b, nil), connect(t, a2, b, nil)
	r1 := connect(t, b, a1, new(EPParams).SetUserData("one"))
	r2 := connect(t, b, a2, new(EPParams).SetUserData("two"))
	progress := func() {
		for _, w := range []*Worker{a1, a2, b} {
			w.Progress()
		}
	}
	polls := make([]StreamPollEP, 4)
	if n := b.StreamWorkerPoll(polls, 0); n != 0 {
		t.Fatalf("poll with no data: %d endpoints", n)
	}
	for _, ep := range []*Endpoint{s2, s1} {
		if _, err := ep.StreamSendNBX([]byte("hello"), nil); err != nil {
			t.Fatal(err)
		}
	}
	var got []StreamPollEP
	e := &tagEnv{a: a1, b: b}
	e.wait(t, "poll", func() bool {
		progress()
		n := b.StreamWorkerPoll(polls, 0)
		got = append(got, polls[:n]...)
		return len(got) >= 2
	})
	if len(got) != 2 || got[0].EP != r2 || got[0].UserData != "two" || got[1].EP != r1 || got[1].UserData != "one" {
		t.Fatalf("poll: %+v, want the endpoints to a2 (two), then a1 (one)", got)
	}
	for range 20 {
		progress()
	}
	if n := b.StreamWorkerPoll(polls, 0); n != 0 {
		t.Fatalf("second poll without new data: %d endpoints", n)
	}
	// More data on r1: reported again. Receiving all of it takes it off.
	if _, err := s1.StreamSendNBX([]byte("more"), nil); err != nil {
		t.Fatal(err)
	}
	e.wait(t, "poll after more data", func() bool {
		progress()
		return r1.strm.bytes == 9
	})
	buf := make([]byte, 9)
	if r, n, err := r1.StreamRecvNBX(buf, nil); r != nil || n != 9 || err != nil || string(buf) != "hellomore" {
		t.Fatalf("recv: %v, %d, %v, %q", r, n, err, buf)
	}
	if n := b.StreamWorkerPoll(polls, 0); n != 0 {
		t.Fatalf("poll after all data was taken: %d endpoints (%v)", n, polls[0].UserData)
	}
}

// TestStreamWorkerPollPartialElement checks that poll reports an endpoint
// only while it has data to read: not once receives of 4-byte elements
// took all of it, nor while a receive waits on a part of an element that
// is queued (StreamRecvDataNB returns nil then), and again when that
// receive is canceled and the part can be read.
func TestStreamWorkerPollPartialElement(t *testing.T) {
	for _, tr := range tagTransports {
		t.Run(tr.name, func(t *testing.T) {
			e := newStreamEnv(t, tr.sendTLS, tr.recvTLS, tr.self)
			polls := make([]StreamPollEP, 4)
			// poll progresses the workers a while, so that anything on its
			// way arrives, and returns what poll reports.
			poll := func() []StreamPollEP {
				for range 50 {
					e.progress()
				}
				return polls[:e.b.StreamWorkerPoll(polls, 0)]
			}
			send := func(off, n int) {
				t.Helper()
				r, err := e.ab.StreamSendNBX(streamBytes(off, n), nil)
				if err := e.done(t, "stream send", r, err); err != nil {
					t.Fatal(err)
				}
			}
			recv := func(buf []byte) *Request {
				t.Helper()
				r, n, err := e.ba.StreamRecvNB(buf, len(buf)/4, DatatypeContig(4), nil, 0)
				if err != nil || r == nil {
					t.Fatalf("stream recv of 4-byte elements: %v, %d bytes, %v; want a request", r, n, err)
				}
				return r
			}
			length := func(r *Request) int {
				t.Helper()
				e.wait(t, "stream recv", r.IsCompleted)
				var n int
				if err := r.StreamRecvRequestTest(&n); err != nil {
					t.Fatalf("stream recv: %v", err)
				}
				r.Free()
				return n
			}
			b1, b2 := make([]byte, 400), make([]byte, 400)
			r1 := recv(b1)
			send(0, 7) // 4 bytes to r1, 3 queued
			if n := length(r1); n != 4 {
				t.Fatalf("first recv: %d bytes, want 4", n)
			}
			r2 := recv(b2) // waits: 3 bytes are not an element
			if got := poll(); len(got) != 0 {
				t.Fatalf("poll while a receive waits on the 3 bytes queued: %d endpoints", len(got))
			}
			send(7, 9) // r2 takes all 12
			if n := length(r2); n != 12 {
				t.Fatalf("second recv: %d bytes, want 12", n)
			}
			checkStream(t, append(b1[:4:4], b2[:12]...), 0)
			if got := poll(); len(got) != 0 {
				d, err := e.ba.StreamRecvDataNB()
				t.Fatalf("poll after receives took all the data: %d endpoints (StreamRecvDataNB: %d bytes, %v)", len(got), len(d), err)
			}
			// 3 bytes that a waiting receive cannot take, then the receive
			// is canceled: they can be read, and poll says so.
			r3 := recv(b1)
			send(16, 3)
			if got := poll(); len(got) != 0 {
				t.Fatalf("poll while a receive waits on the 3 bytes queued: %d endpoints", len(got))
			}
			r3.Cancel()
			if err := r3.Status(); !errors.Is(err, ucs.ErrCanceled) {
				t.Fatalf("canceled recv: %v", err)
			}
			r3.Free()
			if got := poll(); len(got) != 1 || got[0].EP != e.ba {
				t.Fatalf("poll after the waiting receive was canceled: %+v, want the endpoint", got)
			}
			d, err := e.ba.StreamRecvDataNB()
			if err != nil || len(d) != 3 {
				t.Fatalf("StreamRecvDataNB: %d bytes, %v; want 3", len(d), err)
			}
			checkStream(t, d, 16)
			e.ba.StreamDataRelease(d)
			if got := poll(); len(got) != 0 {
				t.Fatalf("poll after the data was read: %d endpoints", len(got))
			}
		})
	}
}

// TestStreamLoopback checks an endpoint to its own worker: it receives
// what it sends, or with EPParamsFlagNoLoopback the next endpoint to self
// does; and that data sent before the receiving endpoint exists waits for
// it.
func TestStreamLoopback(t *testing.T) {
	c := newTagContext(t, "sm,self", withStream)
	w := newWorker(t, c)
	e := &tagEnv{a: w, b: w}
	self := connect(t, w, w, nil)
	if _, err := self.StreamSendNBX([]byte("loop"), nil); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	r, _, err := self.StreamRecvNBX(buf, new(RequestParam).SetStreamRecvFlags(StreamRecvFlagWaitAll))
	if err := e.done(t, "loopback", r, err); err != nil || string(buf) != "loop" {
		t.Fatalf("loopback: %v, %q", err, buf)
	}
	nl := new(EPParams).SetFlags(EPParamsFlagNoLoopback)
	x := connect(t, w, w, nl)
	// Sent before its partner exists.
	if _, err := x.StreamSendNBX([]byte("to y"), nil); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		w.Progress()
	}
	y := connect(t, w, w, nl)
	if _, err := y.StreamSendNBX([]byte("to x"), nil); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ep   *Endpoint
		want string
	}{{y, "to y"}, {x, "to x"}} {
		b := make([]byte, 4)
		r, _, err := c.ep.StreamRecvNBX(b, new(RequestParam).SetStreamRecvFlags(StreamRecvFlagWaitAll))
		if err := e.done(t, c.want, r, err); err != nil || string(b) != c.want {
			t.Fatalf("no-loopback pair: got %q (%v), want %q", b, err, c.want)
		}
	}
	if d, _ := self.StreamRecvDataNB(); d != nil {
		t.Fatalf("the loopback endpoint got %q of the pair's data", d)
	}
}

// TestStreamFeature checks that the stream calls need FeatureStream.
func TestStreamFeature(t *testing.T) {
	e := newTagEnv(t, "sm,self", "sm,self", false)
	if _, err := e.ab.StreamSendNBX([]byte("x"), nil); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("send without FeatureStream: %v", err)
	}
	if _, _, err := e.ba.StreamRecvNBX(make([]byte, 1), nil); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("recv without FeatureStream: %v", err)
	}
	if _, err := e.ba.StreamRecvDataNB(); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("recv data without FeatureStream: %v", err)
	}
	if n := e.b.StreamWorkerPoll(make([]StreamPollEP, 1), 0); n != 0 {
		t.Errorf("poll without FeatureStream: %d", n)
	}
}

// TestStreamClose checks that closing an endpoint ends its receives with
// ucs.ErrCanceled and drops its queued data, and that data still coming
// for it is dropped.
func TestStreamClose(t *testing.T) {
	e := newStreamEnv(t, "sm,self", "sm,self", false)
	if _, err := e.ab.StreamSendNBX([]byte("queued"), nil); err != nil {
		t.Fatal(err)
	}
	e.wait(t, "queued data", func() bool { return e.ba.strm.bytes == 6 })
	d, err := e.ba.StreamRecvDataNB()
	if err != nil || string(d) != "queued" {
		t.Fatalf("recv data: %q, %v", d, err)
	}
	r, _, err := e.ba.StreamRecvNBX(make([]byte, 10), nil)
	if err != nil || r == nil {
		t.Fatal(r, err)
	}
	closed := e.ba.strm // the last stream data went to (streamWorker.last)
	if err := e.ba.Close(CloseModeForce); err != nil {
		t.Fatal(err)
	}
	if err := r.Status(); !errors.Is(err, ucs.ErrCanceled) {
		t.Fatalf("recv on a closed endpoint: %v, want ErrCanceled", err)
	}
	r.Free()
	e.ba.StreamDataRelease(d) // lent data outlives its endpoint
	if _, err := e.ab.StreamSendNBX([]byte("late"), nil); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		e.progress()
	}
	if n := len(e.b.stream.qs); n != 0 {
		t.Fatalf("%d streams kept after the endpoint closed", n)
	}
	if closed.bytes != 0 || len(closed.segs) != 0 {
		t.Fatalf("data sent after the close went to the closed stream: %d bytes", closed.bytes)
	}
}

// TestStreamPeerFailure kills a peer process in the middle of a stream:
// the receive waiting for the rest of it completes with the error, the
// data received before stays received, and nothing hangs.
func TestStreamPeerFailure(t *testing.T) {
	variants := []struct {
		name, tls string
		want      ucs.Status
	}{
		{"sm", "sm,self", ucs.ErrEndpointTimeout},
		{"tcp", "tcp,self", ucs.ErrConnectionReset},
	}
	const sent = 100 << 10
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			t.Setenv("UCX_KEEPALIVE_INTERVAL", "5ms")
			t.Setenv("GOSHMEM_KEY", testJobKey)
			t.Setenv("UCX_TLS", v.tls)
			p := startPeer(t, []string{peerStreamSendEnv + "=" + strconv.Itoa(sent)})
			c, err := Init(new(Params).SetFeatures(FeatureTag|FeatureRMA|FeatureStream), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Cleanup)
			w := newWorker(t, c)
			var rec errRecorder
			ep, err := w.NewEndpoint(new(EPParams).SetAddress(p.addr).SetErrMode(ErrHandlingModePeer).SetErrHandler(rec.handler).SetUserData("peer"))
			if err != nil {
				t.Fatal(err)
			}
			defer ep.Close(CloseModeForce)
			p.connect(t, w)
			buf := make([]byte, 2*sent)
			r, _, err := ep.StreamRecvNBX(buf, new(RequestParam).SetStreamRecvFlags(StreamRecvFlagWaitAll))
			if err != nil || r == nil {
				t.Fatalf("stream recv: %v, %v; want a request", r, err)
			}
			progressUntil(t, w, "the peer's stream data", func() bool { return r.tr.got == sent })
			if r.IsCompleted() {
				t.Fatalf("wait-all recv completed with half its buffer: %v", r.Status())
			}
			p.kill(t)
			progressUntil(t, w, "the receive after the peer was killed", r.IsCompleted)
			var n int
			if err := r.StreamRecvRequestTest(&n); !errors.Is(err, v.want) || n != sent {
				t.Errorf("recv when the peer died: %v with %d bytes, want %v with %d", err, n, v.want, sent)
			}
			r.Free()
			if _, _, err := ep.StreamRecvNBX(buf, nil); !errors.Is(err, v.want) {
				t.Errorf("recv on the failed endpoint: %v, want %v", err, v.want)
			}
			if _, err := ep.StreamSendNBX(buf[:10], nil); !errors.Is(err, v.want) {
				t.Errorf("send on the failed endpoint: %v, want %v", err, v.want)
			}
		})
	}
}

// TestStreamAllocs checks that a small stream send and its receive, posted
// before the data or after it, allocate nothing.
func TestStreamAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("-race: sync.Pool drops recycled requests at random, so allocations are not counted")
	}
	for _, tr := range tagTransports[:3] {
		t.Run(tr.name, func(t *testing.T) {
			e := newStreamEnv(t, tr.sendTLS, tr.recvTLS, tr.self)
			src, dst := make([]byte, 64), make([]byte, 64)
			wait := new(RequestParam).SetStreamRecvFlags(StreamRecvFlagWaitAll)
			send := func() {
				r, err := e.ab.StreamSendNBX(src, nil)
				if err != nil {
					t.Fatal(err)
				}
				if r != nil {
					for !r.IsCompleted() {
						e.progress()
					}
					r.Free()
				}
			}
			expected := func() {
				r, _, err := e.ba.StreamRecvNBX(dst, wait)
				if err != nil || r == nil {
					t.Fatal(r, err)
				}
				send()
				for !r.IsCompleted() {
					e.progress()
				}
				r.Free()
			}
			unexpected := func() {
				send()
				for e.ba.strm.bytes < len(src) {
					e.progress()
				}
				if r, n, err := e.ba.StreamRecvNBX(dst, wait); r != nil || n != len(dst) || err != nil {
					t.Fatalf("receive of arrived data: %v, %d, %v", r, n, err)
				}
			}
			for name, f := range map[string]func(){"expected": expected, "unexpected": unexpected} {
				f()
				if n := testing.AllocsPerRun(200, f); n > 0 {
					t.Errorf("%s small stream message: %v allocations", name, n)
				}
			}
		})
	}
}

// TestStreamSendShort checks that a small stream send goes out at once as
// one short active message, without a request (a fresh worker initializes
// none: RequestInit is not called), where its data and the 8 header bytes
// AMShort's own header does not carry fit the lane's short messages and
// streamShortMax; larger data takes a request, as before. The receiver
// gets the bytes in order either way.
func TestStreamSendShort(t *testing.T) {
	for _, tr := range tagTransports[:3] {
		for _, n := range []int{1, 8, streamShortMax, streamShortMax + 1, 4096} {
			t.Run(fmt.Sprintf("%s/%d", tr.name, n), func(t *testing.T) {
				inits := 0
				e := newTagEnv(t, tr.sendTLS, tr.recvTLS, tr.self, withStream, func(p *Params) {
					p.SetRequestInit(func(*Request) { inits++ })
				})
				short := n <= streamShortMax && 8+n <= e.ab.thresholds().short
				off := 0
				for range 3 {
					r, err := e.ab.StreamSendNBX(streamBytes(off, n), nil)
					if err := e.done(t, "stream send", r, err); err != nil {
						t.Fatalf("stream send of %d bytes: %v", n, err)
					}
					off += n
				}
				if got := inits > 0; got == short {
					t.Errorf("%d-byte sends (short messages: %v) initialized %d requests", n, short, inits)
				}
				checkStream(t, streamRecvAll(t, e, e.ba, off, off), 0)
			})
		}
	}
}
