// Package rpc runs functions on other PEs of a goshmem job: remote
// procedure calls that return futures, fire-and-forget calls, and
// aggregated calls that travel many to a message.
//
// A function is registered under a name, on every PE, with its argument
// and result types (Register, RegisterDeferred); Start, a collective of
// the job's PEs after shmem.Init, makes the PEs serve calls; Stop ends
// that before shmem.Finalize:
//
//	var square = rpc.Register("square", rpc.Inline, func(src int, x int64) (int64, error) {
//		return x * x, nil
//	})
//
//	// on every PE, after shmem.Init:
//	if err := rpc.Start(rpc.Options{}); err != nil { ... }
//	v, err := square.Call((shmem.MyPE()+1)%shmem.NPEs(), 7).Wait() // 49
//	v, err = square.Invoke((shmem.MyPE()+1)%shmem.NPEs(), 8)     // 64: Call, then Wait
//	rpc.Stop()
//
// A Future is a handle whose result is taken once (Wait, Then, ...); its
// state then serves the function's next call, so that a round trip of
// pointer-free types allocates nothing.
//
// Calls travel as ucp active messages on the job's worker (shmem.Worker,
// ids from shmem.FirstUserAMID), over whatever transports the job uses.
// A PE serves calls while it progresses that worker: in every wait of this
// package (Future.Wait, Barrier, Flush), in every blocking routine of
// package shmem, and in Progress.
//
// Handlers run inline (Inline: in the progress of the worker, which must
// not block and must not wait) or each on a goroutine of its own
// (Goroutine). A handler registered with RegisterDeferred replies later,
// when it likes, for instance once calls of its own completed (Then).
// Below shmem.ThreadMultiple the worker serves one goroutine at a time:
// the program then calls this package from the goroutine that progresses
// (the one that called Start, as a rule), and a Goroutine handler must not
// call other PEs itself: its reply is handed to the package's callback in
// the worker's progress (ucp.Worker.ProgressRegister), so whatever
// progresses the PE next sends it, a wait in shmem (shmem.BarrierAll, say)
// as well as one of this package.
//
// Errors reach the caller as an *Error naming the PE and the function:
// ErrNotRegistered when the target has no function of that name with
// those argument and result types (a registration that differs between
// the PEs: each call carries a hash of the name and both types, and the
// target answers one it does not know with this error), ErrPanic when the
// handler panicked, the handler's own error (RemoteError), and
// ErrPeerFailed for the calls outstanding to a PE that failed (with
// Options.SurvivePeerFailure; without it a PE's failure ends the job, as
// it does in package shmem).
//
// See the package's codec notes (codec.go) for how values travel: types
// without pointers, and slices of them, as their memory; others through
// encoding/gob.
package rpc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"reflect"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/goshmem/goshmem/ucs"
)

// Mode says where a handler runs.
type Mode uint8

const (
	// Inline runs the handler in the progress of the target's worker: the
	// fastest (no goroutine, no hand-off), for handlers that return at once.
	// It must not block, nor wait for anything (a future, a shmem
	// routine).
	Inline Mode = iota
	// Goroutine runs each call's handler on a goroutine of its own, for
	// handlers that compute long or block.
	Goroutine
)

// Errors of calls, which *Error wraps.
var (
	// ErrNotRegistered: the target PE has no function registered under
	// the name with the argument and result types of the caller's.
	ErrNotRegistered = errors.New("not registered on the target PE with these argument and result types")
	// ErrPanic: the handler panicked; the message says with what.
	ErrPanic = errors.New("the handler panicked")
	// ErrPeerFailed: the target PE failed before it replied. It wraps
	// ucs.ErrConnectionReset.
	ErrPeerFailed = fmt.Errorf("the PE failed: %w", ucs.ErrConnectionReset)
	// ErrCodec: an argument or result could not be encoded or decoded.
	ErrCodec = errors.New("codec")
	// ErrNotStarted: the package is not started on this PE (Start).
	ErrNotStarted = errors.New("rpc: not started (rpc.Start after shmem.Init)")
	// ErrClosed: the aggregator was closed (Aggregator.Close, Stop).
	ErrClosed = errors.New("rpc: the aggregator is closed")
)

// Error is the error of a call: the PE it went to, the function's name,
// and the cause (ErrNotRegistered, ErrPanic, ErrPeerFailed, a RemoteError,
// a transport's error).
type Error struct {
	PE   int
	Func string
	Err  error
}

