package ucp

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// Non-blocking endpoint flush and close (ucp_ep_flush_nb(x),
// ucp_ep_close_nb(x)). A flush is a request that goes through three
// stages, advanced from Worker.Progress: the target acknowledges the
// software operations sent before it (when the transport does not cover
// them), the endpoint's active messages and queued protocol sends are
// handed over and done, and then every lane's transport flushes. A close
// in flush mode is such a flush, after which the endpoint closes; in
// force mode it closes at once. Flush and Close are these calls, waited
// for.

// EPCloseFlags are the flags of EPCloseNBX (ucp_ep_close_flags_t), in
// RequestParam.Flags (RequestParam.SetEPCloseFlags).
type EPCloseFlags uint32

// Flags of EPCloseNBX.
const (
	// EPCloseFlagForce: close at once, as CloseModeForce; without it the
	// endpoint is flushed first, as CloseModeFlush.
	EPCloseFlagForce EPCloseFlags = 1 << 0
)

// Protocol names of flush and close requests, as Request.Query reports
// them.
const (
	protoEPFlush = "ep/flush"
	protoEPClose = "ep/close"
)

// epFlushOp is a non-blocking endpoint flush (or close) in progress.
type epFlushOp struct {
	ep    *Endpoint
	r     *Request
	sw    *swReq // the software flush request waited for, if any
	stage uint8
	close bool // close the endpoint once flushed
	// revoked: a close took back the endpoint's rendezvous messages
	// (tagRevokeEP), before the lanes' flush.
	revoked bool
	// linger: the flush of a closed endpoint's lanes, which then destroys
	// them (lingerStart); it has no request.
	linger bool
	comp   uct.Completion
	lanes  atomic.Bool // the lanes' flushes completed
}

// Stages of an epFlushOp.
const (
	flushSW    uint8 = iota // waiting for the target's software flush reply
	flushAM                 // waiting for active messages and queued sends
	flushLanes              // waiting for the lanes' flushes
)

// epFlushes are a worker's flushes in progress, advanced by a progress
// callback registered while there are any.
type epFlushes struct {
	mu  sync.Mutex
	ops []*epFlushOp
	id  int // the progress callback's id; 0 when none is registered
	// busy counts the calls of flushProgress advancing ops they took out
	// of ops: while one does, ops may be empty, and the callback must
	// stay.
	busy int
}

// EPFlushNBX starts a flush of the endpoint (ucp_ep_flush_nbx): every
// operation issued on it before completes at the target, as with Flush.
// It returns (nil, nil) when that is so already (under OpAttrFlagNoImmCmpl
// a completed request whose callback ran), or a request that completes,
// calling param's callback, when it is; the request completes with the
// endpoint's error when it fails meanwhile, and with ucs.ErrCanceled when
// it is closed. It fails with the endpoint's error on a failed or closed
// endpoint.
func (ep *Endpoint) EPFlushNBX(param *RequestParam) (*Request, error) {
	if ep.closed.Load() {
		return nil, fmt.Errorf("ucp ep flush: %w", ErrClosed)
	}
	if st := ep.failStatus.Load(); st != 0 {
		return nil, fmt.Errorf("ucp ep flush to %s: %w", ep.remoteName, ucs.Status(st))
	}
	return ep.flushStart(param, false)
}

// EPFlushNB is the older form of EPFlushNBX (ucp_ep_flush_nb): flags must
// be 0 (the UCX documents reserve them); cb, if not nil, is called when a
// flush that did not complete at once completes.
func (ep *Endpoint) EPFlushNB(flags uint32, cb SendCallback) (*Request, error) {
	if flags != 0 {
		return nil, fmt.Errorf("ucp ep flush: flags %#x: %w", flags, ucs.ErrInvalidParam)
	}
	p := RequestParam{}
	if cb != nil {
		p.SetCallback(cb)
	}
	return ep.EPFlushNBX(&p)
}

