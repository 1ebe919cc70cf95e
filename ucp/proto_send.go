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

// The send engine of the two-sided protocols: tag matching, active
// messages and streams send through one operation type, sendOp, which
// the worker's send queue (proto.go) retries while the transport has no
// room. What differs between them is the header in front of each
// message (a tag, an active message's id and user header, a stream's
// connection number; see sendOp.fragHeader) and, at the receiver, what
// takes the message (tag matching, the active-message handler, the
// stream's queue).

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

// Families of sendOp: whose messages it sends, which decides the header of
// each message (sendOp.fragHeader).
const (
	famTag    uint8 = iota // tag matching (tag_wire.go): a uct id per message type
	famAM                  // active messages (am_wire.go): one uct id, an amHeader
	famStream              // streams (stream_wire.go): the same header on every piece
)

// sendOp is a two-sided send in progress: the messages it still has to
// hand to the transport, and what it waits for. comp.Count counts its
// references: one for the code that advances it (dropped once everything
// was handed over), one per zero-copy send the transport holds, and one
// for the receiver's reply a sync send or a rendezvous waits for. The
// last one to go ends it.
type sendOp struct {
	comp  uct.Completion // Arg is the op
	w     *Worker
	ep    *Endpoint
	l     *lane
	th    *protoThresh
	r     *Request // nil for a control message
	kind  uint8
	fam   uint8
	id    uint8 // uct id of a single or control message, or of an RTS
	short bool  // single: AMShort
	zcopy bool  // the data goes zero-copy
	// The header of the first (or only) message: hdr[:hlen], or big when
	// it does not fit (an active message's long user header). Its last ext
	// bytes are an active message's user header, which the packer reads in
	// place (headParts).
	hdr   [64]byte
	hlen  int
	ext   int
	big   []byte
	fh    [tagMaxHeader]byte // the header of a following fragment, or of a put's ATP
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
	// keyBuf holds a control message's copy of its payload (an RTR's
	// key), kept as the op is recycled: the registration the key came
	// from may end while the message waits to go.
	keyBuf []byte
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
	iov, keyBuf := op.iov[:0], op.keyBuf[:0]
	*op = sendOp{iov: iov, keyBuf: keyBuf}
	sendOpPool.Put(op)
}

// head returns the header of op's first (or only) message.
func (op *sendOp) head() []byte {
	if op.big != nil {
		return op.big
	}
	return op.hdr[:op.hlen]
}

// headParts returns op's first header as the packer takes it: the
// protocol's header, copied, and what follows it, an active message's
// user header, by reference.
func (op *sendOp) headParts() (hdr, ext []byte) {
	h := op.head()
	return h[:len(h)-op.ext], h[len(h)-op.ext:]
}

// setHeader makes the protocol header h, then the user header uh (an
// active message's; copied, as AMSendNBX promises), op's first header.
func (op *sendOp) setHeader(h, uh []byte) {
	n := len(h) + len(uh)
	b := op.hdr[:]
	if n > len(b) {
		op.big = make([]byte, n)
		b = op.big
	}
	copy(b, h)
	copy(b[len(h):], uh)
	op.hlen, op.ext = n, len(uh)
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
		if op.w.unregisterSend(op) {
			n--
		}
	}
	if atomic.AddInt32(&op.comp.Count, n) == 0 {
		return op.final()
	}
	return ucs.InProgress
}

// unregisterSend takes op out of the worker's sends, where it waits for
// its receiver's reply (with a reference), and reports whether it was
// there: not once the reply came or Cancel gave it up (cancelReply).
func (w *Worker) unregisterSend(op *sendOp) bool {
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
		op.w.tagLogf("protocol message to %s: %v", op.ep.remoteName, st)
	}
	op.free()
}

// lanePacker packs one message for AM bcopy: a protocol header (copied
// in, so that a caller may build it on its stack), an active message's
// user header, then n bytes of data from offset off. Each lane has one,
// used under its sendMu (sendMu.lock), so that a send allocates nothing.
type lanePacker struct {
	hb     [64]byte
	hlen   int
	ext    []byte
	it     *dtIter
	buf    dtIter // the data, when given as one buffer (amPackBuf)
	off, n int
	fn     uct.PackFunc
	// short is the payload of a short stream message: the header's last
	// 8 bytes and the data (StreamSendNBX).
	short [8 + streamShortMax]byte
}

