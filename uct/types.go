package uct

import (
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
)

// DeviceType is the kind of a transport device (uct_device_type_t).
type DeviceType int

// Device types.
const (
	DeviceTypeNet  DeviceType = iota // network device
	DeviceTypeShm                    // shared-memory device
	DeviceTypeAcc                    // accelerator
	DeviceTypeSelf                   // loopback inside a process
)

// String returns the name ucx_info gives the device type ("network",
// "intra-node", "accelerator", "loopback"), or "unknown".
func (t DeviceType) String() string {
	switch t {
	case DeviceTypeNet:
		return "network"
	case DeviceTypeShm:
		return "intra-node"
	case DeviceTypeAcc:
		return "accelerator"
	case DeviceTypeSelf:
		return "loopback"
	}
	return "unknown"
}

// MDResource names a memory domain of a component (uct_md_resource_desc_t).
type MDResource struct {
	Name string // the name to give Component.OpenMD
}

// TLResource names a transport on a device of a memory domain
// (uct_tl_resource_desc_t), with the cost the transport advertises for it:
// Latency and Bandwidth are those of its ifaces (IfaceAttr.Latency.C, and
// IfaceAttr.Bandwidth, dedicated and shared together), known without
// opening one.
type TLResource struct {
	TLName    string        // the transport, as in UCX_TLS
	DevName   string        // the device, as in UCX_NET_DEVICES
	DevType   DeviceType    // the kind of device
	Latency   time.Duration // one-way latency of a small message
	Bandwidth float64       // bytes per second
}

// IfaceFlags are the capabilities of an iface (IfaceAttr.Flags), a set of
// IfaceFlag* bits.
type IfaceFlags uint64

// Iface capability flags (UCT_IFACE_FLAG_*), with the bit numbers of the UCX
// documents. AM, Put and Get flags say which variants of the operation the
// iface offers (short, bcopy, zcopy); Pending that EP.PendingAdd queues
// requests; AtomicCPU that its atomics are coherent with CPU atomics on the
// target's memory; Errhandle* which failures are reported (to the error
// handler or in the operation's status) rather than fatal; ConnectToIface and ConnectToEP how EPs
// connect; CBSync and CBAsync the handler modes of SetAMHandler.
const (
	IfaceFlagAMShort           IfaceFlags = 1 << 0
	IfaceFlagAMBcopy           IfaceFlags = 1 << 1
	IfaceFlagAMZcopy           IfaceFlags = 1 << 2
	IfaceFlagPending           IfaceFlags = 1 << 3
	IfaceFlagPutShort          IfaceFlags = 1 << 4
	IfaceFlagPutBcopy          IfaceFlags = 1 << 5
	IfaceFlagPutZcopy          IfaceFlags = 1 << 6
	IfaceFlagGetShort          IfaceFlags = 1 << 8
	IfaceFlagGetBcopy          IfaceFlags = 1 << 9
	IfaceFlagGetZcopy          IfaceFlags = 1 << 10
	IfaceFlagAtomicCPU         IfaceFlags = 1 << 30
	IfaceFlagAtomicDevice      IfaceFlags = 1 << 31
	IfaceFlagErrhandleShort    IfaceFlags = 1 << 32
	IfaceFlagErrhandleBcopy    IfaceFlags = 1 << 33
	IfaceFlagErrhandleZcopy    IfaceFlags = 1 << 34
	IfaceFlagErrhandleAMID     IfaceFlags = 1 << 35
	IfaceFlagErrhandleBcopyLn  IfaceFlags = 1 << 36
	IfaceFlagErrhandlePeerDown IfaceFlags = 1 << 37
	// IfaceFlagErrhandleRemoteMem: an access outside the memory of its
	// remote key is refused by the target, never applied: a get or a
	// fetching atomic fails with ucs.ErrInvalidAddr, a put is dropped (the
	// target logs it). The seed document gives it bit 35, the bit of
	// IfaceFlagErrhandleAMID; it takes the next free bit here so that the
	// two stay apart.
	IfaceFlagErrhandleRemoteMem IfaceFlags = 1 << 38
	IfaceFlagConnectToIface     IfaceFlags = 1 << 40
	IfaceFlagConnectToEP        IfaceFlags = 1 << 41
	IfaceFlagAMDup              IfaceFlags = 1 << 43
	IfaceFlagCBSync             IfaceFlags = 1 << 44
	IfaceFlagCBAsync            IfaceFlags = 1 << 45

	// IfaceFlagFlushAfterAM (a goshmem addition, in a bit UCX leaves
	// unused): a completed flush of an EP means the peer has returned from
	// its asynchronous AM handlers for every message the EP sent before the
	// flush, so what those handlers do is complete too.
	IfaceFlagFlushAfterAM IfaceFlags = 1 << 62

	// IfaceFlagAMAsyncDelivery (a goshmem addition, in a bit UCX leaves
	// unused): the iface calls the handlers installed with CBFlagAsync as
	// their messages arrive, from goroutines of its own, without Progress
	// (tcp's readers). Without it, every handler waits for the receiving
	// side's Progress, whatever its flags (shared memory).
	IfaceFlagAMAsyncDelivery IfaceFlags = 1 << 61
)

