package uctest

import (
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// testUnreachable forges the address of an iface on another "node" (the
// target's device address with its last byte inverted; for a transport
// without device addresses, the target's iface address with its last byte
// inverted): IsReachable must say no, and EPCreate must fail, quickly, with
// ucs.ErrUnreachable, or ucs.ErrInvalidAddr where the forgery is not even
// a well-formed address of the transport (logged).
func testUnreachable(t *testing.T, e *env) {
	a := e.main.addr
	if !e.iface.IsReachable(a.devAddr, a.ifaceAdr) {
		t.Fatal("IsReachable is false for the target's own addresses")
	}
	dev, ifa := a.devAddr, a.ifaceAdr
	what := "device address with its last byte inverted"
	if len(dev) > 0 {
		dev = append([]byte(nil), dev...)
		dev[len(dev)-1] ^= 0xff
	} else {
		if len(ifa) == 0 {
			t.Skip("skipped: transport has neither device nor iface addresses to forge")
		}
		ifa = append([]byte(nil), ifa...)
		ifa[len(ifa)-1] ^= 0xff
		what = "iface address with its last byte inverted"
	}
	if e.iface.IsReachable(dev, ifa) {
		if e.devType == uct.DeviceTypeNet {
			t.Skipf("skipped: a network transport may reach a forged %s (another host); not connecting to it", what)
		}
		t.Fatalf("IsReachable is true for a forged %s", what)
	}
	var ep uct.EP
	var err error
	if !bounded(t, "EPCreate to a forged address", func() {
		ep, err = e.iface.EPCreate(&uct.EPParams{DeviceAddr: dev, IfaceAddr: ifa})
	}) {
		return
	}
	if err == nil {
		ep.Destroy()
		t.Fatalf("EPCreate to a forged %s succeeded", what)
	}
	switch {
	case errors.Is(err, ucs.ErrUnreachable):
	case errors.Is(err, ucs.ErrInvalidAddr):
		t.Logf("the forged %s is not a well-formed address of the transport: %v", what, err)
	default:
		t.Errorf("EPCreate to a forged %s: %v, want ucs.ErrUnreachable", what, err)
	}
}

// testMalformedAddr gives EPCreate and IsReachable addresses that cannot
// be decoded: both must refuse them, EPCreate with ucs.ErrInvalidAddr.
func testMalformedAddr(t *testing.T, e *env) {
	a := e.main.addr
	type addrs struct {
		name     string
		dev, ifa []byte
	}
	var tries []addrs
	if n := len(a.ifaceAdr); n > 0 {
		tries = append(tries,
			addrs{"truncated iface address", a.devAddr, a.ifaceAdr[:n-1]},
			addrs{"empty iface address", a.devAddr, nil},
			addrs{"overlong iface address", a.devAddr, append(append([]byte(nil), a.ifaceAdr...), 0)},
		)
	}
	if n := len(a.devAddr); n > 0 {
		tries = append(tries,
			addrs{"truncated device address", a.devAddr[:n-1], a.ifaceAdr},
			addrs{"overlong device address", append(append([]byte(nil), a.devAddr...), 0), a.ifaceAdr},
		)
	}
	tries = append(tries, addrs{"garbage of 3 bytes", []byte{0xde, 0xad, 0xbe}, []byte{0xef, 0x01, 0x02}})
	for _, tr := range tries {
		t.Run(strings.ReplaceAll(tr.name, " ", "_"), func(t *testing.T) {
			if e.iface.IsReachable(tr.dev, tr.ifa) {
				t.Errorf("IsReachable is true for a %s", tr.name)
			}
			var ep uct.EP
			var err error
			if !bounded(t, "EPCreate", func() { ep, err = e.iface.EPCreate(&uct.EPParams{DeviceAddr: tr.dev, IfaceAddr: tr.ifa}) }) {
				return
			}
			if err == nil {
				ep.Destroy()
				t.Fatalf("EPCreate with a %s succeeded", tr.name)
			}
			if !errors.Is(err, ucs.ErrInvalidAddr) {
				t.Errorf("EPCreate with a %s: %v, want ucs.ErrInvalidAddr", tr.name, err)
			}
		})
	}
}

// opLimit bounds one call in the error cases, and the wait for the
// completion of an operation that answered InProgress.
const opLimit = 5 * time.Second

// bounded runs f with faults turned into panics, and reports whether it
// returned normally within opLimit; a panic, a fault or a hang fails t.
func bounded(t testing.TB, what string, f func()) bool {
	t.Helper()
	done := make(chan any, 1)
	go func() {
		debug.SetPanicOnFault(true)
		defer func() { done <- recover() }()
		f()
	}()
	select {
	case p := <-done:
		if p != nil {
			t.Errorf("%s panicked: %v", what, p)
			return false
		}
		return true
	case <-time.After(opLimit):
		t.Errorf("%s did not return in %v", what, opLimit)
		return false
	}
}

// outcome runs op once, bounded, and describes what it returned, waiting
// up to opLimit (with progress) for the completion of an operation that
// answered InProgress. It returns the description and whether the call
// hung or panicked (which t already reported).
func (e *env) outcome(t testing.TB, what string, op func(*uct.Completion) ucs.Status) (string, bool) {
	t.Helper()
	var st ucs.Status
	c := newCompletion()
	if !bounded(t, what, func() { st = op(&c.Completion) }) {
		return "hung or panicked", false
	}
	if st != ucs.InProgress {
		return st.String(), true
	}
	var desc string
	ok := bounded(t, what+" completion wait", func() {
		deadline := time.Now().Add(opLimit - 500*time.Millisecond)
		for !c.done.Load() && time.Now().Before(deadline) {
			e.progress()
		}
		if c.done.Load() {
			desc = "InProgress, then completed with " + c.Status().String()
		} else {
			desc = "InProgress, not completed after " + (opLimit - 500*time.Millisecond).String()
		}
	})
	return desc, ok
}

// opsOn returns the operations the error cases try on c, each with its
// name, for the capabilities the transport claims.
func (e *env) opsOn(c *conn) []namedOp {
	raddr, rkey := c.base+uint64(rmaOff), c.rkey.Rkey
	data := pattern(64, 1000)
	var ops []namedOp
	addIf := func(n need, name string, op func(*uct.Completion) ucs.Status) {
		if n.flag == 0 || e.claims(n) {
			ops = append(ops, namedOp{name, op})
		}
	}
	for _, m := range []method{short, bcopy, zcopy} {
		if e.maxPut(m) >= len(data) {
			addIf(putNeed[m], "put "+m.String(), e.putOp(c, m, rmaOff, data))
		}
	}
	addIf(needGetBcopy, "get bcopy", func(comp *uct.Completion) ucs.Status {
		return c.ep.GetBcopy(func([]byte) {}, 64, raddr, rkey, comp)
	})
	buf := e.scratchBuf(64)
	addIf(needGetZcopy, "get zcopy", func(comp *uct.Completion) ucs.Status {
		return c.ep.GetZcopy([]uct.IOV{{Buffer: buf, Memh: e.scratchMemh}}, raddr, rkey, comp)
	})
	for _, m := range e.amMethods() {
		if e.maxAM(m) >= len(data) {
			addIf(amNeed[m], "AM "+m.String(), e.amOp(c, m, amSink, data))
		}
	}
	if e.attr.Atomic64.OpFlags&uct.AtomicOpAdd.OpMask() != 0 {
		addIf(need{}, "atomic post add 64", func(*uct.Completion) ucs.Status {
			return c.ep.AtomicPost64(uct.AtomicOpAdd, 1, c.base+atomicOff, rkey)
		})
	}
	if e.attr.Atomic64.FopFlags&uct.AtomicOpAdd.OpMask() != 0 {
		var r uint64
		addIf(need{}, "atomic fetch add 64", func(comp *uct.Completion) ucs.Status {
			return c.ep.AtomicFetch64(uct.AtomicOpAdd, 1, c.base+atomicOff, rkey, &r, comp)
		})
	}
	addIf(need{}, "ep fence", func(*uct.Completion) ucs.Status { return c.ep.Fence(0) })
	addIf(need{}, "ep flush", func(comp *uct.Completion) ucs.Status { return c.ep.Flush(uct.FlushFlagLocal, comp) })
	return ops
}

// namedOp is an operation with a name for reports.
type namedOp struct {
	name string
	op   func(*uct.Completion) ucs.Status
}

// testDestroyedEP destroys an EP and then calls every claimed operation on
// it: none may crash or hang. What each returns is logged (the uct API
// leaves it undefined).
func testDestroyedEP(t *testing.T, e *env) {
	c := e.main
	if !e.inProcess {
		// A connection of its own, so that the destroyed EP is the only one
		// to its peer and nothing else keeps the peer's resources mapped.
		var err error
		if c, err = e.connect(t); err != nil {
			t.Fatalf("connect to a new peer: %v", err)
		}
		defer e.release(t, c)
	}
	ep, err := e.iface.EPCreate(&uct.EPParams{DeviceAddr: c.addr.devAddr, IfaceAddr: c.addr.ifaceAdr})
	if err != nil {
		t.Fatalf("ep create: %v", err)
	}
	if !e.inProcess {
		c.ep.Destroy() // the EP that connect made: ep is now the only one
		c.ep = nil
	}
	dc := *c
	dc.ep = ep
	if !bounded(t, "Destroy", ep.Destroy) {
		return
	}
	var report []string
	for _, o := range e.opsOn(&dc) {
		desc, _ := e.outcome(t, o.name+" after Destroy", o.op)
		report = append(report, fmt.Sprintf("%-20s %s", o.name, desc))
	}
	bounded(t, "PendingPurge after Destroy", func() { ep.PendingPurge(nil) })
	t.Logf("operations on a destroyed EP:\n\t%s", strings.Join(report, "\n\t"))
}

// testKilledPeer connects to a new peer, kills it with SIGKILL, and then
// calls every claimed operation on the EP, and flushes: nothing may hang or
// crash. What each returns is logged: memory-mapped transports keep
// answering OK (the dead peer's memory stays mapped here), connected ones
// should fail.
func testKilledPeer(t *testing.T, e *env) {
	if e.inProcess {
		t.Skip("skipped: the target of a loopback transport is this process")
	}
	c, err := e.connect(t)
	if err != nil {
		t.Fatalf("connect to a new peer: %v", err)
	}
	defer e.release(t, c)
	before := e.errCalls.Load()
	want := pattern(64, 1100)
	if ms := e.claimedPuts(); len(ms) > 0 {
		e.put(t, c, ms[0], rmaOff, want)
		e.flush(t, c)
		e.checkMem(t, c, "put before the kill", rmaOff, want)
	} else if ms := e.amMethods(); len(ms) > 0 {
		e.echo(t, c, ms[0], want)
	}
	if err := c.tgt.kill(); err != nil {
		t.Fatal(err)
	}
	var report []string
	for round := range 2 {
		for _, o := range e.opsOn(c) {
			desc, ok := e.outcome(t, o.name+" after the peer was killed", o.op)
			if !ok {
				return
			}
			report = append(report, fmt.Sprintf("round %d: %-20s %s", round, o.name, desc))
			if strings.Contains(desc, "not completed") {
				t.Errorf("%s after the peer was killed: %s", o.name, desc)
			}
		}
	}
	// Fill whatever queue the dead peer left: sends must keep returning.
	if ms := e.amMethods(); len(ms) > 0 {
		counts := map[string]int{}
		op := e.amOp(c, ms[0], amSink, pattern(16, 1101))
		if !bounded(t, "1000 AMs to the killed peer", func() {
			for range 1000 {
				counts[op(newCompletionPtr()).String()]++
				e.progress()
			}
		}) {
			return
		}
		report = append(report, fmt.Sprintf("1000 AM %s: %v", ms[0], counts))
	}
	desc, _ := e.outcome(t, "iface flush after the peer was killed", func(comp *uct.Completion) ucs.Status {
		return e.iface.Flush(uct.FlushFlagLocal, comp)
	})
	report = append(report, "iface flush: "+desc)
	var ep uct.EP
	if bounded(t, "EPCreate to the killed peer", func() {
		ep, err = e.iface.EPCreate(&uct.EPParams{DeviceAddr: c.addr.devAddr, IfaceAddr: c.addr.ifaceAdr})
	}) {
		if err == nil {
			report = append(report, "EPCreate to the dead peer's address: succeeded")
			ep.Destroy()
		} else {
			report = append(report, "EPCreate to the dead peer's address: "+err.Error())
		}
	}
	var rk uct.RkeyBundle
	if bounded(t, "RkeyUnpack of the killed peer's key", func() { rk, err = e.comp.RkeyUnpack(c.addr.key) }) {
		if err == nil {
			report = append(report, "RkeyUnpack of the dead peer's key: succeeded")
			e.comp.RkeyRelease(rk)
		} else {
			report = append(report, "RkeyUnpack of the dead peer's key: "+err.Error())
		}
	}
	// A transport that claims to detect peer failures reports this one to
	// the iface's error handler from progress.
	claimsPeerDown := e.attr.Flags&uct.IfaceFlagErrhandlePeerDown != 0
	if claimsPeerDown {
		deadline := time.Now().Add(opLimit)
		for e.errCalls.Load() == before && time.Now().Before(deadline) {
			e.progress()
		}
		if e.errCalls.Load() == before {
			t.Errorf("transport claims errhandle_peer_failure, but its error handler was not called in %v after the peer was killed", opLimit)
		}
	} else {
		for range 100 {
			e.progress()
		}
	}
	report = append(report, fmt.Sprintf("iface error handler calls: %d (last status %v; errhandle_peer_failure claimed: %v)",
		e.errCalls.Load()-before, ucs.Status(e.lastErr.Load()), claimsPeerDown))
	t.Logf("after SIGKILL of the peer:\n\t%s", strings.Join(report, "\n\t"))
}

// newCompletionPtr returns the uct.Completion of a new completion.
func newCompletionPtr() *uct.Completion { return &newCompletion().Completion }

// testRemoteMem checks what IfaceFlagErrhandleRemoteMem promises, on
// transports that claim it (on the others an access outside the key may
// land in the target's memory, so it is not tried): a get or a fetching
// atomic across the end of the target memory's key fails, and a put
// across it leaves the memory untouched.
func testRemoteMem(t *testing.T, e *env) {
	if e.attr.Flags&uct.IfaceFlagErrhandleRemoteMem == 0 {
		t.Skipf("skipped: transport does not claim errhandle_remote_mem (flags %#x)", e.attr.Flags)
	}
	c := e.main
	off := c.size - 8 // 8 bytes inside the key, then 8 outside
	want := pattern(8, 77)
	e.write(t, c, off, want)
	for _, m := range e.claimedGets() {
		if n := min(16, e.maxGet(m)); n > 8 {
			st := e.try(t, "get across the end of the key", e.getOp(c, m, off, make([]byte, n)))
			if !st.IsErr() {
				t.Errorf("get %s of %d bytes across the end of the key: %v, want an error", m, n, st)
			}
		}
	}
	if e.attr.Atomic64.FopFlags&uct.AtomicOpAdd.OpMask() != 0 {
		var old uint64
		st := e.try(t, "fetch-add past the end of the key", func(comp *uct.Completion) ucs.Status {
			return c.ep.AtomicFetch64(uct.AtomicOpAdd, 1, c.base+uint64(c.size), c.rkey.Rkey, &old, comp)
		})
		if !st.IsErr() {
			t.Errorf("fetch-add past the end of the key: %v, want an error", st)
		}
	}
	for _, m := range e.claimedPuts() {
		if n := min(16, e.maxPut(m)); n > 8 {
			e.try(t, "put across the end of the key", e.putOp(c, m, off, pattern(n, 78)))
			e.try(t, "ep flush", func(comp *uct.Completion) ucs.Status { return c.ep.Flush(uct.FlushFlagLocal, comp) })
			if gets := e.claimedGets(); len(gets) > 0 {
				// The target answers this get after it handled the put.
				e.get(t, c, gets[0], off, 8)
			}
			e.checkMem(t, c, fmt.Sprintf("after a put %s of %d bytes across the end of the key", m, n), off, want)
		}
	}
}
