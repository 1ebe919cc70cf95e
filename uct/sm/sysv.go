package sm

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
	"github.com/goshmem/goshmem/uct/internal/base"
)

// SysvMkeyPackedSize is the length of a key packed by the sysv MD.
//
// Layout, little-endian:
//
//	0  magic   uint32  "GSSV"
//	4  version uint16  1
//	6  (zero)  uint16
//	8  pid     uint32  process that allocated the segment
//	12 shmid   int32   System V shared memory id of the segment
//	16 length  uint64  bytes of the segment
//	24 address uint64  base address of the segment in that process
const SysvMkeyPackedSize = 32

// sysvMkeyFormat is the layout of a packed sysv key (see
// SysvMkeyPackedSize).
var sysvMkeyFormat = base.Format{Name: "uct/sm: packed sysv key", Size: SysvMkeyPackedSize, Magic: 0x56535347,
	Versions: []uint16{1}, Err: ucs.ErrInvalidParam}

const (
	// shmNoReserve is SHM_NORESERVE, a shmget flag: no swap is reserved,
	// so that a large segment costs nothing until its pages are touched (as
	// a memfd).
	shmNoReserve = 0o10000
	// shmDest is SHM_DEST in the mode of IPC_STAT: the segment is marked
	// for removal and disappears with its last attachment.
	shmDest = 0o1000
)

// shmmaxPath is where the kernel's largest System V segment is read (a
// variable for the tests).
var shmmaxPath = "/proc/sys/kernel/shmmax"

// shmMax returns kernel.shmmax, the largest segment shmget creates, or
// math.MaxInt64 when it cannot be read.
func shmMax() uint64 {
	b, err := os.ReadFile(shmmaxPath)
	if err != nil {
		return math.MaxInt64
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return math.MaxInt64
	}
	return min(v, math.MaxInt64)
}

// sysvName names segment shmid in errors.
func sysvName(shmid int32) string { return "shmid " + strconv.Itoa(int(shmid)) }

// sysvMkey is a decoded sysv key.
type sysvMkey struct {
	pid    uint32
	shmid  int32
	length uint64
	addr   uint64
}

// fields are the fields of the packed key, in order.
func (k *sysvMkey) fields() []any { return []any{&k.pid, &k.shmid, &k.length, &k.addr} }

// encode packs k.
func (k *sysvMkey) encode() []byte { return k.appendTo(nil) }

// appendTo appends the packing of k to dst.
func (k *sysvMkey) appendTo(dst []byte) []byte { return sysvMkeyFormat.Append(dst, 1, k.fields()...) }

// decodeSysvMkey decodes a packed sysv key strictly: anything but a key of
// the exact size, magic and version, with a valid pid and shmid and a
// non-empty range below 2^57 fails with ucs.ErrInvalidParam.
func decodeSysvMkey(b []byte) (k sysvMkey, err error) {
	_, err = sysvMkeyFormat.Decode(b, append(k.fields(), base.CheckPid(&k.pid), base.CheckRange(&k.addr, &k.length))...)
	if err == nil && k.shmid < 0 {
		err = sysvMkeyFormat.Errorf("shmid %d", k.shmid)
	}
	return k, err
}

// shmdt detaches the System V segment attached at addr.
func shmdt(addr unsafe.Pointer) error {
	return unix.SysvShmDetach(unsafe.Slice((*byte)(addr), 1))
}

