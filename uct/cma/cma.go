package cma

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// Names of the component, its memory domain and its transport resource.
const (
	ComponentName = "cma"
	MDName        = "cma"
	TLName        = "cma"
	DevName       = "memory"
)

func init() { uct.Register(&Component{}) }

// MkeyPackedSize is the length of a key packed by the cma MD.
//
// Layout, little-endian:
//
//	0  magic   uint32  "GSCM"
//	4  version uint16  1
//	6  (zero)  uint16
//	8  pid     uint32  process that registered the memory
//	12 (zero)  uint32
//	16 address uint64  start of the range in that process
//	24 length  uint64  bytes of the range
const MkeyPackedSize = 32

const (
	mkeyMagic   uint32 = 0x4d435347 // "GSCM"
	mkeyVersion uint16 = 1
	maxPid             = 1 << 22 // PID_MAX_LIMIT
	maxAddr            = 1 << 57 // above any user address (5-level paging)
)

// pid is this process's id as it appears in keys and addresses.
var pid = uint32(os.Getpid())

// mkey is a decoded key.
type mkey struct {
	pid    uint32
	addr   uint64
	length uint64
}

// encode packs k.
func (k *mkey) encode() []byte {
	b := make([]byte, MkeyPackedSize)
	binary.LittleEndian.PutUint32(b[0:], mkeyMagic)
	binary.LittleEndian.PutUint16(b[4:], mkeyVersion)
	binary.LittleEndian.PutUint32(b[8:], k.pid)
	binary.LittleEndian.PutUint64(b[16:], k.addr)
	binary.LittleEndian.PutUint64(b[24:], k.length)
	return b
}

