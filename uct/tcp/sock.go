package tcp

import (
	"fmt"
	"net"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// sock is a connection's socket once its handshake is done: a
// non-blocking descriptor taken out of Go's network poller (detach), so
// that a frame that arrives wakes no goroutine. Only the iface's Progress
// and its poller read it (poll.go, poller.go), and operations write it
// directly.
//
// Every use of the descriptor holds a reference (acquire, release), and
// close closes it once the last user released it: a descriptor number is
// never used after it was closed, and perhaps reused by another file, as
// Go's internal/poll guarantees for the descriptors it owns.
type sock struct {
	state atomic.Uint64 // users*sockRef | sockClosing | sockClosed
	fd    int
}

// The bits of sock.state.
const (
	sockClosing uint64 = 1 << 0 // close was called: no new user
	sockClosed  uint64 = 1 << 1 // the descriptor was closed
	sockRef     uint64 = 1 << 2 // one user
)

// detach takes the socket of c out of Go's network poller: it duplicates
// the descriptor and closes c, which removes c's descriptor from the
// runtime's epoll set; the duplicate keeps the connection open, and
// non-blocking (the flag belongs to the shared file description).
func detach(c *net.TCPConn) (*sock, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		c.Close()
		return nil, err
	}
	fd, derr := -1, error(nil)
	if err := raw.Control(func(f uintptr) { fd, derr = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		derr = err
	}
	c.Close()
	if derr != nil {
		return nil, fmt.Errorf("taking the socket from Go's poller: %w", os.NewSyscallError("fcntl", derr))
	}
	return &sock{fd: fd}, nil
}

// acquire takes a reference to the descriptor; false when the socket is
// closing or closed.
func (k *sock) acquire() bool {
	if k.state.Add(sockRef)&sockClosing != 0 {
		k.release()
		return false
	}
	return true
}

// release gives back a reference from acquire, closing the descriptor
// when it was the last one of a closing socket.
func (k *sock) release() {
	if k.state.Add(^(sockRef - 1)) == sockClosing { // minus one user
		k.closeFD()
	}
}

// closing reports whether close was called.
func (k *sock) closing() bool { return k.state.Load()&sockClosing != 0 }

// close closes the socket: at once when nobody uses it, otherwise when its
// last user releases it. Later acquires fail. It may be called more than
// once.
func (k *sock) close() {
	if k.state.Or(sockClosing) == 0 {
		k.closeFD()
	}
}

// closeFD closes the descriptor once, whoever finds it unused first.
func (k *sock) closeFD() {
	if k.state.CompareAndSwap(sockClosing, sockClosing|sockClosed) {
		unix.Close(k.fd)
	}
}

// writev is write for the buffers bufs; iov is scratch space for the
// vector.
func (k *sock) writev(bufs [][]byte, iov *[]unix.Iovec) (int, error) {
	if !k.acquire() {
		return 0, net.ErrClosed
	}
	n, err := writevNB(k.fd, bufs, iov)
	k.release()
	return wrote(n, err)
}

// wrote maps the result of a non-blocking write: EAGAIN is no error.
func wrote(n int, err error) (int, error) {
	switch {
	case err == unix.EAGAIN:
		return 0, nil
	case err != nil:
		return 0, os.NewSyscallError("write", err)
	}
	return n, nil
}

// shutdownWrite ends the sending side: the peer reads the end of the
// stream after what was sent.
func (k *sock) shutdownWrite() {
	if k.acquire() {
		unix.Shutdown(k.fd, unix.SHUT_WR)
		k.release()
	}
}

// ctl changes the socket's registration in the epoll set epfd (op
// EPOLL_CTL_ADD, MOD or DEL) to events, with id as its data.
func (k *sock) ctl(epfd, op int, events uint32, id int32) error {
	if !k.acquire() {
		return net.ErrClosed
	}
	defer k.release()
	ev := unix.EpollEvent{Events: events, Fd: id}
	return unix.EpollCtl(epfd, op, k.fd, &ev)
}