// createSysvSegment creates a System V segment of length bytes (a multiple
// of the page size), mode 0600, attaches it and marks it for removal at
// once, so that it disappears with its last attachment whatever happens to
// the processes. The mapping is cached with one reference, the owner's. It
// is attached exactly at at unless at is nil: shmat without SHM_REMAP
// refuses (EINVAL) a range that overlaps a mapping.
func createSysvSegment(length uint64, at unsafe.Pointer) (int32, *mapping, error) {
	if max := shmMax(); length > max {
		return 0, nil, fmt.Errorf("uct/sm: sysv segment of %d bytes exceeds kernel.shmmax = %d (raise /proc/sys/kernel/shmmax, or use the posix MD): %w",
			length, max, ucs.ErrNoMemory)
	}
	if length > math.MaxInt {
		return 0, nil, fmt.Errorf("uct/sm: sysv segment of %d bytes: %w", length, ucs.ErrNoMemory)
	}
	id, err := unix.SysvShmGet(unix.IPC_PRIVATE, int(length), unix.IPC_CREAT|unix.IPC_EXCL|shmNoReserve|segmentMode)
	if err != nil {
		hint := ""
		if errors.Is(err, unix.ENOSPC) {
			hint = " (kernel.shmall or kernel.shmmni reached)"
		}
		return 0, nil, fmt.Errorf("uct/sm: shmget of %d bytes%s: %w: %w", length, hint, err, ucs.ErrNoMemory)
	}
	b, err := unix.SysvShmAttach(id, uintptr(at), 0)
	if err == nil && at != nil && unsafe.Pointer(unsafe.SliceData(b)) != at {
		unix.SysvShmDetach(b)
		err = unix.EEXIST
	}
	// Mark for removal whatever the attach gave: the segment then lives
	// exactly as long as its attachments.
	_, rerr := unix.SysvShmCtl(id, unix.IPC_RMID, nil)
	if err != nil {
		return 0, nil, fmt.Errorf("uct/sm: shmat of %s (%d bytes): %w: %w", sysvName(int32(id)), length, err, ucs.ErrNoMemory)
	}
	if rerr != nil {
		unix.SysvShmDetach(b)
		return 0, nil, fmt.Errorf("uct/sm: IPC_RMID of %s: %w: %w", sysvName(int32(id)), rerr, ucs.ErrNoMemory)
	}
	m := &mapping{addr: unsafe.Pointer(unsafe.SliceData(b)), length: uint64(len(b)), fd: -1, sysv: true, refs: 1}
	sysvSegments.insert(segKey{pid, uint64(id)}, m)
	return int32(id), m, nil
}

// attachSysv attaches the segment of key k (of another process) and checks
// that it is the one named: created by k.pid, owned by this user with mode
// 0600, marked for removal (as every segment of the sysv MD) and at least
// k.length bytes. A segment that is gone or is not that one fails with
// ucs.ErrUnreachable, one that is too short with ucs.ErrInvalidParam.
func attachSysv(k sysvMkey) (*mapping, error) {
	name := sysvName(k.shmid)
	b, err := unix.SysvShmAttach(int(k.shmid), 0, 0)
	if err != nil {
		if errors.Is(err, unix.ENOMEM) {
			return nil, fmt.Errorf("uct/sm: shmat of %s: %w: %w", name, err, ucs.ErrNoMemory)
		}
		return nil, fmt.Errorf("uct/sm: shmat of %s: %w: %w", name, err, ucs.ErrUnreachable)
	}
	// Attached, the segment cannot go away or change its id: what IPC_STAT
	// says now is about the segment we have.
	fail := func(err error) (*mapping, error) {
		unix.SysvShmDetach(b)
		return nil, err
	}
	var st unix.SysvShmDesc
	if _, err := unix.SysvShmCtl(int(k.shmid), unix.IPC_STAT, &st); err != nil {
		return fail(fmt.Errorf("uct/sm: IPC_STAT of %s: %w: %w", name, err, ucs.ErrUnreachable))
	}
	switch {
	case st.Cpid != int32(k.pid):
		return fail(fmt.Errorf("uct/sm: %s was created by pid %d, not %d: %w", name, st.Cpid, k.pid, ucs.ErrUnreachable))
	case st.Perm.Uid != uint32(os.Geteuid()) || st.Perm.Mode&0o777 != segmentMode:
		return fail(fmt.Errorf("uct/sm: %s has owner %d and mode %o, not %d and %o: %w",
			name, st.Perm.Uid, st.Perm.Mode&0o777, os.Geteuid(), segmentMode, ucs.ErrUnreachable))
	case st.Perm.Mode&shmDest == 0:
		return fail(fmt.Errorf("uct/sm: %s is not marked for removal, so not a segment of the sysv MD: %w", name, ucs.ErrUnreachable))
	case st.Segsz < k.length:
		return fail(fmt.Errorf("uct/sm: %s has %d bytes, key claims %d: %w", name, st.Segsz, k.length, ucs.ErrInvalidParam))
	}
	return &mapping{addr: unsafe.Pointer(unsafe.SliceData(b)), length: uint64(len(b)), fd: -1, sysv: true}, nil
}