func (e *Error) Error() string {
	return "rpc: " + e.Func + " on PE " + strconv.Itoa(e.PE) + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// RemoteError is an error that a handler returned, as its message (errors
// do not travel as values).
type RemoteError string

func (e RemoteError) Error() string { return string(e) }

// Message kinds (the first byte of a message's header).
const (
	kindCall         uint8 = iota + 1 // a call that wants a reply
	kindGo                            // a call without reply
	kindBatch                         // aggregated calls without reply
	kindReply                         // the result
	kindReplyErr                      // a RemoteError
	kindReplyPanic                    // ErrPanic, with the panic's message
	kindReplyUnknown                  // ErrNotRegistered
	kindReplyCodec                    // ErrCodec, with the message
)

// hdrLen is the length of a message's header: kind (u8), 3 bytes unused,
// source PE (u32), function id (u64), call id (u64), little endian. The
// payload follows, in the active message's header when it fits there (the
// header is copied at once, so the sender's buffer is free again), or
// else as its data.
const hdrLen = 24

// entry is a registered function.
type entry struct {
	name string
	id   uint64
	mode Mode
	// exec runs a call of the function here and now: src sent it, callid
	// names it for the reply (kind says whether one is wanted), payload is
	// its argument (not kept). async says that the goroutine may not use
	// the worker (its reply is queued).
	exec func(src int, kind uint8, callid uint64, payload []byte, async bool)
}

// serve runs a call of e as its mode says: here, or on a goroutine of its
// own, with a copy of the payload (valid only during the message's
// handler).
func (e *entry) serve(src int, kind uint8, callid uint64, payload []byte) {
	if e.mode == Inline {
		e.exec(src, kind, callid, payload, false)
		return
	}
	p := append([]byte(nil), payload...)
	goHandler(func() { e.exec(src, kind, callid, p, true) })
}

// registry maps function ids to entries; replaced whole on every
// registration, so that the receive path reads it without a lock.
var (
	regMu    sync.Mutex
	registry atomic.Pointer[map[uint64]*entry]
)

// funcID is the id of a function: a hash of its name and of its argument
// and result types, so that a registration that differs between PEs is
// told apart from a missing one only by the caller, which knows the name.
func funcID(name string, a, r reflect.Type) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	h.Write([]byte{0})
	h.Write([]byte(a.String()))
	h.Write([]byte{0})
	h.Write([]byte(r.String()))
	return h.Sum64()
}

func register(e *entry) {
	regMu.Lock()
	defer regMu.Unlock()
	old := registry.Load()
	m := make(map[uint64]*entry, 1)
	if old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	if p, ok := m[e.id]; ok {
		panic(fmt.Sprintf("rpc: %q registered twice (before as %q)", e.name, p.name))
	}
	m[e.id] = e
	registry.Store(&m)
}

func lookup(id uint64) *entry {
	if m := registry.Load(); m != nil {
		return (*m)[id]
	}
	return nil
}

// Func is a function registered on every PE, which calls run: A is its
// argument's type, R its result's.
type Func[A, R any] struct {
	name string
	id   uint64
	ac   codec[A]
	rc   codec[R]
	futs futPool[R] // the states of its calls' futures, reused
}

// Name returns the name the function was registered under.
func (f *Func[A, R]) Name() string { return f.name }

// Register registers fn under name, with the mode its calls run in, and
// returns the function to call. Every PE registers the same functions,
// before Start as a rule (a call that reaches a PE before it registered
// the function fails with ErrNotRegistered). fn gets the calling PE and
// the argument; its result, or its error (as a RemoteError), goes back to
// the caller, and a panic in it reaches the caller as ErrPanic. Register
// panics when name is registered with the same types already.
func Register[A, R any](name string, mode Mode, fn func(src int, a A) (R, error)) *Func[A, R] {
	f := newFunc[A, R](name)
	exec := func(src int, kind uint8, callid uint64, payload []byte, async bool) {
		a, ok := f.decodeArg(src, kind, callid, payload, async)
		if !ok {
			return
		}
		f.run(fn, src, kind, callid, a, async)
	}
	register(&entry{name: name, id: f.id, mode: mode, exec: exec})
	return f
}

// RegisterDeferred registers fn under name, as Register does, for a
// handler that replies later: fn runs inline and gets a Reply, whose Send
// it calls once, then or later (from a future's Then, say, once calls of
// its own completed). A handler that panics before it sent replies
// ErrPanic.
func RegisterDeferred[A, R any](name string, fn func(src int, a A, reply *Reply[R])) *Func[A, R] {
	f := newFunc[A, R](name)
	exec := func(src int, kind uint8, callid uint64, payload []byte, async bool) {
		a, ok := f.decodeArg(src, kind, callid, payload, async)
		if !ok {
			return
		}
		r := &Reply[R]{f: f, src: src, callid: callid, want: kind == kindCall}
		defer func() {
			if p := recover(); p != nil && !r.sent.Swap(true) && r.want {
				replyRaw(src, kindReplyPanic, callid, panicMessage(p), async)
			}
		}()
		fn(src, a, r)
	}
	register(&entry{name: name, id: f.id, mode: Inline, exec: exec})
	return f
}