// EPCloseNBX starts closing the endpoint (ucp_ep_close_nbx). With
// EPCloseFlagForce in param's flags it closes at once, as
// Close(CloseModeForce), and returns (nil, nil) (under OpAttrFlagNoImmCmpl a
// completed request). Otherwise it flushes the endpoint first (not one that
// failed): it returns a request that completes once the endpoint is flushed
// and closed, with the flush's error if any, or (nil, nil) when that
// happened at once. From the call on, the endpoint's error handler is not
// called any more; once closed, its outstanding requests completed with
// ucs.ErrCanceled (rendezvous tag sends as Close says) and later operations
// fail. Closing an endpoint whose close began already returns (nil, nil).
// Unknown flags fail with ucs.ErrInvalidParam.
func (ep *Endpoint) EPCloseNBX(param *RequestParam) (*Request, error) {
	f := EPCloseFlags(0)
	if param != nil && param.OpAttrMask&OpAttrFieldFlags != 0 {
		// The field shares its bits with the OpAttrFlag* ones.
		f = EPCloseFlags(param.Flags &^ uint32(opAttrFlags))
	}
	if f&^EPCloseFlagForce != 0 {
		return nil, fmt.Errorf("ucp ep close: flags %#x: %w", f, ucs.ErrInvalidParam)
	}
	if !ep.closing.CompareAndSwap(false, true) {
		return nil, nil
	}
	if f&EPCloseFlagForce != 0 || ep.failStatus.Load() != 0 {
		ep.closeFinal()
		return ep.w.completedNow(param, protoEPClose, nil, 0)
	}
	return ep.flushStart(param, true)
}

// EPCloseNB is the older form of EPCloseNBX (ucp_ep_close_nb): mode is
// CloseModeFlush or CloseModeForce; another fails with
// ucs.ErrInvalidParam.
func (ep *Endpoint) EPCloseNB(mode int) (*Request, error) {
	p := RequestParam{}
	switch mode {
	case CloseModeFlush:
	case CloseModeForce:
		p.SetEPCloseFlags(EPCloseFlagForce)
	default:
		return nil, fmt.Errorf("ucp ep close: mode %d: %w", mode, ucs.ErrInvalidParam)
	}
	return ep.EPCloseNBX(&p)
}

// closeFinal takes the endpoint out of its worker and closes it: its
// outstanding requests complete with ucs.ErrCanceled.
func (ep *Endpoint) closeFinal() {
	w := ep.w
	w.epMu.Lock()
	for i, e := range w.eps {
		if e == ep {
			w.eps = append(w.eps[:i], w.eps[i+1:]...)
			break
		}
	}
	w.epMu.Unlock()
	ep.closeNow(ucs.ErrCanceled)
}

// flushStart starts a flush of the endpoint, and its close after it when
// close is set.
func (ep *Endpoint) flushStart(param *RequestParam, close bool) (*Request, error) {
	w := ep.w
	if st := ep.conn.Load(); st != nil {
		if r, handled, err := ep.whileConnecting(st, "ep flush", param, close, func(p *RequestParam) (*Request, error) {
			return ep.flushStart(p, close)
		}); handled {
			if err != nil && close {
				ep.closeFinal() // the connection failed: nothing to flush
			}
			return r, err
		}
	}
	op := &epFlushOp{ep: ep, close: close}
	sw, err := ep.swFlushStart()
	if err != nil {
		if close {
			ep.closeFinal()
		}
		return nil, fmt.Errorf("ucp ep flush: %w", err)
	}
	op.sw = sw
	r := w.newRequest(param)
	r.untracked, r.proto = true, protoEPFlush
	if close {
		r.proto = protoEPClose
	}
	op.r = r
	if done, st := op.step(); done {
		// Done inside the call: as other operations, without a callback
		// unless OpAttrFlagNoImmCmpl asks for the request.
		if close {
			ep.closeFinal()
		}
		if sendFlags(param)&flagNoImmCmpl != 0 {
			r.complete(st)
			return r, nil
		}
		r.finish(st)
		r.release()
		if st != ucs.OK {
			return nil, fmt.Errorf("ucp ep flush to %s: %w", ep.remoteName, st)
		}
		return nil, nil
	}
	w.flushAdd(op)
	return r, nil
}

// flushAdd queues op for flushProgress.
func (w *Worker) flushAdd(op *epFlushOp) {
	fl := &w.flushes
	fl.mu.Lock()
	fl.ops = append(fl.ops, op)
	if fl.id == 0 {
		fl.id = w.uw.ProgressRegister(w.flushProgress)
	}
	fl.mu.Unlock()
}

