package ucp

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// Active messages (the ucp_am_* API of the UCX documents).
//
// A worker of a context created with FeatureAM receives active messages for
// the handlers set with Worker.SetAMRecvHandler; an endpoint sends them with
// Endpoint.AMSendNBX. Every message travels on the endpoint's AM lane, under
// one uct active-message id (amUCP), with a small ucp header (am_wire.go)
// that carries the user's AM id, the user header's length, flags, the
// sender's worker uid and what fragmentation and rendezvous need.
//
// Protocols, by size and send flags:
//   - eager, one message: ucp header, user header and data copied into one
//     transport buffer (AM bcopy);
//   - eager, fragmented: above the lane's bcopy limit the data goes in
//     fragments (zero-copy from UCX_ZCOPY_THRESH where the lane has it,
//     as for tag messages: over tcp a send copies nothing), and the
//     receiver reassembles the message in a buffer of its own before
//     calling the handler once;
//   - rendezvous: the sender announces the message (its user header and
//     length, AMRecvAttrFlagRNDV at the receiver); the receiver's handler
//     takes it with Worker.AMRecvDataNBX into a buffer of the user's, or
//     drops it (Worker.AMDataRelease, or returning ucs.OK without
//     receiving). Where a lane from the receiver to the sender gets (posix,
//     sysv, cma, self, tcp), the announcement carries the packed key of the
//     data (that of RequestParam.Memh when the data lies in it, or else of
//     the data registered for the send with the memory domains that register
//     memory), and the receiver gets the data in one operation; otherwise
//     (or when the key does not fit beside the user header) the receiver
//     asks and the sender pushes the data in fragments. Either way the
//     receiver tells the sender when it is done, and the send request then
//     completes. Closing the sender's endpoint, or canceling the send,
//     revokes the message as for tag messages (tag_rndv.go): a receive of
//     it that has not started fails with ucs.ErrCanceled.
//
// A worker learns the address of a worker that sends it a rendezvous
// message or asks for a reply endpoint (the sender's first such message on
// an endpoint is preceded by its worker address, as a tag send's is), and
// creates an endpoint back to it when it has none.
//
// Sends go through the send engine of tag matching and streams (sendOp,
// proto_send.go): the same operation, packer, fragment loop, send queue
// and rendezvous sender, with an amHeader in front of each message.
//
// Receive handlers run from Worker.Progress of the receiving worker, never
// from a transport's own goroutine; with WorkerParams.SetAMAlignment their
// data starts at a multiple of the alignment (copied when the transport's
// buffer does not). Sends never block: what a transport has
// no room for waits in the worker's queue and goes out from Progress.

// Fields of AMHandlerParam (ucp_am_handler_param_field).
const (
	AMHandlerParamFieldID    uint64 = 1 << 0
	AMHandlerParamFieldFlags uint64 = 1 << 1
	AMHandlerParamFieldCB    uint64 = 1 << 2
	AMHandlerParamFieldArg   uint64 = 1 << 3
)

// AMHandlerFlags are the flags of an active message handler
// (AMHandlerParam.Flags).
type AMHandlerFlags uint32

// Flags of AMHandlerParam (ucp_am_cb_flags).
const (
	// AMFlagWholeMsg: the handler gets each message whole, in one call.
	// goshmem always delivers messages whole, with or without this flag.
	AMFlagWholeMsg AMHandlerFlags = 1 << 0
	// AMFlagPersistentData: every eager message reaches the handler with
	// AMRecvAttrFlagData, so that its data may be kept after the callback
	// (copying it first where the transport lends it only for the call).
	AMFlagPersistentData AMHandlerFlags = 1 << 1
)

// AMSendFlags are the send flags of AMSendNBX (ucp_send_am_flags), in
// RequestParam.Flags (RequestParam.SetAMSendFlags).
type AMSendFlags uint32

// Send flags of AMSendNBX.
const (
	// AMSendFlagReply: give the receiver a reply endpoint
	// (AMRecvParam.ReplyEP) to this worker.
	AMSendFlagReply AMSendFlags = 1 << 0
	// AMSendFlagEager: use the eager protocol, whatever the size.
	AMSendFlagEager AMSendFlags = 1 << 1
	// AMSendFlagRNDV: use the rendezvous protocol, whatever the size.
	AMSendFlagRNDV AMSendFlags = 1 << 2
	// AMSendFlagCopyHeader: the header may be reused once AMSendNBX returns.
	// goshmem always copies the header, so this flag changes nothing.
	AMSendFlagCopyHeader AMSendFlags = 1 << 3
)

