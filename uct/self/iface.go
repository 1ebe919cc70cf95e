package self

import (
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
	"github.com/goshmem/goshmem/uct/internal/base"
)

// Iface configuration defaults (see IfaceConfigTable).
const (
	// DefaultSegSize is the largest active message (header included) and the
	// largest put bcopy, in bytes.
	DefaultSegSize = 8192
	// DefaultAMQueueLen is the number of active messages an iface holds
	// before senders get ucs.ErrNoResource.
	DefaultAMQueueLen = 256
)

var ifaceConfigTable = []ucs.ConfigField{
	{Name: "SEG_SIZE", Default: strconv.Itoa(DefaultSegSize), Doc: "Largest active message and put bcopy of the self transport, in bytes"},
	{Name: "AM_QUEUE_LEN", Default: strconv.Itoa(DefaultAMQueueLen), Doc: "Active messages a self iface queues until Progress delivers them"},
}

// IfaceAddrLen is the length of a self iface address: the pid and the random
// id of the iface.
const IfaceAddrLen = 12

// ifaceAddrFormat is the layout of a self iface address: pid, iface id.
var ifaceAddrFormat = base.Format{Name: "uct/self: iface address", Size: IfaceAddrLen, Err: ucs.ErrInvalidAddr}

// pendingEntry is a request queued by EP.PendingAdd.
type pendingEntry struct {
	ep  *EP
	req *uct.PendingReq
}

// Iface is a self iface. Its EPs reach only the iface itself.
//
// Active messages are copied into a queue of AM_QUEUE_LEN messages
// (ucs.ErrNoResource when it is full) and delivered by Progress, in the order
// they were sent, to handlers installed with either CBFlagSync or
// CBFlagAsync; no handler is ever called from inside a send. Handlers get
// CBParamFlagDesc: they may keep the data by returning ucs.InProgress and
// give it back with ReleaseDesc. A message for an id without a handler is
// dropped with a logged warning. Each message buffer has the
// IfaceParams.RxHeadroom bytes in front of the data (see RxHeadroom).
type Iface struct {
	// ProgressReg is the iface's Progress in its worker's; it makes the
	// iface a uct.ProgressController.
	base.ProgressReg

	md      *MD
	worker  *uct.Worker
	id      uint64
	addr    []byte
	segSize int
	qlen    int
	rxh     base.Headroom // IfaceParams.RxHeadroom, in front of each message buffer

	handlers base.AMHandlers
	tracer   uct.AMTraceHook // see SetAMTracer
	log      ucs.Logger      // IfaceParams.Logger

	progressMu sync.Mutex // one Progress at a time
	mu         sync.Mutex // guards the fields below
	queue      []base.AMMsg
	spare      []base.AMMsg
	used       int      // queue slots taken, including messages being packed
	free       [][]byte // recycled message buffers of segSize bytes
	pending    []pendingEntry
	npending   atomic.Int32
	nqueued    atomic.Int32 // len(queue), read by Progress without a lock
	closed     bool
	wakeFD     int            // the WakeupFD eventfd, when hasWakeFD
	hasWakeFD  bool           // WakeupFD or EventArm created wakeFD
	armed      uint32         // the receive events EventArm armed for: the next such enqueue writes wakeFD
	epIDs      map[uint64]*EP // EPs created for connecting to an EP, by id
}

// IfaceOpen opens a self iface on the resource {self, memory0} and registers
// its Progress with worker (when worker is not nil). config may be nil for
// the defaults of IfaceConfigTable; bad values fail with
// ucs.ErrInvalidParam, another resource with ucs.ErrNoDevice.
func (m *MD) IfaceOpen(worker *uct.Worker, params *uct.IfaceParams, config *ucs.Config) (uct.Iface, error) {
	if err := m.CheckIface(params); err != nil {
		return nil, err
	}
	segSize, err := config.SizeIn("SEG_SIZE", DefaultSegSize, 16, math.MaxInt32)
	if err != nil {
		return nil, err
	}
	qlen, err := config.SizeIn("AM_QUEUE_LEN", DefaultAMQueueLen, 1, 1<<20)
	if err != nil {
		return nil, err
	}
	rxh, err := base.NewHeadroom("uct/self", params)
	if err != nil {
		return nil, err
	}
	i := &Iface{md: m, worker: worker, id: randomID(), segSize: segSize, qlen: qlen, rxh: rxh, log: params.Log()}
	i.addr = ifaceAddrFormat.Encode(0, base.Pid, i.id)
	i.Register(worker, i)
	return i, nil
}

