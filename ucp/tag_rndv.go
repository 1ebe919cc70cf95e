package ucp

import (
	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// The rendezvous protocol of tag messages, which active messages and
// streams share: one RTS (rndvStart, rndvRecvRTS: the family and its word,
// a tag, an AM id and user header, a stream's connection number), one
// fetch (rndvFetch), the same replies, data and revoke (tag_wire.go,
// proto_recv.go). What differs is who takes the message: a tag receive
// that matches it (unexpected until then), the AM handler
// (AMRecvDataNBX), or the stream, which takes it at once, in its order,
// into the receive that waits or into its queue (stream.go).
//
// The sender announces the message with an RTS: its family's word, its
// length, its send number and, when the data is one buffer that a lane
// from the receiver can reach, the data's address and packed key (of the
// memory handle the caller passed, of mapped memory the data lies in, or
// of a registration made for this send). The send waits in the worker's
// sends.
//
// When a receive took the RTS, the receiver takes the data, as
// UCX_RNDV_SCHEME allows:
//
//   - rkey_ptr (auto): the key's memory is mapped here (shared memory): the
//     data is copied (unpacked) straight from it;
//   - get zcopy (auto, get_zcopy): a lane to the sender gets with the key
//     (cma, tcp, self): the data is read into the receive's buffer in
//     gets of at most the lane's limit, all in flight at once; auto does
//     not get over the network (tcp), where the get is a request that the
//     sender's progress answers: it puts (Endpoint.rndvByPut);
//   - put zcopy (put_zcopy; auto where only the network reaches the
//     sender, which then announces no key): the receiver sends, with its
//     RTR, the packed key of the receive's buffer (mapped memory, or
//     registered for the receive) and its address; the sender puts the
//     data there (copies it, where the receiver's memory is mapped at the
//     sender) and then sends an ATP on the AM lane, which a transport
//     cannot deliver before the data: the sender puts only on the AM
//     lane's connection or through a transport done when its call returns,
//     and pushes otherwise;
//   - am (otherwise: no key, a generic receive datatype, or am): the
//     receiver asks with an RTR, and the sender pushes the data in
//     fragments (zero-copy where the lane has it), which the receiver
//     unpacks as they come: a pipeline, in which no copy of the whole
//     message is ever made, so a generic datatype's data goes in pieces.
//
// After rkey_ptr and get, the receiver acknowledges (ATS, with the status
// of its get) and the send completes; after put and am, the send completes
// when the transport is done with the data it put or pushed. A message
// longer than the receive's buffer is acknowledged at once, without a
// transfer, and the receive completes with ucs.ErrMessageTruncated.
//
// Closing the sender (tag messages, active messages and streams alike:
// the same revoke, rndvRecvRevoke, finds the message in its family,
// tagRevoked, amRevoked or streamRevoked; an active message's rendezvous
// messages a handler kept, and a stream's that wait behind another one's
// fetch, take the place of the unexpected ones; a flush-mode close waits
// for a stream's to be taken first, see stream.go). A send whose endpoint closes (flush or force mode)
// before the receiver answered its RTS ends, and its buffer is the
// caller's again; the receiver must then neither read that buffer nor
// wait for data that will not come. The sender revokes the message: an
// amTagRevoke follows the RTS on the AM lane (a flush-mode close sends it
// once nothing of the endpoint is queued, and its lanes' flush delivers
// it; a force close sends it as it closes, and the endpoint's lanes
// linger until it is out, Endpoint.lingerStart). The receiver drops a
// message no receive took (a handle TagProbeNB removed fails its receive
// with ucs.ErrCanceled), completes a receive that waits for the push or
// put with ucs.ErrCanceled, and answers with an ATS of ucs.ErrCanceled.
// When the send ends depends on whether a key went out:
//
//   - No key went out (put, am): the receiver reaches the data only
//     through the sender, which pushes or puts nothing for a revoked send
//     (an RTR that crossed the revoke is ignored). The send completes
//     with ucs.ErrCanceled as it is revoked; the op stays in the worker's
//     sends, detached from its request, until the answer comes.
//   - A key went out (rkey_ptr, get): the receiver may read the buffer
//     without the sender, maybe at this moment, with no way to revoke the
//     key (shared memory stays mapped, cma reads any address of the
//     process). The send completes only with the receiver's ATS: that of
//     the revoke (ucs.ErrCanceled), or that of a receive that took the
//     message first (OK). A receive taking a message is marked so until
//     it read all it will (tagTook), and a revoke that finds it so waits
//     for its ATS: no answer says "canceled" while a copy or a get runs.
//
// A revoke that finds nothing (the receive had completed) is answered
// too; the sender ignores an ATS of ucs.ErrCanceled for a send that
// ended. Should a revoke be lost (a force close whose worker is destroyed
// before its lanes' flush ended), a receive that matched the message and
// waits still ends with Cancel, and a send with a key ends when the
// receiver takes the message, or when the worker is destroyed.

// tagRecvRTS gives a tag message's rendezvous request (checked by
// rndvRecvRTS; data is the whole message, in the transport's buffer) to
// the receive it matches, or keeps it as unexpected.
func (w *Worker) tagRecvRTS(wi *workerIface, rts *rtsInfo, data []byte, flags uint32) ucs.Status {
	k := fragKey{rts.src, rts.sreq}
	t := &w.tag
	t.lock()
	if r := t.m.match(rts.arg); r != nil {
		t.rts[k] = nil // being taken (rndvTook)
		t.unlock()
		w.tagRndvMatched(r, rts)
		return ucs.OK
	}
	m := t.newMsg()
	m.tag, m.kind, m.length, m.src, m.sreq, m.raddr, m.sync = rts.arg, msgRTS, rts.length, rts.src, rts.sreq, rts.raddr, rts.sync
	st := ucs.OK
	switch key := rts.key; {
	case len(key) == 0:
	case flags&uct.CBParamFlagDesc != 0:
		m.key, m.raw, m.wi, st = key, data, wi, ucs.InProgress
	default:
		st = t.keepPart(m, wi, key, data, flags)
		m.key = m.parts[0].data
	}
	t.m.addUnexpected(m)
	t.rts[k] = m
	t.unlock()
	return st
}

// tagRndvMatched starts the transfer of rendezvous message rts into the
// receive r that matched it; the message is marked as being taken
// (rndvTook).
func (w *Worker) tagRndvMatched(r *Request, rts *rtsInfo) {
	r.tr.fam = famTag
	r.tr.info = TagRecvInfo{SenderTag: rts.arg, Length: rts.length}
	r.tr.src, r.tr.sreq = rts.src, rts.sreq
	ep := w.replyEP(rts.src)
	if ep == nil || ep.am == nil {
		w.rndvTook(r, false)
		w.tagLogf("rendezvous message from %#x: no endpoint back to the sender", rts.src)
		r.complete(ucs.ErrUnreachable)
		return
	}
	r.tr.ep, r.lane = ep, ep.am
	if rts.length > r.dt.length || rts.length == 0 {
		// Nothing to take (or nothing that fits): the send completes, the
		// receive is truncated.
		w.rndvAnswer(r, ucs.OK)
		st := ucs.OK
		if rts.length > r.dt.length {
			st, r.tr.info.Length = ucs.ErrMessageTruncated, 0 // nothing received
		}
		r.complete(st)
		return
	}
	w.rndvFetch(r, rts.key, rts.raddr)
}

// rndvRTR asks the sender of rendezvous send sreq (a tag message or an
// active message), through ep, to put the data of receive rreq at raddr
// with key, or to push it (no key); a failure is logged, and returned.
func (w *Worker) rndvRTR(ep *Endpoint, sreq, rreq, raddr uint64, key []byte) ucs.Status {
	if ep == nil || ep.closed.Load() || ep.am == nil {
		return ucs.ErrNotConnected
	}
	op := w.newSendOp(ep, topCtrl)
	op.th, op.id, op.hlen = ep.thresholds(), amTagRTR, tagRTRLen
	put64(op.hdr[:], w.uid, sreq, rreq, raddr)
	// A copy: a receive that ends while its RTR waits to go unmaps the
	// registration that holds the key (rndvRecvDone).
	op.keyBuf = append(op.keyBuf, key...)
	op.key = dtIter{contig: op.keyBuf, length: len(key)}
	return w.ctrlStart(op, "rendezvous reply")
}

// tagRecvATS handles a rendezvous acknowledgement: the send completes.
func tagRecvATS(arg any, data []byte, flags uint32) ucs.Status {
	w, _ := protoArgs(arg)
	return w.tagRecvReply(amTagATS, data, "rendezvous acknowledgement")
}

// tagRecvRTR handles a receiver's request for rendezvous data: the send
// puts it into the receive's buffer (a key came) or pushes it.
func tagRecvRTR(arg any, data []byte, flags uint32) ucs.Status {
	w, _ := protoArgs(arg)
	h, key, err := decodeTag(amTagRTR, data)
	if err != nil {
		return w.tagDropped(err)
	}
	if len(key) > 0 {
		if err := checkRkey(key); err != nil {
			return w.tagDropped(err)
		}
	}
	if op := w.takeSend(h.sreq, h.src, "rendezvous reply", false); op != nil {
		w.rndvSendData(op, h.rreq, key, h.raddr)
	}
	return ucs.OK
}

// tagRevokeEP takes back the rendezvous messages that ep announced and
// whose receiver has not answered yet (no RTR, no ATS), as ep closes; see
// "Closing the sender" above. Called with nothing of ep in the worker's
// send queue (every RTS handed over), so that each revoke follows its RTS
// on the AM lane.
func (w *Worker) tagRevokeEP(ep *Endpoint) {
	var revoked []*sendOp // stays in sends: read only what does not change
	var done []*Request
	p := &w.proto
	p.lock()
	for _, op := range p.sends {
		if op.ep != ep || op.kind != topRTS || op.revoked {
			continue
		}
		op.revoked = true
		revoked = append(revoked, op)
		if op.key.length == 0 {
			// No key went out: the data leaves only when this worker
			// pushes or puts it, which it no longer does for a revoked
			// send (tagRecvRTR). The send ends now; the op stays in sends
			// until the receiver answers, so that an RTR that crossed
			// the revoke is recognized. Detached under the lock: only the
			// code that takes the op out of sends ends it.
			r := op.r
			op.r, op.dt, r.top = nil, nil, nil
			done = append(done, r)
		}
	}
	p.unlock()
	for _, op := range revoked {
		w.rndvRevoke(ep, op.sreq)
	}
	if len(revoked) > 0 && ep.closed.Load() && !w.closed.Load() {
		// Closed at once (force): destroying the lanes now would drop what
		// a transport still holds of the revokes (tcp drops the frames it
		// has not written). They linger until the revokes are out.
		ep.lingerStart()
	}
	for _, r := range done {
		r.complete(ucs.ErrCanceled)
	}
}

// rndvRevoke sends the revoke of the rendezvous send sreq (of a tag
// message or an active message) on ep, behind its RTS.
func (w *Worker) rndvRevoke(ep *Endpoint, sreq uint64) {
	op := w.newSendOp(ep, topCtrl)
	op.th, op.id, op.hlen = ep.thresholds(), amTagRevoke, tagRevokeLen
	put64(op.hdr[:], w.uid, sreq)
	w.ctrlStart(op, "revoke of a rendezvous send")
}

// tagRevoked is the tag part of a sender's revoke of its rendezvous
// message k (rndvRecvRevoke): a message no receive took is dropped (a
// handle TagProbeNB removed fails its receive), and a receive taking it
// now (a get or a copy of the sender's memory running, see rndvTook) is
// left alone (taking: its ATS answers).
func (w *Worker) tagRevoked(k fragKey) (taking bool) {
	t := &w.tag
	t.lock()
	defer t.unlock()
	m, taking := t.rts[k]
	if m != nil {
		delete(t.rts, k)
		if m.queued {
			t.m.removeUnexpected(m)
		} else {
			m.revoked = true // removed by a probe: its handle is the caller's
		}
		t.releaseMsg(m)
	}
	return taking && m == nil
}
