package ucp

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// Protocol names of tag sends, as Request.Query reports them.
const (
	protoTagShort      = "tag/eager/short"
	protoTagBcopy      = "tag/eager/bcopy"
	protoTagZcopy      = "tag/eager/zcopy"
	protoTagMultiBcopy = "tag/eager/multi/bcopy"
	protoTagMultiZcopy = "tag/eager/multi/zcopy"
	protoTagSyncBcopy  = "tag/eager/sync/bcopy"
	protoTagSyncZcopy  = "tag/eager/sync/zcopy"
	protoTagSyncMultiB = "tag/eager/sync/multi/bcopy"
	protoTagSyncMultiZ = "tag/eager/sync/multi/zcopy"
	protoTagRndv       = "tag/rndv"
	protoTagRndvAM     = "tag/rndv/am"
	protoTagRndvPut    = "tag/rndv/put/zcopy"
)

// Kinds of sendOp.
const (
	topCtrl   uint8 = iota // a control message: its header only (ack, ATS, RTR)
	topSingle              // an eager message in one piece
	topMulti               // an eager message in fragments
	topRTS                 // a rendezvous request
	topPush                // rendezvous data pushed to the receiver
	topPut                 // rendezvous data put into the receiver's buffer, then the ATP
	topStream              // stream data, in pieces that each carry the stream header (stream.go)
	topWait                // the place in the worker's sends of a canceled send, until its receiver answers
)

// sendOp is a tag send in progress: the messages it still has to hand to the
// transport, and what it waits for. comp.Count counts its references: one
// for the code that advances it (dropped once everything was handed over),
// one per zero-copy send the transport holds, and one for the receiver's
// reply a sync send or a rendezvous waits for. The last one to go ends it.
type sendOp struct {
	comp  uct.Completion // Arg is the op
	w     *Worker
	ep    *Endpoint
	l     *lane
	th    *protoThresh
	r     *Request // nil for a control message
	kind  uint8
	id    uint8 // uct id of a single or control message
	short bool  // single: AMShort
	zcopy bool  // the data goes zero-copy
	hdr   [64]byte
	hlen  int
	tag   uint64
	sreq  uint64 // sync or rendezvous: the number the receiver replies to
	msg   uint64 // fragmented: the message's number
	rreq  uint64 // push: the receiver's number
	reply bool   // registered in the worker's sends, with a reference
	// revoked: a rendezvous whose endpoint closed before the receiver
	// answered; the receiver was told (tagRevokeEP), and the op waits in
	// the worker's sends for its answer.
	revoked bool
	off     int  // data bytes handed over
	sent    bool // the first message was handed over
	dt      *dtIter
	key     dtIter     // rendezvous: the packed key after the RTS header; control: a payload
	memh    *MemHandle // rendezvous: the data registered for the send
	ref     *rkeyRef   // put: the receiver's key
	raddr   uint64     // put: the receive's buffer
	iov     []uct.IOV
}

var sendOpPool = sync.Pool{New: func() any { return new(sendOp) }}

func (w *Worker) newSendOp(ep *Endpoint, kind uint8) *sendOp {
	op := sendOpPool.Get().(*sendOp)
	op.w, op.ep, op.l, op.kind = w, ep, ep.am, kind
	op.comp = uct.Completion{Func: sendOpDone, Arg: op, Count: 1}
	return op
}

// free recycles op; nothing may refer to it any more.
func (op *sendOp) free() {
	iov := op.iov[:0]
	*op = sendOp{iov: iov}
	sendOpPool.Put(op)
}

func (op *sendOp) endpoint() *Endpoint { return op.ep }

func (op *sendOp) final() ucs.Status { return op.comp.Status() }

// drop releases the reference of the code that advances op, with st; an
// error also gives up the reply op waits for (none will come for a
// message that did not leave). It returns op's final status when that was
// the last reference (the caller ends op), InProgress otherwise.
func (op *sendOp) drop(st ucs.Status) ucs.Status {
	n := int32(-1)
	if st.IsErr() {
		op.comp.SetError(st)
		if op.w.tagUnregister(op) {
			n--
		}
	}
	if atomic.AddInt32(&op.comp.Count, n) == 0 {
		return op.final()
	}
	return ucs.InProgress
}

