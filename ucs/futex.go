package ucs

import (
	"math"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Futex operations (linux/futex.h).
const (
	futexWait        = 0
	futexWake        = 1
	futexPrivateFlag = 128
)

// FutexWait blocks the calling thread while *addr holds val, until a
// FutexWake on addr, a signal, or timeout (none when timeout <= 0). A
// shared futex (private false) may be woken from another process that maps
// the same memory; a private one only from this process, more cheaply.
// The wait is a system call the Go runtime sees, so the goroutine's
// processor goes to other goroutines meanwhile.
func FutexWait(addr *uint32, val uint32, timeout time.Duration, private bool) {
	op := uintptr(futexWait)
	if private {
		op |= futexPrivateFlag
	}
	var ts *unix.Timespec
	if timeout > 0 {
		t := unix.NsecToTimespec(int64(timeout))
		ts = &t
	}
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), op, uintptr(val), uintptr(unsafe.Pointer(ts)), 0, 0)
}

// FutexWake wakes every thread waiting on addr (a private futex when
// private is set; see FutexWait).
func FutexWake(addr *uint32, private bool) {
	op := uintptr(futexWake)
	if private {
		op |= futexPrivateFlag
	}
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), op, math.MaxInt32, 0, 0, 0)
}

// YieldThread gives the calling thread's processor to another runnable
// thread of the machine, if there is one (sched_yield). runtime.Gosched
// yields only to goroutines of this process: on a node with more busy
// processes than cores, a waiter that only calls it keeps its core for a
// whole scheduler time slice (milliseconds) while the process it waits
// for cannot run.
func YieldThread() { unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
