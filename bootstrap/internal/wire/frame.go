package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucs"
)

// A PE and its agent talk over a local channel: a unix stream socket pair
// whose PE end the agent hands to the PE when it starts it (inherited,
// numbered by GOSHMEM_AGENT_FD), so that no name is needed and nobody else
// can connect. On it, every message is a frame: a 4-byte big-endian length,
// then the message (AppendMessage). A frame may carry one file descriptor
// (SCM_RIGHTS): the memory file of a table, which travels with the first
// byte of its frame.

// maxFrame bounds a frame: the largest message, a gather of MaxAllgather
// bytes, and its header.
const maxFrame = MaxAllgather + 1<<10

// agentWriteTimeout bounds an agent's write to one of its PEs.
const agentWriteTimeout = 5 * time.Second

// Conn is one end of a local channel. Writes are serialized; reads
// are for one goroutine.
type Conn struct {
	c   *net.UnixConn
	wmu sync.Mutex
	// wtimeout, when set, bounds each write: an agent does not wait on a
	// PE that does not read.
	wtimeout time.Duration
	// sent and received count frames and bytes (for Stats).
	Sent, Received Traffic
}

// Traffic counts messages and bytes.
type Traffic struct {
	Msgs, Bytes atomic.Uint64
}

// Add counts one message of n bytes.
func (t *Traffic) Add(n int) {
	t.Msgs.Add(1)
	t.Bytes.Add(uint64(n))
}

// NewLocalPair returns a connected pair of local channels' ends: the
// agent's, as a Conn, and the PE's, as a file to hand to the PE.
func NewLocalPair() (*Conn, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("bootstrap: socketpair: %w", err)
	}
	mine := os.NewFile(uintptr(fds[0]), "goshmem-agent-channel")
	c, err := FileConn(mine)
	mine.Close()
	if err != nil {
		unix.Close(fds[1])
		return nil, nil, err
	}
	c.wtimeout = agentWriteTimeout
	return c, os.NewFile(uintptr(fds[1]), "goshmem-pe-channel"), nil
}

// FileConn makes a Conn of f (a unix stream socket), which it dups:
// the caller closes f.
func FileConn(f *os.File) (*Conn, error) {
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: the local channel: %w", err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("bootstrap: the local channel is a %T, not a unix socket: %w", c, ucs.ErrInvalidParam)
	}
	return &Conn{c: uc}, nil
}

// Send writes m as one frame, with the file descriptor fd when fd >= 0.
func (l *Conn) Send(m *Message, fd int) error {
	b := AppendMessage(make([]byte, 4, 64), m)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.wtimeout > 0 {
		l.c.SetWriteDeadline(time.Now().Add(l.wtimeout))
	}
	var err error
	if fd >= 0 {
		// Frames that carry a descriptor are small: one sendmsg sends
		// them whole.
		var n int
		n, _, err = l.c.WriteMsgUnix(b, unix.UnixRights(fd), nil)
		if err == nil && n != len(b) {
			err = io.ErrShortWrite
		}
	} else {
		_, err = l.c.Write(b)
	}
	if err != nil {
		return fmt.Errorf("bootstrap: local channel: %w", err)
	}
	l.Sent.Add(len(b))
	return nil
}

// Recv reads the next frame and decodes it; fd is the descriptor that
// came with it, or -1. A decoding error closes the descriptor.
func (l *Conn) Recv() (m *Message, fd int, err error) {
	var head [4]byte
	oob := make([]byte, unix.CmsgSpace(4*4))
	fd = -1
	// The header is read with recvmsg: a descriptor comes with the first
	// byte of its frame. The body is read exactly, so that no read takes
	// bytes of the next frame.
	for got := 0; got < len(head); {
		n, oobn, _, _, rerr := l.c.ReadMsgUnix(head[got:], oob)
		if oobn > 0 {
			for _, f := range rights(oob[:oobn]) {
				if fd < 0 {
					fd = f
				} else {
					unix.Close(f) // one descriptor per frame
				}
			}
		}
		got += n
		if rerr != nil {
			if got > 0 && errors.Is(rerr, io.EOF) {
				rerr = io.ErrUnexpectedEOF
			}
			CloseFD(fd)
			return nil, -1, rerr
		}
	}
	size := binary.BigEndian.Uint32(head[:])
	if size > maxFrame {
		CloseFD(fd)
		return nil, -1, malformed(fmt.Sprintf("frame of %d bytes", size))
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(l.c, body); err != nil {
		CloseFD(fd)
		return nil, -1, err
	}
	l.Received.Add(4 + int(size))
	m, err = DecodeMessage(body)
	if err != nil {
		CloseFD(fd)
		return nil, -1, err
	}
	return m, fd, nil
}

// rights returns the descriptors of the SCM_RIGHTS messages in oob.
func rights(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for i := range msgs {
		if f, err := unix.ParseUnixRights(&msgs[i]); err == nil {
			fds = append(fds, f...)
		}
	}
	return fds
}

// CloseFD closes fd unless it is negative (no descriptor).
func CloseFD(fd int) {
	if fd >= 0 {
		unix.Close(fd)
	}
}

// Close closes the channel.
func (l *Conn) Close() error { return l.c.Close() }
