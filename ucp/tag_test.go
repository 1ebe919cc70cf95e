package ucp

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
)

// tagTransports are the paths every tag test runs over: the sender's and
// the receiver's UCX_TLS (set whatever the environment says), whether the
// receiver is the sender's own worker, and the transport of the AM lane.
var tagTransports = []struct {
	name, sendTLS, recvTLS string
	self                   bool
	lane                   string
}{
	{"self", "all", "all", true, "self"},
	{"sm", "sm,self", "sm,self", false, "posix"},
	{"tcp", "tcp,self", "tcp,self", false, "tcp"},
	// The receiver has every transport, the sender tcp only: they talk
	// tcp, and the receiver's worker has shared memory beside it.
	{"mixed", "tcp,self", "all", false, "tcp"},
}

// tagEnv is a sender worker a with an endpoint ab to a receiver worker b
// (a itself for self), and b's endpoint back, in contexts with FeatureTag.
type tagEnv struct {
	ca, cb *Context
	a, b   *Worker
	ab, ba *Endpoint
}

func newTagContext(t testing.TB, tls string, more ...func(*Params)) *Context {
	t.Helper()
	p := new(Params).SetFeatures(FeatureTag | FeatureRMA)
	for _, f := range more {
		f(p)
	}
	return newContextParams(t, p, "TLS", tls)
}

func newTagEnv(t testing.TB, sendTLS, recvTLS string, self bool, more ...func(*Params)) *tagEnv {
	t.Helper()
	e := &tagEnv{ca: newTagContext(t, sendTLS, more...)}
	e.a = newWorker(t, e.ca)
	e.cb, e.b = e.ca, e.a
	if !self {
		e.cb = newTagContext(t, recvTLS, more...)
		e.b = newWorker(t, e.cb)
	}
	e.ab = connect(t, e.a, e.b, nil)
	e.ba = e.ab
	if !self {
		e.ba = connect(t, e.b, e.a, nil)
	}
	return e
}

// connect returns an endpoint from a to b, created with params (address
// set here), closed at the end of the test.
func connect(t testing.TB, a, b *Worker, params *EPParams) *Endpoint {
	t.Helper()
	if params == nil {
		params = new(EPParams)
	}
	addr, _ := b.Address()
	ep, err := a.NewEndpoint(params.SetAddress(addr))
	if err != nil {
		t.Fatalf("NewEndpoint: %v", err)
	}
	t.Cleanup(func() { ep.Close(CloseModeForce) })
	return ep
}

func (e *tagEnv) progress() {
	e.a.Progress()
	if e.b != e.a {
		e.b.Progress()
	}
}

// wait progresses both workers until cond holds; it fails the test if that
// takes unreasonably long (a hang, not a speed check).
func (e *tagEnv) wait(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		e.progress()
		if time.Now().After(deadline) {
			t.Fatalf("%s: still waiting after 60 s", what)
		}
	}
}

// done waits for r (if any) and returns its status; r is freed.
func (e *tagEnv) done(t testing.TB, what string, r *Request, err error) error {
	t.Helper()
	if err != nil || r == nil {
		return err
	}
	e.wait(t, what, r.IsCompleted)
	err = r.Status()
	r.Free()
	return err
}

// recvInfo records what a receive callback got.
type recvInfo struct {
	mu     sync.Mutex
	calls  int
	status error
	info   TagRecvInfo
	proto  string // the receive's protocol
}

func (ri *recvInfo) param() *RequestParam {
	return new(RequestParam).SetTagRecvCallback(func(r *Request, st error, info *TagRecvInfo, _ any) {
		ri.mu.Lock()
		ri.calls++
		ri.status, ri.info, ri.proto = st, *info, r.proto
		ri.mu.Unlock()
	})
}

// tagSizes covers every protocol: short, bcopy, zero-copy, fragments,
// rendezvous.
var tagSizes = []int{0, 1, 8, 200, 1000, 8 << 10, 20 << 10, 64 << 10, 100 << 10, 300 << 10, 1 << 20}

// TestTagSendRecv sends messages of every size, expected (the receive
// posted first) and unexpected (sent first), and checks data, sender tag,
// length, and that each protocol says its name.
func TestTagSendRecv(t *testing.T) {
	for _, tr := range tagTransports {
		t.Run(tr.name, func(t *testing.T) {
			e := newTagEnv(t, tr.sendTLS, tr.recvTLS, tr.self)
			if l := e.ab.Query().Lanes; len(l) == 0 || l[0].Transport != tr.lane {
				t.Fatalf("lanes %+v, want an AM lane on %s", l, tr.lane)
			}
			protos := map[string]bool{}
			for _, n := range tagSizes {
				for _, expected := range []bool{true, false} {
					tag := uint64(n)<<1 | 1
					src := pattern(n, n)
					dst := make([]byte, n+3)
					ri := &recvInfo{}
					var rr *Request
					var err error
					post := func() {
						rr, err = e.b.TagRecvNBX(dst, tag, tagMaskFull, ri.param())
						if err != nil {
							t.Fatalf("recv %d: %v", n, err)
						}
					}
					if expected {
						post()
					}
					sp := new(RequestParam).SetOpAttrFlags(OpAttrFlagNoImmCmpl)
					sr, err := e.ab.TagSendNBX(src, tag, sp)
					if err != nil {
						t.Fatalf("send %d: %v", n, err)
					}
					protos[sr.Query().DebugString[:strings.Index(sr.Query().DebugString, " on ")]] = true
					if !expected {
						// Let the message arrive unexpected.
						for range 100 {
							e.progress()
						}
						post()
					}
					if rr != nil {
						if err := e.done(t, "recv", rr, nil); err != nil {
							t.Fatalf("recv %d (expected %v): %v", n, expected, err)
						}
					}
					if err := e.done(t, "send", sr, nil); err != nil {
						t.Fatalf("send %d: %v", n, err)
					}
					if !bytes.Equal(dst[:n], src) {
						t.Fatalf("%d bytes (expected %v): data differs", n, expected)
					}
					if rr != nil && (ri.calls != 1 || ri.info != (TagRecvInfo{SenderTag: tag, Length: n})) {
						t.Fatalf("%d bytes: callback %d times, info %+v", n, ri.calls, ri.info)
					}
				}
			}
			t.Logf("send protocols: %v", protos)
			for _, want := range []string{protoTagRndv} {
				if !protos[want] {
					t.Errorf("no send took %s: %v", want, protos)
				}
			}
		})
	}
}

// Message sizes of the tests, one per protocol over the transports: short,
// bcopy, one zero-copy message (tcp), fragments, rendezvous.
var protoSizes = []int{0, 8, 200, 5000, 20 << 10, 200 << 10, 1 << 20}

// sendAll sends a message of each size in sizes to ep with tags base+i and
// returns the requests.
func sendAll(t testing.TB, ep *Endpoint, sizes []int, base uint64, sync bool) []*Request {
	t.Helper()
	var reqs []*Request
	for i, n := range sizes {
		var r *Request
		var err error
		if sync {
			r, err = ep.TagSendSyncNBX(pattern(n, i), base+uint64(i), nil)
		} else {
			r, err = ep.TagSendNBX(pattern(n, i), base+uint64(i), nil)
		}
		if err != nil {
			t.Fatalf("send of %d bytes: %v", n, err)
		}
		if r != nil {
			reqs = append(reqs, r)
		}
	}
	return reqs
}

