package tcp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Reading a connection.
//
// Each connection has an inStream that reads its frames without blocking
// and hands them to a frameHandler: the iface's target role on a one-way
// connection it accepted (rxConn: active messages, puts, gets, atomics,
// flush requests), or the EP's reader on every other (epReader:
// acknowledgements, get and atomic replies, and on a shared connection
// the peer's operations too, which it hands to the target role). No goroutine waits for a connection: its socket left Go's
// network poller (sock.go), and two readers share it, one at a time under
// inStream.mu:
//
//   - Iface.Progress, which asks the iface's epoll set, without waiting,
//     which sockets are ready and reads them itself (poll.go): a goroutine
//     that spins on Progress sees a reply as soon as it came, and nothing
//     else is woken for it;
//   - the iface's poller goroutine (poller.go), which reads them only when
//     Progress has not run for UCX_TCP_PASSIVE_DELAY: a process that
//     computes without calling the library still has its gets and atomics
//     answered and its puts applied and acknowledged.
//
// The set is level-triggered, so a reader may stop after a short read:
// what is left is reported again. The poller also ticks every stream
// (heartbeats and liveness checks, alive.go) and ends those that linger
// after a goodbye (close.go).
//
// A stream is open while it reads frames. A one-way accepted connection's
// stream writes its replies (acknowledgements, get and atomic replies)
// itself, without waiting: what the socket does not take waits in out,
// and the stream reads nothing more until it is written (the client,
// which reads whatever it sends and writes nothing else on it, then sees
// its sends back up). On every other connection the EP writes the target
// role's replies (EP.reply): they are queued when they cannot be written,
// and the stream reads on, as it must where both sides write large frames
// on one socket. A stream whose next
// frame is an active message that the iface's receive queue has no room
// for leaves the poll set (it is parked) until Progress makes room. After
// a goodbye (close.go) a stream drains: it drops what still comes until
// the peer closes its side, or the linger ends. Ended, it left the poll
// set and its socket is closed, and its handler was told why.

// frameHandler applies the frames an inStream reads.
type frameHandler interface {
	// begin takes a frame's header and the fixed part of its body
	// (fixedLen bytes) and returns the buffers, in order, that the rest of
	// the body is read into; none means it is read and dropped. errRxFull
	// leaves the frame unread until the receive queue has room.
	begin(h frameHeader, fixed []byte) ([][]byte, error)
	// end completes the frame begun last, once its body is in. progress
	// says whether Iface.Progress reads.
	end(progress bool) error
	// abort gives up the frame begun last, which will not end.
	abort(err error)
	// caughtUp is called when every frame read so far was applied (the
	// socket may have more).
	caughtUp(progress bool) error
	// tick is called by the poller every tick of the stream with the
	// number of reads that returned bytes so far; it may write (through
	// the stream's send). An error ends the stream.
	tick(reads uint64) error
	// ended is called once, without the stream's lock, when the stream
	// ended: with io.EOF when the peer closed between frames, errGoodbye
	// after this side's goodbye, otherwise why.
	ended(err error)
}

// fixedLen returns the length of the fixed part of the body of a frame of
// type typ, which the stream reads before calling begin.
func fixedLen(typ uint8) int {
	switch typ {
	case framePut:
		return putHeaderLen
	case frameAck, frameIfaceClose:
		return ackBodyLen
	case frameGet:
		return getHeaderLen
	case frameGetRep:
		return getRepHeaderLen
	case frameAtomic:
		return atomicHeaderLen
	case frameAtomicRep:
		return atomicRepLen
	}
	return 0
}

// directRead is the smallest rest of a body read straight into its
// buffers rather than through the stream's buffer.
const directRead = 4 << 10

// Stream states.
const (
	streamOpen     = iota // reading frames
	streamClosing         // its goodbye waits in out: nothing is read
	streamDraining        // goodbye sent: what comes is dropped until the peer closes
	streamDone            // ended
)

// errRxFull is what begin returns for an active message that the receive
// queue has no room for.
var errRxFull = errors.New("receive queue full")

// errGoodbye is how a stream ends that said goodbye and then saw the peer
// close, or the linger end.
var errGoodbye = errors.New("closed after a goodbye")

