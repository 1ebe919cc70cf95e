package ucp

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// The stream API (the ucp_stream_* calls of the UCX documents).
//
// An endpoint of a worker whose context has FeatureStream sends bytes to
// its peer endpoint with StreamSendNBX; the peer receives them, in the
// order they were sent and without message boundaries, with
// StreamRecvNBX (into a buffer of its own: the receive completes with
// what arrived, or only once the buffer is full with StreamRecvFlagWaitAll)
// or StreamRecvDataNB (the data where it arrived, given back with
// StreamDataRelease). Worker.StreamWorkerPoll names the endpoints that
// have data no receive took.
//
// Wire and order: a send below the rendezvous threshold (UCX_RNDV_THRESH,
// as for tag sends) goes as a sequence of amStreamData messages on the
// endpoint's AM lane (stream_wire.go), copied into the transport's buffer
// or, above UCX_ZCOPY_THRESH, zero-copy, in pieces of at most one
// transport message. A larger one goes by the rendezvous that tag
// messages and active messages share (tag_rndv.go): an RTS of family
// famStream on the AM lane, whose data the receiver fetches as
// UCX_RNDV_SCHEME allows (rkey_ptr, get, put, or the AM pipeline of
// pushed fragments) at once, whether or not a receive waits: into the
// buffer of the receive that waits first, when nothing is queued before
// it and it takes all of the data (zero-copy where the scheme allows,
// behind what the receive holds already), and otherwise into a buffer of
// the worker's that joins the stream's queue. A stream send thus ends, as
// an eager one, without its receiver's application. Every send goes
// through the send engine of tag sends and active messages (sendOp,
// proto_send.go). Every piece and RTS of every send of an endpoint
// travels one connection, in order, and sends that wait for transport
// resources wait in the worker's queue behind the earlier ones of their
// endpoint; at the receiver, one rendezvous fetch at a time runs per
// stream, and what arrives meanwhile waits for its end (streamPump):
// large and small sends cannot overtake each other.
//
// Rendezvous and endings: a send canceled, or whose endpoint closes in
// force mode, before its receiver took the data is revoked as a tag
// message's: the stream holds all of its bytes (its receiver took them
// first) or none; a receive that waited for them to be pushed or put ends
// with ucs.ErrCanceled. A flush-mode close (and an endpoint flush) waits
// for the endpoint's rendezvous sends to be taken, as for eager data. A
// receive canceled while its buffer is being filled by a rendezvous ends
// with that data (its length tells), so that no byte of the stream is
// lost. A rendezvous for an endpoint that was closed is answered as
// taken, its data dropped, as an eager send's would be.

// Which endpoint receives: a stream connects one endpoint of each side.
// The n-th endpoint a worker creates to a peer worker (its connection
// number n, counted per peer from 0) is paired with the peer's n-th
// endpoint to it, as UCX pairs endpoints by their connection sequence
// numbers; a message names the sending worker and the receiving
// endpoint's number. An endpoint to the worker's own worker receives what
// it sends itself (loopback); endpoints to self with
// EPParamsFlagNoLoopback are numbered apart and paired with each other:
// the first with the second, the third with the fourth, and so on. Data that arrives
// before its endpoint is created waits for it; data for an endpoint that
// was closed is dropped. Endpoints the worker creates for itself (to
// reply to a peer) take no number.

// StreamRecvFlags are the flags of stream receives
// (ucp_stream_recv_flags_t), in RequestParam.Flags
// (RequestParam.SetStreamRecvFlags) or the flags of StreamRecvNB.
type StreamRecvFlags uint32

// Flags of stream receives.
const (
	// StreamRecvFlagWaitAll: the receive completes only once its whole
	// buffer is filled (or with an error), not with what arrived first.
	StreamRecvFlagWaitAll StreamRecvFlags = 1 << 0
)

// StreamRecvCallback is called when a stream receive completes
// (ucp_stream_recv_nbx_callback_t): status is nil or the error it ended
// with; length is the number of bytes received into the buffer. It runs
// from Worker.Progress, or from the receive's call when that completes at
// once with OpAttrFlagNoImmCmpl.
type StreamRecvCallback func(req *Request, status error, length int, userData any)

// SetStreamRecvCallback sets the completion callback of a stream receive.
func (p *RequestParam) SetStreamRecvCallback(cb StreamRecvCallback) *RequestParam {
	p.StreamRecvCallback, p.OpAttrMask = cb, p.OpAttrMask|OpAttrFieldCallback
	return p
}

// StreamPollEP is an endpoint that has stream data to receive, as
// Worker.StreamWorkerPoll reports it (ucp_stream_poll_ep_t).
type StreamPollEP struct {
	EP       *Endpoint
	UserData any // the endpoint's user data (EPParams.SetUserData)
	Flags    uint32
}

// streamNoLoopback marks the connection numbers of endpoints to self with
// EPParamsFlagNoLoopback, counted apart from the others: they pair with
// each other, and a loopback endpoint to self takes none of their numbers.
const streamNoLoopback = 1 << 63

// gone reports whether the endpoint numbered sn to the worker uid was
// created already (and so, having no stream now, closed); the lock is held.
func (s *streamWorker) gone(uid, sn uint64) bool {
	if sn&streamNoLoopback != 0 {
		return sn&^streamNoLoopback < s.nextNL
	}
	return sn < s.next[uid]
}

// streamKey names a stream at the receiver: the sending worker and the
// receiving endpoint's connection number.
type streamKey struct{ uid, sn uint64 }

// streamQ is the receive side of one endpoint's stream: the data no
// receive took yet and the receives waiting for data. It exists from the
// creation of its endpoint, or from the first data that arrived for it.
type streamQ struct {
	ep     *Endpoint // nil until the endpoint is created
	key    streamKey
	peerSN uint64    // the connection number sends name (the peer endpoint's)
	segs   []tagPart // queued data, in order, from segs[head]
	head   int
	off    int // bytes of segs[head] taken
	bytes  int // queued bytes
	reqs   []*Request
	// The rendezvous fetch in flight, one at a time: the receive whose
	// buffer it fills (reqs[0]), or the carrier of a buffer for the queue
	// (streamRecvState.stage). What arrives meanwhile waits in later, in
	// its order, until the fetch ends (streamPump); pumping: streamPump
	// runs a fetch it started.
	fetching *Request
	later    []streamLater
	pumping  bool
	// fail: the endpoint failed or closed, with this status; closed: it
	// closed, and its stream is gone.
	fail   ucs.Status
	closed bool
	// On the worker's list of endpoints with data (StreamWorkerPoll).
	ready      bool
	prev, next *streamQ
}