// TestTagOrderWildcards checks MPI's non-overtaking rule: one sender's
// messages are taken by receives in the order the receives were posted,
// whatever mix of exact, sender-specific and wildcard receives takes them,
// whether the receives were posted before the messages came (the expected
// queues) or after (the unexpected queue); messages of every protocol mix.
func TestTagOrderWildcards(t *testing.T) {
	const senderMask = 0xff00000000000000
	type recv struct {
		tag, mask uint64
	}
	const me = 0x0500000000000000 // the sender's bits
	// The messages' tags, in send order, and the receives, in post order.
	tags := []uint64{me | 1, me | 2, me | 1, me | 3, me | 2, me | 1, me | 4, me | 1}
	recvs := []recv{
		{me | 1, tagMaskFull}, // exact
		{0, 0},                // anything
		{me | 1, tagMaskFull}, // exact
		{me, senderMask},      // any tag from this sender
		{me | 2, tagMaskFull}, // exact
		{0, 0},                // anything
		{me | 1, tagMaskFull}, // exact
		{me, senderMask},      // any tag from this sender
	}
	// model assigns each message, in order, the first posted receive that
	// is still free and takes it.
	model := func() []int {
		used := make([]bool, len(recvs))
		got := make([]int, len(tags))
		for i, tag := range tags {
			got[i] = -1
			for k, r := range recvs {
				if !used[k] && tagMatches(tag, r.tag, r.mask) {
					used[k], got[i] = true, k
					break
				}
			}
		}
		return got
	}()
	for _, tr := range tagTransports {
		for _, expected := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/expected=%v", tr.name, expected), func(t *testing.T) {
				e := &tagEnv{ca: newTagContext(t, tr.sendTLS, func(p *Params) { p.SetTagSenderMask(senderMask) })}
				e.a = newWorker(t, e.ca)
				e.cb, e.b = e.ca, e.a
				if !tr.self {
					e.cb = newTagContext(t, tr.recvTLS, func(p *Params) { p.SetTagSenderMask(senderMask) })
					e.b = newWorker(t, e.cb)
				}
				e.ab = connect(t, e.a, e.b, nil)
				sizes := make([]int, len(tags))
				for i := range sizes {
					sizes[i] = protoSizes[i%len(protoSizes)]
				}
				bufs := make([][]byte, len(recvs))
				reqs := make([]*Request, len(recvs))
				post := func() {
					for k, r := range recvs {
						bufs[k] = make([]byte, 1<<20)
						var err error
						p := new(RequestParam).SetOpAttrFlags(OpAttrFlagNoImmCmpl)
						if reqs[k], err = e.b.TagRecvNBX(bufs[k], r.tag, r.mask, p); err != nil {
							t.Fatal(err)
						}
					}
				}
				if expected {
					post()
				}
				var sreqs []*Request
				for i, tag := range tags {
					r, err := e.ab.TagSendNBX(pattern(sizes[i], i), tag, nil)
					if err != nil {
						t.Fatal(err)
					}
					if r != nil {
						sreqs = append(sreqs, r)
					}
				}
				if !expected {
					for range 200 {
						e.progress()
					}
					post()
				}
				for _, r := range sreqs {
					if err := e.done(t, "send", r, nil); err != nil {
						t.Fatal(err)
					}
				}
				for i, k := range model {
					r := reqs[k]
					e.wait(t, "receive", r.IsCompleted)
					var info TagRecvInfo
					if err := r.TagRecvRequestTest(&info); err != nil {
						t.Fatalf("receive %d: %v", k, err)
					}
					if info.SenderTag != tags[i] || info.Length != sizes[i] || !bytes.Equal(bufs[k][:sizes[i]], pattern(sizes[i], i)) {
						t.Errorf("receive %d took tag %#x of %d bytes, want message %d (tag %#x, %d bytes)", k, info.SenderTag, info.Length, i, tags[i], sizes[i])
					}
				}
			})
		}
	}
}

