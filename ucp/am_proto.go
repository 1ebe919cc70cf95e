package ucp

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// Kinds of queued active-message operations.
const (
	opCtrl   uint8 = iota // a protocol message (hello, RTR, drop): header and data
	opSingle              // an eager message in one piece
	opFrag                // an eager message in fragments
	opRTS                 // a rendezvous message, before the receiver asked for its data
	opPush                // a rendezvous message whose data goes to the receiver
)

// amOp is an active-message send in progress: the messages it still has to
// hand to the transport, and the zero-copy sends the transport still holds.
type amOp struct {
	ep   *Endpoint
	l    *lane
	lim  laneLimits
	r    *Request // nil for protocol messages
	kind uint8
	h    amHeader   // the first (or only) message's header
	uhdr []byte     // user header
	data []byte     // protocol messages: their payload
	dt   dtIter     // user messages: their data
	off  int        // data bytes handed to the transport
	sent bool       // the first message was handed to the transport
	rid  uint64     // rendezvous: the receiver's request id
	key  []byte     // rendezvous: the packed key of data, for the receiver to get it
	memh *MemHandle // rendezvous: data registered for the send, unmapped at its end

	comp    uct.Completion // zero-copy sends; Count holds one for the issuer
	hbuf    []byte         // header of a zero-copy fragment
	iov     []uct.IOV
	waiting bool       // all handed over; the last zero-copy completion finishes
	status  ucs.Status // the first error
}

// amPacker packs one message for AM bcopy: the header, a, then b or the
// n bytes of it at off; packers are pooled, with their pack function made
// once, so that a send allocates nothing.
type amPacker struct {
	h      amHeader
	a, b   []byte
	it     *dtIter
	off, n int
	fn     uct.PackFunc
}

var packerPool = sync.Pool{New: func() any {
	p := new(amPacker)
	p.fn = p.pack
	return p
}}

func (p *amPacker) pack(dst []byte) int {
	k := len(p.b)
	if p.it != nil {
		k = p.n
	}
	n := amHdrLen + len(p.a) + k
	if n > len(dst) {
		return -1
	}
	p.h.put(dst)
	copy(dst[amHdrLen:], p.a)
	if p.it != nil {
		return amHdrLen + len(p.a) + p.it.pack(p.off, dst[amHdrLen+len(p.a):n])
	}
	copy(dst[amHdrLen+len(p.a):], p.b)
	return n
}

// amBcopy sends one message, the header followed by a and b, copied.
func (l *lane) amBcopy(h *amHeader, a, b []byte) ucs.Status {
	return l.amBcopyIt(h, a, b, nil, 0, 0)
}

// amBcopyIt sends one message, the header followed by a, then b or (it
// not nil) the n bytes of it at off, copied.
func (l *lane) amBcopyIt(h *amHeader, a, b []byte, it *dtIter, off, n int) ucs.Status {
	p := packerPool.Get().(*amPacker)
	p.h, p.a, p.b, p.it, p.off, p.n = *h, a, b, it, off, n
	l.sendMu.Lock()
	_, st := l.ep.AMBcopy(amUCP, p.fn, 0)
	l.sendMu.Unlock()
	p.a, p.b, p.it = nil, nil, nil
	packerPool.Put(p)
	return st
}

// amControl sends a protocol message without payload on ep's AM lane, now
// or, when the lane has no room (or the endpoint has queued operations),
// from Progress.
func (w *Worker) amControl(ep *Endpoint, h amHeader) ucs.Status {
	if ep == nil || ep.closed.Load() || ep.am == nil {
		return ucs.ErrNotConnected
	}
	h.src = w.uid
	return w.amStart(&amOp{ep: ep, l: ep.am, kind: opCtrl, h: h})
}

// amStart runs op as far as the transport takes it, or queues it in the
// worker's send queue behind the endpoint's queued sends. It returns OK
// when op is complete, InProgress when it continues (queued, waiting for
// zero-copy completions, or for a rendezvous receiver), or an error;
// queued operations then end from Progress.
func (w *Worker) amStart(op *amOp) ucs.Status {
	if op.kind == opFrag {
		op.comp = uct.Completion{Count: 1, Func: amZcopyDone, Arg: op}
	}
	op.ep.amq.busy.Add(1)
	st := w.protoStart(op)
	if st != ucs.InProgress {
		op.ep.amq.busy.Add(-1)
	}
	return st
}

// advance is amAdvance, for the worker's send queue (protoOp).
func (op *amOp) advance() ucs.Status { return op.ep.w.amAdvance(op) }

// end finishes op with st, for the worker's send queue (protoOp).
func (op *amOp) end(st ucs.Status) { op.ep.w.amFinish(op, st) }

