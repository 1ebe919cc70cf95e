package ucp

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// OpAttr holds the fields and flags of RequestParam.OpAttrMask
// (ucp_op_attr_t): an OpAttrField bit says that a field of the
// RequestParam counts, an OpAttrFlag bit asks something of the operation.
// Every nbx call honours the flags the same way.
type OpAttr uint32

// Fields and flags of RequestParam.OpAttrMask.
const (
	OpAttrFieldRequest     OpAttr = 1 << 0
	OpAttrFieldCallback    OpAttr = 1 << 1
	OpAttrFieldUserData    OpAttr = 1 << 2
	OpAttrFieldDatatype    OpAttr = 1 << 3
	OpAttrFieldFlags       OpAttr = 1 << 4
	OpAttrFieldReplyBuffer OpAttr = 1 << 5
	OpAttrFieldMemoryType  OpAttr = 1 << 6
	OpAttrFieldRecvInfo    OpAttr = 1 << 7
	OpAttrFieldMemh        OpAttr = 1 << 8
	// OpAttrFieldRemoteDatatype, OpAttrFieldRemote and
	// OpAttrFieldRemoteCount: RequestParam.RemoteDatatype, Remote and
	// RemoteCount, the remote side of an SGL put or get (SetRemoteSGL).
	OpAttrFieldRemoteDatatype OpAttr = 1 << 9
	OpAttrFieldRemote         OpAttr = 1 << 10
	OpAttrFieldRemoteCount    OpAttr = 1 << 11
	// OpAttrFieldGenericBuffer (goshmem's): RequestParam.GenericBuffer and
	// GenericCount are the buffer a generic datatype's StartPack or
	// StartUnpack gets, instead of the call's buf.
	OpAttrFieldGenericBuffer OpAttr = 1 << 15

	// OpAttrFlagNoImmCmpl: always return a request, even when the operation
	// completed at once; its callback is then called before return.
	OpAttrFlagNoImmCmpl OpAttr = 1 << 16
	// OpAttrFlagFastCmpl: complete as fast as possible. It is a hint, and
	// goshmem accepts it without effect: no protocol choice depends on it
	// (in UCX it favours protocols that complete sooner, such as copying
	// over rendezvous); every operation completes as it would without it.
	OpAttrFlagFastCmpl OpAttr = 1 << 17
	// OpAttrFlagForceImmCmpl: fail with ucs.ErrNoResource rather than return
	// a request.
	OpAttrFlagForceImmCmpl OpAttr = 1 << 18
)

// Datatype describes the elements of a buffer (ucp_datatype_t); see
// datatype.go for its classes.
type Datatype uint64

// DatatypeContig returns the datatype of contiguous elements of elemSize
// bytes (ucp_dt_make_contig).
func DatatypeContig(elemSize int) Datatype { return Datatype(elemSize) << 3 }

// ElemSize returns the element size of a contiguous datatype.
func (d Datatype) ElemSize() int { return int(d >> 3) }

// SendCallback is called when a send-side operation (RMA, atomic, flush)
// completes (ucp_send_nbx_callback_t). status is nil on success.
type SendCallback func(req *Request, status error, userData any)

// RequestParam are the parameters of an operation (ucp_request_param_t);
// only the fields whose OpAttrField bit is set count.
type RequestParam struct {
	OpAttrMask OpAttr
	// Flags are the flags of the operation: AMSendFlags for AMSendNBX,
	// StreamRecvFlags for StreamRecvNBX, EPCloseFlags for EPCloseNBX
	// (OpAttrFieldFlags; set them with SetAMSendFlags, SetStreamRecvFlags
	// or SetEPCloseFlags).
	Flags uint32
	// Request is memory for the request, instead of one from the worker.
	Request  *Request
	Callback SendCallback
	UserData any
	// Datatype of the buffer; contiguous bytes by default, and for atomics
	// the operand size (DatatypeContig(4) or (8); 8 by default).
	Datatype Datatype
	// Reply receives the result of a fetching atomic (zero-extended for
	// 32-bit operations). For CSWAP it holds the compare value on input.
	Reply *uint64
	// MemoryType is the memory type of the buffer (OpAttrFieldMemoryType),
	// which in UCX spares detecting it. It is a hint that goshmem does not
	// read: every buffer it moves is host memory (Context.Query lists
	// ucs.MemoryTypeHost only), so it detects nothing the hint could spare.
	MemoryType ucs.MemoryType
	// Memh is the memory handle the data lies in (SetMemh).
	Memh *MemHandle
	// RecvCallback is the completion callback of a tag receive
	// (ucp_tag_recv_nbx_callback_t); receives call it instead of Callback.
	// Its bit is OpAttrFieldCallback.
	RecvCallback TagRecvCallback
	// StreamRecvCallback is the completion callback of a stream receive
	// (ucp_stream_recv_nbx_callback_t); stream receives call it instead of
	// Callback. Its bit is OpAttrFieldCallback.
	StreamRecvCallback StreamRecvCallback
	// RecvInfo receives the sender's tag and the message length when a
	// receive completes at once (OpAttrFieldRecvInfo).
	RecvInfo *TagRecvInfo
	// IOV are the buffers of a DatatypeIOV operation (SetIOV).
	IOV [][]byte
	// GenericBuffer and GenericCount are what a generic datatype's
	// StartPack or StartUnpack get (OpAttrFieldGenericBuffer).
	GenericBuffer any
	GenericCount  int
	// LocalSGL is the local descriptor of a DatatypeSGL put or get
	// (SetLocalSGL; its bit is OpAttrFieldDatatype).
	LocalSGL *DTLocalSGL
	// RemoteDatatype (only DatatypeSGL), Remote and RemoteCount describe
	// the remote side of an SGL put or get (SetRemoteSGL).
	RemoteDatatype Datatype
	Remote         *DTRemoteSGL
	RemoteCount    int
	// resumed: the operation waited for its endpoint's connection and
	// starts now (ep_connect.go).
	resumed bool
}

