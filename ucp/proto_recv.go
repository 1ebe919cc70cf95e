package ucp

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// The receive side that the two-sided protocols (tag matching, active
// messages, streams) share: the reassembly of a message that arrives in
// fragments, and the whole receive of a rendezvous: its RTS (rndvRecvRTS,
// one for the three families), the take of its data (rndvFetch: rkey_ptr,
// get, or an RTR for a put or a push), the receives that wait for pushed
// or put data, the sender's revoke, and the answers to the sender.
// What a family does with the data (a tag receive unpacks it or an
// unexpected message keeps it; an active message gathers it for its
// handler) is the fragment table's destination, its hook; what it does
// with an RTS (tag matching, the AM handler, the stream's order) is its
// own (tagRecvRTS, amRecvRTS, streamRecvRTS), and so is what a receive
// does once the rendezvous data is in (rndvRecvEnd).

// fragKey names a sender's fragmented message or send: the sender and the
// message's or send's number.
type fragKey struct{ src, msg uint64 }

// inOrder counts data that arrives in order, in pieces: got of total bytes
// came.
type inOrder struct{ got, total int }

// take accounts for n bytes at off: ok when they are the next ones and fit
// in the rest, done when they were the last.
func (f *inOrder) take(off uint64, n int) (ok, done bool) {
	if off != uint64(f.got) || n > f.total-f.got {
		return false, false
	}
	f.got += n
	return true, f.got == f.total
}

// fragIn is a message arriving in fragments: its progress, and where its
// data goes.
type fragIn[D any] struct {
	inOrder
	dest D
}

// fragTable holds the messages arriving in fragments by sender and
// message number; its owner's lock guards it.
type fragTable[D any] map[fragKey]fragIn[D]

// begin records message k of total bytes, whose first fragment of n bytes
// goes to dest; done reports that this fragment was all of it (nothing is
// recorded). A message already in progress fails with ucs.ErrInvalidParam.
func (t fragTable[D]) begin(k fragKey, n, total int, dest D) (done bool, err error) {
	if _, dup := t[k]; dup {
		return false, fmt.Errorf("first fragment of message %d from %#x already in progress: %w", k.msg, k.src, ucs.ErrInvalidParam)
	}
	if n >= total {
		return true, nil
	}
	t[k] = fragIn[D]{inOrder{n, total}, dest}
	return false, nil
}

// route sends the next fragments of message k, in progress, to dest.
func (t fragTable[D]) route(k fragKey, dest D) {
	f := t[k]
	f.dest = dest
	t[k] = f
}

// next accounts for the fragment of n bytes at off of message k and
// returns the message: its destination, and its progress with this
// fragment (the last when got reaches total; the message is then
// forgotten). A fragment of no message, or not the next one, fails with
// ucs.ErrInvalidParam; lost then reports a message that was in progress:
// it is forgotten, and the caller ends its destination.
func (t fragTable[D]) next(k fragKey, off uint64, n int) (f fragIn[D], lost bool, err error) {
	f, found := t[k]
	if !found {
		return f, false, fmt.Errorf("fragment of %d bytes at %d of unknown message %d from %#x: %w", n, off, k.msg, k.src, ucs.ErrInvalidParam)
	}
	ok, done := f.take(off, n)
	if !ok {
		delete(t, k)
		return f, true, fmt.Errorf("fragment of %d bytes at %d of message %d from %#x, expected at %d of %d: %w", n, off, k.msg, k.src, f.got, f.total, ucs.ErrInvalidParam)
	}
	if done {
		delete(t, k)
	} else {
		t[k] = f
	}
	return f, false, nil
}

// rndvGetOp is the get of a rendezvous receive: the gets it still has to
// issue, as an operation of the worker's send queue.
type rndvGetOp struct {
	w     *Worker
	r     *Request
	ref   *rkeyRef
	ep    *Endpoint
	raddr uint64
	off   int // bytes whose get was issued
	max   int // the largest get
	maxIO int // the most iov elements of one get
	iov   []uct.IOV
}

// rndvGetPool recycles the rendezvous gets, with their iov.
var rndvGetPool = sync.Pool{New: func() any { return new(rndvGetOp) }}

