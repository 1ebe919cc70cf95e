package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/goshmem/goshmem/bootstrap/internal/wire"
)

// Inbound streams of memberlist are authenticated only once memberlist has
// read and decrypted a whole message: until then, anyone who knows the job
// id (the label, in clear on the wire) can make a node buffer what a stream
// announces, up to memberlist's limit of 20 MiB per stream, with as many
// streams as it likes. guardedTransport, memberlist's NetTransport with
// limits on its inbound streams, bounds that:
//
//   - at most maxStreams streams are read at once; others are refused
//     (closed at once) and counted, and a refusal costs no log line of its
//     own;
//   - a stream may send its headers (label and message length) and nothing
//     more until its whole message has a share of the node's budget of
//     bytes in flight (budgetBytes); it waits for it (FIFO, while its
//     deadline lasts), so that what all unauthenticated streams cost is
//     bounded, and no stream waits with part of a reservation (which could
//     deadlock honest streams that wait for each other);
//   - one remote address may hold at most half of the budget while
//     another holds a part: a flood from one address leaves room for the
//     others.
//
// A message larger than the budget is admitted alone.

const (
	// budgetBytes bounds the bytes in flight of the inbound streams of a
	// node: the largest message memberlist reads (20 MiB, more than the
	// largest bootstrap message: an Allgather table of MaxAllgather bytes
	// and its framing) and room for the small ones.
	budgetBytes = 24 << 20
	// trailerBytes is what a stream may send after its message.
	trailerBytes = 4 << 10
	// refusalLogEvery is how often refused streams are logged at most.
	refusalLogEvery = 10 * time.Second
)

// memberlist's message types that matter here (net.go of memberlist).
const (
	mlEncryptMsg  = 10
	mlHasLabelMsg = 244
)

// maxStreams is how many inbound streams a node of a cluster of nodes
// members reads at once: every member may send it one (the seed gets every
// PE's Allgather contribution at once), and then some.
func maxStreams(nodes int) int { return 2*max(nodes, 1) + 64 }

// guardedTransport is memberlist's NetTransport with limits on its inbound
// streams (see above).
type guardedTransport struct {
	*memberlist.NetTransport
	streams    chan net.Conn // what memberlist reads
	maxStreams int
	budget     *byteBudget
	logger     *log.Logger

	active  atomic.Int64  // inbound streams being read
	refused atomic.Uint64 // inbound streams refused, in all

	// Traffic counters (Agent.Stats).
	packets                       chan *memberlist.Packet
	packetsOut, packetsIn         wire.Traffic
	streamsOut, streamsIn         wire.Traffic // counts are streams
	streamBytesOut, streamBytesIn atomic.Uint64

	closing  chan struct{} // closed at Shutdown: refuse what comes
	done     chan struct{} // closed once the NetTransport is shut down
	shutOnce sync.Once
	shutErr  error
}

// newGuardedTransport listens on a random port of bindAddr for a node of a
// cluster of about nodes members.
func newGuardedTransport(bindAddr string, nodes int, logger *log.Logger) (*guardedTransport, error) {
	var nt *memberlist.NetTransport
	var err error
	// Binding TCP and UDP to one random port races with other processes,
	// as memberlist knows: it tries again (so does this).
	for range 10 {
		nt, err = memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{bindAddr}, Logger: logger})
		if err == nil || !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("bootstrap: listening on %s: %w", bindAddr, err)
	}
	g := &guardedTransport{
		NetTransport: nt,
		streams:      make(chan net.Conn),
		maxStreams:   maxStreams(nodes),
		budget:       newByteBudget(budgetBytes),
		logger:       logger,
		closing:      make(chan struct{}),
		done:         make(chan struct{}),
		packets:      make(chan *memberlist.Packet),
	}
	go g.forward()
	go g.forwardPackets()
	return g, nil
}

// PacketCh returns the inbound packets, counted.
func (g *guardedTransport) PacketCh() <-chan *memberlist.Packet { return g.packets }