// SetCallback sets the completion callback.
func (p *RequestParam) SetCallback(cb SendCallback) *RequestParam {
	p.Callback, p.OpAttrMask = cb, p.OpAttrMask|OpAttrFieldCallback
	return p
}

// SetUserData sets the value passed to the callback.
func (p *RequestParam) SetUserData(d any) *RequestParam {
	p.UserData, p.OpAttrMask = d, p.OpAttrMask|OpAttrFieldUserData
	return p
}

// SetDatatype sets the datatype.
func (p *RequestParam) SetDatatype(d Datatype) *RequestParam {
	p.Datatype, p.OpAttrMask = d, p.OpAttrMask|OpAttrFieldDatatype
	return p
}

// SetTagRecvCallback sets the completion callback of a tag receive.
func (p *RequestParam) SetTagRecvCallback(cb TagRecvCallback) *RequestParam {
	p.RecvCallback, p.OpAttrMask = cb, p.OpAttrMask|OpAttrFieldCallback
	return p
}

// SetRecvInfo sets where a receive that completes at once puts the
// sender's tag and the message length.
func (p *RequestParam) SetRecvInfo(info *TagRecvInfo) *RequestParam {
	p.RecvInfo, p.OpAttrMask = info, p.OpAttrMask|OpAttrFieldRecvInfo
	return p
}

// SetIOV makes the operation's data the buffers of iov, in order (datatype
// DatatypeIOV); the call's buf must then be nil. The buffers must stay
// untouched until the operation completes.
func (p *RequestParam) SetIOV(iov [][]byte) *RequestParam {
	p.IOV, p.Datatype, p.OpAttrMask = iov, DatatypeIOV, p.OpAttrMask|OpAttrFieldDatatype
	return p
}

// SetGenericBuffer sets the buffer and count a generic datatype's
// StartPack or StartUnpack get (by default the call's buf and its length).
func (p *RequestParam) SetGenericBuffer(buffer any, count int) *RequestParam {
	p.GenericBuffer, p.GenericCount, p.OpAttrMask = buffer, count, p.OpAttrMask|OpAttrFieldGenericBuffer
	return p
}

// SetMemh passes the memory handle the data lies in: a rendezvous
// receiver then takes the data through its key without a registration.
func (p *RequestParam) SetMemh(m *MemHandle) *RequestParam {
	p.Memh, p.OpAttrMask = m, p.OpAttrMask|OpAttrFieldMemh
	return p
}

// SetReply sets the reply buffer of a fetching atomic.
func (p *RequestParam) SetReply(r *uint64) *RequestParam {
	p.Reply, p.OpAttrMask = r, p.OpAttrMask|OpAttrFieldReplyBuffer
	return p
}

// SetFlags sets the flags of the operation (RequestParam.Flags) as a raw
// word; SetAMSendFlags, SetStreamRecvFlags and SetEPCloseFlags are the
// typed forms.
func (p *RequestParam) SetFlags(f uint32) *RequestParam {
	p.Flags, p.OpAttrMask = f, p.OpAttrMask|OpAttrFieldFlags
	return p
}

