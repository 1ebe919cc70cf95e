package tcp

import (
	"net"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/uct/internal/base"
)

// Passive progress.
//
// Progress reads the iface's sockets in the goroutine that calls it
// (rx.go). A process that stops calling it (it computes, sleeps, or waits
// for something else) must still be served: its peers wait for the
// replies to their gets and atomics, for the acknowledgements of their
// flushes, and for heartbeats. So each iface has one poller goroutine,
// which steps in only when Progress has not run for UCX_TCP_PASSIVE_DELAY
// (default 1ms):
//
//   - While the iface has no connection, the poller sleeps until one
//     comes (a job on one host never wakes it).
//   - While Progress runs, the poller sleeps on a timer and looks, every
//     delay (at least every houseEvery), whether Progress ran meanwhile,
//     and writes the batches of small frames (batch.go) that waited for
//     it longer than the delay.
//     It never waits on the sockets then, so a frame that arrives wakes
//     nothing but the goroutine that polls.
//   - Once Progress has not run for the delay (a call under way counts as
//     running for up to houseEvery: one write of a large get reply lasts
//     a while), the poller waits on the epoll set itself (a blocking
//     epoll_wait, on a thread of its own)
//     and serves what is ready as Progress would: it applies puts and
//     atomics, answers gets, acknowledges, writes the EPs' queues. The
//     completions of replies and the synchronous active messages it reads
//     wait for Progress (the worker is signalled). It goes back to
//     sleeping as soon as Progress runs again.
//
// A request to a process that computes is thus answered within about the
// delay, and the ones that follow at once. With a delay of 0 the poller
// always waits on the set, beside Progress: every frame then also wakes
// it, as every frame woke a reading goroutine before the poller existed.
//
// The poller also ticks the streams (heartbeats and liveness checks,
// alive.go), ends those that linger after a goodbye (close.go), and, once
// Close began, serves every stream, whether Progress runs or not, until
// each has ended.

// houseEvery is how often the poller ticks the streams and checks those
// that linger; the ticks (a tenth of the peer timeout at least) are
// multiples of it.
const houseEvery = 10 * time.Millisecond

// poller is the iface's goroutine of passive progress; see the top of the
// file. It returns once Close began and every stream ended.
func (i *Iface) poller() {
	defer close(i.pollerDone)
	base.BindThread(i.log, "uct/tcp", "poller", i.cpus)
	var (
		events  [64]unix.EpollEvent
		ready   []readyStream
		streams []*inStream
	)
	delay := i.cfg.passiveDelay
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	// seen is the count of Progress starts and ends the poller saw last
	// (odd while a Progress runs), since when it saw it first, and last
	// when it last knew Progress to run.
	seen, last := i.progSeq.Load(), time.Now()
	since := last
	nextHouse := last.Add(houseEvery)
	for {
		closing := i.closing.Load()
		if closing && i.poll.n.Load() == 0 {
			return
		}
		if !closing && i.poll.n.Load() == 0 {
			// Nothing to read or tick until a connection comes.
			select {
			case <-i.poll.added:
			case <-i.pollerStop:
			}
			continue
		}
		if !closing && time.Since(last) < delay {
			// Progress ran lately: it reads.
			timer.Reset(min(delay, houseEvery))
			select {
			case <-timer.C:
			case <-i.pollerStop:
				timer.Stop()
			}
		} else {
			// Set before the batches are looked at: an EP that starts
			// the first batch then wakes the poller (startBatch).
			i.pollerBlocked.Store(true)
			wait := houseEvery
			if due, ok := i.batchDue(time.Now()); ok {
				wait = min(wait, max(due, time.Millisecond))
			}
			n, err := unix.EpollWait(i.poll.fd, events[:], int((wait+time.Millisecond-1)/time.Millisecond))
			i.pollerBlocked.Store(false)
			// A Progress that ran during the wait, or runs now, serves what
			// woke it: the poller, serving too, would take the sockets'
			// locks and a core from the goroutine that progresses (tcp
			// tag_bw 1 MiB on 2 cores lost a fifth to that).
			if err == nil && n > 0 && (closing || !progressing(i.progSeq.Load(), seen, since)) {
				k := 0
				for _, ev := range events[:n] {
					if ev.Fd == 0 {
						i.drainWake()
						continue
					}
					events[k] = ev
					k++
				}
				_, ready = i.serveReady(events[:k], ready, false)
			}
		}
		now := time.Now()
		if s := i.progSeq.Load(); s != seen {
			seen, last, since = s, now, now
		} else if progressing(s, seen, since) {
			last = now
		}
		if due, ok := i.batchDue(now); ok && due <= 0 {
			// Progress did not run for the delay: the poller writes.
			i.writeBatches()
		}
		if closing || !now.Before(nextHouse) {
			streams = i.housekeep(now, streams)
			nextHouse = now.Add(houseEvery)
		}
	}
}

// progressing reports whether Progress runs as far as the poller can
// tell: the count of its starts and ends, s, moved from seen, or a
// Progress call is under way (s odd) that the poller first saw less than
// houseEvery ago, at since. A call that lasts (one write of a large get
// reply) reads what is ready when it is done; one that lasts longer (a
// handler that computes) is served beside.
func progressing(s, seen uint64, since time.Time) bool {
	return s != seen || s&1 == 1 && time.Since(since) < houseEvery
}

// wakePoller wakes the poller from its wait on the set (Close).
func (i *Iface) wakePoller() {
	one := uint64(1)
	unix.Write(i.poll.wake, (*[8]byte)(unsafe.Pointer(&one))[:])
}

// drainWake clears the wake descriptor, so that it stops being ready.
func (i *Iface) drainWake() {
	var b [8]byte
	unix.Read(i.poll.wake, b[:])
}

// housekeep ticks the streams whose tick is due and ends those that
// linger past their deadline; streams is scratch space, returned for
// reuse.
func (i *Iface) housekeep(now time.Time, streams []*inStream) []*inStream {
	p := i.poll
	p.mu.Lock()
	for _, s := range p.streams {
		streams = append(streams, s)
	}
	p.mu.Unlock()
	for k, s := range streams {
		s.housekeep(now)
		streams[k] = nil
	}
	return streams[:0]
}

// housekeep ticks the stream when its tick is due, and ends it when it
// lingers past its deadline.
func (s *inStream) housekeep(now time.Time) {
	s.mu.Lock()
	if s.sock.closing() {
		s.fail(net.ErrClosed) // its EP broke the connection (EP.killLocked)
	}
	switch s.state {
	case streamOpen:
		if t := s.tx; t != nil {
			// Its EP shut its sending side down, said all it will:
			// the peer has closeLinger to close its side.
			if at := t.shutAt.Load(); at != 0 && now.UnixNano()-at > int64(closeLinger) {
				s.fail(errGoodbye)
			}
		}
		if s.every > 0 && !now.Before(s.nextTick) {
			s.nextTick = now.Add(s.every)
			if s.sock.acquire() {
				s.fd = s.sock.fd
				if err := s.h.tick(s.reads); err != nil {
					s.fail(err)
				}
				s.fd = -1
				s.sock.release()
			}
		}
	case streamClosing, streamDraining:
		if !now.Before(s.deadline) {
			s.fail(errGoodbye)
		}
	}
	ended := false
	if s.err != nil {
		ended = s.finish()
	}
	err := s.err
	s.mu.Unlock()
	if ended {
		s.ended(err, false)
	}
}
