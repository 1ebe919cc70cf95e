package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// Closing in order.
//
// Every job ends with each process closing its EPs and ifaces while its
// peers still run, and a peer must tell that apart from a death. So each
// side says goodbye before it closes, once per role it has on a
// connection:
//
//   - frameEPClose: "no more operations from me". A destroyed EP writes
//     it (after the frame being written, if any; the operations not
//     started are dropped); so does the iface for a shared connection
//     that no EP of it took, once the peer's EP said goodbye (nothing
//     will take it any more).
//   - frameIfaceClose, with the number of the peer's frames processed:
//     "no more answers, and no more operations, from me". A closing iface
//     writes it on every connection where it answers a peer's EP (after
//     the replies queued), or frameEPClose where it has only an EP.
//
// A side has said all it will when its EP role ended (its goodbye queued,
// or it has none: a one-way connection accepted) and its target role
// ended (the peer said frameEPClose, so nothing more is to be answered;
// its own frameIfaceClose; or it has none: a one-way connection dialed).
// Once all it queued is written it shuts its sending side down, and reads
// what still comes until the other side closes too (at most closeLinger),
// so that no unread byte makes its kernel answer with a reset that the
// other side would take for a failure. A connection thus closes when both
// roles of both sides are done.
//
// A target role that reads frameEPClose stops answering (frames of the
// peer's operations after it close the connection); the EP of that side,
// if any, goes on sending. An EP that reads frameIfaceClose ends quietly
// when the peer processed every operation it sent (all but
// acknowledgement requests after them): later operations fail with
// ucs.ErrConnectionReset, a flush of what was acknowledged succeeds, and
// neither the error handler nor the log hears of it. When operations were
// lost it fails as on any error. A connection that ends without the
// goodbyes due (the peer was killed, or exited without closing) is a
// failure: the EP's error handler is called (an EP of the user's that is
// live), the iface logs it.

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

// Close closes the listener and every connection and EP of the iface,
// saying goodbye on each (see the top of close.go): the EPs'
// outstanding operations fail with ucs.ErrCanceled, and so does every
// later operation (an unconnected EP's, and its ConnectToEP, too); the
// peers' EPs end quietly. It waits until every connection ended (at most
// a second after its goodbye, when the peer does not close its side) and
// the iface's goroutines returned, and unregisters Progress from the
// worker. Queued messages are dropped.
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
	conns := make([]*EP, 0, len(i.conns))
	for e := range i.conns {
		conns = append(conns, e)
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
	for _, e := range conns {
		e.closeInOrder(deadline)
	}
	for _, e := range eps {
		// An EP without a connection ends here; one whose ConnectToEP
		// dials finds the iface closed when it returns.
		e.mu.Lock()
		if !e.st.hasSocket() {
			e.endTxLocked(ucs.ErrCanceled, nil)
		}
		e.mu.Unlock()
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
		i.putAM(m.Data)
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
	case peerEnded(err):
		i.warn.ended.Logf("the connection from %v (iface %#x) ended without a goodbye (the peer exited or was killed): %v", c.from, c.peerID, err)
	default:
		i.warn.closed.Logf("closed the connection from %v (iface %#x): %v", c.from, c.peerID, err)
	}
}

// Goodbyes that wait for the EP's writer (EP.byeDue), in the order in
// which a later one covers an earlier one.
const (
	byeEP    uint8 = 1 // the EP ended: frameEPClose
	byeIface uint8 = 2 // the iface closes: frameIfaceClose, or frameEPClose without a target role
)

// endTxLocked ends the EP's role, once: operations fail with st from now
// on, and the gets and atomics waiting for replies complete with st
// (replies still due to them are dropped when they come). A non-nil cause
// is a failure of an EP the user holds: it is logged and the iface's error
// handler called from Progress (unless the iface closes). e.mu is held.
func (e *EP) endTxLocked(st ucs.Status, cause error) {
	e.abandoned += e.endOpsLocked(evFail, st, cause)
}