// rndvGet gets the r.tr.info.Length bytes of rendezvous data at raddr into
// the receive r (of either family) through the key ref, which a lane to
// the sender gets with; proto names the protocol. The receive completes,
// and its sender hears of it (rndvAnswer), when the last get is done.
func (w *Worker) rndvGet(r *Request, ref *rkeyRef, raddr uint64, proto string) {
	rl := ref.rk.rma
	at := rl.l.wi.attr
	g := rndvGetPool.Get().(*rndvGetOp)
	*g = rndvGetOp{w: w, r: r, ref: ref, ep: ref.rk.ep, raddr: raddr,
		max: at.Get.MaxZcopy, maxIO: max(at.Get.MaxIOV, 1), iov: g.iov[:0]}
	if g.max <= 0 {
		g.max = maxInt
	}
	r.proto, r.lane, r.tr.rk = proto, rl.l, ref
	// The get's completion, lent by r: an operation that reuses r sets
	// r's own again (ownCompletion).
	r.comp = uct.Completion{Count: 1, Func: rndvGetDone, Arg: g}
	switch st := w.protoStart(g); {
	case st == ucs.OK:
		g.end(ucs.OK)
	case st.IsErr():
		g.end(st)
	}
}

func (g *rndvGetOp) endpoint() *Endpoint { return g.ep }

// advance issues the remaining gets (protoOp).
func (g *rndvGetOp) advance() ucs.Status {
	r, rl := g.r, g.ref.rk.rma
	n := r.tr.info.Length
	for g.off < n {
		k := min(g.max, n-g.off)
		g.iov = r.dt.zcopyIOV(g.iov[:0], r.tr.at+g.off, k)
		if len(g.iov) > g.maxIO {
			k = 0
			for _, v := range g.iov[:g.maxIO] {
				k += len(v.Buffer)
			}
			g.iov = g.iov[:g.maxIO]
		}
		atomic.AddInt32(&r.comp.Count, 1)
		st := rl.ep.GetZcopy(g.iov, g.raddr+uint64(g.off), rl.rkey, &r.comp)
		clear(g.iov)
		switch st {
		case ucs.InProgress:
		case ucs.OK:
			atomic.AddInt32(&r.comp.Count, -1)
		default:
			atomic.AddInt32(&r.comp.Count, -1)
			if st == ucs.ErrNoResource {
				return st
			}
			r.comp.SetError(st)
			return g.drop()
		}
		g.off += k
	}
	return g.drop()
}

// drop releases the issuer's reference of the receive's completion.
func (g *rndvGetOp) drop() ucs.Status {
	if atomic.AddInt32(&g.r.comp.Count, -1) == 0 {
		return g.r.comp.Status()
	}
	return ucs.InProgress
}

func (g *rndvGetOp) abort(st ucs.Status) {
	g.r.comp.SetError(st)
	if fin := g.drop(); fin != ucs.InProgress {
		g.end(fin)
	}
}

// end finishes the get with st, which nothing refers to any more (no
// queue holds it, no transfer runs): it is recycled, the sender hears of
// it, and the receive completes.
func (g *rndvGetOp) end(st ucs.Status) {
	w, r := g.w, g.r
	*g = rndvGetOp{iov: g.iov[:0]}
	rndvGetPool.Put(g)
	w.rndvGetFinish(r, st)
}

// rndvGetDone is the completion of a rendezvous get's last transfer.
func rndvGetDone(c *uct.Completion) {
	c.Arg.(*rndvGetOp).end(c.Status())
}

// rndvGetFinish ends the rendezvous get of r with st.
func (w *Worker) rndvGetFinish(r *Request, st ucs.Status) {
	if ref := r.tr.rk; ref != nil {
		r.tr.rk = nil
		w.rkc.put(ref)
	}
	w.rndvAnswer(r, st)
	w.rndvRecvEnd(r, st)
}

