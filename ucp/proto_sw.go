package ucp

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// Software RMA and atomics: where no lane of an endpoint can do an
// operation (tcp has no get and no atomics), ucp carries it in active
// messages on the endpoint's AM lane, and the target's worker applies it to
// its memory, from the transport's receive path, without the target's
// program calling anything when the transport delivers messages
// asynchronously (tcp). Atomics are applied with uct.CPUAtomic64/32, the same
// CPU atomics the shared-memory transports use, so a word hit at once from
// same-node and remote peers stays coherent.
//
// The target checks every request against its mapped memory: the packed
// rkey carries a random token of the mapping (the "ucp-sw" entry), and a
// request whose token is unknown, or whose range leaves the mapping, is
// refused (puts are dropped and logged; gets and atomics are answered with
// ucs.ErrInvalidAddr). The log takes the first few refused or malformed
// messages of a minute and counts the rest (swWarnf): a peer cannot
// flood it.
//
// Replies (get data, fetched values, flush acknowledgements) go back on the
// target's endpoint to the initiator, found by the initiator's worker uid:
// both sides must be connected, as they are after an address exchange.

// swComponent names the rkey entry that carries the software token.
const swComponent = "ucp-sw"

// AM ids of the software protocols, above those a user may take.
const (
	amSwPut uint8 = uct.AMMaxID - 1 - iota
	amSwGetReq
	amSwGetRep
	amSwAtomicReq
	amSwAtomicRep
	amSwFlushReq
	amSwFlushRep
	amSwWireup
)

// swHeader starts every software message (little endian, swHeaderLen
// bytes); the payload, if any, follows it.
type swHeader struct {
	status int8   // replies: a ucs.Status
	op     uint8  // atomics: the uct.AtomicOp
	size   uint8  // atomics: 4 or 8
	fetch  uint8  // atomics: 1 if a reply is wanted
	src    uint64 // uid of the sending worker
	token  uint64 // requests: the mapping's token
	raddr  uint64 // requests: the target address
	a      uint64 // get: length; atomic: operand; get reply: offset
	b      uint64 // atomic: compare value; replies: fetched value
	reqID  uint64 // requests and replies: the initiator's request
}

const swHeaderLen = 4 + 7*8

func (h *swHeader) put(b []byte) {
	b[0], b[1], b[2], b[3] = byte(h.status), h.op, h.size, h.fetch
	for i, v := range [...]uint64{h.src, h.token, h.raddr, h.a, h.b, h.reqID} {
		binary.LittleEndian.PutUint64(b[4+8*i:], v)
	}
	binary.LittleEndian.PutUint64(b[4+48:], 0)
}

// decodeSwHeader parses the header of a software message; it fails with
// ucs.ErrInvalidParam when data is too short or a field is out of range
// (a status that is not OK or an error included).
func decodeSwHeader(data []byte) (swHeader, []byte, error) {
	var h swHeader
	if len(data) < swHeaderLen {
		return h, nil, fmt.Errorf("ucp: software message of %d bytes: %w", len(data), ucs.ErrInvalidParam)
	}
	h.status, h.op, h.size, h.fetch = int8(data[0]), data[1], data[2], data[3]
	var v [7]uint64
	for i := range v {
		v[i] = binary.LittleEndian.Uint64(data[4+8*i:])
	}
	h.src, h.token, h.raddr, h.a, h.b, h.reqID = v[0], v[1], v[2], v[3], v[4], v[5]
	// A status is OK or an error: a reply must not leave a request in
	// progress, or claim a status that does not exist.
	if v[6] != 0 || h.status > 0 || h.fetch > 1 || (h.size != 0 && h.size != 4 && h.size != 8) || h.op > uint8(uct.AtomicOpCSwap) {
		return h, nil, fmt.Errorf("ucp: software message header: %w", ucs.ErrInvalidParam)
	}
	return h, data[swHeaderLen:], nil
}

// swState is a worker's bookkeeping of software operations it started.
type swState struct {
	mu   sync.Mutex
	next uint64
	reqs map[uint64]*swReq
	// warn limits the warnings about refused and malformed messages,
	// which a peer can send at any rate; made on first use, under mu.
	warn *ucs.LogLimiter
}

