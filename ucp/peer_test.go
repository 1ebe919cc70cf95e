package ucp

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/goshmem/goshmem/internal/testpeer"
	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// The two-process tests run a peer process (testpeer role "ucp"), as the
// tests of uct/sm and uct/tcp do: the peer creates a context and a worker
// (with the UCX_* variables it was started with), maps a segment, and
// prints its worker address, the packed key of the segment and the
// segment's address; it then reads the parent's worker address from its
// input, connects an endpoint back (the software protocols answer on it),
// progresses its worker on a goroutine, prints "ready", and runs until its
// input is closed (then it destroys its worker and context and exits) or
// it is killed.
func TestMain(m *testing.M) {
	testpeer.Serve(
		testpeer.Role{Name: "ucp", Run: func(_ []string, in io.Reader, out io.Writer) error { return runPeer(in, out) }},
		testpeer.Role{Name: "ucp-listener", Run: runCSServerProcess},
	)
	os.Exit(m.Run())
}

// peerTagSendEnv makes the peer send a tag message (peerTag) of that many
// bytes of its segment to the parent once connected.
const peerTagSendEnv = "GOSHMEM_UCP_TEST_PEER_TAG_SEND"

// peerStreamSendEnv makes the peer send that many bytes of its segment on
// its endpoint's stream to the parent once connected.
const peerStreamSendEnv = "GOSHMEM_UCP_TEST_PEER_STREAM_SEND"

// peerTag is the tag of the peer's message.
const peerTag = 0x7a6

// testJobKey is the job key the tcp transport authenticates the processes
// of a test with (what the launcher passes as GOSHMEM_KEY).
const testJobKey = "dWNwIHRlc3Qgam9iIGtleSAwMTIzNDU2Nzg5MDEyMzQ=" // 32 bytes: a job key is 16, 24 or 32 (internal/jobkey)

// peerSegSize is the size of the peer's segment.
const peerSegSize = 1 << 20

// runPeer is the peer process.
func runPeer(in io.Reader, out io.Writer) error {
	c, err := Init(new(Params).SetFeatures(FeatureRMA|FeatureAMO32|FeatureAMO64|FeatureTag|FeatureStream), nil)
	if err != nil {
		return err
	}
	defer c.Cleanup()
	w, err := c.NewWorker(nil)
	if err != nil {
		return err
	}
	defer w.Destroy() // in order, as a program ends: its peers see no failure
	m, err := c.MemMap(new(MemMapParams).SetLength(peerSegSize).SetFlags(MemMapAllocate))
	if err != nil {
		return err
	}
	packed, err := c.RkeyPack(m)
	if err != nil {
		return err
	}
	addr, _ := w.Address()
	fmt.Fprintf(out, "%x %x %d\n", addr, packed, uintptr(m.Address()))
	lines := bufio.NewScanner(in)
	lines.Buffer(make([]byte, 64<<10), 1<<20)
	if !lines.Scan() {
		return fmt.Errorf("no parent address: %v", lines.Err())
	}
	parent, err := hex.DecodeString(lines.Text())
	if err != nil {
		return err
	}
	ep, err := w.NewEndpoint(new(EPParams).SetAddress(parent))
	if err != nil {
		return err
	}
	if n, _ := strconv.Atoi(os.Getenv(peerTagSendEnv)); n > 0 {
		// A tag message of n bytes from the segment, to the parent.
		if _, err := ep.TagSendNBX(unsafe.Slice((*byte)(m.Address()), n), peerTag, nil); err != nil {
			return err
		}
	}
	if n, _ := strconv.Atoi(os.Getenv(peerStreamSendEnv)); n > 0 {
		// n stream bytes from the segment, to the parent.
		if _, err := ep.StreamSendNBX(unsafe.Slice((*byte)(m.Address()), n), nil); err != nil {
			return err
		}
	}
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			if w.Progress() == 0 {
				w.Idle()
			}
		}
	}()
	fmt.Fprintln(out, "ready")
	for lines.Scan() {
	}
	stop.Store(true)
	<-done
	return nil
}

