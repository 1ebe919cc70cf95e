package sm

import (
	"github.com/goshmem/goshmem/uct"
)

// SetAMTracer installs fn (uct.AMTracerSetter), called with arg for every
// active message the iface's EPs send (uct.AMTraceSend, with the bytes the
// receiver's handler will see: for AMShort the 8-byte header, little-endian,
// then the payload; called just before the message is published, from the
// sending goroutine), every message Progress delivers to a handler
// (uct.AMTraceRecv, before the handler runs), every message it drops for
// want of a handler or because its cell is malformed (uct.AMTraceRecvDrop;
// a malformed cell is traced with no data), and every send that fails after
// it claimed a FIFO cell (uct.AMTraceSendDrop: an AMBcopy whose pack
// function returned a bad length, traced with no data). Cells voided by a
// failed sender are not traced on receipt. A nil fn removes the tracer;
// without one each send and delivery costs one more atomic load. The data
// lies in shared memory: fn must not keep it, nor call the iface.
func (i *Iface) SetAMTracer(fn uct.AMTracer, arg any) error {
	i.tracer.Set(fn, arg)
	return nil
}

var _ uct.AMTracerSetter = (*Iface)(nil)