// Query describes the iface. Every RMA and atomic operation completes on
// return; active messages are bounded by SEG_SIZE.
func (i *Iface) Query() (*uct.IfaceAttr, error) {
	a := base.IfaceAttr(base.AMFlags|base.RMAFlags|uct.IfaceFlagAtomicCPU|uct.IfaceFlagConnectToIface|uct.IfaceFlagConnectToEP,
		0, IfaceAddrLen, cost)
	base.SetMemoryOps(a, i.segSize)
	a.Put.MaxShort = math.MaxInt32
	a.Get.MaxBcopy = math.MaxInt32
	a.EPAddrLen = EPAddrLen
	a.RxHeadroom = i.rxh.Len()
	return a, nil
}

// DeviceAddress returns an empty address: the device is the process.
func (*Iface) DeviceAddress() []byte { return nil }

// Address returns the IfaceAddrLen-byte address: pid and iface id.
func (i *Iface) Address() []byte { return append([]byte(nil), i.addr...) }

// IsReachable reports whether the addresses name this very iface.
func (i *Iface) IsReachable(deviceAddr, ifaceAddr []byte) bool {
	return len(deviceAddr) == 0 && string(ifaceAddr) == string(i.addr)
}

// SetAMHandler installs cb for id; a nil cb removes it. id must be below
// uct.AMMaxID and flags one of CBFlagSync and CBFlagAsync
// (ucs.ErrInvalidParam otherwise).
func (i *Iface) SetAMHandler(id uint8, cb uct.AMCallback, arg any, flags uct.CBFlags) error {
	return i.handlers.Set("uct/self", id, cb, arg, flags, false)
}

// ReleaseDesc gives back data that a handler kept by returning InProgress.
func (i *Iface) ReleaseDesc(data []byte) {
	if cap(data) != i.segSize {
		return // not ours; leave it to the garbage collector
	}
	i.mu.Lock()
	i.free = append(i.free, data[:cap(data)])
	i.mu.Unlock()
}

// RxHeadroom returns the IfaceParams.RxHeadroom bytes in front of data,
// AM data this iface handed to a handler (see uct.Iface.RxHeadroom).
func (i *Iface) RxHeadroom(data []byte) []byte { return i.rxh.Of(data) }

// reserve takes a queue slot and a message buffer (segSize bytes, with the
// headroom in front), or reports that the queue is full.
func (i *Iface) reserve() ([]byte, bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.used >= i.qlen || i.closed {
		return nil, false
	}
	i.used++
	if n := len(i.free); n > 0 {
		b := i.free[n-1]
		i.free = i.free[:n-1]
		return b, true
	}
	return i.rxh.Data(i.rxh.Alloc(i.segSize), i.segSize), true
}

// enqueue appends a message whose slot reserve took; ev are its events
// (uct.RecvEvents of its send flags).
func (i *Iface) enqueue(id uint8, data []byte, ev uint32) {
	i.tracer.Trace(uct.AMTraceSend, id, data)
	i.mu.Lock()
	i.queue = append(i.queue, base.AMMsg{ID: id, Data: data})
	i.nqueued.Store(int32(len(i.queue)))
	if i.armed&ev != 0 {
		i.wakeLocked()
	}
	i.mu.Unlock()
}

// unreserve gives back a slot and buffer that reserve took but no message
// used.
func (i *Iface) unreserve(buf []byte) {
	i.mu.Lock()
	i.used--
	i.free = append(i.free, buf)
	i.mu.Unlock()
}

// Progress delivers the queued active messages, then retries the pending
// requests of the iface's EPs; it returns the number of messages delivered
// and requests posted.
func (i *Iface) Progress() int {
	if i.nqueued.Load() == 0 && i.npending.Load() == 0 {
		// Nothing to do: a worker that polls all its ifaces takes no lock
		// here. (A message queued meanwhile is seen by the next call.)
		return 0
	}
	i.progressMu.Lock()
	defer i.progressMu.Unlock()
	i.mu.Lock()
	q := i.queue
	i.queue, i.spare = i.spare[:0], nil
	i.nqueued.Store(0)
	i.mu.Unlock()

	var kept int
	for k, m := range q {
		if !i.deliver(m) {
			q[k].Data = nil // kept by the handler until ReleaseDesc
			kept++
		}
	}
	i.mu.Lock()
	i.used -= len(q)
	for k := range q {
		if q[k].Data != nil {
			i.free = append(i.free, q[k].Data[:cap(q[k].Data)])
		}
		q[k] = base.AMMsg{}
	}
	i.spare = q[:0]
	i.mu.Unlock()

	n := len(q)
	if i.npending.Load() != 0 {
		n += i.progressPending()
	}
	return n
}

