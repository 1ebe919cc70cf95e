package rpc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/goshmem/goshmem/shmem"
)

// Future is the result of a call, to come: a small handle, passed and
// copied by value, whose result is taken once, as a C++ std::future's is.
// Wait and WaitContext wait for it, progressing this PE meanwhile (so it
// serves the calls of others), and take the result; Then chains a
// function to it, which takes it; WaitAny and WaitAll wait for several.
//
// Once the result was taken, the future's state goes back to its
// function, for a later call: that is why a round trip of pointer-free
// types allocates nothing. A handle whose result was taken is spent:
// Ready reports true, Done returns a closed channel, and Wait, WaitContext,
// Result and Then's function get ErrTaken. The zero Future is spent.
type Future[R any] struct {
	s   *futState[R]
	gen uint32 // of s when the call began; s.gen moves on when the result is taken
}

// futState is the state of a call's future, reused by the function's
// later calls once its result was taken.
type futState[R any] struct {
	gen  atomic.Uint32 // moves on when the result is taken: older handles are spent
	done atomic.Bool
	val  R
	err  error

	pe   int
	name string
	rc   *codec[R]
	pool *futPool[R] // where the state goes back once taken; nil: nowhere

	mu    sync.Mutex // guards what follows, against Then and Done (at ThreadMultiple: see lock)
	then  []func()
	ready chan struct{}
}

// ErrTaken: the future's result was taken already (by Wait, WaitContext,
// Result, Then or WaitAll): a future gives its result once.
var ErrTaken = errors.New("rpc: the future's result was taken already")

// closed is the channel that Done returns for a spent future.
var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Waitable is what WaitAny waits for: a Future of any type.
type Waitable interface {
	// Ready reports whether the future completed.
	Ready() bool
}

// Ready reports whether the future completed (without progressing); true
// for a spent future.
func (f Future[R]) Ready() bool {
	s := f.s
	return s == nil || s.gen.Load() != f.gen || s.done.Load()
}

// Wait waits until the call completed, progressing this PE meanwhile, and
// takes its result or its error (an *Error; ErrTaken when the result was
// taken already).
func (f Future[R]) Wait() (R, error) {
	for !f.Ready() {
		if Progress() == 0 {
			idle()
		}
	}
	return f.take()
}

// WaitContext is Wait that gives up when ctx ends, returning ctx's error;
// the future is not spent then: the call goes on, and a later wait may
// still take its result.
func (f Future[R]) WaitContext(ctx context.Context) (R, error) {
	for !f.Ready() {
		if err := ctx.Err(); err != nil {
			var zero R
			return zero, fmt.Errorf("rpc: %s on PE %d: %w", f.s.name, f.s.pe, err)
		}
		if Progress() == 0 {
			idle()
		}
	}
	return f.take()
}

// Result takes the result and error of a completed future, without
// waiting; before it completed, it returns zero and nil, and the future
// is not spent.
func (f Future[R]) Result() (R, error) {
	if !f.Ready() {
		var zero R
		return zero, nil
	}
	return f.take()
}

// take takes the result of a completed future and hands its state back
// for reuse; of a spent one, it returns ErrTaken. Of two goroutines that
// take one future at once (ThreadMultiple), one gets the result.
func (f Future[R]) take() (R, error) {
	s := f.s
	if s == nil || !s.gen.CompareAndSwap(f.gen, f.gen+1) {
		var zero R
		return zero, ErrTaken
	}
	v, err := s.val, s.err
	s.recycle()
	return v, err
}

// recycle clears a state whose result was taken and hands it back to its
// pool. Nothing else holds it: its call left the pending table before it
// completed (a late reply carries the slot's older generation), and its
// handles are spent. The goroutine that completed it may still hold its
// lock (ThreadMultiple): taking the lock waits for that goroutine to let
// go.
func (s *futState[R]) recycle() {
	lock(&s.mu)
	var zero R
	s.val, s.err = zero, nil
	s.done.Store(false)
	s.then, s.ready = nil, nil
	unlock(&s.mu)
	if s.pool != nil {
		s.pool.put(s)
	}
}