func (op *amOp) endpoint() *Endpoint { return op.ep }

// abort ends op, queued, with st: fragments already handed to the
// transport end it when their completions come.
func (op *amOp) abort(st ucs.Status) {
	if !op.status.IsErr() {
		op.status = st
	}
	if op.kind != opFrag && op.kind != opPush {
		op.end(st)
		return
	}
	op.waiting = true
	if atomic.AddInt32(&op.comp.Count, -1) == 0 {
		op.waiting = false
		op.end(op.finalStatus())
	}
}

// amAdvance hands op's messages to the transport until it has no room. It
// returns OK when op is complete, ErrNoResource when it must be retried,
// InProgress when it waits for zero-copy completions (which then finish it)
// or, for a rendezvous message, for the receiver; or an error.
func (w *Worker) amAdvance(op *amOp) ucs.Status {
	if op.ep.closed.Load() {
		return ucs.ErrCanceled
	}
	switch op.kind {
	case opCtrl:
		return op.l.amBcopy(&op.h, op.data, nil)
	case opSingle:
		return op.l.amBcopyIt(&op.h, op.uhdr, nil, &op.dt, 0, op.dt.length)
	case opRTS:
		a := &w.am
		a.mu.Lock()
		a.sends[op.h.msg] = op // before the RTS leaves: the reply may come at once
		a.mu.Unlock()
		st := op.l.amBcopy(&op.h, op.uhdr, op.key)
		if st != ucs.OK {
			a.mu.Lock()
			delete(a.sends, op.h.msg)
			a.mu.Unlock()
			return st
		}
		return ucs.InProgress
	}
	// opFrag and opPush: fragments.
	for op.off < op.dt.length {
		var h amHeader
		var uhdr []byte
		switch {
		case op.kind == opPush:
			h = amHeader{typ: amData, src: op.h.src, msg: op.rid, off: uint64(op.off)}
		case !op.sent:
			h, uhdr = op.h, op.uhdr
		default:
			h = amHeader{typ: amMiddle, src: op.h.src, msg: op.h.msg, off: uint64(op.off)}
		}
		st, n := op.sendFrag(&h, uhdr)
		if st == ucs.ErrNoResource {
			return st
		}
		if st.IsErr() {
			op.status = st
			break
		}
		op.sent = true
		op.off += n
	}
	// Everything was handed over: drop the issuer's count.
	op.waiting = true
	if atomic.AddInt32(&op.comp.Count, -1) == 0 {
		op.waiting = false
		return op.finalStatus()
	}
	return ucs.InProgress
}

func (op *amOp) finalStatus() ucs.Status {
	if op.status.IsErr() {
		return op.status
	}
	return op.comp.Status()
}

// sendFrag sends the next fragment of op, with header h and user header
// uhdr, and returns how many data bytes it carried: the first fragment may
// carry none when the user header fills it.
func (op *amOp) sendFrag(h *amHeader, uhdr []byte) (ucs.Status, int) {
	l, lim := op.l, op.lim
	rest := op.dt.length - op.off
	if lim.zcopy == 0 || amHdrLen+len(uhdr) > lim.zhdr || !op.dt.canZcopy() {
		n := min(lim.bcopy-amHdrLen-len(uhdr), rest)
		if n < 0 || (n == 0 && uhdr == nil) {
			return ucs.ErrExceedsLimit, 0
		}
		return l.amBcopyIt(h, uhdr, nil, &op.dt, op.off, n), n
	}
	n := min(lim.zcopy-amHdrLen-len(uhdr), rest)
	if k := lim.ziov; k > 0 && op.dt.iovCount(op.off, n) > k {
		op.iov = op.dt.zcopyIOV(op.iov[:0], op.off, n)
		n = 0
		for _, v := range op.iov[:k] {
			n += len(v.Buffer)
		}
		clear(op.iov)
	}
	if n < 0 || (n == 0 && uhdr == nil) {
		return ucs.ErrExceedsLimit, 0
	}
	if cap(op.hbuf) < amHdrLen+len(uhdr) {
		op.hbuf = make([]byte, amHdrLen+len(uhdr))
	}
	hb := op.hbuf[:amHdrLen+len(uhdr)]
	h.put(hb)
	copy(hb[amHdrLen:], uhdr)
	op.iov = op.dt.zcopyIOV(op.iov[:0], op.off, n)
	atomic.AddInt32(&op.comp.Count, 1)
	l.sendMu.Lock()
	st := l.ep.AMZcopy(amUCP, hb, op.iov, 0, &op.comp)
	l.sendMu.Unlock()
	clear(op.iov)
	if st != ucs.InProgress {
		atomic.AddInt32(&op.comp.Count, -1)
	}
	if st == ucs.InProgress {
		st = ucs.OK
	}
	return st, n
}

