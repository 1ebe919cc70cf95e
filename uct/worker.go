package uct

import (
	"sync"
	"sync/atomic"

	"github.com/goshmem/goshmem/ucs"
)

// Worker groups ifaces that are progressed together (uct_worker_h). The
// progress callbacks registered with it are called, in registration order,
// by Progress.
type Worker struct {
	mode   ucs.ThreadMode
	signal atomic.Pointer[func(uint32)]
	mu     sync.Mutex // serializes registration
	cbs    atomic.Pointer[[]progressCB]
	next   int
}

type progressCB struct {
	id   int
	fn   func() int
	key  any // ProgressRegisterShared's key; nil for ProgressRegister
	refs int // registrations under key not yet unregistered
}

// NewWorker creates a worker with the given thread mode (uct_worker_create).
func NewWorker(mode ucs.ThreadMode) *Worker { return &Worker{mode: mode} }

// SetSignal sets the function Signal calls, with the Event* kinds
// reported; nil removes it. A worker's user (ucp) sets it to wake a
// goroutine that waits for events.
func (w *Worker) SetSignal(fn func(events uint32)) {
	if fn == nil {
		w.signal.Store(nil)
		return
	}
	w.signal.Store(&fn)
}

// Signal tells the worker's user that an interface has work for Progress
// (a received message, a completion). Transports whose receive paths run on
// their own goroutines call it after queueing work; it is cheap and safe from
// any goroutine. events are the Event* kinds of the work (EventSendComp
// for completions, RecvEvents of a message's send flags for a message,
// EventAll when the kind is not known), so that a user armed for some
// kinds only can let the others wait for its next Progress.
func (w *Worker) Signal(events uint32) {
	if fn := w.signal.Load(); fn != nil {
		(*fn)(events)
	}
}

// ThreadMode returns the mode the worker was created with.
func (w *Worker) ThreadMode() ucs.ThreadMode { return w.mode }

// ProgressRegister adds fn to the worker's progress and returns an id for
// ProgressUnregister (uct_worker_progress_register_safe). Each call adds a
// callback of its own.
func (w *Worker) ProgressRegister(fn func() int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.addLocked(fn, nil)
}

// ProgressRegisterShared adds fn to the worker's progress under key, with
// the reference count of uct_worker_progress_register: when a callback is
// registered under key already, its count is incremented and its id
// returned (fn is then not added again); ProgressUnregister of the id
// decrements the count and removes the callback only when it drops to
// zero. key stands for UCX's pair of function and argument (an iface, or
// a struct of both); it must be comparable and not nil, or the call
// panics. Like UCX's, the call may be slow: it is not for hot paths.
func (w *Worker) ProgressRegisterShared(key any, fn func() int) int {
	if key == nil {
		panic("uct: ProgressRegisterShared with a nil key")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if p := w.cbs.Load(); p != nil {
		for i := range *p {
			if cb := &(*p)[i]; cb.key == key {
				// Progress reads only id and fn: refs may change in place.
				cb.refs++
				return cb.id
			}
		}
	}
	return w.addLocked(fn, key)
}

// addLocked appends a callback with one reference; w.mu is held.
func (w *Worker) addLocked(fn func() int, key any) int {
	w.next++
	// Copy on write, so that Progress iterates without a lock.
	var old []progressCB
	if p := w.cbs.Load(); p != nil {
		old = *p
	}
	cbs := make([]progressCB, len(old), len(old)+1)
	copy(cbs, old)
	cbs = append(cbs, progressCB{id: w.next, fn: fn, key: key, refs: 1})
	w.cbs.Store(&cbs)
	return w.next
}

// ProgressUnregister drops a reference to the callback registered with id
// and removes the callback when none is left (always for one of
// ProgressRegister); an unknown id is ignored.
func (w *Worker) ProgressUnregister(id int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.cbs.Load()
	if p == nil {
		return
	}
	cbs := make([]progressCB, 0, len(*p))
	for i, cb := range *p {
		if cb.id == id {
			if (*p)[i].refs--; (*p)[i].refs > 0 {
				return // the entry in place keeps the count
			}
			continue
		}
		cbs = append(cbs, cb)
	}
	w.cbs.Store(&cbs)
}

// Progress calls every registered callback once and returns the sum of the
// events they report (uct_worker_progress).
func (w *Worker) Progress() int {
	p := w.cbs.Load()
	if p == nil {
		return 0
	}
	n := 0
	// By index, reading fn alone: a copy of the entry would read refs,
	// which ProgressUnregister changes in place.
	cbs := *p
	for i := range cbs {
		n += cbs[i].fn()
	}
	return n
}
