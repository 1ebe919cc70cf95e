package uct

import "sync/atomic"

// AMTraceHook holds the active message tracer of an iface, for transports
// that implement AMTracerSetter. Its zero value has no tracer; with none
// installed each hook costs one atomic pointer load and allocates nothing.
// It is safe for concurrent use.
type AMTraceHook struct {
	p atomic.Pointer[AMTrace]
}

// AMTrace is an installed tracer.
type AMTrace struct {
	fn  AMTracer
	arg any
}

// Set installs fn with arg, or removes the tracer when fn is nil.
func (h *AMTraceHook) Set(fn AMTracer, arg any) {
	if fn == nil {
		h.p.Store(nil)
		return
	}
	h.p.Store(&AMTrace{fn: fn, arg: arg})
}

// Load returns the installed tracer, or nil.
func (h *AMTraceHook) Load() *AMTrace { return h.p.Load() }

// Trace calls the tracer, if any, with typ, id and data. It is small
// enough to be inlined: the call itself is out of line in Call.
func (h *AMTraceHook) Trace(typ AMTraceType, id uint8, data []byte) {
	if tr := h.p.Load(); tr != nil {
		tr.Call(typ, id, data)
	}
}

// Call calls the tracer.
//
//go:noinline
func (tr *AMTrace) Call(typ AMTraceType, id uint8, data []byte) {
	tr.fn(tr.arg, typ, id, data)
}
