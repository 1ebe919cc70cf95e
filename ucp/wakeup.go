package ucp

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// Wakeup (FeatureWakeup): a worker can be waited for with poll/epoll
// instead of a busy Progress loop.
//
// The worker's event descriptor is an epoll descriptor (its own, or the
// caller's with WorkerParams.SetEventFD) that holds:
//
//   - the wakeup descriptor of each interface whose transport implements
//     uct.EventArmer (shared memory, self): armed, it becomes readable when
//     a message arrives in the interface;
//   - an eventfd of the worker, written by Signal, and, while the worker is
//     armed, at the first event of a kind it is armed for reported by a
//     transport without a wakeup descriptor (tcp: a received message or
//     completion, through uct.Worker.Signal with its uct.Event* kinds), by
//     the software protocols (a reply or remote operation handled on a
//     receive goroutine) and by a peer failure.
//
// The events mask (WorkerParams.SetEvents) chooses what the interfaces
// are armed for (armEvents): receive events (WakeupTagRecv, WakeupRX)
// arm for every message (uct.EventRecv); send events alone (WakeupRMA,
// WakeupAMO, WakeupTagSend, WakeupTX) arm for send completions and for
// signaled messages only (uct.EventRecvSig). The messages that carry no
// new receive (replies, acknowledgements, rendezvous steps, software RMA:
// see uctSendFlags) are sent signaled, so that a send waiting for its reply,
// or a peer waiting for this worker's answer, still wakes it, while a
// message that starts a receive (eager data, a rendezvous announcement)
// waits for the next Progress.
//
// The protocol is UCX's: progress until Progress returns 0, then Arm; if
// Arm returns ucs.ErrBusy, events are pending: progress again; if it
// returns nil, wait for the descriptor (or call Wait), then progress.
//
// Arm tells pending events by three means: the worker's eventfd was
// written (a Signal), an event was reported since the last Progress began
// (a counter that every report increments and every Progress samples), or
// an interface's EventArm answers ucs.ErrBusy (a message waits in it).

// wakeState is the wakeup state of a worker.
type wakeState struct {
	enabled   bool   // FeatureWakeup: the fields below are set
	external  bool   // epfd is the caller's
	uctEvents uint32 // what the interfaces are armed for
	epollFlag uint32 // EPOLLIN, with EPOLLET for WakeupEdge
	sigfd     int    // the worker's eventfd
	epfd      int    // the event descriptor
	armers    []wakeIface
	armed     atomic.Bool   // Arm succeeded: the next event writes sigfd
	evSeq     atomic.Uint64 // events reported so far
	progSeq   atomic.Uint64 // evSeq when the last Progress began
	mu        sync.Mutex    // serializes Arm, Signal and closing
	closed    bool          // the worker is being destroyed; guarded by mu
}

// wakeIface is an interface with a wakeup descriptor.
type wakeIface struct {
	armer uct.EventArmer
	fd    int
}

// initWakeup creates the worker's eventfd and epoll descriptor (or joins
// the external one) and adds the interfaces' wakeup descriptors.
func (w *Worker) initWakeup() (err error) {
	ws := &w.wake
	p := &w.params
	events := wakeupAll
	if p.FieldMask&WorkerParamFieldEvents != 0 {
		events = p.Events
	}
	ws.uctEvents = armEvents(events)
	ws.epollFlag = unix.EPOLLIN
	if events&WakeupEdge != 0 {
		ws.epollFlag |= unix.EPOLLET
	}
	if ws.sigfd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return fmt.Errorf("wakeup eventfd: %v: %w", err, ucs.ErrIOError)
	}
	var added []int
	defer func() {
		if err != nil {
			for _, fd := range added {
				unix.EpollCtl(ws.epfd, unix.EPOLL_CTL_DEL, fd, nil)
			}
			if !ws.external {
				unix.Close(ws.epfd)
			}
			unix.Close(ws.sigfd)
		}
	}()
	if p.FieldMask&WorkerParamFieldEventFD != 0 {
		ws.epfd, ws.external = p.EventFD, true
	} else if ws.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return fmt.Errorf("wakeup epoll: %v: %w", err, ucs.ErrIOError)
	}
	data := epollData(p)
	add := func(fd int) error {
		ev := unix.EpollEvent{Events: ws.epollFlag, Fd: int32(uint32(data)), Pad: int32(uint32(data >> 32))}
		if err := unix.EpollCtl(ws.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
			if ws.external {
				return fmt.Errorf("add to the external event descriptor %d: %v: %w", ws.epfd, err, ucs.ErrInvalidParam)
			}
			return fmt.Errorf("wakeup epoll add: %v: %w", err, ucs.ErrIOError)
		}
		added = append(added, fd)
		return nil
	}
	if err = add(ws.sigfd); err != nil {
		return err
	}
	for _, wi := range w.ifaces {
		a, ok := wi.iface.(uct.EventArmer)
		if !ok {
			continue
		}
		fd, ferr := wi.iface.WakeupFD()
		if ferr != nil {
			continue // an interface without a descriptor reports through Signal
		}
		if err = add(fd); err != nil {
			return err
		}
		ws.armers = append(ws.armers, wakeIface{a, fd})
	}
	ws.enabled = true
	return nil
}