// tagUnregister takes op out of the worker's sends, where it waits for
// its receiver's reply (with a reference), and reports whether it was
// there: not once the reply came or Cancel gave it up (tagCancelReply).
func (w *Worker) tagUnregister(op *sendOp) bool {
	p := &w.proto
	p.lock()
	ok := op.reply && p.sends[op.sreq] == op
	if ok {
		delete(p.sends, op.sreq)
		op.reply = false
	}
	p.unlock()
	return ok
}

// sendOpDone runs when the last reference of an op other than the
// advancing code's goes (a zero-copy completion, the receiver's reply, a
// failure).
func sendOpDone(c *uct.Completion) {
	op := c.Arg.(*sendOp)
	op.end(op.final())
}

// abort ends a queued op with st: the queue gives up its reference.
func (op *sendOp) abort(st ucs.Status) {
	if fin := op.drop(st); fin != ucs.InProgress {
		op.end(fin)
	}
}

// end finishes op: its request completes with st.
func (op *sendOp) end(st ucs.Status) {
	if op.memh != nil {
		op.w.ctx.MemUnmap(op.memh)
	}
	if op.ref != nil {
		op.w.rkc.put(op.ref)
	}
	if r := op.r; r != nil {
		r.top = nil
		r.complete(st)
	} else if st.IsErr() && st != ucs.ErrCanceled && !op.revoked && op.kind != topWait {
		op.w.tagLogf("tag protocol message to %s: %v", op.ep.remoteName, st)
	}
	op.free()
}

// lanePacker packs one message for AM bcopy: a header, then n bytes of
// data from offset off. Each lane has one, used under its sendMu, so that a
// send allocates nothing.
type lanePacker struct {
	hdr    []byte
	it     *dtIter
	off, n int
	fn     uct.PackFunc
}

func (p *lanePacker) pack(dst []byte) int {
	h := len(p.hdr)
	if h+p.n > len(dst) {
		return -1
	}
	copy(dst, p.hdr)
	if p.n == 0 {
		return h
	}
	return h + p.it.pack(p.off, dst[h:h+p.n])
}

// amPack sends a message of header hdr and the n bytes of it at off,
// copied into the transport's buffer (AM bcopy).
func (l *lane) amPack(id uint8, hdr []byte, it *dtIter, off, n int) ucs.Status {
	l.sendMu.Lock()
	p := &l.pk
	if p.fn == nil {
		p.fn = p.pack
	}
	p.hdr, p.it, p.off, p.n = hdr, it, off, n
	_, st := l.ep.AMBcopy(id, p.fn, 0)
	p.hdr, p.it = nil, nil
	l.sendMu.Unlock()
	return st
}

// amShortHdr sends a message whose first 8 bytes go as the AMShort
// header, then data.
func (l *lane) amShortHdr(id uint8, hdr []byte, data []byte) ucs.Status {
	var payload []byte
	switch {
	case len(hdr) == 8:
		payload = data
	case len(data) == 0:
		payload = hdr[8:]
	default:
		payload = append(hdr[8:len(hdr):len(hdr)], data...) // a copy: no hot path sends this way
	}
	l.sendMu.Lock()
	st := l.ep.AMShort(id, binary.LittleEndian.Uint64(hdr), payload)
	l.sendMu.Unlock()
	return st
}

// zsend sends a message of header hdr and the n bytes of op's data at off
// from where they lie (AM zcopy); the transport's completion drops a
// reference of op.
func (op *sendOp) zsend(id uint8, hdr []byte, off, n int) ucs.Status {
	op.iov = op.dt.zcopyIOV(op.iov[:0], off, n)
	atomic.AddInt32(&op.comp.Count, 1)
	l := op.l
	l.sendMu.Lock()
	st := l.ep.AMZcopy(id, hdr, op.iov, 0, &op.comp)
	l.sendMu.Unlock()
	clear(op.iov)
	if st != ucs.InProgress {
		atomic.AddInt32(&op.comp.Count, -1)
		return st
	}
	return ucs.OK
}

