// Package cma is the cross-memory-attach transport of goshmem (UCX's
// uct/sm/scopy/cma): a process reads and writes the memory of another
// process on the same host with the process_vm_readv and process_vm_writev
// system calls, with no shared mapping at all.
//
// Importing the package registers the component "cma" with uct.Register.
// Its memory domain "cma" registers any memory (MDFlagReg; registration
// does nothing but remember the range) and packs keys of MkeyPackedSize
// bytes: the owner's pid, the address and the length. It cannot allocate
// memory and gives no direct pointer to remote memory (no MDFlagRkeyPtr).
// An unpacked rkey is the remote pid; the raddr of an operation is the
// address in the remote process as is.
//
// Its one transport resource {cma, memory, DeviceTypeShm} opens ifaces
// that do put short, bcopy and zcopy, and get bcopy and zcopy, all complete
// on return (a system call copies the data, looping over partial transfers
// and over batches of at most 64 iovecs, below IOV_MAX). There are no active
// messages and no atomics: the iface capabilities do not claim them, and
// the EP methods fail with ucs.ErrUnsupported.
//
// The device address of an iface is uct/sm's shared-memory domain
// (sm.DomainAddress: boot id, IPC namespace, /dev/shm mount); the iface
// address carries the pid, the PID namespace, a random iface id and the
// address of a word in the iface's process that holds that id. An iface
// is reachable when the domain and PID namespace are ours and reading that
// word with process_vm_readv returns the id: the process exists, is the
// one that published the address (not a reused pid), and may be accessed,
// which needs the same user and ptrace permission (Yama's
// /proc/sys/kernel/yama/ptrace_scope 0, or CAP_SYS_PTRACE).
//
// A transfer to a process that died fails with ucs.ErrConnectionReset
// (ESRCH); the EP then refuses every later operation with the same status
// (so that a reused pid is never written to through it), and the next
// Iface.Progress reports it to the iface's error handler. A transfer that
// the kernel refuses for lack of ptrace permission fails with
// ucs.ErrUnreachable, and a message naming ptrace_scope is logged once.
package cma

// Names of the component, its memory domain and its transport resource.
const (
	ComponentName = "cma"
	MDName        = "cma"
	TLName        = "cma"
	DevName       = "memory"
)