// The software protocols log swWarnBurst refused or malformed messages a
// worker received per swWarnInterval, and count the rest.
const (
	swWarnBurst    = 10
	swWarnInterval = time.Minute
)

// swWarnf logs a refused or malformed software message, through the
// worker's limiter.
func (w *Worker) swWarnf(format string, args ...any) {
	w.sw.mu.Lock()
	if w.sw.warn == nil {
		prefix := "ucp: worker " + w.name + ": "
		w.sw.warn = ucs.NewLogLimiter("warnings about peers' messages", swWarnBurst, swWarnInterval, func(format string, args ...any) {
			w.warnf(prefix+format, args...)
		})
	}
	l := w.sw.warn
	w.sw.mu.Unlock()
	l.Logf(format, args...)
}

// swReq is an operation waiting for its reply.
type swReq struct {
	ep      *Endpoint
	r       *Request
	comp    *uct.Completion // an SGL get's element: ends in it, not in r
	dt      dtIter          // get: where the data goes
	missing int             // get: bytes not yet received
	done    chan struct{}
	err     ucs.Status // flush: set before done is closed; OK on success
}

// fail ends q with st: a request completes with it, a flush returns it.
func (q *swReq) fail(st ucs.Status) {
	if q.done != nil {
		q.err = st
		close(q.done)
		return
	}
	q.end(st)
}

// end ends the request of q with st, or q's element of an SGL get.
func (q *swReq) end(st ucs.Status) {
	if q.comp != nil {
		q.comp.Invoke(st)
		return
	}
	q.r.complete(st)
}

// failEP ends, with st, every operation of ep that waits for a reply.
func (s *swState) failEP(ep *Endpoint, st ucs.Status) {
	s.mu.Lock()
	var qs []*swReq
	for id, q := range s.reqs {
		if q.ep == ep {
			delete(s.reqs, id)
			qs = append(qs, q)
		}
	}
	s.mu.Unlock()
	for _, q := range qs {
		q.fail(st)
	}
}

// addFor registers q, an operation of ep, and returns its id, or 0 and the
// status of ep when ep failed or was closed meanwhile: then nobody else
// will end q, and the caller must fail it itself. (failEP runs after the
// status is set, so either it sees q or this check sees the status.)
func (s *swState) addFor(ep *Endpoint, q *swReq) (uint64, ucs.Status) {
	q.ep = ep
	id := s.add(q)
	if st := ep.dead(); st != ucs.OK {
		if s.take(id, true) != nil {
			return 0, st
		}
		// failEP took it and ends it.
	}
	return id, ucs.OK
}

func (s *swState) add(q *swReq) uint64 {
	if r := q.r; r != nil && !r.shared {
		// Its reply may come on a transport's goroutine (handlers with
		// CBFlagAsync), which then completes it as the owner runs.
		r.shared = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reqs == nil {
		s.reqs = make(map[uint64]*swReq)
	}
	s.next++
	s.reqs[s.next] = q
	return s.next
}

func (s *swState) take(id uint64, remove bool) *swReq {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.reqs[id]
	if remove {
		delete(s.reqs, id)
	}
	return q
}

// newToken returns a random token for a mapping.
func newToken() uint64 {
	var b [8]byte
	rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:]) | 1
}

// installSwHandlers registers the software protocols on every interface
// of the worker that can carry active messages; asynchronously where the
// transport allows it, so that a target serves requests without progress
// calls.
func (w *Worker) installSwHandlers() {
	for _, wi := range w.ifaces {
		if wi.attr.Flags&capAM == 0 {
			continue
		}
		flags := uct.CBFlagSync
		if wi.attr.Flags&uct.IfaceFlagCBAsync != 0 {
			flags = uct.CBFlagAsync
		}
		for id := amSwWireup; id <= amSwPut; id++ {
			wi.iface.SetAMHandler(id, swHandlers[id], w, flags)
		}
	}
}