// futPool holds a function's future states for reuse: one at hand, which
// a program that waits for each call before the next (the common case)
// takes and gives back with an atomic swap each, and others in a
// sync.Pool.
type futPool[R any] struct {
	spare atomic.Pointer[futState[R]]
	more  sync.Pool
}

// get returns a state, or nil when the pool has none.
func (p *futPool[R]) get() *futState[R] {
	if s := p.spare.Swap(nil); s != nil {
		return s
	}
	s, _ := p.more.Get().(*futState[R])
	return s
}

func (p *futPool[R]) put(s *futState[R]) {
	if !p.spare.CompareAndSwap(nil, s) {
		p.more.Put(s)
	}
}

// Done returns a channel closed when the future completes, for a select
// (closed at once for a spent future). The future completes only while
// some goroutine progresses this PE (Wait, Progress): a select with it
// belongs to a goroutine other than that one at shmem.ThreadMultiple, or
// in a loop that calls Progress.
func (f Future[R]) Done() <-chan struct{} {
	s := f.s
	if s == nil {
		return closed
	}
	lock(&s.mu)
	defer unlock(&s.mu)
	if s.gen.Load() != f.gen {
		return closed
	}
	if s.ready == nil {
		s.ready = make(chan struct{})
		if s.done.Load() {
			close(s.ready)
		}
	}
	return s.ready
}

// onDone runs fn when the future completes (at once if it did, or is
// spent), from the progress that completes it.
func (f Future[R]) onDone(fn func()) {
	if s := f.s; s != nil {
		lock(&s.mu)
		if s.gen.Load() == f.gen && !s.done.Load() {
			s.then = append(s.then, fn)
			unlock(&s.mu)
			return
		}
		unlock(&s.mu)
	}
	fn()
}

// Then returns the future of fn applied to f's result and error, which
// runs when f completes, from the progress that completes it (so it must
// not wait, as an Inline handler must not); it takes f's result. fn may
// make calls, and a RegisterDeferred handler may send its reply from it.
func Then[R, S any](f Future[R], fn func(R, error) (S, error)) Future[S] {
	g := &futState[S]{}
	if f.s != nil {
		g.pe, g.name = f.s.pe, f.s.name
	}
	f.onDone(func() { g.finish(fn(f.take())) })
	return Future[S]{s: g, gen: g.gen.Load()}
}

// finish completes the future with v and err.
func (s *futState[R]) finish(v R, err error) {
	s.val, s.err = v, err
	lock(&s.mu)
	s.done.Store(true)
	then := s.then
	s.then = nil
	if s.ready != nil {
		close(s.ready)
	}
	unlock(&s.mu)
	for _, fn := range then {
		fn()
	}
}

func (s *futState[R]) target() int { return s.pe }

func (s *futState[R]) fail(err error) {
	var zero R
	s.finish(zero, &Error{PE: s.pe, Func: s.name, Err: err})
}

// complete completes the future with the reply of kind and payload.
func (s *futState[R]) complete(kind uint8, payload []byte) {
	switch kind {
	case kindReply:
		var v R
		if err := s.rc.decode(payload, &v); err != nil {
			s.fail(err)
			return
		}
		s.finish(v, nil)
	case kindReplyErr:
		s.fail(RemoteError(payload))
	case kindReplyPanic:
		s.fail(fmt.Errorf("%w: %s", ErrPanic, payload))
	case kindReplyUnknown:
		s.fail(ErrNotRegistered)
	case kindReplyCodec:
		s.fail(fmt.Errorf("%w: %s", ErrCodec, payload))
	default:
		s.fail(fmt.Errorf("%w: reply of unknown kind %d", ErrCodec, kind))
	}
}

