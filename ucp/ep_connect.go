package ucp

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// A client-server endpoint is returned by NewEndpoint at once, connecting,
// as UCX's is: the handshake with the listener runs in a goroutine, and
// the worker's Progress wires the endpoint's lanes once the server
// accepted (on the goroutine that progresses the worker, as every wireup).
// Meanwhile, sends and flushes (tag, stream, active messages, flush and
// close) return a request at once and start, in the order they were
// issued, when the endpoint is wired: the request completes when the
// operation it stands for does, or with the connection's error. Calls that
// need the wired endpoint to answer (RkeyUnpack, stream receives, Fence)
// progress the worker until it is. When the connection fails, the waiting
// operations complete with its error and later ones fail with it; in error
// mode PEER the endpoint fails as on the loss of a peer (its error handler
// is called from Progress).

// csConnects are the worker's client-server endpoints that connect.
type csConnects struct {
	mu     sync.Mutex
	eps    []*Endpoint
	done   atomic.Bool // a handshake ended: Progress has an endpoint to settle
	progID int         // the progress callback's, while eps is not empty
}

// add records the connecting endpoint ep.
func (cs *csConnects) add(w *Worker, ep *Endpoint) error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if w.closed.Load() {
		return fmt.Errorf("ucp ep create: %w", ErrClosed)
	}
	cs.eps = append(cs.eps, ep)
	if cs.progID == 0 {
		cs.progID = w.uw.ProgressRegister(w.csProgress)
	}
	return nil
}

// remove forgets ep; the caller holds cs.mu.
func (cs *csConnects) removeLocked(w *Worker, ep *Endpoint) {
	for i, e := range cs.eps {
		if e == ep {
			cs.eps = append(cs.eps[:i], cs.eps[i+1:]...)
			break
		}
	}
	if len(cs.eps) == 0 && cs.progID != 0 {
		w.uw.ProgressUnregister(cs.progID)
		cs.progID = 0
	}
}

// abortAll closes the endpoints that still connect (Worker.Destroy).
func (cs *csConnects) abortAll() {
	cs.mu.Lock()
	eps := append([]*Endpoint(nil), cs.eps...)
	cs.mu.Unlock()
	for _, ep := range eps {
		ep.closeNow(ucs.ErrCanceled)
	}
}

// csProgress settles the endpoints whose handshake ended: it wires them,
// or fails them. It returns how many it settled.
func (w *Worker) csProgress() int {
	cs := &w.cs
	if !cs.done.Swap(false) {
		return 0
	}
	var ready []*Endpoint
	cs.mu.Lock()
	for i := 0; i < len(cs.eps); {
		ep := cs.eps[i]
		if st := ep.conn.Load(); st != nil && st.hasFinished() {
			ready = append(ready, ep)
			cs.removeLocked(w, ep)
			continue
		}
		i++
	}
	cs.mu.Unlock()
	for _, ep := range ready {
		ep.settle()
	}
	return len(ready)
}

// epConnect is the state of a client-server endpoint that connects, or
// whose connection failed.
type epConnect struct {
	sa       netip.AddrPort
	mu       sync.Mutex
	cmep     uct.CMEP // the connection manager's EP
	dev      string   // the network device of the last connection, or ""
	aborted  bool     // the endpoint was closed: cmep is destroyed
	finished bool     // the handshake ended, with acc or err
	acc      *csAccepted
	err      error
	settled  bool  // wired or failed: operations no longer wait
	failErr  error // the connection failed with it
	deferred []deferredOp
}

// csAccepted is what a client needs from an accepted handshake to wire its
// endpoint and confirm.
type csAccepted struct {
	ra  *workerAddress
	dev string
}

// deferredOp is an operation issued on an endpoint that connects; proxy
// is the request its caller got.
type deferredOp struct {
	proxy *Request
	param RequestParam
	start func(*RequestParam) (*Request, error)
	close bool // a close: the endpoint closes even if the connection fails
}

// setCMEP records the connection manager's EP once it is created; an
// endpoint closed meanwhile destroys it.
func (st *epConnect) setCMEP(cmep uct.CMEP) {
	st.mu.Lock()
	st.cmep = cmep
	aborted := st.aborted
	st.mu.Unlock()
	if aborted {
		cmep.Destroy()
	}
}

// setDev records the network device of the connection the connection
// manager made (it packs the private data for it).
func (st *epConnect) setDev(dev string) {
	st.mu.Lock()
	st.dev = dev
	st.mu.Unlock()
}

// finish records the handshake's end, as the connection manager reports
// it, and tells the worker.
func (st *epConnect) finish(w *Worker, cmep uct.CMEP, a *uct.CMConnectArgs) {
	var acc *csAccepted
	err := a.Status
	if err == nil {
		var ra *workerAddress
		if _, ra, err = decodeCSPriv(a.PrivData); err == nil {
			acc = &csAccepted{ra: ra}
		} else {
			err = fmt.Errorf("the server's answer: %w", err)
		}
	}
	st.mu.Lock()
	if st.finished {
		st.mu.Unlock()
		return
	}
	st.cmep = cmep
	if acc != nil {
		acc.dev = st.dev
	}
	st.finished, st.acc, st.err = true, acc, err
	st.mu.Unlock()
	w.cs.done.Store(true)
	w.notify()
}

func (st *epConnect) hasFinished() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.finished
}