// swHandlers holds the handler of each software protocol's AM id, indexed
// by that id.
var swHandlers = [uct.AMMaxID]uct.AMCallback{
	amSwPut:       func(arg any, d []byte, _ uint32) ucs.Status { return arg.(*Worker).swRecv(amSwPut, d) },
	amSwGetReq:    func(arg any, d []byte, _ uint32) ucs.Status { return arg.(*Worker).swRecv(amSwGetReq, d) },
	amSwGetRep:    func(arg any, d []byte, _ uint32) ucs.Status { return arg.(*Worker).swRecv(amSwGetRep, d) },
	amSwAtomicReq: func(arg any, d []byte, _ uint32) ucs.Status { return arg.(*Worker).swRecv(amSwAtomicReq, d) },
	amSwAtomicRep: func(arg any, d []byte, _ uint32) ucs.Status { return arg.(*Worker).swRecv(amSwAtomicRep, d) },
	amSwFlushReq:  func(arg any, d []byte, _ uint32) ucs.Status { return arg.(*Worker).swRecv(amSwFlushReq, d) },
	amSwFlushRep:  func(arg any, d []byte, _ uint32) ucs.Status { return arg.(*Worker).swRecv(amSwFlushRep, d) },
	amSwWireup:    func(arg any, d []byte, _ uint32) ucs.Status { return arg.(*Worker).swRecv(amSwWireup, d) },
}

// swSend sends one software message on the endpoint's AM lane. While the
// transport has no room it drives the worker's progress, except when it is
// called from a handler (a reply), where progress would run handlers
// re-entrantly: then it yields until the peer, which waits for the reply and
// so progresses, makes room.
func (ep *Endpoint) swSend(id uint8, h *swHeader, payload []byte) error {
	return ep.swSendFrom(id, h, payload, false)
}

func (ep *Endpoint) swReply(id uint8, h *swHeader, payload []byte) error {
	return ep.swSendFrom(id, h, payload, true)
}

// It fails with the endpoint's status once the endpoint failed or was
// closed, also while it waits for room.
func (ep *Endpoint) swSendFrom(id uint8, h *swHeader, payload []byte, inHandler bool) error {
	l := ep.am
	if l == nil {
		return fmt.Errorf("ucp: no active-message lane to %s for software RMA: %w", ep.remoteName, ucs.ErrUnsupported)
	}
	h.src = ep.w.uid
	pack := func(dst []byte) int {
		h.put(dst)
		return swHeaderLen + copy(dst[swHeaderLen:], payload)
	}
	l.sendMu.mu.Lock()
	defer l.sendMu.mu.Unlock()
	for {
		if st := ep.dead(); st != ucs.OK || l.destroyed {
			if st == ucs.OK {
				st = ucs.ErrCanceled
			}
			return fmt.Errorf("ucp: software message to %s: %w", ep.remoteName, st)
		}
		_, st := l.ep.AMBcopy(id, pack, uct.SendFlagSignaled) // see uctSendFlags
		switch st {
		case ucs.OK:
			return nil
		case ucs.ErrNoResource:
			l.sendMu.mu.Unlock()
			if inHandler {
				runtime.Gosched()
			} else {
				ep.w.uw.Progress()
			}
			l.sendMu.mu.Lock()
		default:
			return fmt.Errorf("ucp: software message on %s: %w", l, st)
		}
	}
}

// markSwDirty records that the endpoint sent software operations that a
// flush must wait for.
func (ep *Endpoint) markSwDirty() {
	if !ep.swDirty.Swap(true) {
		ep.w.swDirtyEPs.Add(1)
	}
}

// swChunk is the largest payload of one software message on the AM lane.
func (ep *Endpoint) swChunk() int {
	if ep.am == nil {
		return 0
	}
	return ep.am.wi.attr.AM.MaxBcopy - swHeaderLen
}

// swClean forgets the software operations the endpoint sent since its last
// flush: it failed or was closed, and nothing will flush them.
func (ep *Endpoint) swClean() {
	if ep.swDirty.Swap(false) {
		ep.w.swDirtyEPs.Add(-1)
	}
}

func (ep *Endpoint) swCheck(rkey *Rkey, what string) error {
	if ep.closed.Load() {
		return fmt.Errorf("ucp %s: %w", what, ErrClosed)
	}
	if ep.am == nil || ep.swChunk() <= 0 {
		return fmt.Errorf("ucp %s: no lane to %s can do it, and no active-message lane to emulate it: %w", what, ep.remoteName, ucs.ErrUnsupported)
	}
	if rkey == nil || rkey.ep != ep || rkey.swToken == 0 {
		return fmt.Errorf("ucp %s: rkey has no software token for this endpoint: %w", what, ucs.ErrInvalidParam)
	}
	if !ep.wiredBack.Load() {
		return ep.swWireup()
	}
	return nil
}