// epollData returns the epoll_data the worker registers its descriptors
// with: its user data when that is an integer, 0 otherwise.
func epollData(p *WorkerParams) uint64 {
	if p.FieldMask&WorkerParamFieldUserData == 0 {
		return 0
	}
	switch v := p.UserData.(type) {
	case int:
		return uint64(v)
	case int32:
		return uint64(v)
	case int64:
		return uint64(v)
	case uint32:
		return uint64(v)
	case uint64:
		return v
	case uintptr:
		return uint64(v)
	}
	return 0
}

// armEvents returns the uct events the interfaces are armed for, and that
// wake the worker, for its Wakeup* events mask (see the top of the file).
func armEvents(events uint32) uint32 {
	switch {
	case events&(WakeupTagRecv|WakeupRX) != 0:
		return uct.EventRecv | uct.EventRecvSig | uct.EventSendComp
	case events&(WakeupRMA|WakeupAMO|WakeupTagSend|WakeupTX) != 0:
		return uct.EventRecvSig | uct.EventSendComp
	}
	return 0
}

// signaledIDs marks the uct ids of the messages sent with
// uct.SendFlagSignaled: those that start no receive but carry a step of an
// operation under way, the sender's or the receiver's (see the top of the
// file). The messages of amUCP all start a receive (or carry a reply
// endpoint's address): the rendezvous steps of active messages travel as
// the tag protocol's.
var signaledIDs = func() (s [uct.AMMaxID]bool) {
	for _, id := range []uint8{
		amTagAck, amTagATS, amTagRTR, amTagData, amTagATP, amTagRevoke,
		amSwPut, amSwGetReq, amSwGetRep, amSwAtomicReq, amSwAtomicRep,
		amSwFlushReq, amSwFlushRep, amSwWireup,
	} {
		s[id] = true
	}
	return s
}()

// uctSendFlags returns the uct send flags of a message of uct id id:
// uct.SendFlagSignaled for the messages that start no receive.
func uctSendFlags(id uint8) uint32 {
	if id < uct.AMMaxID && signaledIDs[id] {
		return uct.SendFlagSignaled
	}
	return 0
}

// event records an event of the uct.Event* kinds ev reported by a
// transport or protocol and, if the worker is armed for one of them,
// disarms it and signals its eventfd; other kinds wait for the next
// Progress. Any goroutine.
func (ws *wakeState) event(ev uint32) {
	if ev&ws.uctEvents == 0 {
		return
	}
	ws.evSeq.Add(1)
	if ws.armed.Load() && ws.armed.CompareAndSwap(true, false) {
		writeEventFD(ws.sigfd)
	}
}

// progressed records that a Progress began: the events reported so far
// are handled by it.
func (ws *wakeState) progressed() { ws.progSeq.Store(ws.evSeq.Load()) }

// writeEventFD adds 1 to an eventfd; a saturated counter (EAGAIN) is
// readable anyway.
func writeEventFD(fd int) {
	one := [8]byte{1} // 1 as a native (little-endian) uint64
	unix.Write(fd, one[:])
}

// drainEventFD resets a non-blocking eventfd and reports whether it was
// readable.
func drainEventFD(fd int) bool {
	var b [8]byte
	n, _ := unix.Read(fd, b[:])
	return n == 8
}

// wakeCheck returns the error of a wakeup call on a worker that cannot do
// it: destroyed, or created without FeatureWakeup (ucs.ErrInvalidParam, as
// UCX).
func (w *Worker) wakeCheck(what string) error {
	if w.closed.Load() {
		return fmt.Errorf("ucp worker %s: %w", what, ErrClosed)
	}
	if !w.wake.enabled {
		return fmt.Errorf("ucp worker %s: the context was not initialized with FeatureWakeup: %w", what, ucs.ErrInvalidParam)
	}
	return nil
}