// streamLater is what arrived on a stream while a rendezvous fetch ran: a
// piece of data, or (rts.sreq set) a rendezvous request, with the endpoint
// back to its sender.
type streamLater struct {
	part tagPart
	rts  rtsInfo
	ep   *Endpoint
}

// streamRecvState is the part of a request that a stream receive uses
// (the bytes received are in tr.got, the first error in tr.status), or a
// rendezvous fetch into a stream's queue.
type streamRecvState struct {
	q *streamQ // posted on it, nil once taken off
	// fq: the stream whose rendezvous fetch the request carries; stage:
	// the request is the worker's, its buffer goes to the queue;
	// canceled: Cancel came during the fetch, which ends the receive.
	// The flags share a word: clearOp clears the state in fewer stores.
	waitAll  bool
	stage    bool
	canceled bool
	gran     int // a partial completion takes whole elements of this size
	fq       *streamQ
}

// streamWorker is a worker's stream state. In the worker's multi thread
// mode mu guards it; otherwise only one goroutine at a time uses it.
type streamWorker struct {
	enabled bool
	modeMutex
	qs map[streamKey]*streamQ
	// last is the queue of qs the last stream message went to: a
	// ping-pong's messages all go to one, which the map's lookup of a
	// 16-byte key cost about 135 instructions to find again. It leaves qs
	// only with it (streamFailEP, streamDestroy).
	last   *streamQ
	next   map[uint64]uint64 // per peer worker: the next connection number
	nextNL uint64            // the next number of a no-loopback endpoint to self
	ready  streamQ           // the list head of endpoints with data
	lent   map[*byte]tagPart // data handed out by StreamRecvDataNB
	bufs   bufPool
	// taking: the rendezvous messages whose fetch may read the sender's
	// memory, until rndvTook (a revoke leaves them to their ATS).
	taking map[fragKey]struct{}
}

// streamInit prepares the worker for streams when its context has
// FeatureStream: it installs the handler of stream messages.
func (w *Worker) streamInit() error {
	if w.ctx.features&FeatureStream == 0 {
		return nil
	}
	s := &w.stream
	s.multi = w.mode == ucs.ThreadModeMulti
	s.qs = map[streamKey]*streamQ{}
	s.next = map[uint64]uint64{}
	s.lent = map[*byte]tagPart{}
	s.taking = map[fragKey]struct{}{}
	s.ready.prev, s.ready.next = &s.ready, &s.ready
	if err := w.setProtoHandlers([]uint8{amStreamData}, []protoHandler{streamRecvData}); err != nil {
		return err
	}
	s.enabled = true
	return nil
}

// streamCheck checks that the worker may use streams: protoCheck, written
// out so that it is inlined into every stream send and receive (through
// protoCheck it cost more than the inliner's budget).
func (w *Worker) streamCheck(what string) error {
	if !w.streamOK() {
		return w.streamCheckErr(what)
	}
	return nil
}

// streamOK is streamCheck's test: the worker may do stream operations. A
// send or receive that returns streamCheckErr when it fails, instead of
// testing streamCheck's error, keeps its arguments in registers: no call
// on its way needs them after it.
func (w *Worker) streamOK() bool { return w.stream.enabled && !w.closed.Load() }

// streamCheckErr is the error of a failed streamOK.
func (w *Worker) streamCheckErr(what string) error { return w.protoCheckErr(what, "FeatureStream") }

// streamAddEP gives a new endpoint its connection number and its stream,
// with the data that arrived for it already.
func (w *Worker) streamAddEP(ep *Endpoint) {
	s := &w.stream
	if !s.enabled || ep.params.internal {
		return
	}
	s.lock()
	var sn, peer uint64
	if ep.remoteUID == w.uid && ep.params.FieldMask&EPParamFieldFlags != 0 && ep.params.Flags&EPParamsFlagNoLoopback != 0 {
		sn = streamNoLoopback | s.nextNL
		s.nextNL++
		peer = sn ^ 1
	} else {
		sn = s.next[ep.remoteUID]
		s.next[ep.remoteUID] = sn + 1
		peer = sn
	}
	key := streamKey{ep.remoteUID, sn}
	q := s.qs[key]
	if q == nil {
		q = &streamQ{key: key}
		s.qs[key] = q
	}
	q.ep, q.peerSN = ep, peer
	ep.strm = q
	if q.readable() {
		s.setReady(q)
	}
	s.unlock()
}

// setReady puts q on the list of endpoints with data; the lock is held.
func (s *streamWorker) setReady(q *streamQ) {
	if q.ready || q.ep == nil {
		return
	}
	q.ready = true
	q.prev, q.next = s.ready.prev, &s.ready
	s.ready.prev.next = q
	s.ready.prev = q
}

// readable reports whether q has data that StreamRecvDataNB would return:
// bytes queued and no receive waiting for them (a receive that waits took
// what it could, and the rest, part of an element, is its).
func (q *streamQ) readable() bool { return q.bytes > 0 && len(q.reqs) == 0 }

// unready takes q off the list of endpoints with data; the lock is held.
func (s *streamWorker) unready(q *streamQ) {
	if !q.ready {
		return
	}
	q.ready = false
	q.prev.next, q.next.prev = q.next, q.prev
	q.prev, q.next = nil, nil
}

// releasePart gives back a piece of data: the transport's buffer, or one
// of the worker's; the lock is held.
func (s *streamWorker) releasePart(p *tagPart) {
	if p.raw != nil {
		p.wi.iface.ReleaseDesc(p.raw)
	} else {
		s.bufs.put(p.data)
	}
	*p = tagPart{}
}