// SetAMSendFlags sets the flags of an AMSendNBX.
func (p *RequestParam) SetAMSendFlags(f AMSendFlags) *RequestParam { return p.SetFlags(uint32(f)) }

// SetStreamRecvFlags sets the flags of a StreamRecvNBX.
func (p *RequestParam) SetStreamRecvFlags(f StreamRecvFlags) *RequestParam {
	return p.SetFlags(uint32(f))
}

// SetEPCloseFlags sets the flags of an EPCloseNBX.
func (p *RequestParam) SetEPCloseFlags(f EPCloseFlags) *RequestParam { return p.SetFlags(uint32(f)) }

// SetOpAttrFlags adds OpAttrFlag bits (OpAttrFlagNoImmCmpl,
// OpAttrFlagFastCmpl, OpAttrFlagForceImmCmpl) to OpAttrMask.
func (p *RequestParam) SetOpAttrFlags(f OpAttr) *RequestParam {
	p.OpAttrMask |= f & opAttrFlags
	return p
}

// opAttrFlags are the OpAttrFlag bits.
const opAttrFlags = OpAttrFlagNoImmCmpl | OpAttrFlagFastCmpl | OpAttrFlagForceImmCmpl

// SetRequest sets user-provided request memory.
func (p *RequestParam) SetRequest(r *Request) *RequestParam {
	p.Request, p.OpAttrMask = r, p.OpAttrMask|OpAttrFieldRequest
	return p
}

// Request is an operation in progress (the UCX request handle). Check it
// with Status or IsCompleted, wait for it with Wait, and give it back with
// Free. Status, IsCompleted and Test may be called from any goroutine: one
// that sees the request completed sees what it delivered (the received
// data, a fetched value).
type Request struct {
	comp uct.Completion // set by an operation that hands it to a transport (ownCompletion, rndvGet)
	w    *Worker
	// The life cycle (complete, Free, hold). state is the ucs.Status,
	// InProgress until the request completed, read and written atomically
	// but at the request's reset, when nothing else can see it. fate,
	// claimed and held decide, once, who completes, reports and releases
	// the request. They are atomic only for a shared request: in the
	// single and serialized thread modes one goroutine at a time runs the
	// worker, and a completion runs on it (transports complete from
	// Progress or inside the call, handlers run from Progress, failures
	// are handled there), so that they are plain words, but in multi mode
	// and for an operation that waits for a software protocol's reply,
	// which an iface with asynchronous delivery (tcp) hands to the
	// handler on a goroutine of its own (swState.add).
	state    int32 // ucs.Status
	fate     int32 // fate* value
	claimed  int32 // 1 once complete ran (or runs): a second completion is ignored
	held     int32 // held* value; heldNone outside hold..unhold, so a pooled request needs no reset
	shared   bool  // its completion may race with its owner (above)
	external bool
	inited   bool
	result   uint64
	result32 uint32
	size     int
	proto    string
	pending  uct.PendingReq
	reserved []byte
	// The operation's fields, zero when the request is handed out for an
	// operation (clearOp): all but the request's own (above: its worker,
	// completion, memory, life-cycle words; below: its functions, its
	// place on the worker's stack) and those every operation sets anew
	// (size, proto, result).
	reqOp
	recv bool            // a receive: not counted as in flight
	sr   streamRecvState // a stream receive
	dt   dtIter          // the data of a tag operation
	tr   tagRecvState    // a tag receive
	rma  rmaOp           // a put, get or atomic posted to a lane (rma.go)
	// The request's pack and unpack functions over dt, made once per
	// Request and kept when it is reused, so that a bcopy put or get
	// allocates no function value.
	pack   uct.PackFunc
	unpack uct.UnpackFunc
	// nextFree links the worker's stack of free requests (requestPool);
	// in a request taken from it, a stale value that nothing reads.
	nextFree *Request
}

// reqOp are fields of a request's operation: one struct, so that clearOp
// clears them in one statement, which keeps it and requestPool.pop within
// the inliner's budget, and no larger than the compiler clears in
// straight stores (192 bytes). The fields that inlined functions of the
// receive paths read (Request.recv, sr, dt, tr) are the request's own: a
// field of an embedded struct costs the inliner one more a use, and
// streamTakes and newRecv lay at its budget.
type reqOp struct {
	cb        SendCallback
	rcb       TagRecvCallback    // a tag receive's callback, called instead of cb
	scb       StreamRecvCallback // a stream receive's callback, called instead of cb
	untracked bool               // a tag send: not counted as in flight either
	userData  any
	reply     *uint64
	lane      *lane
	top       *sendOp      // a tag send still in the worker's hands
	rwi       *workerIface // a receive's data came on it, where no lane says
	sgl       *sglOp       // an SGL put or get
}

