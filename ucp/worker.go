package ucp

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// Fields of WorkerParams (ucp_worker_params_field).
const (
	WorkerParamFieldThreadMode  uint64 = 1 << 0
	WorkerParamFieldCPUMask     uint64 = 1 << 1
	WorkerParamFieldEvents      uint64 = 1 << 2
	WorkerParamFieldUserData    uint64 = 1 << 3
	WorkerParamFieldEventFD     uint64 = 1 << 4
	WorkerParamFieldFlags       uint64 = 1 << 5
	WorkerParamFieldName        uint64 = 1 << 6
	WorkerParamFieldAMAlignment uint64 = 1 << 7
	WorkerParamFieldClientID    uint64 = 1 << 8
)

// Wakeup events (ucp_wakeup_event_t), for WorkerParams.SetEvents: the
// kinds of events that make the worker's event file descriptor readable and
// Worker.Wait return.
const (
	WakeupRMA     uint32 = 1 << 0  // remote memory access send completion
	WakeupAMO     uint32 = 1 << 1  // atomic operation send completion
	WakeupTagSend uint32 = 1 << 2  // tag send completion
	WakeupTagRecv uint32 = 1 << 3  // tag receive completion
	WakeupTX      uint32 = 1 << 10 // any send completion
	WakeupRX      uint32 = 1 << 11 // any receive completion
	// WakeupEdge asks for edge-triggered wakeup: the descriptor is
	// signalled only for new events, not for ones already pending.
	WakeupEdge uint32 = 1 << 16

	// wakeupAll is what an unset Events field means: every event kind.
	wakeupAll = WakeupRMA | WakeupAMO | WakeupTagSend | WakeupTagRecv | WakeupTX | WakeupRX
)

// Worker flags (ucp_worker_flags_t), for WorkerParams.SetFlags.
// WorkerFlags are the flags of a worker (WorkerParams.Flags).
type WorkerFlags uint64

// Worker flags (ucp_worker_flags_t), for WorkerParams.SetFlags.
const (
	// WorkerFlagIgnoreRequestLeak: do not warn about requests that were not
	// freed when the worker is destroyed. goshmem never warns about them
	// (requests come from a garbage-collected pool); the flag is accepted
	// for compatibility.
	WorkerFlagIgnoreRequestLeak WorkerFlags = 1 << 0
)

// WorkerParams are the parameters of Context.NewWorker (ucp_worker_params_t).
// Build them with the setters, which record the field mask; a field whose
// bit is not set takes its default.
type WorkerParams struct {
	FieldMask   uint64
	ThreadMode  ucs.ThreadMode
	CPUMask     []int
	Events      uint32
	UserData    any
	EventFD     int
	Flags       WorkerFlags
	Name        string
	AMAlignment int
	ClientID    uint64
}

// SetThreadMode suggests the worker's thread mode (default single).
func (p *WorkerParams) SetThreadMode(m ucs.ThreadMode) *WorkerParams {
	p.ThreadMode, p.FieldMask = m, p.FieldMask|WorkerParamFieldThreadMode
	return p
}

// SetCPUMask lists the CPUs the worker's own goroutines should run on
// (ucp_worker_params_t.cpu_mask; default: the system's policy): its
// keepalive (see EPParams.SetErrMode) and the goroutines of its transports
// (uct.IfaceParams.CPUMask: tcp's accepting, polling and handshaking
// goroutines, the wakeup goroutine of shared memory). Each locks its OS
// thread and binds it to these CPUs with sched_setaffinity (a mask the
// system refuses is logged). Progress runs on the caller's goroutines,
// which the mask does not touch.
// NewWorker fails with ucs.ErrInvalidParam for a CPU number outside
// [0, 1024).
func (p *WorkerParams) SetCPUMask(cpus []int) *WorkerParams {
	p.CPUMask, p.FieldMask = append([]int(nil), cpus...), p.FieldMask|WorkerParamFieldCPUMask
	return p
}

