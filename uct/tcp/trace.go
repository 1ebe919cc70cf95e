package tcp

import (
	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// postTraced is post for an iface with tracer tr: an active message frame
// is traced as sent once the EP took it (ucs.OK or ucs.InProgress), as
// dropped when the EP refused it with its error (failed or destroyed), and
// not at all when the queue was full (ucs.ErrNoResource: nothing was
// claimed, the caller retries). The message is gathered before post, which
// may release the frame's buffer.
func (e *EP) postTraced(tr *uct.AMTrace, f *txFrame, force bool) (ucs.Status, uint64) {
	if len(f.buf) < frameHeaderLen || f.buf[0] != frameAM {
		return e.postOp(f, force, nil, 0)
	}
	id := f.buf[1]
	msg := append([]byte(nil), f.buf[frameHeaderLen:]...)
	for _, b := range f.iov {
		msg = append(msg, b...)
	}
	st, seq := e.postOp(f, force, nil, 0)
	switch st {
	case ucs.OK, ucs.InProgress:
		tr.Call(uct.AMTraceSend, id, msg)
	case ucs.ErrNoResource:
	default:
		tr.Call(uct.AMTraceSendDrop, id, msg)
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
	i.tracer.Set(fn, arg)
	return nil
}

var _ uct.AMTracerSetter = (*Iface)(nil)