// newPooledRequest is the New of a worker's request pool.
func newPooledRequest() any { return new(Request) }

// requestPool holds the free requests of a worker: a request keeps the
// context's RequestSize and RequestInit, and the pool goes away with its
// worker, which cleans up (Params.SetRequestCleanup) the requests it
// initialized when it is destroyed.
//
// In the single and serialized thread modes one goroutine at a time uses
// the worker and its requests (Worker), so the latest freed requests wait
// on a stack (top) that needs no lock: taking one there costs a few
// instructions, where the sync.Pool's per-processor lookup cost about 110
// a request (Get and Put, sm tag_lat 8 B). The stack holds at most
// localRequests; what is freed beyond goes to the sync.Pool, whose
// requests the collector may take back. In multi mode only the sync.Pool
// is used, and so for a shared request (Request), which a transport's
// goroutine may release.
//
// A request on the stack keeps most of its last operation until pop hands
// it out again and clears it (clearOp), as a UCX request is initialized
// for its operation when it is taken: the release of a completed request,
// which a ping-pong does between a message's arrival and its reply, only
// pushes it. What the operation referred to stays reachable meanwhile
// (its callbacks and user data, the endpoint, lane and keys, an iov's or
// a generic datatype's buffers), at most localRequests operations' worth
// per worker, until the request is reused or the worker destroyed
// (Worker.Destroy drops the stack). Only what is large in the usual case,
// the contiguous data buffer and a put's or get's descriptors of it, is
// dropped at release (dropData, about 8 instructions). A request for the
// sync.Pool is cleared when it goes there.
type requestPool struct {
	// top is the stack, linked through Request.nextFree; n counts its
	// requests, and max bounds them: localRequests, and 0 in multi mode.
	top  *Request
	n    int
	max  int
	free sync.Pool
	// inited lists, only with a RequestCleanup function, the requests of
	// the pool that were initialized, for Worker.Destroy; guarded by mu
	// (taken once per new request, not on reuse).
	mu     sync.Mutex
	inited []*Request
}

// localRequests bounds requestPool's stack: enough for the requests a
// ping-pong or a window of a few operations keeps in flight.
const localRequests = 16

// get returns a free request from the sync.Pool (poolRequest); pop takes
// those of the stack.
func (p *requestPool) get() *Request { return p.free.Get().(*Request) }

// push puts r, which nothing refers to any more, on the stack and reports
// whether it did (false when it is full); from the worker's goroutine
// only (put).
func (p *requestPool) push(r *Request) bool {
	if p.n >= p.max {
		return false
	}
	p.n++
	r.nextFree, p.top = p.top, r
	return true
}

// pop takes the latest freed request off the stack, cleared for its next
// operation (clearOp), or returns nil when the stack is empty: the one
// place where the stack's requests are taken (takeRequest, and inlined
// where a request is taken on a fast path). The request is the worker's,
// initialized, and not shared (put gives those to the sync.Pool). From
// the worker's goroutine only.
func (p *requestPool) pop() *Request {
	r := p.top
	if r != nil {
		p.top = r.nextFree
		p.n--
		r.clearOp()
	}
	return r
}

// depth returns how many requests are on the stack.
func (p *requestPool) depth() int { return p.n }

// drop forgets the requests of the stack, for the collector to take back
// with what their last operations referred to (requestPool); from the
// worker's goroutine only.
func (p *requestPool) drop() { p.top, p.n = nil, 0 }

// stacked returns the requests on the stack, the latest first.
func (p *requestPool) stacked() []*Request {
	var rs []*Request
	for r := p.top; r != nil; r = r.nextFree {
		rs = append(rs, r)
	}
	return rs
}

// cleanup calls fn on every request that the pool initialized, once, and
// forgets them.
func (p *requestPool) cleanup(fn func(*Request)) {
	p.mu.Lock()
	inited := p.inited
	p.inited = nil
	p.mu.Unlock()
	for _, r := range inited {
		fn(r)
	}
}

// takeRequest returns a request of the worker's for an operation (what
// newRequest(nil) returns), with every field of the operation's zero: the
// latest freed one of the worker's stack (requestPool.pop, which clears
// it), or one from the sync.Pool (cleared when it went there).
func (w *Worker) takeRequest() *Request {
	if r := w.requests.pop(); r != nil {
		return r
	}
	return w.poolRequest()
}

// poolRequest is takeRequest with the worker's stack empty: a request of
// the sync.Pool, made w's.
func (w *Worker) poolRequest() *Request {
	r := w.requests.get()
	w.adoptRequest(r)
	return r
}

