// Package sm is the shared-memory transport of goshmem (UCX's uct/sm/mm):
// processes on one host reach each other's memory through mappings of the
// same segments, and exchange active messages through a receive FIFO in
// shared memory.
//
// Importing the package registers the component "posix" with uct.Register.
// Its memory domain "posix" allocates segments with memfd_create by default
// (mode 0600; nothing is created in /dev/shm, so nothing is left behind even
// when a process crashes) and maps them MAP_SHARED. A packed key carries the pid of
// the owner, the descriptor number of the memfd there and a random 64-bit
// segment id; another process maps the segment by opening
// /proc/<pid>/fd/<fd>, after checking through the link name that it is the
// memfd with that segment id (so that a reused pid or descriptor number is
// refused). Mappings are cached per segment with a reference count.
//
// The posix MD's configuration (read by ucp as UCX_POSIX_<NAME>) has one
// variable, USE_SHM_OPEN (default n): when set, MemAlloc creates named
// files /dev/shm/goshmem-<pid>-<id> (O_EXCL, mode 0600) instead of memfds,
// and packs version 2 keys that name the file by pid and id; a peer maps the
// file after checking that it is a regular file of its own user with mode
// 0600 (ucs.ErrUnreachable otherwise). The owner cannot know when every peer
// has mapped a segment, so the file stays until MemFree unlinks it: a process
// that dies leaves its files behind, which ucs.RemoveShmSegments(pid) removes
// (for a launcher to call once a PE has exited). See shmopen.go.
//
// The unpacked rkey is the difference between the local mapping and the
// remote base address, so EP operations find the local address of raddr as
// raddr+rkey, with no lookup: put and get are single copies, atomics are
// sync/atomic operations on the mapped memory (coherent with every other CPU
// atomic on it, in any process), and all of them complete on return.
//
// Importing the package also registers the component "sysv" (sysv.go),
// which shares everything with posix but segment allocation and attachment
// and the key format. Its memory domain "sysv" allocates System V segments:
// shmget(IPC_PRIVATE, mode 0600, SHM_NORESERVE), shmat, and IPC_RMID right
// after the attach, so that the segment disappears with its last attachment
// (Linux lets peers attach a segment marked for removal while it has
// attachments): nothing is ever left in ipcs -m, even after a crash. A
// segment beyond kernel.shmmax fails with ucs.ErrNoMemory. A sysv key
// carries the owner's pid, the shmid, the length and the base address
// (SysvMkeyPackedSize); unpacking attaches the segment once per process
// (cached with a reference count, in a cache apart from the posix one) after
// checking with IPC_STAT that the owner pid created it, that this user owns
// it with mode 0600, that it is marked for removal and long enough. The
// rkey is the same delta as posix's, so the EPs are the same.
//
// Ifaces of the "sysv" resource are posix ifaces: their receive FIFOs stay
// memfd segments (so they need no shmmax or shmmni headroom, and a sysv and a
// posix iface can talk to each other). Only the memory keyed by the MD
// differs.
//
// Ifaces implement WakeupFD and uct.EventArmer (wakeup.go). A peer cannot
// open another process's eventfd (/proc/<pid>/fd/N of an eventfd gives
// ENXIO, and pidfd_getfd needs ptrace rights), so wakeups go through the
// FIFO memory that senders map already: its header (format "GSFIFO05") holds
// a 32-bit armed word and a 32-bit futex sequence word. EventArm(EventRecv
// and/or EventRecvSig) returns ucs.ErrBusy when a message waits in the
// FIFO; otherwise it stores the receive events it arms for in armed, checks
// the FIFO again (ErrBusy, disarmed, if a message came meanwhile) and
// returns ucs.OK. A sender, after publishing a cell, loads armed (the only
// cost when the receiver is not armed); if it holds an event of the message
// (EventRecv for any, EventRecvSig for one sent with uct.SendFlagSignaled),
// it swaps it to 0 and, if it took it, increments the sequence word and FUTEX_WAKEs it
// (a shared futex, keyed by the memfd page). A helper goroutine of the
// receiving iface, started by the first WakeupFD or EventArm, sleeps in
// FUTEX_WAIT on the sequence word and writes 1 to the iface's eventfd
// (EFD_CLOEXEC|EFD_NONBLOCK, what WakeupFD returns) at each change. Close
// stops the helper (it sets a flag, bumps the word and wakes it), waits for
// it, and closes the eventfd. An armed iface is woken once, by the first
// message; the caller reads the eventfd, progresses and arms again. Send
// completions never fire (every send completes on return); an iface armed
// for EventRecvSig alone sleeps through messages that are not signaled
// (Progress delivers them when it next runs).
//
// DomainAddress exports the device address (the shared-memory domain) for
// transports that share it, such as uct/cma.
package sm

// Names of the posix component, its memory domain and its transport
// resource.
const (
	PosixComponentName = "posix"
	PosixMDName        = "posix"
	PosixTLName        = "posix"
	DevName            = "memory"
)

// Names of the sysv component, its memory domain and its transport
// resource (whose device is DevName, as posix's).
const (
	SysvComponentName = "sysv"
	SysvMDName        = "sysv"
	SysvTLName        = "sysv"
)
