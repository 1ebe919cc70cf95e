package rpc

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/goshmem/goshmem/internal/hooks"
	"github.com/goshmem/goshmem/shmem"
	"github.com/goshmem/goshmem/ucp"
	"github.com/goshmem/goshmem/ucs"
)

// amID is the active-message id of every message of this package.
const amID = shmem.FirstUserAMID

// Options tune Start.
type Options struct {
	// SurvivePeerFailure makes the failure of another PE complete the
	// calls outstanding to it with ErrPeerFailed (and fail the later ones
	// at once) instead of ending this PE, as package shmem does by
	// default. The program then must not use shmem's collectives with the
	// failed PE, which would wait for it. goshmem-run still ends the job
	// when a PE fails: it sends the other PEs SIGTERM, and SIGKILL after
	// its kill grace (-kill-grace, 2s by default). The notice of the
	// failure reaches this PE about when SIGTERM does, so a program that
	// reports or saves what its failed calls leave catches SIGTERM
	// (os/signal) to have the kill grace for it.
	SurvivePeerFailure bool
}

// rt is the state of the package on this PE, set by Start.
var rt struct {
	started atomic.Bool
	me, n   int
	w       *ucp.Worker
	multi   bool // the worker serves any goroutine (shmem.ThreadMultiple)
	maxHdr  int  // the largest active-message header
	eps     []atomic.Pointer[ucp.Endpoint]
	survive bool
	remove  func() // removes the peer-failure hook
	progID  int    // of progress on the worker

	// mu guards sends, quietWait and arrived at ThreadMultiple (see lock).
	mu sync.Mutex

	// pend are the calls waiting for their reply, by call id.
	pend pendTable

	// queue holds messages of goroutines that may not use the worker
	// (below ThreadMultiple), sent at the next progress.
	qn     atomic.Int32
	qmu    sync.Mutex
	queue  []queued
	qspare []queued

	// sbuf is the buffer of the messages sent below ThreadMultiple by the
	// goroutine that may use the worker (msgBuf), sbusy says it is in
	// use.
	sbuf  []byte
	sbusy bool

	// sends are the messages whose data the transport still reads;
	// nsends their number, which progress reads without the lock.
	sends  []heldSend
	nsends atomic.Int32

	// dead holds the cause of each PE that failed; failed says that some
	// calls may have to fail.
	dead   []atomic.Pointer[error]
	failed atomic.Bool

	// touched marks the PEs this PE sent calls without reply to since
	// the last Barrier, which Barrier makes sure were served.
	touched []atomic.Bool
}

// running counts the Goroutine handlers that have not returned.
var running atomic.Int64

// goHandler runs fn, a Goroutine handler's work, on a goroutine of its
// own, counted in running.
func goHandler(fn func()) {
	running.Add(1)
	w := rt.w // a later Start may set rt.w while the handler runs
	go func() {
		defer func() {
			// The last handler to return may release Quiet's replies,
			// which progress sends.
			if running.Add(-1) == 0 && nquiet.Load() != 0 {
				w.Wake()
			}
		}()
		fn()
	}()
}

type queued struct {
	pe int
	b  *[]byte
}

type heldSend struct {
	r *ucp.Request
	b *[]byte
}

// completer is a call waiting for its reply (a *Future).
type completer interface {
	complete(kind uint8, payload []byte)
	fail(err error)
	target() int
}

var eagerParam = new(ucp.RequestParam).SetAMSendFlags(ucp.AMSendFlagEager)

// Start makes this PE serve calls and lets it make them. It is a
// collective of the job's PEs, after shmem.Init: it installs the handler
// of the package's messages on the job's worker and waits for every PE to
// have done so (shmem.BarrierAll), so that no call reaches a PE that
// would drop it. It fails before shmem.Init and when started already.
func Start(o Options) error {
	w := shmem.Worker()
	if w == nil {
		return fmt.Errorf("rpc.Start: shmem is not initialized")
	}
	if rt.started.Load() {
		return fmt.Errorf("rpc.Start: started already")
	}
	var attr ucp.WorkerAttr
	attr.FieldMask = ucp.WorkerAttrFieldMaxAMHeader | ucp.WorkerAttrFieldThreadMode
	if err := w.QueryAttr(&attr); err != nil {
		return fmt.Errorf("rpc.Start: %w", err)
	}
	rt.me, rt.n, rt.w = shmem.MyPE(), shmem.NPEs(), w
	rt.multi = attr.ThreadMode == ucs.ThreadModeMulti
	rt.maxHdr = attr.MaxAMHeader
	rt.eps = make([]atomic.Pointer[ucp.Endpoint], rt.n)
	rt.dead = make([]atomic.Pointer[error], rt.n)
	rt.touched = make([]atomic.Bool, rt.n)
	rt.failed.Store(false)
	rt.survive = o.SurvivePeerFailure
	if err := w.SetAMRecvHandler(new(ucp.AMHandlerParam).SetID(amID).SetCB(recv)); err != nil {
		return fmt.Errorf("rpc.Start: %w", err)
	}
	rt.remove = shmem.OnPeerFailure(peerFailed)
	rt.progID = w.ProgressRegister(progress)
	rt.started.Store(true)
	registerInternal()
	shmem.BarrierAll()
	return nil
}

