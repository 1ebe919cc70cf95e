package tcp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Reading a connection.
//
// Each connection has an inStream that reads its frames without blocking
// and hands them to a frameHandler: the iface's side of an accepted
// connection (rxConn: active messages, puts, gets, flush requests) or the
// EP's side of its own (acknowledgements, get replies). Two readers share
// it, one at a time under inStream.mu:
//
//   - its goroutine, which waits through Go's network poller for the
//     socket to become readable and reads what came (passive progress: the
//     process need not call anything);
//   - Iface.Progress, which asks the iface's epoll set, without waiting,
//     which sockets are readable and reads them itself (poll.go). A
//     goroutine that spins on Progress thus sees a reply at once instead of
//     when the scheduler gets around to the reading goroutine, which on a
//     busy machine took a hundred microseconds.
//
// The goroutine reads until the socket has nothing more (EAGAIN), as a
// waiter woken by edges must, so a byte that arrives is read by it unless
// Progress took it first; Progress may stop after a short read, as its
// level-triggered set reports what is left. The goroutine alone ends the
// stream: a reader that finds an error or the end records it, and the
// goroutine returns it (Progress wakes it through a read deadline in the
// past). The goroutine also wakes every tick to let the handler check
// its peer's liveness (see alive.go), and returns errKicked when the
// stream's owner kicks it to close the connection in order (close.go).

// frameHandler applies the frames an inStream reads.
type frameHandler interface {
	// begin takes a frame's header and the fixed part of its body
	// (fixedLen bytes) and returns the buffers, in order, that the rest of
	// the body is read into; none means it is read and dropped.
	begin(h frameHeader, fixed []byte) ([][]byte, error)
	// end completes the frame begun last, once its body is in. progress
	// says whether Iface.Progress reads; then it must not wait.
	end(progress bool) error
	// abort gives up the frame begun last, which will not end.
	abort(err error)
	// caughtUp is called when every frame read so far was applied (the
	// socket may have more).
	caughtUp() error
	// tick is called by the goroutine every tick of the stream, after it
	// read what there was, with the number of reads that returned bytes
	// so far; it may write (the socket is the stream's fd). An error ends
	// the stream.
	tick(reads uint64) error
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
	}
	return 0
}

// directRead is the smallest rest of a body read straight into its
// buffers rather than through the stream's buffer.
const directRead = 4 << 10

// inStream reads the frames of one connection; see the top of the file.
type inStream struct {
	iface   *Iface
	conn    *net.TCPConn
	raw     syscall.RawConn
	h       frameHandler
	allowed uint32 // frame types accepted, 1<<type
	maxAM   int    // the longest active message accepted
	pollID  int32  // key in the iface's poll table (poll.go)
	readFn  func(fd uintptr) bool
	pollFn  func(fd uintptr)
	tickFn  func(fd uintptr)
	every   time.Duration // the tick; 0: none
	kicked  atomic.Bool   // the owner asked the goroutine to stop

	mu      sync.Mutex // one reader at a time; guards the fields below
	buf     []byte
	r, w    int  // buf[r:w] is read and not consumed yet
	inFrame bool // begin was called, end not yet
	dst     [][]byte
	left    int    // body bytes of the frame still to read
	fd      int    // the socket, while a reader holds mu
	drained bool   // the last read into buf was short: the socket had no more
	frames  int    // frames ended by the current reader
	reads   uint64 // reads that returned bytes
	err     error  // the stream ended: io.EOF, or why
}

// errKicked is what run returns when the stream's owner kicked it.
var errKicked = errors.New("stopped by its owner")

// newInStream returns a stream reading c for h, with a buffer of bufLen
// bytes, whose goroutine ticks every every (0: never).
func newInStream(i *Iface, c *net.TCPConn, h frameHandler, allowed uint32, maxAM, bufLen int, every time.Duration) (*inStream, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	s := &inStream{iface: i, conn: c, raw: raw, h: h, allowed: allowed, maxAM: maxAM, buf: make([]byte, bufLen), every: every, fd: -1}
	s.readFn = s.readable
	s.pollFn = s.polled
	s.tickFn = s.ticked
	return s, nil
}

// run reads the stream from its goroutine until it ends, and returns nil
// at a clean end (the peer closed the connection between frames),
// errKicked when its owner kicked it, or why it ended. It removes the
// stream from the iface's poll set first.
func (s *inStream) run() error {
	s.iface.pollAdd(s)
	err := s.loop()
	s.iface.pollRemove(s)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err // the connection was closed here
	}
	if s.inFrame {
		s.inFrame = false
		s.h.abort(s.err)
	}
	if s.err == io.EOF {
		return nil
	}
	return s.err
}

