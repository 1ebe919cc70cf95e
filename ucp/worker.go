package ucp

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

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

// WorkerParams are the parameters of Context.NewWorker (ucp_worker_params_t).
type WorkerParams struct {
	FieldMask   uint64
	ThreadMode  ucs.ThreadMode
	CPUMask     []int
	Events      uint32
	UserData    any
	EventFD     int
	Flags       uint64
	Name        string
	AMAlignment int
	ClientID    uint64
}

// SetThreadMode suggests the worker's thread mode (default single).
func (p *WorkerParams) SetThreadMode(m ucs.ThreadMode) *WorkerParams {
	p.ThreadMode, p.FieldMask = m, p.FieldMask|WorkerParamFieldThreadMode
	return p
}

// SetUserData sets the worker's user data (default nil).
func (p *WorkerParams) SetUserData(d any) *WorkerParams {
	p.UserData, p.FieldMask = d, p.FieldMask|WorkerParamFieldUserData
	return p
}

// SetName names the worker (default: a unique generated name).
func (p *WorkerParams) SetName(n string) *WorkerParams {
	p.Name, p.FieldMask = n, p.FieldMask|WorkerParamFieldName
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
// resource, progressed together. In single and serialized modes one
// goroutine at a time may use the worker and its endpoints; in multi mode
// operations lock the worker.
type Worker struct {
	ctx      *Context
	params   WorkerParams
	mode     ucs.ThreadMode
	name     string
	uid      uint64
	uw       *uct.Worker
	ifaces   []*workerIface
	address  []byte
	mu       sync.Mutex // taken in ThreadModeMulti only
	eps      []*Endpoint
	epMu     sync.Mutex
	inflight atomic.Int64 // operations started and not completed
	sw       swState
	// swDirtyEPs counts endpoints with software operations to flush, so
	// that a flush without any looks at no endpoint.
	swDirtyEPs atomic.Int32
	netPoll    bool          // some interface receives through Go's network poller
	events     chan struct{} // signalled by receive paths, for Idle
	idleTimer  *time.Timer
	closed     bool
	am         amWorker // active messages (am.go)
}

// NewWorker creates a worker (ucp_worker_create). The thread mode asked for
// is granted as is; Query reports it.
func (c *Context) NewWorker(params *WorkerParams) (*Worker, error) {
	if c.closed.Load() {
		return nil, fmt.Errorf("ucp worker create: %w", errClosed)
	}
	w := &Worker{ctx: c, events: make(chan struct{}, 1)}
	if params != nil {
		w.params = *params
	}
	if w.params.FieldMask&WorkerParamFieldThreadMode != 0 {
		if w.params.ThreadMode < ucs.ThreadModeSingle || w.params.ThreadMode > ucs.ThreadModeMulti {
			return nil, fmt.Errorf("ucp worker create: thread mode %v: %w", w.params.ThreadMode, ucs.ErrInvalidParam)
		}
		w.mode = w.params.ThreadMode
	}
	var u [8]byte
	if _, err := rand.Read(u[:]); err != nil {
		return nil, fmt.Errorf("ucp worker create: %w", err)
	}
	w.uid = binary.LittleEndian.Uint64(u[:])
	if w.params.FieldMask&WorkerParamFieldName != 0 {
		w.name = w.params.Name
	} else {
		w.name = fmt.Sprintf("%s:%x", c.name, w.uid&0xffffff)
	}
	if len(w.name) > maxAddrName {
		w.name = w.name[:maxAddrName]
	}
	w.uw = uct.NewWorker(w.mode)
	w.uw.SetSignal(w.notify)
	for i := range c.resources {
		r := &c.resources[i]
		cfg := ucs.ReadConfig(c.componentPrefix(r.tl.TLName), r.md.md.IfaceConfigTable())
		iface, err := r.md.md.IfaceOpen(w.uw, &uct.IfaceParams{TLName: r.tl.TLName, DevName: r.tl.DevName}, cfg)
		if err != nil {
			continue // a resource that cannot open here is skipped, as in UCX
		}
		attr, err := iface.Query()
		if err != nil {
			iface.Close()
			continue
		}
		wi := &workerIface{rsc: r, iface: iface, attr: attr, index: len(w.ifaces)}
		w.netPoll = w.netPoll || r.tl.DevType == uct.DeviceTypeNet
		w.ifaces = append(w.ifaces, wi)
		w.uw.ProgressRegister(iface.Progress)
	}
	if len(w.ifaces) == 0 {
		return nil, fmt.Errorf("ucp worker create: no interface could be opened: %w", ucs.ErrNoDevice)
	}
	if len(w.ifaces) > maxAddrIfaces {
		w.ifaces = w.ifaces[:maxAddrIfaces]
	}
	w.address = w.packAddress()
	w.installSwHandlers()
	if err := w.amInit(); err != nil {
		w.Destroy()
		return nil, fmt.Errorf("ucp worker create: %w", err)
	}
	return w, nil
}

// Idle gives the processor away in a wait loop that made no progress. When
// every interface of the worker is served by shared memory it yields the
// thread. When some interface receives through Go's network poller (tcp), it
// parks the goroutine for a moment instead: a goroutine that only yields
// stays runnable, and the scheduler then polls the network only every 10 ms,
// so replies would wait that long.
//
// Parked, it wakes as soon as a receive path of the worker handles a message
// (a reply, a software put or atomic), or after idleWait at most: data some
// transports write straight into memory does not pass through the worker.
func (w *Worker) Idle() {
	if !w.netPoll {
		runtime.Gosched()
		return
	}
	if w.idleTimer == nil {
		w.idleTimer = time.NewTimer(idleWait)
	} else {
		w.idleTimer.Reset(idleWait)
	}
	select {
	case <-w.events:
	case <-w.idleTimer.C:
	}
	w.idleTimer.Stop()
}

// idleWait bounds how long Idle parks.
const idleWait = 50 * time.Microsecond

// notify wakes a goroutine parked in Idle, if any.
func (w *Worker) notify() {
	select {
	case w.events <- struct{}{}:
	default:
	}
}

func (w *Worker) idle() { w.Idle() }

func (w *Worker) packAddress() []byte {
	a := workerAddress{uid: w.uid, name: w.name}
	for _, wi := range w.ifaces {
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
// (ucp_worker_destroy).
func (w *Worker) Destroy() {
	if w.closed {
		return
	}
	w.epMu.Lock()
	eps := w.eps
	w.eps = nil
	w.epMu.Unlock()
	w.amDestroy()
	for _, ep := range eps {
		ep.destroyLanes()
	}
	for _, wi := range w.ifaces {
		wi.iface.Close()
	}
	w.closed = true
}

// Address returns the worker's packed address, to be given to peers for
// Worker.NewEndpoint (ucp_worker_get_address). The slice must not be
// modified.
func (w *Worker) Address() ([]byte, error) {
	if w.closed {
		return nil, fmt.Errorf("ucp worker address: %w", errClosed)
	}
	return w.address, nil
}

// ReleaseAddress exists for symmetry with ucp_worker_release_address.
func (w *Worker) ReleaseAddress([]byte) {}

// WorkerAttr describes a worker (ucp_worker_attr_t).
type WorkerAttr struct {
	ThreadMode     ucs.ThreadMode
	Address        []byte
	MaxAMHeader    int // the largest user header of Endpoint.AMSendNBX; 0 without FeatureAM
	Name           string
	MaxDebugString int
	UID            uint64
}

// Query describes the worker (ucp_worker_query).
func (w *Worker) Query() WorkerAttr {
	return WorkerAttr{ThreadMode: w.mode, Address: w.address, MaxAMHeader: w.amMaxHeader(), Name: w.name,
		MaxDebugString: 256, UID: w.uid}
}

// Progress advances every communication of the worker and returns the
// number of events handled (ucp_worker_progress).
func (w *Worker) Progress() int {
	if w.mode == ucs.ThreadModeMulti {
		w.mu.Lock()
		defer w.mu.Unlock()
	}
	return w.uw.Progress()
}

// Fence orders every RMA and atomic operation issued on the worker before it
// before those issued after it, for each target (ucp_worker_fence).
func (w *Worker) Fence() error {
	for _, wi := range w.ifaces {
		if st := wi.iface.Fence(0); st.IsErr() {
			return fmt.Errorf("ucp worker fence: %w", st)
		}
	}
	return nil
}

// Flush waits until every operation issued on the worker has completed at
// its target (ucp_worker_flush).
func (w *Worker) Flush() error {
	if w.swDirtyEPs.Load() > 0 {
		w.epMu.Lock()
		eps := append([]*Endpoint(nil), w.eps...)
		w.epMu.Unlock()
		for _, ep := range eps {
			if err := ep.swFlush(); err != nil {
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
		return comp.Status.Err()
	default:
		return st
	}
}