// Receive attributes (ucp_am_recv_attr_t), in AMRecvParam.RecvAttr.
const (
	// AMRecvAttrFieldReplyEP: AMRecvParam.ReplyEP is set (the sender used
	// AMSendFlagReply).
	AMRecvAttrFieldReplyEP uint64 = 1 << 0
	// AMRecvAttrFlagData: the data may be kept after the callback: the
	// callback returns ucs.InProgress and later gives it back with
	// Worker.AMDataRelease(param.Desc). Without this flag (and without
	// AMRecvAttrFlagRNDV) the data is valid only during the callback.
	AMRecvAttrFlagData uint64 = 1 << 16
	// AMRecvAttrFlagRNDV: the data has not arrived; data is nil and
	// param.Desc stands for it: Worker.AMRecvDataNBX receives it,
	// Worker.AMDataRelease drops it. A callback that returns ucs.OK without
	// calling either drops it too; one that returns ucs.InProgress must call
	// one of them later.
	AMRecvAttrFlagRNDV uint64 = 1 << 17
)

// MaxAMID is the largest user active-message id.
const MaxAMID = math.MaxUint16

// AMHandlerParam are the parameters of Worker.SetAMRecvHandler
// (ucp_am_handler_param_t); only fields whose bit is in FieldMask count.
type AMHandlerParam struct {
	FieldMask uint64
	// ID is the active-message id, 0 to MaxAMID (mandatory).
	ID uint32
	// Flags holds AMFlag* bits (default 0).
	Flags AMHandlerFlags
	// CB is the callback; unset or nil removes the handler of ID.
	CB AMRecvCallback
	// Arg is passed to every call of CB (default nil).
	Arg any
}

// SetID sets the active-message id (mandatory).
func (p *AMHandlerParam) SetID(id uint32) *AMHandlerParam {
	p.ID, p.FieldMask = id, p.FieldMask|AMHandlerParamFieldID
	return p
}

// SetFlags sets AMFlag* flags (default 0).
func (p *AMHandlerParam) SetFlags(f AMHandlerFlags) *AMHandlerParam {
	p.Flags, p.FieldMask = f, p.FieldMask|AMHandlerParamFieldFlags
	return p
}

// SetCB sets the callback; nil removes the handler.
func (p *AMHandlerParam) SetCB(cb AMRecvCallback) *AMHandlerParam {
	p.CB, p.FieldMask = cb, p.FieldMask|AMHandlerParamFieldCB
	return p
}

// SetArg sets the callback's argument (default nil).
func (p *AMHandlerParam) SetArg(arg any) *AMHandlerParam {
	p.Arg, p.FieldMask = arg, p.FieldMask|AMHandlerParamFieldArg
	return p
}

// amWorker is a worker's active-message state.
type amWorker struct {
	enabled  bool
	rndvThr  int // eager below, rendezvous from
	maxHdr   int // the largest user header
	handlers atomic.Pointer[[]*amHandler]
	hmu      sync.Mutex // serializes handler updates

	mu    sync.Mutex          // guards what follows
	reasm fragTable[*amReasm] // eager messages being reassembled
	// rts holds the rendezvous messages handed to a handler and not yet
	// received or released and, with a nil value, those being received
	// by a get, by sender and send number, for the sender's revoke
	// (amRevoked).
	rts map[fragKey]*AMDesc
}

// Default rendezvous threshold of active messages when UCX_RNDV_THRESH is
// "auto".
const amDefaultRndvThresh = 64 << 10

// amInit prepares the worker for active messages when its context has
// FeatureAM: it reads the rendezvous threshold, installs the receive handler
// on every interface that carries active messages, and registers the
// progress of queued sends.
func (w *Worker) amInit() error {
	if w.ctx.features&FeatureAM == 0 {
		return nil
	}
	a := &w.am
	a.rndvThr = amDefaultRndvThresh
	if w.ctx.rndvThr >= 0 {
		a.rndvThr = w.ctx.rndvThr
	}
	for _, wi := range w.ifaces {
		if wi.attr.Flags&capAM == 0 {
			continue
		}
		wi := wi
		cb := func(_ any, data []byte, flags uint32) ucs.Status { return w.amRecv(wi, data, flags) }
		if err := wi.iface.SetAMHandler(amUCP, cb, nil, uct.CBFlagSync); err != nil {
			return fmt.Errorf("active-message handler on %s: %w", wi.rsc.tl.TLName, err)
		}
	}
	a.maxHdr = w.amMaxHeader()
	empty := []*amHandler{}
	a.handlers.Store(&empty)
	a.reasm = fragTable[*amReasm]{}
	a.rts = map[fragKey]*AMDesc{}
	a.enabled = true
	return nil
}

