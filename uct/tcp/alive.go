package tcp

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucs"
)

// Liveness: an EP fails when its peer goes silent.
//
// A peer process that dies is noticed at once (its kernel closes the
// connection), but one that is stopped (SIGSTOP), hung, or cut off by the
// network says nothing at all: its kernel even acknowledges what is sent
// to a stopped process. So the server side of every connection (the
// accepted connection's goroutine) sends a frameAlive whenever it wrote
// nothing else for a fifth of the peer timeout (UCX_TCP_PEER_TIMEOUT,
// by default the job's GOSHMEM_FAILURE_TIMEOUT), and the EP's reader
// goroutine fails the EP with ucs.ErrEndpointTimeout once it read nothing
// for nearly the whole timeout. The heartbeat comes from a goroutine, not
// from the program: a peer that computes for minutes without calling the
// library still answers, and so does one whose receive queue is full (its
// reader waits for room, and beats while it waits). The timeout must be
// the same in every process of a job.
//
// The kernel's keepalive (UCX_TCP_KEEPIDLE, KEEPINTVL, KEEPCNT; by default
// half the timeout, then five probes a tenth of it apart) also ends idle
// connections whose peer host is gone, the accepted ones included, which
// no heartbeat checks. (TCP_USER_TIMEOUT is not set: it would also end a
// connection whose peer keeps its receive window closed that long, which
// a live peer that computes and leaves its messages unread does.)

// errSilent is why an EP whose peer went silent failed.
var errSilent = fmt.Errorf("the peer went silent: %w", ucs.ErrEndpointTimeout)

// beatEvery is how often the server side of a connection ticks, sending
// a frameAlive when it wrote nothing since the last tick; 0: never.
func (c *ifaceConfig) beatEvery() time.Duration { return c.peerTimeout / 5 }

// checkEvery is how often an EP's reader checks that it heard from its
// peer; 0: never.
func (c *ifaceConfig) checkEvery() time.Duration { return c.peerTimeout / 10 }

// setLiveness turns on the kernel's keepalive of conn; an error is
// ignored (the heartbeat still covers the EPs).
func (c *ifaceConfig) setLiveness(conn *net.TCPConn) {
	conn.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: c.keepIdle, Interval: c.keepIntvl, Count: c.keepCnt})
}

// tick sends a heartbeat when nothing was written to the client since the
// last tick. A socket with no room takes none: the client then has bytes
// to read anyway.
func (s *rxConn) tick(uint64) error {
	if s.sent {
		s.sent = false
		return nil
	}
	var b [frameHeaderLen]byte
	putFrameHeader(b[:], frameAlive, 0, 0)
	n, err := writeNB(s.in.fd, b[:])
	switch {
	case err == unix.EAGAIN:
		return nil
	case err != nil:
		return fmt.Errorf("sending a heartbeat: %w", err)
	case n < len(b):
		return s.write(b[n:]) // the rest of the frame must follow
	}
	return nil
}

// beatWhileWaiting arranges for a reader that waits for room in the
// receive queue (i.mu held, as by rxCond.Wait) to wake at its next tick,
// so that it keeps beating; the returned function cancels it.
func (s *rxConn) beatWhileWaiting() (stop func() bool) {
	i := s.iface
	every := s.in.every
	if every <= 0 {
		return func() bool { return false }
	}
	t := time.AfterFunc(every, func() {
		i.mu.Lock()
		i.rxCond.Broadcast()
		i.mu.Unlock()
	})
	return t.Stop
}

// tick fails the EP's stream when it read nothing from the peer, which
// beats every fifth of the peer timeout, for the timeout less one check.
func (r *epReader) tick(reads uint64) error {
	now := time.Now()
	if reads != r.reads {
		r.reads, r.heard = reads, now
		return nil
	}
	cfg := &r.e.iface.cfg
	if silent := now.Sub(r.heard); silent >= cfg.peerTimeout-cfg.checkEvery() {
		return fmt.Errorf("nothing from the peer for %v (UCX_TCP_PEER_TIMEOUT %v): %w", silent.Round(time.Millisecond), cfg.peerTimeout, errSilent)
	}
	return nil
}

// failStatus is the status an EP fails with when its stream ended with
// err: ucs.ErrEndpointTimeout for a silent peer (no heartbeat, or the
// kernel's keepalive), ucs.ErrConnectionReset otherwise.
func failStatus(err error) ucs.Status {
	if errors.Is(err, ucs.ErrEndpointTimeout) || errors.Is(err, syscall.ETIMEDOUT) {
		return ucs.ErrEndpointTimeout
	}
	return ucs.ErrConnectionReset
}
