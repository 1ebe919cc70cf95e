package sm

import "github.com/goshmem/goshmem/ucs"

// DeviceAddrLen is the length of a posix (and sysv) device address.
const DeviceAddrLen = ucs.ShmDomainLen

// DomainAddress returns the DeviceAddrLen-byte name of this process's
// shared-memory domain, the device address of posix and sysv ifaces: two
// processes with the same domain run under the same boot of the same kernel,
// in the same IPC namespace, and see the same /dev/shm mount. Other
// intra-node transports (uct/cma) use it as their device address too.
func DomainAddress() []byte { return append([]byte(nil), domainAddr()...) }

// domainAddr returns the device address of this process, shared: the caller
// must not modify it.
var domainAddr = ucs.ShmDomain