// rndvAnswer tells the sender of the rendezvous message the receive r
// took that it read all it will of its data, with st: the message is no
// longer being taken by r's family (a revoke of it is answered at once),
// and the ATS ends the sender's send.
func (w *Worker) rndvAnswer(r *Request, st ucs.Status) {
	w.rndvTook(r, false)
	w.rndvATS(r.tr.src, r.tr.sreq, st)
}

// rndvTook records that the receive r, which took a rendezvous message,
// reads nothing of the sender's memory any more (it read what it took, or
// never will): the message is no longer being taken in its family's
// table (tag: tagRecvRTS, takeRTS; AM: AMRecvDataNBX; stream:
// streamRecvRTS), and a revoke of it is answered at once
// (rndvRecvRevoke). With wait, r instead waits for the sender to push or
// put the data: it gets its number and enters the worker's waits in the
// same step, under the family's lock, where a revoke finds it.
func (w *Worker) rndvTook(r *Request, wait bool) {
	k := fragKey{r.tr.src, r.tr.sreq}
	if wait {
		r.tr.rreq = w.proto.newID()
	}
	switch r.tr.fam {
	case famAM:
		a := &w.am
		a.mu.Lock()
		delete(a.rts, k)
		w.proto.waitIf(r, wait)
		a.mu.Unlock()
	case famStream:
		s := &w.stream
		s.lock()
		delete(s.taking, k)
		w.proto.waitIf(r, wait)
		s.unlock()
	default:
		t := &w.tag
		t.lock()
		delete(t.rts, k)
		w.proto.waitIf(r, wait)
		t.unlock()
	}
}

// rndvRecvEnd ends the rendezvous transfer into the receive r with st: a
// tag or AM receive completes; a stream's receive hands the bytes to its
// stream, which completes what they complete (streamFetched).
func (w *Worker) rndvRecvEnd(r *Request, st ucs.Status) {
	if r.tr.fam == famStream {
		w.streamFetched(r, st)
		return
	}
	r.complete(st)
}

// rndvATS ends the rendezvous send sreq of the worker src (of either
// family) with st: the receiver read what it will of the data, dropped the
// message, or answers a revoke (ucs.ErrCanceled). A failure is logged, and
// returned.
func (w *Worker) rndvATS(src, sreq uint64, st ucs.Status) ucs.Status {
	return w.tagCtrl(src, amTagATS, tagATSLen, sreq, uint64(int64(st)))
}

// rndvWaits holds the rendezvous receives that wait for their sender to
// push or put the data, by receive number (the number their RTR gave the
// sender), of both families (protoWorker.waits). A receive keeps its
// progress in r.tr: got of r.tr.info.Length bytes came.
type rndvWaits map[uint64]*Request

// waitIf enters r, which sends its RTR next, by its number, if wait; the
// caller holds its family's lock, where r stops being taken in the same
// step.
func (p *protoWorker) waitIf(r *Request, wait bool) {
	if !wait {
		return
	}
	p.lock()
	p.waits[r.tr.rreq] = r
	p.unlock()
}

// take forgets r, waiting as receive rreq, and reports whether it was
// there (a receive Cancel ends, or whose RTR failed).
func (p *protoWorker) take(rreq uint64, r *Request) bool {
	p.lock()
	defer p.unlock()
	if rreq == 0 || p.waits[rreq] != r {
		return false
	}
	delete(p.waits, rreq)
	return true
}

// waitOf forgets and returns the receive of send sreq of src, if one
// waits (the sender revokes the send).
func (p *protoWorker) waitOf(src, sreq uint64) *Request {
	p.lock()
	defer p.unlock()
	for id, r := range p.waits {
		if r.tr.src == src && r.tr.sreq == sreq {
			delete(p.waits, id)
			return r
		}
	}
	return nil
}

// waitsEnd forgets and returns the receives of family fam that match
// (their sender failed).
func (p *protoWorker) waitsEnd(fam uint8, match func(*Request) bool) []*Request {
	var out []*Request
	p.lock()
	for id, r := range p.waits {
		if r.tr.fam == fam && match(r) {
			delete(p.waits, id)
			out = append(out, r)
		}
	}
	p.unlock()
	return out
}