// SetEvents sets the Wakeup* event kinds that wake the worker (default: all
// of them). It counts only with FeatureWakeup. The transports tell
// messages from completions, not one kind of completion from another: a
// worker that asked for receive events (WakeupTagRecv, WakeupRX) is woken
// by every message and completion; one that asked for send events only
// (WakeupRMA, WakeupAMO, WakeupTagSend, WakeupTX) by completions and by
// the messages its operations and its peers' wait for (replies,
// acknowledgements, rendezvous steps, software RMA), not by a message that
// starts a receive (eager data, a rendezvous announcement), which waits
// for the next Progress. An empty set leaves only Signal to wake the
// worker. Unknown bits make NewWorker fail with ucs.ErrInvalidParam.
func (p *WorkerParams) SetEvents(e uint32) *WorkerParams {
	p.Events, p.FieldMask = e, p.FieldMask|WorkerParamFieldEvents
	return p
}

// SetUserData sets the worker's user data (default nil). With an external
// event descriptor (SetEventFD), user data of an integer type is placed in
// the epoll_data of the worker's registrations.
func (p *WorkerParams) SetUserData(d any) *WorkerParams {
	p.UserData, p.FieldMask = d, p.FieldMask|WorkerParamFieldUserData
	return p
}

// SetEventFD makes the worker report its events on fd, an epoll descriptor
// of the caller, instead of one of its own (default: unset). It counts only
// with FeatureWakeup. The worker adds its descriptors to fd (removing them
// when destroyed), and Worker.EventFD then fails with ucs.ErrUnsupported;
// Arm, Wait and Signal work as without it (Wait polls fd). NewWorker fails
// with ucs.ErrInvalidParam when fd is not an epoll descriptor.
func (p *WorkerParams) SetEventFD(fd int) *WorkerParams {
	p.EventFD, p.FieldMask = fd, p.FieldMask|WorkerParamFieldEventFD
	return p
}

// SetFlags sets WorkerFlag* flags (default 0); unknown flags make NewWorker
// fail with ucs.ErrInvalidParam.
func (p *WorkerParams) SetFlags(f WorkerFlags) *WorkerParams {
	p.Flags, p.FieldMask = f, p.FieldMask|WorkerParamFieldFlags
	return p
}

// SetName names the worker (default: a unique generated name).
func (p *WorkerParams) SetName(n string) *WorkerParams {
	p.Name, p.FieldMask = n, p.FieldMask|WorkerParamFieldName
	return p
}

// SetAMAlignment sets the alignment, in bytes, of the data that active
// message handlers receive (default 1: none). It must be a power of two
// (NewWorker fails with ucs.ErrInvalidParam otherwise); Worker.AMAlignment
// returns it for the active message protocols.
func (p *WorkerParams) SetAMAlignment(n int) *WorkerParams {
	p.AMAlignment, p.FieldMask = n, p.FieldMask|WorkerParamFieldAMAlignment
	return p
}

// SetClientID sets the id sent to servers on connection (default 0).
func (p *WorkerParams) SetClientID(id uint64) *WorkerParams {
	p.ClientID, p.FieldMask = id, p.FieldMask|WorkerParamFieldClientID
	return p
}

// workerIface is an interface the worker opened on a context resource.
type workerIface struct {
	rsc   *resource
	iface uct.Iface
	attr  *uct.IfaceAttr
	index int
	used  atomic.Bool // some endpoint has a lane on it
}

