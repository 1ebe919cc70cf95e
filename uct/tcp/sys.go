package tcp

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The non-blocking system calls of the hot paths (Progress's epoll_wait,
// the reads of a stream's buffer, the writes of small frames) are made
// with RawSyscall. Syscall tells the runtime that the goroutine entered
// the kernel; the runtime's monitor thread, finding it there at its
// wake-ups, keeps waking every 20 us instead of backing off to 10 ms, and
// on a busy machine each wake-up takes the core of a spinning process for
// a moment. A loopback round trip between two spinning processes measured
// 22 us with Syscall and 16.5 us with RawSyscall. Calls that may copy
// much (rawMax) go through Syscall, so that a long one lets the runtime
// run other goroutines.

// rawMax is the most bytes moved by one raw read or write.
const rawMax = 64 << 10

// readNB is a non-blocking read(2) into b (not empty).
func readNB(fd int, b []byte) (int, error) {
	return sysIO(unix.SYS_READ, fd, unsafe.Pointer(&b[0]), len(b), len(b) <= rawMax)
}

// writeNB is a non-blocking write(2) of b (not empty).
func writeNB(fd int, b []byte) (int, error) {
	return sysIO(unix.SYS_WRITE, fd, unsafe.Pointer(&b[0]), len(b), len(b) <= rawMax)
}

// writevNB is a non-blocking writev(2) of bufs; iov is scratch space for
// the vector.
func writevNB(fd int, bufs [][]byte, iov *[]unix.Iovec) (int, error) {
	n := 0
	v := (*iov)[:0]
	for _, b := range bufs {
		if len(b) > 0 {
			n += len(b)
			e := unix.Iovec{Base: &b[0]}
			e.SetLen(len(b))
			v = append(v, e)
		}
	}
	*iov = v
	if len(v) == 0 {
		return 0, nil
	}
	defer clear(v) // holds no buffer once done
	return sysIO(unix.SYS_WRITEV, fd, unsafe.Pointer(&v[0]), len(v), n <= rawMax)
}

// sysIO makes the system call trap (read, write or writev) on fd with the
// buffer or vector p of n elements, retried when interrupted: raw when few
// bytes move, through Syscall otherwise.
func sysIO(trap uintptr, fd int, p unsafe.Pointer, n int, raw bool) (int, error) {
	for {
		var r uintptr
		var e unix.Errno
		if raw {
			r, _, e = unix.RawSyscall(trap, uintptr(fd), uintptr(p), uintptr(n))
		} else {
			r, _, e = unix.Syscall(trap, uintptr(fd), uintptr(p), uintptr(n))
		}
		switch e {
		case 0:
			return int(r), nil
		case unix.EINTR:
			continue
		}
		return 0, e
	}
}

// epollWaitNB is epoll_wait(2) with a zero timeout (epoll_pwait without a
// signal mask, which every architecture has).
func epollWaitNB(epfd int, ev []unix.EpollEvent) (int, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&ev[0])), uintptr(len(ev)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// readv is readv(2) into bufs, retried when interrupted.
func readv(fd int, bufs [][]byte) (int, error) {
	for {
		n, err := unix.Readv(fd, bufs)
		if err != unix.EINTR {
			if n < 0 {
				n = 0
			}
			return n, err
		}
	}
}
