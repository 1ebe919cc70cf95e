package base

import (
	"encoding/binary"
	"hash"
	"hash/fnv"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// DomainAddrLen is the length of DomainAddress.
const DomainAddrLen = 8

// DomainAddress returns the DomainAddrLen-byte name of this process's
// shared-memory domain, the device address of the intra-node transports
// (uct/sm's posix and sysv, uct/cma): a hash naming the processes whose
// memfd descriptors and mappings it can reach. Two processes are in the same
// domain when they run under the same boot of the same kernel (boot id), in
// the same IPC namespace and see the same /dev/shm mount. The caller must
// not modify the slice.
var DomainAddress = sync.OnceValue(func() []byte {
	h := bootHash("/proc/self/ns/ipc")
	h.Write([]byte{0})
	var st unix.Stat_t
	if unix.Stat("/dev/shm", &st) == nil {
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

// bootHash returns an FNV-1a hash that has consumed the boot id of the
// kernel, a zero byte and the target of the namespace link nsLink.
func bootHash(nsLink string) hash.Hash64 {
	h := fnv.New64a()
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	h.Write([]byte(strings.TrimSpace(string(boot))))
	h.Write([]byte{0})
	link, _ := os.Readlink(nsLink)
	h.Write([]byte(link))
	return h
}