// rndvRecvData handles pushed rendezvous data, of a tag message or an
// active message: it goes into the receive it is for, in order.
func rndvRecvData(arg any, data []byte, flags uint32) ucs.Status {
	w, _ := protoArgs(arg)
	h, p, err := decodeTag(amTagData, data)
	if err != nil {
		return w.tagDropped(err)
	}
	pw := &w.proto
	pw.lock()
	r := pw.waits[h.rreq]
	if r == nil || r.tr.src != h.src {
		pw.unlock()
		return w.tagDropped(fmt.Errorf("rendezvous data of %d bytes at %d from %#x for unknown receive %d: %w", len(p), h.off, h.src, h.rreq, ucs.ErrInvalidParam))
	}
	in := inOrder{r.tr.got, r.tr.info.Length}
	ok, last := in.take(h.off, len(p))
	if !ok || last {
		delete(pw.waits, h.rreq)
	}
	if !ok {
		pw.unlock()
		w.rndvRecvDone(r, ucs.ErrIOError)
		return w.tagDropped(fmt.Errorf("rendezvous data of %d bytes at %d from %#x for receive %d, expected at %d: %w", len(p), h.off, h.src, h.rreq, in.got, ucs.ErrInvalidParam))
	}
	r.tr.got = in.got
	// Unpacked under the lock: a receive that Cancel or a revoke takes out
	// of the waits meanwhile completes only once no piece is being written
	// into its buffer.
	r.tagUnpack(r.tr.at+int(h.off), p)
	pw.unlock()
	if last {
		w.rndvRecvDone(r, r.tr.status)
	}
	return ucs.OK
}

// rndvRecvATP handles the sender's word that it put all of a rendezvous
// message into the receive's buffer.
func rndvRecvATP(arg any, data []byte, flags uint32) ucs.Status {
	w, _ := protoArgs(arg)
	h, _, err := decodeTag(amTagATP, data)
	if err != nil {
		return w.tagDropped(err)
	}
	p := &w.proto
	p.lock()
	r := p.waits[h.rreq]
	if r != nil && r.tr.src == h.src && r.tr.got == 0 {
		delete(p.waits, h.rreq)
	} else {
		r = nil
	}
	p.unlock()
	if r == nil {
		return w.tagDropped(fmt.Errorf("rendezvous put done from %#x for unknown receive %d: %w", h.src, h.rreq, ucs.ErrInvalidParam))
	}
	w.rndvRecvDone(r, h.status)
	return ucs.OK
}

// rndvRecvDone ends r, a rendezvous receive of any family that its
// sender pushes or puts data to, with st (rndvRecvEnd), and releases what
// it registered for the put.
func (w *Worker) rndvRecvDone(r *Request, st ucs.Status) {
	if m := r.tr.memh; m != nil {
		r.tr.memh = nil
		w.ctx.MemUnmap(m)
	}
	w.rndvRecvEnd(r, st)
}

// rndvFetch takes the rendezvous data that the receive r (of any family;
// r.tr says its sender, send number, endpoint back, length, which fits,
// and where in r's buffer it goes, r.tr.at) was announced, at raddr with
// key at the sender, as UCX_RNDV_SCHEME allows (see tag_rndv.go): copied
// from the sender's memory where it is mapped here (rkey_ptr), got where a
// lane gets with the key, otherwise asked for with an RTR, to be put into
// r's buffer or pushed.
func (w *Worker) rndvFetch(r *Request, key []byte, raddr uint64) {
	ep, n, names := r.tr.ep, r.tr.info.Length, &rndvRecvProtos[r.tr.fam]
	sch := w.ctx.rndvSch
	put := sch == rndvPut || sch == rndvAuto && ep.thresholds().netPut
	if len(key) > 0 && (sch == rndvAuto || sch == rndvGet) {
		if ref := w.rkc.get(ep, key, false); ref != nil {
			rk := ref.rk
			if p := rk.direct(raddr, n); p != nil && sch == rndvAuto {
				r.proto = names.rkeyPtr
				if rk.rma != nil {
					r.lane = rk.rma.l
				}
				st := r.dt.unpack(r.tr.at, unsafe.Slice((*byte)(p), n))
				w.rkc.put(ref)
				w.rndvAnswer(r, ucs.OK)
				w.rndvRecvEnd(r, st)
				return
			}
			// Auto does not get over the network where the sender puts
			// (rndvByPut).
			if rk.rma != nil && rk.rma.get && r.dt.canZcopy() && !(put && rk.rma.l.deferred()) {
				w.rndvGet(r, ref, raddr, names.get)
				return
			}
			w.rkc.put(ref)
		}
	}
	// The sender puts the data into the receive's buffer, or pushes it.
	key, raddr = nil, 0
	r.proto = names.push
	if put && r.dt.isContig() {
		buf := r.dt.contig[r.tr.at : r.tr.at+n]
		if key, r.tr.memh = w.rndvKey(ep, buf, nil, true); key != nil {
			raddr = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf))))
			r.proto = names.put
		}
	}
	// r waits, where the data and a revoke find it, from the moment the
	// message is no longer being taken; one whose RTR cannot go ends.
	w.rndvTook(r, true)
	if st := w.rndvRTR(ep, r.tr.sreq, r.tr.rreq, raddr, key); st.IsErr() && w.proto.take(r.tr.rreq, r) {
		w.rndvRecvDone(r, st)
	}
}

