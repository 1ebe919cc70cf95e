package tcp

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// Gets and fetching atomics: the EP sends a frameGet or frameAtomic
// naming the key, the range or word, and a number of its own; whoever
// reads the peer's side of the connection (its Progress, or its poller
// when Progress does not run) checks it as it checks a put, and answers on
// the same connection with one frameGetRep (written straight from the
// registered memory) or frameAtomicRep. The peer applies the frames of a
// connection in order, so replies come in the order of the requests,
// behind the acknowledgements of what came before: the EP keeps its
// waiting operations in a queue, and a reply must answer the first. Its
// reader reads a get's data straight into the caller's buffers (zcopy) or
// hands it to the unpack function (bcopy); the completion is signalled
// before the Progress that read the reply returns (from the next one when
// the poller read it). A flush that completes has seen every reply before
// it.

// waitOp is a get or fetching atomic waiting for its reply.
type waitOp struct {
	reply  uint8  // the frame type of its reply
	id     uint64 // its number, in the request and the reply
	iov    [][]byte
	unpack uct.UnpackFunc // get bcopy: what takes the data
	n      int            // get: bytes asked for
	res64  *uint64        // atomic: where the old value goes
	res32  *uint32
	comp   *uct.Completion
}

var waitOpPool = make(chan *waitOp, 256)

func newWaitOp() *waitOp {
	select {
	case w := <-waitOpPool:
		return w
	default:
		return new(waitOp)
	}
}

func (w *waitOp) release() {
	clear(w.iov)
	*w = waitOp{iov: w.iov[:0]}
	select {
	case waitOpPool <- w:
	default:
	}
}

// GetBcopy reads length bytes (at most Get.MaxBcopy) at raddr under rkey
// and passes them to unpack before comp is signalled. It returns
// ucs.InProgress; ucs.ErrNoResource when the EP's queue is full;
// ucs.ErrInvalidParam for a range outside the key or a length over the
// limit. A get the peer refuses completes with ucs.ErrInvalidAddr.
func (e *EP) GetBcopy(unpack uct.UnpackFunc, length int, raddr uint64, rkey uint64, comp *uct.Completion) ucs.Status {
	if unpack == nil || length < 0 || length > e.iface.cfg.segSize {
		return ucs.ErrInvalidParam
	}
	w := newWaitOp()
	w.unpack, w.n, w.comp = unpack, length, comp
	return e.postGet(w, raddr, rkey)
}

// GetZcopy reads into the iov, in order, the consecutive bytes from raddr
// under rkey (at most Get.MaxZcopy bytes in all), without copying them:
// the reader reads them from the socket into the buffers. It returns
// ucs.InProgress and signals comp when the data is there; errors as for
// GetBcopy.
func (e *EP) GetZcopy(iov []uct.IOV, raddr uint64, rkey uint64, comp *uct.Completion) ucs.Status {
	n := 0
	for k := range iov {
		n += len(iov[k].Buffer)
	}
	if len(iov) > maxIOV || n > maxPutLen {
		return ucs.ErrInvalidParam
	}
	w := newWaitOp()
	for k := range iov {
		if len(iov[k].Buffer) > 0 {
			w.iov = append(w.iov, iov[k].Buffer)
		}
	}
	w.n, w.comp = n, comp
	return e.postGet(w, raddr, rkey)
}

// postGet sends the request of the get w.
func (e *EP) postGet(w *waitOp, raddr, rkey uint64) ucs.Status {
	k, st := remoteRange(rkey, raddr, w.n)
	if st != ucs.OK {
		w.release()
		return st
	}
	f := newFrame(frameHeaderLen + getHeaderLen)
	putFrameHeader(f.buf, frameGet, 0, getHeaderLen)
	h := getHeader{key: k.id, token: k.token, raddr: raddr, length: uint64(w.n)}
	h.encode(f.buf[frameHeaderLen:])
	w.reply = frameGetRep
	return e.postWait(f, w, frameHeaderLen+32)
}

// postWait sends f, the request of w, whose id the EP writes at f.buf[idOff:]:
// ucs.InProgress once w was recorded (it then completes, with the EP's
// error if the EP fails), and otherwise ucs.ErrNoResource or the EP's
// error, and w is released.
func (e *EP) postWait(f *txFrame, w *waitOp, idOff int) ucs.Status {
	st, _ := e.postOp(f, false, w, idOff)
	if st != ucs.InProgress && st != ucs.OK {
		w.release()
		return st
	}
	return ucs.InProgress
}

// epReader is the frameHandler of an EP's connection: it takes the
// peer's acknowledgements, replies, heartbeats and goodbye, and hands the
// frames of the peer's operations on a shared connection to the iface's
// target role (e.rx).
type epReader struct {
	e     *EP
	inRx  bool      // the frame begun last is the target role's
	reads uint64    // the stream's reads at the last tick (alive.go)
	heard time.Time // when they last changed
	w     *waitOp   // the operation whose reply is being read
	st    ucs.Status
	old   uint64 // an atomic's old value
	buf   []byte // get bcopy: the reply's data, for w.unpack
	one   [1][]byte
}

