package tcp

import (
	"sync/atomic"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// amTrace is an installed active message tracer.
type amTrace struct {
	fn  uct.AMTracer
	arg any
}

// amTracer holds the tracer of an iface. With none installed each hook
// costs one atomic pointer load and allocates nothing.
type amTracer struct {
	p atomic.Pointer[amTrace]
}

// set installs fn with arg, or removes the tracer when fn is nil.
func (t *amTracer) set(fn uct.AMTracer, arg any) {
	if fn == nil {
		t.p.Store(nil)
		return
	}
	t.p.Store(&amTrace{fn: fn, arg: arg})
}

// trace calls the tracer, if any, with typ, id and data; small enough to be
// inlined.
func (t *amTracer) trace(typ uct.AMTraceType, id uint8, data []byte) {
	if tr := t.p.Load(); tr != nil {
		tr.call(typ, id, data)
	}
}

// call calls the tracer.
//
//go:noinline
func (tr *amTrace) call(typ uct.AMTraceType, id uint8, data []byte) {
	tr.fn(tr.arg, typ, id, data)
}

// postTraced is post for an iface with tracer tr: an active message frame
// is traced as sent once the EP took it (ucs.OK or ucs.InProgress), as
// dropped when the EP refused it with its error (failed or destroyed), and
// not at all when the queue was full (ucs.ErrNoResource: nothing was
// claimed, the caller retries). The message is gathered before post, which
// may release the frame's buffer.
func (e *EP) postTraced(tr *amTrace, f *txFrame, force bool) (ucs.Status, uint64) {
	if len(f.buf) < frameHeaderLen || f.buf[0] != frameAM {
		return e.postFrame(f, force)
	}
	id := f.buf[1]
	msg := append([]byte(nil), f.buf[frameHeaderLen:]...)
	for _, b := range f.iov {
		msg = append(msg, b...)
	}
	st, seq := e.postFrame(f, force)
	switch st {
	case ucs.OK, ucs.InProgress:
		tr.call(uct.AMTraceSend, id, msg)
	case ucs.ErrNoResource:
	default:
		tr.call(uct.AMTraceSendDrop, id, msg)
	}
	return st, seq
}

// SetAMTracer installs fn (uct.AMTracerSetter), called with arg for every
// active message the iface's EPs send (uct.AMTraceSend, from the sending
// goroutine once the EP took the message, with the bytes the peer's handler
// will see: for AMShort the 8-byte header, little-endian, then the payload;
// for AMZcopy the header and the iov, gathered), every send the EP refuses
// after the message was built (uct.AMTraceSendDrop: the EP failed, or the
// pack function of AMBcopy returned a bad length, traced with no data),
// every message delivered to a handler (uct.AMTraceRecv, before the handler
// runs: from Progress, or from the connection's reader goroutine for a
// CBFlagAsync handler), and every message dropped for want of a handler or
// because the iface closed (uct.AMTraceRecvDrop). fn may thus be called from
// several goroutines at once. A nil fn removes the tracer; without one each
// send and receive costs one more atomic load, and tracing gathers each sent
// message into a new buffer. fn must not keep data nor call the iface.
func (i *Iface) SetAMTracer(fn uct.AMTracer, arg any) error {
	i.tracer.set(fn, arg)
	return nil
}

var _ uct.AMTracerSetter = (*Iface)(nil)