// Worker is a UCP worker (ucp_worker_h): one interface per selected
// resource, progressed together.
//
// Thread modes: in single and serialized modes one goroutine at a time may
// use the worker and its endpoints, and nothing is locked on the paths of
// operations. In multi mode any number of goroutines may call every method
// of the worker, its endpoints, keys and requests at once: the worker's own
// state is guarded by locks that the operation paths (put, get, atomics)
// do not take, and the transports, opened in multi mode, lock their
// progress and queues themselves. Callbacks (request completions, error
// handlers) run with no ucp lock held and may start operations, but not
// call Progress or wait (Flush, Request.Wait, Close in flush mode), in any
// mode.
type Worker struct {
	ctx      *Context
	params   WorkerParams
	mode     ucs.ThreadMode
	name     string
	uid      uint64
	uw       *uct.Worker
	ifaces   []*workerIface
	address  []byte
	eps      []*Endpoint
	epSeq    atomic.Uint64 // endpoints created, for their default names
	epMu     sync.Mutex
	wireMu   sync.Mutex   // serializes the endpoints created for peers' wireup
	inflight atomic.Int64 // operations started and not completed
	sw       swState
	// swDirtyEPs counts endpoints with software operations to flush, so
	// that a flush without any looks at no endpoint.
	swDirtyEPs atomic.Int32
	netPoll    bool         // some interface receives through Go's network poller
	sleeping   uint32       // 1 while a goroutine sleeps in Idle (a futex word without idlePoll); atomic
	idleRun    atomic.Int32 // Idle calls since a Progress last did something (netPoll)
	signalled  atomic.Bool  // notify ran since Idle last looked
	amAlign    int
	cpuMask    []int
	wake       wakeState // FeatureWakeup: EventFD, Arm, Wait, Signal (wakeup.go)
	fail       failState // endpoints that failed, keepalive (errors.go)
	closed     atomic.Bool
	am         amWorker     // active messages (am.go)
	tag        tagWorker    // tag matching (tag.go)
	stream     streamWorker // streams (stream.go)
	flushes    epFlushes    // non-blocking endpoint flushes (ep_close.go)
	sendq      sendQueue    // protocol sends waiting for resources (proto.go)
	proto      protoWorker  // what the two-sided protocols share (proto.go)
	rkc        rkeyCache    // senders' keys, for rendezvous receives (proto.go)
	listeners  listenerSet  // listener.go
	cs         csConnects   // client-server endpoints that connect (ep_connect.go)
	cm         workerCM     // the connection manager (listener.go)
	requests   requestPool  // free requests (request.go)
	// idlePoll is what Idle sleeps on when some interface's input can be
	// waited for in the kernel (uct.InputPoller): the worker's eventfd
	// idleFD, which notify writes, then each such interface's
	// descriptor. Empty, Idle sleeps on the futex word sleeping.
	idlePoll []unix.PollFd
	idleFD   int
}

// NewWorker creates a worker (ucp_worker_create). The thread mode asked for
// is granted as is; Query reports it. It fails with ucs.ErrInvalidParam for
// a bad parameter (thread mode, CPU, events, flags, AM alignment, external
// event descriptor), ucs.ErrNoDevice when no interface can be opened.
func (c *Context) NewWorker(params *WorkerParams) (*Worker, error) {
	if c.closed.Load() {
		return nil, fmt.Errorf("ucp worker create: %w", ErrClosed)
	}
	w := &Worker{ctx: c, amAlign: 1}
	w.requests.free.New = newPooledRequest
	if params != nil {
		w.params = *params
	}
	if err := w.applyParams(); err != nil {
		return nil, fmt.Errorf("ucp worker create: %w", err)
	}
	if w.mode != ucs.ThreadModeMulti {
		w.requests.max = localRequests
	}
	if err := w.nameWorker(); err != nil {
		return nil, fmt.Errorf("ucp worker create: %w", err)
	}
	w.uw = uct.NewWorker(w.mode)
	w.uw.SetSignal(w.notifyEvents)
	if err := w.openIfaces(); err != nil {
		return nil, fmt.Errorf("ucp worker create: %w", err)
	}
	if err := w.initIdle(); err != nil {
		w.closeIfaces()
		return nil, fmt.Errorf("ucp worker create: %w", err)
	}
	if err := w.start(); err != nil {
		return nil, fmt.Errorf("ucp worker create: %w", err)
	}
	return w, nil
}