// Stop ends what Start began, before shmem.Finalize. It is a collective
// of the job's PEs: it flushes the aggregators and waits, in Barrier,
// for every PE's calls to have been served, calls the functions of
// OnStop, then removes the handler and leaves nothing behind: calls still
// outstanding fail with ErrNotStarted, every aggregator is closed (its
// Go fails with ErrClosed), and replies that Goroutine handlers still
// running send later are dropped.
func Stop() {
	if !rt.started.Load() {
		return
	}
	Barrier()
	// Goroutine handlers still running use the package's state, which a
	// later Start sets again: let them return (their replies are sent
	// by progress, or dropped below).
	for running.Load() != 0 {
		rt.w.Progress()
		runtime.Gosched()
	}
	for _, fn := range stopHooks.All() {
		fn()
	}
	rt.w.SetAMRecvHandler(new(ucp.AMHandlerParam).SetID(amID))
	rt.w.ProgressUnregister(rt.progID)
	rt.remove()
	rt.started.Store(false)
	for _, c := range rt.pend.takeIf(func(completer) bool { return true }) {
		c.fail(ErrNotStarted)
	}
	closeAggregators()
	dropQueue()
	reapSends(true)
	lock(&rt.mu)
	clear(quietWait)
	clear(arrived)
	quietWait, arrived = quietWait[:0], arrived[:0]
	nquiet.Store(0)
	unlock(&rt.mu)
	rt.failed.Store(false)
}

// stopHooks are the functions OnStop registered.
var stopHooks hooks.Set[func()]

// OnStop registers fn, which every Stop calls on this PE once every PE's
// calls were served (after its Barrier, so fn may not wait for other
// PEs) and before the package stops: a library built on this package drops
// there what it kept for the time the package ran (package dist: its
// objects). The returned function removes the registration.
func OnStop(fn func()) (remove func()) { return stopHooks.Add(fn) }

// Progress progresses this PE's calls: it serves the calls that arrived,
// completes the futures whose reply came, and sends what Goroutine
// handlers handed over, and returns the number of events handled. It
// progresses the job's worker (shmem.Worker), as every blocking routine of
// shmem does, so a PE that waits in shmem serves calls too; one that
// computes long without calling into this package or shmem calls it now
// and then, so that it serves the calls of the others. It returns 0 when
// the package is not started.
func Progress() int {
	if !rt.started.Load() {
		return 0
	}
	return rt.w.Progress()
}

// progress is the package's callback in the progress of the worker
// (ucp.Worker.ProgressRegister): whatever progresses this PE (a wait of
// this package, any blocking routine of shmem, Progress) sends what
// Goroutine handlers handed over, takes back the buffers of sends that
// completed, fails the calls to PEs that failed, and sends Quiet's replies
// that waited for Goroutine handlers. With nothing to do it only loads a
// few counters.
func progress() int {
	n := 0
	if rt.qn.Load() != 0 {
		n += drainQueue()
	}
	if rt.nsends.Load() != 0 {
		reapSends(false)
	}
	if rt.failed.Load() {
		n += failDead()
	}
	if nquiet.Load() != 0 {
		n += releaseQuiet()
	}
	return n
}

// idle gives the processor away in a wait loop that made no progress.
func idle() { rt.w.Idle() }

// endpoint returns the endpoint to pe.
func endpoint(pe int) (*ucp.Endpoint, error) {
	if ep := rt.eps[pe].Load(); ep != nil {
		return ep, nil
	}
	ep, err := shmem.Endpoint(pe)
	if err != nil {
		return nil, err
	}
	rt.eps[pe].Store(ep)
	return ep, nil
}

// send sends the message in b (header, then payload) to pe, and takes b
// back when it is free. It must be called by a goroutine that may use the
// worker.
func send(pe int, b *[]byte) error {
	ep, err := endpoint(pe)
	if err != nil {
		putBuf(b)
		return err
	}
	msg := *b
	var r *ucp.Request
	if len(msg) <= rt.maxHdr {
		// The header is copied before AMSendNBX returns.
		r, err = ep.AMSendNBX(amID, msg, nil, eagerParam)
		if r != nil {
			r.Free()
		}
		putBuf(b)
		return err
	}
	r, err = ep.AMSendNBX(amID, msg[:hdrLen], msg[hdrLen:], eagerParam)
	if err != nil || r == nil {
		putBuf(b)
		return err
	}
	if b == &rt.sbuf {
		// The transport reads the data until the send completes: it
		// keeps this memory, and the PE's own buffer takes another.
		h := getBuf()
		*h, rt.sbuf = msg, (*h)[:0]
		putBuf(b)
		b = h
	}
	lock(&rt.mu)
	rt.sends = append(rt.sends, heldSend{r, b})
	rt.nsends.Store(int32(len(rt.sends)))
	unlock(&rt.mu)
	return nil
}

