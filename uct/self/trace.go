package self

import (
	"github.com/goshmem/goshmem/uct"
)

// SetAMTracer installs fn (uct.AMTracerSetter), called with arg for every
// active message the iface's EPs queue (uct.AMTraceSend, from the sending
// goroutine, with the bytes the handler will see: for AMShort the 8-byte
// header, little-endian, then the payload), every message Progress delivers
// to a handler (uct.AMTraceRecv, before the handler runs), every message it
// drops for want of a handler (uct.AMTraceRecvDrop), and every AMBcopy that
// fails after it took a queue slot because its pack function returned a bad
// length (uct.AMTraceSendDrop, with no data). A nil fn removes the tracer;
// without one each send and delivery costs one more atomic load. fn must
// not keep data nor call the iface.
func (i *Iface) SetAMTracer(fn uct.AMTracer, arg any) error {
	i.tracer.Set(fn, arg)
	return nil
}

var _ uct.AMTracerSetter = (*Iface)(nil)