// rndvRecvProtos names the protocols of rendezvous receives by family
// (Request.Query).
var rndvRecvProtos = [...]struct{ rkeyPtr, get, push, put string }{
	famTag:    {protoTagRecvRkeyPtr, protoTagRecvGet, protoTagRecvAM, protoTagRecvPut},
	famAM:     {protoAMRecvRkeyPtr, protoAMRecvGet, protoAMRecv, protoAMRecvPut},
	famStream: {protoStreamRecvRkeyPtr, protoStreamRecvGet, protoStreamRecvAM, protoStreamRecvPut},
}

// rtsInfo is what a rendezvous request announces (rndvRecvRTS).
type rtsInfo struct {
	fam            uint8
	arg, src, sreq uint64 // arg: the tag, the AM id, the stream's number
	length         int
	raddr          uint64
	uhdr, key      []byte // an active message's user header; the data's key
	sync, reply    bool   // a tag sync send; an AM asking for a reply endpoint
}

// rndvRecvRTS handles a rendezvous request of any family: checked here
// (its header, its key), it goes to the family that announced it, which
// gives it to a receive or keeps it in its order: tag matching
// (tagRecvRTS), the active message's handler (amRecvRTS), the stream
// (streamRecvRTS). The request of a family the worker does not have is
// answered at once with ucs.ErrUnsupported, so that its send ends.
func rndvRecvRTS(arg any, data []byte, flags uint32) ucs.Status {
	w, wi := protoArgs(arg)
	h, p, err := decodeTag(amTagRTS, data)
	if err != nil {
		return w.tagDropped(err)
	}
	rts := rtsInfo{fam: h.fam, arg: h.tag, src: h.src, sreq: h.sreq, length: int(h.total), raddr: h.raddr,
		uhdr: p[:h.hlen], key: p[h.hlen:], sync: h.flags&tagRTSSync != 0, reply: h.flags&hdrReply != 0}
	if len(rts.key) > 0 {
		if err := checkRkey(rts.key); err != nil {
			return w.tagDropped(err)
		}
	}
	st := ucs.ErrUnsupported
	switch {
	case h.total > uint64(maxInt):
		st = ucs.ErrExceedsLimit
	case h.fam == famTag && w.tag.enabled:
		return w.tagRecvRTS(wi, &rts, data, flags)
	case h.fam == famAM && w.am.enabled:
		w.amRecvRTS(&rts)
		return ucs.OK
	case h.fam == famStream && w.stream.enabled:
		w.streamRecvRTS(&rts)
		return ucs.OK
	}
	w.tagLogf("rendezvous message of %d bytes, family %d, from %#x: %v", h.total, h.fam, h.src, st)
	w.rndvATS(h.src, h.sreq, st)
	return ucs.OK
}

