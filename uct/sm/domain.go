package sm

import (
	"encoding/binary"
	"hash/fnv"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// DeviceAddrLen is the length of a posix (and sysv) device address.
const DeviceAddrLen = 8

// DomainAddress returns the DeviceAddrLen-byte name of this process's
// shared-memory domain, the device address of posix and sysv ifaces: two
// processes with the same domain run under the same boot of the same kernel,
// in the same IPC namespace, and see the same /dev/shm mount. Other
// intra-node transports (uct/cma) use it as their device address too.
func DomainAddress() []byte { return append([]byte(nil), domainAddr()...) }

// domainAddr returns the device address of this process: a hash naming its
// shared-memory domain, that is, the processes whose memfd descriptors and
// mappings it can reach. Two processes are in the same domain when they run
// under the same boot of the same kernel (boot id), in the same IPC
// namespace and see the same /dev/shm mount.
var domainAddr = sync.OnceValue(func() []byte {
	h := fnv.New64a()
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	h.Write([]byte(strings.TrimSpace(string(boot))))
	h.Write([]byte{0})
	ipc, _ := os.Readlink("/proc/self/ns/ipc")
	h.Write([]byte(ipc))
	h.Write([]byte{0})
	var st unix.Stat_t
	if unix.Stat("/dev/shm", &st) == nil {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], st.Dev)
		h.Write(b[:])
	}
	return binary.LittleEndian.AppendUint64(nil, h.Sum64())
})