// endOpsLocked is endTxLocked with the event that ends the role: evFail,
// or evPeerClosed (the peer closed in order: no error is reported, cause
// is nil); it returns the number of gets and atomics it completed, whose
// replies may still come, unless the connection closes with it. e.mu is
// held.
func (e *EP) endOpsLocked(ev epEvent, st ucs.Status, cause error) int {
	if e.st.ended() {
		return 0
	}
	held := e.st.ops == opsLive
	e.to(ev)
	waits := e.takeWaits()
	// The error becomes visible under i.mu, with the EP queued for the
	// error handler: Progress, which reads both under i.mu, never sees a
	// flush end with the error before the handler is due.
	i := e.iface
	i.mu.Lock()
	report := cause != nil && held && !i.closed
	// The log names the peer before the error handler can run: whoever
	// handles the failure finds it logged (at LogDiag when the peer
	// ended: that is reported where it ran, see peerEnded).
	if report && !errors.Is(cause, net.ErrClosed) {
		level := ucs.LogWarn
		if peerEnded(cause) {
			level = ucs.LogDiag
		}
		i.log.Logf(level, "uct/tcp: ep to %s failed: %v", e.peer, cause)
	}
	e.err.Store(int32(st))
	for _, w := range waits {
		if w.comp != nil {
			i.comps = append(i.comps, compEvent{w.comp, st})
		}
	}
	if report {
		i.failed = append(i.failed, e)
	}
	i.mu.Unlock()
	for _, w := range waits {
		w.release()
	}
	i.markDirty(uct.EventAll)
	return len(waits)
}

// killLocked breaks the connection, once: the EP's role ends with st
// (endTxLocked; cause as there), what is queued is dropped (by the writer
// at it, if any), and the socket is closed at once; its stream sees that
// when it is served or ticked next (within houseEvery) and ends. It takes
// no lock of the stream, whose reader may be the caller. e.mu is held.
func (e *EP) killLocked(st ucs.Status, cause error) {
	if e.st.conn == connClosed {
		return
	}
	e.endOpsLocked(evFail, st, cause) // no reply comes any more: none is abandoned
	e.to(evClose)
	if !e.writing {
		e.dropQueueLocked(e.status())
	}
	e.sock.close()
}

// dropQueueLocked drops the frames queued, signalling the completions of
// their operations with st; e.mu is held.
func (e *EP) dropQueueLocked(st ucs.Status) {
	for k, f := range e.q {
		if f.comp != nil {
			e.iface.pushCompQuiet(f.comp, st)
		}
		f.release()
		e.q[k] = nil
	}
	e.q, e.queued, e.front, e.batched = e.q[:0], 0, 0, false
	e.iface.markDirty(uct.EventAll)
}

// sayGoodbyeLocked has the writer queue the goodbye kind (byeEP or
// byeIface) at once, or when the write at it returned; e.mu is held.
func (e *EP) sayGoodbyeLocked(kind uint8) {
	e.byeDue = max(e.byeDue, kind)
	if !e.writing {
		e.writeQueueLocked()
	}
}

// settleLocked does what the state of the writer made due, while nobody
// writes: it drops the queue of a broken connection, queues a goodbye
// that waited (and writes it), and shuts the sending side down once this
// side said all it will (see the top of the file). e.mu is held.
func (e *EP) settleLocked() {
	switch {
	case e.writing:
	case e.st.conn == connClosed:
		if len(e.q) > 0 {
			e.dropQueueLocked(e.status())
		}
	case e.byeDue != 0:
		kind := e.byeDue
		e.byeDue = 0
		e.queueGoodbyeLocked(kind)
		e.writeQueueLocked()
	case e.st.conn == connOpen && e.st.saidAll() && len(e.q) == 0:
		e.to(evShut)
		e.sock.shutdownWrite()
		e.shutAt.Store(time.Now().UnixNano())
		e.in.interestTx(false)
	}
}

// queueGoodbyeLocked drops the operations not started, finishes one
// started from a copy of its rest (its completion is signalled with
// ucs.ErrCanceled: the caller's buffers are free), and queues the goodbye
// kind after the replies; nobody writes, and e.mu is held.
func (e *EP) queueGoodbyeLocked(kind uint8) {
	i := e.iface
	e.batched = false
	kept := e.q[:0]
	front := 0
	for k, f := range e.q {
		switch {
		case f.reply: // replies, and an earlier goodbye
		case k == 0 && f.off > 0:
			if f.comp != nil {
				rest := newFrame(f.size - f.off)
				b := rest.buf[:0]
				for _, p := range f.appendBuffers(nil) {
					b = append(b, p...)
				}
				i.pushCompQuiet(f.comp, ucs.ErrCanceled)
				f.release()
				f = rest
			}
		default:
			if f.comp != nil {
				i.pushCompQuiet(f.comp, ucs.ErrCanceled)
			}
			e.queued -= f.size - f.off
			f.release()
			continue
		}
		kept = append(kept, f)
		if !f.bye {
			front = len(kept)
		}
	}
	clear(e.q[len(kept):])
	e.q, e.front = kept, front
	if f := e.goodbyeLocked(kind); f != nil {
		f.reply, f.bye = true, true // not an operation: it counts against no queue
		e.q = append(e.q, f)
	}
	i.markDirty(uct.EventAll)
}

