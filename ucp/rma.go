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

// rmaOp is what an operation that post issues needs of its call: the
// operations are functions of the request alone (putShortOp and the
// others), which capture nothing, so that posting one allocates nothing;
// the lane's pending queue retries them with the same arguments.
type rmaOp struct {
	rl      *rkeyLane
	raddr   uint64
	iov     []uct.IOV  // zcopy: the buffers of r.dt
	one     [1]uct.IOV // iov's room for contiguous data
	uop     uct.AtomicOp
	value   uint64
	compare uint64 // compare-and-swap: the expected value
}

// The operations of puts and gets: the data is r.dt (r.size bytes).

func putShortOp(r *Request) ucs.Status {
	o := &r.rma
	return o.rl.ep.PutShort(r.dt.contig, o.raddr, o.rl.rkey)
}

func putBcopyOp(r *Request) ucs.Status {
	o := &r.rma
	_, st := o.rl.ep.PutBcopy(r.packFunc(), o.raddr, o.rl.rkey)
	return st
}

func putZcopyOp(r *Request) ucs.Status {
	o := &r.rma
	return o.rl.ep.PutZcopy(o.iov, o.raddr, o.rl.rkey, &r.comp)
}

func getBcopyOp(r *Request) ucs.Status {
	o := &r.rma
	return o.rl.ep.GetBcopy(r.unpackFunc(), r.size, o.raddr, o.rl.rkey, &r.comp)
}

func getZcopyOp(r *Request) ucs.Status {
	o := &r.rma
	return o.rl.ep.GetZcopy(o.iov, o.raddr, o.rl.rkey, &r.comp)
}

// packFunc returns the function that packs the request's data (r.dt,
// r.size bytes) for a bcopy put.
func (r *Request) packFunc() uct.PackFunc {
	if r.pack == nil {
		r.pack = func(dst []byte) int { return r.dt.pack(0, dst) }
	}
	return r.pack
}

// unpackFunc returns the function that unpacks a bcopy get's data into the
// request's (r.dt).
func (r *Request) unpackFunc() uct.UnpackFunc {
	if r.unpack == nil {
		r.unpack = func(src []byte) { r.dt.unpack(0, src) }
	}
	return r.unpack
}