// want returns how many of avail bytes the stream receive r takes now: as
// many as its buffer has room for, but when that does not fill it and it
// may complete partially, whole elements only.
func (r *Request) streamWant(avail int) int {
	room := r.dt.length - r.tr.got
	k := min(room, avail)
	if k < room && !r.sr.waitAll && r.sr.gran > 1 {
		k -= (r.tr.got + k) % r.sr.gran
	}
	return max(k, 0)
}

// streamTakes reports whether the stream receive r, with nothing queued
// before them, takes all of n bytes arriving and then completes.
func (r *Request) streamTakes(n int) bool {
	if r.streamWant(n) != n {
		return false
	}
	got := r.tr.got + n
	return got == r.dt.length || (!r.sr.waitAll && got > 0)
}

// streamDone reports whether the stream receive r is complete.
func (r *Request) streamDone() bool {
	return r.tr.got == r.dt.length || (!r.sr.waitAll && r.tr.got > 0)
}

// takeQueued unpacks n queued bytes of q into r; the lock is held.
func (s *streamWorker) takeQueued(q *streamQ, r *Request, n int) {
	for n > 0 && q.head < len(q.segs) {
		seg := &q.segs[q.head]
		d := seg.data[q.off:]
		k := min(n, len(d))
		if st := r.dt.unpack(r.tr.got, d[:k]); st != ucs.OK && r.tr.status == ucs.OK {
			r.tr.status = st
		}
		r.tr.got += k
		q.off += k
		q.bytes -= k
		n -= k
		if q.off == len(seg.data) {
			s.releasePart(seg)
			q.head++
			q.off = 0
		}
	}
	if q.head == len(q.segs) {
		q.segs, q.head = q.segs[:0], 0
	}
}

// streamRecvData handles a piece of a stream.
func streamRecvData(arg any, data []byte, flags uint32) ucs.Status {
	w, wi := protoArgs(arg)
	src, sn, p, ok := decodeStream(data)
	if !ok {
		w.tagLogf("dropped a stream message: %v", streamShortErr(len(data)))
		return ucs.OK
	}
	s := &w.stream
	s.lock()
	q := s.streamOf(src, sn)
	if q == nil {
		s.unlock()
		w.tagLogf("dropped %d stream bytes from %#x for a closed endpoint", len(p), src)
		return ucs.OK
	}
	if q.bytes == 0 && len(q.reqs) == 1 && q.fetching == nil && len(q.later) == 0 {
		if r := q.reqs[0]; r.streamTakes(len(p)) {
			// The common case (a ping-pong's): the one receive that
			// waits, with nothing queued before p, takes all of p and
			// completes. (q, with no bytes, is not on the ready list.)
			if got := r.tr.got; r.dt.fits(got, len(p)) {
				ucs.Copy(r.dt.contig[got:], p) // unpack's first case, without its call
			} else {
				r.tagUnpack(got, p)
			}
			r.tr.got += len(p)
			q.reqs[0] = nil
			q.reqs = q.reqs[:0]
			r.sr.q = nil
			s.unlock()
			r.rwi = wi
			r.complete(r.tr.status)
			return ucs.OK
		}
	}
	return s.recvData(q, wi, p, data, flags)
}

// recvData is streamRecvData of p, data of the message raw that arrived
// for q, in the general case: behind a rendezvous fetch, into several
// receives, or into the queue; the lock is held, and released.
func (s *streamWorker) recvData(q *streamQ, wi *workerIface, p, raw []byte, flags uint32) ucs.Status {
	st := ucs.OK
	if q.fetching != nil || len(q.later) > 0 {
		// Behind a rendezvous fetch: it waits for the fetch's end.
		var part tagPart
		part, st = s.keep(wi, p, raw, flags)
		q.later = append(q.later, streamLater{part: part})
		s.unlock()
		return st
	}
	var doneBuf [4]*Request
	p, done := s.feedLocked(q, p, doneBuf[:0])
	if len(p) > 0 {
		var part tagPart
		part, st = s.keep(wi, p, raw, flags)
		q.segs = append(q.segs, part)
		q.bytes += len(p)
	}
	s.setReadiness(q)
	s.unlock()
	for _, r := range done {
		r.rwi = wi
		r.complete(r.tr.status)
	}
	return st
}

// streamOf returns the stream of the endpoint numbered sn to the worker
// src, made when the data comes before the endpoint, or nil when the
// endpoint was closed; the lock is held.
func (s *streamWorker) streamOf(src, sn uint64) *streamQ {
	// The last stream that got data first: a map lookup costs about
	// 135 instructions a message.
	if q := s.last; q != nil && q.key.uid == src && q.key.sn == sn {
		return q
	}
	return s.lookup(src, sn)
}

// lookup is streamOf in the worker's map of streams; the lock is held.
func (s *streamWorker) lookup(src, sn uint64) *streamQ {
	key := streamKey{src, sn}
	q := s.qs[key]
	if q == nil && !s.gone(src, sn) {
		q = &streamQ{key: key}
		s.qs[key] = q
	}
	if q != nil {
		s.last = q
	}
	return q
}

// keep keeps p, data of a stream in the transport's buffer raw, for
// later: the buffer itself when the transport lends it (the status
// returned tells it so), a copy otherwise; the lock is held.
func (s *streamWorker) keep(wi *workerIface, p, raw []byte, flags uint32) (tagPart, ucs.Status) {
	if flags&uct.CBParamFlagDesc != 0 {
		return tagPart{data: p, raw: raw, wi: wi}, ucs.InProgress
	}
	b := s.bufs.get(len(p))
	copy(b, p)
	return tagPart{data: b}, ucs.OK
}

// feedLocked gives the receives waiting on q what q has queued, then p,
// data arriving now, in order, and returns the part of p that none took
// and done with the receives that completed appended; the lock is held.
func (s *streamWorker) feedLocked(q *streamQ, p []byte, done []*Request) ([]byte, []*Request) {
	for len(q.reqs) > 0 && q.fetching == nil {
		r := q.reqs[0]
		k := r.streamWant(q.bytes + len(p))
		kq := min(k, q.bytes)
		if kq > 0 {
			s.takeQueued(q, r, kq)
		}
		if kp := k - kq; kp > 0 {
			r.tagUnpack(r.tr.got, p[:kp])
			r.tr.got += kp
			p = p[kp:]
		}
		if !r.streamDone() {
			break
		}
		q.dropReq(0)
		done = append(done, r)
	}
	return p, done
}