// applyParams checks the worker's parameters and takes its thread mode, CPU
// mask and AM alignment from them.
func (w *Worker) applyParams() error {
	p := &w.params
	if p.FieldMask&WorkerParamFieldThreadMode != 0 {
		if p.ThreadMode < ucs.ThreadModeSingle || p.ThreadMode > ucs.ThreadModeMulti {
			return fmt.Errorf("thread mode %v: %w", p.ThreadMode, ucs.ErrInvalidParam)
		}
		w.mode = p.ThreadMode
	}
	if p.FieldMask&WorkerParamFieldCPUMask != 0 {
		for _, cpu := range p.CPUMask {
			if cpu < 0 || cpu >= maxCPU {
				return fmt.Errorf("CPU %d not in [0, %d): %w", cpu, maxCPU, ucs.ErrInvalidParam)
			}
		}
		w.cpuMask = p.CPUMask
	}
	if p.FieldMask&WorkerParamFieldFlags != 0 && p.Flags&^WorkerFlagIgnoreRequestLeak != 0 {
		return fmt.Errorf("flags %#x: %w", p.Flags, ucs.ErrInvalidParam)
	}
	if p.FieldMask&WorkerParamFieldAMAlignment != 0 {
		if n := p.AMAlignment; n < 1 || n&(n-1) != 0 {
			return fmt.Errorf("AM alignment %d is not a power of two: %w", n, ucs.ErrInvalidParam)
		}
		w.amAlign = p.AMAlignment
	}
	if p.FieldMask&WorkerParamFieldEvents != 0 && p.Events&^(wakeupAll|WakeupEdge) != 0 {
		return fmt.Errorf("wakeup events %#x: %w", p.Events, ucs.ErrInvalidParam)
	}
	return nil
}

// nameWorker draws the worker's unique id and sets its name: the one asked
// for, or the context's name and part of the id.
func (w *Worker) nameWorker() error {
	var u [8]byte
	if _, err := rand.Read(u[:]); err != nil {
		return err
	}
	w.uid = binary.LittleEndian.Uint64(u[:])
	if w.params.FieldMask&WorkerParamFieldName != 0 {
		w.name = w.params.Name
	} else {
		w.name = fmt.Sprintf("%s:%x", w.ctx.name, w.uid&0xffffff)
	}
	if len(w.name) > maxAddrName {
		w.name = w.name[:maxAddrName]
	}
	return nil
}

// openIfaces opens an interface on each resource of the context that can
// open here (a resource that cannot is skipped, as in UCX), up to as many
// as an address holds. It fails with ucs.ErrNoDevice when none opens.
func (w *Worker) openIfaces() error {
	c := w.ctx
	for i := range c.resources {
		r := &c.resources[i]
		cfg := c.config.ReadAlso(c.componentPrefix(r.tl.TLName), r.md.md.IfaceConfigTable())
		iface, err := r.md.md.IfaceOpen(w.uw, &uct.IfaceParams{TLName: r.tl.TLName, DevName: r.tl.DevName,
			ErrHandler: laneErrHandler, ErrHandlerArg: w, Logger: c.log, CPUMask: w.cpuMask}, cfg)
		if err != nil {
			continue
		}
		attr, err := iface.Query()
		if err != nil {
			iface.Close()
			continue
		}
		wi := &workerIface{rsc: r, iface: iface, attr: attr, index: len(w.ifaces)}
		w.netPoll = w.netPoll || r.tl.DevType == uct.DeviceTypeNet
		w.ifaces = append(w.ifaces, wi)
	}
	if len(w.ifaces) == 0 {
		return fmt.Errorf("no interface could be opened: %w", ucs.ErrNoDevice)
	}
	if len(w.ifaces) > maxAddrIfaces {
		for _, wi := range w.ifaces[maxAddrIfaces:] {
			wi.iface.Close()
		}
		w.ifaces = w.ifaces[:maxAddrIfaces]
	}
	return nil
}

// start sets up, on the open interfaces, the wakeup descriptors, the
// address, and the protocols, and disables the interfaces' progress until
// their first event (initProgress). On failure it undoes what it did:
// before the protocols only the interfaces and Idle's eventfd exist to be
// closed; after, Destroy ends everything.
func (w *Worker) start() error {
	if w.ctx.features&FeatureWakeup != 0 {
		if err := w.initWakeup(); err != nil {
			w.closeIfaces()
			w.closeIdle()
			return err
		}
	}
	w.address = w.packAddress(0)
	w.installSwHandlers()
	w.protoInit()
	for _, init := range []func() error{w.amInit, w.tagInit, w.streamInit, w.sharedInit} {
		if err := init(); err != nil {
			w.Destroy()
			return err
		}
	}
	w.initProgress()
	return nil
}