// forwardPackets passes the NetTransport's inbound packets on to
// memberlist, counting them.
func (g *guardedTransport) forwardPackets() {
	for {
		select {
		case p := <-g.NetTransport.PacketCh():
			g.packetsIn.Add(len(p.Buf))
			select {
			case g.packets <- p:
			case <-g.done:
				return
			}
		case <-g.done:
			return
		}
	}
}

// WriteToAddress sends a packet, counting it.
func (g *guardedTransport) WriteToAddress(b []byte, addr memberlist.Address) (time.Time, error) {
	g.packetsOut.Add(len(b))
	return g.NetTransport.WriteToAddress(b, addr)
}

// WriteTo sends a packet, counting it.
func (g *guardedTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	g.packetsOut.Add(len(b))
	return g.NetTransport.WriteTo(b, addr)
}

// DialAddressTimeout opens an outbound stream, counted.
func (g *guardedTransport) DialAddressTimeout(addr memberlist.Address, timeout time.Duration) (net.Conn, error) {
	c, err := g.NetTransport.DialAddressTimeout(addr, timeout)
	return g.countOut(c, err)
}

// DialTimeout opens an outbound stream, counted.
func (g *guardedTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	c, err := g.NetTransport.DialTimeout(addr, timeout)
	return g.countOut(c, err)
}

func (g *guardedTransport) countOut(c net.Conn, err error) (net.Conn, error) {
	if err != nil {
		return nil, err
	}
	g.streamsOut.Msgs.Add(1)
	return &countedConn{Conn: c, written: &g.streamBytesOut}, nil
}

// countedConn counts the bytes written to an outbound stream.
type countedConn struct {
	net.Conn
	written *atomic.Uint64
}

func (c *countedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.written.Add(uint64(n))
	return n, err
}

// addStats adds the transport's counters to s.
func (g *guardedTransport) addStats(s *Stats) {
	s.PacketsSent += g.packetsOut.Msgs.Load()
	s.PacketBytesSent += g.packetsOut.Bytes.Load()
	s.PacketsReceived += g.packetsIn.Msgs.Load()
	s.PacketBytesReceived += g.packetsIn.Bytes.Load()
	s.StreamsOpened += g.streamsOut.Msgs.Load()
	s.StreamBytesSent += g.streamBytesOut.Load()
	s.StreamsAccepted += g.streamsIn.Msgs.Load()
	s.StreamBytesReceived += g.streamBytesIn.Load()
}

// StreamCh returns the inbound streams that are within the limits.
func (g *guardedTransport) StreamCh() <-chan net.Conn { return g.streams }

// Shutdown shuts the NetTransport down; streams still arriving are closed.
func (g *guardedTransport) Shutdown() error {
	g.shutOnce.Do(func() {
		close(g.closing)
		g.shutErr = g.NetTransport.Shutdown()
		close(g.done)
	})
	return g.shutErr
}

// Refused returns how many inbound streams the node refused.
func (g *guardedTransport) Refused() uint64 { return g.refused.Load() }

// forward passes the NetTransport's inbound streams on to memberlist,
// wrapped in their limits, or refuses them.
func (g *guardedTransport) forward() {
	var lastLog time.Time
	var unlogged uint64
	for {
		var c net.Conn
		select {
		case c = <-g.NetTransport.StreamCh():
		case <-g.done:
			return
		}
		select {
		case <-g.closing:
			c.Close()
			continue
		default:
		}
		if g.active.Load() >= int64(g.maxStreams) {
			c.Close()
			g.refused.Add(1)
			unlogged++
			if now := time.Now(); now.Sub(lastLog) >= refusalLogEvery {
				g.logger.Printf("[WARN] goshmem: refused %d inbound stream(s) (%d in all): %d are read at once at most",
					unlogged, g.refused.Load(), g.maxStreams)
				lastLog, unlogged = now, 0
			}
			continue
		}
		g.active.Add(1)
		g.streamsIn.Msgs.Add(1)
		gc := &guardedConn{Conn: c, g: g}
		if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
			gc.peer = a.IP.String()
		}
		select {
		case g.streams <- gc:
		case <-g.closing:
			gc.Close()
		}
	}
}

// errStreamLimit is what a read of a stream beyond its limits returns.
var errStreamLimit = errors.New("bootstrap: inbound stream exceeds its limits")

