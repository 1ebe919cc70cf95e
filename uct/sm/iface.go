package sm

import (
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
	"github.com/goshmem/goshmem/uct/internal/base"
)

// Iface configuration defaults (see IfaceConfigTable).
const (
	// DefaultFIFOSize is the number of cells of the receive FIFO: 256 cells
	// let 255 messages wait for the receiver's Progress, enough for a burst
	// from each of a few dozen peers.
	DefaultFIFOSize = 256
	// DefaultSegSize is the data bytes of a cell, the largest active
	// message: 8 KiB, as UCX's mm transports. With the 16-byte cell header
	// and 64-byte alignment a cell takes 8256 bytes, so a default FIFO maps
	// about 2 MiB.
	DefaultSegSize = 8192
	// DefaultFIFOMaxPoll is the number of messages one Progress call
	// delivers at most.
	DefaultFIFOMaxPoll = 16
)

var ifaceConfigTable = []ucs.ConfigField{
	{Name: "FIFO_SIZE", Default: strconv.Itoa(DefaultFIFOSize), Doc: "Cells of the shared-memory receive FIFO (a power of two)"},
	{Name: "SEG_SIZE", Default: "8k", Doc: "Largest active message, in bytes: the data size of a FIFO cell"},
	{Name: "FIFO_MAX_POLL", Default: strconv.Itoa(DefaultFIFOMaxPoll), Doc: "Messages one progress call delivers at most"},
}

// IfaceAddrLen is the length of a posix iface address.
//
// Layout, little-endian:
//
//	0  magic  uint32  "GSFA"
//	4  pid    uint32  process of the iface
//	8  fd     int32   memfd descriptor of its FIFO there
//	12 ncells uint32  FIFO cells, a power of two
//	16 id     uint64  segment id of the FIFO
//	24 stride uint32  bytes per cell
//	28 (zero) uint32
const IfaceAddrLen = 32

// ifaceAddrFormat is the layout of a posix iface address (see IfaceAddrLen).
var ifaceAddrFormat = base.Format{Name: "uct/sm: iface address", Size: IfaceAddrLen, Magic: 0x41465347, Err: ucs.ErrInvalidAddr}

// ifaceAddr is a decoded iface address.
type ifaceAddr struct {
	pid    uint32
	fd     int32
	ncells uint32
	id     uint64
	stride uint32
}

// fields are the fields of the address, in order.
func (a *ifaceAddr) fields() []any {
	return []any{&a.pid, &a.fd, &a.ncells, &a.id, &a.stride, base.Zero(4)}
}

func (a *ifaceAddr) encode() []byte { return ifaceAddrFormat.Encode(0, a.fields()...) }

// decodeIfaceAddr decodes an iface address strictly; malformed input fails
// with ucs.ErrInvalidAddr.
func decodeIfaceAddr(b []byte) (a ifaceAddr, err error) {
	_, err = ifaceAddrFormat.Decode(b, append(a.fields(), base.CheckPid(&a.pid), base.CheckNonZero("segment id", &a.id))...)
	switch {
	case err != nil:
	case a.fd < 0:
		err = ifaceAddrFormat.Errorf("descriptor %d", a.fd)
	case a.ncells < minFIFOCells || a.ncells > maxFIFOCells || a.ncells&(a.ncells-1) != 0:
		err = ifaceAddrFormat.Errorf("%d FIFO cells", a.ncells)
	case a.stride%cellAlign != 0 || a.stride < uint32(cellStride(minSegSize)) || a.stride > uint32(cellStride(maxSegSize)):
		err = ifaceAddrFormat.Errorf("cell stride %d", a.stride)
	}
	return a, err
}

