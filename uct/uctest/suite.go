package uctest

import (
	crand "crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// waitLimit bounds every wait of the suite for a completion, a reply or
// resources: a transport that never delivers fails the case instead of
// hanging the test.
const waitLimit = 20 * time.Second

// jobKeyEnv is the environment variable of the job key, which the
// launcher sets for every PE.
const jobKeyEnv = "GOSHMEM_KEY"

// sizeCap caps the sizes the suite tries where a transport claims more.
const sizeCap = 1 << 20

// Run runs the conformance cases against every transport resource of every
// registered component, as subtests named
// <component>/<tl>/<device>/<case> (with the memory domain after the
// component when a component has several). The test binary's TestMain
// must call RunPeerIfChild.
func Run(t *testing.T) {
	comps := uct.Components()
	if len(comps) == 0 {
		t.Fatal("no uct component is registered: import the transports to test")
	}
	// The test and its peers form a job: they share the job key that the
	// launcher would give them (transports such as tcp authenticate with
	// it). Peers inherit the environment.
	if os.Getenv(jobKeyEnv) == "" {
		var k [32]byte
		crand.Read(k[:])
		t.Setenv(jobKeyEnv, base64.StdEncoding.EncodeToString(k[:]))
	}
	for _, comp := range comps {
		t.Run(comp.Name(), func(t *testing.T) {
			mds, err := comp.MDResources()
			if err != nil {
				t.Fatalf("MD resources: %v", err)
			}
			if len(mds) == 0 {
				t.Skipf("skipped: component %s offers no memory domain here", comp.Name())
			}
			for _, mdr := range mds {
				runMD(t, comp, mdr.Name, len(mds) > 1)
			}
		})
	}
}

// runMD runs the cases on every TL resource of one memory domain.
func runMD(t *testing.T, comp uct.Component, mdName string, named bool) {
	md, err := comp.OpenMD(mdName, ucs.ReadConfig("", comp.MDConfigTable()))
	if err != nil {
		t.Errorf("open MD %s: %v", mdName, err)
		return
	}
	tls, err := md.TLResources()
	md.Close()
	if err != nil {
		t.Errorf("TL resources of MD %s: %v", mdName, err)
		return
	}
	run := func(t *testing.T) {
		if len(tls) == 0 {
			t.Skipf("skipped: MD %s has no transport resource (memory only)", mdName)
		}
		// One subtest per transport, with one per device in it.
		var names []string
		byName := make(map[string][]uct.TLResource)
		for _, tl := range tls {
			if _, ok := byName[tl.TLName]; !ok {
				names = append(names, tl.TLName)
			}
			byName[tl.TLName] = append(byName[tl.TLName], tl)
		}
		for _, name := range names {
			t.Run(name, func(t *testing.T) {
				for _, tl := range byName[name] {
					r := resourceID{Component: comp.Name(), MD: mdName, TL: tl.TLName, Dev: tl.DevName}
					t.Run(tl.DevName, func(t *testing.T) { runResource(t, r, tl) })
				}
			})
		}
	}
	if named {
		t.Run(mdName, run)
	} else {
		run(t)
	}
}

// runResource opens the resource tl, named r, connects to a target and
// runs every case.
func runResource(t *testing.T, r resourceID, tl uct.TLResource) {
	devType := tl.DevType
	e := &env{rid: r, tl: tl, devType: devType, inProcess: devType == uct.DeviceTypeSelf, replies: make(map[uint8][][]byte)}
	if err := e.open(); err != nil {
		if errors.Is(err, ucs.ErrNoDevice) && devType == uct.DeviceTypeNet && !deviceUp(r.Dev) {
			// A device of another test (a veth pair of a test of
			// network namespaces running beside) went away or down since
			// it was listed.
			t.Skipf("skipped: device %s is gone or down: %v", r.Dev, err)
		}
		t.Fatalf("%v: %v", r, err)
	}
	t.Cleanup(func() { e.close(t) })
	if e.attr.Flags&uct.IfaceFlagConnectToIface == 0 {
		t.Skipf("skipped: transport does not claim connect to iface, which the suite needs (flags %#x)", e.attr.Flags)
	}
	c, err := e.connect(t)
	if err != nil {
		if devType == uct.DeviceTypeNet && !deviceUp(r.Dev) {
			t.Skipf("skipped: device %s went away or down while the suite connected: %v", r.Dev, err)
		}
		t.Fatalf("connect to the target: %v", err)
	}
	e.main = c
	for _, tc := range cases() {
		t.Run(tc.name, func(t *testing.T) {
			for _, need := range tc.needs {
				if e.attr.Flags&need.flag == 0 {
					t.Skipf("skipped: transport does not claim %s", need.name)
				}
			}
			e.resetScratch()
			tc.run(t, e)
		})
	}
}

// need is an iface capability flag a case requires.
type need struct {
	flag uct.IfaceFlags
	name string
}

// The capabilities cases name.
var (
	needPutShort = need{uct.IfaceFlagPutShort, "put short"}
	needPutBcopy = need{uct.IfaceFlagPutBcopy, "put bcopy"}
	needPutZcopy = need{uct.IfaceFlagPutZcopy, "put zcopy"}
	needGetBcopy = need{uct.IfaceFlagGetBcopy, "get bcopy"}
	needGetZcopy = need{uct.IfaceFlagGetZcopy, "get zcopy"}
	needAMShort  = need{uct.IfaceFlagAMShort, "AM short"}
	needAMBcopy  = need{uct.IfaceFlagAMBcopy, "AM bcopy"}
	needAMZcopy  = need{uct.IfaceFlagAMZcopy, "AM zcopy"}
	needPending  = need{uct.IfaceFlagPending, "the pending queue"}
)

// testCase is one entry of the table of cases.
type testCase struct {
	name  string
	needs []need
	run   func(t *testing.T, e *env)
}

// env is the test side of one resource: its iface, the target and the
// connection to it.
type env struct {
	rid       resourceID
	tl        uct.TLResource // as the MD listed it
	devType   uct.DeviceType
	inProcess bool
	comp      uct.Component
	md        uct.MD
	mdAttr    uct.MDAttr
	iface     uct.Iface
	attr      *uct.IfaceAttr
	extra     uct.Iface // a second iface a case opened, which progress progresses too
	local     *server   // the in-process target, when inProcess
	main      *conn

	scratch     []byte // registered local memory for zcopy operations
	scratchMemh uct.Memh
	scratchRegd bool // scratchMemh is from MemAlloc (see allocMemory)
	scratchNext int
	skew        int // bytes scratchBuf skips, to misalign buffers

	mu      sync.Mutex
	replies map[uint8][][]byte // AMs received, by id

	errCalls atomic.Int32 // calls of the iface error handler
	lastErr  atomic.Int32 // status of the last one
}

// conn is a connection to a target: an EP and the unpacked key of the
// target memory.
type conn struct {
	tgt  target
	ep   uct.EP
	rkey uct.RkeyBundle
	// unpacked says rkey is to be released.
	unpacked bool
	base     uint64
	size     int
	addr     helloInfo
}

// open opens the resource and, for an in-process resource, the target.
func (e *env) open() error {
	comp, md, iface, err := openResource(e.rid, func(arg any, ep uct.EP, st ucs.Status) {
		e.errCalls.Add(1)
		e.lastErr.Store(int32(st))
	})
	if err != nil {
		return err
	}
	e.comp, e.md, e.iface = comp, md, iface
	if e.mdAttr, err = md.Query(); err != nil {
		return fmt.Errorf("md query: %w", err)
	}
	if e.attr, err = iface.Query(); err != nil {
		return fmt.Errorf("iface query: %w", err)
	}
	if e.attr.Flags&anyAM != 0 {
		for _, id := range []uint8{amEchoReply, amKeepReply} {
			if err := iface.SetAMHandler(id, e.record, id, uct.CBFlagSync); err != nil {
				return fmt.Errorf("set AM handler %d: %w", id, err)
			}
		}
	}
	e.scratch, e.scratchMemh, e.scratchRegd, err = allocMemory(md, targetSize, "uctest scratch")
	if err != nil {
		return fmt.Errorf("scratch memory: %w", err)
	}
	if e.inProcess {
		if e.local, err = newServer(md, iface); err != nil {
			return err
		}
	}
	return nil
}

// close releases everything open opened; t gets the errors of the peer.
func (e *env) close(t testing.TB) {
	if e.main != nil {
		e.release(t, e.main)
	}
	if e.local != nil {
		e.local.free()
	}
	if e.scratch != nil {
		freeMemory(e.md, e.scratch, e.scratchMemh, e.scratchRegd)
	}
	if e.iface != nil {
		e.iface.Close()
	}
	if e.md != nil {
		e.md.Close()
	}
}

// record is the AM handler of the reply ids: it keeps a copy of the data.
func (e *env) record(arg any, data []byte, flags uint32) ucs.Status {
	e.mu.Lock()
	defer e.mu.Unlock()
	id := arg.(uint8)
	e.replies[id] = append(e.replies[id], append([]byte(nil), data...))
	return ucs.OK
}

// connect starts a target (a peer process, or the in-process server) and
// connects an EP to it both ways.
func (e *env) connect(t testing.TB) (*conn, error) {
	c := &conn{}
	if e.inProcess {
		c.tgt = &localTarget{e.local}
	} else {
		p, err := startPeer(t, e.rid)
		if err != nil {
			return nil, err
		}
		c.tgt = p
	}
	c.addr = c.tgt.info()
	c.base, c.size = c.addr.base, c.addr.length
	// The in-process server has one reply EP for every connection.
	if !e.inProcess || e.local.ep == nil {
		if _, err := c.tgt.call(fmt.Sprintf("connect %s %s", hexOrDash(e.iface.DeviceAddress()), hexOrDash(e.iface.Address()))); err != nil {
			e.release(t, c)
			return nil, err
		}
	}
	ep, err := e.iface.EPCreate(&uct.EPParams{DeviceAddr: c.addr.devAddr, IfaceAddr: c.addr.ifaceAdr})
	if err != nil {
		e.release(t, c)
		return nil, fmt.Errorf("ep create: %w", err)
	}
	c.ep = ep
	if c.rkey, err = e.comp.RkeyUnpack(c.addr.key); err != nil {
		e.release(t, c)
		return nil, fmt.Errorf("rkey unpack: %w", err)
	}
	c.unpacked = true
	return c, nil
}

// release destroys the EP and the rkey of c and ends its target (but not
// the in-process server, which the env owns). A peer that failed (exited
// with an error status: a race report, a crash) fails t; a killed one does
// not.
func (e *env) release(t testing.TB, c *conn) {
	if c.ep != nil {
		c.ep.Destroy()
		c.ep = nil
	}
	if c.unpacked {
		e.comp.RkeyRelease(c.rkey)
		c.unpacked = false
	}
	if p, ok := c.tgt.(*peerTarget); ok {
		if err := p.close(); err != nil {
			t.Error(err)
		}
	}
}

// progress progresses the iface, the extra iface of a case that opened
// one, and, for an in-process target, sends its replies.
func (e *env) progress() int {
	n := e.iface.Progress()
	if e.extra != nil {
		n += e.extra.Progress()
	}
	if e.local != nil {
		e.local.poll()
	}
	return n
}

// waitUntil progresses until cond holds, failing t after waitLimit.
func (e *env) waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for spins := 1; !cond(); spins++ {
		e.progress()
		if spins%256 == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not done after %v", what, waitLimit)
			}
			runtime.Gosched()
		}
	}
}