// sharedInit installs the handlers of the messages (tag_wire.go) that
// every family shares, when the worker has a family: the fragments of an
// eager message and the rendezvous.
func (w *Worker) sharedInit() error {
	if !w.tag.enabled && !w.am.enabled && !w.stream.enabled {
		return nil
	}
	return w.setProtoHandlers([]uint8{amTagFirst, amTagMiddle, amTagRTS, amTagRTR, amTagATS, amTagData, amTagATP, amTagRevoke},
		[]protoHandler{fragRecvFirst, fragRecvMiddle, rndvRecvRTS, tagRecvRTR, tagRecvATS, rndvRecvData, rndvRecvATP, rndvRecvRevoke})
}

// fragRecvFirst handles the first fragment of an eager message of any
// family that has them: checked here, it goes to its family, tag matching
// (tagRecvFirst) or the active message's reassembly (amRecvFirst).
func fragRecvFirst(arg any, data []byte, flags uint32) ucs.Status {
	w, wi := protoArgs(arg)
	h, p, err := decodeTag(amTagFirst, data)
	if err != nil {
		return w.tagDropped(err)
	}
	switch {
	case h.fam == famTag && w.tag.enabled:
		return w.tagRecvFirst(wi, &h, p, data, flags)
	case h.fam == famAM && w.am.enabled:
		w.amRecvFirst(&h, p)
		return ucs.OK
	}
	return w.tagDropped(fmt.Errorf("first fragment of family %d from %#x: %w", h.fam, h.src, ucs.ErrUnsupported))
}

// fragRecvMiddle handles a following fragment of an eager message of any
// family: the active messages' reassembly takes it when it has the
// message (amRecvMiddle), tag matching otherwise (tagRecvMiddle). Message
// numbers are the worker's, of all families: a sender's message is in one
// table.
func fragRecvMiddle(arg any, data []byte, flags uint32) ucs.Status {
	w, wi := protoArgs(arg)
	h, p, err := decodeTag(amTagMiddle, data)
	switch {
	case err != nil:
		return w.tagDropped(err)
	case w.am.enabled && w.amRecvMiddle(&h, p):
		return ucs.OK
	case w.tag.enabled:
		return w.tagRecvMiddle(wi, &h, p, data, flags)
	}
	return w.tagDropped(fmt.Errorf("fragment of message %d from %#x: no family takes it: %w", h.msg, h.src, ucs.ErrInvalidParam))
}

// rndvRecvRevoke handles a sender's revoke of a rendezvous message it
// announced (its endpoint closed, or the send was canceled), of any
// family: the family that holds the message drops it (tagRevoked,
// amRevoked, streamRevoked), and a receive that waits for the sender to
// push or put the data ends with ucs.ErrCanceled (rndvRecvDone). The sender then gets an ATS with
// ucs.ErrCanceled: nothing here reads its data any more. So it does when
// the message is not found (a receive took it and completed: the sender
// had its ATS, and ignores this one). Only a receive taking the message
// now is left alone: its ATS, sent once it is done, ends the send.
func rndvRecvRevoke(arg any, data []byte, flags uint32) ucs.Status {
	w, _ := protoArgs(arg)
	h, _, err := decodeTag(amTagRevoke, data)
	if err != nil {
		return w.tagDropped(err)
	}
	k := fragKey{h.src, h.sreq}
	taking := w.tag.enabled && w.tagRevoked(k) ||
		w.am.enabled && w.amRevoked(k) ||
		w.stream.enabled && w.streamRevoked(k)
	if taking {
		return ucs.OK
	}
	// A receive enters the waits in the step in which its family stops
	// taking the message (rndvTook): found there now, or never.
	if r := w.proto.waitOf(k.src, k.msg); r != nil {
		w.rndvRecvDone(r, ucs.ErrCanceled)
	}
	if h.src == w.uid {
		// The sender is this worker (an endpoint to itself, which may
		// have been its only one): no message needed.
		if op := w.takeSend(h.sreq, h.src, "", true); op != nil {
			op.comp.Invoke(ucs.ErrCanceled)
		}
		return ucs.OK
	}
	w.rndvATS(h.src, h.sreq, ucs.ErrCanceled)
	return ucs.OK
}