// newRequest returns a request for an operation with the given params,
// from the user's memory or the worker's pool. Every field of the
// operation's is zero (clearOp: pop clears a request of the stack, put
// one for the sync.Pool; resetExternal the caller's), but those set here.
func (w *Worker) newRequest(param *RequestParam) *Request {
	var r *Request
	if param != nil && param.OpAttrMask&OpAttrFieldRequest != 0 && param.Request != nil {
		r = param.Request
		r.resetExternal()
		w.adoptRequest(r)
	} else {
		r = w.takeRequest()
	}
	// r.comp is left as it is: only an operation that hands it to a
	// transport uses it, and sets it then (ownCompletion).
	if param != nil {
		r.setParam(param)
	}
	return r
}

// setParam gives r, a new request, the callbacks and user data of param.
func (r *Request) setParam(param *RequestParam) {
	if param.OpAttrMask&OpAttrFieldCallback != 0 {
		r.cb, r.rcb = param.Callback, param.RecvCallback
	}
	if param.OpAttrMask&OpAttrFieldUserData != 0 {
		r.userData = param.UserData
	}
}

// resetLife makes r's life-cycle words those of a request that runs:
// clearOp does it for the next operation, adoptRequest for a request new
// or external.
func (r *Request) resetLife() {
	r.state, r.fate, r.claimed = int32(ucs.InProgress), fateRunning, 0
}

// resetExternal clears r, request memory of the caller's, for an
// operation: all but what stays with the memory. It is kept out of
// newRequest, whose frame would otherwise hold a whole Request.
//
//go:noinline
func (r *Request) resetExternal() {
	*r = Request{external: true, reserved: r.reserved, inited: r.inited, pack: r.pack, unpack: r.unpack}
}

// adoptRequest makes r, a request from the sync.Pool or the caller's
// memory, w's for an operation: its worker and shared flag, its life-cycle
// words, and its initialization when it is new.
func (w *Worker) adoptRequest(r *Request) {
	r.w, r.shared = w, w.mode == ucs.ThreadModeMulti
	// Plain stores: nothing else sees r yet (a request of the sync.Pool
	// came back through it, after its last use).
	r.resetLife()
	if !r.inited {
		w.initRequest(r)
	}
}

// ownCompletion makes r.comp the request's own, counting one operation,
// for an operation that hands it to a transport (post): whatever it was
// before (a rendezvous get's, rndvGet, or one that recorded an error),
// its end completes r.
func (r *Request) ownCompletion() {
	r.comp = uct.Completion{Func: requestCompleted, Arg: r, Count: 1}
}

// initRequest prepares r, new to the worker, as the context asks: its
// reserved bytes, the context's RequestInit, and its RequestCleanup at the
// worker's end.
func (w *Worker) initRequest(r *Request) {
	r.inited = true
	if n := w.ctx.params.RequestSize; n > 0 && w.ctx.params.FieldMask&ParamFieldRequestSize != 0 {
		r.reserved = make([]byte, n)
	}
	if fn := w.ctx.params.RequestInit; fn != nil && w.ctx.params.FieldMask&ParamFieldRequestInit != 0 {
		fn(r)
	}
	if !r.external && w.ctx.params.RequestCleanup != nil && w.ctx.params.FieldMask&ParamFieldRequestCleanup != 0 {
		w.requests.mu.Lock()
		w.requests.inited = append(w.requests.inited, r)
		w.requests.mu.Unlock()
	}
}

func requestCompleted(c *uct.Completion) {
	c.Arg.(*Request).complete(c.Status())
}

// Fates of a request: who releases it.
const (
	fateRunning int32 = iota // neither completed nor freed
	fateDone                 // completed; Free releases it
	fateFreed                // freed while running; completion releases it
)

// Holds of a request: whether a completion while the call that started it
// still runs is left to that call to report (Request.hold).
const (
	heldNone   int32 = iota // completion reports itself
	heldInCall              // the call runs: a completion now is the call's
	heldDone                // completed while held: the call reports it
)

// hold makes a completion of r, until unhold, finish r without its
// callback: the call that started r reports it, as completed at once.
func (r *Request) hold() {
	if r.shared {
		atomic.StoreInt32(&r.held, heldInCall)
		return
	}
	r.held = heldInCall
}

// unhold ends hold and reports whether r completed meanwhile (the caller
// then reports the completion: r's callback did not run). Otherwise r
// completes later, as usual.
func (r *Request) unhold() bool {
	if !r.shared {
		done := r.held == heldDone
		r.held = heldNone
		return done
	}
	if atomic.CompareAndSwapInt32(&r.held, heldInCall, heldNone) {
		return false
	}
	atomic.StoreInt32(&r.held, heldNone)
	return true
}

