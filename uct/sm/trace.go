package sm

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

// trace calls the tracer, if any, with typ, id and data. It is small enough
// to be inlined: the call itself is out of line in call.
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
	i.tracer.set(fn, arg)
	return nil
}

var _ uct.AMTracerSetter = (*Iface)(nil)
