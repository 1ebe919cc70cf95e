package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
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

// Close closes the listener and every accepted connection and EP of the
// iface, saying goodbye on each (see the top of close.go): the EPs' outstanding
// operations fail with ucs.ErrCanceled, and the peers' EPs end quietly.
// It waits for the iface's goroutines to end (for each connection at most
// a second after its goodbye, when the peer does not close its side), and
// unregisters Progress from the worker. Queued messages are dropped.
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
	conns := make(map[net.Conn]*rxConn, len(i.conns))
	for c, s := range i.conns {
		conns[c] = s
	}
	i.rxCond.Broadcast()
	i.mu.Unlock()
	// A reader waiting for room in the receive queue leaves once it sees
	// closed; one that reads is kicked, and says goodbye. A connection
	// still authenticating has closeLinger to finish (its client, which
	// may think it done, then hears the goodbye rather than an abrupt
	// end).
	for c, s := range conns {
		if s == nil {
			c.SetDeadline(time.Now().Add(closeLinger))
			continue
		}
		c.SetWriteDeadline(time.Now().Add(closeLinger)) // a client that reads nothing cannot hold it
		s.in.kick()
	}
	i.ln.Close()
	for _, e := range eps {
		e.end(ucs.ErrCanceled, nil, true)
	}
	i.wg.Wait()
	if i.worker != nil {
		i.worker.ProgressUnregister(i.progID)
	}
	i.progMu.Lock() // no Progress polls the set any more
	i.poll.close()
	i.progMu.Unlock()
	i.mu.Lock()
	for _, m := range i.rxq[i.rxHead:] {
		putBuf(m.data)
	}
	i.rxq, i.rxHead, i.rxBytes = nil, 0, 0
	i.mu.Unlock()
	i.warn.flush()
}

// goodbye tells the client that the iface closes, with the count of its
// frames processed, and waits for the client to close its side; the
// stream's goroutine calls it once the stream ended.
func (s *rxConn) goodbye() {
	var b [frameHeaderLen + ackBodyLen]byte
	s.in.mu.Lock()
	putFrameHeader(b[:], frameIfaceClose, 0, ackBodyLen)
	binary.LittleEndian.PutUint64(b[frameHeaderLen:], s.processed)
	s.in.mu.Unlock()
	c := s.conn.(*net.TCPConn)
	c.SetWriteDeadline(time.Now().Add(closeLinger))
	if _, err := c.Write(b[:]); err != nil {
		return
	}
	c.CloseWrite()
	drain(c)
}

// drain reads and drops what c still receives until the peer closes its
// side or closeLinger passed, so that closing c then sends no reset.
func drain(c *net.TCPConn) {
	c.SetReadDeadline(time.Now().Add(closeLinger))
	var b [512]byte
	for {
		if _, err := c.Read(b[:]); err != nil {
			return
		}
	}
}

// end moves the EP to status st, once: queued frames are dropped and
// their completions, and those of its gets, signalled with st. A non-nil
// cause is a failure: it is logged and the iface's error handler called
// from Progress (unless the iface closes). With bye the EP closes in
// order (Destroy, iface Close): it says goodbye when the connection is
// between frames, and its reader then waits for the peer to close;
// otherwise the connection is closed at once.
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
	q := e.q
	e.q, e.queued = nil, 0
	gets := e.gets
	e.gets = nil
	// The error becomes visible under i.mu, with the EP queued for the
	// error handler: Progress, which reads both under i.mu, never sees a
	// flush end with the error before the handler is due.
	i := e.iface
	i.mu.Lock()
	e.err.Store(int32(st))
	for _, f := range q {
		if f.comp != nil {
			i.comps = append(i.comps, compEvent{f.comp, st})
		}
	}
	for _, g := range gets {
		if g.comp != nil {
			i.comps = append(i.comps, compEvent{g.comp, st})
		}
	}
	if cause != nil && !i.closed {
		i.failed = append(i.failed, e)
	}
	closed := i.closed
	i.mu.Unlock()
	e.mu.Unlock()
	close(e.done)
	if !bye || !e.goodbye() {
		e.conn.Close()
	}
	for _, f := range q {
		f.release()
	}
	i.markDirty()
	if cause != nil && !closed && !errors.Is(cause, net.ErrClosed) {
		logf("ep to %s failed: %v", e.peer, cause)
	}
}

// goodbye writes a frameEPClose, shuts the sending side down and kicks the
// reader, which then waits for the peer to close; it reports whether the
// socket took the frame at once.
func (e *EP) goodbye() bool {
	var b [frameHeaderLen]byte
	putFrameHeader(b[:], frameEPClose, 0, 0)
	n, werr := 0, error(nil)
	if err := e.raw.Control(func(fd uintptr) { n, werr = writeNB(int(fd), b[:]) }); err != nil || werr != nil || n != len(b) {
		return false
	}
	e.conn.CloseWrite()
	e.in.kick()
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