// dropReq takes the i-th receive off q, shifting the others down rather
// than reslicing, so that the slice's memory serves the next receives;
// the lock is held. (The copy is skipped for the last one, the only one of
// a ping-pong: a copy of pointers is a call of the runtime, even empty.)
func (q *streamQ) dropReq(i int) {
	r := q.reqs[i]
	n := len(q.reqs) - 1
	if i < n {
		copy(q.reqs[i:], q.reqs[i+1:])
	}
	q.reqs[n] = nil
	q.reqs = q.reqs[:n]
	r.sr.q = nil
}

// setReadiness puts q on the ready list when it has data to read now,
// and takes it off otherwise (a receive took what was queued, or waits
// for the rest of an element); the lock is held.
func (s *streamWorker) setReadiness(q *streamQ) {
	if q.readable() {
		s.setReady(q)
	} else {
		s.unready(q)
	}
}

// streamRecvRTS takes a stream's rendezvous request (checked by
// rndvRecvRTS) in its place in the stream, behind what arrived before it:
// its data is fetched at once (streamPump), whether or not a receive
// waits for it, so that a stream send, as an eager one, ends without its
// receiver's application. A request for an endpoint that was closed is
// answered as if its data were taken: the data is dropped, as an eager
// send's would be.
func (w *Worker) streamRecvRTS(rts *rtsInfo) {
	ep := w.replyEP(rts.src)
	if ep == nil || ep.am == nil {
		w.tagLogf("dropped a stream rendezvous of %d bytes from %#x: no endpoint back to the sender", rts.length, rts.src)
		return
	}
	s := &w.stream
	s.lock()
	q := s.streamOf(rts.src, rts.arg)
	if q == nil {
		s.unlock()
		w.tagLogf("dropped %d stream bytes (rendezvous) from %#x for a closed endpoint", rts.length, rts.src)
		w.rndvATS(rts.src, rts.sreq, ucs.OK)
		return
	}
	if q.fetching == nil && !q.pumping && len(q.later) == 0 {
		// Nothing before it: fetched now, its key read where it arrived.
		w.streamFetch(q, rts, ep)
		w.streamPump(q)
		return
	}
	l := streamLater{rts: *rts, ep: ep}
	l.rts.uhdr, l.rts.key = nil, append([]byte(nil), rts.key...)
	q.later = append(q.later, l)
	s.unlock()
	w.streamPump(q)
}

// streamFetch starts the rendezvous fetch of rts on q (fetchInto,
// rndvFetch), through ep back to its sender; the lock is held, and
// released. A fetch that ends inside rndvFetch leaves what waits for it
// to the caller's pump (pumping).
func (w *Worker) streamFetch(q *streamQ, rts *rtsInfo, ep *Endpoint) {
	s := &w.stream
	r := s.fetchInto(q, rts, ep, w)
	q.pumping = true
	s.unlock()
	w.rndvFetch(r, rts.key, rts.raddr)
	s.lock()
	q.pumping = false
	s.unlock()
}

// streamPump takes what waits in q.later, in order, while no rendezvous
// fetch runs on q: data goes to the receives or the queue as if it arrived
// now; a rendezvous request starts its fetch (rndvFetch), into the buffer
// of the first receive when nothing is queued before it and the receive
// takes all of it, into a buffer of the worker's for the queue otherwise.
// What follows waits for the fetch's end (streamFetched), which pumps
// again.
func (w *Worker) streamPump(q *streamQ) {
	s := &w.stream
	for {
		s.lock()
		if q.pumping || q.fetching != nil || len(q.later) == 0 {
			s.unlock()
			return
		}
		l := q.later[0]
		n := copy(q.later, q.later[1:])
		q.later[n] = streamLater{}
		q.later = q.later[:n]
		if l.rts.sreq == 0 {
			var doneBuf [4]*Request
			p, done := s.feedLocked(q, l.part.data, doneBuf[:0])
			if len(p) > 0 {
				l.part.data = p
				q.segs = append(q.segs, l.part)
				q.bytes += len(p)
			} else {
				s.releasePart(&l.part)
			}
			s.setReadiness(q)
			s.unlock()
			for _, r := range done {
				r.complete(r.tr.status)
			}
			continue
		}
		w.streamFetch(q, &l.rts, l.ep)
	}
}

// fetchInto makes the request that the rendezvous fetch of rts on q
// fills, through ep back to its sender: q's first receive, when nothing
// is queued before the data and the receive takes all of it, or a carrier
// of a buffer for the queue; the message is being taken (rndvTook) and
// q's fetch in flight. The lock is held.
func (s *streamWorker) fetchInto(q *streamQ, rts *rtsInfo, ep *Endpoint, w *Worker) *Request {
	n := rts.length
	var r *Request
	if q.bytes == 0 && len(q.reqs) > 0 && !q.reqs[0].sr.canceled && q.reqs[0].streamWant(n) == n {
		// Zero-copy into the receive, behind what it holds.
		r = q.reqs[0]
		r.tr.at, r.tr.got = r.tr.got, 0
	} else {
		r = w.newRequest(nil)
		r.recv, r.size, r.proto = true, n, protoStreamRecv
		r.dt = dtIter{contig: s.bufs.get(n), length: n}
		r.tr = tagRecvState{status: ucs.OK}
		r.sr = streamRecvState{stage: true}
	}
	r.tr.fam, r.tr.src, r.tr.sreq, r.tr.ep, r.lane = famStream, rts.src, rts.sreq, ep, ep.am
	r.tr.info.Length = n
	r.sr.fq = q
	q.fetching = r
	s.taking[fragKey{rts.src, rts.sreq}] = struct{}{}
	return r
}