// begin takes an acknowledgement, a heartbeat, a goodbye, or the header
// of a reply, and returns where a get's data goes; the frames of the
// peer's operations go to the target role. A reply that does not answer
// the first waiting operation, or not as asked, is a protocol error; so
// is one to an EP that ended, beyond those it dropped.
func (r *epReader) begin(h frameHeader, fixed []byte) ([][]byte, error) {
	e := r.e
	r.inRx = false
	switch h.typ {
	case frameEPClose:
		e.peerSaidBye()
		return nil, nil
	case frameAck:
		return nil, e.acknowledged(binary.LittleEndian.Uint64(fixed))
	case frameAlive:
		return nil, nil // it was read: that is all it is for
	case frameIfaceClose:
		return nil, &ifaceClosedError{processed: binary.LittleEndian.Uint64(fixed)}
	case frameGetRep, frameAtomicRep:
	default:
		r.inRx = true
		return e.rx.begin(h, fixed)
	}
	id := binary.LittleEndian.Uint64(fixed)
	v := int64(binary.LittleEndian.Uint64(fixed[8:]))
	n := int(h.len) - fixedLen(h.typ)
	if v > 0 || v < -128 || (v != 0 && n != 0) {
		return nil, fmt.Errorf("reply with status %d and %d bytes: %w", v, n, ucs.ErrInvalidParam)
	}
	st := ucs.Status(v)
	e.mu.Lock()
	w := e.firstWait()
	if w == nil && e.st.ended() && e.abandoned > 0 {
		// The EP ended and dropped the operation: so is the reply.
		e.abandoned--
		e.mu.Unlock()
		return nil, nil
	}
	if w == nil || w.id != id || w.reply != h.typ {
		e.mu.Unlock()
		return nil, fmt.Errorf("reply (type %d) to operation %d, which is not the first waiting: %w", h.typ, id, ucs.ErrInvalidParam)
	}
	e.popWait()
	e.mu.Unlock()
	r.w, r.st = w, st
	if h.typ == frameAtomicRep {
		r.old = binary.LittleEndian.Uint64(fixed[16:])
		return nil, nil
	}
	if st == ucs.OK && n != w.n {
		return nil, fmt.Errorf("get reply of %d bytes to a get of %d: %w", n, w.n, ucs.ErrInvalidParam)
	}
	switch {
	case st != ucs.OK:
		return nil, nil
	case w.unpack != nil:
		r.buf = getBuf(n)
		r.one[0] = r.buf
		return r.one[:], nil
	}
	return w.iov, nil // read straight into the caller's buffers
}

// end completes the operation whose reply was read.
func (r *epReader) end(progress bool) error {
	if r.inRx {
		return r.e.rx.end(progress)
	}
	w := r.w
	if w == nil {
		return nil // an acknowledgement or a heartbeat
	}
	r.w = nil
	switch {
	case r.buf != nil:
		w.unpack(r.buf)
		putBuf(r.buf)
		r.buf, r.one[0] = nil, nil
	case r.st != ucs.OK:
	case w.res64 != nil:
		*w.res64 = r.old
	case w.res32 != nil:
		*w.res32 = uint32(r.old)
	}
	if w.comp != nil {
		r.e.iface.complete(w.comp, r.st, progress)
	}
	w.release()
	return nil
}

// abort gives the operation whose reply was cut short back to the EP,
// which fails next and completes it with its error.
func (r *epReader) abort(err error) {
	if r.inRx {
		r.e.rx.abort(err)
		return
	}
	w := r.w
	if w == nil {
		return
	}
	if r.buf != nil {
		putBuf(r.buf)
		r.buf, r.one[0] = nil, nil
	}
	r.w = nil
	e := r.e
	e.mu.Lock()
	if !e.st.ended() {
		e.pushWaitFront(w)
		w = nil
	}
	e.mu.Unlock()
	if w != nil {
		if w.comp != nil {
			e.iface.pushComp(w.comp, e.status())
		}
		w.release()
	}
}

// caughtUp has the target role acknowledge what it processed.
func (r *epReader) caughtUp(progress bool) error {
	if r.e.rx != nil {
		return r.e.rx.caughtUp(progress)
	}
	return nil
}

// The queue of waiting operations, in the order of their requests; e.mu
// is held.

func (e *EP) firstWait() *waitOp {
	if e.waitHead == len(e.waits) {
		return nil
	}
	return e.waits[e.waitHead]
}

func (e *EP) popWait() {
	e.waits[e.waitHead] = nil
	if e.waitHead++; e.waitHead == len(e.waits) {
		e.waits, e.waitHead = e.waits[:0], 0
	}
}

func (e *EP) pushWaitFront(w *waitOp) {
	if e.waitHead > 0 {
		e.waitHead--
		e.waits[e.waitHead] = w
		return
	}
	e.waits = append(e.waits, nil)
	copy(e.waits[1:], e.waits)
	e.waits[0] = w
}

// takeWaits removes every waiting operation and returns them.
func (e *EP) takeWaits() []*waitOp {
	ws := append([]*waitOp(nil), e.waits[e.waitHead:]...)
	clear(e.waits)
	e.waits, e.waitHead = e.waits[:0], 0
	return ws
}