// peerProc is the parent's view of a peer process.
type peerProc struct {
	*testpeer.Peer
	addr []byte // the peer worker's address
	rkey []byte // packed key of its segment
	base uint64 // address of its segment
}

// startPeer starts a peer process with env added to its environment. It is
// killed, if still running, at the end of the test.
func startPeer(t *testing.T, env []string) *peerProc {
	t.Helper()
	p := &peerProc{Peer: testpeer.Start(t, "ucp", testpeer.Options{Env: env})}
	t.Cleanup(func() { p.Kill() })
	line, err := p.Next()
	if err != nil {
		t.Fatalf("reading the peer's address: %v", err)
	}
	f := strings.Fields(line)
	if len(f) != 3 {
		t.Fatalf("peer line %q", line)
	}
	if p.addr, err = hex.DecodeString(f[0]); err == nil {
		if p.rkey, err = hex.DecodeString(f[1]); err == nil {
			p.base, err = strconv.ParseUint(f[2], 10, 64)
		}
	}
	if err != nil {
		t.Fatalf("peer line %q: %v", line, err)
	}
	return p
}

// connect gives the peer the address of w, which it connects back to, and
// waits until it serves.
func (p *peerProc) connect(t *testing.T, w *Worker) {
	t.Helper()
	addr, _ := w.Address()
	if line, err := p.Call(hex.EncodeToString(addr)); err != nil || line != "ready" {
		t.Fatalf("peer answered %q, %v; want ready", line, err)
	}
}

// stop stops the peer (SIGSTOP) and waits until the kernel reports it
// stopped, so that it answers nothing any more.
func (p *peerProc) stop(t *testing.T) {
	t.Helper()
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
}

// kill kills the peer (SIGKILL) without reaping it: until the test ends it
// stays a zombie, which the failure detection must see through.
func (p *peerProc) kill(t *testing.T) {
	t.Helper()
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
}

// hangLimit bounds the waits of the tests that must not hang; it is no
// timed assertion: a correct program ends its waits much sooner.
const hangLimit = 60 * time.Second

// waitFor yields until cond holds, and fails the test if it does not
// within hangLimit.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hangLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", hangLimit, what)
		}
		runtime.Gosched()
		time.Sleep(100 * time.Microsecond)
	}
}

// progressUntil progresses w until cond holds, failing the test after
// hangLimit.
func progressUntil(t testing.TB, w *Worker, what string, cond func() bool) {
	t.Helper()
	waitFor(t, what, func() bool {
		w.Progress()
		return cond()
	})
}

// noHang returns what f returns, failing the test if f has not returned
// after hangLimit.
func noHang(t testing.TB, what string, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(hangLimit):
		t.Fatalf("%s still waits after %v", what, hangLimit)
		return nil
	}
}

// errRecorder records the calls of an endpoint's error handler.
type errRecorder struct {
	calls  atomic.Int32
	status atomic.Value // error
	user   atomic.Value // the user data it got
	ep     atomic.Pointer[Endpoint]
}

func (e *errRecorder) handler(user any, ep *Endpoint, status error) {
	e.calls.Add(1)
	e.status.Store(status)
	e.user.Store(user)
	e.ep.Store(ep)
}