// lingerStart keeps the lanes of the endpoint, closed at once, until what
// it handed them last (the revokes of its rendezvous sends) is done, and
// then destroys them, from Progress (closeNow leaves them to it). A flush
// that fails ends the wait too; so does the worker's destruction
// (lingerDestroy).
func (ep *Endpoint) lingerStart() {
	ep.linger.Store(true)
	ep.w.flushAdd(&epFlushOp{ep: ep, close: true, revoked: true, linger: true, stage: flushAM})
}

// lingerDestroy destroys the lanes that closed endpoints keep
// (lingerStart); the worker is being destroyed.
func (w *Worker) lingerDestroy() {
	fl := &w.flushes
	fl.mu.Lock()
	var eps []*Endpoint
	keep := fl.ops[:0]
	for _, op := range fl.ops {
		if op.linger {
			eps = append(eps, op.ep)
		} else {
			keep = append(keep, op)
		}
	}
	fl.ops = keep
	fl.mu.Unlock()
	for _, ep := range eps {
		ep.destroyLanes()
	}
}

// flushProgress advances the worker's flushes; it returns how many ended.
func (w *Worker) flushProgress() int {
	fl := &w.flushes
	fl.mu.Lock()
	ops := fl.ops
	fl.ops = nil
	fl.busy++
	fl.mu.Unlock()
	keep := ops[:0]
	for _, op := range ops {
		if done, st := op.step(); done {
			op.end(st)
		} else {
			keep = append(keep, op)
		}
	}
	n := len(ops) - len(keep)
	fl.mu.Lock()
	fl.busy--
	fl.ops = append(keep, fl.ops...)
	switch {
	case len(fl.ops) == 0 && fl.busy == 0 && fl.id != 0:
		w.uw.ProgressUnregister(fl.id)
		fl.id = 0
	case len(fl.ops) > 0 && fl.id == 0:
		// Not expected (busy keeps the callback while ops are out), but
		// a flush without its callback would wait forever.
		fl.id = w.uw.ProgressRegister(w.flushProgress)
	}
	fl.mu.Unlock()
	return n
}

// step advances the flush as far as it can go now and reports whether it
// is done, with its status.
func (op *epFlushOp) step() (bool, ucs.Status) {
	ep := op.ep
	if ep.closed.Load() && !op.close {
		return true, ucs.ErrCanceled
	}
	if st := ep.failStatus.Load(); st != 0 {
		return true, ucs.Status(st)
	}
	switch op.stage {
	case flushSW:
		if op.sw != nil {
			select {
			case <-op.sw.done:
			default:
				return false, ucs.InProgress
			}
			if op.sw.err != ucs.OK {
				return true, op.sw.err
			}
		}
		op.stage = flushAM
		fallthrough
	case flushAM:
		// Nothing of the endpoint in the send queue (active messages, tag
		// and stream sends): everything handed to the transport, whose
		// flush below completes the zero-copy sends; tag and AM
		// rendezvous messages the receiver has not taken yet do not count
		// (their receiver's application takes them, maybe never: a close
		// revokes them). A stream's are waited for: its receiver takes
		// the data on its own progress, as it does an eager send's.
		if ep.queued.Load() > 0 || ep.w.streamRndvSending(ep) {
			return false, ucs.InProgress
		}
		if op.close && !op.revoked {
			// Every RTS is out: their revokes follow them, and the lanes'
			// flush below delivers them before the endpoint closes.
			op.revoked = true
			ep.w.tagRevokeEP(ep)
			if ep.queued.Load() > 0 {
				return false, ucs.InProgress
			}
		}
		op.stage = flushLanes
		op.comp = uct.Completion{Count: 1, Func: func(*uct.Completion) { op.lanes.Store(true) }}
		for _, l := range ep.lanesSnapshot() {
			atomic.AddInt32(&op.comp.Count, 1)
			if st := l.ep.Flush(0, &op.comp); st != ucs.InProgress {
				op.comp.Invoke(st)
			}
		}
		op.comp.Invoke(ucs.OK)
		fallthrough
	case flushLanes:
		if !op.lanes.Load() {
			return false, ucs.InProgress
		}
	}
	if st := op.comp.Status(); st.IsErr() {
		return true, st
	}
	return true, ucs.OK
}

// end completes the flush with st, closing the endpoint first for a close.
func (op *epFlushOp) end(st ucs.Status) {
	if op.linger {
		op.ep.destroyLanes()
		return
	}
	if op.close {
		op.ep.closeFinal()
	}
	op.r.complete(st)
}