// Iface is a posix iface: it owns a receive FIFO (FIFO_SIZE cells of
// SEG_SIZE data bytes) in a segment of its own, which its peers map to send
// active messages.
//
// Progress delivers up to FIFO_MAX_POLL messages per call, in the order they
// were claimed, calling each handler (installed with CBFlagSync or
// CBFlagAsync: both are called only from Progress). Without
// IfaceParams.RxHeadroom, the default, a handler gets data that lies in
// the FIFO cell and flags 0: it must copy what it keeps before it
// returns, and may not return ucs.InProgress (if it does, a warning is
// logged and the cell is reused anyway). With RxHeadroom, a cell has no
// room in front of its data for the receiver, so Progress copies each
// message into a receive buffer of the iface that has the headroom in
// front (see RxHeadroom) and passes CBParamFlagDesc: the handler may keep
// the buffer by returning ucs.InProgress, until ReleaseDesc. A message for
// an id without a handler is dropped with a logged warning.
//
// All ifaces of a job should share FIFO_SIZE and SEG_SIZE: a message is
// bounded by the smaller of the sender's SEG_SIZE and the receiver's.
type Iface struct {
	// ProgressReg is the iface's Progress in its worker's; it makes the
	// iface a uct.ProgressController.
	base.ProgressReg

	md     uct.MD
	worker *uct.Worker
	multi  bool       // several goroutines may call Progress at once
	progMu sync.Mutex // serializes Progress when multi
	seg    segKey
	rx     fifo
	rxc    cursor // where Progress receives next
	// rxDone is the head published last: the receiver publishes its
	// progress lazily (releaseCells), every rxRelease tickets and when it
	// finds its ring empty.
	rxDone    uint64
	rxRelease uint64
	segSize   int
	maxPoll   int
	addr      []byte
	rxh       base.Headroom // IfaceParams.RxHeadroom: messages are copied out of their cells when set
	rxSpare   []byte        // with rxh: the buffer of the next message (Progress only), nil when kept
	keepMax   int           // with rxh: the buffers descFree holds at most
	descMu    sync.Mutex
	descFree  [][]byte // with rxh: buffers given back by ReleaseDesc, as handed (data of rx.payload bytes)
	handlers  base.AMHandlers
	tracer    uct.AMTraceHook // see SetAMTracer
	log       ucs.Logger      // IfaceParams.Logger
	cpus      []int           // IfaceParams.CPUMask, for the wakeup goroutine

	pendMu  sync.Mutex
	pending uct.PendingQueue // the EPs' pending requests
	closed  bool

	wake wakeup // WakeupFD and EventArm (wakeup.go)
}

// openIface creates the FIFO of a new iface.
func openIface(md uct.MD, worker *uct.Worker, params *uct.IfaceParams, config *ucs.Config) (*Iface, error) {
	ncells, err := config.SizeIn("FIFO_SIZE", DefaultFIFOSize, minFIFOCells, maxFIFOCells)
	if err != nil {
		return nil, err
	}
	if ncells&(ncells-1) != 0 {
		return nil, fmt.Errorf("uct/sm: FIFO_SIZE=%d is not a power of two: %w", ncells, ucs.ErrInvalidParam)
	}
	segSize, err := config.SizeIn("SEG_SIZE", DefaultSegSize, minSegSize, maxSegSize)
	if err != nil {
		return nil, err
	}
	maxPoll, err := config.SizeIn("FIFO_MAX_POLL", DefaultFIFOMaxPoll, 1, math.MaxInt32)
	if err != nil {
		return nil, err
	}
	rxh, err := base.NewHeadroom("uct/sm", params)
	if err != nil {
		return nil, err
	}
	stride := cellStride(segSize)
	k, m, err := createSegment(fifoSize(ncells, stride), nil)
	if err != nil {
		return nil, err
	}
	initFIFO(m.addr, ncells, stride)
	i := &Iface{md: md, worker: worker, seg: k, rx: viewFIFO(m.addr, ncells, stride), segSize: segSize, maxPoll: maxPoll,
		rxh: rxh, keepMax: ncells, log: params.Log()}
	i.rxc = start()
	i.rxRelease = uint64(max(ncells/2, 1))
	if params != nil {
		i.cpus = append([]int(nil), params.CPUMask...)
	}
	a := ifaceAddr{pid: pid, fd: int32(m.fd), ncells: uint32(ncells), id: k.id, stride: uint32(stride)}
	i.addr = a.encode()
	if worker != nil {
		i.multi = worker.ThreadMode() == ucs.ThreadModeMulti
		if i.multi {
			i.Register(worker, i)
		} else {
			i.Register(worker, (*rxProgress)(i))
		}
	}
	return i, nil
}