// swWireup sends the worker's address to the peer once, before the
// endpoint's first software operation, so that the peer can reply even if
// it never connected to this worker itself (a worker created after the
// address exchange, a client of a server): the peer then creates the
// endpoint back, as UCX's wireup does. The message travels ahead of the
// operations on the same lane, so the endpoint exists when they arrive.
func (ep *Endpoint) swWireup() error {
	if err := ep.swSend(amSwWireup, &swHeader{}, ep.w.address); err != nil {
		return err
	}
	ep.wiredBack.Store(true)
	return nil
}

// wireBack makes sure the worker has an endpoint to the worker uid, whose
// packed address is addr (see swWireup).
func (w *Worker) wireBack(uid uint64, addr []byte) {
	if w.epByUID(uid) != nil {
		return
	}
	ra, err := decodeWorkerAddress(addr)
	if err == nil && ra.uid != uid {
		err = fmt.Errorf("address of worker %x sent by worker %x: %w", ra.uid, uid, ucs.ErrInvalidAddr)
	}
	if err != nil {
		w.swWarnf("dropped a wireup message: %v", err)
		return
	}
	w.wireMu.Lock()
	defer w.wireMu.Unlock()
	if w.epByUID(uid) != nil {
		return
	}
	p := new(EPParams).SetAddress(addr)
	p.internal = true
	if _, err := w.NewEndpoint(p); err != nil {
		w.swWarnf("no endpoint back to %s for replies: %v", ra.name, err)
	}
}

// swPut sends buf to raddr in pieces; it is complete locally on return.
func (ep *Endpoint) swPut(buf []byte, raddr uint64, rkey *Rkey) error {
	if err := ep.swCheck(rkey, "put"); err != nil {
		return err
	}
	chunk := ep.swChunk()
	for off := 0; off < len(buf) || off == 0; off += chunk {
		end := min(off+chunk, len(buf))
		h := swHeader{token: rkey.swToken, raddr: raddr + uint64(off)}
		if err := ep.swSend(amSwPut, &h, buf[off:end]); err != nil {
			return err
		}
		if end == len(buf) {
			break
		}
	}
	ep.markSwDirty()
	return nil
}

// swGet asks the target for the it.length bytes at raddr, to unpack into
// it; the request completes when all of them arrived.
func (ep *Endpoint) swGet(it dtIter, raddr uint64, rkey *Rkey, r *Request) (*Request, error) {
	if err := ep.swCheck(rkey, "get"); err != nil {
		return nil, err
	}
	r.proto, r.lane = "get/sw", ep.am
	ep.w.inflight.Add(1)
	if it.length == 0 {
		r.finish(ucs.OK)
		r.release()
		return nil, nil
	}
	id, st := ep.w.sw.addFor(ep, &swReq{r: r, dt: it, missing: it.length})
	if st != ucs.OK {
		r.finish(st)
		r.release()
		return nil, fmt.Errorf("ucp get/sw to %s: %w", ep.remoteName, st)
	}
	h := swHeader{token: rkey.swToken, raddr: raddr, a: uint64(it.length), reqID: id}
	if err := ep.swSend(amSwGetReq, &h, nil); err != nil {
		if ep.w.sw.take(id, true) == nil {
			return r, nil // the endpoint failed, and its failure completed r
		}
		r.finish(ucs.ErrIOError)
		r.release()
		return nil, err
	}
	return r, nil
}

