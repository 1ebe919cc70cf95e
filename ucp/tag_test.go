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
	cfg, err := ReadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Modify("TLS", tls); err != nil {
		t.Fatal(err)
	}
	p := new(Params).SetFeatures(FeatureTag | FeatureRMA)
	for _, f := range more {
		f(p)
	}
	c, err := Init(p, cfg)
	if err != nil {
		t.Fatalf("Init with UCX_TLS=%s: %v", tls, err)
	}
	t.Cleanup(c.Cleanup)
	return c
}

func newTagEnv(t testing.TB, sendTLS, recvTLS string, self bool) *tagEnv {
	t.Helper()
	e := &tagEnv{ca: newTagContext(t, sendTLS)}
	e.a = newWorker(t, e.ca)
	e.cb, e.b = e.ca, e.a
	if !self {
		e.cb = newTagContext(t, recvTLS)
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
}

func (ri *recvInfo) param() *RequestParam {
	return new(RequestParam).SetTagRecvCallback(func(r *Request, st error, info *TagRecvInfo, _ any) {
		ri.mu.Lock()
		ri.calls++
		ri.status, ri.info = st, *info
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
					sp := new(RequestParam).SetFlags(OpAttrFlagNoImmCmpl)
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

var _ = errors.Is
var _ = fmt.Sprint
var _ = unsafe.Pointer(nil)
var _ = ucs.OK