// TestTagProbe probes for messages of each protocol, with and without
// removing them, and receives them by their handle.
func TestTagProbe(t *testing.T) {
	for _, tr := range tagTransports {
		t.Run(tr.name, func(t *testing.T) {
			e := newTagEnv(t, tr.sendTLS, tr.recvTLS, tr.self)
			if m := e.b.TagProbeNB(0, 0, true, nil); m != nil {
				t.Fatal("probe found a message before any was sent")
			}
			sreqs := sendAll(t, e.ab, protoSizes, 100, false)
			for i, n := range protoSizes {
				tag := uint64(100 + i)
				var info TagRecvInfo
				var m *TagMessage
				e.wait(t, "the message", func() bool { m = e.b.TagProbeNB(tag, tagMaskFull, false, &info); return m != nil })
				if info != (TagRecvInfo{SenderTag: tag, Length: n}) {
					t.Fatalf("probe of %d bytes: info %+v", n, info)
				}
				// Still there: a second probe, removing it, finds it.
				info = TagRecvInfo{}
				if m2 := e.b.TagProbeNB(tag, ^uint64(0xff), true, &info); m2 != m || info.Length != n {
					t.Fatalf("second probe: %p (first %p), %+v", m2, m, info)
				}
				if m3 := e.b.TagProbeNB(tag, tagMaskFull, true, nil); m3 != nil {
					t.Fatal("a removed message was found again")
				}
				buf := make([]byte, n)
				ri := &recvInfo{}
				r, err := e.b.TagMsgRecvNBX(buf, m, ri.param())
				if err := e.done(t, "msg recv", r, err); err != nil {
					t.Fatalf("msg recv of %d bytes: %v", n, err)
				}
				if !bytes.Equal(buf, pattern(n, i)) {
					t.Fatalf("msg recv of %d bytes: data differs", n)
				}
				if _, err := e.b.TagMsgRecvNBX(buf, m, nil); !errors.Is(err, ucs.ErrInvalidParam) {
					t.Fatalf("second msg recv of one handle: %v, want ucs.ErrInvalidParam", err)
				}
			}
			for _, r := range sreqs {
				if err := e.done(t, "send", r, nil); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestTagTruncation receives messages of each protocol into a buffer one
// byte too short: the receive completes with ucs.ErrMessageTruncated, its
// info saying how much it received (rcvd_len: the bytes that fit of an
// eager message, in the buffer; nothing of a rendezvous one), the send
// completes normally, and the next message is received whole.
func TestTagTruncation(t *testing.T) {
	for _, tr := range tagTransports {
		t.Run(tr.name, func(t *testing.T) {
			e := newTagEnv(t, tr.sendTLS, tr.recvTLS, tr.self)
			for _, n := range protoSizes[1:] {
				for _, expected := range []bool{true, false} {
					buf := make([]byte, n-1)
					ri := &recvInfo{}
					var rr *Request
					var rerr error
					post := func() {
						p := ri.param().SetOpAttrFlags(OpAttrFlagNoImmCmpl)
						rr, rerr = e.b.TagRecvNBX(buf, 9, tagMaskFull, p)
					}
					if expected {
						post()
					}
					sr, err := e.ab.TagSendNBX(pattern(n, 1), 9, nil)
					if err != nil {
						t.Fatal(err)
					}
					if !expected {
						for range 100 {
							e.progress()
						}
						post()
					}
					if err := e.done(t, "recv", rr, rerr); !errors.Is(err, ucs.ErrMessageTruncated) {
						t.Fatalf("%d bytes into %d (expected %v): %v, want ucs.ErrMessageTruncated", n, n-1, expected, err)
					}
					rcvd := n - 1
					if sr != nil && strings.Contains(sr.proto, "rndv") {
						rcvd = 0
					}
					if ri.calls != 1 || !errors.Is(ri.status, ucs.ErrMessageTruncated) || ri.info.Length != rcvd {
						t.Fatalf("%d bytes into %d (%s): callback %d times with %v, %+v, want length %d", n, n-1, ri.proto, ri.calls, ri.status, ri.info, rcvd)
					}
					if !bytes.Equal(buf[:rcvd], pattern(n, 1)[:rcvd]) {
						t.Fatalf("%d bytes into %d (%s): the %d bytes received differ", n, n-1, ri.proto, rcvd)
					}
					if err := e.done(t, "send", sr, nil); err != nil {
						t.Fatalf("send of a truncated message: %v", err)
					}
					// The next message goes whole.
					full := make([]byte, n)
					r, err := e.b.TagRecvNBX(full, 10, tagMaskFull, nil)
					if err != nil {
						t.Fatal(err)
					}
					if s, err := e.ab.TagSendNBX(pattern(n, 2), 10, nil); e.done(t, "send", s, err) != nil {
						t.Fatal(err)
					}
					if err := e.done(t, "recv", r, nil); err != nil || !bytes.Equal(full, pattern(n, 2)) {
						t.Fatalf("message after a truncated one: %v", err)
					}
				}
			}
		})
	}
}

// TestTagSyncSend sends sync messages of each protocol to a receiver that
// posts its receive late: no send completes before its receive is posted,
// and all complete after.
func TestTagSyncSend(t *testing.T) {
	for _, tr := range tagTransports {
		t.Run(tr.name, func(t *testing.T) {
			e := newTagEnv(t, tr.sendTLS, tr.recvTLS, tr.self)
			for i, n := range protoSizes {
				sr, err := e.ab.TagSendSyncNBX(pattern(n, i), uint64(i), nil)
				if err != nil || sr == nil {
					t.Fatalf("sync send of %d bytes: %v, %v; want a request", n, sr, err)
				}
				for range 300 {
					e.progress()
				}
				if sr.IsCompleted() {
					t.Fatalf("sync send of %d bytes (%s) completed before a receive took it", n, sr.Query().DebugString)
				}
				buf := make([]byte, n)
				r, err := e.b.TagRecvNBX(buf, uint64(i), tagMaskFull, nil)
				if err := e.done(t, "recv", r, err); err != nil {
					t.Fatalf("receive of a sync message of %d bytes: %v", n, err)
				}
				if err := e.done(t, "sync send", sr, nil); err != nil {
					t.Fatalf("sync send of %d bytes: %v", n, err)
				}
				if !bytes.Equal(buf, pattern(n, i)) {
					t.Fatalf("sync send of %d bytes: data differs", n)
				}
			}
			// With the receive posted first.
			buf := make([]byte, 100)
			r, err := e.b.TagRecvNBX(buf, 77, tagMaskFull, nil)
			if err != nil {
				t.Fatal(err)
			}
			sr, err := e.ab.TagSendSyncNBX(pattern(100, 7), 77, nil)
			if err := e.done(t, "sync send", sr, err); err != nil {
				t.Fatal(err)
			}
			if err := e.done(t, "recv", r, nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestTagCancel cancels a posted receive: its callback runs once with
// ucs.ErrCanceled, and the message sent later goes to the next receive. A
// completed receive is not canceled; a send still waiting for transport
// resources is.
func TestTagCancel(t *testing.T) {
	for _, tr := range tagTransports {
		t.Run(tr.name, func(t *testing.T) {
			e := newTagEnv(t, tr.sendTLS, tr.recvTLS, tr.self)
			ri := &recvInfo{}
			r1, err := e.b.TagRecvNBX(make([]byte, 8), 5, tagMaskFull, ri.param())
			if err != nil {
				t.Fatal(err)
			}
			r1.Cancel()
			if !r1.IsCompleted() || !errors.Is(r1.Status(), ucs.ErrCanceled) || ri.calls != 1 || !errors.Is(ri.status, ucs.ErrCanceled) {
				t.Fatalf("canceled receive: completed %v, status %v, callback %d times with %v", r1.IsCompleted(), r1.Status(), ri.calls, ri.status)
			}
			r1.Cancel() // a second cancel does nothing
			if ri.calls != 1 {
				t.Fatalf("second cancel called the callback again")
			}
			r1.Free()
			buf := make([]byte, 8)
			r2, err := e.b.TagRecvNBX(buf, 5, tagMaskFull, nil)
			if err != nil {
				t.Fatal(err)
			}
			s, err := e.ab.TagSendNBX([]byte("canceled"), 5, nil)
			if err := e.done(t, "send", s, err); err != nil {
				t.Fatal(err)
			}
			e.wait(t, "recv", r2.IsCompleted)
			r2.Cancel() // completed: nothing happens
			if err := r2.Status(); err != nil || string(buf) != "canceled" {
				t.Fatalf("receive after a canceled one: %v %q", err, buf)
			}
			r2.Free()

			// A send that waits for resources: fill the lane first.
			if tr.self {
				return // the self transport never runs out
			}
			var queued *Request
			var sent []*Request
			for i := 0; i < 1<<16 && queued == nil; i++ {
				r, err := e.ab.TagSendNBX(make([]byte, 4000), 6, new(RequestParam).SetOpAttrFlags(OpAttrFlagNoImmCmpl))
				if err != nil {
					t.Fatal(err)
				}
				if r.top != nil && !r.IsCompleted() && e.ab.queued.Load() > 0 {
					queued = r
					break
				}
				sent = append(sent, r)
			}
			if queued == nil {
				t.Skip("the lane never ran out of resources")
			}
			queued.Cancel()
			if !errors.Is(queued.Status(), ucs.ErrCanceled) {
				t.Fatalf("canceled queued send: %v", queued.Status())
			}
			queued.Free()
			for _, r := range sent {
				if err := e.done(t, "send", r, nil); err != nil {
					t.Fatal(err)
				}
			}
			// Exactly the sends that were not canceled arrive.
			got := 0
			e.wait(t, "the sends that were not canceled", func() bool {
				if m := e.b.TagProbeNB(6, tagMaskFull, true, nil); m != nil {
					if r, err := e.b.TagMsgRecvNBX(make([]byte, 4000), m, nil); e.done(t, "recv", r, err) != nil {
						t.Fatal(err)
					}
					got++
				}
				return got == len(sent)
			})
			for range 100 {
				e.progress()
			}
			if m := e.b.TagProbeNB(6, tagMaskFull, true, nil); m != nil || got != len(sent) {
				t.Fatalf("received %d messages (and one more: %v), want %d", got, m != nil, len(sent))
			}
		})
	}
}

// strided2 is a generic datatype over a []byte whose elements are every
// other byte: it counts the states it started and finished.
type strided2 struct{ started, finished int }

type strided2State struct {
	buf   []byte
	count int
}

func (s *strided2) ops() *GenericDatatypeOps {
	start := func(_ any, buffer any, count int) any {
		s.started++
		return &strided2State{buf: buffer.([]byte), count: count}
	}
	return &GenericDatatypeOps{
		StartPack:   start,
		StartUnpack: start,
		PackedSize:  func(st any) int { return st.(*strided2State).count },
		Pack: func(st any, off int, dst []byte) int {
			b := st.(*strided2State)
			n := 0
			for ; n < len(dst) && off+n < b.count; n++ {
				dst[n] = b.buf[2*(off+n)]
			}
			return n
		},
		Unpack: func(st any, off int, src []byte) error {
			b := st.(*strided2State)
			if off+len(src) > b.count {
				return ucs.ErrMessageTruncated
			}
			for i, v := range src {
				b.buf[2*(off+i)] = v
			}
			return nil
		},
		Finish: func(any) { s.finished++ },
	}
}

// TestTagDatatypes sends and receives messages of each protocol with every
// pair of datatypes: contiguous, iov and generic.
func TestTagDatatypes(t *testing.T) {
	var gen strided2
	dt, err := DatatypeCreateGeneric(gen.ops(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer DatatypeDestroy(dt)
	// split cuts b into an iov of uneven pieces, an empty one among them.
	split := func(b []byte) [][]byte {
		var iov [][]byte
		for len(b) > 0 {
			k := min(len(b), len(iov)*777+13)
			iov = append(iov, b[:k], nil)
			b = b[k:]
		}
		return iov
	}
	kinds := []string{"contig", "iov", "generic"}
	for _, tr := range tagTransports {
		t.Run(tr.name, func(t *testing.T) {
			e := newTagEnv(t, tr.sendTLS, tr.recvTLS, tr.self)
			for _, n := range protoSizes {
				for _, sk := range kinds {
					for _, rk := range kinds {
						want := pattern(n, n+len(sk)+len(rk))
						sp := new(RequestParam)
						var sbuf []byte
						switch sk {
						case "contig":
							sbuf = want
						case "iov":
							sp.SetIOV(split(bytes.Clone(want)))
						case "generic":
							sbuf = make([]byte, 2*n)
							for i, v := range want {
								sbuf[2*i] = v
							}
							sp.SetGenericBuffer(sbuf, n).SetDatatype(dt)
							sbuf = nil
						}
						got := make([]byte, n)
						var rbuf []byte
						rp := new(RequestParam)
						switch rk {
						case "contig":
							rbuf = got
						case "iov":
							rp.SetIOV(split(got))
						case "generic":
							rbuf = make([]byte, 2*n)
							rp.SetGenericBuffer(rbuf, n).SetDatatype(dt)
						}
						rr, err := e.b.TagRecvNBX(rbuf, 3, tagMaskFull, rp)
						if err != nil {
							t.Fatalf("%s recv of %d bytes: %v", rk, n, err)
						}
						sr, err := e.ab.TagSendNBX(sbuf, 3, sp)
						if err != nil {
							t.Fatalf("%s send of %d bytes: %v", sk, n, err)
						}
						proto := ""
						if sr != nil {
							proto = sr.Query().DebugString
						}
						if err := e.done(t, "send", sr, nil); err != nil {
							t.Fatalf("%s send of %d bytes: %v", sk, n, err)
						}
						if err := e.done(t, "recv", rr, nil); err != nil {
							t.Fatalf("%s to %s, %d bytes (%s): %v", sk, rk, n, proto, err)
						}
						if rk == "generic" {
							for i := range got {
								got[i] = rbuf[2*i]
							}
						}
						if !bytes.Equal(got, want) {
							t.Fatalf("%s to %s, %d bytes (%s): data differs", sk, rk, n, proto)
						}
					}
				}
			}
			if gen.started != gen.finished {
				t.Errorf("generic datatype: %d states started, %d finished", gen.started, gen.finished)
			}
		})
	}
}

// TestTagGenericNoWholeCopy sends 16 MiB of a generic datatype, whose Pack
// and Unpack check that no call covers more than what one transport
// message carries: the data goes in pieces.
func TestTagGenericNoWholeCopy(t *testing.T) {
	const n = 16 << 20
	var largest int
	var gen strided2
	ops := gen.ops()
	pack, unpack := ops.Pack, ops.Unpack
	ops.Pack = func(st any, off int, dst []byte) int { largest = max(largest, len(dst)); return pack(st, off, dst) }
	ops.Unpack = func(st any, off int, src []byte) error { largest = max(largest, len(src)); return unpack(st, off, src) }
	dt, err := DatatypeCreateGeneric(ops, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer DatatypeDestroy(dt)
	for _, tr := range tagTransports[1:3] {
		t.Run(tr.name, func(t *testing.T) {
			largest = 0
			e := newTagEnv(t, tr.sendTLS, tr.recvTLS, tr.self)
			src := make([]byte, 2*n)
			for i := 0; i < n; i += 4099 {
				src[2*i] = byte(i)
			}
			dst := make([]byte, 2*n)
			rr, err := e.b.TagRecvNBX(nil, 1, tagMaskFull, new(RequestParam).SetDatatype(dt).SetGenericBuffer(dst, n))
			if err != nil {
				t.Fatal(err)
			}
			sr, err := e.ab.TagSendNBX(nil, 1, new(RequestParam).SetDatatype(dt).SetGenericBuffer(src, n))
			if err := e.done(t, "send", sr, err); err != nil {
				t.Fatal(err)
			}
			if err := e.done(t, "recv", rr, nil); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(src, dst) {
				t.Fatal("data differs")
			}
			if largest > 64<<10 {
				t.Errorf("a pack or unpack call covered %d bytes", largest)
			}
		})
	}
}

// TestTagRndvLarge sends 64 MiB by rendezvous over each transport (4 MiB
// with the schemes other than auto), from memory the sender mapped (whose
// key the receiver may use) and from the Go heap (registered for the
// send).
func TestTagRndvLarge(t *testing.T) {
	for _, sch := range []string{"auto", "get_zcopy", "put_zcopy", "am"} {
		n := 4 << 20
		if sch == "auto" {
			n = 64 << 20
		}
		for _, tr := range tagTransports {
			t.Run(sch+"/"+tr.name, func(t *testing.T) {
				t.Setenv("UCX_RNDV_SCHEME", sch)
				e := newTagEnv(t, tr.sendTLS, tr.recvTLS, tr.self)
				m, err := e.ca.MemMap(new(MemMapParams).SetLength(n).SetFlags(MemMapAllocate))
				if err != nil {
					t.Fatal(err)
				}
				defer e.ca.MemUnmap(m)
				mapped := unsafe.Slice((*byte)(m.Address()), n)
				for i := 0; i < n; i += 4093 {
					mapped[i] = byte(i)
				}
				heap := bytes.Clone(mapped)
				for _, src := range [][]byte{mapped, heap} {
					dst := make([]byte, n)
					rr, err := e.b.TagRecvNBX(dst, 2, tagMaskFull, nil)
					if err != nil {
						t.Fatal(err)
					}
					sr, err := e.ab.TagSendNBX(src, 2, nil)
					if err != nil || sr == nil {
						t.Fatalf("send: %v, %v", sr, err)
					}
					if err := e.done(t, "send", sr, nil); err != nil {
						t.Fatal(err)
					}
					e.wait(t, "recv", rr.IsCompleted)
					t.Logf("receive: %s", rr.Query().DebugString)
					if err := e.done(t, "recv", rr, nil); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(dst, src) {
						t.Fatal("data differs")
					}
				}
			})
		}
	}
}

// TestTagManySenders has eight workers send messages of every protocol to
// one receiver at once, on goroutines of their own: the receiver takes
// them with wildcard receives, and each sender's messages arrive whole
// and in order.
func TestTagManySenders(t *testing.T) {
	const senders, perSender = 8, 24
	for _, tr := range tagTransports[1:] {
		t.Run(tr.name, func(t *testing.T) {
			cb := newTagContext(t, tr.recvTLS)
			b := newWorker(t, cb)
			var wg sync.WaitGroup
			stop := make(chan struct{})
			errs := make(chan error, senders)
			for s := range senders {
				ca := newTagContext(t, tr.sendTLS)
				a := newWorker(t, ca)
				ep := connect(t, a, b, nil)
				wg.Add(1)
				go func() {
					defer wg.Done()
					var reqs []*Request
					for i := range perSender {
						n := protoSizes[i%len(protoSizes)]
						r, err := ep.TagSendNBX(pattern(n, s*1000+i), uint64(s)<<32|uint64(i), nil)
						if err != nil {
							errs <- err
							return
						}
						if r != nil {
							reqs = append(reqs, r)
						}
					}
					for _, r := range reqs {
						for !r.IsCompleted() {
							if a.Progress() == 0 {
								a.Idle()
							}
						}
						if err := r.Status(); err != nil {
							errs <- err
							return
						}
						r.Free()
					}
					// Serve the receiver's rendezvous replies until the end.
					for {
						select {
						case <-stop:
							return
						default:
							if a.Progress() == 0 {
								a.Idle()
							}
						}
					}
				}()
			}
			next := make([]int, senders)
			buf := make([]byte, 1<<20)
			deadline := time.Now().Add(hangLimit)
			for k := 0; k < senders*perSender; k++ {
				r, err := b.TagRecvNBX(buf, 0, 0, new(RequestParam).SetOpAttrFlags(OpAttrFlagNoImmCmpl))
				if err != nil {
					t.Fatal(err)
				}
				for !r.IsCompleted() {
					if time.Now().After(deadline) {
						t.Fatalf("%d messages received, waiting for more", k)
					}
					select {
					case err := <-errs:
						t.Fatal(err)
					default:
					}
					if b.Progress() == 0 {
						b.Idle()
					}
				}
				var info TagRecvInfo
				if err := r.TagRecvRequestTest(&info); err != nil {
					t.Fatal(err)
				}
				r.Free()
				s, i := int(info.SenderTag>>32), int(uint32(info.SenderTag))
				if s >= senders || i != next[s] {
					t.Fatalf("message %d of sender %d arrived, want %d", i, s, next[s])
				}
				next[s]++
				n := protoSizes[i%len(protoSizes)]
				if info.Length != n || !bytes.Equal(buf[:n], pattern(n, s*1000+i)) {
					t.Fatalf("message %d of sender %d: %d bytes, data differs", i, s, info.Length)
				}
			}
			close(stop)
			wg.Wait()
		})
	}
}

// TestTagFeature checks that tag calls need FeatureTag, as in UCX.
func TestTagFeature(t *testing.T) {
	c := newContextTLS(t, "sm,self")
	w := newWorker(t, c)
	ep := connect(t, w, w, nil)
	if _, err := ep.TagSendNBX([]byte("x"), 1, nil); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("send without FeatureTag: %v", err)
	}
	if _, err := w.TagRecvNBX(make([]byte, 1), 1, tagMaskFull, nil); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("recv without FeatureTag: %v", err)
	}
	if m := w.TagProbeNB(0, 0, true, nil); m != nil {
		t.Errorf("probe without FeatureTag found a message")
	}
}

// TestTagImmediateCompletion checks OpAttrFlagNoImmCmpl and
// OpAttrFlagForceImmCmpl on sends and receives, and RequestParam.RecvInfo.
func TestTagImmediateCompletion(t *testing.T) {
	e := newTagEnv(t, "sm,self", "sm,self", false)
	// A receive of a message that arrived completes at once: no request,
	// the info filled in.
	if r, err := e.ab.TagSendNBX([]byte("hello"), 4, nil); r != nil || err != nil {
		t.Fatalf("small send: %v, %v; want immediate completion", r, err)
	}
	e.wait(t, "the message", func() bool { return e.b.TagProbeNB(4, tagMaskFull, false, nil) != nil })
	var info TagRecvInfo
	buf := make([]byte, 5)
	if r, err := e.b.TagRecvNBX(buf, 4, tagMaskFull, new(RequestParam).SetRecvInfo(&info)); r != nil || err != nil {
		t.Fatalf("receive of an arrived message: %v, %v; want immediate completion", r, err)
	}
	if info != (TagRecvInfo{SenderTag: 4, Length: 5}) || string(buf) != "hello" {
		t.Fatalf("info %+v, data %q", info, buf)
	}
	// With NoImmCmpl: a completed request, its callback run before return.
	ri := &recvInfo{}
	if _, err := e.ab.TagSendNBX([]byte("again"), 4, nil); err != nil {
		t.Fatal(err)
	}
	e.wait(t, "the message", func() bool { return e.b.TagProbeNB(4, tagMaskFull, false, nil) != nil })
	r, err := e.b.TagRecvNBX(buf, 4, tagMaskFull, ri.param().SetOpAttrFlags(OpAttrFlagNoImmCmpl))
	if err != nil || r == nil || !r.IsCompleted() || ri.calls != 1 || ri.info.Length != 5 {
		t.Fatalf("NoImmCmpl receive: %v, %v, callback %d", r, err, ri.calls)
	}
	r.Free()
	sent := 0
	s, err := e.ab.TagSendNBX([]byte("x"), 4, new(RequestParam).SetCallback(func(*Request, error, any) { sent++ }).SetOpAttrFlags(OpAttrFlagNoImmCmpl))
	if err != nil || s == nil || !s.IsCompleted() || sent != 1 {
		t.Fatalf("NoImmCmpl send: %v, %v, callback %d", s, err, sent)
	}
	s.Free()
	// ForceImmCmpl: a receive with nothing to take, a sync or rendezvous
	// send fail with ucs.ErrNoResource and leave nothing behind.
	force := new(RequestParam).SetOpAttrFlags(OpAttrFlagForceImmCmpl)
	if _, err := e.b.TagRecvNBX(buf, 99, tagMaskFull, force); !errors.Is(err, ucs.ErrNoResource) {
		t.Errorf("ForceImmCmpl receive with nothing to take: %v", err)
	}
	if _, err := e.ab.TagSendSyncNBX(buf, 99, force); !errors.Is(err, ucs.ErrNoResource) {
		t.Errorf("ForceImmCmpl sync send: %v", err)
	}
	if _, err := e.ab.TagSendNBX(make([]byte, 1<<20), 99, force); !errors.Is(err, ucs.ErrNoResource) {
		t.Errorf("ForceImmCmpl rendezvous send: %v", err)
	}
	if r, err := e.ab.TagSendNBX(buf, 99, force); r != nil || err != nil {
		t.Errorf("ForceImmCmpl small send: %v, %v", r, err)
	}
	// The small one arrived, the others left nothing.
	e.wait(t, "the message", func() bool { return e.b.TagProbeNB(4, tagMaskFull, false, nil) != nil })
	for range 100 {
		e.progress()
	}
	var n int
	for e.b.TagProbeNB(99, tagMaskFull, true, &info) != nil {
		n++
	}
	if n != 1 || info.Length != 5 {
		t.Errorf("%d messages arrived (last %+v), want the one small send", n, info)
	}
}

// TestTagOldAPI exercises the older calls: TagSendNB, TagRecvNB,
// TagRecvNBR with TagRecvTest, TagMsgRecvNB, with datatypes.
func TestTagOldAPI(t *testing.T) {
	e := newTagEnv(t, "sm,self", "sm,self", false)
	var got TagRecvInfo
	calls := 0
	buf := make([]uint64, 4)
	bb := unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), 32)
	r, err := e.b.TagRecvNB(bb, 4, DatatypeContig(8), 11, tagMaskFull, func(r *Request, st error, info *TagRecvInfo, _ any) {
		calls++
		got = *info
	})
	if err != nil || r == nil {
		t.Fatalf("TagRecvNB: %v, %v", r, err)
	}
	src := []uint64{1, 2, 3, 4}
	sb := unsafe.Slice((*byte)(unsafe.Pointer(&src[0])), 32)
	s, err := e.ab.TagSendNB(sb, 4, DatatypeContig(8), 11, nil)
	if err := e.done(t, "send", s, err); err != nil {
		t.Fatal(err)
	}
	if err := e.done(t, "recv", r, nil); err != nil || calls != 1 || got.Length != 32 || buf[3] != 4 {
		t.Fatalf("TagRecvNB: %v, %d calls, %+v, %v", err, calls, got, buf)
	}
	// An iov send into a request of the caller's memory.
	var req Request
	iov := [][]byte{make([]byte, 3), make([]byte, 5)}
	if err := e.b.TagRecvNBR(iov, 2, DatatypeIOV, 12, tagMaskFull, &req); err != nil {
		t.Fatal(err)
	}
	s, err = e.ab.TagSendNB([][]byte{[]byte("abcd"), []byte("efgh")}, 2, DatatypeIOV, 12, nil)
	if err := e.done(t, "send", s, err); err != nil {
		t.Fatal(err)
	}
	var info TagRecvInfo
	e.wait(t, "recv", func() bool { return req.TagRecvRequestTest(&info) != ucs.InProgress })
	if err := req.TagRecvRequestTest(&info); err != nil || info.Length != 8 || string(iov[0])+string(iov[1]) != "abcdefgh" {
		t.Fatalf("TagRecvNBR: %v, %+v, %q", err, info, iov)
	}
	req.Release()
	// Probe and the older message receive.
	if s, err := e.ab.TagSendNB([]byte("probe"), 5, DatatypeContig(1), 13, nil); e.done(t, "send", s, err) != nil {
		t.Fatal(err)
	}
	var m *TagMessage
	e.wait(t, "the message", func() bool { m = e.b.TagProbeNB(13, tagMaskFull, true, nil); return m != nil })
	mb := make([]byte, 5)
	r, err = e.b.TagMsgRecvNB(mb, 5, DatatypeContig(1), m, nil)
	if err := e.done(t, "msg recv", r, err); err != nil || string(mb) != "probe" {
		t.Fatalf("TagMsgRecvNB: %v %q", err, mb)
	}
	// Bad buffers for their datatype.
	if _, err := e.ab.TagSendNB("not bytes", 1, DatatypeContig(1), 1, nil); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("TagSendNB of a string: %v", err)
	}
	if _, err := e.ab.TagSendNB(sb, 5, DatatypeContig(8), 1, nil); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("TagSendNB of 5 elements of 8 bytes from 32: %v", err)
	}
}

// TestTagAllocs checks that the common paths allocate nothing: a small
// send, and its receive, expected or unexpected.
func TestTagAllocs(t *testing.T) {
	for _, tr := range tagTransports[:3] {
		t.Run(tr.name, func(t *testing.T) {
			e := newTagEnv(t, tr.sendTLS, tr.recvTLS, tr.self)
			src, dst := make([]byte, 64), make([]byte, 64)
			expected := func() {
				r, err := e.b.TagRecvNBX(dst, 1, tagMaskFull, nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := e.ab.TagSendNBX(src, 1, nil); err != nil {
					t.Fatal(err)
				}
				for !r.IsCompleted() {
					e.progress()
				}
				r.Free()
			}
			var info TagRecvInfo
			param := new(RequestParam).SetRecvInfo(&info)
			unexpected := func() {
				if _, err := e.ab.TagSendNBX(src, 2, nil); err != nil {
					t.Fatal(err)
				}
				for e.b.TagProbeNB(2, tagMaskFull, false, nil) == nil {
					e.progress()
				}
				if r, err := e.b.TagRecvNBX(dst, 2, tagMaskFull, param); r != nil || err != nil {
					t.Fatalf("receive of an arrived message: %v, %v", r, err)
				}
			}
			for name, f := range map[string]func(){"expected": expected, "unexpected": unexpected} {
				f()
				if n := testing.AllocsPerRun(200, f); n > 0 {
					t.Errorf("%s small message: %v allocations", name, n)
				}
			}
		})
	}
}

// TestTagMultiThread sends and receives from several goroutines at once on
// workers in multi thread mode: every message arrives once, whole.
func TestTagMultiThread(t *testing.T) {
	const goroutines, perG = 4, 50
	for _, tr := range tagTransports[1:3] {
		t.Run(tr.name, func(t *testing.T) {
			multi := new(WorkerParams).SetThreadMode(ucs.ThreadModeMulti)
			ca, cb := newTagContext(t, tr.sendTLS), newTagContext(t, tr.recvTLS)
			a, err := ca.NewWorker(multi)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(a.Destroy)
			b, err := cb.NewWorker(multi)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(b.Destroy)
			ep := connect(t, a, b, nil)
			var wg sync.WaitGroup
			errs := make(chan error, 2*goroutines)
			seen := make([]int32, goroutines*perG)
			var mu sync.Mutex
			for g := range goroutines {
				wg.Add(2)
				go func() { // a sender
					defer wg.Done()
					for i := range perG {
						k := g*perG + i
						n := protoSizes[k%len(protoSizes)]
						r, err := ep.TagSendNBX(pattern(n, k), uint64(k), nil)
						for err == nil && r != nil && !r.IsCompleted() {
							if a.Progress() == 0 {
								a.Idle()
							}
						}
						if err == nil && r != nil {
							err = r.Status()
							r.Free()
						}
						if err != nil {
							errs <- err
							return
						}
					}
				}()
				go func() { // a receiver
					defer wg.Done()
					buf := make([]byte, 1<<20)
					for range perG {
						r, err := b.TagRecvNBX(buf, 0, 0, new(RequestParam).SetOpAttrFlags(OpAttrFlagNoImmCmpl))
						if err != nil {
							errs <- err
							return
						}
						deadline := time.Now().Add(hangLimit)
						for !r.IsCompleted() {
							if b.Progress() == 0 {
								a.Progress()
								b.Idle()
							}
							if time.Now().After(deadline) {
								errs <- errors.New("a receive waits too long")
								return
							}
						}
						var info TagRecvInfo
						if err := r.TagRecvRequestTest(&info); err != nil {
							errs <- err
							return
						}
						r.Free()
						k := int(info.SenderTag)
						n := protoSizes[k%len(protoSizes)]
						if k >= len(seen) || info.Length != n || !bytes.Equal(buf[:n], pattern(n, k)) {
							errs <- fmt.Errorf("message %d of %d bytes: wrong", k, info.Length)
							return
						}
						mu.Lock()
						seen[k]++
						mu.Unlock()
					}
				}()
			}
			// Someone must serve the sender's rendezvous replies while the
			// senders wait: they progress a themselves.
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			for k, c := range seen {
				if c != 1 {
					t.Fatalf("message %d received %d times", k, c)
				}
			}
		})
	}
}

// TestTagRndvMixedPeers has one receiver take rendezvous messages at once
// from a sender that reaches it through shared memory and one that reaches
// it through tcp only, each sending from memory it mapped and from the Go
// heap.
func TestTagRndvMixedPeers(t *testing.T) {
	const n = 4 << 20
	cb := newTagContext(t, "all")
	b := newWorker(t, cb)
	var eps []*Endpoint
	var workers []*Worker
	for _, tls := range []string{"sm,self", "tcp,self"} {
		a := newWorker(t, newTagContext(t, tls))
		workers = append(workers, a)
		eps = append(eps, connect(t, a, b, nil))
	}
	progress := func() {
		b.Progress()
		for _, a := range workers {
			a.Progress()
		}
	}
	var sends, recvs []*Request
	bufs := map[uint64][]byte{}
	for k, ep := range eps {
		for j := range 2 {
			tag := uint64(k<<1 | j)
			src := pattern(n, int(tag))
			if j == 0 {
				m := mapMem(t, ep.w.ctx, new(MemMapParams).SetLength(n).SetFlags(MemMapAllocate))
				copy(memBytes(m), src)
				src = memBytes(m)
			}
			r, err := ep.TagSendNBX(src, tag, nil)
			if err != nil || r == nil {
				t.Fatalf("send %d: %v, %v", tag, r, err)
			}
			sends = append(sends, r)
			bufs[tag] = make([]byte, n)
		}
	}
	for tag, buf := range bufs {
		r, err := b.TagRecvNBX(buf, tag, tagMaskFull, new(RequestParam).SetOpAttrFlags(OpAttrFlagNoImmCmpl))
		if err != nil {
			t.Fatal(err)
		}
		recvs = append(recvs, r)
	}
	for _, r := range append(recvs, sends...) {
		progressUntil(t, b, "a rendezvous", func() bool { progress(); return r.IsCompleted() })
		if err := r.Status(); err != nil {
			t.Fatalf("%s: %v", r.Query().DebugString, err)
		}
		t.Log(r.Query().DebugString)
		r.Free()
	}
	for tag, buf := range bufs {
		if !bytes.Equal(buf, pattern(n, int(tag))) {
			t.Errorf("message %d: data differs", tag)
		}
	}
}

// TestTagFlush checks that flushing a worker or an endpoint does not wait
// for receives that a sync or rendezvous send waits for (they are not RMA),
// and that it does wait until the sends a transport had no room for left:
// a receiver finds all of them after the sender's flush.
func TestTagFlush(t *testing.T) {
	for _, tr := range tagTransports[1:3] {
		t.Run(tr.name, func(t *testing.T) {
			e := newTagEnv(t, tr.sendTLS, tr.recvTLS, false)
			sync, err := e.ab.TagSendSyncNBX([]byte("unmatched"), 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			rndv, err := e.ab.TagSendNBX(make([]byte, 4<<20), 2, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := noHang(t, "worker flush", e.a.Flush); err != nil {
				t.Fatal(err)
			}
			if err := noHang(t, "endpoint flush", e.ab.Flush); err != nil {
				t.Fatal(err)
			}
			if sync.IsCompleted() || rndv.IsCompleted() {
				t.Fatal("a send completed without its receive")
			}
			// Many sends, more than the lane takes at once, then a flush.
			const k = 2000
			var reqs []*Request
			for i := range k {
				r, err := e.ab.TagSendNBX(make([]byte, 3000), 1<<20|uint64(i), nil)
				if err != nil {
					t.Fatal(err)
				}
				if r != nil {
					reqs = append(reqs, r)
				}
			}
			queued := e.ab.queued.Load()
			t.Logf("%d sends queued for room", queued)
			done := make(chan error, 1)
			go func() { done <- e.ab.Flush() }()
			// The receiver must take messages for the sender to get room.
			got := 0
			e.b.Progress()
			for got < k {
				if m := e.b.TagProbeNB(1<<20, ^uint64(0xfff), true, nil); m != nil {
					if r, err := e.b.TagMsgRecvNBX(make([]byte, 3000), m, nil); e.done(t, "recv", r, err) != nil {
						t.Fatal(err)
					}
					got++
					continue
				}
				e.b.Progress()
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if n := e.ab.queued.Load(); n != 0 {
				t.Errorf("%d sends still queued after a flush (%d before it)", n, queued)
			}
			for _, r := range reqs {
				if err := e.done(t, "send", r, nil); err != nil {
					t.Fatal(err)
				}
			}
			sync.Cancel()
			rndv.Cancel()
		})
	}
}

// TestTagDestroyCancels checks that destroying a worker completes its
// posted receives with ucs.ErrCanceled (their callbacks run) and gives
// back its unexpected messages.
func TestTagDestroyCancels(t *testing.T) {
	c := newTagContext(t, "sm,self")
	w, err := c.NewWorker(nil)
	if err != nil {
		t.Fatal(err)
	}
	ep := connect(t, w, w, nil)
	if _, err := ep.TagSendNBX([]byte("left"), 9, nil); err != nil {
		t.Fatal(err)
	}
	for w.TagProbeNB(9, tagMaskFull, false, nil) == nil {
		w.Progress()
	}
	var ris []*recvInfo
	for _, mask := range []uint64{tagMaskFull, 0xf} {
		ri := &recvInfo{}
		if _, err := w.TagRecvNBX(make([]byte, 4), 1, mask, ri.param()); err != nil {
			t.Fatal(err)
		}
		ris = append(ris, ri)
	}
	w.Destroy()
	for k, ri := range ris {
		if ri.calls != 1 || !errors.Is(ri.status, ucs.ErrCanceled) {
			t.Errorf("receive %d: callback %d times, %v", k, ri.calls, ri.status)
		}
	}
}

// TestTagRecvReportsOnce receives messages of each protocol that arrived
// already: a receive either completes at once (no request, no callback) or
// returns a request whose callback runs exactly once.
func TestTagRecvReportsOnce(t *testing.T) {
	for _, tr := range tagTransports[1:3] {
		t.Run(tr.name, func(t *testing.T) {
			e := newTagEnv(t, tr.sendTLS, tr.recvTLS, false)
			sreqs := sendAll(t, e.ab, protoSizes, 500, false)
			for i, n := range protoSizes {
				tag := uint64(500 + i)
				e.wait(t, "the message", func() bool { return e.b.TagProbeNB(tag, tagMaskFull, false, nil) != nil })
				ri := &recvInfo{}
				r, err := e.b.TagRecvNBX(make([]byte, n), tag, tagMaskFull, ri.param())
				if err != nil {
					t.Fatalf("%d bytes: %v", n, err)
				}
				if r == nil {
					if ri.calls != 0 {
						t.Fatalf("%d bytes: completed at once, and its callback ran %d times", n, ri.calls)
					}
					continue
				}
				if err := e.done(t, "recv", r, nil); err != nil {
					t.Fatal(err)
				}
				if ri.calls != 1 {
					t.Fatalf("%d bytes: a request whose callback ran %d times", n, ri.calls)
				}
			}
			for _, r := range sreqs {
				if err := e.done(t, "send", r, nil); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestTagForceImmKeepsOrder tries a receive with OpAttrFlagForceImmCmpl on
// a message that cannot complete at once (rendezvous, or fragments still
// to come) and checks that the ucs.ErrNoResource it gets leaves the
// message where it was: the next receives take it, and the messages sent
// after it, in the order they were sent.
func TestTagForceImmKeepsOrder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		probe bool // the message is tried by a non-removing probe's handle
	}{{"recv", false}, {"probe", true}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTagEnv(t, "tcp,self", "tcp,self", false)
			sizes := []int{1 << 20, 8, 200}
			sreqs := sendAll(t, e.ab, sizes, 0, false)
			// Every message has tag 0 under mask 0xf0: one tag to receives.
			e.wait(t, "the messages", func() bool { return e.b.TagProbeNB(2, tagMaskFull, false, nil) != nil })
			force := new(RequestParam).SetOpAttrFlags(OpAttrFlagForceImmCmpl)
			var err error
			if tc.probe {
				m := e.b.TagProbeNB(0, 0xf0, false, nil)
				_, err = e.b.TagMsgRecvNBX(make([]byte, 1<<20), m, force)
			} else {
				_, err = e.b.TagRecvNBX(make([]byte, 1<<20), 0, 0xf0, force)
			}
			if !errors.Is(err, ucs.ErrNoResource) {
				t.Fatalf("ForceImmCmpl receive of a rendezvous message: %v, want ucs.ErrNoResource", err)
			}
			for i, n := range sizes {
				buf := make([]byte, 1<<20)
				var info TagRecvInfo
				r, err := e.b.TagRecvNBX(buf, 0, 0xf0, new(RequestParam).SetRecvInfo(&info))
				if r != nil {
					e.wait(t, "recv", r.IsCompleted)
					err = r.TagRecvRequestTest(&info)
					r.Free()
				}
				if err != nil || info.SenderTag != uint64(i) || info.Length != n {
					t.Fatalf("receive %d: %v, %+v; want tag %d of %d bytes", i, err, info, i, n)
				}
			}
			for _, r := range sreqs {
				if err := e.done(t, "send", r, nil); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestTagRecvNoCallbackInCall receives rendezvous messages that arrived
// already, where the data can be taken inside the call (shared memory, the
// self transport), and a truncated one: without OpAttrFlagNoImmCmpl no
// callback runs before the call returns (UCX calls it there only with the
// flag): the receive completes at once, as (nil, its status) with
// RecvInfo filled in, or returns a request whose callback runs later, once.
// With the flag it returns a request, its callback run once.
func TestTagRecvNoCallbackInCall(t *testing.T) {
	const n = 1 << 20
	for _, tr := range tagTransports[:2] {
		for _, tc := range []struct {
			name     string
			buf      int
			noImm    bool
			wantErr  error
			wantInfo bool
			rcvd     int // the received length the callback hears
		}{
			{"whole", n, false, nil, true, n},
			// A rendezvous message cut short transfers nothing.
			{"truncated", n - 1, false, ucs.ErrMessageTruncated, false, 0},
			{"whole/NoImmCmpl", n, true, nil, false, n},
			{"truncated/NoImmCmpl", n - 1, true, ucs.ErrMessageTruncated, false, 0},
		} {
			t.Run(tr.name+"/"+tc.name, func(t *testing.T) {
				e := newTagEnv(t, tr.sendTLS, tr.recvTLS, tr.self)
				sreqs := sendAll(t, e.ab, []int{n}, 3, false)
				e.wait(t, "the message", func() bool { return e.b.TagProbeNB(3, tagMaskFull, false, nil) != nil })
				ri := &recvInfo{}
				var info TagRecvInfo
				p := ri.param().SetRecvInfo(&info)
				if tc.noImm {
					p.SetOpAttrFlags(OpAttrFlagNoImmCmpl)
				}
				buf := make([]byte, tc.buf)
				r, err := e.b.TagRecvNBX(buf, 3, tagMaskFull, p)
				calls := ri.calls
				switch {
				case tc.noImm:
					if r == nil || err != nil || calls > 1 {
						t.Fatalf("NoImmCmpl: %v, %v, callback %d times before return", r, err, calls)
					}
				case r == nil:
					if !errors.Is(err, tc.wantErr) && err != tc.wantErr {
						t.Fatalf("completed at once with %v, want %v", err, tc.wantErr)
					}
					if calls != 0 {
						t.Fatalf("completed at once, and its callback ran %d times", calls)
					}
					if tc.wantInfo && info != (TagRecvInfo{SenderTag: 3, Length: n}) {
						t.Fatalf("completed at once: info %+v", info)
					}
				default:
					if err != nil || calls != 0 {
						t.Fatalf("a request (%v), and its callback ran %d times before the call returned", err, calls)
					}
				}
				if r != nil {
					e.wait(t, "recv", r.IsCompleted)
					if err := r.Status(); !errors.Is(err, tc.wantErr) && err != tc.wantErr {
						t.Fatalf("request status %v, want %v", err, tc.wantErr)
					}
					r.Free()
					if ri.calls != 1 || ri.info != (TagRecvInfo{SenderTag: 3, Length: tc.rcvd}) {
						t.Fatalf("callback %d times, info %+v", ri.calls, ri.info)
					}
				}
				if tc.wantErr == nil && !bytes.Equal(buf, pattern(n, 0)) {
					t.Fatal("data differs")
				}
				for _, r := range sreqs {
					if err := e.done(t, "send", r, nil); err != nil {
						t.Fatal(err)
					}
				}
			})
		}
	}
}

// TestTagFeatureConnecting sends tag messages without FeatureTag on a
// client endpoint whose server has not answered yet: the calls fail at
// once with ucs.ErrInvalidParam, as on a connected endpoint, instead of
// waiting for the connection.
func TestTagFeatureConnecting(t *testing.T) {
	s := startCSServer(t, newCSContext(t, "tcp"), nil)
	c := newContextParams(t, new(Params).SetFeatures(FeatureAM|FeatureStream), "TLS", "tcp")
	w := newWorker(t, c)
	ep, err := w.NewEndpoint(new(EPParams).SetSockAddr(s.addr).SetFlags(EPParamsFlagClientServer))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close(CloseModeForce) })
	for _, tc := range []struct {
		name string
		send func() (*Request, error)
	}{
		{"TagSendNBX", func() (*Request, error) { return ep.TagSendNBX([]byte("x"), 1, nil) }},
		{"TagSendSyncNBX", func() (*Request, error) { return ep.TagSendSyncNBX([]byte("x"), 1, nil) }},
		{"TagSendNB", func() (*Request, error) { return ep.TagSendNB([]byte("x"), 1, DatatypeContig(1), 1, nil) }},
	} {
		r, err := tc.send()
		if r != nil {
			r.Free()
		}
		if r != nil || !errors.Is(err, ucs.ErrInvalidParam) {
			t.Errorf("%s without FeatureTag on a connecting endpoint: request %v, %v; want ucs.ErrInvalidParam", tc.name, r != nil, err)
		}
	}
}

// TestTagAutoRndvNetwork: with UCX_RNDV_THRESH=auto, a tcp endpoint sends
// data that fits one eager message eagerly, and the next size by
// rendezvous, not in eager fragments, whose data the sender puts into the
// receive's buffer (UCX_RNDV_SCHEME=auto).
func TestTagAutoRndvNetwork(t *testing.T) {
	for _, tr := range tagTransports[2:] { // tcp, mixed
		t.Run(tr.name, func(t *testing.T) {
			e := newTagEnv(t, tr.sendTLS, tr.recvTLS, tr.self)
			th := e.ab.thresholds()
			one := max(th.lim.bcopy, th.lim.zcopy) - tagEagerHdrLen // the most one eager message carries
			if !th.netPut {
				t.Error("a rendezvous over tcp alone does not go by put")
			}
			for _, c := range []struct {
				n          int
				want, recv string
			}{{one, "tag/eager/", protoTagRecvEager}, {one + 1, protoTagRndv, protoTagRecvPut}} {
				dst := make([]byte, c.n)
				rr, err := e.b.TagRecvNBX(dst, 5, tagMaskFull, nil)
				if err != nil {
					t.Fatal(err)
				}
				sr, err := e.ab.TagSendNBX(make([]byte, c.n), 5, new(RequestParam).SetOpAttrFlags(OpAttrFlagNoImmCmpl))
				if err != nil || sr == nil {
					t.Fatalf("send of %d bytes: %v, %v", c.n, sr, err)
				}
				got := sr.Query().DebugString
				if err := e.done(t, "send", sr, nil); err != nil {
					t.Fatal(err)
				}
				e.wait(t, "recv", rr.IsCompleted)
				if rgot := rr.Query().DebugString; !strings.HasPrefix(rgot, c.recv) {
					t.Errorf("receive of %d bytes took %s, want %s", c.n, rgot, c.recv)
				}
				if err := e.done(t, "recv", rr, nil); err != nil {
					t.Fatal(err)
				}
				if !strings.HasPrefix(got, c.want) || strings.Contains(got, "multi") {
					t.Errorf("send of %d bytes (one eager message carries %d) took %s, want %s", c.n, one, got, c.want)
				}
			}
		})
	}
}