// amZcopyDone is the completion of the amOp in c.Arg: it runs when the
// last zero-copy send of an op that handed everything over completes.
func amZcopyDone(c *uct.Completion) {
	op := c.Arg.(*amOp)
	if !op.waiting {
		return
	}
	op.waiting = false
	op.ep.w.amFinish(op, op.finalStatus())
}

// release gives back what op registered, and ends its data's generic
// state.
func (op *amOp) release() {
	op.dt.finish()
	if op.memh != nil {
		op.ep.w.ctx.MemUnmap(op.memh)
		op.memh = nil
	}
}

// amFailEP ends, with st, what waits for the peer of ep, which failed or
// closed: the rendezvous sends it has not taken, and the rendezvous
// receives it was to push data to.
func (w *Worker) amFailEP(ep *Endpoint, st ucs.Status) {
	a := &w.am
	if !a.enabled {
		return
	}
	var ops []*amOp
	var recvs []*amRecv
	a.mu.Lock()
	for id, op := range a.sends {
		if op.ep == ep {
			delete(a.sends, id)
			ops = append(ops, op)
		}
	}
	if w.epByUID(ep.remoteUID) == nil {
		for id, rv := range a.recvs {
			if rv.src == ep.remoteUID {
				delete(a.recvs, id)
				recvs = append(recvs, rv)
			}
		}
	}
	a.mu.Unlock()
	for _, op := range ops {
		w.amFinish(op, st)
	}
	for _, rv := range recvs {
		rv.r.complete(st)
	}
}

// amFinish ends op with status, from Progress.
func (w *Worker) amFinish(op *amOp, st ucs.Status) {
	op.ep.amq.busy.Add(-1)
	op.release()
	if op.r != nil {
		op.r.complete(st)
	} else if st.IsErr() && st != ucs.ErrCanceled {
		w.warnf("ucp: worker %s: protocol message to %s: %v", w.name, op.ep.remoteName, st)
	}
}