// settle wires the endpoint to the worker the server's handshake named and
// confirms, or fails it; then it starts the operations that waited.
func (ep *Endpoint) settle() {
	st := ep.conn.Load()
	st.mu.Lock()
	acc, err, cmep, aborted := st.acc, st.err, st.cmep, st.aborted
	st.mu.Unlock()
	if aborted {
		return
	}
	if err == nil {
		if err = ep.wireTo(acc.ra, acc.dev); err == nil {
			a := cmep.Query()
			if err = cmep.ConnNotify(); err != nil {
				ep.closeFinal()
			} else {
				ep.sock = sockAddrs{local: a.LocalAddress, remote: a.RemoteAddress}
			}
		}
	}
	// Destroying the connection manager's EP before a confirmation tells
	// the server that the client gave up.
	cmep.Destroy()
	if err != nil {
		ep.connectFailed(st, fmt.Errorf("ucp ep create to %v: %w", st.sa, err))
		return
	}
	ep.drainDeferred(st)
}

// drainDeferred starts the operations that waited for the connection, in
// order, with those issued meanwhile, until none is left.
func (ep *Endpoint) drainDeferred(st *epConnect) {
	for {
		st.mu.Lock()
		ops := st.deferred
		st.deferred = nil
		if len(ops) == 0 {
			st.settled = true
			ep.conn.Store(nil)
			st.mu.Unlock()
			return
		}
		st.mu.Unlock()
		for i := range ops {
			ops[i].run()
		}
	}
}

// connectFailed ends the connection with err: the waiting operations
// complete with its status and later ones fail with it; an endpoint in
// error mode PEER fails.
func (ep *Endpoint) connectFailed(st *epConnect, err error) {
	st.mu.Lock()
	st.failErr, st.settled = err, true
	ops := st.deferred
	st.deferred = nil
	st.mu.Unlock()
	status := statusOf(err)
	closing := false
	for _, d := range ops {
		d.proxy.complete(status)
		closing = closing || d.close
	}
	switch {
	case closing:
		ep.closeNow(ucs.ErrCanceled)
	case ep.params.ErrMode == ErrHandlingModePeer:
		ep.setFailed(status)
	}
}

// abortConnect ends the connection of an endpoint closed while it
// connects: the handshake stops (the server sees the client leave) and the
// waiting operations complete with ucs.ErrCanceled.
func (ep *Endpoint) abortConnect(st *epConnect) {
	w := ep.w
	w.cs.mu.Lock()
	w.cs.removeLocked(w, ep)
	w.cs.mu.Unlock()
	st.mu.Lock()
	if st.settled {
		st.mu.Unlock()
		return
	}
	st.aborted, st.settled = true, true
	st.failErr = fmt.Errorf("ucp ep to %v: closed while connecting: %w", st.sa, ErrClosed)
	cmep, ops := st.cmep, st.deferred
	st.deferred = nil
	st.mu.Unlock()
	if cmep != nil {
		cmep.Destroy()
	}
	for _, d := range ops {
		d.proxy.complete(ucs.ErrCanceled)
	}
}

// whileConnecting handles an operation issued on an endpoint that
// connects (ep.conn set): it returns handled false when the endpoint is
// wired and the operation runs now; otherwise the operation was deferred
// (a request that stands for it) or fails (the connection's error, or
// ucs.ErrNoResource under OpAttrFlagForceImmCmpl).
func (ep *Endpoint) whileConnecting(st *epConnect, what string, param *RequestParam, close bool,
	start func(*RequestParam) (*Request, error)) (r *Request, handled bool, err error) {
	if (param != nil && param.resumed) || ep.closed.Load() {
		return nil, false, nil // run, or fail as closed
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case st.failErr != nil:
		return nil, true, fmt.Errorf("ucp %s: %w", what, st.failErr)
	case st.settled && len(st.deferred) == 0:
		return nil, false, nil
	case sendFlags(param)&flagForceImmCmpl != 0:
		return nil, true, fmt.Errorf("ucp %s: the endpoint connects: %w", what, ucs.ErrNoResource)
	}
	d := deferredOp{start: start, close: close}
	if param != nil {
		d.param = *param
	}
	d.proxy = ep.w.newRequest(param)
	d.proxy.untracked, d.proxy.proto = true, protoConnecting
	st.deferred = append(st.deferred, d)
	return d.proxy, true, nil
}

// protoConnecting is the protocol name of an operation waiting for its
// endpoint's connection.
const protoConnecting = "deferred: endpoint connecting"

// run starts the operation; its request then completes the proxy.
func (d *deferredOp) run() {
	p := d.param
	p.OpAttrMask = p.OpAttrMask&^OpAttrFieldRequest | OpAttrFieldCallback | OpAttrFieldUserData
	p.Flags &^= flagForceImmCmpl
	p.Callback, p.UserData, p.Request, p.resumed = deferredDone, d.proxy, nil, true
	r, err := d.start(&p)
	switch {
	case err != nil:
		d.proxy.complete(statusOf(err))
	case r == nil:
		d.proxy.complete(ucs.OK)
	}
}

// deferredDone completes a proxy with the status of the operation it
// stood for.
func deferredDone(r *Request, status error, proxy any) {
	proxy.(*Request).complete(statusOf(status))
	r.Free()
}

// waitConnected progresses the worker until the endpoint is wired, and
// returns nil then, or the connection's error.
func (ep *Endpoint) waitConnected() error {
	if ep.conn.Load() == nil {
		return nil
	}
	return ep.waitConnecting()
}

// waitConnecting is waitConnected's wait, kept out of it so that the
// check of a connected endpoint is inlined.
func (ep *Endpoint) waitConnecting() error {
	for {
		st := ep.conn.Load()
		if st == nil {
			return nil
		}
		st.mu.Lock()
		fe, done := st.failErr, st.settled && len(st.deferred) == 0
		st.mu.Unlock()
		if fe != nil {
			return fe
		}
		if done {
			return nil
		}
		if ep.closed.Load() {
			return ErrClosed
		}
		if ep.w.Progress() == 0 {
			ep.w.Idle()
		}
	}
}
