package cluster

import (
	"bytes"
	"cmp"
	"container/list"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// An inbound stream is a stranger until its first message authenticates
// with the job key (see guardedTransport). Strangers are bounded:
//
//   - at most perPeer of one remote address and total in all; a newcomer
//     beyond either displaces (closes) the oldest stranger that is silent
//     (nothing to read: it sent nothing, or nothing since it was read),
//     else the oldest that has not sent the job's label, else the
//     oldest: a member's stream, which sends the label as it connects and
//     its message right after, is read and leaves the strangers before
//     idle ones, however many, displace it;
//   - a stranger must send the job's label (in clear: "goshmem/JOBID")
//     within strangerTimeout, and is closed at the first byte that is not
//     the label's; then its whole message within tcpTimeout of its
//     connection (memberlist's limit on a stream's message);
//   - a stranger may send its message only once the node's budget of
//     bytes in flight (budgetBytes) holds all of it: it waits for it (FIFO,
//     while its deadline lasts), so that what all strangers cost is
//     bounded, and no stream waits with part of a reservation (which could
//     deadlock members' streams that wait for each other); one remote
//     address may hold at most half of the budget while another holds a
//     part. A message larger than the budget is admitted alone.

const (
	// strangerTimeout bounds the time an inbound stream takes to send the
	// job's label: a member sends it as soon as it connected.
	strangerTimeout = 2 * time.Second
	// budgetBytes bounds the bytes in flight of the inbound streams of a
	// node: the largest message memberlist reads (mlMaxMessage, more than
	// the largest bootstrap message: an Allgather table of MaxAllgather
	// bytes and its framing) and room for the small ones.
	budgetBytes = 24 << 20
)

// memberlist's message types and limits that matter here (net.go of
// memberlist).
const (
	mlEncryptMsg  = 10
	mlHasLabelMsg = 244
	// mlMaxMessage is the largest stream message memberlist reads.
	mlMaxMessage = 20 << 20
)

// stranger is an inbound stream until its first message authenticated.
type stranger struct {
	conn *net.TCPConn
	peer string // remote address, the unit of the per-peer bounds

	// Under the pool's lock.
	elem   *list.Element
	speaks bool // it sent the job's label
	gone   bool // out of the pool: authenticated, or closed

	closeOnce sync.Once
	closed    chan struct{} // closed with conn
}

func newStranger(c *net.TCPConn) *stranger {
	s := &stranger{conn: c, closed: make(chan struct{})}
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		s.peer = a.IP.String()
	}
	return s
}

func (s *stranger) close() {
	s.closeOnce.Do(func() {
		s.conn.Close()
		close(s.closed)
	})
}

// silent reports whether the stream has nothing to read: it sent nothing
// since it was last read (or it ended).
func (s *stranger) silent() bool {
	rc, err := s.conn.SyscallConn()
	if err != nil {
		return true
	}
	n := 0
	rc.Control(func(fd uintptr) {
		var b [1]byte
		n, _, _ = unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
	})
	return n <= 0
}

// strangerPool holds the strangers of a node, oldest first.
type strangerPool struct {
	perPeer, total int

	mu        sync.Mutex
	order     *list.List // of *stranger
	count     map[string]int
	closed    bool
	dropped   uint64 // closed before authenticating
	displaced uint64 // of which to make room
	lastFrom  string
}

func newStrangerPool(perPeer, total int) *strangerPool {
	return &strangerPool{perPeer: perPeer, total: total, order: list.New(), count: make(map[string]int)}
}

// add takes the newcomer s in, displacing strangers beyond the bounds; it
// reports false when the pool is closed (s is then the caller's to close).
func (p *strangerPool) add(s *stranger) bool {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return false
	}
	var out []*stranger
	if p.count[s.peer] >= p.perPeer {
		out = append(out, p.displaceLocked(s.peer))
	}
	if p.order.Len() >= p.total {
		out = append(out, p.displaceLocked(""))
	}
	s.elem = p.order.PushBack(s)
	p.count[s.peer]++
	p.mu.Unlock()
	for _, v := range out {
		v.close()
	}
	return true
}

// displaceLocked takes out the stranger to displace, of peer ("" for any),
// and returns it (the caller closes it).
func (p *strangerPool) displaceLocked(peer string) *stranger {
	var v, mute, oldest *stranger
	for e := p.order.Front(); e != nil && v == nil; e = e.Next() {
		s := e.Value.(*stranger)
		switch {
		case peer != "" && s.peer != peer:
		case !s.speaks && s.silent():
			v = s
		case !s.speaks && mute == nil:
			mute = s
		}
		if oldest == nil && (peer == "" || s.peer == peer) {
			oldest = s
		}
	}
	v = cmp.Or(v, mute, oldest)
	p.removeLocked(v)
	p.dropped++
	p.displaced++
	p.lastFrom = v.peer
	return v
}

