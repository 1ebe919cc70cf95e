package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/goshmem/goshmem/ucs"
)

// Closing in order.
//
// Every job ends with each process closing its EPs and ifaces while its
// peers still run, and a peer must tell that apart from a death. So each
// side says goodbye before it closes: a destroyed EP writes a
// frameEPClose, and a closing iface writes a frameIfaceClose on each
// connection it accepted, with the number of the client's frames it
// processed. The side that said goodbye shuts its sending side down and
// reads what still comes until the other side closes too (at most
// closeLinger), so that no unread byte makes its kernel answer with a
// reset that the other side would take for a failure.
//
// A server that reads frameEPClose ends the connection quietly. An EP that
// reads frameIfaceClose ends quietly when the peer processed every
// operation it sent (all but acknowledgement requests after them): later
// operations fail with ucs.ErrConnectionReset, a flush of what was
// acknowledged succeeds, and neither the error handler nor the log hears
// of it. When operations were lost it fails as on any error. A connection
// that ends without a goodbye (the peer was killed, or exited without
// closing) is a failure: the EP's error handler is called, the iface logs
// it.

// closeLinger bounds how long the side that said goodbye waits for the
// other to close its side.
const closeLinger = time.Second

// errEPClosed ends the stream of a server whose client closed its EP.
var errEPClosed = errors.New("the client closed its ep")

// ifaceClosedError ends the stream of an EP whose peer iface closed.
type ifaceClosedError struct{ processed uint64 }

func (e *ifaceClosedError) Error() string {
	return fmt.Sprintf("the peer iface closed after processing %d frames", e.processed)
}

// errNoGoodbye is why an EP whose peer closed the connection without a
// goodbye failed.
var errNoGoodbye = fmt.Errorf("the peer closed the connection without a goodbye (it exited or was killed): %w", io.EOF)

// Close closes the listener and every accepted connection and EP of the
// iface, saying goodbye on each (see the top of close.go): the EPs'
// outstanding operations fail with ucs.ErrCanceled, and the peers' EPs end
// quietly. It waits until every connection ended (at most a second after
// its goodbye, when the peer does not close its side) and the iface's
// goroutines returned, and unregisters Progress from the worker. Queued
// messages are dropped.
func (i *Iface) Close() {
	i.mu.Lock()
	if i.closed {
		i.mu.Unlock()
		return
	}
	i.closed = true
	eps := make([]*EP, 0, len(i.eps))
	for e := range i.eps {
		eps = append(eps, e)
	}
	rx := make([]*rxConn, 0, len(i.rxConns))
	for c := range i.rxConns {
		rx = append(rx, c)
	}
	hs := make([]net.Conn, 0, len(i.hsConns))
	for c := range i.hsConns {
		hs = append(hs, c)
	}
	i.mu.Unlock()
	deadline := time.Now().Add(closeLinger)
	// A connection still authenticating has closeLinger to finish (its
	// client, which may think it done, then hears the goodbye rather than
	// an abrupt end).
	for _, c := range hs {
		c.SetDeadline(deadline)
	}
	i.ln.Close()
	for _, c := range rx {
		c.closeInOrder(deadline)
	}
	for _, e := range eps {
		e.end(ucs.ErrCanceled, nil, true)
	}
	i.wg.Wait() // the listener's goroutine and the handshakes
	// The poller ends the streams: it reads and writes them, whether
	// Progress runs or not, until each peer closed its side or the
	// linger ended.
	i.closing.Store(true)
	close(i.pollerStop)
	i.wakePoller()
	<-i.pollerDone
	if i.worker != nil {
		i.worker.ProgressUnregister(i.progID)
	}
	i.progMu.Lock() // no Progress polls the set any more
	i.poll.close()
	i.progMu.Unlock()
	i.mu.Lock()
	for _, m := range i.rxq[i.rxHead:] {
		putBuf(m.Data)
	}
	i.rxq, i.rxHead, i.rxBytes, i.parked = nil, 0, 0, nil
	i.rxOver.Store(false)
	i.mu.Unlock()
	i.warn.flush()
}

// closeInOrder says goodbye to the client, with the count of its frames
// processed (after the reply being written, if any; a frame being read is
// dropped), then shuts the sending side down and drains until the client
// closes its side; deadline ends it anyway.
func (c *rxConn) closeInOrder(deadline time.Time) {
	s := c.in
	s.mu.Lock()
	if s.state != streamOpen {
		s.mu.Unlock()
		return
	}
	if s.inFrame {
		s.inFrame = false
		s.h.abort(errGoodbye)
	}
	putFrameHeader(c.bye[:], frameIfaceClose, 0, ackBodyLen)
	binary.LittleEndian.PutUint64(c.bye[frameHeaderLen:], c.processed)
	s.out = append(s.out, c.bye[:])
	s.state, s.deadline = streamClosing, deadline
	s.interest(false, true)
	// Write it now if the socket takes it; the poller goes on otherwise.
	n, ended := s.serveLocked(false)
	_ = n
	err := s.err
	s.mu.Unlock()
	if ended {
		s.ended(err, false)
	}
}

