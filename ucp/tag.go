package ucp

import (
	"fmt"
	"math/bits"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// Tag matching (the "UCP Communication routines" of the UCX documents for
// two-sided messaging).
//
// An endpoint sends a message with a 64-bit tag (TagSendNBX, or
// TagSendSyncNBX, which completes only once a receive took the message); a
// worker receives the first message whose tag matches a tag and mask
// (TagRecvNBX), or looks for one first (TagProbeNB) and receives it by its
// handle (TagMsgRecvNBX). The worker's context must have FeatureTag.
// Messages from one endpoint are received in the order they were sent, by
// receives in the order they were posted (see tag_match.go).
//
// Protocols, chosen per message by its size and the endpoint's AM lane
// (Request.Query names the one a request took):
//
//   - tag/eager/short: the tag and the data in one AMShort (data up to
//     the lane's short limit; no request);
//   - tag/eager/bcopy, tag/eager/zcopy: the tag and the data in one
//     message, copied into the transport's buffer or sent from where it
//     lies (from UCX_ZCOPY_THRESH; auto: above one bcopy message, where the
//     lane's zero-copy messages are larger);
//   - tag/eager/multi/bcopy, .../zcopy: in fragments, which the receiver
//     reassembles by message number;
//   - tag/eager/sync/...: the same, and the receiver acknowledges the
//     message when a receive takes it (TagSendSyncNBX);
//   - tag/rndv: from UCX_RNDV_THRESH (auto: from the lanes' estimates, per
//     endpoint; over tcp, beyond one eager message) the sender announces
//     the message (RTS, with the packed key of the data where a lane to
//     the sender can reach it) and the receiver takes the data when a
//     receive matched it: through the sender's memory mapped here
//     (rkey_ptr: shared memory), with a get (get zcopy: cma, self; tcp
//     with UCX_RNDV_SCHEME=get_zcopy), by having the sender put it into
//     the receive's buffer (put zcopy: tcp, or any lane with
//     UCX_RNDV_SCHEME=put_zcopy), or by asking the sender to push it in
//     active messages, which the receiver unpacks as they come (am: a
//     pipeline, what remains when nothing can reach the sender's memory,
//     and what generic datatypes use).
//     UCX_RNDV_SCHEME (auto, get_zcopy, put_zcopy, am) restricts the
//     choice; see tag_rndv.go.
//
// A receive buffer shorter than its message completes the receive with
// ucs.ErrMessageTruncated (the part that fits is delivered). Sends never
// block: what the transport has no room for waits in the worker's queue.
// Closing an endpoint revokes its rendezvous messages that the receiver
// has not answered: no receive reads their data after the send ended, and
// a receive waiting for it fails (see tag_rndv.go).

// TagRecvInfo describes a message (ucp_tag_recv_info_t, and the receive's
// completion, ucp_tag_rcv_completion): the sender's tag and a length.
// TagProbeNB gives the message's length (the sender's packed length).
// A receive's completion gives how much data was received (rcvd_len): the
// bytes written into its buffer, which for a message cut short
// (ucs.ErrMessageTruncated) is what fits of an eager message, and nothing
// of a rendezvous one (its data is not transferred).
type TagRecvInfo struct {
	SenderTag uint64
	Length    int
}

// TagRecvCallback is called when a tag receive completes
// (ucp_tag_recv_nbx_callback_t): status is nil, ucs.ErrMessageTruncated,
// ucs.ErrCanceled or another error; info describes the message (valid
// during the call only). It runs from Worker.Progress, or from the
// receive's call when that completes at once with OpAttrFlagNoImmCmpl.
type TagRecvCallback func(req *Request, status error, info *TagRecvInfo, userData any)

// tagRecvState is the part of a request that a tag receive uses, and,
// of its rendezvous fields, an active message's rendezvous receive.
type tagRecvState struct {
	fam        uint8      // rendezvous: famTag or famAM (rndvAnswer)
	where      uint8      // where it waits to be matched (inHash...), notPosted once matched or while it is tagMatch.solo
	status     ucs.Status // the first error of a message still arriving (in fam's word: clearOp clears the state in fewer stores)
	next, prev *Request   // in an expected queue
	sn         uint64     // posting order
	tag, mask  uint64
	info       TagRecvInfo
	got        int        // bytes of the message received
	at         int        // rendezvous: where in the buffer the data goes (a stream's receive)
	rreq       uint64     // rendezvous: the receive's number at the sender
	src        uint64     // rendezvous: the sender
	rk         *rkeyRef   // rendezvous get: the sender's key
	sreq       uint64     // rendezvous: the send's number, for the ATS
	ep         *Endpoint  // rendezvous: the endpoint back to the sender
	memh       *MemHandle // rendezvous put: the buffer registered for the sender
}

// TagMessage is a message that arrived before a receive took it
// (ucp_tag_message_h): TagProbeNB returns it, TagMsgRecvNBX receives it.
type TagMessage struct {
	links  [numLists]msgLink
	tag    uint64
	kind   uint8
	sync   bool
	queued bool // on the unexpected lists
	probed bool // returned by a probe that removed it: never recycled
	done   bool // received (or released): the handle is stale
	// revoked: a rendezvous message its sender took back (amTagRevoke)
	// after TagProbeNB removed it; the handle's receive fails with
	// ucs.ErrCanceled.
	revoked bool
	src     uint64
	sreq    uint64 // sync or rendezvous: the send's number
	length  int
	// eager: the data; fragmented: what arrived, in order (w.tag.frags
	// counts it)
	parts []tagPart
	msg   uint64
	// rendezvous
	raddr uint64
	key   []byte
	raw   []byte // the transport buffer key lies in, if held
	wi    *workerIface
}

// Kinds of TagMessage.
const (
	msgEager = iota // the whole message
	msgFrag         // a fragmented message, whose fragments may still arrive
	msgRTS          // a rendezvous request: the data is at the sender
)

// tagPart is data of an unexpected message: a transport buffer held (raw,
// from wi), or a buffer of the worker's.
type tagPart struct {
	data []byte
	raw  []byte
	wi   *workerIface
}

// fragDest is where the next fragments of a message go: a receive that
// took it, or the unexpected message they are kept in.
type fragDest struct {
	r   *Request
	msg *TagMessage
}

// tagWorker is a worker's tag-matching state. In the worker's multi thread
// mode mu guards it; otherwise only one goroutine at a time uses it (the
// one that calls the worker, from which Progress runs the handlers).
type tagWorker struct {
	enabled bool
	modeMutex
	m     tagMatch
	frags fragTable[fragDest]
	// rts holds the rendezvous messages no receive took (unexpected, or
	// removed by a probe) and, with a nil value, those a receive is taking
	// (reading the sender's memory, rndvTook), by sender and send number,
	// for the sender's revoke (rndvRecvRevoke).
	rts  map[fragKey]*TagMessage
	free *TagMessage // recycled messages, linked through links[0].next
	bufs bufPool
}

// tagInit prepares the worker for tag matching when its context has
// FeatureTag: it installs the handlers of the tag messages.
func (w *Worker) tagInit() error {
	if w.ctx.features&FeatureTag == 0 {
		return nil
	}
	t := &w.tag
	t.multi = w.mode == ucs.ThreadModeMulti
	if p := &w.ctx.params; p.FieldMask&ParamFieldTagSenderMask != 0 {
		t.m.senderMask = p.TagSenderMask
	}
	t.frags = fragTable[fragDest]{}
	t.rts = map[fragKey]*TagMessage{}
	// The handlers of fragments and rendezvous serve every family
	// (sharedInit).
	ids := []uint8{amTagEager, amTagEagerSync, amTagAck}
	fns := []protoHandler{tagRecvEager, tagRecvEagerSync, tagRecvAck}
	if err := w.setProtoHandlers(ids, fns); err != nil {
		return err
	}
	t.enabled = true
	return nil
}

// tagCheck checks that the worker may do tag matching.
func (w *Worker) tagCheck(what string) error {
	return w.protoCheck(what, w.tag.enabled, "FeatureTag")
}

// Buffers of the worker's own, for unexpected data a transport does not
// let it keep: free lists by power-of-two size, from 64 bytes to 64 KiB.
const (
	tagBufMin     = 6
	tagBufClasses = 11
)

// bufPool holds free buffers by power-of-two size class; its owner's
// lock guards it (the tag lock, the stream lock).
type bufPool [tagBufClasses][][]byte

// getBuf returns a buffer of n bytes; the tag lock is held.
func (t *tagWorker) getBuf(n int) []byte { return t.bufs.get(n) }

// putBuf gives back a buffer from getBuf; the tag lock is held.
func (t *tagWorker) putBuf(b []byte) { t.bufs.put(b) }

// get returns a buffer of n bytes.
func (p *bufPool) get(n int) []byte {
	c := max(bits.Len(uint(n-1)), tagBufMin) - tagBufMin
	if n <= 0 || c >= tagBufClasses {
		return make([]byte, n)
	}
	if l := p[c]; len(l) > 0 {
		b := l[len(l)-1]
		p[c] = l[:len(l)-1]
		return b[:n]
	}
	return make([]byte, n, 1<<(c+tagBufMin))
}

// put gives back a buffer from get.
func (p *bufPool) put(b []byte) {
	c := bits.Len(uint(cap(b))) - 1 - tagBufMin
	if c < 0 || c >= tagBufClasses || cap(b) != 1<<(c+tagBufMin) || len(p[c]) >= 64 {
		return
	}
	p[c] = append(p[c], b[:0])
}

// newMsg returns an unexpected message; the tag lock is held.
func (t *tagWorker) newMsg() *TagMessage {
	if m := t.free; m != nil {
		t.free = m.links[0].next
		m.links[0].next = nil
		return m
	}
	return new(TagMessage)
}

// keepPart stores data of an unexpected message: the transport's buffer
// raw is held when flags allow it (the handler then returns InProgress),
// and data copied into a buffer of the worker's otherwise. It returns the
// handler's status. The tag lock is held.
func (t *tagWorker) keepPart(m *TagMessage, wi *workerIface, data, raw []byte, flags uint32) ucs.Status {
	if flags&uct.CBParamFlagDesc != 0 {
		m.parts = append(m.parts, tagPart{data: data, raw: raw, wi: wi})
		return ucs.InProgress
	}
	b := t.getBuf(len(data))
	copy(b, data)
	m.parts = append(m.parts, tagPart{data: b})
	return ucs.OK
}

// releaseMsg gives back what an unexpected message holds; the tag lock is
// held.
func (t *tagWorker) releaseMsg(m *TagMessage) {
	for i := range m.parts {
		t.releasePart(&m.parts[i])
	}
	if m.raw != nil {
		m.wi.iface.ReleaseDesc(m.raw)
	}
	m.done = true
	if m.probed {
		return // its handle may still be held: let the collector have it
	}
	parts := m.parts[:0]
	*m = TagMessage{parts: parts}
	m.links[0].next = t.free
	t.free = m
}

func (t *tagWorker) releasePart(p *tagPart) {
	if p.raw != nil {
		p.wi.iface.ReleaseDesc(p.raw)
	} else {
		t.putBuf(p.data)
	}
	*p = tagPart{}
}

// TagSendNBX sends buf as a message with tag to the endpoint's worker
// (ucp_tag_send_nbx); param's datatype may describe other data (an iov, a
// generic datatype; buf is then nil or the generic buffer). It returns
// (nil, nil) when the data may be reused at once, or a request that
// completes when it may. It fails with ucs.ErrInvalidParam without
// FeatureTag or for a bad datatype, with the endpoint's error on a failed
// or closed endpoint, with ucs.ErrNoResource under OpAttrFlagForceImmCmpl
// when the send cannot complete at once, and with the transport's error
// otherwise.
func (ep *Endpoint) TagSendNBX(buf []byte, tag uint64, param *RequestParam) (*Request, error) {
	return ep.tagSend(buf, tag, param)
}

// TagSendSyncNBX is TagSendNBX for a message whose send completes only
// once a receive on the peer took it (ucp_tag_send_sync_nbx); it never
// completes at once.
func (ep *Endpoint) TagSendSyncNBX(buf []byte, tag uint64, param *RequestParam) (*Request, error) {
	return ep.tagSendParam(buf, tag, param, true)
}

// TagSendNB is the older form of TagSendNBX (ucp_tag_send_nb): count
// elements of datatype dt in buffer (a []byte for a contiguous datatype, a
// [][]byte for DatatypeIOV, what StartPack takes for a generic one). cb,
// if not nil, is called when a send that did not complete at once
// completes.
func (ep *Endpoint) TagSendNB(buffer any, count int, dt Datatype, tag uint64, cb SendCallback) (*Request, error) {
	it, err := dtFromArgs(buffer, count, dt, false)
	if err != nil {
		return nil, fmt.Errorf("ucp tag send: %w", err)
	}
	p := RequestParam{}
	if cb != nil {
		p.SetCallback(cb)
	}
	return ep.tagSendIter(it, tag, &p, false)
}

// TagSendSyncNB is the older form of TagSendSyncNBX (ucp_tag_send_sync_nb),
// with the arguments of TagSendNB.
func (ep *Endpoint) TagSendSyncNB(buffer any, count int, dt Datatype, tag uint64, cb SendCallback) (*Request, error) {
	it, err := dtFromArgs(buffer, count, dt, false)
	if err != nil {
		return nil, fmt.Errorf("ucp tag send sync: %w", err)
	}
	p := RequestParam{}
	if cb != nil {
		p.SetCallback(cb)
	}
	return ep.tagSendIter(it, tag, &p, true)
}

// TagRecvNBX receives into buf the first message whose tag matches tag in
// the bits of mask (ucp_tag_recv_nbx); param's datatype may describe
// another buffer (an iov, a generic datatype). When an eager message that
// arrived already is taken whole, it returns (nil, nil), or
// ucs.ErrMessageTruncated when buf was too short, and fills in
// param.RecvInfo if set; with OpAttrFlagNoImmCmpl it returns a completed
// request instead, after calling param.RecvCallback. Otherwise it returns
// a request, which completes (RecvCallback) when the message is in buf; it
// can be canceled while no message matched it. A rendezvous message that
// arrived already and whose data is taken inside the call (from mapped
// memory, or none when it is truncated) completes at once the same way:
// no callback runs before the call returns without OpAttrFlagNoImmCmpl. It
// fails with ucs.ErrInvalidParam without FeatureTag or for a bad datatype,
// and with ucs.ErrNoResource under OpAttrFlagForceImmCmpl when it cannot
// complete at once.
func (w *Worker) TagRecvNBX(buf []byte, tag, mask uint64, param *RequestParam) (*Request, error) {
	t := &w.tag
	if !t.enabled || w.closed.Load() {
		return nil, w.tagCheck("tag recv")
	}
	if t.multi || param != nil && param.OpAttrMask&(OpAttrFieldDatatype|OpAttrFlagForceImmCmpl|OpAttrFieldRequest) != 0 ||
		t.m.unexpAll.head != nil {
		// A receive that needs the lock (multi mode), its data, flags or
		// memory from param, or a search of what arrived: tagRecv's.
		return w.tagRecvParam(buf, tag, mask, param)
	}
	// The common receive of a buffer, nothing that arrived waiting (a
	// ping-pong's, posted before its message), and the tag state the
	// goroutine's (no lock): posted at once. The request is the latest
	// freed of the worker's stack (requestPool.pop, inlined; with the
	// stack empty, tagRecv takes one), its params set last: the arguments
	// stay in registers, as no call on the way needs them after.
	r := w.requests.pop()
	if r == nil {
		return w.tagRecvParam(buf, tag, mask, param)
	}
	// newRecv's, with the data set in place: r.dt is zero.
	r.recv, r.size, r.proto = true, len(buf), protoTagRecv
	r.dt.length, r.dt.contig = len(buf), buf
	r.tr.tag, r.tr.mask = tag, mask
	t.m.post(r)
	if param != nil {
		r.setParam(param)
	}
	return r, nil
}

// tagRecvParam is TagRecvNBX but for its fast path: the receive's data
// from param, then tagRecv (kept out of TagRecvNBX, whose frame would
// otherwise hold the iterator and the error's formatting).
func (w *Worker) tagRecvParam(buf []byte, tag, mask uint64, param *RequestParam) (*Request, error) {
	it, err := dtFromParam(buf, param, true)
	if err != nil {
		return nil, fmt.Errorf("ucp tag recv: %w", err)
	}
	return w.tagRecv(it, tag, mask, param, nil)
}

// TagRecvNB is the older form of TagRecvNBX (ucp_tag_recv_nb): count
// elements of datatype dt in buffer (see TagSendNB). It always returns a
// request; cb, if not nil, is called when it completes (before the call
// returns when a message that arrived already completes it).
func (w *Worker) TagRecvNB(buffer any, count int, dt Datatype, tag, mask uint64, cb TagRecvCallback) (*Request, error) {
	if err := w.tagCheck("tag recv"); err != nil {
		return nil, err
	}
	it, err := dtFromArgs(buffer, count, dt, true)
	if err != nil {
		return nil, fmt.Errorf("ucp tag recv: %w", err)
	}
	p := RequestParam{OpAttrMask: OpAttrFlagNoImmCmpl}
	if cb != nil {
		p.SetTagRecvCallback(cb)
	}
	return w.tagRecv(it, tag, mask, &p, nil)
}

// TagRecvNBR is TagRecvNB into request memory of the caller's
// (ucp_tag_recv_nbr), without a callback: Request.TagRecvRequestTest tells when
// it completed. It returns nil when the receive started (or completed).
func (w *Worker) TagRecvNBR(buffer any, count int, dt Datatype, tag, mask uint64, req *Request) error {
	if req == nil {
		return fmt.Errorf("ucp tag recv nbr: no request: %w", ucs.ErrInvalidParam)
	}
	if err := w.tagCheck("tag recv"); err != nil {
		return err
	}
	it, err := dtFromArgs(buffer, count, dt, true)
	if err != nil {
		return fmt.Errorf("ucp tag recv nbr: %w", err)
	}
	p := RequestParam{OpAttrMask: OpAttrFlagNoImmCmpl | OpAttrFieldRequest, Request: req}
	_, err = w.tagRecv(it, tag, mask, &p, nil)
	return err
}

// TagProbeNB looks for a message that arrived and no receive took whose
// tag matches tag in the bits of mask (ucp_tag_probe_nb), and returns it,
// or nil. info, if not nil, gets its tag and length. With remove the
// message leaves the worker's queue: no receive matches it any more, and
// the caller must receive it with TagMsgRecvNBX. Without remove it stays
// queued, and the handle is only good for looking.
func (w *Worker) TagProbeNB(tag, mask uint64, remove bool, info *TagRecvInfo) *TagMessage {
	if w.tagCheck("tag probe") != nil {
		return nil
	}
	t := &w.tag
	t.lock()
	m := t.m.searchUnexpected(tag, mask, remove)
	if m != nil {
		if info != nil {
			*info = TagRecvInfo{SenderTag: m.tag, Length: m.length}
		}
		if remove {
			m.probed = true
		}
	}
	t.unlock()
	return m
}

// TagMsgRecvNBX receives the message msg that TagProbeNB removed into buf
// (ucp_tag_msg_recv_nbx), as TagRecvNBX receives a matched message. It
// fails with ucs.ErrInvalidParam for a nil handle or one received already.
func (w *Worker) TagMsgRecvNBX(buf []byte, msg *TagMessage, param *RequestParam) (*Request, error) {
	if err := w.tagCheck("tag msg recv"); err != nil {
		return nil, err
	}
	it, err := dtFromParam(buf, param, true)
	if err != nil {
		return nil, fmt.Errorf("ucp tag msg recv: %w", err)
	}
	return w.tagRecv(it, 0, 0, param, msg)
}

// TagMsgRecvNB is the older form of TagMsgRecvNBX (ucp_tag_msg_recv_nb),
// with the arguments of TagRecvNB.
func (w *Worker) TagMsgRecvNB(buffer any, count int, dt Datatype, msg *TagMessage, cb TagRecvCallback) (*Request, error) {
	if err := w.tagCheck("tag msg recv"); err != nil {
		return nil, err
	}
	it, err := dtFromArgs(buffer, count, dt, true)
	if err != nil {
		return nil, fmt.Errorf("ucp tag msg recv: %w", err)
	}
	p := RequestParam{OpAttrMask: OpAttrFlagNoImmCmpl}
	if cb != nil {
		p.SetTagRecvCallback(cb)
	}
	return w.tagRecv(it, 0, 0, &p, msg)
}

// TagRecvRequestTest returns the status of a tag receive, as Status does
// (ucp_tag_recv_request_test), and once it completed fills in info with
// the message's tag and length.
func (r *Request) TagRecvRequestTest(info *TagRecvInfo) error { return r.Test(info) }

// tagRecv posts a receive of data it, of tag under mask or of the probed
// message msg. What needs the tag lock (finding the message, taking its
// data out of the worker's buffers, posting the receive) is tagTakeLocked;
// the rest (acknowledging, completing, starting a rendezvous transfer)
// runs without it.
func (w *Worker) tagRecv(it dtIter, tag, mask uint64, param *RequestParam, msg *TagMessage) (*Request, error) {
	t := &w.tag
	flags := sendFlags(param)
	t.lock()
	k := w.tagTakeLocked(it, tag, mask, param, msg, flags)
	t.unlock()
	switch k.kind {
	case takeFailed:
		it.finish()
		return nil, k.err
	case takePosted:
		return k.r, nil
	case takeRevoked:
		// Its sender took it back (closed its endpoint) before this
		// receive: the receive fails at once, as it would complete with
		// an eager message (once: the handle is stale then).
		r, err := w.tagRecvImm(it, param, flags, k.info, protoTagRecv, nil, ucs.ErrCanceled)
		if err != nil {
			err = fmt.Errorf("ucp tag msg recv: the sender took the message back: %w", err)
		}
		return r, err
	case takeEager:
		// The common unexpected message: complete at once.
		w.tagAck(k.ack)
		return w.tagRecvImm(it, param, flags, k.info, protoTagRecvEager, k.wi, k.st)
	case takeFrag:
		w.tagAck(k.ack)
		r := k.r
		switch {
		case !k.done:
			return r, nil
		case flags&flagNoImmCmpl != 0:
			r.complete(r.tr.status)
			return r, nil
		}
		// All of it had arrived: complete at once, without a callback.
		st, info := r.tr.status, r.tr.info
		r.finish(st)
		r.release()
		return nil, tagRecvResult(param, info, st)
	}
	// A rendezvous request. Its data may come inside the call (through
	// mapped memory, a get done at once), or none may (truncated): it then
	// completes at once, as an eager message does, its callback run only
	// with OpAttrFlagNoImmCmpl.
	r := k.r
	r.hold()
	w.tagRndvMatched(r, &k.rts)
	w.tagReleaseMsg(k.msg)
	info := r.tr.info
	r, st := r.heldResult(flags)
	if r != nil {
		return r, nil
	}
	return nil, tagRecvResult(param, info, st)
}

// What a tag receive found under the tag lock (tagTake.kind).
const (
	takeFailed  = iota // the call fails with err
	takePosted         // no message: the receive r is posted
	takeRevoked        // a probed message its sender took back
	takeEager          // a whole eager message, unpacked
	takeFrag           // a fragmented message given to r (done: all of it)
	takeRTS            // a rendezvous message r is taking
)

// tagTake is what tagTakeLocked found, for tagRecv to finish.
type tagTake struct {
	kind uint8
	err  error       // takeFailed
	r    *Request    // takePosted, takeFrag, takeRTS
	done bool        // takeFrag: all of the message had arrived
	st   ucs.Status  // takeEager: the unpack's status
	info TagRecvInfo // takeRevoked, takeEager
	wi   *workerIface
	ack  tagAckTo    // takeEager, takeFrag: the sync send to acknowledge
	msg  *TagMessage // takeRTS: the message, released once taken
	rts  rtsInfo     // takeRTS
}

// tagTakeLocked finds what a receive of it (of tag under mask, or of the
// probed message msg) takes, and takes it; the tag lock is held.
func (w *Worker) tagTakeLocked(it dtIter, tag, mask uint64, param *RequestParam, msg *TagMessage, flags uint32) tagTake {
	t := &w.tag
	if msg != nil {
		if msg.revoked {
			msg.revoked = false
			return tagTake{kind: takeRevoked, info: TagRecvInfo{SenderTag: msg.tag, Length: msg.length}}
		}
		if msg.done || (!msg.probed && !msg.queued) {
			return tagTake{kind: takeFailed, err: fmt.Errorf("ucp tag msg recv: message handle received already: %w", ucs.ErrInvalidParam)}
		}
	} else {
		// Found, not yet taken: a receive that cannot take it leaves it
		// where it is, in its order.
		msg = t.m.searchUnexpected(tag, mask, false)
	}
	force := flags&flagForceImmCmpl != 0
	switch {
	case msg == nil && force:
		return tagTake{kind: takeFailed, err: fmt.Errorf("ucp tag recv: no message yet: %w", ucs.ErrNoResource)}
	case msg == nil:
		r := w.newRecv(param, it)
		r.tr.tag, r.tr.mask = tag, mask
		t.m.post(r)
		return tagTake{kind: takePosted, r: r}
	case force && msg.kind != msgEager && (msg.kind != msgFrag || t.arriving(msg)):
		// It cannot complete at once: the message stays where it was.
		return tagTake{kind: takeFailed, err: fmt.Errorf("ucp tag recv: message not complete yet: %w", ucs.ErrNoResource)}
	}
	t.m.removeUnexpected(msg)
	// What an eager message delivers; a rendezvous one says its own
	// (tagRndvMatched).
	info := TagRecvInfo{SenderTag: msg.tag, Length: min(msg.length, it.length)}
	switch msg.kind {
	case msgEager:
		k := tagTake{kind: takeEager, st: ucs.OK, info: info, wi: msg.wi, ack: msg.ackOf()}
		if len(msg.parts) > 0 {
			k.st = it.unpack(0, msg.parts[0].data)
		}
		t.releaseMsg(msg)
		return k
	case msgFrag:
		r := w.newRecv(param, it)
		r.tr.info, r.rwi = info, msg.wi
		ack := msg.ackOf()
		return tagTake{kind: takeFrag, r: r, ack: ack, done: w.tagTakeFrag(r, msg)}
	}
	r := w.newRecv(param, it)
	r.tr.info = info
	// Being taken, until rndvTook: the sender hears from this receive (an
	// RTR, or the ATS once it read the data), and a revoke of it waits
	// for that (rndvRecvRevoke).
	t.rts[fragKey{msg.src, msg.sreq}] = nil
	return tagTake{kind: takeRTS, r: r, msg: msg,
		rts: rtsInfo{fam: famTag, arg: msg.tag, src: msg.src, sreq: msg.sreq, length: msg.length, raddr: msg.raddr, key: msg.key, sync: msg.sync}}
}

// tagRecvImm completes at once a receive of it that took a whole message
// (info, protocol proto, from wi) with st: under OpAttrFlagNoImmCmpl as a
// completed request, whose callback ran; otherwise as the call's result.
func (w *Worker) tagRecvImm(it dtIter, param *RequestParam, flags uint32, info TagRecvInfo, proto string, wi *workerIface, st ucs.Status) (*Request, error) {
	if flags&flagNoImmCmpl != 0 {
		r := w.newRecv(param, it)
		r.tr.info = info
		r.proto, r.rwi = proto, wi
		r.complete(st)
		return r, nil
	}
	it.finish()
	return nil, tagRecvResult(param, info, st)
}

// tagRecvResult is the result of a receive that completed inside its call
// with st: param.RecvInfo gets info when it succeeded.
func tagRecvResult(param *RequestParam, info TagRecvInfo, st ucs.Status) error {
	if st == ucs.OK && param != nil && param.OpAttrMask&OpAttrFieldRecvInfo != 0 && param.RecvInfo != nil {
		*param.RecvInfo = info
	}
	return st.Err()
}

// tagReleaseMsg gives back what the unexpected message m holds; the tag
// lock is not held.
func (w *Worker) tagReleaseMsg(m *TagMessage) {
	t := &w.tag
	t.lock()
	t.releaseMsg(m)
	t.unlock()
}

// newRecv returns a receive request of data it. Its receive state is zero
// (newRequest), which is its status OK.
func (w *Worker) newRecv(param *RequestParam, it dtIter) *Request {
	r := w.newRequest(param)
	r.recv, r.dt, r.size, r.proto = true, it, it.length, protoTagRecv
	return r
}

// tagTakeFrag gives the unexpected fragmented message msg to the receive
// r: the data that arrived goes into r's buffer, and the fragments still
// to come will follow it. It reports whether the message is complete (the
// caller then completes r). The tag lock is held.
func (w *Worker) tagTakeFrag(r *Request, msg *TagMessage) bool {
	t := &w.tag
	r.proto = protoTagRecvEager
	off := 0
	for i := range msg.parts {
		r.tagUnpack(off, msg.parts[i].data)
		off += len(msg.parts[i].data)
	}
	done := !t.arriving(msg)
	if !done {
		t.frags.route(fragKey{msg.src, msg.msg}, fragDest{r: r})
	}
	t.releaseMsg(msg)
	return done
}

// arriving reports whether fragments of the unexpected message m are
// still to come; the tag lock is held.
func (t *tagWorker) arriving(m *TagMessage) bool {
	_, ok := t.frags[fragKey{m.src, m.msg}]
	return ok && m.kind == msgFrag
}

// ackOf returns the acknowledgement a receive that takes m owes its
// sender (none for a message not sent sync).
func (m *TagMessage) ackOf() tagAckTo {
	if !m.sync || m.kind == msgRTS {
		return tagAckTo{}
	}
	return tagAckTo{src: m.src, sreq: m.sreq}
}

// Protocol names of receives, as Request.Query reports them.
const (
	protoTagRecv        = "tag/recv"
	protoTagRecvEager   = "tag/recv/eager"
	protoTagRecvRkeyPtr = "tag/recv/rndv/rkey_ptr"
	protoTagRecvGet     = "tag/recv/rndv/get/zcopy"
	protoTagRecvAM      = "tag/recv/rndv/am"
	protoTagRecvPut     = "tag/recv/rndv/put/zcopy"
)

// tagCancel cancels the tag receive r if no message matched it yet, or if
// it matched a rendezvous message and waits for its sender to push or put
// the data (RTR sent): that may never come (the sender closed, or does not
// progress), and the receive must end whatever the sender does. Pieces
// that arrive after are dropped (rndvRecvData unpacks under its lock,
// so none is written into r's buffer once it is canceled), and the key of
// a buffer registered for a put is revoked (rndvRecvDone). It reports
// whether it canceled r (r is then complete with ucs.ErrCanceled).
func (w *Worker) tagCancel(r *Request) bool {
	t := &w.tag
	t.lock()
	ok := t.m.unpost(r)
	waiting := !ok && w.proto.take(r.tr.rreq, r)
	t.unlock()
	switch {
	case ok:
		r.complete(ucs.ErrCanceled)
	case waiting:
		w.rndvRecvDone(r, ucs.ErrCanceled)
	}
	return ok || waiting
}

// tagFailEP ends the rendezvous receives the peer of ep, which failed or
// closed with st, was to push data to.
func (w *Worker) tagFailEP(ep *Endpoint, st ucs.Status) {
	t := &w.tag
	if !t.enabled {
		return
	}
	t.lock()
	recvs := w.proto.waitsEnd(famTag, func(r *Request) bool { return r.tr.ep == ep })
	t.unlock()
	for _, r := range recvs {
		w.rndvRecvDone(r, st)
	}
}

// tagDestroy gives back what the worker's unexpected messages hold, and
// completes the receives no message matched with ucs.ErrCanceled.
func (w *Worker) tagDestroy() {
	t := &w.tag
	if !t.enabled {
		return
	}
	t.lock()
	for k, m := range t.rts {
		delete(t.rts, k)
		if m != nil && !m.queued {
			t.releaseMsg(m) // removed by a probe and never received
		}
	}
	for m := t.m.unexpAll.head; m != nil; m = t.m.unexpAll.head {
		t.m.removeUnexpected(m)
		t.releaseMsg(m)
	}
	posted := t.m.expected()
	for _, r := range posted {
		t.m.unpost(r)
	}
	t.unlock()
	for _, r := range posted {
		r.complete(ucs.ErrCanceled)
	}
}

// tagLogf logs a problem of the worker's tag protocols. A peer can cause
// these (malformed or stray messages), so they share the worker's limited
// log with the software protocols' warnings.
func (w *Worker) tagLogf(format string, args ...any) {
	w.swWarnf(format, args...)
}