// SysvComponent is the "sysv" component: System V shared memory segments.
// The zero value is ready to use; the package registers one instance with
// uct.Register.
type SysvComponent struct {
	base.Component[sysvTransport]
}

// RkeyUnpack decodes a key from SysvMD.MkeyPack and attaches its segment
// (once per process: unpacking the same segment again takes another
// reference to the cached attachment). As with posix, the rkey is the
// difference between the local and the remote address of the segment.
//
// Malformed keys fail with ucs.ErrInvalidParam; a segment that cannot be
// attached, or is not the one the key names (gone, created by another
// process or user, not marked for removal), with ucs.ErrUnreachable; a key
// longer than its segment with ucs.ErrInvalidParam.
func (*SysvComponent) RkeyUnpack(packed []byte) (uct.RkeyBundle, error) {
	k, err := decodeSysvMkey(packed)
	if err != nil {
		return uct.RkeyBundle{}, err
	}
	sk := segKey{k.pid, uint64(k.shmid)}
	name := sysvName(k.shmid)
	m, err := sysvSegments.acquire(sk, k.length, name, func() (*mapping, error) { return attachSysv(k) })
	if err != nil {
		return uct.RkeyBundle{}, err
	}
	h := &rkeyHandle{cache: &sysvSegments, name: name, seg: sk, base: k.addr, length: k.length, delta: uint64(uintptr(m.addr)) - k.addr}
	if k.pid == pid && h.delta != 0 {
		sysvSegments.release(sk, false, name)
		return uct.RkeyBundle{}, fmt.Errorf("uct/sm: key of local segment %s with address %#x, attached at %p: %w",
			name, k.addr, m.addr, ucs.ErrInvalidParam)
	}
	return uct.RkeyBundle{Rkey: h.delta, Handle: h}, nil
}

// RkeyPtr returns the local address of raddr, which must lie inside the
// key's range (ucs.ErrOutOfRange otherwise). A bundle that this component's
// RkeyUnpack did not return fails with ucs.ErrInvalidParam.
func (*SysvComponent) RkeyPtr(rkey uct.RkeyBundle, raddr uint64) (unsafe.Pointer, error) {
	return rkeyPtr(rkey, raddr, &sysvSegments)
}

// RkeyRelease drops the key's reference to its attachment; the last
// reference detaches the segment. Releasing twice fails with
// ucs.ErrInvalidParam.
func (*SysvComponent) RkeyRelease(rkey uct.RkeyBundle) error {
	return rkeyRelease(rkey, &sysvSegments)
}

// SysvMD is the "sysv" memory domain: it allocates System V shared memory
// segments; it cannot register existing memory. Its ifaces are those of
// posix (their receive FIFOs are memfd segments, which need no shmmax or
// shmmni headroom), on the resource {sysv, memory}.
type SysvMD struct {
	base.AllocateMD[sysvTransport]
}

// SysvMemh is the memory handle of a sysv allocation.
type SysvMemh struct {
	ShmID   int            // System V id of the segment (already marked for removal)
	Address unsafe.Pointer // where the segment is attached here
	Length  int            // bytes of the segment
	Name    string         // the label given to MemAlloc
	freed   bool
}

// Query reports MDFlagAlloc, MDFlagFixed, MDFlagRkeyPtr and
// MDFlagNeedRkey; MaxAlloc is kernel.shmmax.
func (m *SysvMD) Query() (uct.MDAttr, error) {
	a := m.Attr(uct.MDFlagAlloc|uct.MDFlagFixed|uct.MDFlagRkeyPtr|uct.MDFlagNeedRkey, SysvMkeyPackedSize)
	a.MaxAlloc = shmMax()
	return a, nil
}

// MemAlloc allocates a System V segment of length bytes, rounded up to the
// page size: shmget(IPC_PRIVATE, mode 0600, SHM_NORESERVE), attached
// readable and writable, and marked for removal (IPC_RMID) right away, so
// that it disappears when the last process detaches it, even after a crash:
// nothing is ever left in ipcs -m. Pages are not touched, so large segments
// cost only address space until used. length must be positive
// (ucs.ErrInvalidParam); a segment beyond kernel.shmmax, or one the system
// refuses, fails with ucs.ErrNoMemory. flags are ignored; name labels the
// handle.
func (*SysvMD) MemAlloc(length int, flags uct.MemFlags, name string) (uct.Allocation, error) {
	return sysvAlloc(nil, length, name)
}