// amParked counts ep's rendezvous sends waiting for their receiver.
func (w *Worker) amParked(ep *Endpoint) int32 {
	a := &w.am
	if !a.enabled {
		return 0
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var n int32
	for _, op := range a.sends {
		if op.ep == ep {
			n++
		}
	}
	return n
}

// amReplyEP returns the worker's endpoint to the worker with uid, or nil.
func (w *Worker) amReplyEP(uid uint64) *Endpoint {
	a := &w.am
	a.mu.Lock()
	if ep := a.lastEP; ep != nil && a.lastSrc == uid && !ep.closed.Load() {
		a.mu.Unlock()
		return ep
	}
	a.mu.Unlock()
	ep := w.epByUID(uid)
	if ep != nil {
		a.mu.Lock()
		a.lastSrc, a.lastEP = uid, ep
		a.mu.Unlock()
	}
	return ep
}

// amRecv handles a ucp active message that arrived on interface wi. It runs
// from Progress. Malformed or unexpected messages are dropped and logged.
func (w *Worker) amRecv(wi *workerIface, data []byte, flags uint32) ucs.Status {
	h, p, err := decodeAMHeader(data)
	if err != nil {
		w.warnf("ucp: worker %s: dropped a malformed active message: %v", w.name, err)
		return ucs.OK
	}
	canKeep := flags&uct.CBParamFlagDesc != 0
	a := &w.am
	switch h.typ {
	case amSingle:
		return w.amDeliver(wi, h, p[:h.hlen], p[h.hlen:], data, canKeep)
	case amFirst:
		m := &amReasm{buf: make([]byte, uint64(h.hlen)+h.total), hlen: int(h.hlen), total: h.total, id: h.id, flags: h.flags, wi: wi}
		copy(m.buf, p)
		m.got = uint64(len(p) - int(h.hlen))
		if m.got == m.total {
			w.amDeliverOwned(amHeader{typ: amSingle, flags: m.flags, id: m.id, src: h.src}, m.buf[:m.hlen], m.buf[m.hlen:])
			return ucs.OK
		}
		k := amKey{h.src, h.msg}
		a.mu.Lock()
		_, dup := a.reasm[k]
		if !dup {
			a.reasm[k] = m
		}
		a.mu.Unlock()
		if dup {
			w.warnf("ucp: worker %s: dropped a first fragment of message %d from %#x already in progress", w.name, h.msg, h.src)
		}
	case amMiddle:
		k := amKey{h.src, h.msg}
		a.mu.Lock()
		m := a.reasm[k]
		ok := m != nil && h.off == m.got && uint64(len(p)) <= m.total-m.got
		done := false
		if ok {
			m.got += uint64(len(p))
			done = m.got == m.total
			if done {
				delete(a.reasm, k)
			}
		} else if m != nil {
			delete(a.reasm, k) // the message is lost: free its buffer
		}
		a.mu.Unlock()
		if !ok {
			w.warnf("ucp: worker %s: dropped a fragment of %d bytes at %d of message %d from %#x: no such message or not the next fragment", w.name, len(p), h.off, h.msg, h.src)
			return ucs.OK
		}
		copy(m.buf[m.hlen+int(h.off):], p)
		if done {
			mh := amHeader{typ: amSingle, flags: m.flags, id: m.id, src: h.src}
			w.amDeliverOwned(mh, m.buf[:m.hlen], m.buf[m.hlen:])
		}
	case amRTS:
		w.amDeliverRndv(h, p) // the user header, then the key if any
	case amRTR:
		op := w.amTakeSend(h, "reply")
		if op == nil {
			return ucs.OK
		}
		op.kind, op.rid = opPush, h.total
		op.comp = uct.Completion{Count: 1, Func: amZcopyDone, Arg: op}
		if op.dt.length == 0 {
			w.amFinish(op, ucs.OK)
			return ucs.OK
		}
		if st := w.protoStart(op); st != ucs.InProgress {
			w.amFinish(op, st)
		}
	case amData:
		a.mu.Lock()
		rv := a.recvs[h.msg]
		ok := rv != nil && rv.src == h.src && h.off == uint64(rv.got) && len(p) <= rv.total-rv.got
		done := false
		if ok {
			rv.got += len(p)
			done = rv.got == rv.total
		}
		if done || (rv != nil && !ok) {
			delete(a.recvs, h.msg)
		}
		a.mu.Unlock()
		if !ok {
			w.warnf("ucp: worker %s: dropped rendezvous data of %d bytes at %d from %#x for request %d: no such request or not the next fragment", w.name, len(p), h.off, h.src, h.msg)
			if rv != nil {
				rv.r.complete(ucs.ErrIOError)
			}
			return ucs.OK
		}
		st := rv.r.dt.unpack(int(h.off), p)
		if st != ucs.OK && rv.st == ucs.OK {
			rv.st = st
		}
		if done {
			rv.r.complete(rv.st)
		}
	case amDrop:
		op := w.amTakeSend(h, "drop")
		if op == nil {
			return ucs.OK
		}
		w.amFinish(op, ucs.OK)
	case amHello:
		// The same as the software protocols' wireup (proto_sw.go).
		w.wireBack(h.src, append([]byte(nil), p...))
	}
	return ucs.OK
}

// amTakeSend removes and returns the rendezvous send that control message
// h (a receiver's reply or drop, named by what) is about, or logs the
// message and returns nil when no send of that number went to h's sender.
func (w *Worker) amTakeSend(h amHeader, what string) *amOp {
	a := &w.am
	a.mu.Lock()
	op := a.sends[h.msg]
	if op != nil && op.ep.remoteUID == h.src {
		delete(a.sends, h.msg)
	} else {
		op = nil
	}
	a.mu.Unlock()
	if op == nil {
		w.warnf("ucp: worker %s: dropped a rendezvous %s from %#x for unknown request %d", w.name, what, h.src, h.msg)
	}
	return op
}

// amDeliver calls the handler of an eager message whose data lies in a
// transport buffer (raw), kept only if canKeep.
func (w *Worker) amDeliver(wi *workerIface, h amHeader, uhdr, data, raw []byte, canKeep bool) ucs.Status {
	hd := w.amHandler(h.id)
	if hd == nil {
		w.warnf("ucp: worker %s: dropped active message %d (%d bytes) from %#x: no handler", w.name, h.id, len(data), h.src)
		return ucs.OK
	}
	if !canKeep && hd.flags&AMFlagPersistentData != 0 {
		return w.amCall(hd, h, uhdr, append([]byte(nil), data...), nil, nil, true)
	}
	return w.amCall(hd, h, uhdr, data, raw, wi, canKeep)
}

// amDeliverOwned calls the handler of a reassembled message.
func (w *Worker) amDeliverOwned(h amHeader, uhdr, data []byte) {
	hd := w.amHandler(h.id)
	if hd == nil {
		w.warnf("ucp: worker %s: dropped active message %d (%d bytes) from %#x: no handler", w.name, h.id, len(data), h.src)
		return
	}
	w.amCall(hd, h, uhdr, data, nil, nil, true)
}

// amCall runs the callback; keepable says whether the data may outlive it
// (raw is then the transport buffer to give back, if any). It returns what
// the transport must hear: InProgress when raw is kept.
func (w *Worker) amCall(hd *amHandler, h amHeader, uhdr, data, raw []byte, wi *workerIface, keepable bool) ucs.Status {
	if a := w.amAlign; a > 1 && len(data) > 0 && uintptr(unsafe.Pointer(&data[0]))%uintptr(a) != 0 {
		// WorkerParams.SetAMAlignment: hand over an aligned copy, which the
		// handler may keep; the transport's buffer is not kept.
		data, raw, wi, keepable = alignedCopy(data, a), nil, nil, true
	}
	p := recvParamPool.Get().(*AMRecvParam)
	defer recvParamPool.Put(p)
	*p = AMRecvParam{Length: len(data)}
	if h.flags&amHdrReply != 0 {
		if ep := w.amReplyEP(h.src); ep != nil {
			p.RecvAttr |= AMRecvAttrFieldReplyEP
			p.ReplyEP = ep
		}
	}
	var d *AMDesc
	if keepable {
		d = descPool.Get().(*AMDesc)
		*d = AMDesc{w: w, state: descInCallback, data: data, raw: raw, wi: wi, length: len(data)}
		p.RecvAttr |= AMRecvAttrFlagData
		p.Desc = d
	}
	st := hd.cb(hd.arg, uhdr, data, p)
	*p = AMRecvParam{}
	if d == nil {
		if st == ucs.InProgress {
			w.warnf("ucp: worker %s: the handler of active message %d returned InProgress without AMRecvAttrFlagData; its data is reused", w.name, h.id)
		}
		return ucs.OK
	}
	switch {
	case d.state == descDone:
		// Released or received inside the callback.
		return ucs.OK
	case st == ucs.InProgress:
		d.state = descKept
		if raw != nil {
			return ucs.InProgress
		}
		return ucs.OK
	default:
		*d = AMDesc{}
		descPool.Put(d)
		return ucs.OK
	}
}

// alignedCopy returns a copy of data that starts at a multiple of align.
func alignedCopy(data []byte, align int) []byte {
	buf := make([]byte, len(data)+align-1)
	off := (align - int(uintptr(unsafe.Pointer(&buf[0]))%uintptr(align))) % align
	b := buf[off : off+len(data) : off+len(data)]
	copy(b, data)
	return b
}

// recvParamPool holds the parameters handed to receive callbacks, valid
// only during a callback.
var recvParamPool = sync.Pool{New: func() any { return new(AMRecvParam) }}

// amDeliverRndv calls the handler of a rendezvous request; the data stays
// at the sender until the handler receives it.
func (w *Worker) amDeliverRndv(h amHeader, uhdr []byte) {
	ep := w.amReplyEP(h.src)
	if ep == nil {
		w.warnf("ucp: worker %s: dropped rendezvous message %d from %#x: no endpoint back to the sender", w.name, h.id, h.src)
		return
	}
	d := &AMDesc{w: w, state: descInCallback, rndv: true, length: int(h.total), src: h.src, sreq: h.msg, ep: ep}
	if len(uhdr) > int(h.hlen) {
		key := uhdr[h.hlen:]
		if _, err := decodeRkey(key); err != nil {
			w.warnf("ucp: worker %s: dropped rendezvous message %d from %#x: %v", w.name, h.id, h.src, err)
			return
		}
		d.key, d.raddr = append([]byte(nil), key...), h.off
		uhdr = uhdr[:h.hlen]
	}
	hd := w.amHandler(h.id)
	if hd == nil {
		w.warnf("ucp: worker %s: dropped active message %d (%d bytes, rendezvous) from %#x: no handler", w.name, h.id, h.total, h.src)
		w.AMDataRelease(d)
		return
	}
	if h.total > uint64(maxInt) {
		w.warnf("ucp: worker %s: dropped active message %d of %d bytes: too large", w.name, h.id, h.total)
		w.AMDataRelease(d)
		return
	}
	p := AMRecvParam{RecvAttr: AMRecvAttrFlagRNDV, Length: d.length, Desc: d}
	if h.flags&amHdrReply != 0 {
		p.RecvAttr |= AMRecvAttrFieldReplyEP
		p.ReplyEP = ep
	}
	st := hd.cb(hd.arg, uhdr, nil, &p)
	if d.state == descDone {
		return
	}
	if st == ucs.InProgress {
		d.state = descKept
		return
	}
	w.AMDataRelease(d)
}

const maxInt = int(^uint(0) >> 1)
