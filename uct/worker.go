package uct

import (
	"sync"
	"sync/atomic"

	"github.com/goshmem/goshmem/ucs"
)

// Worker groups ifaces that are progressed together (uct_worker_h). The
// progress callbacks registered with it are called, in registration order,
// by Progress; a callback that is disabled (SetProgressEnabled) keeps its
// place and id but is called only now and then, until its first event
// enables it again.
type Worker struct {
	mode   ucs.ThreadMode
	signal atomic.Pointer[func(uint32)]
	mu     sync.Mutex   // serializes registration
	regs   []progressCB // every registration, enabled or not; under mu
	// set is what Progress calls, without a lock: a new one is stored,
	// under mu, at each change of the registrations, so that a Progress
	// running meanwhile finishes with the one it loaded.
	set atomic.Pointer[progressSet]
	// busy counts the Progress calls whose enabled callbacks found work,
	// so that every ColdProgressEvery-th looks at the disabled ones too
	// (atomic in ucs.ThreadModeMulti).
	busy uint32
	next int
}

// ColdProgressEvery is how often Progress calls the disabled callbacks
// when the enabled ones found work: every ColdProgressEvery-th such call.
// A call whose enabled callbacks found nothing calls them always.
const ColdProgressEvery = 16

// Progresser is what a worker's progress calls: an iface registered with
// ProgressAdd (its Progress method, called through the interface with no
// wrapper), or a function registered with ProgressRegister.
type Progresser interface {
	// Progress does pending work and returns the number of events handled.
	Progress() int
}

// progressFunc is a function registered with ProgressRegister.
type progressFunc func() int

func (f progressFunc) Progress() int { return f() }

// progressSet is the callbacks a Progress call runs, in one value that
// Progress loads with one atomic load.
type progressSet struct {
	hot  []Progresser // the enabled registrations' Progressers, in order
	cold []Progresser // the disabled registrations' Progressers, nil when none is
	// coldIDs are the ids of cold's registrations, for their enabling.
	coldIDs []int
}

type progressCB struct {
	id   int
	p    Progresser
	key  any // ProgressRegisterShared's key; nil otherwise
	refs int // registrations under key not yet unregistered
	off  bool
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
func (w *Worker) ProgressRegister(fn func() int) int { return w.ProgressAdd(progressFunc(fn)) }

// ProgressAdd is ProgressRegister of p's Progress method: an iface
// registers itself this way, so that Progress calls its method through the
// interface, without the wrapper a method value costs.
func (w *Worker) ProgressAdd(p Progresser) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.addLocked(p, nil)
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
	for i := range w.regs {
		if cb := &w.regs[i]; cb.key == key {
			cb.refs++
			return cb.id
		}
	}
	return w.addLocked(progressFunc(fn), key)
}

// addLocked appends an enabled callback with one reference; w.mu is held.
func (w *Worker) addLocked(p Progresser, key any) int {
	w.next++
	w.regs = append(w.regs, progressCB{id: w.next, p: p, key: key, refs: 1})
	w.publishLocked()
	return w.next
}

// publishLocked stores a new list of the enabled callbacks for Progress;
// w.mu is held. The list is copied, never changed in place, so that a
// Progress running meanwhile iterates the one it loaded.
func (w *Worker) publishLocked() {
	s := &progressSet{hot: make([]Progresser, 0, len(w.regs))}
	for i := range w.regs {
		if w.regs[i].off {
			s.cold = append(s.cold, w.regs[i].p)
			s.coldIDs = append(s.coldIDs, w.regs[i].id)
		} else {
			s.hot = append(s.hot, w.regs[i].p)
		}
	}
	w.set.Store(s)
}

// ProgressUnregister drops a reference to the callback registered with id
// and removes the callback when none is left (always for one of
// ProgressRegister and ProgressAdd); an unknown id is ignored.
func (w *Worker) ProgressUnregister(id int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range w.regs {
		if cb := &w.regs[i]; cb.id == id {
			if cb.refs--; cb.refs > 0 {
				return
			}
			w.regs = append(w.regs[:i:i], w.regs[i+1:]...)
			w.publishLocked()
			return
		}
	}
}

// SetProgressEnabled enables or disables the callback registered with id
// (uct_iface_progress_enable and uct_iface_progress_disable act on an
// iface's callback this way). A disabled callback keeps its id, place and
// references, but Progress calls it only when the enabled callbacks found
// nothing, and on every ColdProgressEvery-th of the other calls; the
// first call in which it reports an event enables it again. That is
// UCX's adaptive progress: an iface that nobody uses costs a busy worker
// almost nothing, and a message that comes to it waits a few Progress
// calls at most (the wait loop that expects it calls Progress, finding
// nothing elsewhere, until it comes). A registration starts enabled; an
// unknown id is ignored. Like registration, it may allocate and take a
// lock: it is not for hot paths.
func (w *Worker) SetProgressEnabled(id int, enabled bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range w.regs {
		if cb := &w.regs[i]; cb.id == id {
			if cb.off == !enabled {
				return
			}
			cb.off = !enabled
			w.publishLocked()
			return
		}
	}
}

// Progress calls every enabled callback once, and the disabled ones when
// due (see SetProgressEnabled), and returns the sum of the events they
// report (uct_worker_progress).
func (w *Worker) Progress() int {
	s := w.set.Load()
	if s == nil {
		return 0
	}
	n := 0
	// One enabled callback, the usual case, is called without a loop:
	// the loop's index and bounds, which live across the call, are
	// stored and loaded around it.
	if len(s.hot) == 1 {
		n = s.hot[0].Progress()
	} else {
		for _, p := range s.hot {
			n += p.Progress()
		}
	}
	if s.cold != nil && (n == 0 || w.coldDue()) {
		// One disabled callback (with sm, the transport an endpoint did
		// not choose) is called here: a receiver that waits calls it at
		// every empty poll, and a frame of progressCold's cost more than
		// the callback.
		if len(s.cold) == 1 {
			if k := s.cold[0].Progress(); k > 0 {
				w.enableCold(s.coldIDs[0])
				n += k
			}
		} else {
			n += w.progressCold(s)
		}
	}
	return n
}

// coldDue reports whether a Progress call whose enabled callbacks found
// work calls the disabled ones too.
func (w *Worker) coldDue() bool {
	if w.mode == ucs.ThreadModeMulti {
		return atomic.AddUint32(&w.busy, 1)%ColdProgressEvery == 0
	}
	w.busy++
	return w.busy%ColdProgressEvery == 0
}

// progressCold calls the disabled callbacks of s, enabling each that
// reports an event, and returns the sum of their events.
func (w *Worker) progressCold(s *progressSet) int {
	n := 0
	for i, p := range s.cold {
		if k := p.Progress(); k > 0 {
			w.enableCold(s.coldIDs[i])
			n += k
		}
	}
	return n
}

// enableCold enables the disabled callback id that reported an event.
// (Out of line: progressCold, which a waiting receiver runs again and
// again, keeps no frame for the call it rarely makes.)
//
//go:noinline
func (w *Worker) enableCold(id int) { w.SetProgressEnabled(id, true) }

// ProgressEnabled reports whether the callback registered with id is
// enabled (false for an unknown id).
func (w *Worker) ProgressEnabled(id int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range w.regs {
		if w.regs[i].id == id {
			return !w.regs[i].off
		}
	}
	return false
}
