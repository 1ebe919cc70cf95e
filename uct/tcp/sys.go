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
// 22 us with Syscall and 16.5 us with RawSyscall. The large reads and
// writes of bulk data are raw too: through Syscall, each of them had the
// monitor hand the goroutine's P to another thread and the goroutine
// wait for one on its return, and a 1 MiB tag_bw stream made twice the
// context switches (and thread migrations) it makes raw. Only calls that
// may copy more than rawMax bytes go through Syscall, so that a very
// long one lets the runtime run other goroutines (and stop the world);
// a read asks for at most rawMax bytes.
//
// The descriptors are sockets, and the calls are the socket calls
// (recvfrom, sendto, sendmsg), as UCX's tcp transport makes them, rather
// than read, write and writev: they go to the socket without the file
// layer's steps, which made a loopback one-way trip between two spinning
// processes 0.15 to 0.2 us shorter. Sends carry MSG_NOSIGNAL: a write to
// a connection the peer reset fails with EPIPE and raises no SIGPIPE.

// rawMax is the most bytes moved by one raw read or write: a copy of a
// few hundred microseconds at most. A non-blocking send moves at most
// what the socket's send buffer has room for (net.core.wmem_max, 4 MiB
// by default).
const rawMax = 2 << 20

// readNB is a non-blocking recv(2) into b (not empty).
func readNB(fd int, b []byte) (int, error) {
	return sysIO(unix.SYS_RECVFROM, fd, unsafe.Pointer(&b[0]), uintptr(len(b)), 0, len(b) <= rawMax)
}

// writeNB is a non-blocking send(2) of b (not empty).
func writeNB(fd int, b []byte) (int, error) {
	return sysIO(unix.SYS_SENDTO, fd, unsafe.Pointer(&b[0]), uintptr(len(b)), unix.MSG_NOSIGNAL, len(b) <= rawMax)
}

// writevNB is a non-blocking sendmsg(2) of bufs; iov is scratch space for
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
	if len(v) == 1 {
		return sysIO(unix.SYS_SENDTO, fd, unsafe.Pointer(v[0].Base), uintptr(n), unix.MSG_NOSIGNAL, n <= rawMax)
	}
	var m unix.Msghdr
	m.Iov = &v[0]
	m.SetIovlen(len(v))
	return sysIO(unix.SYS_SENDMSG, fd, unsafe.Pointer(&m), unix.MSG_NOSIGNAL, 0, n <= rawMax)
}

// sysIO makes the socket call trap on fd with the arguments p, a and b
// (recvfrom and sendto: the buffer, its length and the flags, without an
// address; sendmsg: the message and the flags), retried when interrupted:
// raw when few bytes move, through Syscall otherwise.
func sysIO(trap uintptr, fd int, p unsafe.Pointer, a, b uintptr, raw bool) (int, error) {
	for {
		var r uintptr
		var e unix.Errno
		if raw {
			r, _, e = unix.RawSyscall6(trap, uintptr(fd), uintptr(p), a, b, 0, 0)
		} else {
			r, _, e = unix.Syscall6(trap, uintptr(fd), uintptr(p), a, b, 0, 0)
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

// readvNB is a non-blocking recvmsg(2) into bufs, of at most rawMax
// bytes (bufs beyond are left for the next read); iov is scratch space
// for the vector.
func readvNB(fd int, bufs [][]byte, iov *[]unix.Iovec) (int, error) {
	n := 0
	v := (*iov)[:0]
	for _, b := range bufs {
		if len(b) == 0 {
			continue
		}
		if n+len(b) > rawMax {
			b = b[:rawMax-n]
		}
		n += len(b)
		e := unix.Iovec{Base: &b[0]}
		e.SetLen(len(b))
		v = append(v, e)
		if n == rawMax || len(v) == maxWriteIOV {
			break
		}
	}
	*iov = v
	if len(v) == 0 {
		return 0, nil
	}
	defer clear(v) // holds no buffer once done
	var m unix.Msghdr
	m.Iov = &v[0]
	m.SetIovlen(len(v))
	return sysIO(unix.SYS_RECVMSG, fd, unsafe.Pointer(&m), 0, 0, true)
}