func (p *strangerPool) removeLocked(s *stranger) {
	p.order.Remove(s.elem)
	s.elem, s.gone = nil, true
	if p.count[s.peer]--; p.count[s.peer] == 0 {
		delete(p.count, s.peer)
	}
}

// spoke records that s sent the job's label.
func (p *strangerPool) spoke(s *stranger) {
	p.mu.Lock()
	s.speaks = true
	p.mu.Unlock()
}

// authenticated takes s out of the pool, its first message having
// authenticated: false when it was displaced meanwhile (it is closed).
func (p *strangerPool) authenticated(s *stranger) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.gone {
		return false
	}
	p.removeLocked(s)
	return true
}

// drop closes s, which did not authenticate.
func (p *strangerPool) drop(s *stranger) {
	p.mu.Lock()
	if !s.gone {
		p.removeLocked(s)
		if !p.closed {
			p.dropped++
			p.lastFrom = s.peer
		}
	}
	p.mu.Unlock()
	s.close()
}

// closeAll closes every stranger, and those that come later.
func (p *strangerPool) closeAll() {
	p.mu.Lock()
	p.closed = true
	var all []*stranger
	for e := p.order.Front(); e != nil; e = e.Next() {
		all = append(all, e.Value.(*stranger))
	}
	for _, s := range all {
		p.removeLocked(s)
	}
	p.mu.Unlock()
	for _, s := range all {
		s.close()
	}
}

// stats returns what the pool dropped.
func (p *strangerPool) stats() Strangers {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Strangers{Streams: p.dropped, Displaced: p.displaced, From: p.lastFrom}
}

// accept takes the inbound streams in as strangers, and meets each.
func (g *guardedTransport) accept() {
	defer g.loops.Done()
	var delay time.Duration
	for {
		c, err := g.tcp.AcceptTCP()
		if err != nil {
			select {
			case <-g.closing:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors, say: the connections wait in the
			// listener's backlog meanwhile.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			g.logger.Printf("[ERR] goshmem: accepting a stream: %v", err)
			select {
			case <-time.After(delay):
			case <-g.closing:
				return
			}
			continue
		}
		delay = 0
		s := newStranger(c)
		if !g.strangers.add(s) {
			c.Close()
			continue
		}
		go g.meet(s)
	}
}

// errNotJob is why a stranger is dropped that sent something else than
// the job's label, or a message that does not authenticate.
var errNotJob = errors.New("not a message of the job")

// meet reads the first message of the stranger s and, when it
// authenticates, hands the stream to memberlist; s is dropped otherwise.
func (g *guardedTransport) meet(s *stranger) {
	c := s.conn
	start := time.Now()
	msg, reserved, err := g.firstMessage(s, start)
	if err == nil && !g.strangers.authenticated(s) {
		err = errStreamLimit // displaced meanwhile
	}
	if err != nil {
		g.budget.release(s.peer, reserved)
		g.strangers.drop(s)
		g.logDropped()
		return
	}
	if g.active.Load() >= int64(g.maxStreams) {
		g.budget.release(s.peer, reserved)
		c.Close()
		g.refused.Add(1)
		g.logDropped()
		return
	}
	g.active.Add(1)
	g.streamsIn.Msgs.Add(1)
	g.streamBytesIn.Add(uint64(len(msg)))
	c.SetReadDeadline(time.Time{}) // memberlist sets its own
	ac := &authedConn{Conn: c, g: g, peer: s.peer, prefix: msg, reserved: reserved}
	select {
	case g.streams <- ac:
	case <-g.closing:
		ac.Close()
	}
}

// errStreamLimit is why a stream beyond the limits is closed.
var errStreamLimit = errors.New("bootstrap: inbound stream exceeds its limits")

// firstMessage reads the first message of s, label header included, and
// checks that it authenticates; reserved is what it holds of the budget
// (also on error).
func (g *guardedTransport) firstMessage(s *stranger, start time.Time) (msg []byte, reserved int64, err error) {
	c := s.conn
	// The label header: its first byte that differs from the job's ends
	// the stream.
	want := append([]byte{mlHasLabelMsg, byte(len(g.label))}, g.label...)
	head := make([]byte, len(want)+5)
	c.SetReadDeadline(start.Add(strangerTimeout))
	for got := 0; got < len(want); {
		n, rerr := c.Read(head[got:len(want)])
		if !bytes.Equal(head[got:got+n], want[got:got+n]) {
			return nil, 0, errNotJob
		}
		got += n
		if rerr != nil && got < len(want) {
			return nil, 0, rerr
		}
	}
	g.strangers.spoke(s)
	// The message's type and length.
	deadline := start.Add(tcpTimeout)
	c.SetReadDeadline(deadline)
	if _, err := io.ReadFull(c, head[len(want):]); err != nil {
		return nil, 0, err
	}
	typ, size := head[len(want)], int64(binary.BigEndian.Uint32(head[len(want)+1:]))
	if typ != mlEncryptMsg || size > mlMaxMessage || size < 1+mlNonceSize+mlTagSize {
		return nil, 0, errNotJob
	}
	if !g.budget.acquire(s.peer, size, deadline, s.closed) {
		return nil, 0, errStreamLimit
	}
	msg = make([]byte, int64(len(head))+size)
	copy(msg, head)
	if _, err := io.ReadFull(c, msg[len(head):]); err != nil {
		return nil, size, err
	}
	// The authenticated data: the type, the length and the label.
	ad := append(head[len(want):len(head):len(head)], g.label...)
	if !g.authentic(msg[len(head):], ad, make([]byte, size)) {
		return nil, size, errNotJob
	}
	return msg, size, nil
}

// logDropped logs the streams dropped or refused, once per
// refusalLogEvery at most.
func (g *guardedTransport) logDropped() {
	now := time.Now().UnixNano()
	last := g.lastLog.Load()
	if now-last < int64(refusalLogEvery) || !g.lastLog.CompareAndSwap(last, now) {
		return
	}
	s := g.strangersSeen()
	g.logger.Printf("[WARN] goshmem: dropped %d inbound stream(s) and %d packet(s) that did not authenticate with the job key (the last from %s); refused %d authenticated stream(s): %d are read at once at most",
		s.Streams, s.Packets, s.From, g.refused.Load(), g.maxStreams)
}

// authedConn is an inbound stream whose first message authenticated: it
// reads that message again (msg), then the stream.
type authedConn struct {
	net.Conn
	g        *guardedTransport
	peer     string
	prefix   []byte
	reserved int64 // of the budget, released once the prefix was read

	mu     sync.Mutex
	closed bool
}

func (c *authedConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		if len(c.prefix) == 0 {
			c.prefix = nil
			c.releaseLocked()
		}
		c.mu.Unlock()
		return n, nil
	}
	c.mu.Unlock()
	n, err := c.Conn.Read(p)
	c.g.streamBytesIn.Add(uint64(n))
	return n, err
}