// Query describes the iface. RMA and atomic operations complete on return
// and have no size limit beyond their kind (short and bcopy up to
// SEG_SIZE); active messages are bounded by SEG_SIZE, header included.
func (i *Iface) Query() (*uct.IfaceAttr, error) {
	a := base.IfaceAttr(base.AMFlags|base.RMAFlags|uct.IfaceFlagAtomicCPU|uct.IfaceFlagConnectToIface,
		DeviceAddrLen, IfaceAddrLen, cost)
	base.SetMemoryOps(a, i.segSize)
	a.RxHeadroom = i.rxh.Len()
	return a, nil
}

// DeviceAddress returns the DeviceAddrLen-byte name of this process's
// shared-memory domain (boot, IPC namespace and /dev/shm mount).
func (*Iface) DeviceAddress() []byte { return append([]byte(nil), domainAddr()...) }

// Address returns the IfaceAddrLen-byte address of the iface's FIFO.
func (i *Iface) Address() []byte { return append([]byte(nil), i.addr...) }

// IsReachable reports whether deviceAddr names this shared-memory domain and
// ifaceAddr is a well-formed iface address.
func (i *Iface) IsReachable(deviceAddr, ifaceAddr []byte) bool {
	if string(deviceAddr) != string(domainAddr()) {
		return false
	}
	_, err := decodeIfaceAddr(ifaceAddr)
	return err == nil
}

// SetAMHandler installs cb for id; a nil cb removes it. id must be below
// uct.AMMaxID and flags one of CBFlagSync and CBFlagAsync
// (ucs.ErrInvalidParam otherwise).
func (i *Iface) SetAMHandler(id uint8, cb uct.AMCallback, arg any, flags uct.CBFlags) error {
	return i.handlers.Set("uct/sm", id, cb, arg, flags, false)
}

// ReleaseDesc gives back data that a handler kept by returning InProgress
// (only with RxHeadroom: otherwise handlers never get CBParamFlagDesc, and
// it does nothing).
func (i *Iface) ReleaseDesc(data []byte) {
	if i.rxh.Len() == 0 || cap(data) != i.rx.payload {
		return // not one of the iface's buffers
	}
	i.descMu.Lock()
	if len(i.descFree) < i.keepMax {
		i.descFree = append(i.descFree, data[:cap(data)])
	}
	i.descMu.Unlock()
}

// RxHeadroom returns the IfaceParams.RxHeadroom bytes in front of data,
// AM data this iface handed to a handler (see uct.Iface.RxHeadroom).
func (i *Iface) RxHeadroom(data []byte) []byte { return i.rxh.Of(data) }

// rxDesc returns a receive buffer for a message, as handed to handlers:
// rx.payload data bytes with the headroom in front.
func (i *Iface) rxDesc() []byte {
	if b := i.rxSpare; b != nil {
		i.rxSpare = nil
		return b
	}
	i.descMu.Lock()
	if k := len(i.descFree); k > 0 {
		b := i.descFree[k-1]
		i.descFree[k-1] = nil
		i.descFree = i.descFree[:k-1]
		i.descMu.Unlock()
		return b
	}
	i.descMu.Unlock()
	return i.rxh.Data(i.rxh.Alloc(i.rx.payload), i.rx.payload)
}

// Progress delivers up to FIFO_MAX_POLL received messages, then retries the
// pending requests of the iface's EPs; it returns the number of messages
// delivered and requests posted.
func (i *Iface) Progress() int {
	if i.multi {
		return i.progressLocked()
	}
	return (*rxProgress)(i).Progress()
}

