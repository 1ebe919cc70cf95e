package ucp

import (
	"fmt"
	"io"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// Fields of ContextAttr (ucp_context_attr_field). ContextAttrFieldFeatures
// and ContextAttrFieldTransports are goshmem's.
const (
	ContextAttrFieldRequestSize       uint64 = 1 << 0
	ContextAttrFieldThreadMode        uint64 = 1 << 1
	ContextAttrFieldMemoryTypes       uint64 = 1 << 2
	ContextAttrFieldName              uint64 = 1 << 3
	ContextAttrFieldDeviceCounterSize uint64 = 1 << 4
	ContextAttrFieldFeatures          uint64 = 1 << 32
	ContextAttrFieldTransports        uint64 = 1 << 33

	contextAttrFieldsAll = ContextAttrFieldRequestSize | ContextAttrFieldThreadMode | ContextAttrFieldMemoryTypes |
		ContextAttrFieldName | ContextAttrFieldDeviceCounterSize | ContextAttrFieldFeatures | ContextAttrFieldTransports
)

// ContextAttr describes a context (ucp_context_attr_t). FieldMask says which
// fields are filled in.
type ContextAttr struct {
	FieldMask uint64
	// RequestSize is the size of a UCP request, the memory a request of
	// the caller's (RequestParam.SetRequest) takes: unsafe.Sizeof(Request{}).
	// The space Params.SetRequestSize reserves is apart from it
	// (Request.Reserved).
	RequestSize int
	// ThreadMode is the thread safety of the context: ucs.ThreadModeMulti,
	// as a context may be used from any goroutine once created.
	ThreadMode ucs.ThreadMode
	// MemoryTypes lists the memory types the context maps and transfers
	// (the memory_types mask of UCX, as a list): host memory only.
	MemoryTypes []ucs.MemoryType
	// Name is the context's name (Params.SetName, or a generated one).
	Name string
	// DeviceCounterSize is the size of a counter of UCX's device API; 0, as
	// goshmem has no device API.
	DeviceCounterSize int
	// Features are the features the context was created with.
	Features Feature
	// Transports lists the selected resources as "tl/device".
	Transports []string
}

// Query describes the context, every field of ContextAttr filled in
// (ucp_context_query with every field).
func (c *Context) Query() ContextAttr {
	a := ContextAttr{FieldMask: contextAttrFieldsAll}
	c.QueryAttr(&a)
	return a
}

// QueryAttr fills in the fields of attr that attr.FieldMask selects and
// clears the others (ucp_context_query); unknown bits are ignored. It fails
// with ucs.ErrInvalidParam for a nil attr.
func (c *Context) QueryAttr(attr *ContextAttr) error {
	if attr == nil {
		return fmt.Errorf("ucp context query: %w", ucs.ErrInvalidParam)
	}
	mask := attr.FieldMask
	*attr = ContextAttr{FieldMask: mask}
	if mask&ContextAttrFieldRequestSize != 0 {
		attr.RequestSize = int(unsafe.Sizeof(Request{}))
	}
	if mask&ContextAttrFieldThreadMode != 0 {
		attr.ThreadMode = ucs.ThreadModeMulti
	}
	if mask&ContextAttrFieldMemoryTypes != 0 {
		attr.MemoryTypes = []ucs.MemoryType{ucs.MemoryTypeHost}
	}
	if mask&ContextAttrFieldName != 0 {
		attr.Name = c.name
	}
	if mask&ContextAttrFieldFeatures != 0 {
		attr.Features = c.features
	}
	if mask&ContextAttrFieldTransports != 0 {
		for _, r := range c.resources {
			attr.Transports = append(attr.Transports, r.tl.TLName+"/"+r.tl.DevName)
		}
	}
	return nil
}

// Print writes the context's selected resources and configuration to w
// (ucp_context_print_info): a comment line per resource, then every
// configuration variable as Config.Print with ConfigPrintConfig writes it.
func (c *Context) Print(w io.Writer) error {
	if _, err := fmt.Fprintf(w, "# UCP context %q, version %s\n", c.name, VersionString()); err != nil {
		return err
	}
	for _, r := range c.resources {
		if _, err := fmt.Fprintf(w, "#   resource %d: md %s, tl %s, device %s (%s)\n",
			r.index, r.md.md.Name(), r.tl.TLName, r.tl.DevName, r.tl.DevType); err != nil {
			return err
		}
	}
	return c.config.Print(w, "", ConfigPrintConfig)
}

// Fields of LibAttr (ucp_lib_attr_field).
const (
	LibAttrFieldMaxThreadLevel uint64 = 1 << 0
)

// LibAttr describes the library (ucp_lib_attr_t). FieldMask says which
// fields are filled in.
type LibAttr struct {
	FieldMask uint64
	// MaxThreadLevel is the highest thread mode a worker can be created
	// with: ucs.ThreadModeMulti.
	MaxThreadLevel ucs.ThreadMode
}

// LibQuery returns the library attributes, every field filled in
// (ucp_lib_query with every field).
func LibQuery() LibAttr {
	a := LibAttr{FieldMask: LibAttrFieldMaxThreadLevel}
	LibQueryAttr(&a)
	return a
}

// LibQueryAttr fills in the fields of attr that attr.FieldMask selects and
// clears the others (ucp_lib_query); unknown bits are ignored. It fails
// with ucs.ErrInvalidParam for a nil attr.
func LibQueryAttr(attr *LibAttr) error {
	if attr == nil {
		return fmt.Errorf("ucp lib query: %w", ucs.ErrInvalidParam)
	}
	*attr = LibAttr{FieldMask: attr.FieldMask}
	if attr.FieldMask&LibAttrFieldMaxThreadLevel != 0 {
		attr.MaxThreadLevel = ucs.ThreadModeMulti
	}
	return nil
}

// Fields of WorkerAttr (ucp_worker_attr_field). WorkerAttrFieldMaxDebugString
// is UCP_WORKER_ATTR_FIELD_MAX_INFO_STRING; WorkerAttrFieldUID is goshmem's.
const (
	WorkerAttrFieldThreadMode     uint64 = 1 << 0
	WorkerAttrFieldAddress        uint64 = 1 << 1
	WorkerAttrFieldAddressFlags   uint64 = 1 << 2
	WorkerAttrFieldMaxAMHeader    uint64 = 1 << 3
	WorkerAttrFieldName           uint64 = 1 << 4
	WorkerAttrFieldMaxDebugString uint64 = 1 << 5
	WorkerAttrFieldUID            uint64 = 1 << 32

	workerAttrFieldsAll = WorkerAttrFieldThreadMode | WorkerAttrFieldAddress | WorkerAttrFieldMaxAMHeader |
		WorkerAttrFieldName | WorkerAttrFieldMaxDebugString | WorkerAttrFieldUID
)

// WorkerAddressFlags are the flags of WorkerAttr.AddressFlags
// (ucp_worker_address_flags_t).
type WorkerAddressFlags uint32

// Worker address flags (ucp_worker_address_flags_t), for
// WorkerAttr.AddressFlags.
const (
	// WorkerAddressFlagNetOnly asks for an address with only the worker's
	// interfaces on network devices (tcp): an endpoint created from it uses
	// only network transports, even on the same node.
	WorkerAddressFlagNetOnly WorkerAddressFlags = 1 << 0
)

// addrFlagNetOnly marks a packed worker address made with
// WorkerAddressFlagNetOnly.
const addrFlagNetOnly uint8 = 1 << 0

// Default limits a worker reports.
const (
	workerMaxDebugString = 256
)

// WorkerAttr describes a worker (ucp_worker_attr_t). FieldMask says which
// fields are filled in; AddressFlags is an input, read by QueryAttr when
// WorkerAttrFieldAddressFlags is set.
type WorkerAttr struct {
	FieldMask uint64
	// ThreadMode is the worker's thread mode.
	ThreadMode ucs.ThreadMode
	// AddressFlags (input) shapes Address: WorkerAddressFlag* bits, 0 when
	// WorkerAttrFieldAddressFlags is not set.
	AddressFlags WorkerAddressFlags
	// Address is the worker's packed address, for Worker.NewEndpoint in a
	// peer, and AddressLength its length. It must not be modified.
	Address       []byte
	AddressLength int
	// MaxAMHeader is the largest user header Endpoint.AMSendNBX takes:
	// what fits in one message of every interface of the worker with the
	// ucp header.
	MaxAMHeader int
	// Name is the worker's name.
	Name string
	// MaxDebugString is the longest debug string Request.Query gives.
	MaxDebugString int
	// UID is the worker's unique id, the one WorkerAddressQuery finds in
	// its addresses.
	UID uint64
}

// Query describes the worker, every field of WorkerAttr filled in and the
// address made with no flags (ucp_worker_query with every field).
func (w *Worker) Query() WorkerAttr {
	a := WorkerAttr{FieldMask: workerAttrFieldsAll}
	if err := w.QueryAttr(&a); err != nil {
		// Only a destroyed worker fails: report what it still knows.
		a.ThreadMode, a.MaxAMHeader, a.Name, a.MaxDebugString, a.UID = w.mode, w.amMaxHeader(), w.name, workerMaxDebugString, w.uid
	}
	return a
}

// QueryAttr fills in the fields of attr that attr.FieldMask selects and
// clears the others, except AddressFlags, which it reads
// (ucp_worker_query); unknown bits of FieldMask and of AddressFlags are
// ignored. With WorkerAddressFlagNetOnly the address has only the worker's
// interfaces on network devices.
//
// It fails with ucs.ErrInvalidParam for a nil attr, with ucs.ErrNoDevice
// when WorkerAddressFlagNetOnly leaves no interface in the address, and
// when the worker was destroyed.
func (w *Worker) QueryAttr(attr *WorkerAttr) error {
	if attr == nil {
		return fmt.Errorf("ucp worker query: %w", ucs.ErrInvalidParam)
	}
	if w.closed.Load() {
		return fmt.Errorf("ucp worker query: %w", ErrClosed)
	}
	mask, flags := attr.FieldMask, WorkerAddressFlags(0)
	if mask&WorkerAttrFieldAddressFlags != 0 {
		flags = attr.AddressFlags
	}
	*attr = WorkerAttr{FieldMask: mask, AddressFlags: attr.AddressFlags}
	if mask&WorkerAttrFieldThreadMode != 0 {
		attr.ThreadMode = w.mode
	}
	if mask&WorkerAttrFieldAddress != 0 {
		attr.Address = w.address
		if flags&WorkerAddressFlagNetOnly != 0 {
			if !w.hasNetIface() {
				return fmt.Errorf("ucp worker query: no interface of %s is on a network device: %w", w.name, ucs.ErrNoDevice)
			}
			attr.Address = w.packAddress(flags)
		}
		attr.AddressLength = len(attr.Address)
	}
	if mask&WorkerAttrFieldMaxAMHeader != 0 {
		attr.MaxAMHeader = w.amMaxHeader()
	}
	if mask&WorkerAttrFieldName != 0 {
		attr.Name = w.name
	}
	if mask&WorkerAttrFieldMaxDebugString != 0 {
		attr.MaxDebugString = workerMaxDebugString
	}
	if mask&WorkerAttrFieldUID != 0 {
		attr.UID = w.uid
	}
	return nil
}

// hasNetIface reports whether some interface of the worker is on a network
// device.
func (w *Worker) hasNetIface() bool {
	for _, wi := range w.ifaces {
		if wi.rsc.tl.DevType == uct.DeviceTypeNet {
			return true
		}
	}
	return false
}

// Fields of WorkerAddressAttr (ucp_worker_address_attr_field).
const (
	WorkerAddressAttrFieldUID uint64 = 1 << 0
)

// WorkerAddressAttr describes a packed worker address
// (ucp_worker_address_attr_t). FieldMask says which fields are filled in.
type WorkerAddressAttr struct {
	FieldMask uint64
	// WorkerUID is the unique id of the worker the address belongs to
	// (WorkerAttr.UID there).
	WorkerUID uint64
}

// WorkerAddressQuery describes a packed worker address, from this process
// or another, every field filled in (ucp_worker_address_query). A malformed
// address fails with ucs.ErrInvalidAddr.
func WorkerAddressQuery(addr []byte) (WorkerAddressAttr, error) {
	a, err := decodeWorkerAddress(addr)
	if err != nil {
		return WorkerAddressAttr{}, fmt.Errorf("ucp worker address query: %w", err)
	}
	return WorkerAddressAttr{FieldMask: WorkerAddressAttrFieldUID, WorkerUID: a.uid}, nil
}