// advance hands op's messages to the transport (protoOp).
func (op *sendOp) advance() ucs.Status {
	switch op.kind {
	case topCtrl:
		st := op.sendCtrl()
		if st == ucs.ErrNoResource {
			return st
		}
		return op.drop(st)
	case topSingle:
		var st ucs.Status
		n := op.dt.length
		switch {
		case op.short:
			st = op.l.amShortHdr(op.id, op.hdr[:op.hlen], op.dt.contig)
		case op.zcopy:
			st = op.zsend(op.id, op.hdr[:op.hlen], 0, n)
		default:
			st = op.l.amPack(op.id, op.hdr[:op.hlen], op.dt, 0, n)
		}
		if st == ucs.ErrNoResource {
			return st
		}
		return op.drop(st)
	case topRTS:
		st := op.l.amPack(amTagRTS, op.hdr[:tagRTSHdrLen], &op.key, 0, op.key.length)
		if st == ucs.ErrNoResource {
			return st
		}
		return op.drop(st)
	case topPut:
		return op.advancePut()
	}
	// topMulti, topPush and topStream: fragments.
	for op.off < op.dt.length {
		st, n := op.sendFrag()
		if st == ucs.ErrNoResource {
			return st
		}
		if st.IsErr() {
			return op.drop(st)
		}
		op.sent = true
		op.off += n
	}
	return op.drop(ucs.OK)
}

// advancePut puts the data into the receiver's buffer (copies it there
// when the receiver's memory is mapped here), in zero-copy puts of at most
// the lane's limits, and then sends the ATP on the AM lane, behind them.
func (op *sendOp) advancePut() ucs.Status {
	rk, n := op.ref.rk, op.dt.length
	if !op.sent {
		if p := rk.direct(op.raddr, n); p != nil {
			op.dt.pack(0, unsafe.Slice((*byte)(p), n))
			op.off = n
		}
		for rl := rk.rma; op.off < n; {
			caps := rl.l.wi.attr.Put
			k := n - op.off
			if caps.MaxZcopy > 0 {
				k = min(k, caps.MaxZcopy)
			}
			if m := max(caps.MaxIOV, 1); op.dt.iovCount(op.off, k) > m {
				k = op.maxIOVBytes(m, k)
			}
			op.iov = op.dt.zcopyIOV(op.iov[:0], op.off, k)
			atomic.AddInt32(&op.comp.Count, 1)
			st := rl.ep.PutZcopy(op.iov, op.raddr+uint64(op.off), rl.rkey, &op.comp)
			clear(op.iov)
			if st != ucs.InProgress {
				atomic.AddInt32(&op.comp.Count, -1)
			}
			if st == ucs.ErrNoResource {
				return st
			}
			if st.IsErr() {
				return op.drop(st)
			}
			op.off += k
		}
		op.sent = true
	}
	var hdr [tagATPLen]byte
	put64(hdr[:], op.w.uid, op.rreq, 0)
	var st ucs.Status
	if op.th.lim.short >= tagATPLen {
		st = op.l.amShortHdr(amTagATP, hdr[:], nil)
	} else {
		st = op.l.amPack(amTagATP, hdr[:], nil, 0, 0)
	}
	if st == ucs.ErrNoResource {
		return st
	}
	return op.drop(st)
}

// sendCtrl sends a control message: AMShort where the lane has room for
// it, AM bcopy otherwise.
func (op *sendOp) sendCtrl() ucs.Status {
	if op.key.length == 0 && op.th.lim.short >= op.hlen {
		return op.l.amShortHdr(op.id, op.hdr[:op.hlen], nil)
	}
	return op.l.amPack(op.id, op.hdr[:op.hlen], &op.key, 0, op.key.length)
}

// sendFrag sends the next fragment of a fragmented eager message or of
// pushed rendezvous data and returns how many data bytes it carried.
func (op *sendOp) sendFrag() (ucs.Status, int) {
	if op.kind == topStream {
		// Every piece has the same header, op's: nothing to build (a
		// header built here escapes to the heap, with the lane's packer).
		return op.sendPiece(amStreamData, op.hdr[:streamHdrLen])
	}
	var hdr [tagMaxHeader]byte
	var h []byte
	id := amTagMiddle
	switch {
	case op.kind == topPush:
		id, h = amTagData, hdr[:tagDataHdrLen]
		put64(h, op.w.uid, op.rreq, uint64(op.off))
	case !op.sent:
		id, h = amTagFirst, op.hdr[:tagFirstHdrLen]
	default:
		h = hdr[:tagMiddleHdrLen]
		put64(h, op.w.uid, op.msg, uint64(op.off))
	}
	return op.sendPiece(id, h)
}

