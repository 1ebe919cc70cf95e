package cluster

import (
	"encoding/binary"
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A stream that comes from this host can be told apart from the others by
// the user that owns the socket at its other end: the members of a job on
// one host (the launcher, its agent, the PEs) run as one user, and a
// stream of another user's is a stranger's whatever it sends. The kernel
// says who owns a socket (sock_diag: the query ss makes); the strangers'
// pool asks when it must displace one (strangers.go).

// ownerWho says whose a stream is, as far as its socket's owner tells.
type ownerWho uint8

const (
	ownerUnknown ownerWho = iota // not asked yet
	ownerRemote                  // not of this host, or the kernel did not say
	ownerSame                    // this process's user's
	ownerOther                   // another user's
)

// sockDiag asks the kernel who owns the sockets at the other end of
// streams, over one netlink socket.
type sockDiag struct {
	mu  sync.Mutex
	fd  int // -1 until opened; -2 when it cannot be
	seq uint32
	buf [512]byte
}

func newSockDiag() *sockDiag { return &sockDiag{fd: -1} }

// sockDiagTimeout bounds the wait for the kernel's answer.
const sockDiagTimeout = time.Second

// who says whose c is: the user owning the socket at its other end,
// compared with this process's effective user.
func (d *sockDiag) who(c *net.TCPConn) ownerWho {
	local, ok1 := c.LocalAddr().(*net.TCPAddr)
	remote, ok2 := c.RemoteAddr().(*net.TCPAddr)
	if !ok1 || !ok2 || !(remote.IP.IsLoopback() || remote.IP.Equal(local.IP)) {
		return ownerRemote
	}
	uid, ok := d.owner(remote, local)
	switch {
	case !ok:
		return ownerRemote
	case uid == uint32(unix.Geteuid()):
		return ownerSame
	}
	return ownerOther
}

// The layout of the sock_diag messages (linux/inet_diag.h).
const (
	inetDiagReqSize = 56 // struct inet_diag_req_v2
	inetDiagMsgUID  = 64 // offset of idiag_uid in struct inet_diag_msg
)

// owner returns the user owning the TCP socket bound to from and connected
// to to, and whether the kernel knows it.
func (d *sockDiag) owner(from, to *net.TCPAddr) (uint32, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fd == -2 {
		return 0, false
	}
	if d.fd == -1 {
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
		if err != nil {
			d.fd = -2
			return 0, false
		}
		tv := unix.NsecToTimeval(int64(sockDiagTimeout))
		unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
		d.fd = fd
	}
	req := d.buf[:unix.SizeofNlMsghdr+inetDiagReqSize]
	clear(req)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST)
	d.seq++
	binary.NativeEndian.PutUint32(req[8:], d.seq)
	r := req[unix.SizeofNlMsghdr:]
	r[0], r[1] = unix.AF_INET6, unix.IPPROTO_TCP
	src, dst := from.IP.To16(), to.IP.To16()
	if f4, t4 := from.IP.To4(), to.IP.To4(); f4 != nil && t4 != nil {
		r[0], src, dst = unix.AF_INET, f4, t4
	}
	binary.NativeEndian.PutUint32(r[4:], ^uint32(0)) // every state
	binary.BigEndian.PutUint16(r[8:], uint16(from.Port))
	binary.BigEndian.PutUint16(r[10:], uint16(to.Port))
	copy(r[12:28], src)
	copy(r[28:44], dst)
	binary.NativeEndian.PutUint32(r[48:], ^uint32(0)) // no cookie
	binary.NativeEndian.PutUint32(r[52:], ^uint32(0))
	if err := unix.Sendto(d.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, false
	}
	for {
		n, _, err := unix.Recvfrom(d.fd, d.buf[:], 0)
		if err != nil || n < unix.SizeofNlMsghdr {
			return 0, false // no answer
		}
		if binary.NativeEndian.Uint32(d.buf[8:]) != d.seq {
			continue // the late answer to an earlier question
		}
		if n < unix.SizeofNlMsghdr+inetDiagMsgUID+4 || binary.NativeEndian.Uint16(d.buf[4:]) != unix.SOCK_DIAG_BY_FAMILY {
			return 0, false // not found (NLMSG_ERROR)
		}
		return binary.NativeEndian.Uint32(d.buf[unix.SizeofNlMsghdr+inetDiagMsgUID:]), true
	}
}

// close closes the netlink socket.
func (d *sockDiag) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fd >= 0 {
		unix.Close(d.fd)
	}
	d.fd = -2
}