// settle decides who releases r: its completion, ended, when the owner
// freed r already (true: the caller releases it), or Free later.
func (r *Request) settle() bool {
	if r.shared {
		return !atomic.CompareAndSwapInt32(&r.fate, fateRunning, fateDone)
	}
	return r.settleOwn()
}

// settleOwn is settle of a request that is not shared.
func (r *Request) settleOwn() bool {
	if r.fate != fateRunning {
		return true
	}
	r.fate = fateDone
	return false
}

// heldResult ends the call that held r (hold) while it started r: r when
// it still runs (its callback runs when it completes), or when it
// completed and the caller asked for a request (OpAttrFlagNoImmCmpl: its
// callback runs now); otherwise nil and r's status, r released.
func (r *Request) heldResult(flags uint32) (*Request, ucs.Status) {
	if !r.unhold() {
		return r, ucs.InProgress
	}
	st := ucs.Status(atomic.LoadInt32(&r.state))
	if flags&flagNoImmCmpl != 0 {
		r.notify(st, r.cb, r.rcb, r.scb, r.userData)
		return r, st
	}
	r.release()
	return nil, st
}

// complete finishes r with status: results are delivered, the callback is
// called, and a request its owner already freed goes back to the pool. It
// may run on a transport's receive goroutine while the owner waits, frees
// and reuses the request: it reads what it needs before publishing the
// status, and the fate word decides, once, who releases the request.
//
// A request completes once: a failure of its endpoint may purge it while a
// transport completes it too, and the later of the two is ignored.
func (r *Request) complete(status ucs.Status) {
	if r.shared {
		r.completeShared(status)
		return
	}
	// The worker's goroutine: nothing else touches r meanwhile.
	if r.claimed != 0 {
		return
	}
	r.claimed = 1
	if r.plainFinish(status) {
		// A release store: the goroutine that tests r reads state
		// atomically; the XCHG of atomic.StoreInt32 waited for this
		// CPU's stores to drain, a tenth of a loopback tag ping-pong.
		ucs.StoreRelease32(&r.state, int32(status))
	} else {
		r.finish(status)
	}
	if r.held == heldInCall {
		r.held = heldDone // the call that started r reports it (unhold)
		return
	}
	if r.cb == nil && r.rcb == nil && r.scb == nil {
		// No callback (a request the owner waits for): notify's end only.
		if r.settleOwn() {
			r.release()
		}
		return
	}
	r.notify(status, r.cb, r.rcb, r.scb, r.userData)
}

// completeShared is complete of a shared request, whose completion may race
// with another (a purge) and with the owner, who may free and reuse r as
// soon as it is completed: what notify needs is read before.
func (r *Request) completeShared(status ucs.Status) {
	if atomic.SwapInt32(&r.claimed, 1) != 0 {
		return
	}
	cb, rcb, scb, ud := r.cb, r.rcb, r.scb, r.userData
	r.finish(status)
	if atomic.LoadInt32(&r.held) == heldInCall && atomic.CompareAndSwapInt32(&r.held, heldInCall, heldDone) {
		return // the call that started r reports it (unhold)
	}
	r.notify(status, cb, rcb, scb, ud)
}

// notify calls the callback of r, completed with status (one of cb, rcb,
// scb, with ud), and releases r if its owner freed it already.
func (r *Request) notify(status ucs.Status, cb SendCallback, rcb TagRecvCallback, scb StreamRecvCallback, ud any) {
	if status == ucs.InProgress {
		status = ucs.OK
	}
	switch {
	case scb != nil && r.recv:
		scb(r, status.Err(), r.tr.got, ud)
	case rcb != nil && r.recv:
		// The request stays ours until the fate word below: the info may
		// be lent from it.
		rcb(r, status.Err(), &r.tr.info, ud)
	case cb != nil:
		cb(r, status.Err(), ud)
	}
	if r.settle() {
		r.release()
	}
}

// finish delivers the result and marks r completed, without the callback.
func (r *Request) finish(status ucs.Status) {
	if status == ucs.InProgress {
		status = ucs.OK
	}
	if status == ucs.OK && r.reply != nil {
		if r.size == 4 {
			*r.reply = uint64(r.result32)
		} else {
			*r.reply = r.result
		}
	}
	if r.dt.started {
		// A generic datatype's state ends here; the iterator itself is
		// cleared once, by release.
		r.dt.finish()
	}
	atomic.StoreInt32(&r.state, int32(status))
	if !r.recv && !r.untracked {
		r.w.inflight.Add(-1)
	}
}