// post issues op on lane l for request r and returns the UCP result: (nil,
// nil) when the operation completed at once (r is released), r while it runs,
// or an error. An operation the transport has no resources for is queued on
// the lane's pending queue and retried from progress. defers says that the
// transport may complete the operation later (a network lane's gets,
// zero-copy puts, fetching atomics): under OpAttrFlagForceImmCmpl it then
// fails with ucs.ErrNoResource without being issued.
func (w *Worker) post(l *lane, r *Request, param *RequestParam, defers bool, op func(r *Request) ucs.Status) (*Request, error) {
	flags := sendFlags(param)
	force := flags&flagForceImmCmpl != 0
	if force && defers && l.wi.rsc.tl.DevType == uct.DeviceTypeNet {
		r.release()
		return nil, fmt.Errorf("ucp %s on %s cannot complete at once: %w", r.proto, l, ucs.ErrNoResource)
	}
	r.lane = l
	r.ownCompletion()
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
		return r.doneNow(flags), nil
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
	if sendFlags(param)&flagNoImmCmpl == 0 {
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
func forceImm(param *RequestParam) bool { return sendFlags(param)&flagForceImmCmpl != 0 }

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
		l.sendMu.mu.Lock()
		if l.destroyed {
			l.sendMu.mu.Unlock()
			return ucs.ErrCanceled
		}
		st := l.ep.PendingAdd(&r.pending, 0)
		l.sendMu.mu.Unlock()
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
// fails with ErrClosed, a failed one (mode PEER) with its status.
func (ep *Endpoint) checkOp(rkey *Rkey, what string) error {
	if err := ep.checkEP(what); err != nil {
		return err
	}
	if rkey == nil || rkey.ep != ep {
		return fmt.Errorf("ucp %s: rkey not unpacked on this endpoint: %w", what, ucs.ErrInvalidParam)
	}
	return nil
}

// checkEP validates an operation's endpoint, as checkOp says.
func (ep *Endpoint) checkEP(what string) error {
	if ep.closed.Load() {
		return fmt.Errorf("ucp %s: %w", what, ErrClosed)
	}
	if st := ep.failStatus.Load(); st != 0 {
		return fmt.Errorf("ucp %s to %s: %w", what, ep.remoteName, ucs.Status(st))
	}
	return nil
}

// PutNBX writes buf to raddr in the memory of rkey (ucp_put_nbx). It returns
// (nil, nil) when buf may be reused at once, or a request that completes
// when buf may be reused; completion at the target needs a flush. On the
// rkey's RMA lane, small messages go out as put short, then bcopy, then
// zero-copy, by the lane's limits and UCX_ZCOPY_THRESH; without an RMA lane
// the data travels in active messages and the target writes it.
//
// With an SGL (RequestParam.SetLocalSGL and SetRemoteSGL; see DatatypeSGL)
// buf must be nil and raddr and rkey are not used: every element is put,
// each as one operation, and the one request completes when all are done.
func (ep *Endpoint) PutNBX(buf []byte, raddr uint64, rkey *Rkey, param *RequestParam) (*Request, error) {
	if isSGL(param) {
		return ep.rmaSGL(buf, param, true)
	}
	if err := ep.checkOp(rkey, "put"); err != nil {
		return nil, err
	}
	if err := rkey.allows(rkeyWrite, "put"); err != nil {
		return nil, err
	}
	if nonContig(param) {
		return ep.rmaIOV(buf, raddr, rkey, param, true)
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
	if n <= rl.putShort && (param == nil || sendFlags(param)&flagNoImmCmpl == 0) {
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
	r.size, r.dt = n, dtIter{contig: buf, length: n}
	r.rma.rl, r.rma.raddr = rl, raddr
	switch {
	case n <= rl.putShort:
		r.proto = protoPutShort
		return w.post(rl.l, r, param, false, putShortOp)
	case n <= rl.putBcopy:
		r.proto = protoPutBcopy
		return w.post(rl.l, r, param, false, putBcopyOp)
	default:
		r.proto = protoPutZcopy
		r.rma.iov = r.dt.zcopyIOV(r.rma.one[:0], 0, n)
		return w.post(rl.l, r, param, true, putZcopyOp)
	}
}

// GetNBX reads len(buf) bytes at raddr in the memory of rkey into buf
// (ucp_get_nbx). It returns (nil, nil) when buf holds the data on return, or
// a request that completes when it does. Without a lane that gets, the
// target sends the data back in active messages. An SGL get is as PutNBX
// says for an SGL put.
func (ep *Endpoint) GetNBX(buf []byte, raddr uint64, rkey *Rkey, param *RequestParam) (*Request, error) {
	if isSGL(param) {
		return ep.rmaSGL(buf, param, false)
	}
	if err := ep.checkOp(rkey, "get"); err != nil {
		return nil, err
	}
	if err := rkey.allows(rkeyRead, "get"); err != nil {
		return nil, err
	}
	if nonContig(param) {
		return ep.rmaIOV(buf, raddr, rkey, param, false)
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
		return ep.swGet(dtIter{contig: buf, length: len(buf)}, raddr, rkey, r)
	}
	n := len(buf)
	r := w.newRequest(param)
	r.size, r.dt = n, dtIter{contig: buf, length: n}
	r.rma.rl, r.rma.raddr = rl, raddr
	if n <= rl.getBcopy {
		r.proto = protoGetBcopy
		return w.post(rl.l, r, param, true, getBcopyOp)
	}
	r.proto = protoGetZcopy
	r.rma.iov = r.dt.zcopyIOV(r.rma.one[:0], 0, n)
	return w.post(rl.l, r, param, true, getZcopyOp)
}

// nonContig reports whether param's datatype is not contiguous.
func nonContig(param *RequestParam) bool {
	return param != nil && param.OpAttrMask&OpAttrFieldDatatype != 0 && param.Datatype.Class() != DatatypeClassContig
}

// rmaIOV puts (put) or gets the data of param's iov datatype to or from the
// contiguous remote memory at raddr: through the key's mapping, in one
// bcopy operation when it fits, or in one zero-copy operation of the
// iov's buffers (at most the lane's iov limit; ucs.ErrExceedsLimit beyond),
// or in software.
func (ep *Endpoint) rmaIOV(buf []byte, raddr uint64, rkey *Rkey, param *RequestParam, put bool) (*Request, error) {
	what := "get"
	if put {
		what = "put"
	}
	if param.Datatype.Class() != DatatypeClassIOV {
		return nil, fmt.Errorf("ucp %s: datatype class %d: RMA takes contiguous or iov data: %w", what, param.Datatype.Class(), ucs.ErrUnsupported)
	}
	it, err := dtFromParam(buf, param, !put)
	if err != nil {
		return nil, fmt.Errorf("ucp %s: %w", what, err)
	}
	w, n := ep.w, it.length
	if p := rkey.direct(raddr, n); p != nil {
		mem := unsafe.Slice((*byte)(p), n)
		proto := protoGetDirect
		if put {
			it.pack(0, mem)
			proto = protoPutDirect
		} else {
			it.unpack(0, mem)
		}
		return w.completedNow(param, proto, rkey.rma.laneOrNil(), n)
	}
	rl := rkey.rma
	if rl == nil || (!put && !rl.get) {
		if put {
			off := 0
			for _, b := range it.iov {
				if len(b) == 0 {
					continue
				}
				if err := ep.swPut(b, raddr+uint64(off), rkey); err != nil {
					return nil, err
				}
				off += len(b)
			}
			return w.completedNow(param, protoPutSw, ep.am, n)
		}
		if err := ep.swCheck(rkey, "get"); err != nil {
			return nil, err
		}
		if forceImm(param) {
			return nil, fmt.Errorf("ucp get/sw to %s cannot complete at once: %w", ep.remoteName, ucs.ErrNoResource)
		}
		r := w.newRequest(param)
		r.size = n
		return ep.swGet(it, raddr, rkey, r)
	}
	r := w.newRequest(param)
	r.size, r.dt = n, it
	r.rma.rl, r.rma.raddr = rl, raddr
	switch {
	case put && n <= rl.putBcopy:
		r.proto = protoPutBcopy
		return w.post(rl.l, r, param, false, putBcopyOp)
	case !put && n <= rl.getBcopy:
		r.proto = protoGetBcopy
		return w.post(rl.l, r, param, true, getBcopyOp)
	}
	iov := r.dt.zcopyIOV(r.rma.one[:0], 0, n)
	caps := rl.l.wi.attr.Put
	if !put {
		caps = rl.l.wi.attr.Get
	}
	if len(iov) > max(caps.MaxIOV, 1) {
		r.release()
		return nil, fmt.Errorf("ucp %s of %d buffers on %s, more than its %d: %w", what, len(iov), rl.l, caps.MaxIOV, ucs.ErrExceedsLimit)
	}
	r.rma.iov = iov
	if put {
		r.proto = protoPutZcopy
		return w.post(rl.l, r, param, true, putZcopyOp)
	}
	r.proto = protoGetZcopy
	return w.post(rl.l, r, param, true, getZcopyOp)
}