// loop waits for the socket and reads it until the stream ends or is
// kicked, ticking every s.every.
func (s *inStream) loop() error {
	for {
		if s.every > 0 {
			s.conn.SetReadDeadline(time.Now().Add(s.every))
		}
		// After the deadline is set: a kick sets kicked, then a deadline
		// in the past, and one of the two is seen.
		if s.kicked.Load() {
			return errKicked
		}
		err := s.raw.Read(s.readFn)
		switch {
		case err == nil:
			return nil // s.err says why
		case s.kicked.Load():
			return errKicked
		case !errors.Is(err, os.ErrDeadlineExceeded):
			return err
		}
		// A tick, or Progress ended the stream and woke the goroutine.
		if s.raw.Control(s.tickFn) != nil {
			return net.ErrClosed
		}
	}
}

// ticked reads what came (a deadline may fire with bytes waiting) and
// calls the handler's tick; it runs from the goroutine.
func (s *inStream) ticked(fd uintptr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pump(int(fd), false)
	if s.err != nil {
		return
	}
	s.fd = int(fd)
	if err := s.h.tick(s.reads); err != nil {
		s.fail(err)
	}
	s.fd = -1
}

// kick makes the goroutine stop reading and return errKicked (for an
// orderly close, which its owner then does).
func (s *inStream) kick() {
	s.kicked.Store(true)
	s.conn.SetReadDeadline(time.Unix(1, 0))
}

// readable is the function of run's RawConn.Read: it reads what there is
// and asks to wait for more unless the stream ended.
func (s *inStream) readable(fd uintptr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pump(int(fd), false)
	return s.err != nil
}

// poll reads what there is from Progress, unless another reader is at
// it; it returns the number of frames it ended.
func (s *inStream) poll() int {
	if !s.mu.TryLock() {
		return 0
	}
	defer s.mu.Unlock()
	if s.err != nil {
		return 0
	}
	s.frames = 0
	if s.raw.Control(s.pollFn) != nil && s.err == nil {
		s.err = net.ErrClosed
	}
	if s.err != nil {
		// The goroutine waits for the socket, which may stay quiet: wake
		// it to end the stream.
		s.conn.SetReadDeadline(time.Unix(1, 0))
	}
	return s.frames
}

func (s *inStream) polled(fd uintptr) { s.pump(int(fd), true) }

// pump reads and applies frames until the socket has nothing more, the
// stream ends (s.err), or, from Progress, the receive queue is full; s.mu
// is held.
func (s *inStream) pump(fd int, progress bool) {
	s.fd = fd
	defer func() { s.fd = -1 }()
	s.drained = false
	for s.err == nil {
		if !s.inFrame {
			if progress && (s.drained && s.r == s.w || s.iface.rxFull()) {
				// Progress polls a level-triggered set: it need not read
				// until EAGAIN after a short read, as the goroutine (woken
				// by edges) must. It does not wait for room in the
				// receive queue; the goroutine does.
				return
			}
			if !s.beginFrame(fd) {
				return
			}
		}
		for s.left > 0 {
			if !s.readBody(fd) {
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
			if err := s.h.caughtUp(); err != nil {
				s.fail(err)
			}
		}
	}
}

// beginFrame reads and decodes the next frame's header and fixed part and
// calls begin; it returns false when they are not all there yet or the
// stream ended.
func (s *inStream) beginFrame(fd int) bool {
	for s.w-s.r < frameHeaderLen {
		if !s.fill(fd, frameHeaderLen) {
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
		if !s.fill(fd, need) {
			return false
		}
	}
	dst, err := s.h.begin(h, s.buf[s.r+frameHeaderLen:s.r+need])
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
func (s *inStream) readBody(fd int) bool {
	if s.r < s.w {
		n := min(s.w-s.r, s.left)
		s.consume(s.buf[s.r : s.r+n])
		s.r += n
		return true
	}
	if s.left < directRead || len(s.dst) == 0 {
		return s.fill(fd, 1)
	}
	n, err := readv(fd, s.dst)
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
func (s *inStream) fill(fd, need int) bool {
	if s.r == s.w {
		s.r, s.w = 0, 0
	} else if len(s.buf)-s.r < need {
		s.w = copy(s.buf, s.buf[s.r:s.w])
		s.r = 0
	}
	n, err := readNB(fd, s.buf[s.w:])
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
		s.fail(fmt.Errorf("read: %w", os.NewSyscallError("read", err)))
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

// fail ends the stream with err (once); s.mu is held.
func (s *inStream) fail(err error) {
	if s.err == nil {
		s.err = err
	}
}