// plainFinish reports whether finishing r with status only publishes the
// status (complete then stores it itself): r is not counted in flight (RMA
// and atomics are, the only ones with a reply to deliver), has no generic
// datatype's state to end, and status is final.
func (r *Request) plainFinish(status ucs.Status) bool {
	return (r.recv || r.untracked) && !r.dt.started && status != ucs.InProgress
}

// doneNow ends r, an operation that completed inside its call: with
// OpAttrFlagNoImmCmpl in flags it is returned completed, its callback run;
// otherwise it completes without a callback, as in UCX, and is released
// (nil is returned).
func (r *Request) doneNow(flags uint32) *Request {
	if flags&flagNoImmCmpl != 0 {
		r.complete(ucs.OK)
		return r
	}
	r.finish(ucs.OK)
	r.release()
	return nil
}

// release gives r, which its owner freed or never had, back to the
// worker's pool (or leaves it to the caller, whose memory it is).
func (r *Request) release() { r.put(false) }

// put is release, and with freed Free's release of a request that is not
// running or is shared: a shared request's completion may still run, and
// it releases the request when it does (settle).
func (r *Request) put(freed bool) {
	if r.shared {
		r.putShared(freed)
		return
	}
	if r.external {
		return
	}
	// A request for the worker's stack keeps its operation until it is
	// taken again (requestPool.pop clears it), so that a release on the
	// critical path, a completed request freed before the next send,
	// costs the push and dropData only. Its fate is a running request's:
	// a second Free, by mistake, then only marks it, as it did when
	// release cleared the request, and the stack stays a list (pop
	// resets the fate).
	r.dropData()
	r.fate = fateRunning
	if r.w.requests.push(r) {
		return
	}
	r.toPool()
}

// putShared is put of a shared request. Its completion may release it on
// a transport's goroutine, which must not touch the lock-free stack: it
// goes to the sync.Pool.
func (r *Request) putShared(freed bool) {
	if freed && atomic.CompareAndSwapInt32(&r.fate, fateRunning, fateFreed) {
		return // the completion releases it
	}
	if !r.external {
		r.dropData()
		r.toPool()
	}
}

// dropData drops the references of r's operation to what may be large
// and is the user's to let go: its contiguous data buffer, and a put's or
// get's descriptors of the data (requestPool). A released request's rma
// is zero.
func (r *Request) dropData() {
	r.dt.contig = nil
	if r.rma.rl != nil {
		// Only puts, gets and atomics use rma, and they all set rl.
		r.rma = rmaOp{}
	}
}

// toPool clears r, released (dropData), and gives it to the sync.Pool:
// the collector may keep its requests a while, and what they referred to
// with them.
func (r *Request) toPool() {
	r.clearOp()
	r.w.requests.free.Put(r)
}

// clearOp clears r, released (its rma is zero: dropData), of its last
// operation, for the next: every field an operation sets but those every
// operation sets anew (size, proto, result), and its life-cycle words
// those of a request that runs. Nothing else sees r (its owner freed it,
// or never had it): plain stores.
func (r *Request) clearOp() {
	// A struct a statement, each cleared in place (a tuple assignment
	// zeroes temporaries and copies them): one struct of all is past the
	// size that the compiler clears in straight stores (192 bytes), and
	// its loop took 12 instructions more; a statement a field took the
	// inliner's budget (reqOp).
	r.reqOp = reqOp{}
	r.recv = false
	r.sr = streamRecvState{}
	r.dt = dtIter{}
	r.tr = tagRecvState{}
	r.resetLife()
}

// Status returns nil when the request completed successfully, ucs.InProgress
// while it runs, and its error otherwise (ucp_request_check_status).
func (r *Request) Status() error {
	st := ucs.Status(atomic.LoadInt32(&r.state))
	if st == ucs.OK {
		return nil
	}
	return st
}

// CheckStatus is Status under the name of the UCX call
// (ucp_request_check_status).
func (r *Request) CheckStatus() error { return r.Status() }

// Test returns the request's status as Status does, and once a tag receive
// completed fills in info (when not nil) with its message's tag and length
// (ucp_request_test).
func (r *Request) Test(info *TagRecvInfo) error {
	err := r.Status()
	if err != ucs.InProgress && info != nil && r.recv {
		*info = r.tr.info
	}
	return err
}

// IsCompleted reports whether the request has completed
// (ucp_request_is_completed).
func (r *Request) IsCompleted() bool { return ucs.Status(atomic.LoadInt32(&r.state)) != ucs.InProgress }

