package rpc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/goshmem/goshmem/shmem"
)

// Future is the result of a call, to come. Wait and WaitContext wait for
// it, progressing this PE meanwhile (so it serves the calls of others);
// Then chains a function to it; WaitAny and WaitAll wait for several.
type Future[R any] struct {
	done atomic.Bool
	val  R
	err  error

	pe   int
	name string
	rc   *codec[R]

	mu    sync.Mutex // guards what follows, against Then and Done (at ThreadMultiple: see lock)
	then  []func()
	ready chan struct{}
}

// Waitable is what WaitAny and WaitAll wait for: a *Future of any type.
type Waitable interface {
	// Ready reports whether the future completed.
	Ready() bool
}

// Ready reports whether the future completed (without progressing).
func (f *Future[R]) Ready() bool { return f.done.Load() }

// Wait waits until the call completed, progressing this PE meanwhile, and
// returns its result or its error (an *Error).
func (f *Future[R]) Wait() (R, error) {
	for !f.done.Load() {
		if Progress() == 0 {
			idle()
		}
	}
	return f.val, f.err
}

// WaitContext is Wait that gives up when ctx ends, returning ctx's error
// (the call goes on; its reply, if it comes, is then dropped).
func (f *Future[R]) WaitContext(ctx context.Context) (R, error) {
	for !f.done.Load() {
		if err := ctx.Err(); err != nil {
			var zero R
			return zero, fmt.Errorf("rpc: %s on PE %d: %w", f.name, f.pe, err)
		}
		if Progress() == 0 {
			idle()
		}
	}
	return f.val, f.err
}

// Result returns the result and error of a completed future (zero and nil
// before).
func (f *Future[R]) Result() (R, error) {
	if !f.done.Load() {
		var zero R
		return zero, nil
	}
	return f.val, f.err
}

// Done returns a channel closed when the future completes, for a select.
// The future completes only while some goroutine progresses this PE (Wait,
// Progress): a select with it belongs to a goroutine other than that one
// at shmem.ThreadMultiple, or in a loop that calls Progress.
func (f *Future[R]) Done() <-chan struct{} {
	lock(&f.mu)
	defer unlock(&f.mu)
	if f.ready == nil {
		f.ready = make(chan struct{})
		if f.done.Load() {
			close(f.ready)
		}
	}
	return f.ready
}

// onDone runs fn when the future completes (at once if it did), from the
// progress that completes it.
func (f *Future[R]) onDone(fn func()) {
	lock(&f.mu)
	if !f.done.Load() {
		f.then = append(f.then, fn)
		unlock(&f.mu)
		return
	}
	unlock(&f.mu)
	fn()
}

// Then returns the future of fn applied to f's result and error, which
// runs when f completes, from the progress that completes it (so it must
// not wait, as an Inline handler must not); it may make calls, and a
// RegisterDeferred handler may send its reply from it.
func Then[R, S any](f *Future[R], fn func(R, error) (S, error)) *Future[S] {
	g := &Future[S]{pe: f.pe, name: f.name}
	f.onDone(func() { g.finish(fn(f.val, f.err)) })
	return g
}

// finish completes the future with v and err.
func (f *Future[R]) finish(v R, err error) {
	f.val, f.err = v, err
	lock(&f.mu)
	f.done.Store(true)
	then := f.then
	f.then = nil
	if f.ready != nil {
		close(f.ready)
	}
	unlock(&f.mu)
	for _, fn := range then {
		fn()
	}
}

func (f *Future[R]) target() int { return f.pe }

func (f *Future[R]) fail(err error) {
	var zero R
	f.finish(zero, &Error{PE: f.pe, Func: f.name, Err: err})
}

// complete completes the future with the reply of kind and payload.
func (f *Future[R]) complete(kind uint8, payload []byte) {
	switch kind {
	case kindReply:
		var v R
		if err := f.rc.decode(payload, &v); err != nil {
			f.fail(err)
			return
		}
		f.finish(v, nil)
	case kindReplyErr:
		f.fail(RemoteError(payload))
	case kindReplyPanic:
		f.fail(fmt.Errorf("%w: %s", ErrPanic, payload))
	case kindReplyUnknown:
		f.fail(ErrNotRegistered)
	case kindReplyCodec:
		f.fail(fmt.Errorf("%w: %s", ErrCodec, payload))
	default:
		f.fail(fmt.Errorf("%w: reply of unknown kind %d", ErrCodec, kind))
	}
}

// Call calls the function on PE pe with argument a, and returns the
// future of its result. Errors (a PE outside the job, the package not
// started, a send that failed) complete the future at once.
func (f *Func[A, R]) Call(pe int, a A) *Future[R] {
	fut := &Future[R]{pe: pe, name: f.name, rc: &f.rc}
	f.start(fut, pe, &a)
	return fut
}

// Invoke calls the function on PE pe with argument a and waits for its
// result, as Call(pe, a).Wait() does, progressing this PE meanwhile, but
// without a future to keep: the future is the package's, reused by later
// calls, so a round trip of pointer-free argument and result types
// allocates nothing.
func (f *Func[A, R]) Invoke(pe int, a A) (R, error) {
	fut, _ := f.futs.Get().(*Future[R])
	if fut == nil {
		fut = new(Future[R])
	}
	fut.pe, fut.name, fut.rc = pe, f.name, &f.rc
	f.start(fut, pe, &a)
	v, err := fut.Wait()
	// Nothing holds the future now: its slot was freed before it
	// completed, and a late reply carries the slot's older generation.
	// Wait returns once done is set, while the goroutine that completed
	// the future may still hold its lock (ThreadMultiple): taking it
	// waits for that goroutine to let go before the future is reused.
	lock(&fut.mu)
	unlock(&fut.mu)
	*fut = Future[R]{}
	f.futs.Put(fut)
	return v, err
}

// start makes the call of fut (to pe, with argument *a), or fails it.
func (f *Func[A, R]) start(fut *Future[R], pe int, a *A) {
	if err := f.check(pe); err != nil {
		fut.fail(err)
		return
	}
	id := rt.pend.add(fut)
	if err := f.send(pe, kindCall, id, a); err != nil {
		rt.pend.take(id)
		fut.fail(err)
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
func (f *Func[A, R]) CallTeam(team *shmem.Team, a A) []*Future[R] {
	n := team.NPEs()
	futs := make([]*Future[R], max(n, 0))
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
	b := getBuf()
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
// meanwhile, and returns their results and the errors joined
// (errors.Join), nil when every call succeeded.
func WaitAll[R any](fs []*Future[R]) ([]R, error) {
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
