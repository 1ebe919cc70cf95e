package sm

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucs"
)

// Named segments (the posix MD's USE_SHM_OPEN option).
//
// By default the posix MD allocates memfd segments, which exist only while a
// descriptor or mapping holds them: a crash leaves nothing behind. With
// UCX_POSIX_USE_SHM_OPEN=y it creates instead a file
// /dev/shm/goshmem-<pid>-<id> (the pid of the owner in decimal, the random
// segment id in 16 hex digits) with O_CREAT|O_EXCL, mode 0600, maps it
// MAP_SHARED, and packs a version 2 key that names the file through the pid
// and id. A peer opens that file (O_NOFOLLOW), checks with fstat that it is
// a regular file owned by this user with mode 0600 and long enough, and
// maps it; anything else is refused with ucs.ErrUnreachable.
//
// The trade-off: the owner cannot know when every peer that will ever map
// the segment has done so, so it cannot unlink the file early. A named
// segment therefore lives until MemFree unlinks it (peers that mapped it
// keep their mappings), or, if the owner dies first, until someone removes
// it: a launcher that sees a PE die should call ucs.RemoveShmSegments with
// its pid (ucs owns the file names, so that a launcher need not link this
// transport).

// createNamedSegment creates, sizes and maps a named segment of length bytes
// (a multiple of the page size), at at exactly unless at is nil (see
// mapShared), caches its mapping with the owner's reference, and returns
// its path. The descriptor is closed once the file is mapped.
func createNamedSegment(length uint64, at unsafe.Pointer) (segKey, *mapping, string, error) {
	id := randomID()
	path := ucs.ShmSegmentPath(pid, id)
	fd, err := unix.Open(path, unix.O_CREAT|unix.O_EXCL|unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW, segmentMode)
	if err != nil {
		return segKey{}, nil, "", fmt.Errorf("uct/sm: create %s: %w: %w", path, err, ucs.ErrNoMemory)
	}
	defer unix.Close(fd)
	fail := func(what string, err error) (segKey, *mapping, string, error) {
		unix.Unlink(path)
		return segKey{}, nil, "", fmt.Errorf("uct/sm: %s %s of %d bytes: %w: %w", what, path, length, err, ucs.ErrNoMemory)
	}
	// The umask may have cleared bits of the mode; it cannot have added any.
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
	m := &mapping{addr: addr, length: length, fd: -1, refs: 1}
	segments.insert(k, m)
	return k, m, path, nil
}

// acquireNamedSegment returns the mapping of the named segment k, which must
// cover length bytes, taking a reference; a segment of another process is
// mapped from its file the first time (see attachNamed).
func acquireNamedSegment(k segKey, length uint64) (*mapping, error) {
	path := ucs.ShmSegmentPath(k.pid, k.id)
	return segments.acquire(k, length, path, func() (*mapping, error) {
		addr, err := attachNamed(path, length)
		if err != nil {
			return nil, err
		}
		return &mapping{addr: addr, length: length, fd: -1}, nil
	})
}

// attachNamed maps length bytes of the named segment at path, after checking
// that it is a regular file of this user with mode 0600 holding at least
// length bytes; otherwise, or when it does not exist, it fails with
// ucs.ErrUnreachable (ucs.ErrInvalidParam when it is too short).
func attachNamed(path string, length uint64) (unsafe.Pointer, error) {
	f, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("uct/sm: open %s: %w: %w", path, err, ucs.ErrUnreachable)
	}
	defer unix.Close(f)
	var st unix.Stat_t
	if err := unix.Fstat(f, &st); err != nil {
		return nil, fmt.Errorf("uct/sm: fstat %s: %w: %w", path, err, ucs.ErrUnreachable)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return nil, fmt.Errorf("uct/sm: %s is not a regular file: %w", path, ucs.ErrUnreachable)
	case st.Uid != uint32(os.Geteuid()):
		return nil, fmt.Errorf("uct/sm: %s is owned by uid %d, not %d: %w", path, st.Uid, os.Geteuid(), ucs.ErrUnreachable)
	case st.Mode&0o7777 != segmentMode:
		return nil, fmt.Errorf("uct/sm: %s has mode %#o, not %#o: %w", path, st.Mode&0o7777, segmentMode, ucs.ErrUnreachable)
	case st.Size < 0 || uint64(st.Size) < length:
		return nil, fmt.Errorf("uct/sm: %s has %d bytes, key claims %d: %w", path, st.Size, length, ucs.ErrInvalidParam)
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

// NamesMemory reports whether the MD makes named segments (USE_SHM_OPEN),
// see uct.NameUnlinker.
func (md *PosixMD) NamesMemory() bool { return md.named }

// UnlinkNames removes the files of the named segments this process
// created and did not free yet (see ucs.RemoveShmSegments and
// uct.NameUnlinker). It does nothing for an MD of memfd segments.
func (md *PosixMD) UnlinkNames() error {
	if !md.named {
		return nil
	}
	return ucs.RemoveShmSegments(int(pid))
}