// Wait progresses the request's worker until the request completes and
// returns its status. It does not free the request.
func (r *Request) Wait() error {
	for !r.IsCompleted() {
		if r.w.Progress() == 0 {
			r.w.Idle()
		}
	}
	return r.Status()
}

// Free gives the request back (ucp_request_free). A request that is still
// running completes normally and is then recycled; its callback still runs.
func (r *Request) Free() {
	// A request handed to its owner ends in complete, which always reaches
	// its own decision (settle): exactly one side releases. Free is
	// inlined, and the usual, a completed request, costs the caller one
	// call (put); a shared one decides in put.
	if !r.shared && r.fate == fateRunning {
		r.fate = fateFreed // its completion releases it
		return
	}
	r.put(true)
}

// Release is Free for user-provided request memory (ucp_request_release).
func (r *Request) Release() { r.Free() }

// Cancel asks for the request to end early with ucs.ErrCanceled
// (ucp_request_cancel): a tag receive that no message matched yet, one that
// matched a rendezvous message and waits for its sender to push or put the
// data (which may never come; pushed data that arrives after is dropped, and
// the key of a buffer registered for a put is revoked, which tcp enforces
// but shared memory cannot: with UCX_RNDV_SCHEME=put_zcopy a sender already
// putting there may still write it), or a stream receive still waiting for
// data (what it received stays in its buffer), completes with it at once
// (its callback runs); a send that still waits for transport resources,
// nothing of it sent, does too. A tag send or active message that waits
// for its receiver (a sync send not yet acknowledged, a rendezvous send
// whose receiver has not taken the data) completes with it whatever the
// receiver does, as soon
// as the transport is done with what it was handed (at once when that is
// all of it): a rendezvous message is revoked, so that no receive takes it
// any more, but a receive already reading the sender's memory (through a
// key the announcement carried) may read what the buffer holds after the
// cancel. What a transport has already started runs to completion: RMA,
// atomics, a receive getting or copying its data from the sender's memory,
// an eager send handed over that waits for no reply. A completed request
// is left alone.
func (r *Request) Cancel() {
	if r.IsCompleted() {
		return
	}
	if r.recv && r.tr.fam == famStream {
		r.w.streamCancel(r)
		return
	}
	if r.recv {
		r.w.tagCancel(r)
		return
	}
	if op := r.top; op != nil {
		r.w.cancelSend(r, op)
		return
	}
	if r.lane == nil {
		return
	}
	canceled := false
	var others []*uct.PendingReq
	l := r.lane
	l.sendMu.mu.Lock() // the lane's uct endpoint stays alive meanwhile
	if !l.destroyed {
		l.ep.PendingPurge(func(p *uct.PendingReq) {
			if p == &r.pending {
				canceled = true
			} else {
				others = append(others, p)
			}
		})
		for _, p := range others {
			l.ep.PendingAdd(p, 0)
		}
	}
	l.sendMu.mu.Unlock()
	if canceled {
		r.complete(ucs.ErrCanceled)
	}
}

// Reserved returns the request_size bytes the context reserved in every
// request.
func (r *Request) Reserved() []byte { return r.reserved }

// RequestAttr describes a request (ucp_request_attr_t).
type RequestAttr struct {
	Status      error
	DebugString string
	MemoryType  ucs.MemoryType
}

// Query describes the request: its status and a debug string naming the
// transport and protocol that carry it (ucp_request_query).
func (r *Request) Query() RequestAttr {
	a := RequestAttr{Status: r.Status(), MemoryType: ucs.MemoryTypeHost}
	tl := "none"
	switch {
	case r.lane != nil:
		tl = r.lane.String()
	case r.rwi != nil:
		tl = r.rwi.rsc.tl.TLName + "/" + r.rwi.rsc.tl.DevName
	}
	a.DebugString = fmt.Sprintf("%s on %s, %d bytes", r.proto, tl, r.size)
	return a
}

// The flags of an operation as one word (sendFlags): the OpAttrFlag bits of
// OpAttrMask and those of RequestParam.Flags, which lie below them.
const (
	flagNoImmCmpl    = uint32(OpAttrFlagNoImmCmpl)
	flagForceImmCmpl = uint32(OpAttrFlagForceImmCmpl)

	amFlagReply       = uint32(AMSendFlagReply)
	amFlagEager       = uint32(AMSendFlagEager)
	amFlagRNDV        = uint32(AMSendFlagRNDV)
	streamFlagWaitAll = uint32(StreamRecvFlagWaitAll)
)