// initProgress disables the progress of the worker's interfaces
// (uct.ProgressController), as UCX's adaptive progress deactivates an
// interface that no endpoint uses: the uct worker then calls an
// interface's Progress only when the others found nothing and on every
// uct.ColdProgressEvery-th of its other calls, so that an interface
// nothing comes to costs a busy worker almost nothing, until its first
// event (a message, a pending send it posted) enables it for good. A
// message to an interface that no endpoint uses yet, or only this
// worker's endpoints use, waits a few Progress calls at most. An
// interface that cannot be disabled (tcp) is called on every Progress;
// one that receives nothing (cma) is in the uct worker's progress only
// while it has work of its own. UCX_ADAPTIVE_PROGRESS=n leaves every
// interface enabled.
func (w *Worker) initProgress() {
	if !w.ctx.adaptive {
		return
	}
	for _, wi := range w.ifaces {
		if ctl, ok := wi.iface.(uct.ProgressController); ok {
			ctl.ProgressDisable()
		}
	}
}

// maxCPU bounds the CPU numbers of a CPU mask (the size of a cpu_set_t).
const maxCPU = 1024

// AMAlignment returns the alignment, in bytes, that active message handlers
// of the worker get their data with (WorkerParams.SetAMAlignment; 1 by
// default).
func (w *Worker) AMAlignment() int { return w.amAlign }

// Idle gives the processor away in a wait loop that made no progress.
// When every interface of the worker is served by shared memory it yields
// the thread. When some interface receives from the network (tcp), its
// Progress reads the ready sockets itself, so for the first idleSpin calls
// since a Progress last did something Idle returns at once, yielding the
// thread every idleYieldEvery-th call and the goroutine every
// idleGoschedEvery-th: a reply is then seen by the next Progress, a system
// call after it came. After that Idle sleeps in the kernel until input
// comes for an interface that can be waited for (uct.InputPoller: a frame
// on a tcp socket), or a receive path of the worker running on another
// goroutine signals that it handled something (a reply, a software put or
// atomic, an acknowledgement), or idleWait at most: shared-memory peers
// and some transports write straight into memory without a signal. It
// waits for the input itself (ppoll on the interfaces' descriptors): while
// it calls Progress every idleWait, no goroutine of the transport reads
// the sockets to signal it (tcp's poller steps in after
// UCX_TCP_PASSIVE_DELAY without Progress), so a sleep on a signal alone
// lasted out its bound whatever came. A Go timer would not do for the
// bound: the runtime rounds sleeps below a millisecond up to about one
// when it has nothing else to do.
func (w *Worker) Idle() {
	if !w.netPoll {
		yieldGoroutine()
		return
	}
	if n := w.idleRun.Add(1); n <= idleSpin {
		// Poll again at once, giving the core away every
		// idleYieldEvery-th call, to a process that waits for it (the
		// peer that must answer may be waiting for this core), and the
		// P every idleGoschedEvery-th, to the goroutines that wait for
		// it. The P rarely: runtime.Gosched wakes a thread for an idle P
		// (wakep), which finds nothing to do and sleeps again: two futex
		// calls and a thread that takes a core from the polling
		// processes, and at times the goroutine goes on on another
		// thread. When the P was given away at every call (or at every
		// 16th), a tcp get's wait made a futex call every 8 or 9 polls
		// and a context switch every 6; at every 256th, one every 200
		// and 15.
		if n%idleGoschedEvery == 0 {
			yieldGoroutine()
		}
		if n%idleYieldEvery == 0 {
			ucs.YieldThread()
		}
		return
	}
	atomic.StoreUint32(&w.sleeping, 1)
	if w.signalled.Swap(false) {
		// Signalled since the caller last looked.
		atomic.StoreUint32(&w.sleeping, 0)
		return
	}
	if len(w.idlePoll) > 0 {
		w.pollIdle()
	} else {
		ucs.FutexWait(&w.sleeping, 1, idleWait, true)
	}
	atomic.StoreUint32(&w.sleeping, 0)
	w.signalled.Store(false)
}

