package tcp

import (
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// pollSet is an iface's epoll set of the sockets its streams read, which
// Progress asks without waiting (as UCX's tcp transport polls its event
// set from progress). It is level-triggered: a socket stays ready while
// unread bytes remain, whoever reads them.
type pollSet struct {
	fd      int          // the epoll descriptor, or -1 when it could not be made
	n       atomic.Int32 // streams in the set
	mu      sync.Mutex
	streams map[int32]*inStream
	next    int32
	events  [64]unix.EpollEvent // Progress's; guarded by Iface.progMu
	ready   []*inStream         // Progress's; guarded by Iface.progMu
}

// openPollSet makes the set. Without one (epoll_create failed), Progress
// polls nothing and the streams' goroutines read everything.
func openPollSet() *pollSet {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		logf("no epoll set, the reading goroutines alone read the sockets: %v", err)
		fd = -1
	}
	return &pollSet{fd: fd, streams: make(map[int32]*inStream)}
}

// close closes the set's descriptor; the streams must have left it.
func (p *pollSet) close() {
	if p.fd >= 0 {
		unix.Close(p.fd)
		p.fd = -1
	}
}

// pollAdd adds the stream's socket to the iface's set.
func (i *Iface) pollAdd(s *inStream) {
	p := i.poll
	if p.fd < 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		p.next++
		if p.next <= 0 {
			p.next = 1
		}
		if p.streams[p.next] == nil {
			break
		}
	}
	var err error
	ctl := s.raw.Control(func(fd uintptr) {
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: p.next}
		err = unix.EpollCtl(p.fd, unix.EPOLL_CTL_ADD, int(fd), &ev)
	})
	if ctl != nil || err != nil {
		return // closed already, or not pollable: the goroutine reads it
	}
	s.pollID = p.next
	p.streams[s.pollID] = s
	p.n.Add(1)
}

// pollRemove takes the stream's socket out of the iface's set.
func (i *Iface) pollRemove(s *inStream) {
	p := i.poll
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.pollID == 0 || p.streams[s.pollID] != s {
		return
	}
	delete(p.streams, s.pollID)
	p.n.Add(-1)
	// A socket still open must leave the set (a closed one left it
	// when it was closed: the set holds no other reference to it).
	s.raw.Control(func(fd uintptr) {
		unix.EpollCtl(p.fd, unix.EPOLL_CTL_DEL, int(fd), nil)
	})
	s.pollID = 0
}

// pollStreams reads the streams whose sockets are readable, without
// waiting, and returns the number of frames they ended; i.progMu is held.
func (i *Iface) pollStreams() int {
	p := i.poll
	n, err := epollWaitNB(p.fd, p.events[:])
	if err != nil || n <= 0 {
		return 0
	}
	frames := 0
	p.mu.Lock()
	ready := p.ready[:0]
	for _, ev := range p.events[:n] {
		if s := p.streams[ev.Fd]; s != nil {
			ready = append(ready, s)
		}
	}
	p.mu.Unlock()
	for k, s := range ready {
		frames += s.poll()
		ready[k] = nil
	}
	p.ready = ready[:0]
	return frames
}