func (p *lanePacker) pack(dst []byte) int {
	h := p.hlen + len(p.ext)
	if h+p.n > len(dst) {
		return -1
	}
	copy(dst, p.hb[:p.hlen])
	copy(dst[p.hlen:], p.ext)
	if p.n == 0 {
		return h
	}
	return h + p.it.pack(p.off, dst[h:h+p.n])
}

// amPack sends a message of header hdr (at most 64 bytes), then ext, then
// the n bytes of it at off, copied into the transport's buffer (AM
// bcopy).
func (l *lane) amPack(id uint8, hdr, ext []byte, it *dtIter, off, n int) ucs.Status {
	l.sendMu.lock()
	st := l.packLocked(id, hdr, ext, it, off, n)
	l.sendMu.unlock()
	return st
}

// amPackBuf is amPack of the bytes of data.
func (l *lane) amPackBuf(id uint8, hdr, ext, data []byte) ucs.Status {
	l.sendMu.lock()
	p := &l.pk
	p.buf = dtIter{contig: data, length: len(data)}
	st := l.packLocked(id, hdr, ext, &p.buf, 0, len(data))
	p.buf = dtIter{}
	l.sendMu.unlock()
	return st
}

// packLocked is amPack under the lane's send lock (sendMu.lock).
func (l *lane) packLocked(id uint8, hdr, ext []byte, it *dtIter, off, n int) ucs.Status {
	p := &l.pk
	if p.fn == nil {
		p.fn = p.pack
	}
	p.hlen = copy(p.hb[:], hdr)
	p.ext, p.it, p.off, p.n = ext, it, off, n
	_, st := l.ep.AMBcopy(id, p.fn, uctSendFlags(id))
	p.ext, p.it = nil, nil
	return st
}

// shortPath reports whether a send with param may go as one short active
// message at once, without a request or a send op: the caller asked for
// no datatype, flags or request (OpAttrFlagNoImmCmpl), the endpoint has
// an AM lane and works, and nothing it sent waits in the worker's queue
// (which the message would overtake).
func (ep *Endpoint) shortPath(param *RequestParam) bool {
	// The endpoint works: dead's checks, without its status.
	return ep.am != nil && (param == nil || param.OpAttrMask&(OpAttrFieldDatatype|OpAttrFlagNoImmCmpl|OpAttrFieldFlags) == 0) &&
		ep.queued.Load() == 0 && ep.failStatus.Load() == 0 && !ep.closed.Load()
}

// amShortHdr sends a message whose first 8 bytes go as the AMShort
// header, then data; a signaled one (uctSendFlags) goes by AM bcopy, as
// AMShort cannot carry the flag.
func (l *lane) amShortHdr(id uint8, hdr []byte, data []byte) ucs.Status {
	if uctSendFlags(id) != 0 {
		// The packer copies at most len(hb) header bytes; the rest goes
		// as ext, which it reads in place.
		h, ext := hdr, []byte(nil)
		if k := len(l.pk.hb); len(h) > k {
			h, ext = hdr[:k], hdr[k:]
		}
		return l.amPackBuf(id, h, ext, data)
	}
	var payload []byte
	switch {
	case len(hdr) == 8:
		payload = data
	case len(data) == 0:
		payload = hdr[8:]
	default:
		payload = append(hdr[8:len(hdr):len(hdr)], data...) // a copy: no hot path sends this way
	}
	l.sendMu.lock()
	st := l.ep.AMShort(id, binary.LittleEndian.Uint64(hdr), payload)
	l.sendMu.unlock()
	return st
}

// zsend sends a message of header hdr and the n bytes of op's data at off
// from where they lie (AM zcopy); the transport's completion drops a
// reference of op.
func (op *sendOp) zsend(id uint8, hdr []byte, off, n int) ucs.Status {
	op.iov = op.dt.zcopyIOV(op.iov[:0], off, n)
	atomic.AddInt32(&op.comp.Count, 1)
	l := op.l
	l.sendMu.lock()
	st := l.ep.AMZcopy(id, hdr, op.iov, uctSendFlags(id), &op.comp)
	l.sendMu.unlock()
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
			st = op.l.amShortHdr(op.id, op.head(), op.dt.contig)
		case op.zcopy:
			st = op.zsend(op.id, op.head(), 0, n)
		default:
			h, ext := op.headParts()
			st = op.l.amPack(op.id, h, ext, op.dt, 0, n)
		}
		if st == ucs.ErrNoResource {
			return st
		}
		return op.drop(st)
	case topRTS:
		// The header, then the packed key of the data, if any.
		h, ext := op.headParts()
		st := op.l.amPack(op.id, h, ext, &op.key, 0, op.key.length)
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
	// In the op: a header on the stack would escape to the transport.
	hdr := op.fh[:tagATPLen]
	put64(hdr, op.w.uid, op.rreq, 0)
	var st ucs.Status
	if op.th.lim.short >= tagATPLen {
		st = op.l.amShortHdr(amTagATP, hdr, nil)
	} else {
		st = op.l.amPack(amTagATP, hdr, nil, nil, 0, 0)
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
		return op.l.amShortHdr(op.id, op.head(), nil)
	}
	h, ext := op.headParts()
	return op.l.amPack(op.id, h, ext, &op.key, 0, op.key.length)
}