// MemAllocFixed is MemAlloc with the segment attached exactly at addr,
// which must be page aligned (ucs.ErrInvalidParam otherwise), and never
// over memory mapped there already: a range that is taken fails with
// ucs.ErrNoMemory (uct.FixedAllocator).
func (*SysvMD) MemAllocFixed(addr unsafe.Pointer, length int, flags uct.MemFlags, name string) (uct.Allocation, error) {
	if err := checkFixed(addr); err != nil {
		return uct.Allocation{}, err
	}
	return sysvAlloc(addr, length, name)
}

// sysvAlloc allocates as MemAlloc does, at at exactly unless at is nil.
func sysvAlloc(at unsafe.Pointer, length int, name string) (uct.Allocation, error) {
	if length <= 0 {
		return uct.Allocation{}, fmt.Errorf("uct/sm: mem alloc of %d bytes: %w", length, ucs.ErrInvalidParam)
	}
	page := uint64(unix.Getpagesize())
	size := (uint64(length) + page - 1) &^ (page - 1)
	id, m, err := createSysvSegment(size, at)
	if err != nil {
		return uct.Allocation{}, err
	}
	h := &SysvMemh{ShmID: int(id), Address: m.addr, Length: int(m.length), Name: name}
	return uct.Allocation{Address: m.addr, Length: h.Length, Memh: h}, nil
}

// MemFree detaches the segment of memh (once no unpacked rkey of this
// process uses it any more); the segment disappears when peers that attached
// it detach too. A handle that is not from MemAlloc, or freed already, fails
// with ucs.ErrInvalidParam.
func (*SysvMD) MemFree(memh uct.Memh) error {
	h, ok := memh.(*SysvMemh)
	if !ok || h.freed {
		return fmt.Errorf("uct/sm: mem free of a foreign or freed handle: %w", ucs.ErrInvalidParam)
	}
	h.freed = true
	return sysvSegments.release(segKey{pid, uint64(h.ShmID)}, true, sysvName(int32(h.ShmID)))
}

// MkeyPack appends the key of an allocation, SysvMkeyPackedSize bytes (see
// there for the layout), to dst. A handle that is not from MemAlloc, or freed, fails
// with ucs.ErrInvalidParam.
func (*SysvMD) MkeyPack(dst []byte, memh uct.Memh) ([]byte, error) {
	h, ok := memh.(*SysvMemh)
	if !ok || h.freed {
		return nil, fmt.Errorf("uct/sm: mkey pack of a foreign or freed handle: %w", ucs.ErrInvalidParam)
	}
	k := sysvMkey{pid: pid, shmid: int32(h.ShmID), length: uint64(h.Length), addr: uint64(uintptr(h.Address))}
	return k.appendTo(dst), nil
}

// IfaceOpen opens an iface on {sysv, memory} (another resource fails with
// ucs.ErrNoDevice): an Iface as posix opens, whose RMA and atomics work on
// the segments of sysv keys unpacked by SysvComponent (the rkey is a delta
// either way). It registers the iface's Progress with worker when worker is
// not nil. config may be nil for the defaults; bad values fail with
// ucs.ErrInvalidParam.
func (m *SysvMD) IfaceOpen(worker *uct.Worker, params *uct.IfaceParams, config *ucs.Config) (uct.Iface, error) {
	if err := m.CheckIface(params); err != nil {
		return nil, err
	}
	return openIface(m, worker, params, config)
}

// sysvTransport is the transport as seen by the base types that SysvComponent and its MD
// embed: its names and how it opens its MD.
type sysvTransport struct{}

func (sysvTransport) Names() base.Names {
	return base.Names{Pkg: "uct/sm", Component: SysvComponentName, MD: SysvMDName, TL: SysvTLName, Dev: DevName, DevType: uct.DeviceTypeShm, IfaceConfig: ifaceConfigTable, Cost: cost}
}

func (sysvTransport) NewMD(*ucs.Config) (uct.MD, error) { return &SysvMD{}, nil }

func init() { uct.Register(&SysvComponent{}) }