// reapSends takes back the buffers of sends that completed (all, when
// all is set: the worker is going away, or was flushed).
func reapSends(all bool) {
	lock(&rt.mu)
	defer unlock(&rt.mu)
	k := 0
	for _, s := range rt.sends {
		if all || s.r.IsCompleted() {
			s.r.Free()
			putBuf(s.b)
			continue
		}
		rt.sends[k] = s
		k++
	}
	clear(rt.sends[k:])
	rt.sends = rt.sends[:k]
	rt.nsends.Store(int32(k))
}

// sendOrQueue sends b to pe now, or, from a goroutine that may not use the
// worker (async below ThreadMultiple), hands it to the next progress.
func sendOrQueue(pe int, b *[]byte, async bool) {
	if !rt.started.Load() {
		putBuf(b) // a reply after Stop: its call failed at its caller
		return
	}
	if async && !rt.multi {
		rt.qmu.Lock()
		rt.queue = append(rt.queue, queued{pe, b})
		rt.qn.Add(1)
		rt.qmu.Unlock()
		rt.w.Wake() // a waiter that sleeps in Idle progresses now
		return
	}
	if err := send(pe, b); err != nil {
		// A reply that cannot go: its caller learns of the failure from
		// its own side (peer failure), so only log it.
		logf("rpc: PE %d: reply to PE %d: %v", rt.me, pe, err)
	}
}

func drainQueue() int {
	rt.qmu.Lock()
	q := rt.queue
	rt.queue, rt.qspare = rt.qspare[:0], nil
	rt.qn.Store(0)
	rt.qmu.Unlock()
	for _, m := range q {
		if err := send(m.pe, m.b); err != nil {
			logf("rpc: PE %d: reply to PE %d: %v", rt.me, m.pe, err)
		}
	}
	clear(q)
	rt.qmu.Lock()
	if rt.qspare == nil {
		rt.qspare = q[:0]
	}
	rt.qmu.Unlock()
	return len(q)
}

// dropQueue drops what Goroutine handlers handed over and no progress
// sent (at Stop).
func dropQueue() {
	rt.qmu.Lock()
	for _, m := range rt.queue {
		putBuf(m.b)
	}
	clear(rt.queue)
	rt.queue = rt.queue[:0]
	rt.qn.Store(0)
	rt.qmu.Unlock()
}

func logf(format string, args ...any) {
	ucs.DefaultLogger().Logf(ucs.LogWarn, format, args...)
}

// recv handles a message of the package, from the worker's progress.
func recv(_ any, header, data []byte, p *ucp.AMRecvParam) ucs.Status {
	if len(header) < hdrLen || p.RecvAttr&ucp.AMRecvAttrFlagRNDV != 0 {
		return ucs.OK // not of ours: every message is eager
	}
	kind := header[0]
	src := int(binary.LittleEndian.Uint32(header[4:]))
	fnid := binary.LittleEndian.Uint64(header[8:])
	callid := binary.LittleEndian.Uint64(header[16:])
	payload := data
	if len(header) > hdrLen {
		payload = header[hdrLen:]
	}
	if src >= rt.n {
		return ucs.OK
	}
	switch kind {
	case kindCall, kindGo:
		e := lookup(fnid)
		if e == nil {
			if kind == kindCall {
				replyRaw(src, kindReplyUnknown, callid, nil, false)
			} else {
				logf("rpc: PE %d: a call without reply from PE %d to a function not registered here (id %#x) was dropped", rt.me, src, fnid)
			}
			return ucs.OK
		}
		e.serve(src, kind, callid, payload)
	case kindBatch:
		serveBatch(src, fnid, callid, payload)
	default:
		if c := rt.pend.take(callid); c != nil {
			c.complete(kind, payload)
		}
	}
	return ucs.OK
}

// peerFailed is the hook of shmem.OnPeerFailure: it marks pe dead, for
// the next progress to fail the calls to it.
func peerFailed(pe int, cause error) bool {
	if !rt.survive || pe < 0 || pe >= len(rt.dead) {
		return false
	}
	rt.dead[pe].Store(&cause)
	rt.failed.Store(true) // a waiter's Idle sleeps a bounded time: it sees this
	return true
}

// failDead completes the calls outstanding to PEs that failed.
func failDead() int {
	rt.failed.Store(false)
	fail := rt.pend.takeIf(func(c completer) bool { return rt.dead[c.target()].Load() != nil })
	for _, c := range fail {
		c.fail(fmt.Errorf("%w: %w", ErrPeerFailed, *rt.dead[c.target()].Load()))
	}
	return len(fail)
}

// deadErr returns the error of a call to pe when it failed, or nil.
func deadErr(pe int) error {
	if c := rt.dead[pe].Load(); c != nil {
		return fmt.Errorf("%w: %w", ErrPeerFailed, *c)
	}
	return nil
}