// sendPiece sends, with header h, as much of op's data from op.off on as
// one message of uct id id takes, and returns how many data bytes it
// carried.
func (op *sendOp) sendPiece(id uint8, h []byte) (ucs.Status, int) {
	rest := op.dt.length - op.off
	lim := op.th.lim
	if op.zcopy && len(h) <= lim.zhdr {
		n := min(lim.zcopy-len(h), rest)
		if k := op.dt.iovCount(op.off, n); k > lim.ziov {
			n = op.maxIOVBytes(lim.ziov, n)
		}
		if n <= 0 {
			return ucs.ErrExceedsLimit, 0
		}
		return op.zsend(id, h, op.off, n), n
	}
	n := min(lim.bcopy-len(h), rest)
	if n <= 0 {
		return ucs.ErrExceedsLimit, 0
	}
	return op.l.amPack(id, h, op.dt, op.off, n), n
}

// maxIOVBytes returns how many of the n bytes at op.off fit in k iov
// elements.
func (op *sendOp) maxIOVBytes(k, n int) int {
	op.iov = op.dt.zcopyIOV(op.iov[:0], op.off, n)
	m := 0
	for i := 0; i < k && i < len(op.iov); i++ {
		m += len(op.iov[i].Buffer)
	}
	clear(op.iov)
	return m
}

// tagSend starts a tag send of buf, or of param's datatype.
func (ep *Endpoint) tagSend(buf []byte, tag uint64, param *RequestParam, sync bool) (*Request, error) {
	w := ep.w
	if !sync && ep.am != nil && (param == nil || param.OpAttrMask&(OpAttrFieldDatatype|OpAttrFlagNoImmCmpl|OpAttrFieldFlags) == 0) &&
		w.tag.enabled && ep.queued.Load() == 0 && ep.dead() == ucs.OK {
		// The common small message: the tag and the data, no request.
		th := ep.thresholds()
		if len(buf) <= th.short && len(buf) < th.rndv {
			l := ep.am
			l.sendMu.Lock()
			st := l.ep.AMShort(amTagEager, tag, buf)
			l.sendMu.Unlock()
			if st == ucs.OK {
				return nil, nil
			}
			if st != ucs.ErrNoResource {
				return nil, fmt.Errorf("ucp tag send on %s: %w", l, st)
			}
		}
	}
	it, err := dtFromParam(buf, param, false)
	if err != nil {
		return nil, fmt.Errorf("ucp tag send: %w", err)
	}
	return ep.tagSendIter(it, tag, param, sync)
}

// tagSendConnecting is tagSendIter on an endpoint that connects (kept out
// of it, so that what it captures does not leave the fast path's frame).
func (ep *Endpoint) tagSendConnecting(st *epConnect, it dtIter, tag uint64, param *RequestParam, sync bool) (*Request, bool, error) {
	r, handled, err := ep.whileConnecting(st, "tag send", param, false, func(p *RequestParam) (*Request, error) {
		return ep.tagSendIter(it, tag, p, sync)
	})
	if handled && err != nil {
		it.finish()
	}
	return r, handled, err
}