// deliver calls the handler of m and reports whether the data may be
// recycled (false when the handler kept it).
func (i *Iface) deliver(m base.AMMsg) bool {
	h := i.handlers[m.ID].Load()
	if h == nil {
		i.tracer.Trace(uct.AMTraceRecvDrop, m.ID, m.Data)
		i.log.Logf(ucs.LogWarn, "uct/self: dropped active message %d (%d bytes): no handler", m.ID, len(m.Data))
		return true
	}
	i.tracer.Trace(uct.AMTraceRecv, m.ID, m.Data)
	return h.CB(h.Arg, m.Data, uct.CBParamFlagDesc) != ucs.InProgress
}

// progressPending calls pending requests in order until one finds no
// resources, and returns how many posted.
func (i *Iface) progressPending() int {
	n := 0
	for {
		i.mu.Lock()
		if len(i.pending) == 0 {
			i.mu.Unlock()
			return n
		}
		e := i.pending[0]
		i.mu.Unlock()
		if e.req.Func(e.req) == ucs.ErrNoResource {
			return n
		}
		i.mu.Lock()
		// The callback may have purged the queue; remove e only if still first.
		if len(i.pending) > 0 && i.pending[0] == e {
			i.pending[0] = pendingEntry{}
			i.pending = i.pending[1:]
			i.npending.Add(-1)
		}
		i.mu.Unlock()
		n++
	}
}

// Flush returns OK: every operation of the iface completes on return.
func (*Iface) Flush(uct.FlushFlags, *uct.Completion) ucs.Status { return ucs.OK }

// Fence issues a full memory barrier and returns OK.
func (*Iface) Fence(uint32) ucs.Status {
	memoryBarrier()
	return ucs.OK
}

// EPCreate connects an EP to the iface named by params, which must be this
// iface: malformed addresses fail with ucs.ErrInvalidAddr, another iface
// with ucs.ErrUnreachable. With params.Unconnected (and no addresses,
// ucs.ErrInvalidParam otherwise) it creates an unconnected EP for
// uct.EPConnector (see EP.ConnectToEP).
func (i *Iface) EPCreate(params *uct.EPParams) (uct.EP, error) {
	if params != nil && params.Unconnected {
		if len(params.DeviceAddr) != 0 || len(params.IfaceAddr) != 0 {
			return nil, fmt.Errorf("uct/self: ep create: unconnected ep with an address: %w", ucs.ErrInvalidParam)
		}
		e := &EP{iface: i, id: randomID()}
		i.mu.Lock()
		if i.epIDs == nil {
			i.epIDs = make(map[uint64]*EP)
		}
		i.epIDs[e.id] = e
		i.mu.Unlock()
		return e, nil
	}
	if params == nil || len(params.DeviceAddr) != 0 || len(params.IfaceAddr) != IfaceAddrLen {
		return nil, fmt.Errorf("uct/self: ep create: malformed address: %w", ucs.ErrInvalidAddr)
	}
	if !i.IsReachable(params.DeviceAddr, params.IfaceAddr) {
		return nil, fmt.Errorf("uct/self: ep create: iface %x is not this one: %w", params.IfaceAddr, ucs.ErrUnreachable)
	}
	e := &EP{iface: i}
	e.connected.Store(true)
	return e, nil
}

// Close unregisters the iface from its worker's progress. Queued messages
// are dropped and later sends fail with ucs.ErrNoResource. The WakeupFD
// descriptor, if any, is closed.
func (i *Iface) Close() {
	i.Unregister()
	i.mu.Lock()
	i.closed = true
	i.queue = nil
	i.nqueued.Store(0)
	i.closeWakeupLocked()
	i.mu.Unlock()
}

// fenceWord is the target of the atomic operation that Fence uses as a full
// memory barrier.
var fenceWord atomic.Uint64

// memoryBarrier is a full memory barrier: Go atomics are sequentially
// consistent, and an atomic read-modify-write (LOCK XADD on amd64) orders
// every earlier load and store before every later one.
func memoryBarrier() { fenceWord.Add(0) }

// cost is the cost model of self, UCX's: a message is a copy in the
// process, with no latency beyond its overhead.
var cost = base.Cost{Overhead: 10e-9, Bandwidth: uct.Bandwidth{Dedicated: 6911e6}}