// completion is a uct.Completion that records that it fired.
type completion struct {
	uct.Completion
	done atomic.Bool
}

func newCompletion() *completion {
	c := &completion{}
	c.Count = 1
	c.Func = func(*uct.Completion) { c.done.Store(true) }
	return c
}

// do runs op until the transport takes it (retrying, with progress, while
// it answers ucs.ErrNoResource) and waits for its completion when it
// answers ucs.InProgress. Any error fails t.
func (e *env) do(t testing.TB, what string, op func(c *uct.Completion) ucs.Status) {
	t.Helper()
	if st := e.try(t, what, op); st.IsErr() {
		t.Fatalf("%s: %v", what, st)
	}
}

// try is do that returns the error status instead of failing t.
func (e *env) try(t testing.TB, what string, op func(c *uct.Completion) ucs.Status) ucs.Status {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for spins := 1; ; spins++ {
		c := newCompletion()
		switch st := op(&c.Completion); st {
		case ucs.OK:
			return ucs.OK
		case ucs.InProgress:
			e.waitUntil(t, what+" completion", c.done.Load)
			return c.Status()
		case ucs.ErrNoResource:
			e.progress()
			if spins%256 == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("%s: still ErrNoResource after %v", what, waitLimit)
				}
				runtime.Gosched()
			}
		default:
			return st
		}
	}
}

