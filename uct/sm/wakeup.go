package sm

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
	"github.com/goshmem/goshmem/uct/internal/base"
)

// Wakeup of a sleeping receiver (see doc.go). The receive FIFO header holds
// two 32-bit words: armed, the receive events (uct.EventRecv,
// uct.EventRecvSig) the owner armed for when it is about to sleep, 0
// otherwise, and wseq, a futex word. A producer that publishes a cell whose
// events (uct.RecvEvents of its send flags) meet armed swaps armed to 0
// and, if it took a non-zero value, increments wseq and wakes the
// futex (a shared futex: the FIFO is a MAP_SHARED memfd mapping, so the
// kernel keys it by the page, not the address). A helper goroutine of the
// owner waits on wseq and turns each increment into a write to the iface's
// eventfd, which is what WakeupFD returns.
//
// Ordering: the producer stores the cell's seq then loads armed; EventArm
// stores armed then loads the cell's seq. Both are sequentially consistent
// atomics (LOCK-prefixed or XCHG on amd64 for the stores), so at least one
// of them sees the other's store: either the producer wakes the owner, or
// EventArm sees the cell and returns ucs.ErrBusy.

// notify wakes the owner of the FIFO if it is armed for one of the events
// ev of the message published. It is called after each publish; when the
// owner is not armed for them it costs one atomic load.
func (f *fifo) notify(ev uint32) {
	if atomic.LoadUint32(f.armed)&ev != 0 {
		f.wake()
	}
}

// wake disarms the owner and, if this producer was the one to disarm it,
// bumps the futex word and wakes the owner's helper.
func (f *fifo) wake() {
	if atomic.SwapUint32(f.armed, 0) != 0 {
		atomic.AddUint32(f.wseq, 1)
		ucs.FutexWake(f.wseq, false)
	}
}

// wakeup is the wakeup state of an iface.
type wakeup struct {
	mu       sync.Mutex
	started  bool // fd and the helper exist
	closed   bool
	fd       int           // the eventfd, once started
	stopping atomic.Bool   // tells the helper to exit
	done     chan struct{} // closed by the helper when it exits
}

// startWakeup creates the eventfd and starts the helper, once. It fails
// with ucs.ErrNoDevice on a closed iface, ucs.ErrIOError when no eventfd
// can be created.
func (i *Iface) startWakeup() (int, error) {
	w := &i.wake
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return -1, fmt.Errorf("uct/sm: wakeup fd of a closed iface: %w", ucs.ErrNoDevice)
	}
	if w.started {
		return w.fd, nil
	}
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return -1, fmt.Errorf("uct/sm: eventfd: %v: %w", err, ucs.ErrIOError)
	}
	w.fd, w.started, w.done = fd, true, make(chan struct{})
	go i.wakeLoop(fd, atomic.LoadUint32(i.rx.wseq), w.done)
	return fd, nil
}

// wakeLoop is the helper: it sleeps on the futex word of the FIFO and
// writes 1 to the eventfd each time the word changes, until the iface
// closes.
func (i *Iface) wakeLoop(fd int, last uint32, done chan struct{}) {
	defer close(done)
	base.BindThread(i.log, "uct/sm", "wakeup", i.cpus)
	one := [8]byte{1} // 1 as a native (little-endian) uint64
	for {
		ucs.FutexWait(i.rx.wseq, last, 0, false)
		if i.wake.stopping.Load() {
			return
		}
		if cur := atomic.LoadUint32(i.rx.wseq); cur != last {
			last = cur
			unix.Write(fd, one[:]) // EAGAIN: the counter is saturated, readable anyway
		}
	}
}

// stopWakeup stops the helper, waits for it to exit and closes the eventfd.
// Later WakeupFD and EventArm calls fail with ucs.ErrNoDevice.
func (i *Iface) stopWakeup() {
	w := &i.wake
	w.mu.Lock()
	w.closed = true
	started := w.started
	w.mu.Unlock()
	if !started {
		return
	}
	w.stopping.Store(true)
	atomic.AddUint32(i.rx.wseq, 1)
	ucs.FutexWake(i.rx.wseq, false)
	<-w.done
	unix.Close(w.fd)
}

// WakeupFD returns the iface's eventfd (EFD_CLOEXEC|EFD_NONBLOCK), created
// with its helper goroutine at the first call. It becomes readable after
// EventArm returned ucs.OK and a message arrived; the caller reads it to
// reset it. The iface owns it: Close closes it. On a closed iface it fails
// with ucs.ErrNoDevice.
func (i *Iface) WakeupFD() (int, error) { return i.startWakeup() }

// EventArm implements uct.EventArmer. EventRecv and EventRecvSig arm the
// iface: it returns ucs.ErrBusy when the FIFO holds a message that
// Progress has not delivered, ucs.OK when armed, after which the next
// message a peer publishes makes the WakeupFD descriptor readable, once:
// any message when armed for EventRecv, only one sent with
// uct.SendFlagSignaled when armed for EventRecvSig alone (the sender tells
// the kind: it loads the armed events). EventSendComp and
// EventTagComp are accepted and never fire (every send completes on return);
// events with only those return ucs.OK without arming. Unknown event bits
// fail with ucs.ErrInvalidParam, a closed iface with ucs.ErrNoDevice, an
// eventfd that cannot be created with ucs.ErrIOError. EventArm starts the
// helper itself, so it may come before the first WakeupFD call.
func (i *Iface) EventArm(events uint32) ucs.Status {
	recv, st := uct.ArmedRecvEvents(events)
	if recv == 0 {
		return st
	}
	if _, err := i.startWakeup(); err != nil {
		if s := ucs.ErrIOError; errors.As(err, &s) {
			return s
		}
		return ucs.ErrIOError
	}
	if i.multi {
		i.progMu.Lock()
		defer i.progMu.Unlock()
	}
	if i.rx.ready(&i.rxc) != nil {
		return ucs.ErrBusy
	}
	if i.rxc.t != i.rxDone {
		i.releaseCells() // the ring is empty: all of it to the producers
	}
	atomic.StoreUint32(i.rx.armed, recv)
	if i.rx.ready(&i.rxc) != nil {
		// A producer published before it could see armed: do not sleep.
		// If one disarmed meanwhile, the descriptor gets a spurious write.
		atomic.StoreUint32(i.rx.armed, 0)
		return ucs.ErrBusy
	}
	return ucs.OK
}

var _ uct.EventArmer = (*Iface)(nil)