// yieldGoroutine is runtime.Gosched; a test counts its calls.
var yieldGoroutine = runtime.Gosched

// initIdle sets up Idle's sleep on the input of the interfaces that can
// be waited for (uct.InputPoller), when the worker has any: an eventfd
// for notify, then their descriptors.
func (w *Worker) initIdle() error {
	for _, wi := range w.ifaces {
		if p, ok := wi.iface.(uct.InputPoller); ok {
			w.idlePoll = append(w.idlePoll, unix.PollFd{Fd: int32(p.InputFD()), Events: unix.POLLIN})
		}
	}
	if len(w.idlePoll) == 0 {
		return nil
	}
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		w.idlePoll = nil
		return fmt.Errorf("idle eventfd: %w: %w", ucs.ErrIOError, os.NewSyscallError("eventfd", err))
	}
	w.idleFD = fd
	w.idlePoll = append([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, w.idlePoll...)
	return nil
}

// closeIdle closes Idle's eventfd; the interfaces are closed, and no
// goroutine sleeps in Idle.
func (w *Worker) closeIdle() {
	if len(w.idlePoll) > 0 {
		unix.Close(w.idleFD)
	}
}

// pollIdle is Idle's sleep on idlePoll, idleWait at most. The descriptors
// are copied for the call (several goroutines may sleep at once in multi
// mode, and ppoll writes each entry's events); the eventfd is drained
// when notify wrote it.
func (w *Worker) pollIdle() {
	var fds [maxAddrIfaces + 1]unix.PollFd
	n := copy(fds[:], w.idlePoll)
	ts := unix.NsecToTimespec(int64(idleWait))
	if k, err := unix.Ppoll(fds[:n], &ts, nil); err == nil && k > 0 && fds[0].Revents&unix.POLLIN != 0 {
		drainEventFD(w.idleFD)
	}
}

// idleWait bounds how long Idle sleeps; a variable for the tests.
var idleWait = 30 * time.Microsecond

// idleSpin is how many times Idle returns at once, when the worker reads
// from the network, before it sleeps: a few hundred microseconds of
// polling, every idleYieldEvery-th poll giving the core to a process that
// waits for it, every idleGoschedEvery-th the P to the goroutines that
// wait for it (a goroutine that computes is preempted after 10ms anyway).
const (
	idleSpin         = 512
	idleYieldEvery   = 16
	idleGoschedEvery = 256
)

// notify tells the worker's waiters that something happened: it wakes a
// goroutine sleeping in Idle, if any (the next Idle returns at once
// otherwise), and, with FeatureWakeup, counts the event and signals the
// worker's event descriptor if Arm armed it. Receive paths of the
// transports and of the software protocols call it, from any goroutine.
// It is notifyEvents of every kind.
func (w *Worker) notify() { w.notifyEvents(uct.EventAll) }

// notifyEvents is notify of an event of the uct.Event* kinds ev: Idle
// wakes for every kind, the event descriptor only for the kinds the
// worker's events mask arms it for (see wakeup.go). The transports call it
// through uct.Worker.Signal.
func (w *Worker) notifyEvents(ev uint32) {
	w.signalled.Store(true)
	if atomic.CompareAndSwapUint32(&w.sleeping, 1, 0) {
		if len(w.idlePoll) > 0 {
			writeEventFD(w.idleFD)
		} else {
			ucs.FutexWake(&w.sleeping, true)
		}
	}
	if w.wake.enabled {
		w.wake.event(ev)
	}
}

func (w *Worker) idle() { w.Idle() }

// packAddress packs the address of the worker: every interface, or with
// WorkerAddressFlagNetOnly only those on network devices (see
// Worker.QueryAttr).
func (w *Worker) packAddress(flags WorkerAddressFlags) []byte {
	return w.packAddressOf(flags, nil)
}

