package tcp

import (
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"net"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
	"github.com/goshmem/goshmem/uct/internal/base"
)

// The target side of the iface: what answers the frames that peers send on
// the connections it accepted (active messages, puts, gets, atomics and
// flush requests), and the checks of the memory they name.

// rxConn is the target role of the iface on an authenticated connection:
// the frameHandler of the inStream of a one-way connection it accepted,
// or the part of the EP's reader (epReader) that takes the peer's
// operations on a shared one, whose EP (ep) then writes its answers.
type rxConn struct {
	iface     *Iface
	from      net.Addr // the client's address, for the log
	peerID    uint64   // the client's iface id, from its hello
	in        *inStream
	ep        *EP    // a shared connection's EP, the writer of the answers; nil: one-way
	lastWrote uint64 // ep.wrote at the last tick (alive.go)
	processed uint64 // frames applied or queued
	acked     uint64 // the count last acknowledged
	ackDue    bool   // the client asked for an acknowledgement
	wrote     bool   // puts were applied since the worker was last signalled
	sent      bool   // something was written to the client since the last tick
	// The frames it writes; each buffer stays unchanged while it waits
	// in the stream's out.
	ack    [frameHeaderLen + ackBodyLen]byte
	getRep [frameHeaderLen + getRepHeaderLen]byte
	amoRep [frameHeaderLen + atomicRepLen]byte
	beat   [frameHeaderLen]byte
	bye    [frameHeaderLen + ackBodyLen]byte
	repBuf []byte // a small get reply

	// The frame being read.
	typ  uint8
	id   uint8        // an active message's id
	ev   uint32       // an active message's events: uct.RecvEvents of its flags
	data []byte       // an active message's buffer
	put  *region      // a put's target, locked for reading; nil: dropped
	get  getHeader    // a get
	amo  atomicHeader // an atomic
	one  [1][]byte    // the body's one buffer
}

func (s *rxConn) begin(h frameHeader, fixed []byte) ([][]byte, error) {
	s.typ = h.typ
	switch h.typ {
	case frameAM:
		if hd := s.iface.handlers[h.id].Load(); (hd == nil || hd.Flags != uct.CBFlagAsync) && s.iface.rxOver.Load() {
			return nil, errRxFull
		}
		s.id, s.data = h.id, s.iface.getAM(int(h.len))
		s.ev = uct.EventRecv
		if h.flags&amSignaled != 0 {
			s.ev |= uct.EventRecvSig
		}
		s.one[0] = s.data
		return s.one[:], nil
	case framePut:
		p, n := decodePutHeader(fixed), uint64(h.len-putHeaderLen)
		if s.put = s.iface.target(p, n, s.from); s.put == nil {
			return nil, nil
		}
		off := p.raddr - s.put.key.addr
		s.one[0] = s.put.mem[off : off+n]
		return s.one[:], nil
	case frameGet:
		g, err := decodeGetHeader(fixed)
		s.get = g
		return nil, err
	case frameAtomic:
		a, err := decodeAtomicHeader(fixed)
		s.amo = a
		return nil, err
	}
	return nil, nil
}

func (s *rxConn) end(progress bool) error {
	switch s.typ {
	case frameAM:
		data := s.data
		s.data, s.one[0] = nil, nil
		s.receiveAM(s.id, data, s.ev, progress)
	case framePut:
		if s.put != nil {
			s.put.mu.RUnlock()
			s.put, s.one[0] = nil, nil
		}
		s.wrote = true
	case frameFlush:
		s.ackDue = true
	case frameGet:
		if err := s.serveGet(s.get); err != nil {
			return fmt.Errorf("answering a get: %w", err)
		}
	case frameAtomic:
		if err := s.serveAtomic(s.amo); err != nil {
			return fmt.Errorf("answering an atomic: %w", err)
		}
		s.wrote = true
	case frameEPClose:
		return errEPClosed
	}
	s.processed++
	return nil
}

func (s *rxConn) abort(error) {
	switch {
	case s.data != nil:
		s.iface.putAM(s.data)
		s.data, s.one[0] = nil, nil
	case s.put != nil:
		s.put.mu.RUnlock()
		s.put, s.one[0] = nil, nil
	}
}

// caughtUp acknowledges what was processed, when the client asked, and
// signals the worker after puts and atomics that the poller applied: a
// goroutine waiting for memory to change may wait for them. (Progress
// runs in the goroutine that waits.)
func (s *rxConn) caughtUp(progress bool) error {
	if err := s.sendAck(); err != nil {
		return err
	}
	if s.wrote && !progress && s.iface.worker != nil {
		// Memory changed as by a received message.
		s.iface.worker.Signal(uct.EventRecv)
	}
	s.wrote = false
	return nil
}