// tagSendIter starts a tag send of the data it, choosing its protocol.
func (ep *Endpoint) tagSendIter(it dtIter, tag uint64, param *RequestParam, sync bool) (*Request, error) {
	w := ep.w
	// Without FeatureTag the call fails, whether the endpoint connects or
	// not.
	if err := w.tagCheck("tag send"); err != nil {
		it.finish()
		return nil, err
	}
	if st := ep.conn.Load(); st != nil {
		if r, handled, err := ep.tagSendConnecting(st, it, tag, param, sync); handled {
			return r, err
		}
	}
	if err := ep.sendCheck("tag send"); err != nil {
		it.finish()
		return nil, err
	}
	flags := sendFlags(param)
	th := ep.thresholds()
	n := it.length
	hlen := tagEagerHdrLen
	if sync {
		hlen = tagSyncHdrLen
	}
	rndv := n >= th.rndv || n > tagMaxEager
	op := w.newSendOp(ep, topSingle)
	op.th, op.tag = th, tag
	switch {
	case rndv:
		op.kind = topRTS
	case !sync && it.isContig() && n <= th.short:
		op.short = true
	case n < th.zcopy || !it.canZcopy() || th.lim.zcopy == 0:
		if hlen+n > th.lim.bcopy {
			op.kind = topMulti
		}
	default:
		op.zcopy = true
		if hlen+n > th.lim.zcopy || hlen > th.lim.zhdr || it.iovCount(0, n) > th.lim.ziov {
			op.kind = topMulti
		}
	}
	force := flags&flagForceImmCmpl != 0
	if force && (sync || rndv || op.kind != topSingle || op.zcopy || ep.queued.Load() > 0) {
		op.free()
		it.finish()
		return nil, fmt.Errorf("ucp tag send of %d bytes cannot complete at once: %w", n, ucs.ErrNoResource)
	}
	r := w.newRequest(param)
	// A tag send is not an RMA or atomic operation, which Worker.Flush
	// waits for: it must not wait for a receiver that may never come.
	r.size, r.lane, r.dt, r.top, r.untracked = n, ep.am, it, op, true
	op.r, op.dt = r, &r.dt
	if sync || rndv {
		if err := ep.tagWireBack(); err != nil {
			op.free()
			r.top = nil
			r.finish(ucs.ErrIOError)
			r.release()
			return nil, fmt.Errorf("ucp tag send: %w", err)
		}
	}
	if sync || rndv {
		w.proto.register(op)
	}
	if op.kind == topMulti {
		op.msg = w.proto.newID()
	}
	r.proto = op.protoName(sync)
	switch {
	case rndv:
		if err := ep.tagRndvStart(op, param, sync); err != nil {
			op.drop(ucs.ErrIOError)
			op.free()
			r.top = nil
			r.finish(ucs.ErrIOError)
			r.release()
			return nil, fmt.Errorf("ucp tag send: %w", err)
		}
	case op.kind == topMulti:
		op.hlen = tagFirstHdrLen
		put64(op.hdr[:], tag, w.uid, op.msg, uint64(n), op.sreq)
	case sync:
		op.id, op.hlen = amTagEagerSync, tagSyncHdrLen
		put64(op.hdr[:], tag, w.uid, op.sreq)
	default:
		op.id, op.hlen = amTagEager, tagEagerHdrLen
		put64(op.hdr[:], tag)
	}
	var st ucs.Status
	if force {
		if st = op.advance(); st == ucs.ErrNoResource {
			op.free()
			r.top = nil
			r.finish(st)
			r.release()
			return nil, fmt.Errorf("ucp tag send on %s: %w", ep.am, st)
		}
	} else {
		st = w.protoStart(op)
	}
	return op.started(r, ep, st, flags, "tag send")
}

// started returns the result of a send whose op (a tag or stream send, of
// request r on ep) was started with status st: r while it runs; when done
// at once, nil (or under OpAttrFlagNoImmCmpl in flags the completed
// request); on an error, the error, for the operation named what. While
// it runs, op belongs to whoever completes it (Progress, maybe in another
// goroutine, which frees it): started reads nothing of it then.
func (op *sendOp) started(r *Request, ep *Endpoint, st ucs.Status, flags uint32, what string) (*Request, error) {
	switch {
	case st == ucs.InProgress:
		return r, nil
	case st == ucs.OK:
		op.free()
		r.top = nil
		return r.doneNow(flags), nil
	default:
		if op.memh != nil {
			op.w.ctx.MemUnmap(op.memh)
		}
		op.free()
		r.top = nil
		r.finish(st)
		r.release()
		return nil, fmt.Errorf("ucp %s on %s: %w", what, ep.am, st)
	}
}

// protoName names op's protocol.
func (op *sendOp) protoName(sync bool) string {
	switch {
	case op.kind == topRTS:
		return protoTagRndv
	case op.short:
		return protoTagShort
	case op.kind == topMulti && sync && op.zcopy:
		return protoTagSyncMultiZ
	case op.kind == topMulti && sync:
		return protoTagSyncMultiB
	case op.kind == topMulti && op.zcopy:
		return protoTagMultiZcopy
	case op.kind == topMulti:
		return protoTagMultiBcopy
	case sync && op.zcopy:
		return protoTagSyncZcopy
	case sync:
		return protoTagSyncBcopy
	case op.zcopy:
		return protoTagZcopy
	}
	return protoTagBcopy
}

// sendCheck checks that the endpoint may send two-sided messages.
func (ep *Endpoint) sendCheck(what string) error {
	if ep.closed.Load() {
		return fmt.Errorf("ucp %s: %w", what, ErrClosed)
	}
	if st := ep.failStatus.Load(); st != 0 {
		return fmt.Errorf("ucp %s to %s: %w", what, ep.remoteName, ucs.Status(st))
	}
	if ep.am == nil {
		return fmt.Errorf("ucp %s: no active-message lane to %s: %w", what, ep.remoteName, ucs.ErrUnsupported)
	}
	return nil
}