// inStream reads the frames of one connection; see the top of the file.
type inStream struct {
	iface   *Iface
	sock    *sock
	h       frameHandler
	tx      *EP    // the EP whose frames the socket also sends, if any (ep.go)
	allowed uint32 // frame types accepted, 1<<type
	maxAM   int    // the longest active message accepted
	every   time.Duration
	id      int32 // key in the iface's poll table; guarded by the poll set's mu

	evMu    sync.Mutex // guards the registration
	wantIn  bool       // read side: poll for readable
	wantOut bool       // read side: poll for writable (out waits)
	wantTx  bool       // the EP's queue waits (ep.go)
	events  uint32     // what the socket is registered for; 0: not in the set
	gone    bool       // ended: never registered again
	// readOnly is set while the socket is registered for reading alone
	// (pollStreams may then read it without asking the set).
	readOnly atomic.Bool

	mu       sync.Mutex // one reader at a time; guards the fields below
	state    int
	buf      []byte
	r, w     int  // buf[r:w] is read and not consumed yet
	inFrame  bool // begin was called, end not yet
	dst      [][]byte
	left     int       // body bytes of the frame still to read
	fd       int       // the socket, while a reader holds mu and a reference
	drained  bool      // the last read into buf was short: the socket had no more
	full     bool      // begin refused the next frame: no room in the receive queue
	frames   int       // frames ended by the current reader
	reads    uint64    // reads that returned bytes
	err      error     // why the stream ended
	nextTick time.Time // when the poller ticks it next
	deadline time.Time // closing and draining: when it ends anyway
	out      [][]byte  // bytes that wait to be written, before anything else
	outHold  *region   // read-locked until out is written (a get reply's data)
	two      [2][]byte // send's vector
	iov      []unix.Iovec
}

// newInStream returns an open stream reading sk for h, with a buffer of
// bufLen bytes, which the poller ticks every every (0: never).
func newInStream(i *Iface, sk *sock, h frameHandler, allowed uint32, maxAM, bufLen int, every time.Duration) *inStream {
	s := &inStream{iface: i, sock: sk, h: h, allowed: allowed, maxAM: maxAM, buf: make([]byte, bufLen), every: every, fd: -1, wantIn: true}
	if every > 0 {
		s.nextTick = time.Now().Add(every)
	}
	return s
}

// poll serves the stream: it writes what waits in out, and reads and
// applies frames (or drains) until the socket has nothing more, output
// waits or the stream ends. Another reader at it, it does nothing. It
// returns the number of frames it ended.
func (s *inStream) poll(progress bool) int {
	if !s.mu.TryLock() {
		return 0
	}
	n, ended := s.serveLocked(progress)
	err := s.err
	s.mu.Unlock()
	if ended {
		s.ended(err, false)
	}
	return n
}

// serveLocked is poll with s.mu held; it reports whether the stream ended
// now, for the caller to tell the handler once the lock is released.
func (s *inStream) serveLocked(progress bool) (int, bool) {
	if s.state == streamDone {
		return 0, false
	}
	if !s.sock.acquire() {
		s.fail(net.ErrClosed)
		return 0, s.finish()
	}
	s.fd = s.sock.fd
	s.frames = 0
	if len(s.out) > 0 {
		s.flushOut()
	}
	if s.err == nil && len(s.out) == 0 {
		switch s.state {
		case streamOpen:
			s.pump(progress)
		case streamDraining:
			s.drain()
		}
	}
	s.fd = -1
	s.sock.release()
	if s.sock.closing() {
		s.fail(net.ErrClosed) // its EP broke the connection (EP.killLocked)
	}
	if s.err != nil {
		return s.frames, s.finish()
	}
	if s.full {
		s.full = false
		s.iface.park(s)
	}
	return s.frames, false
}

// pump reads and applies frames until the socket has nothing more, the
// stream ends (s.err), output waits, or the next frame must wait for room
// in the receive queue (s.full); s.mu is held.
func (s *inStream) pump(progress bool) {
	s.drained = false
	for s.err == nil && len(s.out) == 0 {
		if !s.inFrame {
			if s.drained && s.r == s.w {
				// The set is level-triggered: a short read means the
				// socket had no more, and what comes later is reported.
				return
			}
			if !s.beginFrame() {
				return
			}
		}
		for s.left > 0 {
			if !s.readBody() {
				return
			}
		}
		if err := s.h.end(progress); err != nil {
			s.fail(err)
			return
		}
		s.inFrame = false
		s.frames++
		if s.r == s.w {
			// Acknowledge now rather than after one more read finds
			// nothing: a flush waits for it.
			if err := s.h.caughtUp(progress); err != nil {
				s.fail(err)
			}
		}
	}
}

