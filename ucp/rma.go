package ucp

import (
	"fmt"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// Protocol names, as Request.Query reports them.
const (
	protoPutShort  = "put/short"
	protoPutBcopy  = "put/bcopy"
	protoPutZcopy  = "put/zcopy"
	protoGetBcopy  = "get/bcopy"
	protoGetZcopy  = "get/zcopy"
	protoAMOPost   = "amo/post"
	protoAMOFetch  = "amo/fetch"
	protoPutSw     = "put/sw"
	protoPutDirect = "put/rkey_ptr"
	protoGetDirect = "get/rkey_ptr"
	protoAMODirect = "amo/rkey_ptr"
)

// post issues op on lane l for request r and returns the UCP result: (nil,
// nil) when the operation completed at once (r is released), r while it runs,
// or an error. An operation the transport has no resources for is queued on
// the lane's pending queue and retried from progress. defers says that the
// transport may complete the operation later (a network lane's gets,
// zero-copy puts, fetching atomics): under OpAttrFlagForceImmCmpl it then
// fails with ucs.ErrNoResource without being issued.
func (w *Worker) post(l *lane, r *Request, param *RequestParam, defers bool, op func(r *Request) ucs.Status) (*Request, error) {
	flags := sendFlags(param)
	force := flags&OpAttrFlagForceImmCmpl != 0
	if force && defers && l.wi.rsc.tl.DevType == uct.DeviceTypeNet {
		r.release()
		return nil, fmt.Errorf("ucp %s on %s cannot complete at once: %w", r.proto, l, ucs.ErrNoResource)
	}
	r.lane = l
	w.inflight.Add(1)
	st := op(r)
	if st == ucs.ErrNoResource {
		if force {
			w.inflight.Add(-1)
			r.release()
			return nil, fmt.Errorf("ucp %s: %w", r.proto, ucs.ErrNoResource)
		}
		st = w.queue(l, r, op)
	}
	switch st {
	case ucs.InProgress:
		return r, nil
	case ucs.OK:
		if flags&OpAttrFlagNoImmCmpl != 0 {
			r.complete(ucs.OK)
			return r, nil
		}
		// Completed at once: no request and no callback, as in UCX.
		r.finish(ucs.OK)
		r.release()
		return nil, nil
	default:
		w.inflight.Add(-1)
		r.release()
		return nil, fmt.Errorf("ucp %s on %s: %w", r.proto, l, st)
	}
}

// completedNow is the result of an operation that completed inside its
// call without a request: (nil, nil), or under OpAttrFlagNoImmCmpl a
// completed request (proto on lane l, size bytes) whose callback ran.
func (w *Worker) completedNow(param *RequestParam, proto string, l *lane, size int) (*Request, error) {
	if sendFlags(param)&OpAttrFlagNoImmCmpl == 0 {
		return nil, nil
	}
	r := w.newRequest(param)
	r.size, r.proto, r.lane = size, proto, l
	w.inflight.Add(1)
	r.complete(ucs.OK)
	return r, nil
}

// forceImm reports whether param asks for immediate completion or an
// error (OpAttrFlagForceImmCmpl).
func forceImm(param *RequestParam) bool { return sendFlags(param)&OpAttrFlagForceImmCmpl != 0 }

// queue puts r on l's pending queue; it returns InProgress, or the result of
// running op at once when the lane turns out to have resources. A request
// queued on the lane of an endpoint that failed or was closed meanwhile is
// completed with the endpoint's status (whoever purges the lane first).
func (w *Worker) queue(l *lane, r *Request, op func(r *Request) ucs.Status) ucs.Status {
	r.pending.Arg = r
	r.pending.Func = func(*uct.PendingReq) ucs.Status {
		st := op(r)
		switch st {
		case ucs.ErrNoResource:
			return ucs.ErrNoResource
		case ucs.InProgress:
		default:
			r.complete(st)
		}
		return ucs.OK
	}
	for {
		l.sendMu.Lock()
		if l.destroyed {
			l.sendMu.Unlock()
			return ucs.ErrCanceled
		}
		st := l.ep.PendingAdd(&r.pending, 0)
		l.sendMu.Unlock()
		switch st {
		case ucs.OK:
			if dst := l.owner.dead(); dst != ucs.OK {
				l.purgePending(dst)
			}
			return ucs.InProgress
		case ucs.ErrBusy:
			if st := op(r); st != ucs.ErrNoResource {
				return st
			}
		default:
			return st
		}
	}
}

// checkOp validates an operation's endpoint and key: a closed endpoint
// fails with errClosed, a failed one (mode PEER) with its status.
func (ep *Endpoint) checkOp(rkey *Rkey, what string) error {
	if ep.closed.Load() {
		return fmt.Errorf("ucp %s: %w", what, errClosed)
	}
	if st := ep.failStatus.Load(); st != 0 {
		return fmt.Errorf("ucp %s to %s: %w", what, ep.remoteName, ucs.Status(st))
	}
	if rkey == nil || rkey.ep != ep {
		return fmt.Errorf("ucp %s: rkey not unpacked on this endpoint: %w", what, ucs.ErrInvalidParam)
	}
	return nil
}

// PutNBX writes buf to raddr in the memory of rkey (ucp_put_nbx). It returns
// (nil, nil) when buf may be reused at once, or a request that completes
// when buf may be reused; completion at the target needs a flush. On the
// rkey's RMA lane, small messages go out as put short, then bcopy, then
// zero-copy, by the lane's limits and UCX_ZCOPY_THRESH; without an RMA lane
// the data travels in active messages and the target writes it.
func (ep *Endpoint) PutNBX(buf []byte, raddr uint64, rkey *Rkey, param *RequestParam) (*Request, error) {
	if err := ep.checkOp(rkey, "put"); err != nil {
		return nil, err
	}
	if err := rkey.allows(rkeyWrite, "put"); err != nil {
		return nil, err
	}
	w := ep.w
	if p := rkey.direct(raddr, len(buf)); p != nil {
		// Shared memory: one copy into the peer's mapped memory, as
		// UCX's rkey_ptr protocol does.
		ucs.Memcpy(unsafe.Slice((*byte)(p), len(buf)), buf)
		if param == nil {
			return nil, nil
		}
		return w.completedNow(param, protoPutDirect, rkey.rma.laneOrNil(), len(buf))
	}
	rl := rkey.rma
	if rl == nil {
		if err := ep.swPut(buf, raddr, rkey); err != nil {
			return nil, err
		}
		return w.completedNow(param, protoPutSw, ep.am, len(buf))
	}
	n := len(buf)
	if n <= rl.putShort && (param == nil || sendFlags(param)&OpAttrFlagNoImmCmpl == 0) {
		// The common small put: no request at all.
		st := rl.ep.PutShort(buf, raddr, rl.rkey)
		if st == ucs.OK {
			return nil, nil
		}
		if st != ucs.ErrNoResource {
			return nil, fmt.Errorf("ucp put/short on %s: %w", rl.l, st)
		}
	}
	r := w.newRequest(param)
	r.size = n
	switch {
	case n <= rl.putShort:
		r.proto = protoPutShort
		return w.post(rl.l, r, param, false, func(*Request) ucs.Status { return rl.ep.PutShort(buf, raddr, rl.rkey) })
	case n <= rl.putBcopy:
		r.proto = protoPutBcopy
		pack := func(dst []byte) int { return copy(dst, buf) }
		return w.post(rl.l, r, param, false, func(*Request) ucs.Status {
			_, st := rl.ep.PutBcopy(pack, raddr, rl.rkey)
			return st
		})
	default:
		r.proto = protoPutZcopy
		iov := []uct.IOV{{Buffer: buf}}
		return w.post(rl.l, r, param, true, func(r *Request) ucs.Status { return rl.ep.PutZcopy(iov, raddr, rl.rkey, &r.comp) })
	}
}

// GetNBX reads len(buf) bytes at raddr in the memory of rkey into buf
// (ucp_get_nbx). It returns (nil, nil) when buf holds the data on return, or
// a request that completes when it does. Without a lane that gets, the
// target sends the data back in active messages.
func (ep *Endpoint) GetNBX(buf []byte, raddr uint64, rkey *Rkey, param *RequestParam) (*Request, error) {
	if err := ep.checkOp(rkey, "get"); err != nil {
		return nil, err
	}
	if err := rkey.allows(rkeyRead, "get"); err != nil {
		return nil, err
	}
	w := ep.w
	if p := rkey.direct(raddr, len(buf)); p != nil {
		ucs.Memcpy(buf, unsafe.Slice((*byte)(p), len(buf)))
		if param == nil {
			return nil, nil
		}
		return w.completedNow(param, protoGetDirect, rkey.rma.laneOrNil(), len(buf))
	}
	rl := rkey.rma
	if rl == nil || !rl.get {
		if err := ep.swCheck(rkey, "get"); err != nil {
			return nil, err
		}
		if forceImm(param) {
			return nil, fmt.Errorf("ucp get/sw to %s cannot complete at once: %w", ep.remoteName, ucs.ErrNoResource)
		}
		r := w.newRequest(param)
		r.size = len(buf)
		return ep.swGet(buf, raddr, rkey, r)
	}
	n := len(buf)
	r := w.newRequest(param)
	r.size = n
	if n <= rl.getBcopy {
		r.proto = protoGetBcopy
		unpack := func(src []byte) { copy(buf, src) }
		return w.post(rl.l, r, param, true, func(r *Request) ucs.Status {
			return rl.ep.GetBcopy(unpack, n, raddr, rl.rkey, &r.comp)
		})
	}
	r.proto = protoGetZcopy
	iov := []uct.IOV{{Buffer: buf}}
	return w.post(rl.l, r, param, true, func(r *Request) ucs.Status { return rl.ep.GetZcopy(iov, raddr, rl.rkey, &r.comp) })
}