// decodeArg decodes a call's argument; when it cannot, it replies
// ErrCodec to a call that wants a reply, and returns false.
func (f *Func[A, R]) decodeArg(src int, kind uint8, callid uint64, payload []byte, async bool) (A, bool) {
	var a A
	if err := f.ac.decode(payload, &a); err != nil {
		if kind == kindCall {
			replyRaw(src, kindReplyCodec, callid, []byte(err.Error()), async)
		}
		return a, false
	}
	return a, true
}

func newFunc[A, R any](name string) *Func[A, R] {
	return &Func[A, R]{name: name, id: funcID(name, reflect.TypeFor[A](), reflect.TypeFor[R]()), ac: newCodec[A](), rc: newCodec[R]()}
}

// run runs fn for a call and replies with its result, its error or its
// panic.
func (f *Func[A, R]) run(fn func(int, A) (R, error), src int, kind uint8, callid uint64, a A, async bool) {
	defer func() {
		if p := recover(); p != nil && kind == kindCall {
			replyRaw(src, kindReplyPanic, callid, panicMessage(p), async)
		}
	}()
	v, err := fn(src, a)
	if kind != kindCall {
		return
	}
	if err != nil {
		replyRaw(src, kindReplyErr, callid, []byte(err.Error()), async)
		return
	}
	f.reply(src, callid, &v, async)
}

// reply sends the result *v of call callid to src.
func (f *Func[A, R]) reply(src int, callid uint64, v *R, async bool) {
	b := msgBuf(async)
	*b = appendHeader((*b)[:0], kindReply, 0, callid)
	var err error
	if *b, err = f.rc.appendTo(*b, v); err != nil {
		putBuf(b)
		replyRaw(src, kindReplyCodec, callid, []byte(err.Error()), async)
		return
	}
	sendOrQueue(src, b, async)
}

func panicMessage(p any) []byte {
	return fmt.Appendf(nil, "%v\n%s", p, debug.Stack())
}

// Reply is the pending reply of a call to a RegisterDeferred handler.
type Reply[R any] struct {
	f      interface{ reply(int, uint64, *R, bool) }
	src    int
	callid uint64
	want   bool // the call wants a reply (not Go)
	sent   atomic.Bool
}

// Src returns the PE that made the call.
func (r *Reply[R]) Src() int { return r.src }

// Send sends the result v, or the error err when it is not nil, to the
// caller; only its first call counts. It may be called from the handler,
// from a future's Then, or from the goroutine that progresses; at
// shmem.ThreadMultiple from any goroutine.
func (r *Reply[R]) Send(v R, err error) {
	if r.sent.Swap(true) || !r.want {
		return
	}
	if err != nil {
		replyRaw(r.src, kindReplyErr, r.callid, []byte(err.Error()), false)
		return
	}
	r.f.reply(r.src, r.callid, &v, false)
}

// replyRaw sends a reply of kind with payload p to src.
func replyRaw(src int, kind uint8, callid uint64, p []byte, async bool) {
	b := msgBuf(async)
	*b = append(appendHeader((*b)[:0], kind, 0, callid), p...)
	sendOrQueue(src, b, async)
}

func appendHeader(b []byte, kind uint8, fnid, callid uint64) []byte {
	var h [hdrLen]byte
	h[0] = kind
	binary.LittleEndian.PutUint32(h[4:], uint32(rt.me))
	binary.LittleEndian.PutUint64(h[8:], fnid)
	binary.LittleEndian.PutUint64(h[16:], callid)
	return append(b, h[:]...)
}

// Buffers of messages, reused.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

// msgBuf returns the buffer of a message that this goroutine sends now
// (not async): below ThreadMultiple, the PE's own (rt.sbuf), which no
// other goroutine may use then, else, or when in use already, one of the
// pool. send hands the PE's own back once the transport copied it, which
// it does for a message that fits in an active message's header: a call
// and its reply cost no trip to the pool.
func msgBuf(async bool) *[]byte {
	if !rt.multi && !async && !rt.sbusy {
		rt.sbusy = true
		return &rt.sbuf
	}
	return getBuf()
}

func putBuf(b *[]byte) {
	if b == &rt.sbuf {
		rt.sbusy = false
		return
	}
	if cap(*b) <= 1<<20 {
		bufPool.Put(b)
	}
}