// sendAck acknowledges the frames processed, when the client asked.
func (s *rxConn) sendAck() error {
	if !s.ackDue || s.processed == s.acked {
		return nil
	}
	s.ackDue = false
	putFrameHeader(s.ack[:], frameAck, 0, ackBodyLen)
	binary.LittleEndian.PutUint64(s.ack[frameHeaderLen:], s.processed)
	if err := s.write(nil, s.ack[:], nil); err != nil {
		return fmt.Errorf("sending an acknowledgement: %w", err)
	}
	s.acked = s.processed
	return nil
}

// receiveAM hands a message to its asynchronous handler, or queues it for
// Progress (begin checked that the queue has room) and signals the worker
// with the message's events ev.
func (s *rxConn) receiveAM(id uint8, data []byte, ev uint32, progress bool) {
	i := s.iface
	if h := i.handlers[id].Load(); h != nil && h.Flags == uct.CBFlagAsync {
		i.tracer.Trace(uct.AMTraceRecv, id, data)
		if h.CB(h.Arg, data, uct.CBParamFlagDesc) != ucs.InProgress {
			i.putAM(data)
		}
		return
	}
	i.mu.Lock()
	i.rxq = append(i.rxq, base.AMMsg{ID: id, Data: data})
	i.rxBytes += len(data) + rxMsgCost
	i.rxOver.Store(i.rxBytes >= i.cfg.rxQueueLen)
	i.mu.Unlock()
	if progress {
		i.dirty.Store(true) // delivered before Progress returns
	} else {
		i.markDirty(ev)
	}
}

// target returns the region a put of n bytes writes, locked for reading,
// or nil (and logs why) when the put is refused: its data is then read and
// dropped.
func (i *Iface) target(p putHeader, n uint64, from net.Addr) *region {
	r, why := i.md.access(p.key, p.token, p.raddr, n)
	if r == nil {
		i.warn.rejected.Logf("rejected a put of %d bytes to %#x (key %#x) from %v: %s", n, p.raddr, p.key, from, why)
	}
	return r
}

// serveGet answers a get on the connection: with the bytes asked for when
// the get is valid, and otherwise with ucs.ErrInvalidAddr and a logged
// warning. It fails only when the connection does.
func (s *rxConn) serveGet(g getHeader) error {
	h := s.getRep[:]
	binary.LittleEndian.PutUint64(h[frameHeaderLen:], g.id)
	r, why := s.iface.md.access(g.key, g.token, g.raddr, g.length)
	if r == nil {
		s.iface.warn.rejected.Logf("rejected a get of %d bytes at %#x (key %#x) from %v: %s", g.length, g.raddr, g.key, s.from, why)
		putFrameHeader(h, frameGetRep, 0, getRepHeaderLen)
		st := int64(ucs.ErrInvalidAddr)
		binary.LittleEndian.PutUint64(h[frameHeaderLen+8:], uint64(st))
		return s.write(nil, h, nil)
	}
	putFrameHeader(h, frameGetRep, 0, getRepHeaderLen+int(g.length))
	binary.LittleEndian.PutUint64(h[frameHeaderLen+8:], 0)
	off := g.raddr - r.key.addr
	data := r.mem[off : off+g.length]
	if len(data) <= getRepInline {
		// One buffer for a small reply: the region is free at once.
		b := append(s.repBuf[:0], h...)
		b = append(b, data...)
		r.mu.RUnlock()
		s.repBuf = b[:0]
		return s.write(nil, b, nil)
	}
	return s.write(r, h, data) // straight from the registered memory
}

// write sends a and b to the client (see inStream.send, or EP.reply on a
// shared connection; hold is b's region, read-locked).
func (s *rxConn) write(hold *region, a, b []byte) error {
	s.sent = true
	if s.ep != nil {
		return s.ep.reply(hold, a, b)
	}
	return s.in.send(hold, a, b)
}

// getRepInline is the largest get reply sent with its header in one write.
const getRepInline = 16 << 10

// access returns the live region that key and token name, locked for
// reading, when [raddr, raddr+n) lies inside it; otherwise nil and why not.
// The caller unlocks the region.
func (m *MD) access(key, token, raddr, n uint64) (*region, string) {
	r := m.lookup(key)
	if r == nil {
		return nil, "unknown key"
	}
	// Checked under the region's lock: deregistered since the lookup, the
	// region may be registered again, under another key (MemReg).
	r.mu.RLock()
	var why string
	switch {
	case r.dead || r.key.id != key:
		why = "deregistered key"
	case subtle.ConstantTimeEq(int32(token>>32), int32(r.key.token>>32))&
		subtle.ConstantTimeEq(int32(token), int32(r.key.token)) != 1:
		why = "wrong token"
	case !r.key.contains(raddr, n):
		why = fmt.Sprintf("outside the registered range %#x+%d", r.key.addr, r.key.length)
	default:
		return r, ""
	}
	r.mu.RUnlock()
	return nil, why
}