// flush flushes the EP of c and waits until it completes.
func (e *env) flush(t testing.TB, c *conn) {
	t.Helper()
	e.do(t, "ep flush", func(comp *uct.Completion) ucs.Status { return c.ep.Flush(uct.FlushFlagLocal, comp) })
}

// resetScratch makes the whole scratch memory available again.
func (e *env) resetScratch() { e.scratchNext = 0 }

// scratchBuf returns n bytes of registered local memory not handed out
// since the last resetScratch (wrapping around when it runs out).
func (e *env) scratchBuf(n int) []byte {
	if n+e.skew > len(e.scratch) {
		panic("uctest: scratch buffer of " + strconv.Itoa(n) + " bytes")
	}
	if e.scratchNext+e.skew+n > len(e.scratch) {
		e.scratchNext = 0
	}
	lo := e.scratchNext + e.skew
	b := e.scratch[lo : lo+n : lo+n]
	e.scratchNext = (lo + n + 63) &^ 63
	return b
}

// iov returns b as an iov of up to maxIOV (at least 1, at most 3) pieces
// of uneven sizes, each with the scratch memory's handle.
func (e *env) iov(b []byte, maxIOV int) []uct.IOV {
	k := min(max(maxIOV, 1), 3, max(len(b), 1))
	iov := make([]uct.IOV, 0, k)
	for i := k; i > 1; i-- {
		n := len(b) / (i + 1)
		iov = append(iov, uct.IOV{Buffer: b[:n], Memh: e.scratchMemh})
		b = b[n:]
	}
	return append(iov, uct.IOV{Buffer: b, Memh: e.scratchMemh})
}