// progressLocked is Progress under progMu (multi mode); the single modes
// pay neither the lock nor its defer.
func (i *Iface) progressLocked() int {
	i.progMu.Lock()
	defer i.progMu.Unlock()
	return (*rxProgress)(i).Progress()
}

// rxProgress is an iface whose Progress runs without progMu: what the
// worker calls in the single-threaded modes, where it serializes Progress
// itself, without the test for multi mode and the call it leads to.
type rxProgress Iface

// Progress is Iface.Progress; the caller serializes it.
func (r *rxProgress) Progress() int {
	i := (*Iface)(r)
	c := i.rx.ready(&i.rxc)
	if c == nil {
		// Nothing came: what a receiver that waits runs again and again.
		if i.rxc.t != i.rxDone {
			i.releaseCells()
		}
		if i.pending.Len() == 0 {
			return 0
		}
		return i.pending.Dispatch()
	}
	n := 0
	for {
		i.rx.advance(&i.rxc)
		// The usual message, well formed, for a handler, with neither a
		// receive buffer to copy it to nor a tracer, is handed to its
		// handler here, without deliver's call and checks.
		// (The handler of a malformed cell's id modulo uct.AMMaxID is
		// loaded, and not used.)
		id, l, ok := cellHeaderFast(header(c), i.rx.payload)
		h := i.handlers[id%uct.AMMaxID].Load()
		if !ok || h == nil || i.rxh.Len() != 0 || i.tracer.Load() != nil {
			i.deliver(c)
		} else if h.CB(h.Arg, i.rx.msg(c, l), 0) == ucs.InProgress {
			i.warnKept(id)
		}
		if n++; n == i.maxPoll {
			break
		}
		if c = i.rx.ready(&i.rxc); c == nil {
			break
		}
	}
	if i.rxc.t-i.rxDone >= i.rxRelease {
		i.releaseCells()
	}
	if i.pending.Len() != 0 {
		n += i.pending.Dispatch()
	}
	return n
}

// releaseCells publishes the receiver's head: producers may write the
// cells of every ticket it delivered. It does so lazily, as UCX's mm
// receiver does by FIFO_RELEASE_FACTOR: every rxRelease tickets, half the
// ring, and whenever Progress or EventArm finds the ring empty. The
// store, an XCHG, waits for the CPU's stores to drain: made right after a
// message, it delayed the answer that follows it; made by the next poll
// of an empty ring, it happens while the receiver waits anyway.
func (i *Iface) releaseCells() {
	i.rx.done(i.rxc.t)
	i.rxDone = i.rxc.t
}

// warnKept logs that the handler of active message id returned
// ucs.InProgress for data it could not keep. (Out of line: Progress only
// calls it.)
//
//go:noinline
func (i *Iface) warnKept(id uint8) {
	i.log.Logf(ucs.LogWarn, "uct/sm: the handler of active message %d returned InProgress without CBParamFlagDesc; its data is reused", id)
}

// deliver calls the handler of the message in cell c, whatever it is:
// Progress delivers the usual ones itself.
func (i *Iface) deliver(c unsafe.Pointer) {
	hdr := header(c)
	id, n, ok := cellHeaderFast(hdr, i.rx.payload)
	if !ok {
		var err error
		if id, n, err = decodeCellHeader(hdr[:], i.rx.payload); err != nil {
			i.tracer.Trace(uct.AMTraceRecvDrop, hdr[4], nil)
			i.log.Logf(ucs.LogWarn, "uct/sm: dropped a malformed message: %v", err)
			return
		}
		if id == voidID {
			return
		}
	}
	data := i.rx.msg(c, n)
	h := i.handlers[id].Load()
	if h == nil {
		i.tracer.Trace(uct.AMTraceRecvDrop, id, data)
		i.log.Logf(ucs.LogWarn, "uct/sm: dropped active message %d (%d bytes): no handler", id, n)
		return
	}
	if i.rxh.Len() > 0 {
		i.deliverCopy(h, id, data)
		return
	}
	i.tracer.Trace(uct.AMTraceRecv, id, data)
	if h.CB(h.Arg, data, 0) == ucs.InProgress {
		i.warnKept(id)
	}
}