// tagWireBack makes sure the peer can reach this worker back before a
// message it must answer (a sync send, a rendezvous): the worker's address
// goes ahead of it, once per endpoint, on the same lane (swWireup).
func (ep *Endpoint) tagWireBack() error {
	if ep.wiredBack.Load() {
		return nil
	}
	w := ep.w
	if swHeaderLen+len(w.address) > ep.thresholds().lim.bcopy {
		return fmt.Errorf("the worker's address (%d bytes) does not fit in a message to %s: %w", len(w.address), ep.remoteName, ucs.ErrExceedsLimit)
	}
	op := w.newSendOp(ep, topCtrl)
	op.th, op.id, op.hlen = ep.thresholds(), amSwWireup, swHeaderLen
	h := swHeader{src: w.uid}
	h.put(op.hdr[:])
	op.key = dtIter{contig: w.address, length: len(w.address)}
	switch st := w.protoStart(op); {
	case st == ucs.OK:
		// Handed over: later messages follow it on the lane. (A queued one
		// leaves the flag for a software operation, which does not go
		// through the queue, to send its own.)
		ep.wiredBack.Store(true)
		op.free()
	case st.IsErr():
		op.free()
		return fmt.Errorf("worker address to %s: %w", ep.remoteName, st)
	}
	return nil
}

// tagAckTo names a sync send to acknowledge: its sender and number.
type tagAckTo struct{ src, sreq uint64 }

// tagAck acknowledges the sync send ack (nothing when ack is zero): a
// receive took its message.
func (w *Worker) tagAck(ack tagAckTo) {
	if ack.sreq == 0 {
		return
	}
	w.tagCtrl(ack.src, amTagAck, tagAckLen, ack.sreq, 0)
}

// tagCtrl sends a control message of uct id id (header length hlen: the
// worker's uid, then a and b) to the worker uid.
func (w *Worker) tagCtrl(uid uint64, id uint8, hlen int, a, b uint64) {
	ep := w.replyEP(uid)
	if ep == nil || ep.am == nil {
		w.tagLogf("no endpoint back to worker %#x for a tag protocol reply", uid)
		return
	}
	op := w.newSendOp(ep, topCtrl)
	op.th, op.id, op.hlen = ep.thresholds(), id, hlen
	put64(op.hdr[:], w.uid, a, b)
	switch st := w.protoStart(op); {
	case st == ucs.OK:
		op.free()
	case st.IsErr():
		w.tagLogf("tag protocol reply to %s: %v", ep.remoteName, st)
		op.free()
	}
}

// tagTakeSend removes and returns the send numbered sreq that waits for a
// reply from the worker src, or logs the reply (named what, unless empty)
// and returns nil. A revoked send is taken only with revoked set (an ATS,
// the receiver's answer); otherwise (an RTR that crossed the revoke) it
// stays, and nil is returned without a word.
func (w *Worker) tagTakeSend(sreq, src uint64, what string, revoked bool) *sendOp {
	p := &w.proto
	p.lock()
	op := p.sends[sreq]
	switch {
	case op == nil || op.ep.remoteUID != src:
		op = nil
	case op.revoked && !revoked:
		p.unlock()
		return nil
	default:
		delete(p.sends, sreq)
	}
	p.unlock()
	if op == nil && what != "" {
		w.tagLogf("dropped a tag %s from %#x for unknown send %d", what, src, sreq)
	}
	return op
}

// tagDropped logs a tag message that could not be used.
func (w *Worker) tagDropped(err error) ucs.Status {
	w.tagLogf("dropped a tag message: %v", err)
	return ucs.OK
}

// tagRecvEager handles an eager message in one piece.
func tagRecvEager(w *Worker, wi *workerIface, data []byte, flags uint32) ucs.Status {
	if len(data) < tagEagerHdrLen {
		return w.tagDropped(fmt.Errorf("eager message of %d bytes: %w", len(data), ucs.ErrInvalidParam))
	}
	return w.tagEagerArrived(wi, binary.LittleEndian.Uint64(data), data[tagEagerHdrLen:], data, flags, tagAckTo{})
}

