package sm

import (
	"fmt"
	"math"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
	"github.com/goshmem/goshmem/uct/internal/base"
)

// PosixComponent is the "posix" component. The zero value is ready to use;
// the package registers one instance with uct.Register.
type PosixComponent struct {
	base.Component[posixTransport]
}

// posixMDConfigTable is the configuration of the posix MD (read by ucp as
// UCX_POSIX_<NAME>).
var posixMDConfigTable = []ucs.ConfigField{
	{Name: "USE_SHM_OPEN", Default: "n", Doc: "Allocate named segments in /dev/shm (goshmem-<pid>-<id>) instead of memfds; " +
		"they outlive a crashed process until removed (see ucs.RemoveShmSegments)"},
}

// MDConfigTable returns the configuration of the posix MD: USE_SHM_OPEN
// (default n) makes MemAlloc create named /dev/shm segments instead of
// memfds (see shmopen.go and ucs.RemoveShmSegments).
func (*PosixComponent) MDConfigTable() []ucs.ConfigField { return posixMDConfigTable }

// rkeyHandle is the private part of an unpacked posix rkey.
type rkeyHandle struct {
	cache    *segCache // segments or sysvSegments: the component's kind
	name     string    // the segment's name in errors
	seg      segKey
	base     uint64 // remote base address of the key's range
	length   uint64
	delta    uint64 // local address - remote address
	released bool
}

// RkeyUnpack decodes a key from PosixMD.MkeyPack and maps its segment (once
// per process: unpacking the same segment again takes another reference to
// the cached mapping). The rkey is the difference between the local mapping
// and the remote base address (0 for a segment of this process), so that
// raddr+rkey is the local address of raddr.
//
// Malformed keys fail with ucs.ErrInvalidParam; a segment that cannot be
// mapped (dead process, freed segment, a pid or descriptor that now names
// something else) with ucs.ErrUnreachable.
func (*PosixComponent) RkeyUnpack(packed []byte) (uct.RkeyBundle, error) {
	k, err := decodeMkey(packed)
	if err != nil {
		return uct.RkeyBundle{}, err
	}
	sk := segKey{k.pid, k.id}
	name := segmentName(k.id)
	var m *mapping
	if k.named {
		name = ucs.ShmSegmentPath(k.pid, k.id)
		m, err = acquireNamedSegment(sk, k.length)
	} else {
		m, err = acquireSegment(sk, int(k.fd), k.length)
	}
	if err != nil {
		return uct.RkeyBundle{}, err
	}
	h := &rkeyHandle{cache: &segments, name: name, seg: sk, base: k.addr, length: k.length, delta: uint64(uintptr(m.addr)) - k.addr}
	if k.pid == pid && h.delta != 0 {
		releaseSegment(sk, false)
		return uct.RkeyBundle{}, fmt.Errorf("uct/sm: key of local segment %s with address %#x, mapped at %p: %w",
			segmentName(k.id), k.addr, m.addr, ucs.ErrInvalidParam)
	}
	return uct.RkeyBundle{Rkey: h.delta, Handle: h}, nil
}

// RkeyPtr returns the local address of raddr, which must lie inside the
// key's range (ucs.ErrOutOfRange otherwise). A bundle that RkeyUnpack did
// not return fails with ucs.ErrInvalidParam.
func (*PosixComponent) RkeyPtr(rkey uct.RkeyBundle, raddr uint64) (unsafe.Pointer, error) {
	return rkeyPtr(rkey, raddr, &segments)
}

// RkeyRelease drops the key's reference to its mapping; the last reference
// unmaps the segment. Releasing twice fails with ucs.ErrInvalidParam.
func (*PosixComponent) RkeyRelease(rkey uct.RkeyBundle) error {
	return rkeyRelease(rkey, &segments)
}

// rkeyPtr is RkeyPtr of the component whose segments are cached in cache.
func rkeyPtr(rkey uct.RkeyBundle, raddr uint64, cache *segCache) (unsafe.Pointer, error) {
	h, ok := rkey.Handle.(*rkeyHandle)
	if !ok || h.released || h.cache != cache {
		return nil, fmt.Errorf("uct/sm: rkey ptr of a foreign or released rkey: %w", ucs.ErrInvalidParam)
	}
	if raddr < h.base || raddr-h.base >= h.length {
		return nil, fmt.Errorf("uct/sm: address %#x outside key range %#x+%d: %w", raddr, h.base, h.length, ucs.ErrOutOfRange)
	}
	return remote(raddr, h.delta), nil
}

