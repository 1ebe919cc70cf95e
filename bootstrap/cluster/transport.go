package cluster

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"errors"
	"fmt"
	"log"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/goshmem/goshmem/bootstrap/internal/wire"
)

// guardedTransport is the transport of goshmem's memberlist nodes: TCP
// streams and UDP packets on one port of an address, as memberlist's
// NetTransport, but what memberlist gets of them is authenticated first.
//
// memberlist authenticates a stream only once it read and decrypted a
// whole message, and holds a goroutine, a descriptor and a buffer for it
// meanwhile: anyone who can connect (another user of the host, on the
// loopback) could fill a node's slots with idle connections and keep the
// job's own messages out (1,000 idle connections held to the seed and an
// agent stretched a job's start from 9.1 to 17.5 s, and failed it when held
// for 40 s). So an inbound stream is a stranger (strangers.go) until its
// first message, read here, decrypts with the job key: strangers are
// bounded per remote address and in all, the newest displacing the oldest
// silent one, and must name the job within strangerTimeout; only then does
// memberlist read the stream (the message again, from memory). Inbound
// packets are handed to memberlist only when they decrypt with the job key,
// garbage costing no allocation. What was dropped is counted (Strangers).
//
// Inbound streams that authenticated are bounded too (maxStreams at once,
// others refused and counted), though only members have the key.
type guardedTransport struct {
	bind   net.IP
	tcp    *net.TCPListener
	udp    *net.UDPConn
	label  string      // the job's label, in the clear before each message
	ad     []byte      // the label: a packet's authenticated data
	aead   cipher.AEAD // the job key's: what authenticates a message
	logger *log.Logger

	packets    chan *memberlist.Packet
	streams    chan net.Conn // what memberlist reads
	maxStreams int
	active     atomic.Int64  // authenticated streams being read
	refused    atomic.Uint64 // authenticated streams refused, in all
	strangers  *strangerPool
	budget     *byteBudget

	// Traffic counters (Agent.Stats).
	packetsOut, packetsIn         wire.Traffic
	streamsOut, streamsIn         wire.Traffic // counts are streams
	streamBytesOut, streamBytesIn atomic.Uint64
	// What was dropped before it authenticated (Strangers).
	droppedPackets atomic.Uint64
	lastMu         sync.Mutex
	lastPacketFrom netip.Addr   // of the last packet dropped
	lastLog        atomic.Int64 // when drops were last logged (logDropped)
	// refusedDials holds the addresses whose last dial was refused.
	refusedDials sync.Map
	// heard holds when an authenticated packet last came from each
	// address (heardFrom).
	heardMu sync.Mutex
	heard   map[netip.AddrPort]time.Time

	closing  chan struct{} // closed at Shutdown
	loops    sync.WaitGroup
	shutOnce sync.Once
}

// Inbound packets are read into a buffer of the largest UDP payload, and
// the socket gets a receive buffer of 2 MiB (or what the system allows)
// for bursts; as memberlist's NetTransport does.
const (
	udpPacketBufSize = 65536
	udpRecvBufSize   = 2 << 20
)

// maxStreams is how many authenticated inbound streams a node of a
// cluster of nodes members reads at once: every member may send it one (the
// seed gets every agent's report at once), and then some. It also bounds
// the strangers of one remote address (strangers.go).
func maxStreams(nodes int) int { return 2*max(nodes, 1) + 64 }

// refusalLogEvery is how often refused or dropped streams are logged at
// most.
const refusalLogEvery = 10 * time.Second

// newGuardedTransport listens on a random port of bindAddr, for a node of a
// cluster of about nodes members whose messages carry label and are
// encrypted with key.
func newGuardedTransport(bindAddr string, nodes int, label string, key []byte, logger *log.Logger) (*guardedTransport, error) {
	ip := net.ParseIP(bindAddr)
	if ip == nil {
		return nil, fmt.Errorf("bootstrap: bind address %q is not an IP address", bindAddr)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: the job key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: the job key: %w", err)
	}
	g := &guardedTransport{
		bind:       ip,
		label:      label,
		ad:         []byte(label),
		aead:       aead,
		logger:     logger,
		packets:    make(chan *memberlist.Packet),
		streams:    make(chan net.Conn),
		maxStreams: maxStreams(nodes),
		strangers:  newStrangerPool(maxStreams(nodes), 2*maxStreams(nodes), label, newSockDiag()),
		heard:      make(map[netip.AddrPort]time.Time),
		budget:     newByteBudget(budgetBytes),
		closing:    make(chan struct{}),
	}
	// Binding TCP and UDP to one random port races with other processes:
	// try again with another.
	for range 10 {
		if err = g.listen(); err == nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("bootstrap: listening on %s: %w", bindAddr, err)
	}
	g.loops.Add(2)
	go g.accept()
	go g.readPackets()
	return g, nil
}

