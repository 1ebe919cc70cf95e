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
// with the job key (see guardedTransport). A member's stream sends the
// job's label (in clear: "goshmem/JOBID") as it connects, and its message
// right after. Strangers are bounded:
//
//   - a stream whose first bytes, already there when it is accepted, are
//     not the label's is closed at once, and so is one at its first byte
//     that is not the label's;
//   - at most perPeer strangers of one remote address and total in all; a
//     newcomer beyond either displaces (closes) the oldest stranger of
//     another user of this host (owner.go), and never one of this user's
//     if it is another user's itself (it is closed then); else the oldest
//     that has nothing of the label to read (it is idle, or sent something
//     else, or ended), else the oldest that did not send the whole label
//     yet, else the oldest: a member's stream leaves the strangers before
//     idle or garbage ones, however many, displace it, and a member on
//     this host is never displaced by another user's streams, even before
//     it sent its label (its process may not run for a while);
//   - a stranger must send the label within strangerTimeout, then its
//     whole message within tcpTimeout of its connection (memberlist's
//     limit on a stream's message);
//   - a stranger may send its message only once the node's budget of
//     bytes in flight (budgetBytes) holds all of it: it waits for it (FIFO,
//     while its deadline lasts), so that what all strangers cost is
//     bounded, and no stream waits with part of a reservation (which could
//     deadlock members' streams that wait for each other); one remote
//     address may hold at most half of the budget while another holds a
//     part. A message larger than the budget is admitted alone.
//
// A stream that ends without sending a byte of a message (nothing, or the
// label alone) is not counted: memberlist abandons its own that way (a
// probe whose deadline passed as it connected).

const (
	// strangerTimeout bounds the time an inbound stream takes to send the
	// job's label: a member sends it as soon as it connected, unless its
	// process is not scheduled (2.5 s were seen on a busy machine).
	strangerTimeout = 5 * time.Second
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
	elem *list.Element
	got  int      // bytes of the label header read
	gone bool     // out of the pool: authenticated, or closed
	who  ownerWho // whose it is, once the pool asked (owner.go)

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

// What a stranger sent, as far as the label goes (see classify).
const (
	sentNothing = iota // nothing to read yet
	sentForeign        // something else than the rest of the label
	sentEnd            // it ended, having sent nothing more
	sentLabel          // what there is to read is the rest of the label
	sentAll            // the whole label was read
)

// classify says what s sent of want, the label header, beyond what was
// read of it, looking at what waits to be read without reading it.
func (s *stranger) classify(want []byte) int {
	if s.got == len(want) {
		return sentAll
	}
	rc, err := s.conn.SyscallConn()
	if err != nil {
		return sentEnd
	}
	var buf [2 + 255]byte
	n, rerr := -1, error(nil)
	rc.Control(func(fd uintptr) {
		n, _, rerr = unix.Recvfrom(int(fd), buf[:len(want)-s.got], unix.MSG_PEEK|unix.MSG_DONTWAIT)
	})
	switch {
	case n > 0 && bytes.Equal(buf[:n], want[s.got:s.got+n]):
		return sentLabel
	case n > 0:
		return sentForeign
	case n == 0 && rerr == nil:
		return sentEnd
	case errors.Is(rerr, unix.EAGAIN):
		return sentNothing
	}
	return sentEnd
}

// strangerPool holds the strangers of a node, oldest first.
type strangerPool struct {
	perPeer, total int
	want           []byte    // the label header
	diag           *sockDiag // nil: every stranger is ownerRemote

	mu        sync.Mutex
	order     *list.List // of *stranger
	count     map[string]int
	closed    bool
	dropped   uint64 // closed before authenticating
	displaced uint64 // of which to make room
	lastFrom  string
}

func newStrangerPool(perPeer, total int, label string, diag *sockDiag) *strangerPool {
	return &strangerPool{perPeer: perPeer, total: total, want: labelHeader(label), diag: diag, order: list.New(), count: make(map[string]int)}
}

// whoLocked says whose s is, asking the kernel the first time.
func (p *strangerPool) whoLocked(s *stranger) ownerWho {
	if s.who == ownerUnknown {
		s.who = ownerRemote
		if p.diag != nil {
			s.who = p.diag.who(s.conn)
		}
	}
	return s.who
}

// labelHeader returns the header of memberlist's streams and packets that
// carry label.
func labelHeader(label string) []byte {
	return append([]byte{mlHasLabelMsg, byte(len(label))}, label...)
}

// add takes the newcomer s in, displacing strangers beyond the bounds; it
// reports false when s is not taken: the pool is closed, or what s sent
// already is not the label (s is then closed).
func (p *strangerPool) add(s *stranger) bool {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		s.close()
		return false
	}
	switch s.classify(p.want) {
	case sentForeign:
		p.dropped++
		p.lastFrom = s.peer
		fallthrough
	case sentEnd:
		p.mu.Unlock()
		s.close()
		return false
	}
	var out []*stranger
	for _, peer := range []string{s.peer, ""} {
		if peer != "" && p.count[peer] < p.perPeer || peer == "" && p.order.Len() < p.total {
			continue
		}
		v := p.displaceLocked(peer, s)
		out = append(out, v)
		if v == s {
			break
		}
	}
	taken := len(out) == 0 || out[len(out)-1] != s
	if taken {
		s.elem = p.order.PushBack(s)
		p.count[s.peer]++
	}
	p.mu.Unlock()
	for _, v := range out {
		v.close()
	}
	return taken
}