// Call calls the function on PE pe with argument a, and returns the
// future of its result. Errors (a PE outside the job, the package not
// started, a send that failed) complete the future at once. The future's
// state is the function's, reused once its result was taken: a round
// trip of pointer-free argument and result types allocates nothing.
func (f *Func[A, R]) Call(pe int, a A) Future[R] {
	s := f.futs.get()
	if s == nil {
		s = &futState[R]{rc: &f.rc, name: f.name, pool: &f.futs}
	}
	s.pe = pe
	f.start(s, pe, &a)
	return Future[R]{s: s, gen: s.gen.Load()}
}

// Invoke calls the function on PE pe with argument a and waits for its
// result, progressing this PE meanwhile: Call(pe, a).Wait().
func (f *Func[A, R]) Invoke(pe int, a A) (R, error) {
	return f.Call(pe, a).Wait()
}

// start makes the call of s (to pe, with argument *a), or fails it.
func (f *Func[A, R]) start(s *futState[R], pe int, a *A) {
	if err := f.check(pe); err != nil {
		s.fail(err)
		return
	}
	id := rt.pend.add(s)
	if err := f.send(pe, kindCall, id, a); err != nil {
		rt.pend.take(id)
		s.fail(err)
	}
}

// Go calls the function on PE pe with argument a without waiting for, or
// getting, its result: a handler's error or panic is lost (logged at the
// target for a function it does not know). Barrier (or Quiet) makes sure
// the calls were served. It fails, as an *Error, when the call cannot be
// sent.
func (f *Func[A, R]) Go(pe int, a A) error {
	if err := f.check(pe); err != nil {
		return &Error{PE: pe, Func: f.name, Err: err}
	}
	rt.touched[pe].Store(true)
	if err := f.send(pe, kindGo, 0, &a); err != nil {
		return &Error{PE: pe, Func: f.name, Err: err}
	}
	return nil
}

// CallTeam calls the function on every PE of team (team's PE i gets the
// i-th future), with argument a.
func (f *Func[A, R]) CallTeam(team *shmem.Team, a A) []Future[R] {
	n := team.NPEs()
	futs := make([]Future[R], max(n, 0))
	for i := range futs {
		futs[i] = f.Call(shmem.TeamTranslatePE(team, i, shmem.TeamWorld), a)
	}
	return futs
}

func (f *Func[A, R]) check(pe int) error {
	if !rt.started.Load() {
		return ErrNotStarted
	}
	if pe < 0 || pe >= rt.n {
		return fmt.Errorf("PE %d is not a PE of the job (0..%d)", pe, rt.n-1)
	}
	return deadErr(pe)
}

// send sends a call of the function with argument *a to pe.
func (f *Func[A, R]) send(pe int, kind uint8, callid uint64, a *A) error {
	b := msgBuf(false)
	*b = appendHeader((*b)[:0], kind, f.id, callid)
	var err error
	if *b, err = f.ac.appendTo(*b, a); err != nil {
		putBuf(b)
		return err
	}
	return send(pe, b)
}

// WaitAny waits until one of fs completed, progressing this PE meanwhile,
// and returns its index (-1 for none given).
func WaitAny(fs ...Waitable) int {
	if len(fs) == 0 {
		return -1
	}
	for {
		for i, f := range fs {
			if f.Ready() {
				return i
			}
		}
		if Progress() == 0 {
			idle()
		}
	}
}

// WaitAll waits until every future of fs completed, progressing this PE
// meanwhile, takes their results, and returns them and the errors joined
// (errors.Join), nil when every call succeeded.
func WaitAll[R any](fs []Future[R]) ([]R, error) {
	vals := make([]R, len(fs))
	var errs []error
	for i, f := range fs {
		v, err := f.Wait()
		vals[i] = v
		if err != nil {
			errs = append(errs, err)
		}
	}
	return vals, errors.Join(errs...)
}