// streamFetched ends the rendezvous fetch r on its stream with st
// (rndvRecvEnd): a buffer for the queue joins it (or, on an error, is
// dropped: the bytes of a revoked send are not the stream's); a receive
// that was filled completes when it is full, may complete partially, or
// failed or was canceled, and waits for more otherwise. The queue then
// feeds the receives, and what waited for the fetch is taken (streamPump).
func (w *Worker) streamFetched(r *Request, st ucs.Status) {
	s := &w.stream
	var doneBuf [4]*Request
	done := doneBuf[:0]
	s.lock()
	q := r.sr.fq
	r.sr.fq, q.fetching = nil, nil
	n, lost := r.tr.info.Length, false
	var end *Request
	endSt := ucs.OK
	if r.sr.stage {
		buf := r.dt.contig[:n]
		if st == ucs.OK && !q.closed {
			q.segs = append(q.segs, tagPart{data: buf})
			q.bytes += n
		} else {
			s.bufs.put(buf)
			lost = true
		}
	} else {
		if st != ucs.OK {
			n = r.tr.got // what was pushed into it in order, if anything
			if r.tr.status == ucs.OK {
				r.tr.status = st
			}
		}
		r.tr.got, r.tr.at = r.tr.at+n, 0
		if r.tr.status != ucs.OK || r.sr.canceled || q.fail != ucs.OK || r.streamDone() {
			for i, o := range q.reqs {
				if o == r {
					q.dropReq(i)
					break
				}
			}
			end, endSt = r, r.tr.status
			switch {
			case endSt != ucs.OK:
			case r.sr.canceled:
				endSt = ucs.ErrCanceled
			case q.fail != ucs.OK && !r.streamDone():
				endSt = q.fail
			}
		}
	}
	if !q.closed {
		_, done = s.feedLocked(q, nil, done)
		s.setReadiness(q)
	}
	s.unlock()
	if r.sr.stage {
		if lost {
			w.tagLogf("dropped %d stream bytes from %#x: %v", n, r.tr.src, st)
		}
		r.dt = dtIter{}
		r.release()
	}
	if end != nil {
		end.complete(endSt)
	}
	for _, d := range done {
		d.complete(d.tr.status)
	}
	w.streamPump(q)
}

// streamRndvSending reports whether a rendezvous stream send of ep waits
// for its receiver to take the data (an endpoint flush waits for it).
func (w *Worker) streamRndvSending(ep *Endpoint) bool {
	if !w.stream.enabled {
		return false
	}
	p := &w.proto
	p.lock()
	defer p.unlock()
	for _, op := range p.sends {
		if op.ep == ep && op.fam == famStream && op.kind == topRTS && !op.revoked {
			return true
		}
	}
	return false
}

// streamRevoked is the stream part of a sender's revoke of its rendezvous
// message k (rndvRecvRevoke): a fetch that may read the sender's memory
// is left alone (taking: its ATS answers), and a request that waits
// behind another fetch is dropped: none of its bytes join the stream.
func (w *Worker) streamRevoked(k fragKey) (taking bool) {
	s := &w.stream
	s.lock()
	defer s.unlock()
	if _, taking = s.taking[k]; taking {
		return true
	}
	for _, q := range s.qs {
		for i, l := range q.later {
			if l.rts.sreq == k.msg && l.rts.src == k.src {
				q.later = append(q.later[:i], q.later[i+1:]...)
				return false
			}
		}
	}
	return false
}

// StreamSendNBX sends buf on the endpoint's stream (ucp_stream_send_nbx);
// param's datatype may describe other data (an iov, a generic datatype;
// buf is then nil or the generic buffer). It returns (nil, nil) when the
// data may be reused at once, or a request that completes when it may; the
// peer receives the bytes after those of every earlier send of the
// endpoint. It fails with ucs.ErrInvalidParam without FeatureStream or for
// a bad datatype, with the endpoint's error on a failed or closed
// endpoint, with ucs.ErrNoResource under OpAttrFlagForceImmCmpl when the
// send cannot complete at once, and with the transport's error otherwise.
func (ep *Endpoint) StreamSendNBX(buf []byte, param *RequestParam) (*Request, error) {
	if !ep.w.streamOK() {
		return nil, ep.w.streamCheckErr("stream send")
	}
	if n := len(buf); n > 0 && n <= streamShortMax && ep.strm != nil && ep.shortPath(param) {
		// The common small send: header and data in one AMShort, no
		// request.
		if th := ep.thresholds(); 8+n <= th.short {
			l := ep.am
			l.sendMu.lock()
			b := l.pk.short[:8+n]
			binary.LittleEndian.PutUint64(b, ep.strm.peerSN)
			ucs.Copy(b[8:], buf) // inline for 8 bytes (copy calls memmove)
			st := l.ep.AMShort(amStreamData, ep.w.uid, b)
			l.sendMu.unlock()
			if st == ucs.OK {
				return nil, nil
			}
			if st != ucs.ErrNoResource {
				return nil, fmt.Errorf("ucp stream send on %s: %w", l, st)
			}
		}
	}
	return ep.streamSendData(buf, param)
}

// streamSendData is StreamSendNBX with a request (kept out of it, so that
// the short send's frame does not hold the data's iterator).
func (ep *Endpoint) streamSendData(buf []byte, param *RequestParam) (*Request, error) {
	it, err := dtFromParam(buf, param, false)
	if err != nil {
		return nil, fmt.Errorf("ucp stream send: %w", err)
	}
	return ep.streamSend(it, param)
}

// streamShortMax bounds the data of a stream send that goes as one short
// active message (after the 8 bytes of the header that AMShort's own
// header does not carry, copied with it through the lane's buffer).
const streamShortMax = 120

// StreamSendNB is the older form of StreamSendNBX (ucp_stream_send_nb):
// count elements of datatype dt in buffer (a []byte for a contiguous
// datatype, a [][]byte for DatatypeIOV, what StartPack takes for a generic
// one). cb, if not nil, is called when a send that did not complete at
// once completes. flags must be 0 (the UCX documents reserve them).
func (ep *Endpoint) StreamSendNB(buffer any, count int, dt Datatype, cb SendCallback, flags uint32) (*Request, error) {
	if err := ep.w.streamCheck("stream send"); err != nil {
		return nil, err
	}
	if flags != 0 {
		return nil, fmt.Errorf("ucp stream send: flags %#x: %w", flags, ucs.ErrInvalidParam)
	}
	it, err := dtFromArgs(buffer, count, dt, false)
	if err != nil {
		return nil, fmt.Errorf("ucp stream send: %w", err)
	}
	p := RequestParam{}
	if cb != nil {
		p.SetCallback(cb)
	}
	return ep.streamSend(it, &p)
}