// beginFrame reads and decodes the next frame's header and fixed part and
// calls begin; it returns false when they are not all there yet, the
// frame must wait for room, or the stream ended.
func (s *inStream) beginFrame() bool {
	for s.w-s.r < frameHeaderLen {
		if !s.fill(frameHeaderLen) {
			return false
		}
	}
	h, err := decodeFrameHeader(s.buf[s.r:s.r+frameHeaderLen], s.allowed, s.maxAM)
	if err != nil {
		s.fail(err)
		return false
	}
	need := frameHeaderLen + fixedLen(h.typ)
	for s.w-s.r < need {
		if !s.fill(need) {
			return false
		}
	}
	dst, err := s.h.begin(h, s.buf[s.r+frameHeaderLen:s.r+need])
	if err == errRxFull {
		s.full = true // the frame stays in the buffer
		return false
	}
	s.r += need
	s.inFrame = true
	s.dst, s.left = dst, int(h.len)-(need-frameHeaderLen)
	if err != nil {
		s.fail(err)
		return false
	}
	return true
}

// readBody moves body bytes into the frame's buffers: those buffered, or
// else what one read gives. It returns false when there was nothing to
// read or the stream ended.
func (s *inStream) readBody() bool {
	if s.r < s.w {
		n := min(s.w-s.r, s.left)
		s.consume(s.buf[s.r : s.r+n])
		s.r += n
		return true
	}
	if s.left < directRead || len(s.dst) == 0 {
		return s.fill(1)
	}
	n, err := readvNB(s.fd, s.dst, &s.iov)
	if !s.readDone(n, err) {
		return false
	}
	s.drained = false
	s.advance(n)
	return true
}

// consume copies b, the next body bytes, into the frame's buffers (or
// drops them).
func (s *inStream) consume(b []byte) {
	s.left -= len(b)
	for len(b) > 0 && len(s.dst) > 0 {
		n := copy(s.dst[0], b)
		b = b[n:]
		s.dst[0] = s.dst[0][n:]
		if len(s.dst[0]) == 0 {
			s.dst = s.dst[1:]
		}
	}
}

// advance moves past n body bytes read straight into the buffers.
func (s *inStream) advance(n int) {
	s.left -= n
	for n > 0 {
		k := min(n, len(s.dst[0]))
		n -= k
		s.dst[0] = s.dst[0][k:]
		if len(s.dst[0]) == 0 {
			s.dst = s.dst[1:]
		}
	}
}

// fill reads into the buffer, which it first compacts, so that it holds
// at least need unconsumed bytes if the socket has them; it returns false
// when the socket had nothing or the stream ended.
func (s *inStream) fill(need int) bool {
	if s.r == s.w {
		s.r, s.w = 0, 0
	} else if len(s.buf)-s.r < need {
		s.w = copy(s.buf, s.buf[s.r:s.w])
		s.r = 0
	}
	n, err := readNB(s.fd, s.buf[s.w:])
	if !s.readDone(n, err) {
		return false
	}
	s.drained = s.w+n < len(s.buf)
	s.w += n
	return true
}

// readDone checks the result of a read: false when it read nothing
// (EAGAIN) or the stream ended, which it records.
func (s *inStream) readDone(n int, err error) bool {
	switch {
	case err == unix.EAGAIN:
		return false
	case err != nil:
		s.fail(os.NewSyscallError("read", err))
		return false
	case n == 0 && (s.inFrame || s.r < s.w):
		s.fail(fmt.Errorf("read: %w", io.ErrUnexpectedEOF))
		return false
	case n == 0:
		s.fail(io.EOF)
		return false
	}
	s.reads++
	return true
}

// drain drops what the socket has, and ends the stream once the peer
// closed its side; s.mu is held.
func (s *inStream) drain() {
	for {
		n, err := readNB(s.fd, s.buf)
		switch {
		case err == unix.EAGAIN:
			return
		case err != nil || n == 0:
			s.fail(errGoodbye)
			return
		}
	}
}

// fail ends the stream with err (once); s.mu is held.
func (s *inStream) fail(err error) {
	if s.err == nil {
		s.err = err
	}
}

// finish ends the stream: the frame being read is aborted, what waits to
// be written dropped, and the stream leaves the poll set. It returns true
// the first time, when the caller must call ended once it released s.mu;
// s.mu is held.
func (s *inStream) finish() bool {
	if s.state == streamDone {
		return false
	}
	s.state = streamDone
	if s.err == nil {
		s.err = net.ErrClosed
	}
	if s.inFrame {
		s.inFrame = false
		s.h.abort(s.err)
	}
	s.dropOut()
	s.iface.pollRemove(s)
	return true
}