func (c *authedConn) releaseLocked() {
	c.g.budget.release(c.peer, c.reserved)
	c.reserved = 0
}

// Close closes the stream and gives back what it holds.
func (c *authedConn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.prefix = nil
	c.releaseLocked()
	c.mu.Unlock()
	c.g.active.Add(-1)
	return c.Conn.Close()
}

// byteBudget hands out bytes of a fixed total, first come first served, to
// reservations of a peer, each peer holding at most half of the total
// while another holds a part.
type byteBudget struct {
	mu      sync.Mutex
	total   int64
	used    int64
	perPeer map[string]int64
	waiters []*budgetWaiter
}

type budgetWaiter struct {
	peer    string
	n       int64
	granted chan struct{}
}

func newByteBudget(total int64) *byteBudget {
	return &byteBudget{total: total, perPeer: make(map[string]int64)}
}

// fitsLocked says whether n more bytes for peer fit: within the total (or
// alone, for a reservation larger than it) and within the peer's half
// (unless nobody else holds anything).
func (b *byteBudget) fitsLocked(peer string, n int64) bool {
	if b.used != 0 && b.used+n > b.total {
		return false
	}
	mine := b.perPeer[peer]
	return mine+n <= b.total/2 || mine == b.used
}

// acquire reserves n bytes for peer, waiting until they fit, deadline
// passes (a zero deadline waits without end) or cancel is closed; it
// reports whether it got them.
func (b *byteBudget) acquire(peer string, n int64, deadline time.Time, cancel <-chan struct{}) bool {
	if n == 0 {
		return true
	}
	w := &budgetWaiter{peer: peer, n: n, granted: make(chan struct{})}
	b.mu.Lock()
	b.waiters = append(b.waiters, w)
	b.grantLocked()
	b.mu.Unlock()

	var timeout <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-w.granted:
		return true
	case <-timeout:
	case <-cancel:
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-w.granted: // granted meanwhile: it is ours
		return true
	default:
	}
	for i, o := range b.waiters {
		if o == w {
			b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
			break
		}
	}
	b.grantLocked() // its place may have held others back
	return false
}

func (b *byteBudget) takeLocked(peer string, n int64) {
	b.used += n
	b.perPeer[peer] += n
}

// release gives back n bytes of peer and grants what then fits.
func (b *byteBudget) release(peer string, n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	if b.perPeer[peer] -= n; b.perPeer[peer] == 0 {
		delete(b.perPeer, peer)
	}
	b.grantLocked()
}

// grantLocked grants the waiters that fit, in order; a waiter held back by
// the total holds back those behind it (so that large reservations are not
// starved), one held back by its peer's share does not.
func (b *byteBudget) grantLocked() {
	for i := 0; i < len(b.waiters); {
		w := b.waiters[i]
		if !b.fitsLocked(w.peer, w.n) {
			if b.used != 0 && b.used+w.n > b.total {
				return
			}
			i++
			continue
		}
		b.takeLocked(w.peer, w.n)
		close(w.granted)
		b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
	}
}
