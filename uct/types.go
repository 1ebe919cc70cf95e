package uct

import (
	"strconv"
	"sync/atomic"
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
	Name string
}

// TLResource names a transport on a device of a memory domain
// (uct_tl_resource_desc_t).
type TLResource struct {
	TLName  string
	DevName string
	DevType DeviceType
}

// Iface capability flags (UCT_IFACE_FLAG_*), with the bit numbers of the UCX
// documents.
const (
	IfaceFlagAMShort           uint64 = 1 << 0
	IfaceFlagAMBcopy           uint64 = 1 << 1
	IfaceFlagAMZcopy           uint64 = 1 << 2
	IfaceFlagPending           uint64 = 1 << 3
	IfaceFlagPutShort          uint64 = 1 << 4
	IfaceFlagPutBcopy          uint64 = 1 << 5
	IfaceFlagPutZcopy          uint64 = 1 << 6
	IfaceFlagGetShort          uint64 = 1 << 8
	IfaceFlagGetBcopy          uint64 = 1 << 9
	IfaceFlagGetZcopy          uint64 = 1 << 10
	IfaceFlagAtomicCPU         uint64 = 1 << 30
	IfaceFlagAtomicDevice      uint64 = 1 << 31
	IfaceFlagErrhandleShort    uint64 = 1 << 32
	IfaceFlagErrhandleBcopy    uint64 = 1 << 33
	IfaceFlagErrhandleZcopy    uint64 = 1 << 34
	IfaceFlagErrhandleAMID     uint64 = 1 << 35
	IfaceFlagErrhandleBcopyLn  uint64 = 1 << 36
	IfaceFlagErrhandlePeerDown uint64 = 1 << 37
	IfaceFlagConnectToIface    uint64 = 1 << 40
	IfaceFlagConnectToEP       uint64 = 1 << 41
	IfaceFlagAMDup             uint64 = 1 << 43
	IfaceFlagCBSync            uint64 = 1 << 44
	IfaceFlagCBAsync           uint64 = 1 << 45

	// IfaceFlagFlushAfterAM (a goshmem addition, in a bit UCX leaves
	// unused): a completed flush of an EP means the peer has returned from
	// its asynchronous AM handlers for every message the EP sent before the
	// flush, so what those handlers do is complete too.
	IfaceFlagFlushAfterAM uint64 = 1 << 62
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
func (op AtomicOp) OpMask() uint64 {
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
type OpCaps struct {
	MaxShort      int // largest short operation in bytes; 0 if unsupported
	MaxBcopy      int
	MinZcopy      int
	MaxZcopy      int
	OptZcopyAlign int
	AlignMTU      int
	MaxIOV        int
	MaxHdr        int // AM only: largest zcopy header
}

// AtomicCaps are the atomic operations an iface does, as OpMask bits.
type AtomicCaps struct {
	OpFlags  uint64 // posted operations
	FopFlags uint64 // fetching operations
}

// IfaceAttr is the answer of Iface.Query (uct_iface_attr_t).
type IfaceAttr struct {
	Put, Get, AM       OpCaps
	Atomic32, Atomic64 AtomicCaps
	Flags              uint64 // IfaceFlag* bits
	EventFlags         uint64
	DeviceAddrLen      int
	IfaceAddrLen       int
	EPAddrLen          int
	Overhead           float64 // seconds of CPU per message
	Bandwidth          Bandwidth
	Latency            LinearModel
	Priority           uint8
	MaxNumEPs          int
}

// MD capability flags (UCT_MD_FLAG_*).
const (
	MDFlagAlloc    uint64 = 1 << 0 // MemAlloc works
	MDFlagReg      uint64 = 1 << 1 // MemReg works
	MDFlagNeedMemh uint64 = 1 << 2 // local memory must be registered
	MDFlagNeedRkey uint64 = 1 << 3 // remote access needs an rkey
	MDFlagAdvise   uint64 = 1 << 4
	MDFlagFixed    uint64 = 1 << 5
	MDFlagRkeyPtr  uint64 = 1 << 6 // RkeyPtr gives direct access
)

// MDAttr is the answer of MD.Query (uct_md_attr_t).
type MDAttr struct {
	ComponentName  string
	Flags          uint64 // MDFlag* bits
	MaxAlloc       uint64
	MaxReg         uint64
	RkeyPackedSize int
	RegCost        LinearModel
}

// Memory allocation and registration flags (UCT_MD_MEM_*).
const (
	MemFlagNonblock  uint32 = 1 << 0
	MemFlagFixed     uint32 = 1 << 1
	MemFlagLock      uint32 = 1 << 2
	MemFlagHide      uint32 = 1 << 3
	MemAccessLocal   uint32 = 1 << 5
	MemAccessRemote  uint32 = 1 << 6 // remote put, get and atomics
	MemAccessDefault        = MemAccessLocal | MemAccessRemote
)

// Memh is a memory handle returned by MemAlloc or MemReg. Its content is
// private to the MD that made it.
type Memh any

// Allocation is memory obtained with MD.MemAlloc.
type Allocation struct {
	Address unsafe.Pointer
	Length  int
	Memh    Memh
}

// RkeyBundle is an unpacked remote key (uct_rkey_bundle_t). Rkey is what the
// EP operations take; Handle is private to the component that unpacked it.
type RkeyBundle struct {
	Rkey   uint64
	Handle any
}

// Completion signals the end of a non-blocking operation (uct_completion_t).
// Count is decremented once per operation that was given the completion and
// ended; when it reaches zero, Func is called with the first error seen (or
// OK) in Status. Transports call Invoke; users set Func and Count.
type Completion struct {
	Func   func(c *Completion)
	Count  int32
	Status ucs.Status
}

// Invoke records status and, when this was the last outstanding operation,
// calls c.Func. It is safe to call from several goroutines.
func (c *Completion) Invoke(status ucs.Status) {
	if status.IsErr() {
		// The first error wins; a racing OK must not overwrite it.
		for {
			old := atomic.LoadInt32((*int32)(unsafe.Pointer(&c.Status)))
			if ucs.Status(old).IsErr() || atomic.CompareAndSwapInt32((*int32)(unsafe.Pointer(&c.Status)), old, int32(status)) {
				break
			}
		}
	}
	if atomic.AddInt32(&c.Count, -1) == 0 && c.Func != nil {
		c.Func(c)
	}
}

// PendingReq is an operation waiting for resources on an EP
// (uct_pending_req_t). Func is called from progress when the EP may have room;
// it returns OK when it posted its operation (the request is then removed) or
// ErrNoResource to stay queued.
type PendingReq struct {
	Func func(r *PendingReq) ucs.Status
	Arg  any
}

// AM callback flags (UCT_CB_PARAM_FLAG_*), passed to an AMCallback.
const (
	// CBParamFlagDesc: data lives in a transport descriptor that the handler may
	// keep by returning InProgress and later give back with
	// Iface.ReleaseDesc.
	CBParamFlagDesc uint32 = 1 << 0
)

// AM handler flags (UCT_CB_FLAG_*), for Iface.SetAMHandler.
const (
	CBFlagSync  uint32 = 1 << 1 // called only from Progress
	CBFlagAsync uint32 = 1 << 2 // may be called from any goroutine
)

// AMCallback handles one active message. data is the whole message: for
// AMShort the 8-byte header followed by the payload, for AMBcopy what the pack
// function wrote, for AMZcopy the header followed by the iov. It returns OK,
// or InProgress to keep data (allowed only when flags has CBParamFlagDesc).
type AMCallback func(arg any, data []byte, flags uint32) ucs.Status

// AMMaxID bounds the active message ids (UCT_AM_ID_MAX).
const AMMaxID = 64

// IOV is one element of a zero-copy buffer list (uct_iov_t).
type IOV struct {
	Buffer []byte
	Memh   Memh
}

// PackFunc copies the data of a bcopy operation into the transport's buffer
// dst and returns the number of bytes written.
type PackFunc func(dst []byte) int

// UnpackFunc consumes the data of a get bcopy from the transport's buffer.
type UnpackFunc func(src []byte)

// Flush flags (UCT_FLUSH_FLAG_*).
const (
	FlushFlagLocal  uint32 = 0      // wait until every operation completes
	FlushFlagCancel uint32 = 1 << 0 // cancel what has not started and fail it
)
