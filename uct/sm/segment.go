package sm

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct/internal/base"
)

// segmentMode is the file mode of every segment: only the owning user may
// open it.
const segmentMode = 0o600

// segKey names a segment: the pid of the process that allocated it and its
// random id.
type segKey struct {
	pid uint32
	id  uint64
}

// mapping is a segment mapped into this process, shared by every user of the
// segment here (the allocation itself, unpacked rkeys, EPs to a FIFO).
type mapping struct {
	addr   unsafe.Pointer
	length uint64
	fd     int  // the memfd of a segment allocated here; -1 for attached ones
	sysv   bool // a System V segment: detached with shmdt, not munmap
	refs   int  // users of the mapping
	freed  bool // the owner freed it: no new user may take it
}

// segCache caches the mappings of one kind of segment in this process.
type segCache struct {
	sync.Mutex
	m map[segKey]*mapping
}

// segments caches every posix mapping of this process (memfd segments and
// FIFOs); sysvSegments every System V one. The two kinds of key never meet:
// a posix id is random, a sysv id is a shmid.
var segments, sysvSegments segCache

// pid is this process's id as it appears in keys and addresses.
var pid = base.Pid

// randomID returns a random non-zero 64-bit id.
func randomID() uint64 { return base.RandomID("uct/sm") }

// segmentName is the memfd name of segment id; the kernel shows it as the
// link "/memfd:<name> (deleted)" under /proc/<pid>/fd.
func segmentName(id uint64) string {
	return fmt.Sprintf("goshmem-%016x", id)
}

// createSegment allocates and maps a segment of length bytes (a multiple of
// the page size), at at exactly unless at is nil (see mapShared), and
// caches its mapping with one reference, the owner's.
func createSegment(length uint64, at unsafe.Pointer) (segKey, *mapping, error) {
	id := randomID()
	fd, err := unix.MemfdCreate(segmentName(id), unix.MFD_CLOEXEC)
	if err != nil {
		return segKey{}, nil, fmt.Errorf("uct/sm: memfd_create: %w: %w", err, ucs.ErrNoMemory)
	}
	fail := func(what string, err error) (segKey, *mapping, error) {
		unix.Close(fd)
		return segKey{}, nil, fmt.Errorf("uct/sm: %s of %d bytes: %w: %w", what, length, err, ucs.ErrNoMemory)
	}
	if err := unix.Fchmod(fd, segmentMode); err != nil {
		return fail("fchmod", err)
	}
	if err := unix.Ftruncate(fd, int64(length)); err != nil {
		return fail("ftruncate", err)
	}
	addr, err := mapShared(fd, length, at)
	if err != nil {
		return fail("mmap", err)
	}
	k := segKey{pid, id}
	m := &mapping{addr: addr, length: length, fd: fd, refs: 1}
	segments.insert(k, m)
	return k, m, nil
}

// mapShared maps the length bytes of the file fd shared, readable and
// writable: exactly at at when at is not nil, and never over what is
// mapped there already (MAP_FIXED_NOREPLACE; a range that is taken fails
// with unix.EEXIST, also on a kernel that takes the address as a hint),
// anywhere otherwise.
func mapShared(fd int, length uint64, at unsafe.Pointer) (unsafe.Pointer, error) {
	flags := unix.MAP_SHARED
	if at != nil {
		flags |= unix.MAP_FIXED_NOREPLACE
	}
	addr, err := unix.MmapPtr(fd, 0, at, uintptr(length), unix.PROT_READ|unix.PROT_WRITE, flags)
	if err != nil {
		return nil, err
	}
	if at != nil && addr != at {
		unix.MunmapPtr(addr, uintptr(length))
		return nil, unix.EEXIST
	}
	return addr, nil
}

// insert caches the new mapping m of a segment allocated here.
func (c *segCache) insert(k segKey, m *mapping) {
	c.Lock()
	if c.m == nil {
		c.m = make(map[segKey]*mapping)
	}
	c.m[k] = m
	c.Unlock()
}

// acquireSegment returns the mapping of the posix segment k, which must
// cover length bytes, taking a reference. A segment of this process is found
// in the cache; another process's segment is mapped through /proc/<pid>/<fd>
// the first time. It fails with ucs.ErrUnreachable when the segment does not
// exist (any more) or is not the one named.
func acquireSegment(k segKey, fd int, length uint64) (*mapping, error) {
	return segments.acquire(k, length, segmentName(k.id), func() (*mapping, error) {
		addr, err := attach(k, fd, length)
		if err != nil {
			return nil, err
		}
		return &mapping{addr: addr, length: length, fd: -1}, nil
	})
}

