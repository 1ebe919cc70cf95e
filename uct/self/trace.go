package self

import (
	"sync/atomic"

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
	i.tracer.set(fn, arg)
	return nil
}

var _ uct.AMTracerSetter = (*Iface)(nil)
