package tcp

import (
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// txFrame is a frame queued for an EP's writer: buf holds the frame header
// and whatever was copied (the whole frame for short and bcopy operations),
// iov the caller's buffers of a zcopy operation.
type txFrame struct {
	buf   []byte
	iov   [][]byte
	size  int // bytes of the frame
	off   int // bytes of it written already
	comp  *uct.Completion
	reply bool    // an answer of the iface's target role, not an operation of the EP
	ack   bool    // a whole acknowledgement (reply): a newer one may take its place
	bye   bool    // a goodbye (reply): the last frame of its role (close.go)
	pin   *region // the region iov lies in, pinned until the frame is released (EP.reply)
}

// appendBuffers appends the bytes of f not written yet to bufs.
func (f *txFrame) appendBuffers(bufs [][]byte) [][]byte {
	skip := f.off
	add := func(b []byte) {
		if skip >= len(b) {
			skip -= len(b)
			return
		}
		bufs = append(bufs, b[skip:])
		skip = 0
	}
	add(f.buf)
	for _, b := range f.iov {
		add(b)
	}
	return bufs
}

var framePool = sync.Pool{New: func() any { return new(txFrame) }}

func newFrame(hdr int) *txFrame {
	f := framePool.Get().(*txFrame)
	f.buf = getBuf(hdr)
	f.size = hdr
	return f
}

// release gives f and its buffer back to their pools.
func (f *txFrame) release() {
	if f.pin != nil {
		f.pin.pins.Add(-1)
	}
	putBuf(f.buf)
	clear(f.iov)
	*f = txFrame{iov: f.iov[:0]}
	framePool.Put(f)
}

// EP is a tcp endpoint: an authenticated connection to a peer iface, and
// the one writer of its socket. An operation writes its frame to the
// socket itself, without blocking, when nothing else is being written;
// what the socket does not take at once is queued, and written by the next
// operation, or by the iface's Progress (or its poller) once the socket
// has room. The same readers read the peer's acknowledgements and replies
// (rx.go).
//
// A connection that two ifaces share (connmatch.go) carries both ways the
// frames of an EP and the answers of the iface's target role to the
// peer's EP: the EP is then also the writer of those answers (rx, reply),
// which go into the same queue at frame boundaries, ahead of the
// operations not yet started. An EP of this kind exists from the
// handshake on, also for an inbound connection that no EP of this iface
// took yet (untaken, state.go): its target role serves the peer meanwhile.
// See doc.go and close.go for how its two roles say goodbye.
//
// Its operations may be called from several goroutines. An EP created
// with EPParams.Unconnected has no connection until ConnectToEP (see
// epconn.go); until then its operations fail with ucs.ErrNotConnected.
type EP struct {
	iface  *Iface
	sock   *sock      // the connection's socket; nil until connected
	in     *inStream  // the stream of what the peer sends
	rx     *rxConn    // the target role: answers the peer's operations; nil on a one-way connection
	match  *matchConn // connection matching's record of the connection; nil for connect to EP
	peer   string
	issued atomic.Uint64 // frames posted
	acked  atomic.Uint64 // frames the peer acknowledged
	err    atomic.Int32  // the ucs.Status the EP failed with, or 0
	wrote  atomic.Uint64 // writes that took bytes (heartbeats, alive.go)
	shutAt atomic.Int64  // when this side shut its sending side down (UnixNano), or 0
	// batchListed: the EP is in its iface's list of EPs that hold a
	// batch (batch.go).
	batchListed atomic.Bool

	mu    sync.Mutex // guards the fields below
	q     []*txFrame
	front int // q[:front] are a frame started and replies: replies queue behind them
	// inflight is the number of frames at the head of q that a write has
	// in flight (writeQueueLocked): a reply queues behind them too.
	inflight int
	queued   int          // bytes of operations queued
	writing  bool         // an operation, a reply, Progress or the poller writes to the socket
	wbufs    [][]byte     // the buffers of a write; used by whoever set writing
	iov      []unix.Iovec // the same, as the kernel's vector
	ackReq   uint64       // frame count of the last acknowledgement request
	lastOp   uint64       // frame count of the last frame that is not an acknowledgement request
	// lastRemote is the frame count of the last frame that completes at
	// the peer (a put, get or atomic): a flush waits for the peer to
	// acknowledge it. An active message is complete once written, as in
	// UCX's tcp transport: a flush after active messages alone costs no
	// round trip.
	lastRemote uint64
	st         epState          // where the EP is in its life (state.go); it moves through to
	byeDue     uint8            // a goodbye that waits for the writer (close.go)
	abandoned  int              // replies still due to operations the EP dropped when it ended
	pending    uct.PendingGroup // in iface.pending; Room is hasRoom
	waits      []*waitOp        // gets and atomics waiting for their reply, in order (get.go)
	waitHead   int              // waits[:waitHead] were answered
	opID       uint64           // the id of the last get or fetching atomic

	// Batches of small frames (batch.go). batched: q holds only a batch,
	// no frame of it started, and nobody polls the socket for it.
	// lastWrite: the iface's progSeq+1 when the EP last wrote a frame at
	// once; 0 before it did.
	batched   bool
	lastWrite uint64

	// Connect to EP (epconn.go).
	id    uint64 // non-zero for an EP created unconnected
	bound bool   // a peer's connection named id; guarded by iface.mu
}

// EPCreate connects to the iface whose addresses params gives, within
// UCX_TCP_CONN_TIMEOUT: it takes the connection that the peer iface
// dialed to this one, when no EP of this iface sends on it yet, or else
// dials and authenticates one (connection matching, connmatch.go).
// Malformed addresses fail with ucs.ErrInvalidAddr; an iface that
// IsReachable says cannot be reached, one that does not answer, refuses
// the connection or fails the handshake (another job key, another iface at
// that port), with ucs.ErrUnreachable (and ucs.ErrRejected for a failed
// handshake).
//
// With params.Unconnected it creates an unconnected EP instead, for
// uct.EPConnector (see EP.ConnectToEP).
func (i *Iface) EPCreate(params *uct.EPParams) (uct.EP, error) {
	if params == nil {
		return nil, fmt.Errorf("uct/tcp: ep create: no parameters: %w", ucs.ErrInvalidAddr)
	}
	if params.Unconnected {
		return i.createUnconnected(params)
	}
	if err := i.reachable(params.DeviceAddr, params.IfaceAddr); err != nil {
		return nil, fmt.Errorf("uct/tcp: ep create: %w", err)
	}
	a, _ := decodeIfaceAddr(params.IfaceAddr)
	peer := a.tcpAddr().String()
	deadline := time.Now().Add(i.cfg.connTimeout)
	for try := 1; ; try++ {
		mc, err := i.match.connect(a.id, deadline, func(c *matchConn, oneWay bool) error {
			h := handshake{ifaceID: a.id, clientID: i.id, connID: c.id}
			if oneWay {
				h.flags = hsFlagOneWay
			}
			conn, err := i.dial(a, h)
			if err != nil {
				return err
			}
			e, err := i.openConn(conn, peer, !oneWay, c, false)
			if err != nil {
				return err
			}
			c.ep = e
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("uct/tcp: ep create: %w", err)
		}
		if e := mc.ep; e.claim(peer) {
			return e, nil
		}
		// The connection ended before the EP took it.
		if try == dialTries || time.Now().After(deadline) {
			return nil, fmt.Errorf("uct/tcp: ep create: the connection to %s ended at once: %w", peer, ucs.ErrUnreachable)
		}
	}
}

// openConn takes the authenticated connection c to or from the peer iface
// peer out of Go's poller and returns its EP, entered in the iface's
// poll set and not claimed yet: with the target role when rx is set, for
// connection matching's record mc (nil: none). When the iface closed
// meanwhile it fails; a connection accepted (inOrder: the iface's Close
// waits for its handshake) then hears the goodbye at once.
func (i *Iface) openConn(c *net.TCPConn, peer string, rx bool, mc *matchConn, inOrder bool) (*EP, error) {
	e := &EP{iface: i, peer: peer, match: mc, st: stateUntaken}
	if !rx {
		e.st.peer = peerBye // a one-way connection carries no operations of the peer's
	}
	e.pending.Room = e.hasRoom
	if err := e.open(c, rx); err != nil {
		return nil, fmt.Errorf("%w: %w", ucs.ErrIOError, err)
	}
	i.mu.Lock()
	closed := i.closed
	if closed && !inOrder {
		i.mu.Unlock()
		e.sock.close()
		return nil, fmt.Errorf("iface closed: %w", ucs.ErrCanceled)
	}
	i.conns[e] = struct{}{}
	i.pollAdd(e.in)
	i.mu.Unlock()
	if closed {
		// Close did not see it: the poller, which Close keeps until the
		// handshakes returned, ends it.
		e.closeInOrder(time.Now().Add(closeLinger))
		return nil, fmt.Errorf("iface closed: %w", ucs.ErrCanceled)
	}
	return e, nil
}

// claim makes the EP the caller's (EPCreate), whose log lines name the
// peer iface's address peer: false when its connection ended already.
func (e *EP) claim(peer string) bool {
	i := e.iface
	e.mu.Lock()
	if e.st.ops != opsUntaken { // the connection ended (which ends the role)
		e.mu.Unlock()
		return false
	}
	e.to(evClaim)
	e.peer = peer
	e.mu.Unlock()
	i.mu.Lock()
	i.eps[e] = struct{}{}
	i.mu.Unlock()
	return true
}

// open takes the EP's authenticated connection c out of Go's poller and
// prepares its stream: the kernel's keepalive, and the reader of what the
// peer sends: its replies, and its operations when rx is set (a shared
// connection). The caller enters the stream in the poll set.
func (e *EP) open(c *net.TCPConn, rx bool) error {
	e.iface.cfg.setLiveness(c)
	from := c.RemoteAddr()
	sk, err := detach(c)
	if err != nil {
		return err
	}
	e.sock = sk
	r := &epReader{e: e, heard: time.Now()}
	allowed, maxAM := serverToClient, 0
	if rx {
		e.rx = &rxConn{iface: e.iface, from: from, ep: e}
		if e.match != nil {
			e.rx.peerID = e.match.peer
		}
		allowed |= clientToServer
		maxAM = e.iface.cfg.rxSegSize
	}
	e.in = newInStream(e.iface, sk, r, allowed, maxAM, 64<<10, e.iface.cfg.checkEvery())
	e.in.tx = e
	if e.rx != nil {
		e.rx.in = e.in
	}
	return nil
}

// status returns the status the EP failed with, or OK.
func (e *EP) status() ucs.Status { return ucs.Status(e.err.Load()) }

// hasRoom reports whether an operation would be taken now (or fail with the
// EP's error). With the queue full it first writes what the socket takes:
// a caller that waits for room (a handler sending a reply, which cannot
// progress the iface) needs no Progress to get it.
func (e *EP) hasRoom() bool {
	e.mu.Lock()
	fails := e.st.fails()
	if !fails && e.queued >= e.iface.cfg.txQueueLen && !e.writing {
		e.writeQueueLocked()
		fails = e.st.fails()
	}
	room := fails || e.queued < e.iface.cfg.txQueueLen
	e.mu.Unlock()
	return room
}

// post sends f: it returns ucs.OK when the socket took the whole frame at
// once, and ucs.InProgress when (the rest of) f was queued. Unless force
// is set it fails with ucs.ErrNoResource when UCX_TCP_TX_QUEUE_LEN bytes
// are queued; it fails with the EP's error when the EP failed. f is
// released unless it was queued. seq is the frame's number (the issued
// count with it).
func (e *EP) post(f *txFrame, force bool) (st ucs.Status, seq uint64) {
	if tr := e.iface.tracer.Load(); tr != nil {
		return e.postTraced(tr, f, force)
	}
	return e.postOp(f, force, nil, 0)
}

// postOp is post without tracing; with w, a get or fetching atomic, it
// numbers w, writes its id at f.buf[idOff:] and records it as waiting for
// its reply, unless it fails (ucs.ErrNoResource, or the EP's error): then
// w is not recorded. A recorded w completes through its completion, also
// when the EP fails.
//
// It takes no lock of the stream: an asynchronous handler, which its
// reader calls, may post on the same connection.
func (e *EP) postOp(f *txFrame, force bool, w *waitOp, idOff int) (st ucs.Status, seq uint64) {
	e.mu.Lock()
	if e.st.fails() {
		e.mu.Unlock()
		f.release()
		return e.status(), 0
	}
	if !force && e.queued >= e.iface.cfg.txQueueLen && !e.writing {
		// Sends go out from the caller too: the socket may have room
		// that no Progress saw yet.
		e.writeQueueLocked()
		if e.st.fails() {
			e.mu.Unlock()
			f.release()
			return e.status(), 0
		}
	}
	if !force && e.queued >= e.iface.cfg.txQueueLen {
		e.mu.Unlock()
		f.release()
		return ucs.ErrNoResource, 0
	}
	seq = e.issued.Add(1)
	if f.buf[0] != frameFlush {
		e.lastOp = seq
		if f.buf[0] != frameAM {
			e.lastRemote = seq
		}
	}
	if w != nil {
		e.opID++
		w.id = e.opID
		binary.LittleEndian.PutUint64(f.buf[idOff:], w.id)
		e.waits = append(e.waits, w)
	}
	if e.writing || len(e.q) > 0 {
		join := e.batched && e.gathers(f)
		e.q = append(e.q, f)
		e.queued += f.size
		if !e.writing && !join {
			e.writeQueueLocked() // in order, behind what waits
		}
		e.mu.Unlock()
		return ucs.InProgress, seq
	}
	if e.gathers(f) {
		e.q = append(e.q, f)
		e.queued += f.size
		e.batched = true
		e.mu.Unlock()
		e.iface.startBatch(e)
		return ucs.InProgress, seq
	}
	e.writing = true
	e.lastWrite = e.iface.progSeq.Load() + 1
	e.mu.Unlock()

	e.wbufs = f.appendBuffers(e.wbufs[:0])
	n, err := e.sock.writev(e.wbufs, &e.iov)
	clear(e.wbufs)
	e.mu.Lock()
	e.writing = false
	if n > 0 {
		e.wrote.Add(1)
	}
	if err != nil {
		e.killLocked(ucs.ErrConnectionReset, err)
		e.mu.Unlock()
		f.release()
		if w != nil {
			return ucs.InProgress, seq // the failure completes it
		}
		return e.status(), 0
	}
	if n < f.size {
		if e.st.conn != connClosed {
			// The rest goes first, before what others queued
			// meanwhile; Progress writes it once the socket has room.
			f.off = n
			e.q = append(e.q, nil)
			copy(e.q[1:], e.q)
			e.q[0] = f
			e.front++
			e.queued += f.size - n
			e.in.interestTx(true)
			e.settleLocked()
			e.mu.Unlock()
			return ucs.InProgress, seq
		}
		// It broke meanwhile: the rest is dropped.
		if f.comp != nil {
			e.iface.pushComp(f.comp, e.status())
		}
		e.mu.Unlock()
		f.release()
		return ucs.InProgress, seq
	}
	e.writeQueueLocked() // others queued meanwhile, a goodbye due
	e.mu.Unlock()
	f.release()
	return ucs.OK, seq
}

// maxWriteIOV bounds the buffers of one writev (the kernel's IOV_MAX).
const maxWriteIOV = 1024

// flushTx writes what the EP's queue holds, as much as the socket takes,
// unless someone else is writing; Progress and the poller call it when
// the socket has room.
func (e *EP) flushTx() {
	e.mu.Lock()
	if !e.writing {
		e.writeQueueLocked()
	}
	e.mu.Unlock()
}

// writeQueueLocked writes the queue with one writev, while nobody else
// writes: the frames written whole leave it, the completions of
// operations are signalled from Progress; the socket is polled for room
// while frames remain. Then it settles what the write made due (a
// goodbye, shutting the sending side down). A write that fails breaks the
// connection (killLocked). e.mu is held (and released during the write);
// it takes no lock of the stream.
func (e *EP) writeQueueLocked() {
	e.batched = false
	if len(e.q) == 0 || e.st.conn == connClosed {
		e.settleLocked()
		return
	}
	e.writing = true
	bufs := e.wbufs[:0]
	nf := 0
	for _, f := range e.q {
		if nf > 0 && len(bufs)+1+len(f.iov) > maxWriteIOV {
			break
		}
		bufs = f.appendBuffers(bufs)
		nf++
	}
	e.inflight = nf
	e.mu.Unlock()
	n, err := e.sock.writev(bufs, &e.iov)
	clear(bufs)
	e.wbufs = bufs[:0]
	e.mu.Lock()
	e.writing, e.inflight = false, 0
	if n > 0 {
		e.wrote.Add(1)
	}
	if err != nil {
		e.killLocked(ucs.ErrConnectionReset, err) // completes the queued frames
		return
	}
	if e.st.conn == connClosed {
		// It broke while this write ran: the queue was left to this
		// writer.
		e.settleLocked()
		return
	}
	i := e.iface
	done := 0
	for done < len(e.q) && n > 0 {
		f := e.q[done]
		k := min(n, f.size-f.off)
		n -= k
		if !f.reply {
			e.queued -= k
		}
		if f.off += k; f.off < f.size {
			break
		}
		if f.comp != nil {
			i.pushCompQuiet(f.comp, ucs.OK)
		}
		f.release()
		done++
	}
	if done > 0 {
		m := copy(e.q, e.q[done:])
		clear(e.q[m:])
		e.q = e.q[:m]
		e.front = max(e.front-done, 0)
		i.markDirty(uct.EventSendComp) // completions, or room for pending requests
	}
	if len(e.q) > 0 && e.q[0].off > 0 {
		e.front = max(e.front, 1) // started: nothing goes before its rest
	}
	e.in.interestTx(len(e.q) > 0)
	e.settleLocked()
}

// reply sends a and then b (either may be empty), one frame of the
// iface's target role (rxConn.write), at the next frame boundary: now,
// when nothing is queued or being written, otherwise queued behind the
// frame started and the replies queued, ahead of operations not started
// yet. What is queued is copied, but for the data of a get reply: hold,
// when not nil, is the region b lies in, read-locked (it is unlocked
// before reply returns), and the queued frame pins it instead, so that
// MemDereg waits until it was written, and no reader waits for it. An
// acknowledgement queued last and not started yet takes the count of a
// newer one. The caller, the stream's reader, holds the stream's lock:
// a write that fails is returned (the stream ends, and with it the EP),
// not acted on here. Nothing is sent after this side's goodbye.
func (e *EP) reply(hold *region, a, b []byte) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if hold != nil {
		defer hold.mu.RUnlock()
	}
	if e.st.conn == connClosed || e.st.rxDone() {
		return nil
	}
	if !e.writing && len(e.q) == 0 {
		e.writing = true
		e.mu.Unlock()
		bufs := append(e.wbufs[:0], a, b)
		n, err := e.sock.writev(bufs, &e.iov)
		clear(bufs)
		e.wbufs = bufs[:0]
		e.mu.Lock()
		e.writing = false
		if n > 0 {
			e.wrote.Add(1)
		}
		if err != nil {
			return err
		}
		if n < len(a)+len(b) && e.st.conn != connClosed {
			k := min(n, len(a))
			f := replyFrame(hold, a[k:], b[n-k:])
			e.q = append(e.q, nil)
			copy(e.q[1:], e.q)
			e.q[0] = f
			e.front++
			e.in.interestTx(true)
		}
		e.writeQueueLocked() // others queued meanwhile, a goodbye due
		return nil
	}
	if !e.writing && e.front > 0 && len(b) == 0 && a[0] == frameAck {
		if last := e.q[e.front-1]; last.ack && last.off == 0 {
			copy(last.buf, a)
			return nil
		}
	}
	f := replyFrame(hold, a, b)
	f.ack = len(b) == 0 && a[0] == frameAck
	// Behind the frame started and the replies, and behind the frames a
	// write has in flight.
	pos := max(e.front, e.inflight)
	e.q = append(e.q, nil)
	copy(e.q[pos+1:], e.q[pos:])
	e.q[pos] = f
	e.front = pos + 1
	if !e.writing {
		e.writeQueueLocked()
	}
	return nil
}

// replyFrame returns a reply frame holding a copy of a and b; or of a
// only, when b lies in the region hold (read-locked): b is then sent from
// the region, which the frame pins.
func replyFrame(hold *region, a, b []byte) *txFrame {
	if hold != nil && len(b) > 0 {
		f := newFrame(len(a))
		copy(f.buf, a)
		f.iov = append(f.iov, b)
		f.size += len(b)
		f.pin = hold
		hold.pins.Add(1)
		f.reply = true
		return f
	}
	f := newFrame(len(a) + len(b))
	copy(f.buf, a)
	copy(f.buf[len(a):], b)
	f.reply = true
	return f
}

// acknowledged records the peer's acknowledgement of the first n frames.
func (e *EP) acknowledged(n uint64) error {
	if old := e.acked.Load(); n < old || n > e.issued.Load() {
		return fmt.Errorf("acknowledgement of %d frames after %d, of %d sent: %w",
			n, old, e.issued.Load(), ucs.ErrInvalidParam)
	}
	e.acked.Store(n)
	if e.iface.nflush.Load() > 0 {
		e.iface.markDirty(uct.EventSendComp)
	} else if w := e.iface.worker; w != nil {
		// Someone may wait for the acknowledgement by asking Flush
		// again (a flush without a completion).
		w.Signal(uct.EventSendComp)
	}
	return nil
}

// fail breaks the EP's connection because of cause: the EP moves to
// status st (once), and the connection closes at once; see killLocked.
func (e *EP) fail(st ucs.Status, cause error) {
	e.mu.Lock()
	e.killLocked(st, cause)
	e.mu.Unlock()
}

// remoteRange checks a put of n bytes at raddr against the unpacked key
// rkey and returns the key.
func remoteRange(rkey, raddr uint64, n int) (mkey, ucs.Status) {
	k, ok := lookupRkey(rkey)
	if !ok || !k.contains(raddr, uint64(n)) {
		return mkey{}, ucs.ErrInvalidParam
	}
	return k, ucs.OK
}

// newPut returns a put frame for n data bytes at raddr, with room for
// extra bytes copied after the headers.
func newPut(k *mkey, raddr uint64, n, extra int) *txFrame {
	const h = frameHeaderLen + putHeaderLen
	f := newFrame(h + extra)
	putFrameHeader(f.buf, framePut, 0, putHeaderLen+n)
	p := putHeader{key: k.id, token: k.token, raddr: raddr}
	p.encode(f.buf[frameHeaderLen:])
	return f
}

// PutShort writes buf (at most Put.MaxShort bytes) to raddr; buf is copied
// and may be reused on return.
func (e *EP) PutShort(buf []byte, raddr uint64, rkey uint64) ucs.Status {
	if len(buf) > maxShort {
		return ucs.ErrInvalidParam
	}
	k, st := remoteRange(rkey, raddr, len(buf))
	if st != ucs.OK {
		return st
	}
	f := newPut(&k, raddr, len(buf), len(buf))
	copy(f.buf[frameHeaderLen+putHeaderLen:], buf)
	return sent(e.post(f, false))
}

// sent is the status of a copied operation: complete once posted.
func sent(st ucs.Status, _ uint64) ucs.Status {
	if st == ucs.InProgress {
		return ucs.OK
	}
	return st
}

// PutBcopy lets pack write up to Put.MaxBcopy bytes into a buffer of the EP
// and writes them to raddr, which must have room for Put.MaxBcopy bytes
// under the key. It fails with ucs.ErrNoResource, without calling pack,
// when the EP's queue is full.
func (e *EP) PutBcopy(pack uct.PackFunc, raddr uint64, rkey uint64) (int, ucs.Status) {
	if !e.hasRoom() {
		return 0, ucs.ErrNoResource
	}
	k, ok := lookupRkey(rkey)
	if !ok {
		return 0, ucs.ErrInvalidParam
	}
	seg := e.iface.cfg.segSize
	f := newPut(&k, raddr, 0, seg)
	n := pack(f.buf[frameHeaderLen+putHeaderLen:])
	if n < 0 || n > seg || !k.contains(raddr, uint64(n)) {
		f.release()
		return 0, ucs.ErrInvalidParam
	}
	putFrameHeader(f.buf, framePut, 0, putHeaderLen+n)
	f.buf = f.buf[:frameHeaderLen+putHeaderLen+n]
	f.size = len(f.buf)
	if st := sent(e.post(f, true)); st != ucs.OK {
		return 0, st
	}
	return n, ucs.OK
}

// PutZcopy writes the iov, in order, to consecutive bytes from raddr (at
// most Put.MaxZcopy bytes in all) without copying them: it returns
// ucs.InProgress, and comp (when not nil) is signalled from Progress once
// the data was written to the socket. Flush tells when it reached the
// target's memory.
func (e *EP) PutZcopy(iov []uct.IOV, raddr uint64, rkey uint64, comp *uct.Completion) ucs.Status {
	n := 0
	for k := range iov {
		n += len(iov[k].Buffer)
	}
	if len(iov) > maxIOV || n > maxPutLen {
		return ucs.ErrInvalidParam
	}
	k, st := remoteRange(rkey, raddr, n)
	if st != ucs.OK {
		return st
	}
	f := newPut(&k, raddr, n, 0)
	return e.postZcopy(f, iov, n, comp)
}

// postZcopy adds the iov to f and posts it.
func (e *EP) postZcopy(f *txFrame, iov []uct.IOV, n int, comp *uct.Completion) ucs.Status {
	for k := range iov {
		if len(iov[k].Buffer) > 0 {
			f.iov = append(f.iov, iov[k].Buffer)
		}
	}
	f.size += n
	f.comp = comp
	st, _ := e.post(f, false)
	return st
}

// AMShort sends the header and payload (8+len(payload) <= AM.MaxShort,
// ucs.ErrInvalidParam otherwise) to handler id of the peer; the payload is
// copied.
func (e *EP) AMShort(id uint8, header uint64, payload []byte) ucs.Status {
	n := 8 + len(payload)
	if id >= uct.AMMaxID || n > maxShort || n > e.iface.cfg.rxSegSize {
		return ucs.ErrInvalidParam
	}
	f := newFrame(frameHeaderLen + n)
	putFrameHeader(f.buf, frameAM, id, n)
	binary.LittleEndian.PutUint64(f.buf[frameHeaderLen:], header)
	copy(f.buf[frameHeaderLen+8:], payload)
	return sent(e.post(f, false))
}

// AMBcopy lets pack write up to AM.MaxBcopy bytes into a buffer of the EP
// and sends them to handler id. It fails with ucs.ErrNoResource, without
// calling pack, when the EP's queue is full.
func (e *EP) AMBcopy(id uint8, pack uct.PackFunc, flags uint32) (int, ucs.Status) {
	if id >= uct.AMMaxID {
		return 0, ucs.ErrInvalidParam
	}
	if !e.hasRoom() {
		return 0, ucs.ErrNoResource
	}
	seg := e.iface.cfg.segSize
	f := newFrame(frameHeaderLen + seg)
	n := pack(f.buf[frameHeaderLen:])
	if n < 0 || n > seg {
		e.iface.tracer.Trace(uct.AMTraceSendDrop, id, nil)
		f.release()
		return 0, ucs.ErrInvalidParam
	}
	putFrameHeader(f.buf, frameAM, id, n)
	putAMFlags(f.buf, flags)
	f.buf = f.buf[:frameHeaderLen+n]
	f.size = len(f.buf)
	if st := sent(e.post(f, true)); st != ucs.OK {
		return 0, st
	}
	return n, ucs.OK
}

// AMZcopy sends the header (copied) and the iov (not copied; at most
// AM.MaxZcopy bytes with the header) to handler id. It returns
// ucs.InProgress, and comp (when not nil) is signalled from Progress once
// the data was written to the socket.
func (e *EP) AMZcopy(id uint8, header []byte, iov []uct.IOV, flags uint32, comp *uct.Completion) ucs.Status {
	n := len(header)
	for k := range iov {
		n += len(iov[k].Buffer)
	}
	if id >= uct.AMMaxID || len(iov) > maxIOV || len(header) > e.iface.cfg.segSize || n > e.iface.cfg.rxSegSize {
		return ucs.ErrInvalidParam
	}
	f := newFrame(frameHeaderLen + len(header))
	putFrameHeader(f.buf, frameAM, id, n)
	putAMFlags(f.buf, flags)
	copy(f.buf[frameHeaderLen:], header)
	return e.postZcopy(f, iov, n-len(header), comp)
}

// Flush returns OK when the peer acknowledged every frame issued on the EP
// before it (puts are then in the target's memory; also after the peer
// closed in order), and the EP's error when it failed. Otherwise it returns ucs.InProgress, and comp (when not nil)
// is signalled from Progress once they are, or with the error if the EP
// fails first. FlushFlagCancel is not distinguished: queued frames are
// still sent.
func (e *EP) Flush(flags uct.FlushFlags, comp *uct.Completion) ucs.Status {
	target, st := e.flushTarget()
	if st != ucs.InProgress {
		return st
	}
	if comp != nil {
		w := e.iface.newFlush()
		w.targets, w.comp = append(w.targets, flushTarget{e, target}), comp
		e.iface.addFlush(w)
	}
	return ucs.InProgress
}

// flushTarget returns OK when every frame posted was acknowledged, or
// written whole when it is an active message, the EP's error when it
// failed, and otherwise InProgress with the frame count to wait for: that
// of an acknowledgement request, which it posts unless one was posted
// after the last frame.
func (e *EP) flushTarget() (uint64, ucs.Status) {
	if st := e.status(); st.IsErr() {
		e.mu.Lock()
		quiet := e.st.ops == opsPeerClosed
		e.mu.Unlock()
		if quiet && e.acked.Load() >= e.issued.Load() {
			return 0, ucs.OK // the peer closed in order after processing everything
		}
		return 0, st
	}
	if e.acked.Load() >= e.issued.Load() {
		return 0, ucs.OK
	}
	e.mu.Lock()
	if e.batched && !e.writing {
		e.writeQueueLocked() // what a flush waits for goes out now
	}
	if e.queued == 0 && !e.writing && e.acked.Load() >= e.lastRemote {
		e.mu.Unlock()
		return 0, ucs.OK // active messages since, all written
	}
	if req := e.ackReq; req == e.issued.Load() {
		e.mu.Unlock()
		return req, ucs.InProgress
	}
	e.mu.Unlock()
	f := newFrame(frameHeaderLen)
	putFrameHeader(f.buf, frameFlush, 0, 0)
	st, seq := e.post(f, true)
	if st.IsErr() {
		return 0, st
	}
	e.mu.Lock()
	e.ackReq = max(e.ackReq, seq)
	e.mu.Unlock()
	return seq, ucs.InProgress
}

// Fence returns OK: the frames of an EP are applied in order.
func (e *EP) Fence(uint32) ucs.Status { return ucs.OK }

// PendingAdd returns ucs.ErrBusy when the EP would take an operation now
// (or has failed: the operation then reports the error); otherwise it
// queues r, to be called from the iface's Progress, in order, once the
// EP's queue drained below UCX_TCP_TX_QUEUE_LEN, until it posts (any result but
// ucs.ErrNoResource).
func (e *EP) PendingAdd(r *uct.PendingReq, flags uint32) ucs.Status {
	if e.hasRoom() {
		return ucs.ErrBusy
	}
	i := e.iface
	i.pending.Add(&e.pending, r)
	// The queue may have drained before r was visible to Progress.
	if e.hasRoom() {
		i.markDirty(uct.EventSendComp)
	}
	return ucs.OK
}

// PendingPurge removes every request queued on the EP, calling cb (when not
// nil) on each.
func (e *EP) PendingPurge(cb func(r *uct.PendingReq)) {
	e.iface.pending.PurgeEach(&e.pending, cb)
}

// Destroy ends the EP (see close.go): frames not yet written are dropped,
// and the completions of their zcopy operations signalled with
// ucs.ErrCanceled (a frame written in part is finished from a copy);
// pending requests are dropped. It says goodbye to the peer: on a
// connection of its own that then closes, on a shared one the iface's
// target role goes on answering the peer's EP until that says goodbye
// too. Flush first to have every operation complete. The EP must not be
// used afterwards.
func (e *EP) Destroy() {
	e.PendingPurge(nil)
	e.mu.Lock()
	e.endTxLocked(ucs.ErrCanceled, nil)
	if e.st.hasSocket() {
		e.sayGoodbyeLocked(byeEP)
	}
	e.mu.Unlock()
	i := e.iface
	i.mu.Lock()
	delete(i.eps, e)
	if e.id != 0 && i.epIDs[e.id] == e {
		delete(i.epIDs, e.id)
	}
	i.mu.Unlock()
	i.markDirty(uct.EventAll)
}