// tagRecvEagerSync handles a sync eager message in one piece.
func tagRecvEagerSync(w *Worker, wi *workerIface, data []byte, flags uint32) ucs.Status {
	h, p, err := decodeTag(amTagEagerSync, data)
	if err != nil {
		return w.tagDropped(err)
	}
	return w.tagEagerArrived(wi, h.tag, p, data, flags, tagAckTo{h.src, h.sreq})
}

// tagEagerArrived matches an eager message of tag and data p (in the
// transport's buffer raw) to a receive, or keeps it as unexpected.
func (w *Worker) tagEagerArrived(wi *workerIface, tag uint64, p, raw []byte, flags uint32, ack tagAckTo) ucs.Status {
	t := &w.tag
	t.lock()
	if r := t.m.match(tag); r != nil {
		t.unlock()
		w.tagAck(ack)
		r.tr.info = TagRecvInfo{SenderTag: tag, Length: len(p)}
		r.proto, r.rwi = protoTagRecvEager, wi
		r.complete(r.dt.unpack(0, p))
		return ucs.OK
	}
	m := t.newMsg()
	m.tag, m.kind, m.length, m.wi = tag, msgEager, len(p), wi
	m.sync, m.src, m.sreq = ack.sreq != 0, ack.src, ack.sreq
	st := ucs.OK
	if len(p) > 0 {
		st = t.keepPart(m, wi, p, raw, flags)
	}
	t.m.addUnexpected(m)
	t.unlock()
	return st
}

// tagRecvFirst handles the first fragment of an eager message.
func tagRecvFirst(w *Worker, wi *workerIface, data []byte, flags uint32) ucs.Status {
	h, p, err := decodeTag(amTagFirst, data)
	if err != nil {
		return w.tagDropped(err)
	}
	var ack tagAckTo
	if h.sreq != 0 {
		ack = tagAckTo{h.src, h.sreq}
	}
	t := &w.tag
	key := fragKey{h.src, h.msg}
	t.lock()
	if _, dup := t.frags[key]; dup {
		t.unlock()
		return w.tagDropped(fmt.Errorf("first fragment of message %d from %#x already in progress: %w", h.msg, h.src, ucs.ErrInvalidParam))
	}
	if r := t.m.match(h.tag); r != nil {
		r.tr.info = TagRecvInfo{SenderTag: h.tag, Length: int(h.total)}
		r.tr.got = len(p)
		r.proto, r.rwi = protoTagRecvEager, wi
		t.frags[key] = fragDest{r: r}
		t.unlock()
		w.tagAck(ack)
		if st := r.dt.unpack(0, p); st != ucs.OK {
			r.tr.status = st
		}
		return ucs.OK
	}
	m := t.newMsg()
	m.tag, m.kind, m.length, m.msg, m.got, m.wi = h.tag, msgFrag, int(h.total), h.msg, len(p), wi
	m.sync, m.src, m.sreq = ack.sreq != 0, h.src, ack.sreq
	st := t.keepPart(m, wi, p, data, flags)
	t.frags[key] = fragDest{msg: m}
	t.m.addUnexpected(m)
	t.unlock()
	return st
}

// tagRecvMiddle handles a following fragment of an eager message.
func tagRecvMiddle(w *Worker, wi *workerIface, data []byte, flags uint32) ucs.Status {
	h, p, err := decodeTag(amTagMiddle, data)
	if err != nil {
		return w.tagDropped(err)
	}
	t := &w.tag
	key := fragKey{h.src, h.msg}
	t.lock()
	d, ok := t.frags[key]
	if !ok {
		t.unlock()
		return w.tagDropped(fmt.Errorf("fragment of unknown message %d from %#x: %w", h.msg, h.src, ucs.ErrInvalidParam))
	}
	if r := d.r; r != nil {
		if int(h.off) != r.tr.got || len(p) > r.tr.info.Length-r.tr.got {
			delete(t.frags, key)
			t.unlock()
			r.complete(ucs.ErrIOError)
			return w.tagDropped(fmt.Errorf("fragment of %d bytes at %d of message %d from %#x, expected at %d: %w", len(p), h.off, h.msg, h.src, r.tr.got, ucs.ErrInvalidParam))
		}
		if r.tr.got += len(p); r.tr.got == r.tr.info.Length {
			delete(t.frags, key)
		}
		t.unlock()
		r.tagPiece(int(h.off), p)
		return ucs.OK
	}
	m := d.msg
	if int(h.off) != m.got || len(p) > m.length-m.got {
		// The message is lost: forget it.
		delete(t.frags, key)
		t.m.removeUnexpected(m)
		t.releaseMsg(m)
		t.unlock()
		return w.tagDropped(fmt.Errorf("fragment of %d bytes at %d of unexpected message %d from %#x: %w", len(p), h.off, h.msg, h.src, ucs.ErrInvalidParam))
	}
	m.got += len(p)
	if m.got == m.length {
		delete(t.frags, key)
	}
	st := t.keepPart(m, wi, p, data, flags)
	t.unlock()
	return st
}