// Protocol names of stream sends and receives, as Request.Query reports
// them.
const (
	protoStreamBcopy       = "stream/eager/bcopy"
	protoStreamZcopy       = "stream/eager/zcopy"
	protoStreamRndv        = "stream/rndv"
	protoStreamRndvAM      = "stream/rndv/am"
	protoStreamRndvPut     = "stream/rndv/put/zcopy"
	protoStreamRecv        = "stream/recv"
	protoStreamRecvRkeyPtr = "stream/rndv/recv/rkey_ptr"
	protoStreamRecvGet     = "stream/rndv/recv/get"
	protoStreamRecvAM      = "stream/rndv/recv/am"
	protoStreamRecvPut     = "stream/rndv/recv/put"
)

// streamSendConnecting is streamSend on an endpoint that connects (kept
// out of it, so that what it captures does not leave the fast path's
// frame).
func (ep *Endpoint) streamSendConnecting(st *epConnect, it dtIter, param *RequestParam) (*Request, bool, error) {
	r, handled, err := ep.whileConnecting(st, "stream send", param, false, func(p *RequestParam) (*Request, error) {
		return ep.streamSend(it, p)
	})
	if handled && err != nil {
		it.finish()
	}
	return r, handled, err
}

// streamSend starts a stream send of the data it.
func (ep *Endpoint) streamSend(it dtIter, param *RequestParam) (*Request, error) {
	w := ep.w
	if st := ep.conn.Load(); st != nil {
		if r, handled, err := ep.streamSendConnecting(st, it, param); handled {
			return r, err
		}
	}
	if err := ep.sendCheck("stream send"); err != nil {
		it.finish()
		return nil, err
	}
	q := ep.strm
	if q == nil {
		it.finish()
		return nil, fmt.Errorf("ucp stream send: an endpoint the worker made for replies has no stream: %w", ucs.ErrInvalidParam)
	}
	flags := sendFlags(param)
	n := it.length
	if n == 0 {
		it.finish()
		return w.completedNow(param, protoStreamBcopy, ep.am, 0)
	}
	th := ep.thresholds()
	rndv := n >= th.rndv
	op := w.newSendOp(ep, topStream)
	op.fam = famStream
	op.th = th
	op.zcopy = !rndv && it.canZcopy() && th.lim.zcopy > 0 && n >= th.zcopy && streamHdrLen <= th.lim.zhdr
	if flags&flagForceImmCmpl != 0 && (rndv || op.zcopy || ep.queued.Load() > 0 || streamHdrLen+n > th.lim.bcopy) {
		op.free()
		it.finish()
		return nil, fmt.Errorf("ucp stream send of %d bytes cannot complete at once: %w", n, ucs.ErrNoResource)
	}
	if rndv {
		// The receiver fetches the data: it needs a way back.
		if err := ep.wireBack(); err != nil {
			op.free()
			it.finish()
			return nil, fmt.Errorf("ucp stream send: %w", err)
		}
	}
	r := w.newRequest(param)
	r.size, r.lane, r.dt, r.top, r.untracked = n, ep.am, it, op, true
	op.r, op.dt = r, &r.dt
	switch {
	case rndv:
		r.proto = protoStreamRndv
		w.proto.register(op)
		op.rndvStart(param, q.peerSN, 0, nil)
	case op.zcopy:
		r.proto = protoStreamZcopy
	default:
		r.proto = protoStreamBcopy
	}
	if !rndv {
		op.hlen = streamHdrLen
		put64(op.hdr[:], w.uid, q.peerSN)
	}
	return op.started(r, ep, w.protoStart(op), flags, "stream send")
}

// StreamRecvNBX receives stream data of the endpoint into buf
// (ucp_stream_recv_nbx); param's datatype may describe another buffer (an
// iov, a generic datatype). The receive takes the data that arrived and no
// earlier receive took, and completes as soon as it has some (for a
// contiguous datatype of elements larger than a byte, whole elements), or,
// with StreamRecvFlagWaitAll in param's flags, once buf is full. When it
// completes at once it returns (nil, length, nil), or under
// OpAttrFlagNoImmCmpl a completed request whose callback ran; otherwise it
// returns a request whose StreamRecvCallback (RequestParam.
// SetStreamRecvCallback) gets the length, as does
// Request.StreamRecvRequestTest. Receives of one endpoint complete in the
// order they were posted. It fails with ucs.ErrInvalidParam without
// FeatureStream, for a bad datatype or unknown flags, with the endpoint's
// error on a failed or closed endpoint, and with ucs.ErrNoResource under
// OpAttrFlagForceImmCmpl when it cannot complete at once.
func (ep *Endpoint) StreamRecvNBX(buf []byte, param *RequestParam) (*Request, int, error) {
	if !ep.w.streamOK() {
		return nil, 0, ep.w.streamCheckErr("stream recv")
	}
	f := uint32(0)
	if param != nil && param.OpAttrMask&OpAttrFieldFlags != 0 {
		// The field shares its bits with the OpAttrFlag* ones.
		f = param.Flags &^ uint32(opAttrFlags)
	}
	if param == nil || param.OpAttrMask&OpAttrFieldDatatype == 0 {
		// Bytes: streamRecv sets the request's iterator over buf in place,
		// without one here to copy.
		return ep.streamRecv(buf, nil, param, f, 1)
	}
	return ep.streamRecvParam(buf, param, f)
}

// streamRecvParam is StreamRecvNBX of a receive with a datatype (kept out
// of it, so that the iterator and the error's formatting stay out of its
// frame).
func (ep *Endpoint) streamRecvParam(buf []byte, param *RequestParam, flags uint32) (*Request, int, error) {
	it, err := dtFromParam(buf, param, true)
	if err != nil {
		return nil, 0, fmt.Errorf("ucp stream recv: %w", err)
	}
	gran := 1
	if param.Datatype.Class() == DatatypeClassContig {
		gran = max(param.Datatype.ElemSize(), 1)
	}
	return ep.streamRecv(nil, &it, param, flags, gran)
}