// releaseSegment drops a reference to the posix segment k (see
// segCache.release).
func releaseSegment(k segKey, owner bool) error { return segments.release(k, owner, segmentName(k.id)) }

// acquire returns the cached mapping of segment k (called name in errors),
// which must cover length bytes, taking a reference; a segment of another
// process that is not cached yet is mapped with attach, once. A segment of
// this process that is not cached (never allocated, or freed) fails with
// ucs.ErrUnreachable.
func (c *segCache) acquire(k segKey, length uint64, name string, attach func() (*mapping, error)) (*mapping, error) {
	c.Lock()
	defer c.Unlock()
	if m, ok := c.m[k]; ok && !m.freed {
		if length > m.length {
			return nil, fmt.Errorf("uct/sm: segment %s of pid %d has %d bytes, key claims %d: %w",
				name, k.pid, m.length, length, ucs.ErrInvalidParam)
		}
		m.refs++
		return m, nil
	}
	if k.pid == pid {
		return nil, fmt.Errorf("uct/sm: segment %s of this process is not allocated: %w", name, ucs.ErrUnreachable)
	}
	m, err := attach()
	if err != nil {
		return nil, err
	}
	m.refs = 1
	if c.m == nil {
		c.m = make(map[segKey]*mapping)
	}
	c.m[k] = m
	return m, nil
}

// release drops a reference to the segment k, taken by its creation or by
// acquire; owner marks the creator's reference, after which nobody new can
// acquire it. The last reference unmaps (or detaches) it and closes the memfd
// of a posix segment allocated here.
func (c *segCache) release(k segKey, owner bool, name string) error {
	c.Lock()
	defer c.Unlock()
	m, ok := c.m[k]
	if !ok || (owner && m.freed) {
		return fmt.Errorf("uct/sm: release of unknown segment %s: %w", name, ucs.ErrInvalidParam)
	}
	if owner {
		m.freed = true
	}
	if m.refs--; m.refs > 0 {
		return nil
	}
	delete(c.m, k)
	var err error
	if m.sysv {
		err = shmdt(m.addr)
	} else {
		err = unix.MunmapPtr(m.addr, uintptr(m.length))
	}
	if m.fd >= 0 {
		unix.Close(m.fd)
	}
	if err != nil {
		return fmt.Errorf("uct/sm: unmap segment %s: %w: %w", name, err, ucs.ErrIOError)
	}
	return nil
}

// memfdLink is what /proc/<pid>/fd/<fd> reads for the memfd of segment id.
func memfdLink(id uint64) string { return "/memfd:" + segmentName(id) + " (deleted)" }

// segmentOpenIn reports whether process k.pid still has the memfd of
// segment k open as descriptor fd: false once the process ended (a zombie
// has no descriptors) or closed it, and for a reused pid or descriptor.
func segmentOpenIn(k segKey, fd int) bool {
	link, err := os.Readlink("/proc/" + strconv.FormatUint(uint64(k.pid), 10) + "/fd/" + strconv.Itoa(fd))
	return err == nil && link == memfdLink(k.id)
}

// attach maps length bytes of the posix segment k, whose memfd is
// descriptor fd of process k.pid. The descriptor is opened through /proc
// and then checked to be that memfd, by its name, so that a reused pid or
// descriptor number is refused with ucs.ErrUnreachable.
func attach(k segKey, fd int, length uint64) (unsafe.Pointer, error) {
	path := "/proc/" + strconv.FormatUint(uint64(k.pid), 10) + "/fd/" + strconv.Itoa(fd)
	f, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("uct/sm: open %s: %w: %w", path, err, ucs.ErrUnreachable)
	}
	defer unix.Close(f)
	if link, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(f)); err != nil || link != memfdLink(k.id) {
		return nil, fmt.Errorf("uct/sm: %s is %q, not segment %s: %w", path, link, segmentName(k.id), ucs.ErrUnreachable)
	}
	var st unix.Stat_t
	if err := unix.Fstat(f, &st); err != nil {
		return nil, fmt.Errorf("uct/sm: fstat %s: %w: %w", path, err, ucs.ErrUnreachable)
	}
	if st.Size < 0 || uint64(st.Size) < length {
		return nil, fmt.Errorf("uct/sm: segment %s has %d bytes, key claims %d: %w", segmentName(k.id), st.Size, length, ucs.ErrInvalidParam)
	}
	addr, err := unix.MmapPtr(f, 0, nil, uintptr(length), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		if errors.Is(err, unix.ENOMEM) {
			return nil, fmt.Errorf("uct/sm: mmap %s: %w: %w", path, err, ucs.ErrNoMemory)
		}
		return nil, fmt.Errorf("uct/sm: mmap %s: %w: %w", path, err, ucs.ErrUnreachable)
	}
	return addr, nil
}