// packAddressOf is packAddress of the interfaces keep accepts (nil: all).
func (w *Worker) packAddressOf(flags WorkerAddressFlags, keep func(*workerIface) bool) []byte {
	a := workerAddress{uid: w.uid, name: w.name}
	if flags&WorkerAddressFlagNetOnly != 0 {
		a.flags |= addrFlagNetOnly
	}
	for _, wi := range w.ifaces {
		if flags&WorkerAddressFlagNetOnly != 0 && wi.rsc.tl.DevType != uct.DeviceTypeNet {
			continue
		}
		if keep != nil && !keep(wi) {
			continue
		}
		at := wi.attr
		a.ifaces = append(a.ifaces, addrIface{
			component:  wi.rsc.md.comp.Name(),
			tlName:     wi.rsc.tl.TLName,
			devType:    uint8(wi.rsc.tl.DevType),
			capFlags:   at.Flags,
			atomics:    packAtomics(at.Atomic32.OpFlags, at.Atomic32.FopFlags, at.Atomic64.OpFlags, at.Atomic64.FopFlags),
			latency:    at.Latency.C,
			bandwidth:  at.Bandwidth.Dedicated + at.Bandwidth.Shared,
			overhead:   at.Overhead,
			priority:   at.Priority,
			deviceAddr: wi.iface.DeviceAddress(),
			ifaceAddr:  wi.iface.Address(),
		})
	}
	return a.encode()
}

// Destroy closes every endpoint and interface of the worker
// (ucp_worker_destroy): outstanding operations of its endpoints fail with
// ucs.ErrCanceled, so do its tag receives no message matched, its
// listeners are destroyed, its keepalive goroutine ends, its wakeup
// descriptors are closed (or removed from an external event descriptor),
// and the context's RequestCleanup function, if any, is called on every
// request of the worker's pool that was initialized.
// A second call does nothing.
func (w *Worker) Destroy() {
	if w.closed.Swap(true) {
		return
	}
	w.listeners.destroyAll()
	w.cs.abortAll()
	w.closeCM()
	w.stopKeepalive()
	w.epMu.Lock()
	eps := w.eps
	w.eps = nil
	w.epMu.Unlock()
	for _, ep := range eps {
		ep.closeNow(ucs.ErrCanceled)
	}
	w.lingerDestroy()
	w.rkc.clear()
	w.protoDestroy()
	w.tagDestroy()
	w.streamDestroy()
	w.closeWakeup()
	w.closeIfaces()
	w.releaseWakeup()
	w.closeIdle()
	// The stack's requests keep their last operations' references
	// (requestPool): a destroyed worker holds none.
	w.requests.drop()
	if fn := w.ctx.params.RequestCleanup; fn != nil && w.ctx.params.FieldMask&ParamFieldRequestCleanup != 0 {
		w.requests.cleanup(fn)
	}
}

// closeIfaces closes the worker's interfaces.
func (w *Worker) closeIfaces() {
	for _, wi := range w.ifaces {
		wi.iface.Close()
	}
}

// Address returns the worker's packed address, to be given to peers for
// Worker.NewEndpoint (ucp_worker_get_address). The slice must not be
// modified.
func (w *Worker) Address() ([]byte, error) {
	if w.closed.Load() {
		return nil, fmt.Errorf("ucp worker address: %w", ErrClosed)
	}
	return w.address, nil
}

// ReleaseAddress exists for symmetry with ucp_worker_release_address.
func (w *Worker) ReleaseAddress([]byte) {}

// Progress advances every communication of the worker and returns the
// number of events handled (ucp_worker_progress). It also handles the
// failures of endpoints in error mode PEER: their outstanding requests
// complete with the error and their error handlers are called, from here.
// Progress may not be called from a callback it runs, directly or through
// a call that waits. Interfaces that no message came to yet are polled
// only by calls whose other work found nothing and every
// uct.ColdProgressEvery-th of the others (adaptive progress: see
// initProgress).
func (w *Worker) Progress() int {
	if w.wake.enabled {
		w.wake.progressed()
	}
	// The protocols' queue is the worker's own: called here, not through
	// the uct worker's callbacks, an empty one costs a load (protoProgress
	// is inlined).
	n := w.uw.Progress() + w.protoProgress()
	if w.fail.pending.Load() {
		n += w.handleFailures()
	}
	if n > 0 && w.netPoll {
		w.idleRun.Store(0)
	}
	return n
}

