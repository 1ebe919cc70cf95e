package ucp

import (
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// Peer failures (error handling mode PEER).
//
// An endpoint created with ErrHandlingModePeer fails when its peer is found
// gone, in one of two ways, as in UCX:
//
//   - a transport reports it: the iface error handler, which every
//     interface of a worker is opened with (laneErrHandler), is called for
//     one of the endpoint's lanes (tcp: the connection was reset or closed,
//     the peer process died);
//   - the keepalive finds it: a goroutine of the worker checks, every
//     UCX_KEEPALIVE_INTERVAL, the lanes whose transport implements
//     uct.EPChecker (shared memory: does the peer process still run?).
//
// Failing marks the endpoint at once (later operations return the error
// without doing anything, and loops that wait for the transport give up)
// and queues it for the worker; the next Worker.Progress, from whatever
// goroutine, completes the endpoint's outstanding requests with the error
// (those queued for transport resources, and the software gets, atomics and
// flushes waiting for a reply) and then calls the endpoint's error handler,
// once. Requests a transport holds itself are completed by it (tcp
// completes them with the EP's error).
//
// Endpoints in mode NONE are never marked: what happens to them after a
// failure is what the transports do.

// failState is a worker's bookkeeping of failed endpoints and its
// keepalive.
type failState struct {
	mu      sync.Mutex
	eps     []*Endpoint // failed, not handled by Progress yet
	pending atomic.Bool // eps is not empty
	kaStop  chan struct{}
	kaDone  chan struct{}
	// kaCPUs is the affinity the keepalive goroutine's thread got after
	// applying the worker's CPU mask (for tests), or nil.
	kaCPUs atomic.Pointer[unix.CPUSet]
}

// setFailed fails the endpoint with st, once: it records the status,
// queues the endpoint for the worker's Progress and wakes the worker's
// waiters. It returns false when the endpoint had failed already. It is
// safe from any goroutine and calls no user code.
func (ep *Endpoint) setFailed(st ucs.Status) bool {
	if !st.IsErr() {
		st = ucs.ErrConnectionReset
	}
	if !ep.failStatus.CompareAndSwap(0, int32(st)) {
		return false
	}
	w := ep.w
	w.fail.mu.Lock()
	w.fail.eps = append(w.fail.eps, ep)
	w.fail.pending.Store(true)
	w.fail.mu.Unlock()
	w.notify()
	return true
}

// handleFailures completes the outstanding requests of the endpoints that
// failed since the last call and calls their error handlers; it returns how
// many endpoints it handled. It runs from Progress, with no ucp lock held.
func (w *Worker) handleFailures() int {
	w.fail.mu.Lock()
	eps := w.fail.eps
	w.fail.eps = nil
	w.fail.pending.Store(false)
	w.fail.mu.Unlock()
	for _, ep := range eps {
		st := ucs.Status(ep.failStatus.Load())
		ep.purge(st)
		h := ep.params.ErrHandler
		if h != nil && ep.params.FieldMask&EPParamFieldErrHandler != 0 && !ep.closing.Load() {
			h(ep.params.UserData, ep, st)
		}
	}
	return len(eps)
}

// purge completes, with st, every request of the endpoint that waits for
// transport resources on one of its lanes or for a software reply.
func (ep *Endpoint) purge(st ucs.Status) {
	for _, l := range ep.lanesSnapshot() {
		l.purgePending(st)
	}
	ep.w.sw.failEP(ep, st)
	ep.w.protoPurge(ep, st)
	ep.w.tagFailEP(ep, st)
	ep.w.protoFailEP(ep, st)
	ep.w.streamFailEP(ep, st)
	ep.w.amFailEP(ep, st)
}

// purgePending completes with st the requests queued on the lane for
// transport resources.
func (l *lane) purgePending(st ucs.Status) {
	l.sendMu.mu.Lock()
	reqs := l.takePendingLocked()
	l.sendMu.mu.Unlock()
	for _, r := range reqs {
		r.complete(st)
	}
}

// takePendingLocked removes the requests queued on the lane for transport
// resources and returns them; l.sendMu is held.
func (l *lane) takePendingLocked() []*Request {
	if l.destroyed {
		return nil
	}
	var reqs []*Request
	l.ep.PendingPurge(func(p *uct.PendingReq) {
		if r, ok := p.Arg.(*Request); ok {
			reqs = append(reqs, r)
		}
	})
	return reqs
}

// laneErrHandler is the iface error handler of every interface of a
// worker (arg): a transport calls it, from its progress, when one of its
// EPs failed. The endpoint that has the EP as a lane fails if it is in
// error mode PEER.
func laneErrHandler(arg any, uep uct.EP, st ucs.Status) {
	w := arg.(*Worker)
	if ep := w.epOfLane(uep); ep != nil && ep.params.ErrMode == ErrHandlingModePeer {
		ep.setFailed(st)
	}
}

// epOfLane returns the endpoint of the worker that has uep as a lane, or
// nil.
func (w *Worker) epOfLane(uep uct.EP) *Endpoint {
	w.epMu.Lock()
	eps := append([]*Endpoint(nil), w.eps...)
	w.epMu.Unlock()
	for _, ep := range eps {
		for _, l := range ep.lanesSnapshot() {
			if l.ep == uep {
				return ep
			}
		}
	}
	return nil
}

// startKeepalive starts the worker's keepalive goroutine, once, unless
// UCX_KEEPALIVE_INTERVAL is inf or 0 or the worker is destroyed.
func (w *Worker) startKeepalive() {
	iv := w.ctx.keepalive
	if iv <= 0 || iv == time.Duration(1<<63-1) {
		return
	}
	w.fail.mu.Lock()
	defer w.fail.mu.Unlock()
	if w.fail.kaStop != nil || w.closed.Load() {
		return
	}
	w.fail.kaStop, w.fail.kaDone = make(chan struct{}), make(chan struct{})
	go w.keepalive(iv, w.fail.kaStop, w.fail.kaDone)
}

// stopKeepalive ends the keepalive goroutine, if any, and waits for it.
func (w *Worker) stopKeepalive() {
	w.fail.mu.Lock()
	stop, done := w.fail.kaStop, w.fail.kaDone
	w.fail.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}

// keepalive checks the peers of the worker's PEER endpoints every
// interval until stop is closed. With a CPU mask it runs on a locked OS
// thread bound to the mask's CPUs (the thread ends with the goroutine, so
// the binding never reaches other goroutines).
func (w *Worker) keepalive(interval time.Duration, stop, done chan struct{}) {
	defer close(done)
	if len(w.cpuMask) > 0 {
		got, err := ucs.BindThread(w.cpuMask)
		if err != nil {
			w.warnf("ucp: worker %s: CPU mask not applied to its keepalive thread: %v", w.name, err)
		} else {
			w.fail.kaCPUs.Store(&got)
		}
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			w.checkPeers()
		}
	}
}

// checkPeers checks every lane of the worker's live PEER endpoints whose
// transport can check its peer, and fails the endpoints whose peer is gone.
func (w *Worker) checkPeers() {
	w.epMu.Lock()
	eps := append([]*Endpoint(nil), w.eps...)
	w.epMu.Unlock()
	for _, ep := range eps {
		if ep.params.ErrMode != ErrHandlingModePeer || ep.dead() != ucs.OK {
			continue
		}
		for _, l := range ep.lanesSnapshot() {
			if st := l.check(); st.IsErr() {
				ep.setFailed(st)
				break
			}
		}
	}
}

// check runs the lane transport's peer check, if it has one, unless the
// lane was destroyed.
func (l *lane) check() ucs.Status {
	c, ok := l.ep.(uct.EPChecker)
	if !ok {
		return ucs.OK
	}
	l.sendMu.mu.Lock()
	defer l.sendMu.mu.Unlock()
	if l.destroyed {
		return ucs.OK
	}
	return c.Check(0, nil)
}
