package uct

import (
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
)

// Component is one transport family: it lists its memory domains and
// unpacks the remote keys its MDs pack (uct_component_h).
type Component interface {
	// Name is the component name ("self", "posix", "sysv", "cma", "tcp").
	Name() string
	// MDResources lists the memory domains the component offers here.
	MDResources() ([]MDResource, error)
	// OpenMD opens the memory domain name, with its configuration read from
	// the environment variables of config (nil for the defaults).
	OpenMD(name string, config *ucs.Config) (MD, error)
	// MDConfigTable is the MD's configuration table (names without prefix).
	MDConfigTable() []ucs.ConfigField
	// RkeyUnpack decodes a key packed by MD.MkeyPack, possibly in another
	// process, and prepares it for use (it may map the remote memory). It
	// fails with ucs.ErrInvalidParam for malformed input and
	// ucs.ErrUnreachable when the memory cannot be reached from here.
	RkeyUnpack(packed []byte) (RkeyBundle, error)
	// RkeyPtr returns a local pointer through which raddr, covered by rkey,
	// can be read and written directly; ucs.ErrUnsupported where the
	// component has no such access, ucs.ErrOutOfRange outside the key.
	RkeyPtr(rkey RkeyBundle, raddr uint64) (unsafe.Pointer, error)
	// RkeyRelease releases what RkeyUnpack prepared.
	RkeyRelease(rkey RkeyBundle) error
}

// MD is a memory domain: the unit that allocates, registers and keys memory
// (uct_md_h).
type MD interface {
	// Component returns the component of the MD.
	Component() Component
	// Name returns the name of the MD, one of its component's MDResources.
	Name() string
	// Query describes the MD: its MDFlag* capabilities, the largest
	// allocation and registration, the size of its packed keys.
	Query() (MDAttr, error)
	// MemAlloc allocates at least length bytes that remote peers can reach
	// through keys packed with MkeyPack; name labels it for debugging. It
	// fails with ucs.ErrUnsupported on an MD without MDFlagAlloc.
	// A length that is not positive fails with ucs.ErrInvalidParam, an
	// allocation the system refuses with ucs.ErrNoMemory.
	MemAlloc(length int, flags MemFlags, name string) (Allocation, error)
	// MemFree releases an allocation of MemAlloc; a handle MemAlloc did not
	// return, or one freed already, fails with ucs.ErrInvalidParam.
	MemFree(memh Memh) error
	// MemReg registers the length bytes at addr, which must stay valid
	// until MemDereg; ucs.ErrUnsupported without MDFlagReg,
	// ucs.ErrInvalidParam for a range the MD cannot register.
	MemReg(addr unsafe.Pointer, length int, flags MemFlags) (Memh, error)
	// MemDereg releases a registration of MemReg; a handle MemReg did not
	// return, or one released already, fails with ucs.ErrInvalidParam.
	MemDereg(memh Memh) error
	// MkeyPack appends the remote key of memh, RkeyPackedSize bytes, for
	// Component.RkeyUnpack in any process, to dst and returns the extended
	// slice (a caller that keeps a buffer packs without allocating, as
	// uct_md_mkey_pack writes into the caller's); a handle of another MD,
	// or one released, fails with ucs.ErrInvalidParam.
	MkeyPack(dst []byte, memh Memh) ([]byte, error)
	// TLResources lists the transports and devices of the MD.
	TLResources() ([]TLResource, error)
	// IfaceConfigTable is the configuration table of the MD's ifaces.
	IfaceConfigTable() []ucs.ConfigField
	// IfaceOpen opens an interface on the resource params name (any of
	// the MD's when params leaves them empty) and registers its Progress
	// with worker when worker is not nil (an iface whose Progress has work
	// only at times, as cma's reports of failed EPs, is in the worker's
	// progress only while it has some). config holds the values of
	// IfaceConfigTable (nil for the defaults). Another resource fails with
	// ucs.ErrNoDevice, a bad configuration with ucs.ErrInvalidParam.
	IfaceOpen(worker *Worker, params *IfaceParams, config *ucs.Config) (Iface, error)
	// Close releases the MD; memory and ifaces must be released first.
	Close()
}

// Iface open modes (UCT_IFACE_OPEN_MODE_*). IfaceOpenModeDevice, opening
// an iface on a device, is the only mode goshmem has; IfaceParams does not
// carry it.
const (
	IfaceOpenModeDevice uint64 = 1 << 0
)

// MaxRxHeadroom bounds IfaceParams.RxHeadroom: 64 KiB, far more than a
// receive descriptor needs, and little beside a receive buffer.
const MaxRxHeadroom = 64 << 10