// sendFrag sends the next fragment of a fragmented eager message, of
// pushed rendezvous data or of stream data, and returns how many data
// bytes it carried.
func (op *sendOp) sendFrag() (ucs.Status, int) {
	id, h := op.fragHeader()
	return op.sendPiece(id, h)
}

// fragHeader returns the uct id and the header of op's next fragment, at
// op.off: the first one's is op's header; the others' are built in op.fh
// (in op, so that it does not escape to the heap through the transport).
func (op *sendOp) fragHeader() (uint8, []byte) {
	if op.kind == topPush {
		// Pushed rendezvous data, of every family.
		put64(op.fh[:], op.w.uid, op.rreq, uint64(op.off))
		return amTagData, op.fh[:tagDataHdrLen]
	}
	switch {
	case op.fam == famStream:
		// Every piece has the same header, op's.
		return amStreamData, op.head()
	case !op.sent:
		// A tag message's or an active message's (setFirst).
		return amTagFirst, op.head()
	}
	put64(op.fh[:], op.w.uid, op.msg, uint64(op.off))
	return amTagMiddle, op.fh[:tagMiddleHdrLen]
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
	if n < 0 || (n == 0 && op.sent) {
		// (The first fragment of an active message may carry its user
		// header alone.)
		return ucs.ErrExceedsLimit, 0
	}
	var ext []byte
	if !op.sent && op.kind != topPush {
		h, ext = op.headParts()
	}
	return op.l.amPack(id, h, ext, op.dt, op.off, n), n
}

// rndvSendData sends the data of op, a rendezvous send whose receiver
// asked for it (an RTR, for its receive rreq): put at raddr with key (a
// tag receiver's buffer) where the receiver's memory is mapped here or a
// lane puts to it such that the ATP, sent next on the AM lane, cannot
// arrive before the data (the same connection, or a transport done when
// its call returns); pushed in fragments otherwise.
func (w *Worker) rndvSendData(op *sendOp, rreq uint64, key []byte, raddr uint64) {
	op.kind, op.rreq, op.off, op.sent = topPush, rreq, 0, false
	op.zcopy = op.dt.canZcopy() && op.th.lim.zcopy > 0 && op.dt.length >= op.th.zcopy
	names := &rndvSendProtos[op.fam]
	if names.push != "" {
		op.r.proto = names.push
	}
	if len(key) > 0 && op.dt.canZcopy() {
		if ref := w.rkc.get(op.ep, key, true); ref != nil {
			rk := ref.rk
			if rk.base != nil || (rk.rma != nil && (rk.rma.l == op.ep.am || !rk.rma.l.deferred())) {
				op.kind, op.ref, op.raddr = topPut, ref, raddr
				op.r.proto = names.put
			} else {
				w.rkc.put(ref)
			}
		}
	}
	// A reference for the code that advances the data, then the reply's
	// is given up: it came.
	atomic.AddInt32(&op.comp.Count, 1)
	op.comp.Invoke(ucs.OK)
	if st := w.protoStart(op); st != ucs.InProgress {
		op.end(st)
	}
}

// setFirst makes the header of the first fragment of op, a fragmented
// eager message of its family numbered op.msg (tag_wire.go), op's first
// header: arg is the family's word (a tag, an active message's id), more
// the flag hdrReply, uh an active message's user header; a sync tag send
// has its number in it.
func (op *sendOp) setFirst(arg, more uint64, uh []byte) {
	var h [tagFirstHdrLen]byte
	put64(h[:], arg, op.w.uid, op.msg, uint64(op.dt.length), op.sreq, hdrFlags(op.fam, len(uh), more))
	op.setHeader(h[:], uh)
}