// tagPiece unpacks p, the data at offset off of the message a receive
// took, and completes the receive when that was the last piece (r.tr.got,
// counted by the caller, reached the message's length).
func (r *Request) tagPiece(off int, p []byte) {
	r.tagUnpack(off, p)
	if r.tr.got == r.tr.info.Length {
		r.w.tagRecvDone(r, r.tr.status)
	}
}

// tagUnpack unpacks p, the data at offset off of the message a receive
// took, keeping the first error in r.tr.status.
func (r *Request) tagUnpack(off int, p []byte) {
	if st := r.dt.unpack(off, p); st != ucs.OK && r.tr.status == ucs.OK {
		r.tr.status = st
	}
}

// tagRecvAck handles the acknowledgement of a sync send.
func tagRecvAck(w *Worker, wi *workerIface, data []byte, flags uint32) ucs.Status {
	return w.tagRecvReply(amTagAck, data, "acknowledgement")
}

// tagRecvReply handles a receiver's reply that ends a send (a sync
// acknowledgement, a rendezvous ATS), named what.
func (w *Worker) tagRecvReply(id uint8, data []byte, what string) ucs.Status {
	h, _, err := decodeTag(id, data)
	if err != nil {
		return w.tagDropped(err)
	}
	if id == amTagATS && h.status == ucs.ErrCanceled {
		// The answer to a revoke (tagRecvRevoke), which may cross the ATS
		// of a receive that took the message: the send may have ended.
		what = ""
	}
	if op := w.tagTakeSend(h.sreq, h.src, what, true); op != nil {
		op.comp.Invoke(h.status)
	}
	return ucs.OK
}

// tagCancelSend cancels the tag or stream send r, whose op is op: one
// that waits in the worker's queue with nothing of it handed to the
// transport ends at once; one that waits for the receiver (tagCancelReply)
// ends once the transport is done with what it was handed.
func (w *Worker) tagCancelSend(r *Request, op *sendOp) {
	q := &w.sendq
	q.mu.Lock()
	found := false
	for i, o := range q.ops {
		if o == protoOp(op) {
			if op.r == r && !op.sent && op.off == 0 {
				q.ops = append(q.ops[:i], q.ops[i+1:]...)
				q.n.Store(int32(len(q.ops)))
				found = true
			}
			break
		}
	}
	q.mu.Unlock()
	if found {
		op.ep.queued.Add(-1)
		op.abort(ucs.ErrCanceled)
		return
	}
	w.tagCancelReply(r)
}

// tagCancelReply makes the send r, if it waits for its receiver's reply
// (a sync send's acknowledgement, a rendezvous reply), stop waiting: it
// ends with ucs.ErrCanceled as soon as the transport is done with what it
// was handed, whatever the receiver does. A rendezvous message is revoked
// (as when its endpoint closes, see tag_rndv.go), so that no receive takes
// it from now on; a receive that is reading the sender's memory already
// (a key went out) may still read it, and then gets what the buffer holds.
// In the worker's sends a stand-in (topWait) takes the send's place until
// the receiver's answer, which it absorbs without a word.
func (w *Worker) tagCancelReply(r *Request) {
	p := &w.proto
	p.lock()
	var op *sendOp
	for _, o := range p.sends {
		if o.r == r && o.reply {
			op = o
			break
		}
	}
	if op == nil {
		p.unlock()
		return
	}
	wait := w.newSendOp(op.ep, topWait)
	wait.th, wait.sreq = op.th, op.sreq
	// A rendezvous stand-in ignores an RTR that crosses the revoke, as a
	// revoked send does (tagTakeSend).
	wait.revoked = op.kind == topRTS
	p.sends[op.sreq] = wait
	revoke := op.kind == topRTS && !op.revoked
	op.reply = false
	p.unlock()
	if revoke {
		w.tagRevoke(op.ep, op.sreq)
	}
	op.comp.Invoke(ucs.ErrCanceled)
}