// IfaceParams are the parameters of MD.IfaceOpen (uct_iface_params_t).
type IfaceParams struct {
	// TLName and DevName select the resource (from MD.TLResources).
	TLName, DevName string
	// StatsRoot of UCX has no meaning here.

	// RxHeadroom is the number of bytes the iface reserves in front of
	// the data it hands to its AM handlers, in the same buffer
	// (uct_iface_params_t.rx_headroom): a handler reaches them with
	// Iface.RxHeadroom(data) and may use them as its own (UCX users build
	// their receive descriptor there); they stay valid as long as data
	// does, until ReleaseDesc when the handler keeps it. With RxHeadroom
	// above 0 every handler call carries CBParamFlagDesc, so any message
	// may be kept. Where a transport hands data in place (sm, in the
	// sender's FIFO cell), a headroom costs a copy into a receive buffer
	// of the iface; 0, the default, keeps the in-place path. Negative or
	// above MaxRxHeadroom, it fails IfaceOpen with ucs.ErrInvalidParam.
	// IfaceAttr.RxHeadroom reports it.
	RxHeadroom int

	// CPUMask lists the CPUs that the goroutines the iface owns run on
	// (uct_iface_params_t.cpu_mask): tcp's accepting, polling and
	// handshaking goroutines, the wakeup goroutine of the shared-memory
	// transports. Each locks its OS thread and binds it to the CPUs
	// (ucs.BindThread); a mask the system refuses is logged and leaves
	// the affinity as it was. Progress runs on the caller's goroutines,
	// which the mask does not touch. Nil by default: the system's policy.
	CPUMask []int

	// ErrHandler is called from progress when an EP of the iface fails
	// (peer dead, connection lost); status says how.
	// Nil by default: failures are then seen only in the status of the
	// EP's operations.
	ErrHandler func(arg any, ep EP, status ucs.Status)
	// ErrHandlerArg is passed to every call of ErrHandler.
	ErrHandlerArg any

	// Logger receives the iface's log lines (dropped messages, refused
	// connections, failed peers); nil means ucs.DefaultLogger(). ucp
	// passes its context's logger.
	Logger ucs.Logger
}

// Log returns p.Logger, or ucs.DefaultLogger() when p or p.Logger is nil.
func (p *IfaceParams) Log() ucs.Logger {
	if p == nil {
		return ucs.DefaultLogger()
	}
	return ucs.LoggerOrDefault(p.Logger)
}

// Iface is a communication interface on one device (uct_iface_h).
type Iface interface {
	// Query describes the iface: its IfaceFlag* capabilities, the limits
	// of each operation, the lengths of its addresses, its cost model.
	Query() (*IfaceAttr, error)
	// DeviceAddress and Address describe the iface to remote peers; the
	// lengths are those of IfaceAttr.
	DeviceAddress() []byte
	Address() []byte
	// IsReachable reports whether an iface with the given device and iface
	// addresses can be reached from this one. Malformed addresses are not
	// reachable.
	IsReachable(deviceAddr, ifaceAddr []byte) bool
	// SetAMHandler installs cb for active messages with id (< AMMaxID);
	// a nil cb removes the handler. flags is CBFlagSync or CBFlagAsync
	// (transports that call every handler from Progress accept both at
	// once). An id of AMMaxID or more, or other flags, fail with
	// ucs.ErrInvalidParam.
	SetAMHandler(id uint8, cb AMCallback, arg any, flags CBFlags) error
	// ReleaseDesc gives back AM data a handler kept by returning InProgress
	// (with CBParamFlagDesc), exactly as the handler got it (the slice, or
	// one that starts at the same byte); with it goes its headroom.
	ReleaseDesc(data []byte)
	// RxHeadroom returns the IfaceParams.RxHeadroom bytes the iface
	// reserved in front of data, nil when it was opened without headroom.
	// data must be AM data this iface handed to a handler, as handed (the
	// slice, or one that starts at the same byte), during the handler's
	// call or, kept, until ReleaseDesc: the headroom lives as long as data.
	// The bytes are the handler's (the transport neither reads nor clears
	// them), and do not overlap data: their capacity ends where data
	// begins. Any other slice gives memory that is not a headroom, as in
	// UCX (under -race, checkptr catches one that straddles two
	// allocations); a slice with no capacity panics.
	//
	// It is a method of the iface rather than a parameter of AMCallback so
	// that handlers keep one signature and pay nothing without headroom,
	// and so that the size is what the iface recorded when it was opened,
	// not the caller's claim. A Go slice cannot reach before its first
	// byte: the headroom is built with unsafe from data's address.
	RxHeadroom(data []byte) []byte
	// Progress does pending work (receives, completions) and returns the
	// number of events handled.
	Progress() int
	// Flush completes every operation issued on the iface's EPs before it:
	// OK when all are done, InProgress when comp will be signalled (see
	// EP.Flush for flags).
	Flush(flags FlushFlags, comp *Completion) ucs.Status
	// Fence orders the operations issued on the iface's EPs before it
	// before those issued after; flags are reserved (0).
	Fence(flags uint32) ucs.Status
	// EPCreate connects a new EP to the remote iface whose addresses are
	// given (connect to iface). It fails with ucs.ErrInvalidAddr for
	// malformed addresses and ucs.ErrUnreachable where IsReachable is false.
	// With EPParams.Unconnected, on a transport with IfaceFlagConnectToEP,
	// it creates an unconnected EP instead (see EPConnector).
	EPCreate(params *EPParams) (EP, error)
	// WakeupFD returns a file descriptor that becomes readable when the
	// iface has events, or ucs.ErrUnsupported.
	WakeupFD() (int, error)
	// Close releases the iface: it unregisters Progress from the worker
	// and drops the messages not delivered. The iface and its EPs must not
	// be used afterwards.
	Close()
}

