// Package self is the loopback transport of goshmem: the "self" component,
// through which a process reaches its own memory and its own ifaces (UCX's
// uct/sm/self).
//
// Importing the package registers the component with uct.Register. Its single
// memory domain "self" registers any memory without doing anything (remote
// and local addresses are the same), and its single transport resource
// {TLName "self", DevName "memory0", DevType uct.DeviceTypeSelf} opens ifaces
// whose endpoints can only connect to the iface they were created on.
//
// RMA operations are plain copies and atomics are sync/atomic operations on
// the target address, all complete on return. Active messages are copied into
// a bounded per-iface queue and delivered by Iface.Progress (see Iface for the
// details), never from inside the sending call.
//
// Ifaces implement WakeupFD and uct.EventArmer (wakeup.go): WakeupFD is an
// eventfd of the iface (EFD_CLOEXEC|EFD_NONBLOCK, closed by Close);
// EventArm(EventRecv) returns ucs.ErrBusy while messages are queued, and
// otherwise arms the iface, so that the next message queued (by any
// goroutine) writes 1 to the eventfd and disarms it. No goroutine is
// involved.
package self

import (
	"fmt"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
	"github.com/goshmem/goshmem/uct/internal/base"
)

// Names of the component, its memory domain and its transport resource.
const (
	ComponentName = "self"
	MDName        = "self"
	TLName        = "self"
	DevName       = "memory0"
)

// MkeyPackedSize is the length of a key packed by the self MD: a magic word,
// the pid and the random id of the packing process.
const MkeyPackedSize = 16

// mkeyFormat is the layout of a packed self key: magic "GSSF", pid, id.
var mkeyFormat = base.Format{Name: "uct/self: packed key", Size: MkeyPackedSize, Magic: 0x46535347, Err: ucs.ErrInvalidParam}

// processID is a random id of this process, carried in packed keys and iface
// addresses so that a key or address from another process (even one that
// reuses this pid) is recognised as foreign.
var processID = randomID()

// randomID returns a random non-zero 64-bit id.
func randomID() uint64 { return base.RandomID("uct/self") }

// Component is the "self" component. The zero value is ready to use; the
// package registers one instance with uct.Register.
type Component struct {
	base.Component[transport]
}

// RkeyUnpack accepts only keys packed by this process. The returned rkey is
// 0: remote addresses are local addresses. Malformed keys fail with
// ucs.ErrInvalidParam, keys of another process with ucs.ErrUnreachable.
func (*Component) RkeyUnpack(packed []byte) (uct.RkeyBundle, error) {
	pid, id, err := decodeMkey(packed)
	if err != nil {
		return uct.RkeyBundle{}, err
	}
	if pid != base.Pid || id != processID {
		return uct.RkeyBundle{}, fmt.Errorf("uct/self: key of process %d: %w", pid, ucs.ErrUnreachable)
	}
	return uct.RkeyBundle{Rkey: 0}, nil
}

// RkeyPtr returns raddr as a pointer: self keys cover the whole address
// space of the process.
func (*Component) RkeyPtr(rkey uct.RkeyBundle, raddr uint64) (unsafe.Pointer, error) {
	return ptr(raddr, rkey.Rkey), nil
}

// RkeyRelease does nothing: unpacking self keys holds no resources.
func (*Component) RkeyRelease(uct.RkeyBundle) error { return nil }

// encodeMkey packs the key of this process.
func encodeMkey() []byte { return appendMkey(nil) }

// appendMkey appends the packed self key to dst.
func appendMkey(dst []byte) []byte { return mkeyFormat.Append(dst, 0, base.Pid, processID) }

// decodeMkey decodes a packed self key; it fails with ucs.ErrInvalidParam
// unless b has the exact size and magic of a self key and a non-zero pid
// and id.
func decodeMkey(b []byte) (pid uint32, id uint64, err error) {
	if _, err := mkeyFormat.Decode(b, &pid, &id); err != nil {
		return 0, 0, err
	}
	if pid == 0 || id == 0 {
		return 0, 0, mkeyFormat.Errorf("zero pid or id")
	}
	return pid, id, nil
}

// MD is the "self" memory domain.
type MD struct {
	base.RegisterMD[transport]
}

// Memh is the memory handle of the self MD: the registered range.
type Memh struct {
	Address unsafe.Pointer
	Length  int
}

// Query reports MDFlagReg and MDFlagRkeyPtr: registration is free and
// RkeyPtr gives direct access; MemAlloc is not offered.
func (m *MD) Query() (uct.MDAttr, error) {
	a := m.Attr(uct.MDFlagReg|uct.MDFlagRkeyPtr, MkeyPackedSize)
	a.MaxReg = ^uint64(0)
	return a, nil
}

// MemReg returns a *Memh recording the range; a negative length fails with
// ucs.ErrInvalidParam.
func (*MD) MemReg(addr unsafe.Pointer, length int, flags uct.MemFlags) (uct.Memh, error) {
	if length < 0 {
		return nil, fmt.Errorf("uct/self: mem reg of %d bytes: %w", length, ucs.ErrInvalidParam)
	}
	return &Memh{Address: addr, Length: length}, nil
}

// MemDereg releases a handle from MemReg; other handles fail with
// ucs.ErrInvalidParam.
func (*MD) MemDereg(memh uct.Memh) error {
	if _, ok := memh.(*Memh); !ok {
		return fmt.Errorf("uct/self: mem dereg of %T: %w", memh, ucs.ErrInvalidParam)
	}
	return nil
}

// MkeyPack appends the MkeyPackedSize-byte key of this process to dst; memh must
// come from MemReg (ucs.ErrInvalidParam otherwise).
func (*MD) MkeyPack(dst []byte, memh uct.Memh) ([]byte, error) {
	if _, ok := memh.(*Memh); !ok {
		return nil, fmt.Errorf("uct/self: mkey pack of %T: %w", memh, ucs.ErrInvalidParam)
	}
	return appendMkey(dst), nil
}

// transport is the transport as seen by the base types that Component and its MD
// embed: its names and how it opens its MD.
type transport struct{}

func (transport) Names() base.Names {
	return base.Names{Pkg: "uct/self", Component: ComponentName, MD: MDName, TL: TLName, Dev: DevName, DevType: uct.DeviceTypeSelf, IfaceConfig: ifaceConfigTable, Cost: cost}
}

func (transport) NewMD(*ucs.Config) (uct.MD, error) { return &MD{}, nil }

func init() { uct.Register(&Component{}) }