// rkeyRelease is RkeyRelease of the component whose segments are cached in
// cache.
func rkeyRelease(rkey uct.RkeyBundle, cache *segCache) error {
	h, ok := rkey.Handle.(*rkeyHandle)
	if !ok || h.released || h.cache != cache {
		return fmt.Errorf("uct/sm: release of a foreign or released rkey: %w", ucs.ErrInvalidParam)
	}
	h.released = true
	return cache.release(h.seg, false, h.name)
}

// PosixMD is the "posix" memory domain: it allocates shared segments; it
// cannot register existing memory.
type PosixMD struct {
	base.AllocateMD[posixTransport]
	named bool // USE_SHM_OPEN: named /dev/shm segments instead of memfds
}

// Memh is the memory handle of a posix allocation.
type Memh struct {
	FD        int            // memfd descriptor of the segment; -1 for a named one
	Address   unsafe.Pointer // where the segment is mapped here
	Length    int            // bytes mapped
	SegmentID uint64         // random id, in the memfd name "goshmem-<id in hex>"
	Name      string         // the label given to MemAlloc
	Path      string         // the file of a named segment (USE_SHM_OPEN), or ""
	freed     bool
}

// Query reports MDFlagAlloc, MDFlagFixed, MDFlagRkeyPtr and
// MDFlagNeedRkey.
func (m *PosixMD) Query() (uct.MDAttr, error) {
	a := m.Attr(uct.MDFlagAlloc|uct.MDFlagFixed|uct.MDFlagRkeyPtr|uct.MDFlagNeedRkey, MkeyPackedSize)
	a.MaxAlloc = math.MaxInt64
	return a, nil
}

// MemAlloc allocates a shared segment of length bytes, rounded up to the
// page size: a memfd (mode 0600) mapped MAP_SHARED, readable and writable.
// Pages are not touched, so large segments cost only address space until
// used. length must be positive (ucs.ErrInvalidParam); the allocation fails
// with ucs.ErrNoMemory when the system refuses. flags are ignored; name
// labels the handle.
//
// With USE_SHM_OPEN the segment is instead a file
// /dev/shm/goshmem-<pid>-<id> (mode 0600, created with O_EXCL), which
// MemFree unlinks; if the process dies first the file stays until
// ucs.RemoveShmSegments removes it.
func (md *PosixMD) MemAlloc(length int, flags uct.MemFlags, name string) (uct.Allocation, error) {
	return md.memAlloc(nil, length, name)
}

// MemAllocFixed is MemAlloc with the segment mapped exactly at addr, which
// must be page aligned (ucs.ErrInvalidParam otherwise), and never over
// memory mapped there already: a range that is taken fails with
// ucs.ErrNoMemory wrapping unix.EEXIST (uct.FixedAllocator).
func (md *PosixMD) MemAllocFixed(addr unsafe.Pointer, length int, flags uct.MemFlags, name string) (uct.Allocation, error) {
	if err := checkFixed(addr); err != nil {
		return uct.Allocation{}, err
	}
	return md.memAlloc(addr, length, name)
}

// checkFixed checks the address of a fixed allocation.
func checkFixed(addr unsafe.Pointer) error {
	if addr == nil || uintptr(addr)%uintptr(unix.Getpagesize()) != 0 {
		return fmt.Errorf("uct/sm: fixed allocation at %p, not a page boundary: %w", addr, ucs.ErrInvalidParam)
	}
	return nil
}