// amMaxHeader is the largest user header AMSendNBX takes: what fits in one
// message of every interface that carries active messages, with the ucp
// header (WorkerAttr.MaxAMHeader).
func (w *Worker) amMaxHeader() int {
	m := -1
	for _, wi := range w.ifaces {
		if wi.attr.Flags&capAM == 0 {
			continue
		}
		// Eager messages carry amHdrLen bytes of header before it, a
		// rendezvous request tagRTSHdrLen.
		if n := max(wi.attr.AM.MaxBcopy-max(amHdrLen, tagRTSHdrLen), 0); m < 0 || n < m {
			m = n
		}
	}
	return max(m, 0)
}

// sendFlags returns the flags of param that concern an operation.
func sendFlags(param *RequestParam) uint32 {
	if param == nil {
		return 0
	}
	f := uint32(param.OpAttrMask & opAttrFlags)
	if param.OpAttrMask&OpAttrFieldFlags != 0 {
		f |= param.Flags
	}
	return f
}

// Protocol names of active messages, as Request.Query reports them.
const (
	protoAMSingle      = "am/eager/single"
	protoAMFrag        = "am/eager/frag"
	protoAMRndv        = "am/rndv"
	protoAMRndvGet     = "am/rndv/get"
	protoAMRndvAM      = "am/rndv/am"
	protoAMRndvPut     = "am/rndv/put/zcopy"
	protoAMRecv        = "am/rndv/recv"
	protoAMRecvGet     = "am/rndv/recv/get"
	protoAMRecvRkeyPtr = "am/rndv/recv/rkey_ptr"
	protoAMRecvPut     = "am/rndv/recv/put/zcopy"
)

// amSendConnecting is AMSendNBX on an endpoint that connects (kept out of
// it, so that what it captures does not leave the fast path's frame).
func (ep *Endpoint) amSendConnecting(st *epConnect, id uint32, header, data []byte, param *RequestParam) (*Request, bool, error) {
	return ep.whileConnecting(st, "am send", param, false, func(p *RequestParam) (*Request, error) {
		return ep.AMSendNBX(id, header, data, p)
	})
}