// StreamRecvNB is the older form of StreamRecvNBX (ucp_stream_recv_nb):
// count elements of datatype dt in buffer (see StreamSendNB), flags
// StreamRecvFlag* bits. cb, if not nil, is called when a receive that did
// not complete at once completes; one that did returns (nil, length, nil).
func (ep *Endpoint) StreamRecvNB(buffer any, count int, dt Datatype, cb StreamRecvCallback, flags StreamRecvFlags) (*Request, int, error) {
	if err := ep.w.streamCheck("stream recv"); err != nil {
		return nil, 0, err
	}
	it, err := dtFromArgs(buffer, count, dt, true)
	if err != nil {
		return nil, 0, fmt.Errorf("ucp stream recv: %w", err)
	}
	gran := 1
	if dt.Class() == DatatypeClassContig {
		gran = max(dt.ElemSize(), 1)
	}
	p := RequestParam{}
	if cb != nil {
		p.SetStreamRecvCallback(cb)
	}
	return ep.streamRecv(nil, &it, &p, uint32(flags), gran)
}

// StreamRecvRequestTest returns the status of a stream receive, as Status
// does (ucp_stream_recv_request_test), and once it completed fills in
// length (when not nil) with the bytes it received.
func (r *Request) StreamRecvRequestTest(length *int) error {
	err := r.Status()
	if err != ucs.InProgress && length != nil {
		*length = r.tr.got
	}
	return err
}

// streamRecv posts a stream receive of the data it, or of the bytes of
// buf when it is nil. it is the caller's, passed by reference: the
// iterator is 15 words.
func (ep *Endpoint) streamRecv(buf []byte, it *dtIter, param *RequestParam, flags uint32, gran int) (*Request, int, error) {
	w := ep.w
	if err := ep.waitConnected(); err != nil {
		return streamRecvFail(it, fmt.Errorf("ucp stream recv: %w", err))
	}
	if flags&^streamFlagWaitAll != 0 {
		return streamRecvFail(it, fmt.Errorf("ucp stream recv: flags %#x: %w", flags, ucs.ErrInvalidParam))
	}
	if ep.closed.Load() {
		return streamRecvFail(it, fmt.Errorf("ucp stream recv: %w", ErrClosed))
	}
	q := ep.strm
	if q == nil {
		return streamRecvFail(it, fmt.Errorf("ucp stream recv: an endpoint the worker made for replies has no stream: %w", ucs.ErrInvalidParam))
	}
	imm := sendFlags(param)
	s := &w.stream
	var r *Request
	if param == nil || param.OpAttrMask&OpAttrFieldRequest == 0 {
		// newRequest's, with the worker's request taken inline.
		if r = w.requests.pop(); r == nil {
			r = w.poolRequest()
		}
		if param != nil {
			r.setParam(param)
		}
	} else {
		r = w.newRequest(param)
	}
	// One field a statement: a tuple assignment copies the iterator
	// through a temporary. The request's tr and sr are zero (clearOp),
	// tr.status ucs.OK among them.
	r.recv = true
	if it != nil {
		r.dt = *it
	} else {
		r.dt.length, r.dt.contig = len(buf), buf // r.dt is zero (clearOp)
	}
	r.size = r.dt.length
	r.proto = protoStreamRecv
	r.lane = ep.am
	r.tr.fam = famStream
	r.sr.waitAll = flags&streamFlagWaitAll != 0
	r.sr.gran = gran
	if param != nil && param.OpAttrMask&OpAttrFieldCallback != 0 {
		r.scb = param.StreamRecvCallback
	}
	s.lock()
	k := 0
	if len(q.reqs) == 0 && q.bytes > 0 {
		k = r.streamWant(q.bytes)
	}
	if k != r.dt.length && (k == 0 || r.sr.waitAll) {
		// It waits for more: unless it may, it ends before it takes
		// anything of the stream.
		if st := ep.dead(); st != ucs.OK || imm&flagForceImmCmpl != 0 {
			s.unlock()
			r.finish(ucs.ErrCanceled)
			r.release()
			if st != ucs.OK {
				return nil, 0, fmt.Errorf("ucp stream recv from %s: %w", ep.remoteName, st)
			}
			return nil, 0, fmt.Errorf("ucp stream recv: not enough data yet: %w", ucs.ErrNoResource)
		}
		if k > 0 {
			s.takeQueued(q, r, k)
		}
		r.sr.q = q
		q.reqs = append(q.reqs, r)
		// What is queued now, part of an element, is the receive's.
		s.unready(q)
		s.unlock()
		return r, 0, nil
	}
	if k > 0 {
		s.takeQueued(q, r, k)
	}
	if !q.readable() {
		s.unready(q)
	}
	s.unlock()
	n, st := r.tr.got, r.tr.status
	if imm&flagNoImmCmpl != 0 {
		r.complete(st)
		return r, n, nil
	}
	r.finish(st)
	r.release()
	if st != ucs.OK {
		return nil, n, fmt.Errorf("ucp stream recv: %w", st)
	}
	return nil, n, nil
}

// streamRecvFail ends a stream receive that failed before it was posted
// (of the data it, nil for bytes).
func streamRecvFail(it *dtIter, err error) (*Request, int, error) {
	if it != nil {
		it.finish()
	}
	return nil, 0, err
}