// ended tells the handler (unless quiet) that the stream ended with err,
// and then closes its socket: a peer that sees the connection close
// finds what the handler did about it done (its log line written).
func (s *inStream) ended(err error, quiet bool) {
	if !quiet {
		s.h.ended(err)
	}
	s.sock.close()
}

// send writes a and then b (either may be empty) now, as much as the
// socket takes, and leaves the rest in out, to be written before the
// stream reads anything more. hold, when not nil, is the region b lies
// in, read-locked: it is unlocked once b is written. s.mu is held and
// s.fd valid; the buffers must stay unchanged until out is written.
func (s *inStream) send(hold *region, a, b []byte) error {
	if len(s.out) == 0 {
		var n int
		var err error
		if len(b) == 0 {
			n, err = writeNB(s.fd, a)
		} else {
			s.two[0], s.two[1] = a, b
			n, err = writevNB(s.fd, s.two[:], &s.iov)
			s.two = [2][]byte{}
		}
		if n, err = wrote(n, err); err != nil {
			if hold != nil {
				hold.mu.RUnlock()
			}
			return fmt.Errorf("write: %w", err)
		}
		if n == len(a)+len(b) {
			if hold != nil {
				hold.mu.RUnlock()
			}
			return nil
		}
		k := min(n, len(a))
		a, b = a[k:], b[n-k:]
	}
	for _, p := range [...][]byte{a, b} {
		if len(p) > 0 {
			s.out = append(s.out, p)
		}
	}
	if hold != nil {
		s.outHold = hold
	}
	s.interest(false, true)
	return nil
}

// flushOut writes what waits in out, as much as the socket takes; once
// all is written, a closing stream shuts its sending side down and
// drains, an open one reads again. s.mu is held and s.fd valid.
func (s *inStream) flushOut() {
	n, err := writevNB(s.fd, s.out, &s.iov)
	if n, err = wrote(n, err); err != nil {
		s.fail(fmt.Errorf("write: %w", err))
		return
	}
	for n > 0 {
		k := min(n, len(s.out[0]))
		n -= k
		if s.out[0] = s.out[0][k:]; len(s.out[0]) == 0 {
			s.out[0] = nil
			s.out = s.out[1:]
		}
	}
	if len(s.out) > 0 {
		return
	}
	s.dropOut()
	switch s.state {
	case streamClosing:
		unix.Shutdown(s.fd, unix.SHUT_WR)
		s.state = streamDraining
		s.interest(true, false)
	case streamOpen:
		s.interest(true, false)
		if s.r == s.w && !s.inFrame {
			// An acknowledgement may have waited for the reply.
			if err := s.h.caughtUp(false); err != nil {
				s.fail(err)
			}
		}
	}
}

// dropOut forgets out and unlocks the region it held.
func (s *inStream) dropOut() {
	clear(s.out)
	s.out = s.out[:0]
	if s.outHold != nil {
		s.outHold.mu.RUnlock()
		s.outHold = nil
	}
}

// interest sets what the reading side polls the socket for.
func (s *inStream) interest(in, out bool) {
	s.evMu.Lock()
	s.wantIn, s.wantOut = in, out
	s.register()
	s.evMu.Unlock()
}

// interestTx sets whether the socket is polled for room for the EP's
// queue (ep.go).
func (s *inStream) interestTx(tx bool) {
	s.evMu.Lock()
	s.wantTx = tx
	s.register()
	s.evMu.Unlock()
}

// register brings the socket's registration in the iface's epoll set in
// line with what is wanted: it adds, changes or removes it; s.evMu is
// held.
func (s *inStream) register() {
	var ev uint32
	if s.wantIn {
		ev |= unix.EPOLLIN | unix.EPOLLRDHUP
	}
	if s.wantOut || s.wantTx {
		ev |= unix.EPOLLOUT
	}
	if s.gone || ev == s.events || s.id == 0 {
		return
	}
	op := unix.EPOLL_CTL_MOD
	switch {
	case s.events == 0:
		op = unix.EPOLL_CTL_ADD
	case ev == 0:
		op = unix.EPOLL_CTL_DEL
	}
	if err := s.sock.ctl(s.iface.poll.fd, op, ev, s.id); err == nil {
		s.events = ev
		s.readOnly.Store(ev == unix.EPOLLIN|unix.EPOLLRDHUP)
	}
}