// swAtomic sends an atomic to the target; a fetching one completes r when
// the old value comes back, a posted one is complete locally at once.
func (ep *Endpoint) swAtomic(op uct.AtomicOp, size int, value, compare, raddr uint64, rkey *Rkey, r *Request, param *RequestParam) (*Request, error) {
	if err := ep.swCheck(rkey, "atomic "+op.String()); err != nil {
		return nil, err
	}
	h := swHeader{op: uint8(op), size: uint8(size), token: rkey.swToken, raddr: raddr, a: value, b: compare}
	r.proto, r.lane = "amo/sw", ep.am
	ep.w.inflight.Add(1)
	if r.reply == nil {
		ep.markSwDirty()
		err := ep.swSend(amSwAtomicReq, &h, nil)
		if err == nil && sendFlags(param)&flagNoImmCmpl != 0 {
			r.complete(ucs.OK)
			return r, nil
		}
		r.finish(ucs.OK)
		r.release()
		return nil, err
	}
	h.fetch = 1
	id, st := ep.w.sw.addFor(ep, &swReq{r: r})
	if st != ucs.OK {
		r.finish(st)
		r.release()
		return nil, fmt.Errorf("ucp amo/sw to %s: %w", ep.remoteName, st)
	}
	h.reqID = id
	if err := ep.swSend(amSwAtomicReq, &h, nil); err != nil {
		if ep.w.sw.take(id, true) == nil {
			return r, nil // the endpoint failed, and its failure completed r
		}
		r.finish(ucs.ErrIOError)
		r.release()
		return nil, err
	}
	return r, nil
}

// swFlush waits until the target has applied every software operation sent
// to it before: the flush request travels behind them on the same lane. Its
// callers flush the endpoint's lanes next. It fails with the endpoint's
// status when the endpoint fails before the target answers.
func (ep *Endpoint) swFlush() error {
	q, err := ep.swFlushStart()
	if q == nil {
		return err
	}
	for {
		select {
		case <-q.done:
			if q.err != ucs.OK {
				return fmt.Errorf("ucp flush/sw to %s: %w", ep.remoteName, q.err)
			}
			return nil
		default:
		}
		if ep.w.Progress() == 0 {
			ep.w.idle()
		}
	}
}

// swFlushStart sends the target a flush request behind the software
// operations sent to it, when there are any the lane's flush does not
// cover, and returns it: it is done (q.done closed, q.err set) when the
// target answered or the endpoint failed. It returns nil when there is
// nothing to wait for.
func (ep *Endpoint) swFlushStart() (*swReq, error) {
	if !ep.swDirty.Swap(false) {
		return nil, nil
	}
	ep.w.swDirtyEPs.Add(-1)
	if f := ep.am.remote.capFlags; f&uct.IfaceFlagCBAsync != 0 && f&uct.IfaceFlagFlushAfterAM != 0 {
		// The target's transport runs the software handlers as it receives
		// each message and acknowledges a flush only after them: the flush
		// of the lane, which every caller does next, covers them, and a
		// request of our own would cost a second round trip.
		return nil, nil
	}
	q := &swReq{done: make(chan struct{})}
	id, st := ep.w.sw.addFor(ep, q)
	if st != ucs.OK {
		return nil, fmt.Errorf("ucp flush/sw to %s: %w", ep.remoteName, st)
	}
	h := swHeader{reqID: id}
	if err := ep.swSend(amSwFlushReq, &h, nil); err != nil {
		if ep.w.sw.take(id, true) == nil {
			return q, nil // the endpoint failed, and its failure ended q
		}
		return nil, err
	}
	return q, nil
}

// region returns the mapped memory that token names, if [raddr, raddr+n)
// lies inside it and its protection lets peers access it as need
// (ProtRemoteRead, ProtRemoteWrite) says.
func (c *Context) region(token, raddr, n uint64, need uint32) (unsafe.Pointer, bool) {
	v, ok := c.regions.Load(token)
	if !ok {
		return nil, false
	}
	m := v.(*MemHandle)
	if m.prot&need != need {
		return nil, false
	}
	base := uint64(uintptr(m.address))
	if raddr < base || n > uint64(m.length) || raddr-base > uint64(m.length)-n {
		return nil, false
	}
	return unsafe.Add(m.address, raddr-base), true
}