// displaceLocked takes out the stranger to displace to make room for the
// newcomer s, of peer ("" for any), and returns it (the caller closes it):
// the oldest of another user of this host's; s itself when it is one
// (another user's stream never displaces one of this user's); else the
// oldest with nothing of the label to read, then the oldest whose label is
// not all read, then the oldest.
func (p *strangerPool) displaceLocked(peer string, s *stranger) *stranger {
	var foreign, idle, partial, oldest *stranger
	for e := p.order.Front(); e != nil && foreign == nil; e = e.Next() {
		o := e.Value.(*stranger)
		if peer != "" && o.peer != peer {
			continue
		}
		if p.whoLocked(o) == ownerOther {
			foreign = o
			break
		}
		if idle == nil {
			switch o.classify(p.want) {
			case sentNothing, sentForeign, sentEnd:
				idle = o
			case sentLabel:
				partial = cmp.Or(partial, o)
			}
		}
		oldest = cmp.Or(oldest, o)
	}
	var v *stranger
	switch {
	case foreign != nil:
		v = foreign
	case p.whoLocked(s) == ownerOther:
		v = s
	default:
		v = cmp.Or(idle, partial, oldest)
	}
	if v != s {
		p.removeLocked(v)
	}
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

// read records that got bytes of the label header of s were read.
func (p *strangerPool) read(s *stranger, got int) {
	p.mu.Lock()
	s.got = got
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

// drop closes s, which did not authenticate; it counts unless it ended
// without sending anything (abandoned).
func (p *strangerPool) drop(s *stranger, abandoned bool) {
	p.mu.Lock()
	if !s.gone {
		p.removeLocked(s)
		if !p.closed && !abandoned {
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
			if g.shutDown(err) {
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
		if s := newStranger(c); g.strangers.add(s) {
			go g.meet(s)
		}
	}
}

// errNotJob is why a stranger is dropped that sent something else than
// the job's label, or a message that does not authenticate; errAbandoned
// why one that ended without sending anything is.
var (
	errNotJob    = errors.New("not a message of the job")
	errAbandoned = errors.New("ended without a message")
)

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
		g.strangers.drop(s, err == errAbandoned)
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
	want := g.strangers.want
	head := make([]byte, len(want)+5)
	c.SetReadDeadline(start.Add(strangerTimeout))
	for got := 0; got < len(want); {
		n, rerr := c.Read(head[got:len(want)])
		if !bytes.Equal(head[got:got+n], want[got:got+n]) {
			return nil, 0, errNotJob
		}
		got += n
		g.strangers.read(s, got)
		switch {
		case got == len(want):
		case errors.Is(rerr, io.EOF) && got == 0:
			return nil, 0, errAbandoned
		case rerr != nil:
			return nil, 0, rerr
		}
	}
	// The message's type and length.
	deadline := start.Add(tcpTimeout)
	c.SetReadDeadline(deadline)
	if _, err := io.ReadFull(c, head[len(want):]); err != nil {
		if err == io.EOF {
			err = errAbandoned // memberlist's, whose deadline passed as it connected
		}
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