// Fence orders every RMA and atomic operation issued on the worker before it
// before those issued after it, for each target (ucp_worker_fence), as
// Endpoint.Fence does for each of the worker's endpoints. Endpoints that
// failed (error mode PEER) or are closed are skipped.
func (w *Worker) Fence() error {
	if w.closed.Load() {
		return fmt.Errorf("ucp worker fence: %w", ErrClosed)
	}
	// Most fences find every endpoint on paths its transports' fences
	// order: look first, without copying anything.
	strong := false
	w.epMu.Lock()
	for _, ep := range w.eps {
		strong = strong || (ep.dead() == ucs.OK && ep.needsFlushFence())
	}
	w.epMu.Unlock()
	if strong {
		w.epMu.Lock()
		eps := append([]*Endpoint(nil), w.eps...)
		w.epMu.Unlock()
		for _, ep := range eps {
			if ep.dead() != ucs.OK || !ep.needsFlushFence() {
				continue
			}
			if err := ep.fence(); err != nil && ep.dead() == ucs.OK {
				return fmt.Errorf("ucp worker fence: %w", err)
			}
		}
	}
	for _, wi := range w.ifaces {
		if st := wi.iface.Fence(0); st.IsErr() {
			return fmt.Errorf("ucp worker fence: %w", st)
		}
	}
	return nil
}

// Flush waits until every operation issued on the worker has completed at
// its target (ucp_worker_flush). Endpoints that failed (error mode PEER)
// or are closed are skipped: their operations completed with an error.
func (w *Worker) Flush() error {
	if w.closed.Load() {
		return fmt.Errorf("ucp worker flush: %w", ErrClosed)
	}
	if w.swDirtyEPs.Load() > 0 {
		w.epMu.Lock()
		eps := append([]*Endpoint(nil), w.eps...)
		w.epMu.Unlock()
		for _, ep := range eps {
			if ep.dead() != ucs.OK {
				ep.swClean()
				continue
			}
			if err := ep.swFlush(); err != nil && ep.dead() == ucs.OK {
				return fmt.Errorf("ucp worker flush: %w", err)
			}
		}
	}
	for w.inflight.Load() > 0 {
		if w.Progress() == 0 {
			w.Idle()
		}
	}
	for _, wi := range w.ifaces {
		if !wi.used.Load() {
			continue // no endpoint of the worker uses it: nothing to flush
		}
		// Without a completion, a transport answers OK when it is flushed and
		// InProgress otherwise; asking again after progress costs nothing in
		// the common case where everything is done already.
		for {
			st := wi.iface.Flush(0, nil)
			if st == ucs.OK {
				break
			}
			if st != ucs.InProgress {
				return fmt.Errorf("ucp worker flush %s: %w", wi.rsc.tl.TLName, st)
			}
			if w.Progress() == 0 {
				w.Idle()
			}
		}
	}
	return nil
}

// waitStatus runs op with a completion and progresses until it is done.
func (w *Worker) waitStatus(op func(c *uct.Completion) ucs.Status) error {
	var done atomic.Bool
	comp := uct.Completion{Count: 1, Func: func(*uct.Completion) { done.Store(true) }}
	st := op(&comp)
	switch {
	case st == ucs.OK:
		return nil
	case st == ucs.InProgress:
		for !done.Load() {
			if w.Progress() == 0 {
				w.Idle()
			}
		}
		return comp.Status().Err()
	default:
		return st
	}
}

// warnf writes a warning to the context's logger.
func (w *Worker) warnf(format string, args ...any) { w.ctx.log.Logf(ucs.LogWarn, format, args...) }