// rndvSendProtos names, by family, the protocol of a rendezvous send once
// its receiver asked for the data (Request.Query): pushed, or put.
var rndvSendProtos = [...]struct{ push, put string }{
	famTag:    {protoTagRndvAM, protoTagRndvPut},
	famAM:     {protoAMRndvAM, protoAMRndvPut},
	famStream: {protoStreamRndvAM, protoStreamRndvPut},
}

// rndvStart makes op, a rendezvous send of its family registered for the
// receiver's reply, announce its data with an RTS (tag_wire.go): arg is
// the family's word (a tag, an active message's id, a stream's
// connection number), more the flags tagRTSSync and hdrReply, and uh an
// active message's user header. Where UCX_RNDV_SCHEME lets the receiver
// take the data (see tag_rndv.go), the RTS carries the data's key
// (rndvAnnounce); an active message's always may, as its receiver takes no
// put. It returns the data's address, 0 when no key goes.
func (op *sendOp) rndvStart(param *RequestParam, arg, more uint64, uh []byte) uint64 {
	w := op.w
	op.kind, op.id = topRTS, amTagRTS
	raddr := uint64(0)
	if sch := w.ctx.rndvSch; sch == rndvGet || sch == rndvAuto && !op.th.netPut {
		raddr = op.rndvAnnounce(param, tagRTSHdrLen+len(uh))
	}
	var h [tagRTSHdrLen]byte
	put64(h[:], arg, w.uid, op.sreq, uint64(op.dt.length), raddr, hdrFlags(op.fam, len(uh), more))
	op.setHeader(h[:], uh)
	return raddr
}

// rndvAnnounce makes the RTS of op, a rendezvous send whose RTS header
// takes hlen bytes, carry the packed key of its data (op.key), when the
// data is one buffer that a lane from the receiver reaches with a key
// (rndvKey) and the key fits in the message; it returns the data's
// address, or 0 without a key.
func (op *sendOp) rndvAnnounce(param *RequestParam, hlen int) uint64 {
	if !op.dt.isContig() || op.dt.length == 0 {
		return 0
	}
	key, memh := op.w.rndvKey(op.ep, op.dt.contig, param, false)
	if key == nil || hlen+len(key) > op.th.lim.bcopy {
		if memh != nil {
			op.w.ctx.MemUnmap(memh)
		}
		return 0
	}
	op.key, op.memh = dtIter{contig: key, length: len(key)}, memh
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(op.dt.contig))))
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

// takeSend removes and returns the send numbered sreq that waits for a
// reply from the worker src, or logs the reply (named what, unless empty)
// and returns nil. A revoked send is taken only with revoked set (an ATS,
// the receiver's answer); otherwise (an RTR that crossed the revoke) it
// stays, and nil is returned without a word.
func (w *Worker) takeSend(sreq, src uint64, what string, revoked bool) *sendOp {
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

// cancelSend cancels the tag or stream send r, whose op is op: one
// that waits in the worker's queue with nothing of it handed to the
// transport ends at once; one that waits for the receiver (cancelReply)
// ends once the transport is done with what it was handed.
func (w *Worker) cancelSend(r *Request, op *sendOp) {
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
	w.cancelReply(r)
}

// cancelReply makes the send r, if it waits for its receiver's reply
// (a sync send's acknowledgement, a rendezvous reply), stop waiting: it
// ends with ucs.ErrCanceled as soon as the transport is done with what it
// was handed, whatever the receiver does. A rendezvous message is revoked
// (as when its endpoint closes, see tag_rndv.go), so that no receive takes
// it from now on; a receive that is reading the sender's memory already
// (a key went out) may still read it, and then gets what the buffer holds.
// In the worker's sends a stand-in (topWait) takes the send's place until
// the receiver's answer, which it absorbs without a word.
func (w *Worker) cancelReply(r *Request) {
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
	// revoked send does (takeSend).
	wait.revoked = op.kind == topRTS
	p.sends[op.sreq] = wait
	revoke := op.kind == topRTS && !op.revoked
	op.reply = false
	p.unlock()
	if revoke {
		w.rndvRevoke(op.ep, op.sreq)
	}
	op.comp.Invoke(ucs.ErrCanceled)
}

// wireBack makes sure the peer can reach this worker back before a
// message it must answer (a sync send, a rendezvous): the worker's address
// goes ahead of it, once per endpoint, on the same lane (swWireup).
func (ep *Endpoint) wireBack() error {
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
