package tcp

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// pollSet is an iface's epoll set of the sockets of its connections,
// which Progress asks without waiting, as UCX's tcp transport polls its
// event set from progress, and the poller waits on when Progress does not
// run (poller.go). It is level-triggered: a socket stays ready while
// unread bytes remain, whoever reads them. A stream's socket is polled
// for reading, and for writing while bytes wait to be sent (rx.go's
// interest); a parked stream is not in the set.
type pollSet struct {
	fd   int          // the epoll descriptor
	wake int          // an eventfd in the set (id 0) that Close writes to wake the poller
	n    atomic.Int32 // streams in the table
	// added is signalled when a stream enters the table, so that the
	// poller of an iface without connections (a job on one host) sleeps
	// until one comes, not a wake-up every delay.
	added   chan struct{}
	mu      sync.Mutex
	streams map[int32]*inStream // every stream of the iface that has not ended
	// one is the stream when the table holds exactly one, else nil: see
	// pollStreams.
	one    atomic.Pointer[inStream]
	next   int32
	events [64]unix.EpollEvent // Progress's; guarded by Iface.progMu
	ready  []readyStream       // Progress's; guarded by Iface.progMu
}

// readyStream is a stream the set reported, with its events.
type readyStream struct {
	s      *inStream
	events uint32
}

// openPollSet makes the set and its wake descriptor.
func openPollSet() (*pollSet, error) {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("uct/tcp: epoll set: %w: %w", ucs.ErrIOError, os.NewSyscallError("epoll_create1", err))
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err == nil {
		ev := unix.EpollEvent{Events: unix.EPOLLIN}
		err = unix.EpollCtl(fd, unix.EPOLL_CTL_ADD, wake, &ev)
		if err != nil {
			unix.Close(wake)
		}
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("uct/tcp: epoll set: %w: %w", ucs.ErrIOError, os.NewSyscallError("eventfd", err))
	}
	return &pollSet{fd: fd, wake: wake, added: make(chan struct{}, 1), streams: make(map[int32]*inStream)}, nil
}

// close closes the set's descriptors; the streams must have ended.
func (p *pollSet) close() {
	unix.Close(p.wake)
	unix.Close(p.fd)
	p.fd, p.wake = -1, -1
}

// pollAdd enters the stream in the iface's table and registers its socket
// for what it wants.
func (i *Iface) pollAdd(s *inStream) {
	p := i.poll
	p.mu.Lock()
	for {
		p.next++
		if p.next <= 0 {
			p.next = 1 // 0 is the wake descriptor
		}
		if p.streams[p.next] == nil {
			break
		}
	}
	id := p.next
	p.streams[id] = s
	p.n.Add(1)
	p.setOne()
	p.mu.Unlock()
	select {
	case p.added <- struct{}{}:
	default:
	}
	s.evMu.Lock()
	s.id = id
	s.register()
	s.evMu.Unlock()
}

// pollRemove takes the ended stream out of the set and the table.
func (i *Iface) pollRemove(s *inStream) {
	p := i.poll
	s.evMu.Lock()
	s.gone = true
	s.readOnly.Store(false)
	if s.events != 0 {
		s.sock.ctl(p.fd, unix.EPOLL_CTL_DEL, 0, s.id)
		s.events = 0
	}
	id := s.id
	s.evMu.Unlock()
	if id == 0 {
		return
	}
	p.mu.Lock()
	if p.streams[id] == s {
		delete(p.streams, id)
		p.n.Add(-1)
		p.setOne()
	}
	p.mu.Unlock()
}

// setOne records the stream of a table that holds one; p.mu is held.
func (p *pollSet) setOne() {
	var one *inStream
	if len(p.streams) == 1 {
		for _, s := range p.streams {
			one = s
		}
	}
	p.one.Store(one)
}

// pollStreams serves the streams whose sockets are ready, without
// waiting, and returns the number of frames they ended; i.progMu is held.
func (i *Iface) pollStreams() int {
	p := i.poll
	if s := p.one.Load(); s != nil && s.readOnly.Load() {
		// One connection, polled for reading only: reading it directly
		// costs the system call that asking the set would, and when a
		// frame came it saves that call, on the way to its handler (tcp
		// tag_lat 8 B: one call of three per message). The set serves as
		// soon as there is more to ask (another connection, output that
		// waits, a receive queue that is full).
		return s.poll(true)
	}
	n, err := epollWaitNB(p.fd, p.events[:])
	if err != nil || n <= 0 {
		return 0
	}
	frames := 0
	frames, p.ready = i.serveReady(p.events[:n], p.ready, true)
	return frames
}

// serveReady serves the streams of the events evs: it writes the EP's
// queue of one ready for writing, and reads one ready for reading (or
// writes the replies that wait in it). ready is scratch space, returned
// for reuse. It returns the number of frames read.
func (i *Iface) serveReady(evs []unix.EpollEvent, ready []readyStream, progress bool) (int, []readyStream) {
	p := i.poll
	ready = ready[:0]
	p.mu.Lock()
	for _, ev := range evs {
		if s := p.streams[ev.Fd]; s != nil {
			ready = append(ready, readyStream{s, ev.Events})
		}
	}
	p.mu.Unlock()
	frames := 0
	for k, r := range ready {
		if r.events&unix.EPOLLOUT != 0 && r.s.tx != nil {
			r.s.tx.flushTx()
		}
		if r.events&^unix.EPOLLOUT != 0 || r.s.tx == nil {
			frames += r.s.poll(progress)
		}
		ready[k] = readyStream{}
	}
	return frames, ready[:0]
}

// park takes the stream, whose next frame is an active message that the
// receive queue has no room for, out of the set: deliver makes room and
// has Progress read it again (unpark). When there is room already, the
// next Progress reads it. s.mu is held.
func (i *Iface) park(s *inStream) {
	i.mu.Lock()
	i.parked = append(i.parked, s)
	room := i.rxBytes < i.cfg.rxQueueLen
	if !room {
		s.interest(false, false)
	}
	i.mu.Unlock()
	if room {
		i.unparkDue.Store(true)
		i.markDirty(uct.EventAll) // a message waits, of any kind
	}
}

// unpark reads the parked streams again, now that the receive queue has
// room; i.progMu is held.
func (i *Iface) unpark() int {
	i.unparkDue.Store(false)
	i.mu.Lock()
	parked := i.parked
	i.parked = nil
	i.mu.Unlock()
	n := 0
	for _, s := range parked {
		s.mu.Lock()
		if s.state == streamOpen && len(s.out) == 0 {
			s.interest(true, false)
		}
		s.mu.Unlock()
		n += s.poll(true)
	}
	return n
}
