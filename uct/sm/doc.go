// Package sm is the shared-memory transport of goshmem (UCX's uct/sm/mm):
// processes on one host reach each other's memory through mappings of the
// same segments, and exchange active messages through a receive FIFO in
// shared memory.
//
// Importing the package registers the component "posix" with uct.Register.
// Its memory domain "posix" allocates segments with memfd_create (mode 0600;
// nothing is ever created in /dev/shm, so nothing is left behind even when a
// process crashes) and maps them MAP_SHARED. A packed key carries the pid of
// the owner, the descriptor number of the memfd there and a random 64-bit
// segment id; another process maps the segment by opening
// /proc/<pid>/fd/<fd>, after checking through the link name that it is the
// memfd with that segment id (so that a reused pid or descriptor number is
// refused). Mappings are cached per segment with a reference count.
//
// The unpacked rkey is the difference between the local mapping and the
// remote base address, so EP operations find the local address of raddr as
// raddr+rkey, with no lookup: put and get are single copies, atomics are
// sync/atomic operations on the mapped memory (coherent with every other CPU
// atomic on it, in any process), and all of them complete on return.
//
// The "sysv" component (System V shmget/shmat segments; keys carry the shmid
// instead of pid and descriptor) is not written yet. It will be a second
// Component in sysv.go sharing everything but segment allocation and
// attachment (segment.go's attach is the posix half), the key format
// (mkey.go) and its names.
package sm