// AtomicOp is an atomic operation (uct_atomic_op_t).
type AtomicOp int

// Atomic operations. Add, And, Or and Xor may be posted (no result) or
// fetching; Swap and CSwap are always fetching.
const (
	AtomicOpAdd AtomicOp = iota
	AtomicOpAnd
	AtomicOpOr
	AtomicOpXor
	AtomicOpSwap
	AtomicOpCSwap
)

// atomicOpNames are the names of the atomic operations, by value.
var atomicOpNames = [...]string{"add", "and", "or", "xor", "swap", "cswap"}

// Valid reports whether op is one of the atomic operations.
func (op AtomicOp) Valid() bool { return op >= 0 && int(op) < len(atomicOpNames) }

// String returns the name of op ("add", "cswap", ...), or "AtomicOp(N)"
// for a value that is no operation.
func (op AtomicOp) String() string {
	if !op.Valid() {
		return "AtomicOp(" + strconv.Itoa(int(op)) + ")"
	}
	return atomicOpNames[op]
}

// OpMask returns the bit of op in the atomic masks of IfaceAttr, or 0 for a
// value that is no operation.
func (op AtomicOp) OpMask() AtomicOpMask {
	if !op.Valid() {
		return 0
	}
	return 1 << uint(op)
}

// LinearModel is a cost of the form C + M*n seconds for an n-endpoint job
// (ucs_linear_func_t).
type LinearModel struct{ C, M float64 }

// Bandwidth is a bandwidth in bytes per second: Dedicated for each process,
// Shared among the processes on the device.
type Bandwidth struct{ Dedicated, Shared float64 }

// OpCaps are the size limits of one operation kind.
// Sizes are in bytes; 0 where the iface lacks that variant.
type OpCaps struct {
	MaxShort      int // largest short operation
	MaxBcopy      int // largest bcopy operation
	MinZcopy      int // smallest zcopy operation
	MaxZcopy      int // largest zcopy operation
	OptZcopyAlign int // best alignment of zcopy buffers
	AlignMTU      int // alignment unit of zcopy buffers
	MaxIOV        int // most iov elements of a zcopy operation
	MaxHdr        int // AM only: largest zcopy header
}

// AtomicOpMask is a set of atomic operations, each the OpMask bit of its
// AtomicOp.
type AtomicOpMask uint64

// AtomicCaps are the atomic operations an iface does.
type AtomicCaps struct {
	OpFlags  AtomicOpMask // posted operations
	FopFlags AtomicOpMask // fetching operations
}

