package uct

import (
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
)

// Optional interfaces: a transport implements them on its Iface (or MD)
// when it has the capability; users find them with a type assertion.

// Event kinds an iface can be armed for (UCT_EVENT_*), and that
// transports report through Worker.Signal.
const (
	EventSendComp uint32 = 1 << 0 // a send operation completed
	EventTagComp  uint32 = 1 << 1 // a tag operation completed
	// EventRecv: an active message arrived, signaled or not.
	EventRecv uint32 = 1 << 2
	// EventRecvSig: an active message sent with SendFlagSignaled arrived.
	// An iface armed for it alone is not woken by other messages.
	EventRecvSig uint32 = 1 << 3

	// EventAll is every event kind.
	EventAll = EventSendComp | EventTagComp | EventRecv | EventRecvSig
)

// ArmedRecvEvents checks the events of an EventArm call, for an iface whose
// sends complete on return (their completion events never fire), and
// returns the receive kinds among them (EventRecv, EventRecvSig), which
// are those that arm it: 0 when the call arms nothing and returns
// ucs.OK. Bits outside EventAll fail with ucs.ErrInvalidParam.
func ArmedRecvEvents(events uint32) (uint32, ucs.Status) {
	if events&^EventAll != 0 {
		return 0, ucs.ErrInvalidParam
	}
	return events & (EventRecv | EventRecvSig), ucs.OK
}

// Send flags of EP.AMBcopy and EP.AMZcopy (UCT_SEND_FLAG_*).
const (
	// SendFlagSignaled marks an active message as signaled: it fires
	// EventRecvSig on the receiving iface as well as EventRecv (other
	// messages fire EventRecv only). AMShort cannot carry it, as in UCX.
	SendFlagSignaled uint32 = 1 << 0
)

// RecvEvents returns the events an active message sent with flags fires
// on the iface that receives it: EventRecv, with EventRecvSig when flags
// hold SendFlagSignaled.
func RecvEvents(flags uint32) uint32 {
	if flags&SendFlagSignaled != 0 {
		return EventRecv | EventRecvSig
	}
	return EventRecv
}

// FixedAllocator is implemented by the MDs with MDFlagFixed (uct_md_mem_alloc
// with UCT_MD_MEM_FLAG_FIXED): MemAllocFixed is MD.MemAlloc with the memory
// mapped exactly at addr, which must be page aligned, and never over memory
// mapped there already: a range that is taken, in part or whole, fails
// with ucs.ErrNoMemory, and nothing is replaced.
type FixedAllocator interface {
	MemAllocFixed(addr unsafe.Pointer, length int, flags MemFlags, name string) (Allocation, error)
}

// EventArmer is implemented by ifaces whose WakeupFD works
// (uct_iface_event_arm): EventArm asks for the wakeup descriptor to become
// readable at the next event of the given kinds. It returns ucs.ErrBusy when
// such events are pending already (the caller should progress instead of
// sleeping), and ucs.OK when armed. A caller that wakes up reads the
// descriptor (it is an eventfd), progresses, and arms again.
type EventArmer interface {
	EventArm(events uint32) ucs.Status
}

// ProgressController is implemented by ifaces whose progress the caller
// can disable and enable (uct_iface_progress_disable and
// uct_iface_progress_enable): ProgressDisable makes the iface's Progress a
// disabled callback of its worker, which calls it only now and then and
// enables it again at its first event (see Worker.SetProgressEnabled);
// ProgressEnable makes it one called by every Progress again;
// ProgressEnabled reports which it is. An iface opens enabled. ucp
// disables the ifaces of a worker when it opens them (adaptive progress).
// They may allocate and take a lock: they are not for hot paths. Without
// a worker they do nothing, and ProgressEnabled is false.
type ProgressController interface {
	ProgressEnable()
	ProgressDisable()
	ProgressEnabled() bool
}