// EPParams are the parameters of Iface.EPCreate (uct_ep_params_t).
type EPParams struct {
	// DeviceAddr and IfaceAddr are the addresses of the remote iface
	// (its Iface.DeviceAddress and Iface.Address).
	DeviceAddr []byte
	IfaceAddr  []byte
	// PathIndex selects among several paths to the peer; 0 by default.
	PathIndex int
	// Unconnected asks for an EP that is not connected to an iface, to be
	// bound to a remote EP with uct.EPConnector (connect to EP): it stands
	// for UCX's EP parameters without an iface address. DeviceAddr and
	// IfaceAddr must then be empty (ucs.ErrInvalidParam otherwise).
	// Transports without IfaceFlagConnectToEP ignore it, and fail on the
	// missing address with ucs.ErrInvalidAddr.
	Unconnected bool
}

// EP is an endpoint: a connection from an iface to one remote iface
// (uct_ep_h). An EP is used from one goroutine at a time unless the worker
// was created with ucs.ThreadModeMulti.
type EP interface {
	// Every operation returns OK when it completed, InProgress when comp
	// will be signalled, ucs.ErrNoResource when the EP has no room now
	// (retry, or queue with PendingAdd), or the error that ended it.

	// PutShort writes buf (at most IfaceAttr.Put.MaxShort bytes) to raddr.
	PutShort(buf []byte, raddr uint64, rkey uint64) ucs.Status
	// PutBcopy writes what pack produces (at most Put.MaxBcopy bytes) and
	// returns its length.
	PutBcopy(pack PackFunc, raddr uint64, rkey uint64) (int, ucs.Status)
	// PutZcopy writes the iov without an intermediate copy; comp is
	// signalled when the buffers may be reused if the result is InProgress.
	PutZcopy(iov []IOV, raddr uint64, rkey uint64, comp *Completion) ucs.Status
	// GetBcopy reads length bytes (at most Get.MaxBcopy) at raddr and hands
	// them to unpack: before returning OK, or before comp is signalled
	// when it returns InProgress.
	GetBcopy(unpack UnpackFunc, length int, raddr uint64, rkey uint64, comp *Completion) ucs.Status
	// GetZcopy reads into the iov without an intermediate copy; with
	// InProgress, the data is there when comp is signalled.
	GetZcopy(iov []IOV, raddr uint64, rkey uint64, comp *Completion) ucs.Status

	// AMShort sends the 8-byte header and payload to handler id.
	AMShort(id uint8, header uint64, payload []byte) ucs.Status
	// AMBcopy sends what pack produces (at most AM.MaxBcopy bytes) to
	// handler id and returns its length; flags: 0 or SendFlagSignaled.
	AMBcopy(id uint8, pack PackFunc, flags uint32) (int, ucs.Status)
	// AMZcopy sends header (at most AM.MaxHdr bytes) and the iov to handler
	// id without an intermediate copy; with InProgress the buffers may be
	// reused once comp is signalled. flags: 0 or SendFlagSignaled.
	AMZcopy(id uint8, header []byte, iov []IOV, flags uint32, comp *Completion) ucs.Status

	// AtomicPost64/32 apply a posted op (Add, And, Or, Xor) to raddr.
	AtomicPost64(op AtomicOp, value uint64, raddr uint64, rkey uint64) ucs.Status
	AtomicPost32(op AtomicOp, value uint32, raddr uint64, rkey uint64) ucs.Status
	// AtomicFetch64/32 apply a fetching op (Add, And, Or, Xor, Swap) and
	// store the old value in *result before comp is signalled (or before
	// returning OK).
	AtomicFetch64(op AtomicOp, value uint64, raddr uint64, rkey uint64, result *uint64, comp *Completion) ucs.Status
	AtomicFetch32(op AtomicOp, value uint32, raddr uint64, rkey uint64, result *uint32, comp *Completion) ucs.Status
	// AtomicCSwap64/32 store swap at raddr if it holds compare, and the old
	// value in *result.
	AtomicCSwap64(compare, swap uint64, raddr uint64, rkey uint64, result *uint64, comp *Completion) ucs.Status
	AtomicCSwap32(compare, swap uint32, raddr uint64, rkey uint64, result *uint32, comp *Completion) ucs.Status

	// Flush completes (or, with FlushFlagCancel, cancels) every operation
	// issued on the EP before it: OK when done, InProgress with comp.
	Flush(flags FlushFlags, comp *Completion) ucs.Status
	// Fence orders operations issued before it before those issued after.
	Fence(flags uint32) ucs.Status
	// PendingAdd queues r until the EP has resources; it returns ucs.ErrBusy
	// when the EP has resources now (the caller should retry the operation).
	PendingAdd(r *PendingReq, flags uint32) ucs.Status
	// PendingPurge removes every queued request, calling cb on each.
	PendingPurge(cb func(r *PendingReq))
	// Destroy releases the EP; outstanding operations fail with
	// ucs.ErrCanceled.
	Destroy()
}