// IfaceAttr is the answer of Iface.Query (uct_iface_attr_t).
type IfaceAttr struct {
	Put, Get, AM       OpCaps     // limits of each kind of operation
	Atomic32, Atomic64 AtomicCaps // atomic operations on 32- and 64-bit words
	Flags              IfaceFlags // capabilities
	EventFlags         uint64     // event capabilities (UCT_IFACE_FLAG_EVENT_*); unused, 0
	DeviceAddrLen      int        // length of Iface.DeviceAddress
	IfaceAddrLen       int        // length of Iface.Address
	EPAddrLen          int        // length of EPConnector.EPAddress; 0 without IfaceFlagConnectToEP
	Overhead           float64    // seconds of CPU per message
	Bandwidth          Bandwidth  // bytes per second
	Latency            LinearModel
	Priority           uint8 // preference among ifaces of equal cost, higher first
	MaxNumEPs          int   // most EPs of the iface
	// RxHeadroom is the number of bytes reserved in front of the data the
	// iface's AM handlers get (IfaceParams.RxHeadroom, see
	// Iface.RxHeadroom); 0 on an iface without active messages.
	RxHeadroom int
}

// MDFlags are the capabilities of a memory domain (MDAttr.Flags), a set of
// MDFlag* bits.
type MDFlags uint64

// MD capability flags (UCT_MD_FLAG_*).
const (
	MDFlagAlloc    MDFlags = 1 << 0 // MemAlloc works
	MDFlagReg      MDFlags = 1 << 1 // MemReg works
	MDFlagNeedMemh MDFlags = 1 << 2 // local memory must be registered
	MDFlagNeedRkey MDFlags = 1 << 3 // remote access needs an rkey
	MDFlagAdvise   MDFlags = 1 << 4 // memory advice works (no MD of goshmem has it)
	MDFlagFixed    MDFlags = 1 << 5 // fixed-address allocation works (FixedAllocator)
	MDFlagRkeyPtr  MDFlags = 1 << 6 // RkeyPtr gives direct access
)

// MDAttr is the answer of MD.Query (uct_md_attr_t).
type MDAttr struct {
	ComponentName  string      // the MD's component
	Flags          MDFlags     // capabilities
	MaxAlloc       uint64      // largest MemAlloc; 0 without MDFlagAlloc
	MaxReg         uint64      // largest MemReg; 0 without MDFlagReg
	RkeyPackedSize int         // length of the keys MkeyPack packs
	RegCost        LinearModel // cost of MemReg in seconds
}

// MemFlags are the flags of MD.MemAlloc and MD.MemReg, a set of MemFlag*
// and MemAccess* bits; the MDs of goshmem accept and ignore them.
type MemFlags uint32

// Memory allocation and registration flags (UCT_MD_MEM_*).
const (
	MemFlagNonblock  MemFlags = 1 << 0                           // do not wait for pages to be mapped
	MemFlagFixed     MemFlags = 1 << 1                           // allocate at the given address
	MemFlagLock      MemFlags = 1 << 2                           // lock the pages in memory
	MemFlagHide      MemFlags = 1 << 3                           // hide the memory from forked children
	MemAccessLocal   MemFlags = 1 << 5                           // local access
	MemAccessRemote  MemFlags = 1 << 6                           // remote put, get and atomics
	MemAccessDefault          = MemAccessLocal | MemAccessRemote // local and remote access
)

// Memh is a memory handle returned by MemAlloc or MemReg. Its content is
// private to the MD that made it.
type Memh any

// Allocation is memory obtained with MD.MemAlloc.
type Allocation struct {
	Address unsafe.Pointer // where the memory is mapped in this process
	Length  int            // bytes allocated: the length asked for, rounded up
	Memh    Memh           // the handle for MemFree and MkeyPack
}

// RkeyBundle is an unpacked remote key (uct_rkey_bundle_t). Rkey is what the
// EP operations take; Handle is private to the component that unpacked it.
type RkeyBundle struct {
	Rkey   uint64 // for the EP operations
	Handle any    // private to the component
}