// EventFD returns the worker's event descriptor (ucp_worker_get_efd): an
// epoll descriptor that becomes readable when the worker, armed with Arm,
// has events, or was signalled with Signal. The worker owns it (Destroy
// closes it); the caller polls it for reading and never reads it. It fails
// with ucs.ErrInvalidParam without FeatureWakeup, and with
// ucs.ErrUnsupported when the worker reports on an external descriptor
// (WorkerParams.SetEventFD).
func (w *Worker) EventFD() (int, error) {
	if err := w.wakeCheck("get efd"); err != nil {
		return -1, err
	}
	if w.wake.external {
		return -1, fmt.Errorf("ucp worker get efd: events go to the external descriptor %d: %w", w.wake.epfd, ucs.ErrUnsupported)
	}
	return w.wake.epfd, nil
}

// Arm prepares the worker's event descriptor to become readable at the
// next event (ucp_worker_arm). It returns nil when armed: the caller may
// then sleep on the descriptor (or call Wait). It returns ucs.ErrBusy
// (itself, so that a poll loop allocates nothing) when events are pending
// already: a Signal since the last Arm, an event since the last Progress
// began, or a message waiting in an interface; the caller must then call
// Progress and try again. It fails with ucs.ErrInvalidParam without
// FeatureWakeup. Safe from any goroutine in every thread mode.
func (w *Worker) Arm() error {
	if err := w.wakeCheck("arm"); err != nil {
		return err
	}
	ws := &w.wake
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.closed {
		return fmt.Errorf("ucp worker arm: %w", ErrClosed)
	}
	if drainEventFD(ws.sigfd) {
		return ucs.ErrBusy
	}
	for _, a := range ws.armers {
		drainEventFD(a.fd)
	}
	ws.armed.Store(true)
	// An event reported before armed was set did not write sigfd: it is
	// pending if no Progress began after it. (Sequentially consistent
	// atomics: either event sees armed, or this load sees its count.)
	if ws.evSeq.Load() != ws.progSeq.Load() {
		ws.armed.Store(false)
		return ucs.ErrBusy
	}
	if ws.uctEvents != 0 {
		for _, a := range ws.armers {
			switch st := a.armer.EventArm(ws.uctEvents); st {
			case ucs.OK:
			case ucs.ErrBusy:
				ws.armed.Store(false)
				return ucs.ErrBusy
			default:
				ws.armed.Store(false)
				return fmt.Errorf("ucp worker arm: %w", st)
			}
		}
	}
	return nil
}

// Wait blocks until the worker has an event or is signalled
// (ucp_worker_wait): it arms the worker and, unless events are pending
// already (then it returns at once), polls the event descriptor, the
// external one included. It returns nil when the caller should progress
// the worker; ucs.ErrInvalidParam without FeatureWakeup; ucs.ErrIOError
// when polling fails. Destroy wakes a goroutine blocked in Wait.
func (w *Worker) Wait() error {
	if err := w.Arm(); err != nil {
		if errors.Is(err, ucs.ErrBusy) {
			return nil
		}
		return err
	}
	fds := []unix.PollFd{{Fd: int32(w.wake.epfd), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("ucp worker wait: poll: %v: %w", err, ucs.ErrIOError)
		}
		return nil
	}
}

// Signal makes the worker's event descriptor readable, so that a
// goroutine blocked in Wait (or polling the descriptor) returns, and the
// next Arm returns ucs.ErrBusy (ucp_worker_signal). It may be called from
// any goroutine, whatever the thread mode. It fails with
// ucs.ErrInvalidParam without FeatureWakeup.
func (w *Worker) Signal() error {
	if err := w.wakeCheck("signal"); err != nil {
		return err
	}
	ws := &w.wake
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.closed {
		return fmt.Errorf("ucp worker signal: %w", ErrClosed)
	}
	writeEventFD(ws.sigfd)
	return nil
}

// closeWakeup starts closing the wakeup of a worker being destroyed: it
// wakes Wait and removes the worker's descriptors from an external event
// descriptor. The interfaces are closed next, and then releaseWakeup
// closes the worker's own descriptors (transports may report events until
// their interfaces are closed).
func (w *Worker) closeWakeup() {
	ws := &w.wake
	if !ws.enabled {
		return
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.closed = true
	writeEventFD(ws.sigfd)
	if ws.external {
		unix.EpollCtl(ws.epfd, unix.EPOLL_CTL_DEL, ws.sigfd, nil)
		for _, a := range ws.armers {
			unix.EpollCtl(ws.epfd, unix.EPOLL_CTL_DEL, a.fd, nil)
		}
	}
}

// releaseWakeup closes the worker's eventfd and own epoll descriptor.
func (w *Worker) releaseWakeup() {
	ws := &w.wake
	if !ws.enabled {
		return
	}
	if !ws.external {
		unix.Close(ws.epfd)
	}
	unix.Close(ws.sigfd)
}