// InputPoller is implemented by ifaces whose Progress reads descriptors
// that the kernel can wait on (tcp: its sockets). InputFD returns a
// descriptor that polls readable (POLLIN) while input waits for Progress
// to read it, and stays readable until then (level-triggered), as the
// event descriptor of UCX's tcp iface (its epoll set) does: a goroutine
// that found no work can sleep in poll(2) on it and be woken by the next
// message, where a timed sleep would last out its bound. It may also poll
// readable for work of the iface that is not input (a queue that may be
// written now), which Progress then does. The caller only polls it: it
// neither reads nor closes it, and stops polling it before the iface
// closes.
type InputPoller interface {
	InputFD() int
}

// AMTraceType says what happened to a traced active message.
type AMTraceType int

// Trace types (UCT_AM_TRACE_TYPE_*).
const (
	AMTraceSend AMTraceType = iota
	AMTraceRecv
	AMTraceSendDrop
	AMTraceRecvDrop
)

// AMTracer is called for each active message an iface sends or receives
// (uct_am_tracer_t); data is the message as the handler sees it. It must not
// keep data or call the iface.
type AMTracer func(arg any, typ AMTraceType, id uint8, data []byte)

// AMTracerSetter is implemented by ifaces that can trace active messages
// (uct_iface_set_am_tracer). A nil fn removes the tracer.
type AMTracerSetter interface {
	SetAMTracer(fn AMTracer, arg any) error
}

// EPConnector is implemented by the EPs of transports whose ifaces have
// IfaceFlagConnectToEP (uct_ep_get_address, uct_ep_connect_to_ep).
//
// Connecting to an EP pairs two EPs, one on each side, instead of
// connecting an EP to a remote iface. Iface.EPCreate with EPParams that
// carry no IfaceAddr (nor DeviceAddr) and set Unconnected, on such a
// transport, creates an unconnected EP: its operations fail with
// ucs.ErrNotConnected until it is connected. (Unconnected is what says "no
// iface address": without it an empty address stays ucs.ErrInvalidAddr
// for connect to iface, as before.) Each side
// creates one, gives the other (out of band) its iface's DeviceAddress and
// its EP's EPAddress, and calls ConnectToEP with what the other side gave;
// once both calls returned, the pair is bound and either EP reaches the
// other's iface. What binding means on the wire is the transport's (see
// its documentation).
type EPConnector interface {
	// EPAddress returns the address of the EP, for the peer's ConnectToEP.
	EPAddress() ([]byte, error)
	// ConnectToEP binds the EP to the remote EP whose device and EP
	// addresses are given. A malformed EP or device address fails with
	// ucs.ErrInvalidAddr, an EP that cannot be reached (or is not known
	// there) with ucs.ErrUnreachable, an EP that is connected already with
	// ucs.ErrAlreadyExists.
	ConnectToEP(deviceAddr, epAddr []byte) error
}

// EPChecker is implemented by EPs that can tell whether their peer is still
// there (uct_ep_check). ucp's keepalive calls it periodically on the lanes
// of endpoints in error handling mode PEER, for transports that would not
// notice a dead peer by themselves (shared memory: a send into the FIFO of a
// dead process just succeeds).
type EPChecker interface {
	// Check returns ucs.OK while the peer lives and an error once it is
	// known gone: ucs.ErrEndpointTimeout for a peer that ended, or the
	// status the EP failed with. flags must be 0 and comp nil: the check
	// completes on return (ucs.ErrInvalidParam otherwise). It is safe to
	// call from any goroutine, concurrently with the EP's operations.
	Check(flags uint32, comp *Completion) ucs.Status
}

// NameUnlinker is an optional interface of an MD whose allocations a peer
// opens by a name in the file system (posix with USE_SHM_OPEN).
// UnlinkNames removes the names of the memory this process allocated and
// did not free: mappings already made stay, here and in every peer, and
// MemFree still frees the memory, but no peer can map it any more. Once
// every peer has mapped the memory it needs, nothing is then left in
// /dev/shm however the process ends. NamesMemory reports whether the MD
// names its memory at all (UnlinkNames then has something to do).
type NameUnlinker interface {
	UnlinkNames() error
	NamesMemory() bool
}