// guardedConn is an inbound stream within its limits: it parses the headers
// it carries (label, message type and length) and holds back the message
// until it has its share of the budget.
type guardedConn struct {
	net.Conn
	g    *guardedTransport
	peer string // remote address, the unit of the per-peer share

	mu       sync.Mutex
	deadline time.Time // of reads, as memberlist set it
	head     []byte    // the headers read so far, until parsed
	allowed  int64     // bytes the stream may still send
	parsed   bool      // the headers are read: allowed covers the message
	reserved int64     // of the budget, released at Close
	closed   bool
}

// SetDeadline records the read deadline (for the budget's wait) and sets it.
func (c *guardedConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

// SetReadDeadline records the read deadline and sets it.
func (c *guardedConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

// Read reads the headers one byte at a time until they are parsed, then at
// most what the reservation covers.
func (c *guardedConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.mu.Lock()
	parsed, allowed := c.parsed, c.allowed
	c.mu.Unlock()
	if !parsed {
		n, err := c.Conn.Read(p[:1])
		c.g.streamBytesIn.Add(uint64(n))
		if n == 1 {
			if perr := c.parse(p[0]); perr != nil {
				return n, perr
			}
		}
		return n, err
	}
	if allowed <= 0 {
		return 0, errStreamLimit
	}
	if int64(len(p)) > allowed {
		p = p[:allowed]
	}
	n, err := c.Conn.Read(p)
	c.g.streamBytesIn.Add(uint64(n))
	c.mu.Lock()
	c.allowed -= int64(n)
	c.mu.Unlock()
	return n, err
}

// parse takes the next header byte; once the headers are complete it
// reserves the message's bytes, waiting for them.
func (c *guardedConn) parse(b byte) error {
	c.mu.Lock()
	c.head = append(c.head, b)
	h := c.head
	c.mu.Unlock()
	off := 0
	if h[0] == mlHasLabelMsg {
		if len(h) < 2 || len(h) < 2+int(h[1]) {
			return nil // the label is not read yet
		}
		off = 2 + int(h[1])
	}
	if len(h) <= off {
		return nil
	}
	if h[off] != mlEncryptMsg {
		// memberlist refuses a message that is not encrypted after its
		// type, having read nothing more.
		return c.admit(0)
	}
	if len(h) < off+5 {
		return nil
	}
	return c.admit(int64(binary.BigEndian.Uint32(h[off+1 : off+5])))
}

// admit reserves n bytes for the message and lets the stream send them.
func (c *guardedConn) admit(n int64) error {
	c.mu.Lock()
	deadline := c.deadline
	c.mu.Unlock()
	if !c.g.budget.acquire(c.peer, n, deadline) {
		return fmt.Errorf("%w: no room for a message of %d bytes before the deadline", errStreamLimit, n)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.parsed, c.allowed, c.reserved, c.head = true, n+trailerBytes, n, nil
	if c.closed { // closed while waiting
		c.g.budget.release(c.peer, n)
		c.reserved = 0
	}
	return nil
}

// Close closes the stream and gives its reservation back.
func (c *guardedConn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	reserved := c.reserved
	c.reserved = 0
	c.mu.Unlock()
	c.g.budget.release(c.peer, reserved)
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

// acquire reserves n bytes for peer, waiting until they fit or deadline
// passes (a zero deadline waits without end); it reports whether it got
// them.
func (b *byteBudget) acquire(peer string, n int64, deadline time.Time) bool {
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

// createList creates the memberlist node that c describes, for a cluster
// of about nodes members, over a guardedTransport on c.BindAddr (a random
// port).
func createList(c *memberlist.Config, nodes int) (*memberlist.Memberlist, *guardedTransport, error) {
	logger := c.Logger
	if logger == nil {
		logger = wire.DiscardLogger()
	}
	t, err := newGuardedTransport(c.BindAddr, nodes, logger)
	if err != nil {
		return nil, nil, err
	}
	port := t.GetAutoBindPort()
	c.Transport, c.BindPort, c.AdvertisePort = t, port, port
	list, err := memberlist.Create(c)
	if err != nil {
		t.Shutdown()
		return nil, nil, err
	}
	return list, t, nil
}