// goodbyeLocked returns the frame that says the goodbye kind, nil when
// the goodbyes said already cover it, and moves the EP on: byeIface ends
// the target role too, with frameIfaceClose where it still answers the
// peer, or else with frameEPClose unless that was said; byeEP says
// frameEPClose once. e.mu is held.
func (e *EP) goodbyeLocked(kind uint8) *txFrame {
	var f *txFrame
	switch {
	case kind == byeIface && e.rx != nil && !e.st.rxDone():
		f = newFrame(frameHeaderLen + ackBodyLen)
		putFrameHeader(f.buf, frameIfaceClose, 0, ackBodyLen)
		binary.LittleEndian.PutUint64(f.buf[frameHeaderLen:], e.rx.processed)
	case e.st.said == saidNothing:
		f = newFrame(frameHeaderLen)
		putFrameHeader(f.buf, frameEPClose, 0, 0)
	}
	if kind == byeIface && e.st.said != saidAll {
		e.to(evAllBye)
	} else if e.st.said == saidNothing {
		e.to(evEPBye)
	}
	return f
}

// closeInOrder ends the EP and its connection as its iface closes: what
// comes is dropped from now on, operations fail with ucs.ErrCanceled,
// and the goodbye (frameIfaceClose, or frameEPClose) is written after
// the frame started and the replies queued; deadline ends the stream
// anyway.
func (e *EP) closeInOrder(deadline time.Time) {
	s := e.in
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
	e.mu.Lock()
	e.endTxLocked(ucs.ErrCanceled, nil)
	e.sayGoodbyeLocked(byeIface)
	e.mu.Unlock()
}

// ended ends the EP whose stream ended (see frameHandler): in order when
// the goodbyes due were said, as a failure otherwise; the connection is
// forgotten.
func (r *epReader) ended(err error) {
	e := r.e
	i := e.iface
	var closed *ifaceClosedError
	e.mu.Lock()
	live := e.st.ops == opsLive
	orderly := true
	switch {
	case err == errGoodbye || e.st.conn == connClosed: // this side said goodbye, or broke it
	case errors.As(err, &closed):
		e.peerClosedLocked(closed.processed)
	case err == io.EOF && (e.st.conn == connShut || e.st.peer == peerBye && e.st.said != saidNothing):
		// Both sides said all they would.
	case err == io.EOF:
		orderly = false
		e.killLocked(ucs.ErrConnectionReset, errNoGoodbye)
	default:
		orderly = false
		e.killLocked(failStatus(err), err)
	}
	e.killLocked(ucs.ErrConnectionReset, nil)
	serving := e.rx != nil && (err != io.EOF || e.st.peer != peerBye)
	from := e.peer
	e.mu.Unlock()
	if e.match != nil {
		i.match.forget(e.match)
	}
	i.mu.Lock()
	delete(i.conns, e)
	closing := i.closed
	i.mu.Unlock()
	if orderly || live || !serving || closing {
		return
	}
	if peerEnded(err) {
		i.warn.ended.Logf("the connection with %v (iface %#x) ended without a goodbye (the peer exited or was killed): %v", from, e.rx.peerID, err)
	} else {
		i.warn.closed.Logf("closed the connection with %v (iface %#x): %v", from, e.rx.peerID, err)
	}
}

// peerClosedLocked ends the EP whose peer iface closed in order after
// processing its first processed frames: quietly when they include every
// operation, as a failure otherwise; e.mu is held.
func (e *EP) peerClosedLocked(processed uint64) {
	if e.st.ended() {
		return
	}
	issued := e.issued.Load() // posts take e.mu: it stays
	if processed > issued || processed < e.lastOp {
		e.killLocked(ucs.ErrConnectionReset, fmt.Errorf("the peer iface closed after processing %d of the %d frames sent: %w", processed, issued, ucs.ErrConnectionReset))
		return
	}
	// What is left are acknowledgement requests: their flushes are done.
	e.acked.Store(issued)
	e.abandoned += e.endOpsLocked(evPeerClosed, ucs.ErrConnectionReset, nil)
}

// peerSaidBye takes the peer's frameEPClose: its target role answers
// nothing more, and no frame of the peer's operations may follow. A
// connection that no EP of this iface took will never be taken: this
// side says its goodbye for it too. The stream's lock is held.
func (e *EP) peerSaidBye() {
	e.in.allowed &^= clientToServer
	untaken := e.match != nil && e.iface.match.release(e.match)
	e.mu.Lock()
	e.to(evPeerBye)
	if untaken {
		e.endTxLocked(ucs.ErrCanceled, nil)
		e.sayGoodbyeLocked(byeEP)
	} else if !e.writing {
		e.settleLocked()
	}
	e.mu.Unlock()
}