// read returns n bytes at offset off of the target memory, read by the
// target itself.
func (e *env) read(t testing.TB, c *conn, off, n int) []byte {
	t.Helper()
	f, err := c.tgt.call(fmt.Sprintf("read %d %d", off, n))
	if err != nil {
		t.Fatal(err)
	}
	if len(f) != 1 {
		t.Fatalf("read answer %q", f)
	}
	b, err := unhexOrDash(f[0])
	if err != nil || len(b) != n {
		t.Fatalf("read %d bytes: got %d (%v)", n, len(b), err)
	}
	return b
}

// write stores b at offset off of the target memory, by the target itself.
func (e *env) write(t testing.TB, c *conn, off int, b []byte) {
	t.Helper()
	if _, err := c.tgt.call(fmt.Sprintf("write %d %s", off, hexOrDash(b))); err != nil {
		t.Fatal(err)
	}
}

// call runs a target command and fails t on error.
func (e *env) call(t testing.TB, c *conn, cmd string) []string {
	t.Helper()
	f, err := c.tgt.call(cmd)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// takeReply waits for the next active message on id and returns it.
func (e *env) takeReply(t testing.TB, id uint8) []byte {
	t.Helper()
	var r []byte
	e.waitUntil(t, fmt.Sprintf("reply on AM %d", id), func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		if q := e.replies[id]; len(q) > 0 {
			r, e.replies[id] = q[0], q[1:]
			return true
		}
		return false
	})
	return r
}

// pattern returns n bytes of a pattern that differs for every seed and
// every offset (so that a misplaced byte shows).
func pattern(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, uint64(n)))
	b := make([]byte, (n+7)&^7)
	for i := 0; i < len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b[:n:n]
}

// writePattern stores pattern(n, seed) at offset off of the target, by the
// target itself, and returns it.
func (e *env) writePattern(t testing.TB, c *conn, off, n int, seed uint64) []byte {
	t.Helper()
	e.call(t, c, fmt.Sprintf("pattern %d %d %d", off, n, seed))
	return pattern(n, seed)
}

// fill stores n bytes b at offset off of the target, by the target itself.
func (e *env) fill(t testing.TB, c *conn, off, n int, b byte) {
	t.Helper()
	e.call(t, c, fmt.Sprintf("fill %d %d %d", off, n, b))
}

// capped returns n, at most sizeCap.
func capped(n int) int { return min(n, sizeCap) }

// deviceUp reports whether the network interface dev exists and is up now.
func deviceUp(dev string) bool {
	ifi, err := net.InterfaceByName(dev)
	return err == nil && ifi.Flags&net.FlagUp != 0
}