// deliverCopy calls h with a copy of cell, the data of a message in its
// FIFO cell, in a receive buffer with the headroom in front, which the
// handler may keep.
func (i *Iface) deliverCopy(h *base.AMHandler, id uint8, cell []byte) {
	buf := i.rxDesc()
	data := buf[:copy(buf, cell)]
	i.tracer.Trace(uct.AMTraceRecv, id, data)
	if h.CB(h.Arg, data, uct.CBParamFlagDesc) != ucs.InProgress {
		i.rxSpare = buf
	}
}

// Flush returns OK: every operation of the iface completes on return (a
// sent message is in the peer's FIFO).
func (*Iface) Flush(uct.FlushFlags, *uct.Completion) ucs.Status { return ucs.OK }

// Fence issues a full memory barrier and returns OK.
func (*Iface) Fence(uint32) ucs.Status {
	memoryBarrier()
	return ucs.OK
}

// EPCreate maps the FIFO of the iface whose addresses params gives and
// returns an EP to it. Malformed addresses fail with ucs.ErrInvalidAddr; an
// iface in another shared-memory domain, or whose FIFO cannot be mapped
// (dead process, reused pid or descriptor), with ucs.ErrUnreachable.
func (i *Iface) EPCreate(params *uct.EPParams) (uct.EP, error) {
	if params == nil || len(params.DeviceAddr) != DeviceAddrLen {
		return nil, fmt.Errorf("uct/sm: ep create: malformed device address: %w", ucs.ErrInvalidAddr)
	}
	a, err := decodeIfaceAddr(params.IfaceAddr)
	if err != nil {
		return nil, fmt.Errorf("uct/sm: ep create: %w", err)
	}
	if string(params.DeviceAddr) != string(domainAddr()) {
		return nil, fmt.Errorf("uct/sm: ep create: device %x is another shared-memory domain: %w", params.DeviceAddr, ucs.ErrUnreachable)
	}
	k := segKey{a.pid, a.id}
	m, err := acquireSegment(k, int(a.fd), fifoSize(int(a.ncells), int(a.stride)))
	if err != nil {
		return nil, fmt.Errorf("uct/sm: ep create: %w", err)
	}
	if err := checkFIFO(m.addr, int(a.ncells), int(a.stride)); err != nil {
		releaseSegment(k, false)
		return nil, err
	}
	e := &EP{iface: i, tx: viewFIFO(m.addr, int(a.ncells), int(a.stride)), seg: k, peer: k, peerFD: a.fd}
	e.maxAM = min(i.segSize, e.tx.payload)
	return e, nil
}

// Close unregisters the iface from its worker and frees its FIFO (the
// mapping stays while EPs of this process use it). Messages not delivered
// are dropped. The wakeup helper, if any, exits before Close returns, and
// the WakeupFD descriptor is closed.
func (i *Iface) Close() {
	i.pendMu.Lock()
	already := i.closed
	i.closed = true
	i.pendMu.Unlock()
	if already {
		return
	}
	i.Unregister()
	i.stopWakeup()
	releaseSegment(i.seg, true)
}

// fenceWord is the target of the atomic operation that Fence uses as a full
// memory barrier.
var fenceWord atomic.Uint64

// memoryBarrier is a full memory barrier: Go atomics are sequentially
// consistent, and an atomic read-modify-write (LOCK XADD on amd64) orders
// every earlier load and store before every later one, for any observer in
// any process.
func memoryBarrier() { fenceWord.Add(0) }

// cost is the cost model of the shared-memory transports (posix and sysv):
// a FIFO cell written by the sender and polled by the receiver.
var cost = base.Cost{Overhead: 10e-9, Latency: 80e-9, Bandwidth: uct.Bandwidth{Dedicated: 12e9}}
