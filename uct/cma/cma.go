package cma

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
	"github.com/goshmem/goshmem/uct/internal/base"
)

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

// mkeyFormat is the layout of a packed cma key (see MkeyPackedSize).
var mkeyFormat = base.Format{Name: "uct/cma: packed key", Size: MkeyPackedSize, Magic: 0x4d435347, Versions: []uint16{1}, Err: ucs.ErrInvalidParam}

// Bounds of pids and addresses in keys and addresses.
const (
	maxPid  = base.MaxPid
	maxAddr = base.MaxAddr
)

// pid is this process's id as it appears in keys and addresses.
var pid = base.Pid

// mkey is a decoded key.
type mkey struct {
	pid    uint32
	addr   uint64
	length uint64
}

// fields are the fields of the packed key, in order.
func (k *mkey) fields() []any { return []any{&k.pid, base.Zero(4), &k.addr, &k.length} }

// encode packs k.
func (k *mkey) encode() []byte { return k.appendTo(nil) }

// appendTo appends the packing of k to dst.
func (k *mkey) appendTo(dst []byte) []byte {
	return mkeyFormat.Append(dst, 1, k.fields()...)
}

// decodeMkey decodes a packed key strictly: anything but a key of the exact
// size, magic and version, with zero reserved bits, a valid pid and a
// non-empty range that lies below 2^57 fails with ucs.ErrInvalidParam.
func decodeMkey(b []byte) (k mkey, err error) {
	_, err = mkeyFormat.Decode(b, append(k.fields(), base.CheckPid(&k.pid), base.CheckRange(&k.addr, &k.length))...)
	return k, err
}

// Component is the "cma" component. The zero value is ready to use; the
// package registers one instance with uct.Register.
type Component struct {
	base.Component[transport]
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
	base.RegisterMD[transport]
}

// Memh is the memory handle of a cma registration: the range, nothing more.
type Memh struct {
	Address unsafe.Pointer
	Length  int
	freed   bool
}

// memhs recycles the handles MemDereg released, for MemReg: a
// registration per rendezvous transfer then allocates nothing.
var memhs = sync.Pool{New: func() any { return new(Memh) }}

// Query reports MDFlagReg and MDFlagNeedRkey (no allocation, no rkey ptr).
func (m *MD) Query() (uct.MDAttr, error) {
	a := m.Attr(uct.MDFlagReg|uct.MDFlagNeedRkey, MkeyPackedSize)
	a.MaxReg = math.MaxInt64
	a.RegCost = uct.LinearModel{C: 10e-9}
	return a, nil
}

// MemReg registers length bytes at addr: it only checks the range (non-nil,
// positive length, below 2^57; ucs.ErrInvalidParam otherwise), since
// process_vm_readv/writev reach any memory of the process. flags are
// ignored.
func (*MD) MemReg(addr unsafe.Pointer, length int, flags uct.MemFlags) (uct.Memh, error) {
	a := uint64(uintptr(addr))
	if addr == nil || length <= 0 || !base.ValidRange(a, uint64(length)) {
		return nil, fmt.Errorf("uct/cma: mem reg of %p+%d: %w", addr, length, ucs.ErrInvalidParam)
	}
	h := memhs.Get().(*Memh)
	*h = Memh{Address: addr, Length: length}
	return h, nil
}

// MemDereg releases a registration; a handle MemReg did not return, or one
// released already, fails with ucs.ErrInvalidParam. The handle is the MD's
// again: a later MemReg may return it for another registration, so the
// caller must not use it any more.
func (*MD) MemDereg(memh uct.Memh) error {
	h, ok := memh.(*Memh)
	if !ok || h.freed {
		return fmt.Errorf("uct/cma: mem dereg of a foreign or released handle: %w", ucs.ErrInvalidParam)
	}
	h.freed = true
	memhs.Put(h)
	return nil
}

// MkeyPack appends the key of a registration, MkeyPackedSize bytes (see
// there for the layout), to dst. A handle MemReg did not return, or
// released, fails with ucs.ErrInvalidParam.
func (*MD) MkeyPack(dst []byte, memh uct.Memh) ([]byte, error) {
	h, ok := memh.(*Memh)
	if !ok || h.freed {
		return nil, fmt.Errorf("uct/cma: mkey pack of a foreign or released handle: %w", ucs.ErrInvalidParam)
	}
	k := mkey{pid: pid, addr: uint64(uintptr(h.Address)), length: uint64(h.Length)}
	return k.appendTo(dst), nil
}

// IfaceOpen opens an iface on {cma, memory} (another resource fails with
// ucs.ErrNoDevice) and registers its Progress with worker when worker is
// not nil. config may be nil for the defaults; bad values fail with
// ucs.ErrInvalidParam.
func (m *MD) IfaceOpen(worker *uct.Worker, params *uct.IfaceParams, config *ucs.Config) (uct.Iface, error) {
	return openIface(m, worker, params, config)
}

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

// transport is the transport as seen by the base types that Component and its MD
// embed: its names and how it opens its MD.
type transport struct{}

func (transport) Names() base.Names {
	return base.Names{Pkg: "uct/cma", Component: ComponentName, MD: MDName, TL: TLName, Dev: DevName, DevType: uct.DeviceTypeShm, IfaceConfig: ifaceConfigTable, Cost: cost}
}

func (transport) NewMD(*ucs.Config) (uct.MD, error) { return &MD{}, nil }

func init() { uct.Register(&Component{}) }