// AMSendNBX sends an active message with user AM id, user header and data
// to the endpoint's worker (ucp_am_send_nbx). The header is copied before
// the call returns (as with AMSendFlagCopyHeader); data must stay untouched
// until the operation completes. Flags (RequestParam.SetFlags) choose the
// protocol (AMSendFlagEager, AMSendFlagRNDV; by default eager below
// UCX_RNDV_THRESH, 64 KiB when "auto", and rendezvous from it) and ask for a
// reply endpoint (AMSendFlagReply). It returns (nil, nil) when data may be
// reused at once, or a request that completes when it may (for a rendezvous
// message: once the receiver took or dropped it). It fails with
// ucs.ErrInvalidParam for an id above MaxAMID or both protocol flags,
// ucs.ErrExceedsLimit for a header above WorkerAttr.MaxAMHeader,
// ucs.ErrUnsupported without FeatureAM or an AM lane, ucs.ErrNoResource with
// OpAttrFlagForceImmCmpl when it cannot complete at once, and the
// transport's error otherwise.
func (ep *Endpoint) AMSendNBX(id uint32, header, data []byte, param *RequestParam) (*Request, error) {
	w := ep.w
	if st := ep.conn.Load(); st != nil {
		if r, handled, err := ep.amSendConnecting(st, id, header, data, param); handled {
			return r, err
		}
	}
	if ep.closed.Load() {
		return nil, fmt.Errorf("ucp am send: %w", ErrClosed)
	}
	if st := ep.failStatus.Load(); st != 0 {
		return nil, fmt.Errorf("ucp am send to %s: %w", ep.remoteName, ucs.Status(st))
	}
	if !w.am.enabled {
		return nil, fmt.Errorf("ucp am send: the context was created without FeatureAM: %w", ucs.ErrUnsupported)
	}
	l := ep.am
	if l == nil {
		return nil, fmt.Errorf("ucp am send: no active-message lane to %s: %w", ep.remoteName, ucs.ErrUnsupported)
	}
	if id > MaxAMID {
		return nil, fmt.Errorf("ucp am send: id %d above %d: %w", id, MaxAMID, ucs.ErrInvalidParam)
	}
	if len(header) > w.am.maxHdr {
		return nil, fmt.Errorf("ucp am send: header of %d bytes, more than %d: %w", len(header), w.am.maxHdr, ucs.ErrExceedsLimit)
	}
	flags := sendFlags(param)
	if flags&amFlagEager != 0 && flags&amFlagRNDV != 0 {
		return nil, fmt.Errorf("ucp am send: both eager and rendezvous asked for: %w", ucs.ErrInvalidParam)
	}
	contig := !nonContig(param)
	size := len(data)
	var it dtIter
	if !contig {
		var err error
		if it, err = dtFromParam(data, param, false); err != nil {
			return nil, fmt.Errorf("ucp am send: %w", err)
		}
		size = it.length
	}
	rndv := flags&amFlagRNDV != 0 || (flags&amFlagEager == 0 && (size >= w.am.rndvThr || size > amMaxEager))
	if !rndv && size > amMaxEager {
		it.finish()
		return nil, fmt.Errorf("ucp am send: eager message of %d bytes, more than %d: %w", size, amMaxEager, ucs.ErrExceedsLimit)
	}
	var hflags uint8
	if flags&amFlagReply != 0 {
		hflags = amHdrReply
	}
	if rndv || hflags != 0 {
		// The receiver needs a way back to this worker.
		if err := ep.wireBack(); err != nil {
			it.finish()
			return nil, fmt.Errorf("ucp am send: %w", err)
		}
	}
	th := ep.thresholds()
	single := !rndv && amHdrLen+len(header)+size <= th.lim.bcopy
	h := amHeader{typ: amSingle, flags: hflags, id: uint16(id), hlen: uint32(len(header)), src: w.uid}
	if single && contig && ep.queued.Load() == 0 {
		// The common small message: one copy, no request.
		var hb [amHdrLen]byte
		h.put(hb[:])
		st := l.amPackBuf(amUCP, hb[:], header, data)
		switch {
		case st == ucs.OK:
			if flags&flagNoImmCmpl != 0 {
				r := w.newRequest(param)
				r.size, r.lane, r.proto = len(data), l, protoAMSingle
				w.inflight.Add(1)
				r.complete(ucs.OK)
				return r, nil
			}
			return nil, nil
		case st != ucs.ErrNoResource:
			return nil, fmt.Errorf("ucp am send on %s: %w", l, st)
		case flags&flagForceImmCmpl != 0:
			return nil, fmt.Errorf("ucp am send on %s: %w", l, ucs.ErrNoResource)
		}
	}
	if !single && flags&flagForceImmCmpl != 0 {
		it.finish()
		return nil, fmt.Errorf("ucp am send of %d bytes cannot complete at once: %w", size, ucs.ErrNoResource)
	}
	if contig {
		it = dtIter{contig: data, length: len(data)}
	}
	op := w.newSendOp(ep, topSingle)
	op.fam, op.th, op.id = famAM, th, amUCP
	r := w.newRequest(param)
	r.size, r.lane, r.dt, r.top = size, l, it, op
	op.r, op.dt = r, &r.dt
	// A rendezvous and a fragmented message go as those of tag messages,
	// of the AM family (tag_wire.go).
	more := uint64(0)
	if hflags&amHdrReply != 0 {
		more = hdrReply
	}
	switch {
	case single:
		r.proto = protoAMSingle
		var hb [amHdrLen]byte
		h.put(hb[:])
		op.setHeader(hb[:], header)
	case rndv:
		// Replies and revokes find the send by its number.
		r.proto = protoAMRndv
		w.proto.register(op)
		if op.rndvStart(param, uint64(id), more, header) != 0 {
			r.proto = protoAMRndvGet
		}
	default:
		// Fragments find their message by its number.
		op.kind, r.proto = topMulti, protoAMFrag
		op.msg = w.proto.newID()
		op.zcopy = it.canZcopy() && th.lim.zcopy > 0 && size >= th.zcopy
		op.setFirst(uint64(id), more, header)
	}
	w.inflight.Add(1)
	return op.started(r, ep, w.protoStart(op), flags, "am send")
}

// statusOf returns the ucs.Status an error carries (ucs.ErrIOError for
// others), ucs.OK for nil.
func statusOf(err error) ucs.Status {
	if err == nil {
		return ucs.OK
	}
	var st ucs.Status
	if errors.As(err, &st) {
		return st
	}
	return ucs.ErrIOError
}
