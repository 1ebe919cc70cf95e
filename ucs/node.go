package ucs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/fnv"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// What a node is, and the files its processes leave in /dev/shm. The
// intra-node transports (uct/sm, uct/cma, uct/tcp's loopback) and a launcher
// must agree on both; ucs owns them so that a launcher needs no transport to
// name a node or to clean up after a PE.

// ShmDomainLen is the length of ShmDomain.
const ShmDomainLen = 8

// MaxPid bounds process ids (PID_MAX_LIMIT): every pid is below it.
const MaxPid = 1 << 22

// ShmDomain returns the ShmDomainLen-byte name of this process's
// shared-memory domain, the device address of the intra-node transports
// (uct/sm's posix and sysv, uct/cma): a hash naming the processes whose
// memfd descriptors and mappings it can reach. Two processes are in the same
// domain when they run under the same boot of the same kernel (boot id), in
// the same IPC namespace and see the same /dev/shm mount. The caller must
// not modify the slice.
var ShmDomain = sync.OnceValue(func() []byte {
	h := bootHash("/proc/self/ns/ipc")
	h.Write([]byte{0})
	var st unix.Stat_t
	if unix.Stat(ShmDir, &st) == nil {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], st.Dev)
		h.Write(b[:])
	}
	return binary.LittleEndian.AppendUint64(nil, h.Sum64())
})

// LoopbackHostID returns a non-zero hash naming the loopback network of
// this process: the boot id of the kernel and the network namespace. Two
// processes with the same value reach each other's loopback listeners.
var LoopbackHostID = sync.OnceValue(func() uint64 {
	return bootHash("/proc/self/ns/net").Sum64() | 1
})

// MachineID returns a non-zero hash naming this boot of this machine's
// kernel (its boot id): the same in every namespace and container on the
// machine, different on every other machine. It is 0 when the boot id
// cannot be read.
var MachineID = sync.OnceValue(func() uint64 {
	id := bootID()
	if id == "" {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(id))
	return h.Sum64() | 1
})

// bootID is the kernel's boot id, "" when it cannot be read.
func bootID() string {
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(boot))
}

// bootHash returns an FNV-1a hash that has consumed the boot id of the
// kernel, a zero byte and the target of the namespace link nsLink.
func bootHash(nsLink string) hash.Hash64 {
	h := fnv.New64a()
	h.Write([]byte(bootID()))
	h.Write([]byte{0})
	link, _ := os.Readlink(nsLink)
	h.Write([]byte(link))
	return h
}

// ShmDir is the directory of named shared-memory segments.
const ShmDir = "/dev/shm"

// ShmSegmentPath returns the file of the named shared-memory segment id of
// process pid: ShmDir/goshmem-<pid in decimal>-<id in 16 hex digits>
// (uct/sm's posix MD with USE_SHM_OPEN creates these).
func ShmSegmentPath(pid uint32, id uint64) string {
	return fmt.Sprintf("%s/goshmem-%d-%016x", ShmDir, pid, id)
}

// shmSegmentName matches the base name of a ShmSegmentPath; compiled at
// first use, not at every process start.
var shmSegmentName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^goshmem-([0-9]+)-[0-9a-f]{16}$`) })

// RemoveShmSegments removes the named shared-memory segments that process
// pid created and did not free: every file ShmSegmentPath(pid, id). It is
// meant for a launcher (or any supervisor) once it knows pid has exited,
// since the files of a process that dies outlive it; peers that mapped a
// segment keep their mappings. Removing the files of a live process makes
// its segments unreachable to peers that have not mapped them yet. pid must
// be in (0, MaxPid) (ErrInvalidParam otherwise); files that vanish meanwhile
// are not errors, other failures are joined in the result.
func RemoveShmSegments(pid int) error {
	if pid <= 0 || pid >= MaxPid {
		return fmt.Errorf("ucs: remove shared-memory segments of pid %d: %w", pid, ErrInvalidParam)
	}
	matches, err := filepath.Glob(ShmDir + "/goshmem-" + strconv.Itoa(pid) + "-*")
	if err != nil {
		return fmt.Errorf("ucs: remove shared-memory segments of pid %d: %w", pid, err)
	}
	var errs []error
	for _, m := range matches {
		sub := shmSegmentName().FindStringSubmatch(filepath.Base(m))
		if sub == nil || sub[1] != strconv.Itoa(pid) {
			continue
		}
		if err := os.Remove(m); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