// decodeMkey decodes a packed key strictly: anything but a key of the exact
// size, magic and version, with zero reserved bits, a valid pid and a
// non-empty range that lies below 2^57 fails with ucs.ErrInvalidParam.
func decodeMkey(b []byte) (mkey, error) {
	bad := func(why string, args ...any) (mkey, error) {
		return mkey{}, fmt.Errorf("uct/cma: packed key: %s: %w", fmt.Sprintf(why, args...), ucs.ErrInvalidParam)
	}
	if len(b) != MkeyPackedSize {
		return bad("%d bytes, want %d", len(b), MkeyPackedSize)
	}
	if m := binary.LittleEndian.Uint32(b); m != mkeyMagic {
		return bad("magic %#x", m)
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != mkeyVersion {
		return bad("version %d", v)
	}
	if binary.LittleEndian.Uint16(b[6:]) != 0 || binary.LittleEndian.Uint32(b[12:]) != 0 {
		return bad("reserved bits set")
	}
	k := mkey{
		pid:    binary.LittleEndian.Uint32(b[8:]),
		addr:   binary.LittleEndian.Uint64(b[16:]),
		length: binary.LittleEndian.Uint64(b[24:]),
	}
	switch {
	case k.pid == 0 || k.pid >= maxPid:
		return bad("pid %d", k.pid)
	case k.length == 0:
		return bad("zero length")
	case k.addr == 0 || k.addr >= maxAddr || k.length > maxAddr-k.addr:
		return bad("range %#x+%d", k.addr, k.length)
	}
	return k, nil
}

// Component is the "cma" component. The zero value is ready to use; the
// package registers one instance with uct.Register.
type Component struct{}

// Name returns "cma".
func (*Component) Name() string { return ComponentName }

// MDResources returns the one memory domain "cma".
func (*Component) MDResources() ([]uct.MDResource, error) {
	return []uct.MDResource{{Name: MDName}}, nil
}

// MDConfigTable returns nil: the cma MD has no configuration.
func (*Component) MDConfigTable() []ucs.ConfigField { return nil }

// OpenMD opens the memory domain "cma"; another name fails with
// ucs.ErrNoDevice. config is ignored.
func (c *Component) OpenMD(name string, config *ucs.Config) (uct.MD, error) {
	if name != MDName {
		return nil, fmt.Errorf("uct/cma: open MD %q: %w", name, ucs.ErrNoDevice)
	}
	return &MD{comp: c}, nil
}

// rkeyHandle is the private part of an unpacked rkey.
type rkeyHandle struct {
	pid      uint32
	base     uint64
	length   uint64
	released bool
}

// RkeyUnpack decodes a key from MD.MkeyPack; the rkey is the pid of the
// process that packed it, which must exist. Malformed keys fail with
// ucs.ErrInvalidParam; a key of a process that does not exist (any more),
// or that this process may not even signal (another user), with
// ucs.ErrUnreachable.
func (*Component) RkeyUnpack(packed []byte) (uct.RkeyBundle, error) {
	k, err := decodeMkey(packed)
	if err != nil {
		return uct.RkeyBundle{}, err
	}
	if err := unix.Kill(int(k.pid), 0); err != nil {
		return uct.RkeyBundle{}, fmt.Errorf("uct/cma: key of pid %d: %w: %w", k.pid, err, ucs.ErrUnreachable)
	}
	return uct.RkeyBundle{Rkey: uint64(k.pid), Handle: &rkeyHandle{pid: k.pid, base: k.addr, length: k.length}}, nil
}

// RkeyPtr fails with ucs.ErrUnsupported: remote memory is reached only
// through system calls (ucs.ErrInvalidParam for a bundle RkeyUnpack did not
// return).
func (*Component) RkeyPtr(rkey uct.RkeyBundle, raddr uint64) (unsafe.Pointer, error) {
	if h, ok := rkey.Handle.(*rkeyHandle); !ok || h.released {
		return nil, fmt.Errorf("uct/cma: rkey ptr of a foreign or released rkey: %w", ucs.ErrInvalidParam)
	}
	return nil, fmt.Errorf("uct/cma: rkey ptr: %w", ucs.ErrUnsupported)
}

// RkeyRelease releases an rkey; releasing twice, or a bundle RkeyUnpack did
// not return, fails with ucs.ErrInvalidParam.
func (*Component) RkeyRelease(rkey uct.RkeyBundle) error {
	h, ok := rkey.Handle.(*rkeyHandle)
	if !ok || h.released {
		return fmt.Errorf("uct/cma: release of a foreign or released rkey: %w", ucs.ErrInvalidParam)
	}
	h.released = true
	return nil
}

// MD is the "cma" memory domain: it registers any memory of the process
// and allocates none.
type MD struct {
	comp *Component
}

// Memh is the memory handle of a cma registration: the range, nothing more.
type Memh struct {
	Address unsafe.Pointer
	Length  int
	freed   bool
}

// Component returns the cma component.
func (m *MD) Component() uct.Component { return m.comp }

// Name returns "cma".
func (*MD) Name() string { return MDName }

// Query reports MDFlagReg and MDFlagNeedRkey (no allocation, no rkey ptr).
func (*MD) Query() (uct.MDAttr, error) {
	return uct.MDAttr{
		ComponentName:  ComponentName,
		Flags:          uct.MDFlagReg | uct.MDFlagNeedRkey,
		MaxReg:         math.MaxInt64,
		RkeyPackedSize: MkeyPackedSize,
		RegCost:        uct.LinearModel{C: 10e-9},
	}, nil
}

// MemAlloc fails with ucs.ErrUnsupported: the cma MD registers memory
// allocated by others.
func (*MD) MemAlloc(int, uint32, string) (uct.Allocation, error) {
	return uct.Allocation{}, fmt.Errorf("uct/cma: mem alloc: %w", ucs.ErrUnsupported)
}

// MemFree fails with ucs.ErrUnsupported, as MemAlloc does.
func (*MD) MemFree(uct.Memh) error {
	return fmt.Errorf("uct/cma: mem free: %w", ucs.ErrUnsupported)
}

// MemReg registers length bytes at addr: it only checks the range (non-nil,
// positive length, below 2^57; ucs.ErrInvalidParam otherwise), since
// process_vm_readv/writev reach any memory of the process. flags are
// ignored.
func (*MD) MemReg(addr unsafe.Pointer, length int, flags uint32) (uct.Memh, error) {
	a := uint64(uintptr(addr))
	if addr == nil || length <= 0 || a >= maxAddr || uint64(length) > maxAddr-a {
		return nil, fmt.Errorf("uct/cma: mem reg of %p+%d: %w", addr, length, ucs.ErrInvalidParam)
	}
	return &Memh{Address: addr, Length: length}, nil
}

// MemDereg releases a registration; a handle MemReg did not return, or one
// released already, fails with ucs.ErrInvalidParam.
func (*MD) MemDereg(memh uct.Memh) error {
	h, ok := memh.(*Memh)
	if !ok || h.freed {
		return fmt.Errorf("uct/cma: mem dereg of a foreign or released handle: %w", ucs.ErrInvalidParam)
	}
	h.freed = true
	return nil
}

// MkeyPack packs the key of a registration, MkeyPackedSize bytes (see
// there for the layout). A handle MemReg did not return, or released,
// fails with ucs.ErrInvalidParam.
func (*MD) MkeyPack(memh uct.Memh) ([]byte, error) {
	h, ok := memh.(*Memh)
	if !ok || h.freed {
		return nil, fmt.Errorf("uct/cma: mkey pack of a foreign or released handle: %w", ucs.ErrInvalidParam)
	}
	k := mkey{pid: pid, addr: uint64(uintptr(h.Address)), length: uint64(h.Length)}
	return k.encode(), nil
}

// TLResources returns the one resource {cma, memory, DeviceTypeShm}.
func (*MD) TLResources() ([]uct.TLResource, error) {
	return []uct.TLResource{{TLName: TLName, DevName: DevName, DevType: uct.DeviceTypeShm}}, nil
}

// IfaceConfigTable is the configuration of cma ifaces: SEG_SIZE (see
// Iface).
func (*MD) IfaceConfigTable() []ucs.ConfigField { return ifaceConfigTable }

// IfaceOpen opens an iface on {cma, memory} (another resource fails with
// ucs.ErrNoDevice) and registers its Progress with worker when worker is
// not nil. config may be nil for the defaults; bad values fail with
// ucs.ErrInvalidParam.
func (m *MD) IfaceOpen(worker *uct.Worker, params *uct.IfaceParams, config *ucs.Config) (uct.Iface, error) {
	if params != nil && ((params.TLName != "" && params.TLName != TLName) || (params.DevName != "" && params.DevName != DevName)) {
		return nil, fmt.Errorf("uct/cma: iface open on %s/%s: %w", params.TLName, params.DevName, ucs.ErrNoDevice)
	}
	return openIface(m, worker, params, config)
}

// Close does nothing: registrations and ifaces are released on their own.
func (*MD) Close() {}

// errnoStatus maps the error of a failed transfer to a status (see
// EP.fail for the side effects).
func errnoStatus(err error) ucs.Status {
	switch {
	case errors.Is(err, unix.ESRCH):
		return ucs.ErrConnectionReset
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return ucs.ErrUnreachable
	case errors.Is(err, unix.ENOMEM):
		return ucs.ErrNoMemory
	}
	return ucs.ErrIOError
}
