package tcp

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/goshmem/goshmem/ucs"
)

// Liveness: an EP fails when its peer goes silent.
//
// A peer process that dies is noticed at once (its kernel closes the
// connection), but one that is stopped (SIGSTOP), hung, or cut off by the
// network says nothing at all: its kernel even acknowledges what is sent
// to a stopped process. So the server side of every connection (the
// accepted connection's stream) sends a frameAlive whenever it wrote
// nothing else for a fifth of the peer timeout (UCX_TCP_PEER_TIMEOUT, by
// default the job's GOSHMEM_FAILURE_TIMEOUT), and the EP fails with
// ucs.ErrEndpointTimeout once its stream read nothing for nearly the whole
// timeout. Both are ticks of the iface's poller goroutine (poller.go),
// not of the program: a peer that computes for minutes without calling
// the library still beats, and so does one whose receive queue is full.
// The timeout must be the same in every process of a job.
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
// last tick. Nothing is sent while a reply waits to be written: the
// client then has bytes to read anyway. On a shared connection the
// target role beats until it said goodbye, or the peer's EP did.
func (s *rxConn) tick(uint64) error {
	if e := s.ep; e != nil {
		// Whatever the EP wrote counts, its operations included.
		w := e.wrote.Load()
		e.mu.Lock()
		busy := w != s.lastWrote || len(e.q) > 0 || e.writing || e.st.rxDone()
		e.mu.Unlock()
		if s.lastWrote = w; busy {
			return nil
		}
		putFrameHeader(s.beat[:], frameAlive, 0, 0)
		return s.write(nil, s.beat[:], nil)
	}
	if s.sent || len(s.in.out) > 0 {
		s.sent = false
		return nil
	}
	putFrameHeader(s.beat[:], frameAlive, 0, 0)
	if err := s.in.send(nil, s.beat[:], nil); err != nil {
		return fmt.Errorf("sending a heartbeat: %w", err)
	}
	return nil
}

// tick fails the stream of an EP the user holds when it read nothing from
// the peer, which beats every fifth of the peer timeout, for the timeout
// less one check; on a shared connection it also ticks the target role.
func (r *epReader) tick(reads uint64) error {
	e := r.e
	if e.rx != nil {
		if err := e.rx.tick(reads); err != nil {
			return err
		}
	}
	now := time.Now()
	e.mu.Lock()
	live := e.st.ops == opsLive
	e.mu.Unlock()
	if reads != r.reads || !live {
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