// TestPeerFailure kills a peer process while an operation that waits for
// its answer is outstanding (a software get, a fetching software atomic,
// a flush of software puts), over shared memory (the keepalive finds the
// peer gone), tcp (the connection breaks) and a mix (the peer has only
// tcp): the endpoint's error handler runs once with its user data, the
// operation completes with the error, nothing hangs, and later operations
// fail at once.
func TestPeerFailure(t *testing.T) {
	variants := []struct {
		name       string
		parentTLS  string // UCX_TLS of this process
		peerTLS    string // UCX_TLS of the peer
		want       ucs.Status
		wantLaneTL string
	}{
		{"sm", "sm,self", "sm,self", ucs.ErrEndpointTimeout, "posix"},
		{"tcp", "tcp,self", "tcp,self", ucs.ErrConnectionReset, "tcp"},
		{"mixed", "all", "tcp,self", ucs.ErrConnectionReset, "tcp"},
	}
	// Each op starts operations to the stopped peer, with rk (every
	// operation in software) or direct (the key as unpacked: puts on the
	// tcp lane), and returns what waits for them.
	ops := []struct {
		name  string
		tcp   bool // only where the peer is reached over tcp
		start func(t *testing.T, ep *Endpoint, rk, direct *Rkey, base uint64) func() error
	}{
		{"get", false, func(t *testing.T, ep *Endpoint, rk, _ *Rkey, base uint64) func() error {
			req, err := ep.GetNBX(make([]byte, 64), base, rk, nil)
			if err != nil || req == nil {
				t.Fatalf("get to a stopped peer: %v, %v; want a request", req, err)
			}
			return req.Wait
		}},
		{"atomic", false, func(t *testing.T, ep *Endpoint, rk, _ *Rkey, base uint64) func() error {
			var reply uint64
			req, err := ep.AtomicOpNBX(AtomicOpAdd, 1, base, rk, new(RequestParam).SetReply(&reply))
			if err != nil || req == nil {
				t.Fatalf("fetching atomic to a stopped peer: %v, %v; want a request", req, err)
			}
			return req.Wait
		}},
		{"flush", false, func(t *testing.T, ep *Endpoint, rk, _ *Rkey, base uint64) func() error {
			if _, err := ep.PutNBX([]byte("lost"), base, rk, nil); err != nil {
				t.Fatalf("software put to a stopped peer: %v", err)
			}
			done := make(chan error, 1)
			go func() { done <- ep.Flush() }()
			// The peer is stopped: the flush cannot end before it dies.
			// Where it sends a software flush request (not over a transport
			// that acknowledges after its handlers: tcp), wait for it.
			if f := ep.am.remote.capFlags; f&uct.IfaceFlagCBAsync == 0 || f&uct.IfaceFlagFlushAfterAM == 0 {
				waitFor(t, "the flush request", func() bool {
					ep.w.sw.mu.Lock()
					defer ep.w.sw.mu.Unlock()
					return len(ep.w.sw.reqs) > 0
				})
			}
			return func() error { return <-done }
		}},
		// Puts that the stopped peer does not read pile up in the socket,
		// in the EP's send queue (zero-copy puts), and then in the lane's
		// pending queue (UCX_TCP_TX_QUEUE_LEN is small here).
		{"puts", true, func(t *testing.T, ep *Endpoint, _, direct *Rkey, base uint64) func() error {
			if direct.rma == nil {
				t.Fatal("no RMA lane for the direct key")
			}
			buf := make([]byte, 256<<10)
			var reqs []*Request
			for range 1024 {
				req, err := ep.PutNBX(buf, base, direct, nil)
				if err != nil {
					t.Fatalf("put to a stopped peer: %v", err)
				}
				if req != nil {
					reqs = append(reqs, req)
				}
				if len(reqs) >= 8 {
					break
				}
			}
			if len(reqs) == 0 {
				t.Fatal("256 MiB of puts to a stopped peer all completed at once")
			}
			return func() error {
				var first error
				for _, r := range reqs {
					err := r.Wait()
					if err == nil {
						err = fmt.Errorf("a put request completed successfully: %s", r.Query().DebugString)
					}
					if first == nil || !errors.Is(err, ucs.ErrConnectionReset) {
						first = err
					}
					r.Free()
				}
				return first
			}
		}},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			for _, op := range ops {
				t.Run(op.name, func(t *testing.T) {
					if op.tcp && v.wantLaneTL != "tcp" {
						t.Skip("over shared memory puts complete on return: nothing stays outstanding")
					}
					t.Setenv("UCX_KEEPALIVE_INTERVAL", "5ms")
					t.Setenv("UCX_TCP_TX_QUEUE_LEN", "256k")
					t.Setenv("GOSHMEM_KEY", testJobKey) // tcp connects processes of one job only
					t.Setenv("UCX_TLS", v.parentTLS)
					p := startPeer(t, []string{"UCX_TLS=" + v.peerTLS})
					c := newContext(t)
					w := newWorker(t, c)
					var rec errRecorder
					ep, err := w.NewEndpoint(new(EPParams).SetAddress(p.addr).SetErrMode(ErrHandlingModePeer).
						SetErrHandler(rec.handler).SetUserData("peer-1"))
					if err != nil {
						t.Fatal(err)
					}
					defer ep.Close(CloseModeForce)
					p.connect(t, w)
					if am := ep.am; am == nil || am.wi.rsc.tl.TLName != v.wantLaneTL {
						t.Fatalf("active-message lane %v, want %s", am, v.wantLaneTL)
					}
					rk, err := ep.RkeyUnpack(p.rkey)
					if err != nil {
						t.Fatal(err)
					}
					defer rk.Destroy()
					direct, err := ep.RkeyUnpack(p.rkey)
					if err != nil {
						t.Fatal(err)
					}
					defer direct.Destroy()
					forceSoftware(rk) // everything in software, answered by the peer
					// The path works while the peer runs.
					got := make([]byte, 8)
					if req, err := ep.GetNBX(got, p.base, rk, nil); err != nil {
						t.Fatal(err)
					} else if req != nil {
						if err := req.Wait(); err != nil {
							t.Fatalf("get from the live peer: %v", err)
						}
						req.Free()
					}

					p.stop(t)
					wait := op.start(t, ep, rk, direct, p.base)
					if rec.calls.Load() != 0 {
						t.Fatalf("error handler called before the peer died: %v", rec.status.Load())
					}
					p.kill(t)
					err = noHang(t, op.name+" after the peer was killed", wait)
					if !errors.Is(err, v.want) {
						t.Errorf("%s outstanding when the peer died: %v, want %v", op.name, err, v.want)
					}
					// The handler runs from a Progress after the failure is
					// seen; the flush's own goroutine may be inside it.
					progressUntil(t, w, "the error handler", func() bool { return rec.calls.Load() > 0 })
					for range 100 {
						w.Progress()
					}
					if n := rec.calls.Load(); n != 1 {
						t.Fatalf("error handler called %d times, want once", n)
					}
					if st, _ := rec.status.Load().(error); !errors.Is(st, v.want) || rec.user.Load() != "peer-1" || rec.ep.Load() != ep {
						t.Errorf("error handler got (%v, %v, %p), want (peer-1, %p, %v)", rec.user.Load(), st, rec.ep.Load(), ep, v.want)
					}
					if err := ep.Status(); !errors.Is(err, v.want) {
						t.Errorf("Status of the failed endpoint: %v, want %v", err, v.want)
					}
					// Later operations fail at once with the endpoint's error.
					if _, err := ep.GetNBX(got, p.base, rk, nil); !errors.Is(err, v.want) {
						t.Errorf("get on the failed endpoint: %v, want %v", err, v.want)
					}
					if _, err := ep.PutNBX(got, p.base, rk, nil); !errors.Is(err, v.want) {
						t.Errorf("put on the failed endpoint: %v, want %v", err, v.want)
					}
					if _, err := ep.AtomicOpNBX(AtomicOpAdd, 1, p.base, rk, nil); !errors.Is(err, v.want) {
						t.Errorf("atomic on the failed endpoint: %v, want %v", err, v.want)
					}
					if err := ep.Flush(); !errors.Is(err, v.want) {
						t.Errorf("flush of the failed endpoint: %v, want %v", err, v.want)
					}
					// The worker goes on: its flush skips the failed endpoint.
					if err := w.Flush(); err != nil {
						t.Errorf("worker flush with a failed endpoint: %v", err)
					}
					if err := ep.Close(CloseModeFlush); err != nil {
						t.Errorf("close of the failed endpoint: %v", err)
					}
					if n := rec.calls.Load(); n != 1 {
						t.Errorf("error handler called %d times in all, want once", n)
					}
				})
			}
		})
	}
}