// listen opens the TCP listener on a random port and the UDP socket on the
// same.
func (g *guardedTransport) listen() error {
	// No keep-alive probes on inbound streams (their reads have
	// deadlines): setting them up was a tenth of what a stranger cost.
	lc := net.ListenConfig{KeepAlive: -1}
	ln, err := lc.Listen(context.Background(), "tcp", net.JoinHostPort(g.bind.String(), "0"))
	if err != nil {
		return err
	}
	tcp := ln.(*net.TCPListener)
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: g.bind, Port: tcp.Addr().(*net.TCPAddr).Port})
	if err != nil {
		tcp.Close()
		return err
	}
	for size := udpRecvBufSize; size > 0; size /= 2 {
		if udp.SetReadBuffer(size) == nil {
			break
		}
	}
	g.tcp, g.udp = tcp, udp
	return nil
}

// GetAutoBindPort returns the port the transport listens on.
func (g *guardedTransport) GetAutoBindPort() int { return g.tcp.Addr().(*net.TCPAddr).Port }

// FinalAdvertiseAddr returns the address to advertise: ip and port when ip
// is given, else the bound address (for an unspecified one, the host's
// first private address, as memberlist's NetTransport would advertise).
func (g *guardedTransport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	if ip != "" {
		a := net.ParseIP(ip)
		if a == nil {
			return nil, 0, fmt.Errorf("bootstrap: advertise address %q is not an IP address", ip)
		}
		if a4 := a.To4(); a4 != nil {
			a = a4
		}
		return a, port, nil
	}
	if !g.bind.IsUnspecified() {
		return g.bind, g.GetAutoBindPort(), nil
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, 0, fmt.Errorf("bootstrap: bound to %s: the host's addresses: %w", g.bind, err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.IsPrivate() {
			return n.IP, g.GetAutoBindPort(), nil
		}
	}
	return nil, 0, fmt.Errorf("bootstrap: bound to %s, and the host has no private address to advertise", g.bind)
}

// WriteTo sends a packet, counting it.
func (g *guardedTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	return g.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress sends a packet, counting it.
func (g *guardedTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	ap, err := netip.ParseAddrPort(a.Addr)
	if err != nil {
		ua, rerr := net.ResolveUDPAddr("udp", a.Addr)
		if rerr != nil {
			return time.Time{}, rerr
		}
		ap = ua.AddrPort()
	}
	g.packetsOut.Add(len(b))
	_, err = g.udp.WriteToUDPAddrPort(b, ap)
	return time.Now(), err
}

// PacketCh returns the inbound packets that authenticated.
func (g *guardedTransport) PacketCh() <-chan *memberlist.Packet { return g.packets }

// DialTimeout opens an outbound stream, counted.
func (g *guardedTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return g.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout opens an outbound stream, counted.
func (g *guardedTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	select {
	case <-g.closing:
		return nil, errors.New("bootstrap: the node is shut down")
	default:
	}
	c, err := net.DialTimeout("tcp", a.Addr, timeout)
	if errors.Is(err, syscall.ECONNREFUSED) {
		g.refusedDials.Store(a.Addr, true)
	} else {
		g.refusedDials.Delete(a.Addr)
	}
	if err != nil {
		return nil, err
	}
	g.streamsOut.Msgs.Add(1)
	return &countedConn{Conn: c, written: &g.streamBytesOut}, nil
}

// dialRefused reports whether the last stream opened to addr was refused:
// nothing listens on its port (memberlist says why a message failed in
// words only).
func (g *guardedTransport) dialRefused(addr string) bool {
	_, ok := g.refusedDials.Load(addr)
	return ok
}

// heardFrom returns when an authenticated packet last came from addr
// (host:port), the zero time if none did.
func (g *guardedTransport) heardFrom(addr string) time.Time {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return time.Time{}
	}
	g.heardMu.Lock()
	defer g.heardMu.Unlock()
	return g.heard[netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())]
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

// StreamCh returns the inbound streams that authenticated.
func (g *guardedTransport) StreamCh() <-chan net.Conn { return g.streams }

// Shutdown closes the listeners and the strangers' streams, and waits for
// the loops that read them to end; streams memberlist got are its own.
func (g *guardedTransport) Shutdown() error {
	g.shutOnce.Do(func() {
		close(g.closing)
		g.tcp.Close()
		g.udp.Close()
		g.loops.Wait()
		g.strangers.closeAll()
		g.strangers.diag.close()
	})
	return nil
}

// Refused returns how many authenticated inbound streams the node refused.
func (g *guardedTransport) Refused() uint64 { return g.refused.Load() }

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

// readPackets hands memberlist the inbound packets that carry the job's
// label and decrypt with its key, each in a buffer of its own, and drops
// the others (counted).
func (g *guardedTransport) readPackets() {
	defer g.loops.Done()
	buf := make([]byte, udpPacketBufSize)
	scratch := make([]byte, udpPacketBufSize)
	for {
		n, from, err := g.udp.ReadFromUDPAddrPort(buf)
		ts := time.Now()
		if err != nil {
			if g.shutDown(err) {
				return
			}
			g.logger.Printf("[ERR] goshmem: reading a UDP packet: %v", err)
			continue
		}
		if !g.packetAuthentic(buf[:n], scratch) {
			g.droppedPackets.Add(1)
			g.lastMu.Lock()
			g.lastPacketFrom = from.Addr()
			g.lastMu.Unlock()
			continue
		}
		g.packetsIn.Add(n)
		g.heardMu.Lock()
		g.heard[netip.AddrPortFrom(from.Addr().Unmap(), from.Port())] = ts
		g.heardMu.Unlock()
		p := &memberlist.Packet{Buf: bytes.Clone(buf[:n]), From: net.UDPAddrFromAddrPort(from), Timestamp: ts}
		select {
		case g.packets <- p:
		case <-g.closing:
			return
		}
	}
}

// shutDown reports whether err, of a listener, says that the transport
// is shut down.
func (g *guardedTransport) shutDown(err error) bool {
	select {
	case <-g.closing:
		return true
	default:
	}
	return errors.Is(err, net.ErrClosed)
}

// packetAuthentic reports whether b is a packet of the job: its label
// header, then a payload that decrypts with the key (into scratch), the
// label being its authenticated data (memberlist's format).
func (g *guardedTransport) packetAuthentic(b, scratch []byte) bool {
	want := g.strangers.want
	if !bytes.HasPrefix(b, want) {
		return false
	}
	return g.authentic(b[len(want):], g.ad, scratch)
}

// memberlist's encrypted payload: a version byte (0 or 1: AES-GCM), the
// nonce, the ciphertext and its tag (security.go of memberlist).
const (
	mlMaxEncryptVersion = 1
	mlNonceSize         = 12
	mlTagSize           = 16
)

// authentic reports whether payload, an encrypted payload of memberlist,
// decrypts with the key and authenticates ad; the plaintext goes to
// scratch, which must hold it.
func (g *guardedTransport) authentic(payload, ad, scratch []byte) bool {
	if len(payload) < 1+mlNonceSize+mlTagSize || payload[0] > mlMaxEncryptVersion {
		return false
	}
	nonce, ct := payload[1:1+mlNonceSize], payload[1+mlNonceSize:]
	_, err := g.aead.Open(scratch[:0], nonce, ct, ad)
	return err == nil
}

// Strangers counts what a node dropped of the traffic that did not
// authenticate with the job key: someone who is not a member of the job
// connected to its port, or sent it packets.
type Strangers struct {
	// Streams counts the inbound streams closed before their first
	// message authenticated: idle, slow, not the job's, or failing to
	// decrypt. Displaced counts those of them closed to make room for
	// newer ones.
	Streams, Displaced uint64
	// Packets counts the inbound packets dropped: not the job's, or failing
	// to decrypt.
	Packets uint64
	// From is the remote address that the last stream dropped came from
	// (the last packet's when no stream was).
	From string
}

// Any reports whether anything was dropped.
func (s Strangers) Any() bool { return s.Streams+s.Packets > 0 }

// Plus returns the counts of s and o together; From is s's, or o's where
// s has none.
func (s Strangers) Plus(o Strangers) Strangers {
	s.Streams += o.Streams
	s.Displaced += o.Displaced
	s.Packets += o.Packets
	if s.From == "" {
		s.From = o.From
	}
	return s
}

// String says what was dropped, as "1000 connections (200 displaced) and 5
// packets that did not authenticate with the job key, the last from
// 127.0.0.1".
func (s Strangers) String() string {
	var what string
	switch {
	case s.Streams > 0 && s.Packets > 0:
		what = fmt.Sprintf("%d connection(s) (%d displaced) and %d packet(s)", s.Streams, s.Displaced, s.Packets)
	case s.Streams > 0:
		what = fmt.Sprintf("%d connection(s) (%d displaced)", s.Streams, s.Displaced)
	default:
		what = strconv.FormatUint(s.Packets, 10) + " packet(s)"
	}
	return what + " that did not authenticate with the job key, the last from " + s.From
}

// strangersSeen returns what the transport dropped.
func (g *guardedTransport) strangersSeen() Strangers {
	s := g.strangers.stats()
	s.Packets = g.droppedPackets.Load()
	if s.From == "" && s.Packets > 0 {
		g.lastMu.Lock()
		s.From = g.lastPacketFrom.String()
		g.lastMu.Unlock()
	}
	return s
}

// createList creates the memberlist node that c describes, for a cluster
// of about nodes members, over a guardedTransport on c.BindAddr (a random
// port).
func createList(c *memberlist.Config, nodes int) (*memberlist.Memberlist, *guardedTransport, error) {
	logger := c.Logger
	if logger == nil {
		logger = wire.DiscardLogger()
	}
	t, err := newGuardedTransport(c.BindAddr, nodes, c.Label, c.SecretKey, logger)
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