// StreamRecvDataNB returns the endpoint's stream data that arrived and no
// receive took, where it lies (ucp_stream_recv_data_nb): the next piece of
// the stream (one transport message's worth, or what remains of it), or
// nil when there is none. The data stays valid, and the transport's
// buffer it may lie in stays held, until StreamDataRelease gives it back.
// It fails with ucs.ErrInvalidParam without FeatureStream, and with the
// endpoint's error on a closed or failed endpoint that has no data.
func (ep *Endpoint) StreamRecvDataNB() ([]byte, error) {
	w := ep.w
	if err := w.streamCheck("stream recv data"); err != nil {
		return nil, err
	}
	if err := ep.waitConnected(); err != nil {
		return nil, fmt.Errorf("ucp stream recv data: %w", err)
	}
	if ep.closed.Load() {
		return nil, fmt.Errorf("ucp stream recv data: %w", ErrClosed)
	}
	q := ep.strm
	if q == nil {
		return nil, fmt.Errorf("ucp stream recv data: an endpoint the worker made for replies has no stream: %w", ucs.ErrInvalidParam)
	}
	s := &w.stream
	s.lock()
	if q.bytes == 0 || len(q.reqs) > 0 {
		s.unlock()
		if st := ep.dead(); st != ucs.OK {
			return nil, fmt.Errorf("ucp stream recv data from %s: %w", ep.remoteName, st)
		}
		return nil, nil
	}
	seg := q.segs[q.head]
	data := seg.data[q.off:]
	q.segs[q.head] = tagPart{}
	q.head++
	q.bytes -= len(data)
	q.off = 0
	if q.head == len(q.segs) {
		q.segs, q.head = q.segs[:0], 0
	}
	if !q.readable() {
		s.unready(q)
	}
	s.lent[unsafe.SliceData(data)] = seg
	s.unlock()
	return data, nil
}

// StreamDataRelease gives back data that StreamRecvDataNB returned on the
// endpoint (ucp_stream_data_release); the data must not be used after it.
// Data not lent, or given back already, is ignored with a logged warning.
func (ep *Endpoint) StreamDataRelease(data []byte) {
	w := ep.w
	s := &w.stream
	if !s.enabled || len(data) == 0 {
		return
	}
	s.lock()
	seg, ok := s.lent[unsafe.SliceData(data)]
	if ok {
		delete(s.lent, unsafe.SliceData(data))
		s.releasePart(&seg)
	}
	s.unlock()
	if !ok {
		w.tagLogf("stream data release of %d bytes that StreamRecvDataNB did not lend", len(data))
	}
}

// StreamWorkerPoll fills polls with the endpoints that have stream data to
// read (ucp_stream_worker_poll): data that arrived, no receive took and no
// receive waits on, which StreamRecvDataNB returns. It returns how many it
// filled. An endpoint is reported once, and again after more data arrived
// for it (or a receive that waited on its data was canceled); one whose
// data receives took meanwhile is not reported. flags must be 0. It
// returns 0 without FeatureStream.
func (w *Worker) StreamWorkerPoll(polls []StreamPollEP, flags uint32) int {
	s := &w.stream
	if !s.enabled || flags != 0 || w.closed.Load() {
		return 0
	}
	n := 0
	s.lock()
	for n < len(polls) && s.ready.next != &s.ready {
		q := s.ready.next
		s.unready(q)
		polls[n] = StreamPollEP{EP: q.ep, UserData: q.ep.UserData()}
		n++
	}
	s.unlock()
	return n
}

// streamCancel cancels the stream receive r if it still waits for data;
// what it received already stays in its buffer, and its length tells. A
// receive that a rendezvous fetch fills ends with the fetch (the data
// stays the stream's: none of it is lost to a receive that no longer
// waits).
func (w *Worker) streamCancel(r *Request) {
	s := &w.stream
	s.lock()
	q := r.sr.q
	found := false
	if q != nil && q.fetching == r {
		r.sr.canceled = true
		s.unlock()
		return
	}
	if q != nil {
		for i, o := range q.reqs {
			if o == r {
				q.dropReq(i)
				found = true
				break
			}
		}
		if q.readable() {
			// What the receive waited on (part of an element) can be
			// read now.
			s.setReady(q)
		}
	}
	s.unlock()
	if found {
		r.complete(ucs.ErrCanceled)
	}
}

// streamFailEP ends the stream receives of ep, which failed or closed,
// with st; a closed endpoint's stream is gone: its data is given back,
// and the rendezvous requests that wait on it are answered as taken (the
// data is dropped). A receive that a rendezvous fetch fills ends with the
// fetch, which ends at once when it waits for the peer to push or put.
func (w *Worker) streamFailEP(ep *Endpoint, st ucs.Status) {
	s := &w.stream
	q := ep.strm
	if !s.enabled || q == nil {
		return
	}
	s.lock()
	q.fail = st
	var reqs []*Request
	for _, r := range q.reqs {
		if r == q.fetching {
			continue
		}
		r.sr.q = nil
		reqs = append(reqs, r)
	}
	q.reqs = q.reqs[:0]
	if q.fetching != nil && !q.fetching.sr.stage {
		q.reqs = append(q.reqs, q.fetching)
	}
	var answer []rtsInfo
	if ep.closed.Load() {
		q.closed = true
		s.unready(q)
		answer = s.dropQueued(q)
		delete(s.qs, q.key)
		if s.last == q {
			s.last = nil
		}
	} else if q.readable() {
		s.setReady(q) // its data can still be read (StreamRecvDataNB)
	}
	s.unlock()
	for _, r := range reqs {
		r.complete(st)
	}
	for _, rts := range answer {
		w.rndvATS(rts.src, rts.sreq, ucs.OK)
	}
	for _, r := range w.proto.waitsEnd(famStream, func(r *Request) bool { return r.sr.fq == q }) {
		w.rndvRecvDone(r, st)
	}
}

// dropQueued gives back the data queued on q and what waits behind a
// fetch, and returns the rendezvous requests that waited; the lock is
// held.
func (s *streamWorker) dropQueued(q *streamQ) []rtsInfo {
	for i := q.head; i < len(q.segs); i++ {
		s.releasePart(&q.segs[i])
	}
	q.segs, q.head, q.off, q.bytes = nil, 0, 0, 0
	var rts []rtsInfo
	for i := range q.later {
		if l := &q.later[i]; l.rts.sreq != 0 {
			rts = append(rts, l.rts)
		} else {
			s.releasePart(&l.part)
		}
	}
	q.later = nil
	return rts
}

// streamDestroy gives back the data of streams whose endpoint was never
// created, and what StreamRecvDataNB lent.
func (w *Worker) streamDestroy() {
	s := &w.stream
	if !s.enabled {
		return
	}
	s.lock()
	for k, q := range s.qs {
		q.closed = true
		s.dropQueued(q) // (the senders of rendezvous requests end with their endpoints)
		delete(s.qs, k)
	}
	s.last = nil
	for k, seg := range s.lent {
		s.releasePart(&seg)
		delete(s.lent, k)
	}
	s.unlock()
}