// Completion signals the end of a non-blocking operation (uct_completion_t).
// Count is decremented once per operation that was given the completion and
// ended; when it reaches zero, Func is called, and Status then returns the
// first error seen (or OK). Transports call Invoke; users set Func, Arg and
// Count, and reuse a completion by assigning it a new literal.
type Completion struct {
	Func func(c *Completion)
	// Arg is for Func's use: the operation the completion belongs to, found
	// again from the *Completion that Func gets (a pointer stored here costs
	// no allocation).
	Arg   any
	Count int32
	// status holds the first error as a ucs.Status, or 0 (OK); a full-width
	// atomic, since several transports' goroutines may fail at once.
	status atomic.Int32
}

// Status returns the first error recorded by Invoke or SetError, or OK.
func (c *Completion) Status() ucs.Status { return ucs.Status(c.status.Load()) }

// SetError records st unless an error was recorded already: the first
// error wins, and OK records nothing. It does not touch Count.
func (c *Completion) SetError(st ucs.Status) {
	if !st.IsErr() {
		return
	}
	for {
		old := c.status.Load()
		if ucs.Status(old).IsErr() || c.status.CompareAndSwap(old, int32(st)) {
			return
		}
	}
}

// Invoke records status and, when this was the last outstanding operation,
// calls c.Func. It is safe to call from several goroutines.
func (c *Completion) Invoke(status ucs.Status) {
	c.SetError(status)
	if atomic.AddInt32(&c.Count, -1) == 0 && c.Func != nil {
		c.Func(c)
	}
}

// PendingReq is an operation waiting for resources on an EP
// (uct_pending_req_t). Func is called from progress when the EP may have room;
// it returns OK when it posted its operation (the request is then removed) or
// ErrNoResource to stay queued.
type PendingReq struct {
	Func func(r *PendingReq) ucs.Status // posts the operation
	Arg  any                            // for Func's use
}

// AM callback flags (UCT_CB_PARAM_FLAG_*), passed to an AMCallback; 0 when
// data is valid only during the call.
const (
	// CBParamFlagDesc: data lives in a transport descriptor that the handler may
	// keep by returning InProgress and later give back with
	// Iface.ReleaseDesc.
	CBParamFlagDesc uint32 = 1 << 0
)

// CBFlags are the flags of Iface.SetAMHandler: how the handler may be
// called.
type CBFlags uint32

// AM handler flags (UCT_CB_FLAG_*), for Iface.SetAMHandler.
const (
	CBFlagSync  CBFlags = 1 << 1 // called only from Progress
	CBFlagAsync CBFlags = 1 << 2 // may be called from any goroutine
)

// AMCallback handles one active message. data is the whole message: for
// AMShort the 8-byte header followed by the payload, for AMBcopy what the pack
// function wrote, for AMZcopy the header followed by the iov. It returns OK,
// or InProgress to keep data (allowed only when flags has CBParamFlagDesc).
// On an iface opened with IfaceParams.RxHeadroom, Iface.RxHeadroom(data)
// gives the bytes reserved in front of data.
type AMCallback func(arg any, data []byte, flags uint32) ucs.Status

// AMMaxID bounds the active message ids (UCT_AM_ID_MAX): ids are 0 to
// AMMaxID-1.
const AMMaxID = 64

// IOV is one element of a zero-copy buffer list (uct_iov_t).
type IOV struct {
	Buffer []byte // the bytes
	Memh   Memh   // their registration, nil where the MD needs none
}

// PackFunc copies the data of a bcopy operation into the transport's buffer
// dst and returns the number of bytes written.
type PackFunc func(dst []byte) int

// UnpackFunc consumes the data of a get bcopy from the transport's buffer.
type UnpackFunc func(src []byte)

// FlushFlags are the flags of Iface.Flush and EP.Flush.
type FlushFlags uint32

// Flush flags (UCT_FLUSH_FLAG_*).
const (
	FlushFlagLocal  FlushFlags = 0      // wait until every operation completes
	FlushFlagCancel FlushFlags = 1 << 0 // cancel what has not started and fail it
)