// memAlloc allocates as MemAlloc does, at at exactly unless at is nil.
func (md *PosixMD) memAlloc(at unsafe.Pointer, length int, name string) (uct.Allocation, error) {
	if length <= 0 {
		return uct.Allocation{}, fmt.Errorf("uct/sm: mem alloc of %d bytes: %w", length, ucs.ErrInvalidParam)
	}
	page := uint64(unix.Getpagesize())
	size := (uint64(length) + page - 1) &^ (page - 1)
	if md.named {
		k, m, path, err := createNamedSegment(size, at)
		if err != nil {
			return uct.Allocation{}, err
		}
		h := &Memh{FD: -1, Address: m.addr, Length: int(size), SegmentID: k.id, Name: name, Path: path}
		return uct.Allocation{Address: m.addr, Length: int(size), Memh: h}, nil
	}
	k, m, err := createSegment(size, at)
	if err != nil {
		return uct.Allocation{}, err
	}
	h := &Memh{FD: m.fd, Address: m.addr, Length: int(size), SegmentID: k.id, Name: name}
	return uct.Allocation{Address: m.addr, Length: int(size), Memh: h}, nil
}

// MemFree unmaps the segment of memh (once no unpacked rkey or EP of this
// process uses it any more) and closes its memfd, or unlinks the file of a
// named segment; peers that mapped it keep their mappings. A handle that is
// not from MemAlloc, or freed already, fails with ucs.ErrInvalidParam.
func (*PosixMD) MemFree(memh uct.Memh) error {
	h, ok := memh.(*Memh)
	if !ok || h.freed {
		return fmt.Errorf("uct/sm: mem free of a foreign or freed handle: %w", ucs.ErrInvalidParam)
	}
	h.freed = true
	var uerr error
	if h.Path != "" {
		if err := unix.Unlink(h.Path); err != nil && err != unix.ENOENT {
			uerr = fmt.Errorf("uct/sm: unlink %s: %w: %w", h.Path, err, ucs.ErrIOError)
		}
	}
	if err := releaseSegment(segKey{pid, h.SegmentID}, true); err != nil {
		return err
	}
	return uerr
}

// MkeyPack appends the key of an allocation, MkeyPackedSize bytes (see there
// for the layout), to dst. A handle that is not from MemAlloc, or freed, fails with
// ucs.ErrInvalidParam.
func (*PosixMD) MkeyPack(dst []byte, memh uct.Memh) ([]byte, error) {
	h, ok := memh.(*Memh)
	if !ok || h.freed {
		return nil, fmt.Errorf("uct/sm: mkey pack of a foreign or freed handle: %w", ucs.ErrInvalidParam)
	}
	k := mkey{pid: pid, fd: int32(h.FD), id: h.SegmentID, length: uint64(h.Length), addr: uint64(uintptr(h.Address)), named: h.Path != ""}
	if k.named {
		k.fd = 0
	}
	return k.appendTo(dst), nil
}

// IfaceOpen opens an iface on {posix, memory} (another resource fails with
// ucs.ErrNoDevice) and registers its Progress with worker when worker is
// not nil. config may be nil for the defaults; bad values fail with
// ucs.ErrInvalidParam.
func (m *PosixMD) IfaceOpen(worker *uct.Worker, params *uct.IfaceParams, config *ucs.Config) (uct.Iface, error) {
	if err := m.CheckIface(params); err != nil {
		return nil, err
	}
	return openIface(m, worker, params, config)
}

// posixTransport is the transport as seen by the base types that PosixComponent and its MD
// embed: its names and how it opens its MD.
type posixTransport struct{}

func (posixTransport) Names() base.Names {
	return base.Names{Pkg: "uct/sm", Component: PosixComponentName, MD: PosixMDName, TL: PosixTLName, Dev: DevName, DevType: uct.DeviceTypeShm, IfaceConfig: ifaceConfigTable, Cost: cost}
}

// NewMD opens a posix MD; a USE_SHM_OPEN that is not a boolean fails with
// ucs.ErrInvalidParam.
func (posixTransport) NewMD(config *ucs.Config) (uct.MD, error) {
	md := &PosixMD{}
	if config != nil && config.Get("USE_SHM_OPEN") != "" {
		v, err := ucs.ParseBool(config.Get("USE_SHM_OPEN"))
		if err != nil {
			return nil, fmt.Errorf("uct/sm: USE_SHM_OPEN: %w: %w", err, ucs.ErrInvalidParam)
		}
		md.named = v
	}
	return md, nil
}

func init() { uct.Register(&PosixComponent{}) }