// swRecv handles a software message that arrived on one of the worker's
// interfaces, and wakes the worker's waiter: the message may be what it
// waits for.
func (w *Worker) swRecv(id uint8, data []byte) ucs.Status {
	defer w.notify()
	h, payload, err := decodeSwHeader(data)
	if err != nil {
		w.swWarnf("dropped a malformed software message: %v", err)
		return ucs.OK
	}
	switch id {
	case amSwWireup:
		w.wireBack(h.src, payload)
	case amSwPut:
		p, ok := w.ctx.region(h.token, h.raddr, uint64(len(payload)), ProtRemoteWrite)
		if !ok {
			w.swWarnf("refused a put of %d bytes at %#x: no such mapping, or not writable by peers", len(payload), h.raddr)
			return ucs.OK
		}
		ucs.Memcpy(unsafe.Slice((*byte)(p), len(payload)), payload)
	case amSwGetReq:
		ep := w.epByUID(h.src)
		if ep == nil {
			w.swWarnf("get from a worker it has no endpoint to")
			return ucs.OK
		}
		rep := swHeader{reqID: h.reqID}
		p, ok := w.ctx.region(h.token, h.raddr, h.a, ProtRemoteRead)
		if !ok {
			rep.status = int8(ucs.ErrInvalidAddr)
			ep.swReply(amSwGetRep, &rep, nil)
			return ucs.OK
		}
		src := unsafe.Slice((*byte)(p), h.a)
		chunk := ep.swChunk()
		for off := 0; off < len(src); off += chunk {
			rep.a = uint64(off)
			if ep.swReply(amSwGetRep, &rep, src[off:min(off+chunk, len(src))]) != nil {
				return ucs.OK
			}
		}
	case amSwGetRep:
		w.swGetReply(h, payload)
	case amSwAtomicReq:
		rep := swHeader{reqID: h.reqID}
		need := ProtRemoteWrite
		if h.fetch == 1 {
			need |= ProtRemoteRead
		}
		p, ok := w.ctx.region(h.token, h.raddr, uint64(h.size), need)
		if !ok || h.size == 0 || h.raddr%uint64(h.size) != 0 {
			rep.status = int8(ucs.ErrInvalidAddr)
		} else if h.size == 4 {
			old, st := uct.CPUAtomic32(uct.AtomicOp(h.op), (*uint32)(p), uint32(h.a), uint32(h.b))
			rep.b, rep.status = uint64(old), int8(st)
		} else {
			old, st := uct.CPUAtomic64(uct.AtomicOp(h.op), (*uint64)(p), h.a, h.b)
			rep.b, rep.status = old, int8(st)
		}
		if h.fetch == 1 {
			if ep := w.epByUID(h.src); ep != nil {
				ep.swReply(amSwAtomicRep, &rep, nil)
			}
		} else if rep.status != 0 {
			w.swWarnf("refused an atomic at %#x: %v", h.raddr, ucs.Status(rep.status))
		}
	case amSwAtomicRep:
		if q := w.sw.take(h.reqID, true); q != nil {
			q.r.result, q.r.result32 = h.b, uint32(h.b)
			q.r.complete(ucs.Status(h.status))
		}
	case amSwFlushReq:
		if ep := w.epByUID(h.src); ep != nil {
			ep.swReply(amSwFlushRep, &swHeader{reqID: h.reqID}, nil)
		}
	case amSwFlushRep:
		if q := w.sw.take(h.reqID, true); q != nil {
			close(q.done)
		}
	}
	return ucs.OK
}

func (w *Worker) swGetReply(h swHeader, payload []byte) {
	q := w.sw.take(h.reqID, false)
	if q == nil {
		return
	}
	if h.status != 0 {
		w.sw.take(h.reqID, true)
		q.end(ucs.Status(h.status))
		return
	}
	if h.a > uint64(q.dt.length) || uint64(len(payload)) > uint64(q.dt.length)-h.a {
		return // a reply that does not fit the request: ignore it
	}
	q.dt.unpack(int(h.a), payload)
	w.sw.mu.Lock()
	q.missing -= len(payload)
	last := q.missing <= 0
	if last {
		delete(w.sw.reqs, h.reqID)
	}
	w.sw.mu.Unlock()
	if last {
		q.end(ucs.OK)
	}
}

// epByUID returns the worker's endpoint to the worker with uid, or nil.
func (w *Worker) epByUID(uid uint64) *Endpoint {
	w.epMu.Lock()
	defer w.epMu.Unlock()
	for _, ep := range w.eps {
		if ep.remoteUID == uid && ep.dead() == ucs.OK {
			return ep
		}
	}
	return nil
}
