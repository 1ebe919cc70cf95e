package ucp

import (
	"encoding/binary"
	"fmt"

	"github.com/goshmem/goshmem/ucs"
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

// tagSend starts a tag send (not sync) of buf, or of param's datatype.
// The common small message goes here, as the tag and the data in one
// AMShort, without a request; the others, and one the transport has no
// room for, go on in tagSendParam, whose frame (the iterator, the errors'
// formatting) this one does not carry, as does the first send of the
// endpoint, which computes its thresholds.
func (ep *Endpoint) tagSend(buf []byte, tag uint64, param *RequestParam) (*Request, error) {
	if ep.w.tag.enabled && ep.shortPath(param) {
		if th := ep.thresh.Load(); th != nil && len(buf) <= th.tagShort {
			l := ep.am
			l.sendMu.lock()
			st := l.ep.AMShort(amTagEager, tag, buf)
			l.sendMu.unlock()
			if st == ucs.OK {
				return nil, nil
			}
			if st != ucs.ErrNoResource {
				return nil, ep.tagShortErr(st)
			}
		}
	}
	return ep.tagSendParam(buf, tag, param, false)
}

// tagShortErr is the error of a short tag send the transport failed.
func (ep *Endpoint) tagShortErr(st ucs.Status) error {
	return fmt.Errorf("ucp tag send on %s: %w", ep.am, st)
}

// tagSendParam is tagSend of a message that takes a send op, and a sync
// send: the data from param, then tagSendIter.
func (ep *Endpoint) tagSendParam(buf []byte, tag uint64, param *RequestParam, sync bool) (*Request, error) {
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
		if err := ep.wireBack(); err != nil {
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
		more := uint64(0)
		if sync {
			more = tagRTSSync
		}
		op.rndvStart(param, tag, more, nil)
	case op.kind == topMulti:
		op.setFirst(tag, 0, nil)
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
// worker's uid, then a and b) to the worker uid; a failure is logged, and
// returned.
func (w *Worker) tagCtrl(uid uint64, id uint8, hlen int, a, b uint64) ucs.Status {
	ep := w.replyEP(uid)
	if ep == nil || ep.am == nil {
		w.tagLogf("no endpoint back to worker %#x for a protocol reply", uid)
		return ucs.ErrNotConnected
	}
	op := w.newSendOp(ep, topCtrl)
	op.th, op.id, op.hlen = ep.thresholds(), id, hlen
	put64(op.hdr[:], w.uid, a, b)
	return w.ctrlStart(op, "protocol reply")
}

// ctrlStart sends op, a control message whose header (and payload, in
// op.key) is set, and frees it once the transport took it (queued, it
// ends itself); a failure is logged as the send of what, and returned.
func (w *Worker) ctrlStart(op *sendOp, what string) ucs.Status {
	st := w.protoStart(op)
	switch {
	case st == ucs.OK:
		op.free()
	case st.IsErr():
		w.tagLogf("%s to %s: %v", what, op.ep.remoteName, st)
		op.free()
	}
	return st
}

// tagDropped logs a tag message that could not be used.
func (w *Worker) tagDropped(err error) ucs.Status {
	w.tagLogf("dropped a tag message: %v", err)
	return ucs.OK
}

// tagRecvEager handles an eager message in one piece. The common message
// of a ping-pong, which the only expected receive takes, goes from the
// dispatch to the receive's completion in one call (tagEagerTake), without
// a call before that needs the arguments after it; the rest, and multi
// mode, whose tag lock it takes, go by tagEagerArrived.
func tagRecvEager(arg any, data []byte, flags uint32) ucs.Status {
	w, wi := protoArgs(arg)
	if len(data) < tagEagerHdrLen {
		return w.tagDropped(fmt.Errorf("eager message of %d bytes: %w", len(data), ucs.ErrInvalidParam))
	}
	tag := binary.LittleEndian.Uint64(data)
	if t := &w.tag; !t.multi {
		if r := t.m.takeSolo(tag); r != nil {
			r.tagEagerTake(wi, tag, data[tagEagerHdrLen:])
			return ucs.OK
		}
	}
	return w.tagEagerArrived(wi, tag, data[tagEagerHdrLen:], data, flags, tagAckTo{})
}

// tagRecvEagerSync handles a sync eager message in one piece.
func tagRecvEagerSync(arg any, data []byte, flags uint32) ucs.Status {
	w, wi := protoArgs(arg)
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
		r.tagEagerTake(wi, tag, p)
		return ucs.OK
	}
	st := w.tagEagerUnexpected(wi, tag, p, raw, flags, ack)
	t.unlock()
	return st
}

// tagEagerTake completes the receive r, which matched the eager message of
// tag and data p that came on wi.
func (r *Request) tagEagerTake(wi *workerIface, tag uint64, p []byte) {
	st, n := ucs.OK, len(p)
	if it := &r.dt; it.fits(0, n) {
		ucs.Copy(it.contig, p) // unpack's first case, without its call
	} else {
		st, n = it.unpack(0, p), min(n, it.length)
	}
	r.tr.info.SenderTag = tag
	r.tr.info.Length = n
	r.proto = protoTagRecvEager
	r.rwi = wi
	r.complete(st)
}

// tagEagerUnexpected keeps the eager message of tag and data p (in the
// transport's buffer raw), which no receive took, as unexpected; the tag
// lock is held.
func (w *Worker) tagEagerUnexpected(wi *workerIface, tag uint64, p, raw []byte, flags uint32, ack tagAckTo) ucs.Status {
	t := &w.tag
	m := t.newMsg()
	m.tag, m.kind, m.length, m.wi = tag, msgEager, len(p), wi
	m.sync, m.src, m.sreq = ack.sreq != 0, ack.src, ack.sreq
	st := ucs.OK
	if len(p) > 0 {
		st = t.keepPart(m, wi, p, raw, flags)
	}
	t.m.addUnexpected(m)
	return st
}

// tagRecvFirst handles the first fragment of a tag message (checked by
// fragRecvFirst: its header h, then its data p, in the transport's buffer
// data).
func (w *Worker) tagRecvFirst(wi *workerIface, h *tagHeader, p, data []byte, flags uint32) ucs.Status {
	var ack tagAckTo
	if h.sreq != 0 {
		ack = tagAckTo{h.src, h.sreq}
	}
	t := &w.tag
	key := fragKey{h.src, h.msg}
	t.lock()
	// Never the whole message (decodeTag): the fragments that follow go
	// where route sends them.
	if _, err := t.frags.begin(key, len(p), int(h.total), fragDest{}); err != nil {
		t.unlock()
		return w.tagDropped(err)
	}
	if r := t.m.match(h.tag); r != nil {
		r.tr.info = TagRecvInfo{SenderTag: h.tag, Length: min(int(h.total), r.dt.length)}
		r.proto, r.rwi = protoTagRecvEager, wi
		t.frags.route(key, fragDest{r: r})
		t.unlock()
		w.tagAck(ack)
		r.tagUnpack(0, p)
		return ucs.OK
	}
	m := t.newMsg()
	m.tag, m.kind, m.length, m.msg, m.wi = h.tag, msgFrag, int(h.total), h.msg, wi
	m.sync, m.src, m.sreq = ack.sreq != 0, h.src, ack.sreq
	st := t.keepPart(m, wi, p, data, flags)
	t.frags.route(key, fragDest{msg: m})
	t.m.addUnexpected(m)
	t.unlock()
	return st
}

// tagRecvMiddle handles a following fragment of a tag message (checked
// by fragRecvMiddle): the receive that took the message unpacks it, or the
// unexpected message keeps it.
func (w *Worker) tagRecvMiddle(wi *workerIface, h *tagHeader, p, data []byte, flags uint32) ucs.Status {
	t := &w.tag
	t.lock()
	f, lost, err := t.frags.next(fragKey{h.src, h.msg}, h.off, len(p))
	r, m := f.dest.r, f.dest.msg
	switch {
	case err != nil && lost && r != nil:
		t.unlock()
		r.complete(ucs.ErrIOError)
		return w.tagDropped(err)
	case err != nil && lost:
		// The unexpected message is lost: forget it.
		t.m.removeUnexpected(m)
		t.releaseMsg(m)
		t.unlock()
		return w.tagDropped(err)
	case err != nil:
		t.unlock()
		return w.tagDropped(err)
	case r != nil:
		t.unlock()
		r.tagUnpack(int(h.off), p)
		if f.got == f.total {
			w.rndvRecvDone(r, r.tr.status)
		}
		return ucs.OK
	}
	st := t.keepPart(m, wi, p, data, flags)
	t.unlock()
	return st
}

// tagUnpack unpacks p, the data at offset off of the message a receive
// took, keeping the first error in r.tr.status.
func (r *Request) tagUnpack(off int, p []byte) {
	if st := r.dt.unpack(off, p); st != ucs.OK && r.tr.status == ucs.OK {
		r.tr.status = st
	}
}

// tagRecvAck handles the acknowledgement of a sync send.
func tagRecvAck(arg any, data []byte, flags uint32) ucs.Status {
	w, _ := protoArgs(arg)
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
		// The answer to a revoke (rndvRecvRevoke), which may cross the ATS
		// of a receive that took the message: the send may have ended.
		what = ""
	}
	if op := w.takeSend(h.sreq, h.src, what, true); op != nil {
		op.comp.Invoke(h.status)
	}
	return ucs.OK
}
