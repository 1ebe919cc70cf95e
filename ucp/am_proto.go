package ucp

import (
	"sync"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// amFailEP ends, with st, the rendezvous receives the peer of ep, which
// failed or closed, was to push data to.
func (w *Worker) amFailEP(ep *Endpoint, st ucs.Status) {
	a := &w.am
	if !a.enabled || w.epByUID(ep.remoteUID) != nil {
		return
	}
	a.mu.Lock()
	recvs := w.proto.waitsEnd(famAM, func(r *Request) bool { return r.tr.src == ep.remoteUID })
	a.mu.Unlock()
	for _, r := range recvs {
		w.rndvRecvDone(r, st)
	}
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
	switch h.typ {
	case amSingle:
		return w.amDeliver(wi, h, p[:h.hlen], p[h.hlen:], data, canKeep)
	case amHello:
		// The same as the software protocols' wireup (proto_sw.go).
		w.wireBack(h.src, append([]byte(nil), p...))
	}
	return ucs.OK
}

// amRecvFirst handles the first fragment of an active message (checked
// by fragRecvFirst: its header h, then the user header and the data p):
// its buffer gathers the message for the handler.
func (w *Worker) amRecvFirst(h *tagHeader, p []byte) {
	flags := uint8(0)
	if h.flags&hdrReply != 0 {
		flags = amHdrReply
	}
	m := &amReasm{buf: make([]byte, h.hlen+int(h.total)), hlen: h.hlen, id: uint16(h.tag), flags: flags}
	copy(m.buf, p)
	a := &w.am
	a.mu.Lock()
	done, err := a.reasm.begin(fragKey{h.src, h.msg}, len(p)-h.hlen, int(h.total), m)
	a.mu.Unlock()
	switch {
	case err != nil:
		w.warnf("ucp: worker %s: dropped an active message: %v", w.name, err)
	case done:
		w.amDeliverOwned(amHeader{typ: amSingle, flags: m.flags, id: m.id, src: h.src}, m.buf[:m.hlen], m.buf[m.hlen:])
	}
}

// amRecvMiddle handles a following fragment (checked by fragRecvMiddle)
// when it belongs to an active message, and reports whether it did.
func (w *Worker) amRecvMiddle(h *tagHeader, p []byte) bool {
	a := &w.am
	k := fragKey{h.src, h.msg}
	a.mu.Lock()
	if _, ok := a.reasm[k]; !ok {
		a.mu.Unlock()
		return false
	}
	f, _, err := a.reasm.next(k, h.off, len(p))
	a.mu.Unlock()
	if err != nil {
		// A lost message's buffer is left to the collector.
		w.warnf("ucp: worker %s: dropped an active message: %v", w.name, err)
		return true
	}
	m := f.dest
	copy(m.buf[m.hlen+int(h.off):], p)
	if f.got == f.total {
		w.amDeliverOwned(amHeader{typ: amSingle, flags: m.flags, id: m.id, src: h.src}, m.buf[:m.hlen], m.buf[m.hlen:])
	}
	return true
}

// amRevoked is the active-message part of a sender's revoke of its
// rendezvous message k (rndvRecvRevoke): a message a handler kept and has
// not received is marked so (AMRecvDataNBX fails with ucs.ErrCanceled),
// and a receive getting the data now is left alone (taking: its ATS
// answers).
func (w *Worker) amRevoked(k fragKey) (taking bool) {
	a := &w.am
	a.mu.Lock()
	defer a.mu.Unlock()
	d, taking := a.rts[k]
	if d != nil {
		delete(a.rts, k)
		d.revoked = true
	}
	return taking && d == nil
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
		if ep := w.replyEP(h.src); ep != nil {
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

// amRecvRTS calls the handler of an active message's rendezvous request
// (checked by rndvRecvRTS); the data stays at the sender until the handler
// receives it.
func (w *Worker) amRecvRTS(rts *rtsInfo) {
	id := uint16(rts.arg)
	ep := w.replyEP(rts.src)
	if ep == nil {
		w.warnf("ucp: worker %s: dropped rendezvous message %d from %#x: no endpoint back to the sender", w.name, id, rts.src)
		return
	}
	// The descriptor is the user's (never recycled: a stale one fails
	// cleanly); the copy of the key only until the data is fetched.
	d := &AMDesc{w: w, state: descInCallback, rndv: true, length: rts.length, src: rts.src, sreq: rts.sreq, ep: ep}
	if len(rts.key) > 0 {
		kb := amKeyPool.Get().(*[]byte)
		*kb = append((*kb)[:0], rts.key...)
		d.keyBuf, d.key, d.raddr = kb, *kb, rts.raddr
	}
	// Until it is received or released, a revoke finds it here.
	w.am.mu.Lock()
	w.am.rts[fragKey{rts.src, rts.sreq}] = d
	w.am.mu.Unlock()
	hd := w.amHandler(id)
	if hd == nil {
		w.warnf("ucp: worker %s: dropped active message %d (%d bytes, rendezvous) from %#x: no handler", w.name, id, rts.length, rts.src)
		w.AMDataRelease(d)
		return
	}
	uhdr := rts.uhdr
	p := recvParamPool.Get().(*AMRecvParam)
	*p = AMRecvParam{RecvAttr: AMRecvAttrFlagRNDV, Length: d.length, Desc: d}
	if rts.reply {
		p.RecvAttr |= AMRecvAttrFieldReplyEP
		p.ReplyEP = ep
	}
	st := hd.cb(hd.arg, uhdr, nil, p)
	*p = AMRecvParam{}
	recvParamPool.Put(p)
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