// startDrain has the stream of an EP that said goodbye drop what still
// comes until the peer closes its side, or until deadline.
func (s *inStream) startDrain(deadline time.Time) {
	s.mu.Lock()
	if s.state == streamOpen {
		if s.inFrame {
			s.inFrame = false
			s.h.abort(errGoodbye)
		}
		s.state, s.deadline = streamDraining, deadline
		s.interest(true, false)
	}
	s.mu.Unlock()
	s.interestTx(false)
}

// ended ends the EP whose stream ended (see frameHandler).
func (r *epReader) ended(err error) {
	e := r.e
	var closed *ifaceClosedError
	switch {
	case err == errGoodbye:
		// This side said goodbye: the EP ended already.
	case errors.As(err, &closed):
		e.peerClosed(closed.processed)
	case err == io.EOF:
		e.fail(ucs.ErrConnectionReset, errNoGoodbye)
	default:
		e.fail(failStatus(err), err)
	}
}

// ended forgets the connection, and logs why it ended unless in order
// (the client's or this side's goodbye, or the iface closing).
func (c *rxConn) ended(err error) {
	i := c.iface
	i.mu.Lock()
	delete(i.rxConns, c)
	closed := i.closed
	i.mu.Unlock()
	switch {
	case err == errGoodbye, errors.Is(err, errEPClosed), closed:
	case err == io.EOF:
		i.warn.closed.Logf("the connection from %v (iface %#x) ended without a goodbye (the peer exited or was killed)", c.from, c.peerID)
	default:
		i.warn.closed.Logf("closed the connection from %v (iface %#x): %v", c.from, c.peerID, err)
	}
}

// end moves the EP to status st, once: queued frames are dropped and
// their completions, and those of its gets and atomics, signalled with
// st. A non-nil cause is a failure: it is logged and the iface's error
// handler called from Progress (unless the iface closes). With bye the EP
// closes in order (Destroy, iface Close): it says goodbye when the
// connection is between frames, and its stream then drains until the
// peer closes; otherwise the connection is closed at once.
func (e *EP) end(st ucs.Status, cause error, bye bool) {
	e.mu.Lock()
	e.endLocked(st, cause, bye)
}

// endLocked is end with e.mu held; it unlocks it.
func (e *EP) endLocked(st ucs.Status, cause error, bye bool) {
	if e.failed {
		e.mu.Unlock()
		return
	}
	e.failed = true
	// A goodbye must not cut a frame in two: nobody may be writing, and
	// no frame may be written in part.
	bye = bye && e.in != nil && !e.writing && (len(e.q) == 0 || e.q[0].off == 0)
	if bye {
		e.writing = true // for good: nothing is written after the goodbye
	}
	waits := e.takeWaits()
	// The error becomes visible under i.mu, with the EP queued for the
	// error handler: Progress, which reads both under i.mu, never sees a
	// flush end with the error before the handler is due.
	i := e.iface
	i.mu.Lock()
	// The log names the peer before the error handler can run: whoever
	// handles the failure finds it logged.
	if cause != nil && !i.closed && !errors.Is(cause, net.ErrClosed) {
		i.log.Logf(ucs.LogWarn, "uct/tcp: ep to %s failed: %v", e.peer, cause)
	}
	e.err.Store(int32(st))
	for _, w := range waits {
		if w.comp != nil {
			i.comps = append(i.comps, compEvent{w.comp, st})
		}
	}
	if cause != nil && !i.closed {
		i.failed = append(i.failed, e)
	}
	i.mu.Unlock()
	if !e.writing || bye {
		// A writer that is at it drops the queue once its write returns.
		e.dropQueueLocked(st)
	}
	e.mu.Unlock()
	if e.in != nil && (!bye || !e.goodbye()) {
		e.in.end(net.ErrClosed, true)
	}
	for _, w := range waits {
		w.release()
	}
	i.markDirty()
}

// dropQueueLocked drops the frames queued on the failed EP, signalling
// their completions with st; e.mu is held.
func (e *EP) dropQueueLocked(st ucs.Status) {
	for k, f := range e.q {
		if f.comp != nil {
			e.iface.pushCompQuiet(f.comp, st)
		}
		f.release()
		e.q[k] = nil
	}
	e.q, e.queued = e.q[:0], 0
}

// goodbye writes a frameEPClose, shuts the sending side down and has the
// stream drain until the peer closes; it reports whether the socket took
// the frame at once.
func (e *EP) goodbye() bool {
	var b [frameHeaderLen]byte
	putFrameHeader(b[:], frameEPClose, 0, 0)
	if n, err := e.sock.write(b[:]); err != nil || n != len(b) {
		return false
	}
	e.sock.shutdownWrite()
	e.in.startDrain(time.Now().Add(closeLinger))
	return true
}

// peerClosed ends the EP whose peer iface closed in order after
// processing its first processed frames: quietly when they include every
// operation, as a failure otherwise.
func (e *EP) peerClosed(processed uint64) {
	e.mu.Lock()
	issued := e.issued.Load() // posts take e.mu: it stays
	if processed > issued || processed < e.lastOp {
		e.mu.Unlock()
		e.fail(ucs.ErrConnectionReset, fmt.Errorf("the peer iface closed after processing %d of the %d frames sent: %w", processed, issued, ucs.ErrConnectionReset))
		return
	}
	// What is left are acknowledgement requests: their flushes are done.
	e.acked.Store(issued)
	e.gone.Store(true)
	e.endLocked(ucs.ErrConnectionReset, nil, false)
}
