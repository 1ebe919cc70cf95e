// Package flood holds hostile connections open against a server under
// test: idle ones, ones that send garbage, that trickle bytes or that close
// their sending side, many at once, from loopback addresses only. Tests use
// it to check that a server that accepts connections from anyone keeps
// serving its real clients meanwhile.
//
//	f, err := flood.Start(addr, flood.Spec{Kind: flood.Idle, N: 1000})
//	...
//	defer f.Stop()
package flood

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Kind is what a hostile connection does once connected.
type Kind int

const (
	// Idle sends nothing.
	Idle Kind = iota
	// Garbage sends 64 random bytes, then nothing.
	Garbage
	// Slow sends random bytes one at a time, one every SlowEvery.
	Slow
	// HalfClosed closes its sending side at once and keeps reading.
	HalfClosed
)

func (k Kind) String() string {
	switch k {
	case Idle:
		return "idle"
	case Garbage:
		return "garbage"
	case Slow:
		return "slow"
	case HalfClosed:
		return "half-closed"
	}
	return fmt.Sprintf("kind %d", int(k))
}

// SlowEvery is the time between the bytes of a Slow connection.
const SlowEvery = 200 * time.Millisecond

// MaxConns bounds the connections of one flood.
const MaxConns = 10000

// Spec is a batch of connections of one kind.
type Spec struct {
	Kind Kind
	// N is the number of connections.
	N int
	// From are the loopback addresses the connections come from, in
	// turn; none: 127.0.0.1 (::1 for an IPv6 target).
	From []netip.Addr
}

// Stats counts a flood's connections.
type Stats struct {
	// Opened is the number of connections made.
	Opened int
	// Failed is the number that could not be made.
	Failed int
	// ClosedByPeer is the number of those made that the server closed
	// (or reset) while the flood held them.
	ClosedByPeer int
}

// Flood is a set of hostile connections held open.
type Flood struct {
	conns  []net.Conn
	failed int
	closed atomic.Int64
	stop   chan struct{}
	wg     sync.WaitGroup
	final  *Stats // the counts at Stop
}

// Start connects every spec's connections to target, a loopback address,
// and holds them until Stop; it returns once each connection is made (or
// failed: a server may refuse some, and the flood then holds fewer). It
// fails for a target or source that is not loopback, more than MaxConns
// connections, or fewer file descriptors than they need (see
// RaiseFDLimit).
func Start(target netip.AddrPort, specs ...Spec) (*Flood, error) {
	if !target.Addr().IsLoopback() {
		return nil, fmt.Errorf("flood: target %v is not a loopback address", target)
	}
	n := 0
	for _, s := range specs {
		for _, a := range s.From {
			if !a.IsLoopback() {
				return nil, fmt.Errorf("flood: source %v is not a loopback address", a)
			}
		}
		n += s.N
	}
	if n > MaxConns {
		return nil, fmt.Errorf("flood: %d connections, at most %d", n, MaxConns)
	}
	f := &Flood{stop: make(chan struct{})}
	for _, s := range specs {
		from := s.From
		if len(from) == 0 {
			from = []netip.Addr{netip.MustParseAddr("127.0.0.1")}
			if target.Addr().Is6() && !target.Addr().Is4In6() {
				from = []netip.Addr{netip.IPv6Loopback()}
			}
		}
		for i := range s.N {
			d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(from[i%len(from)], 0))}
			c, err := d.Dial("tcp", target.String())
			if err != nil {
				if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
					f.Stop()
					return nil, fmt.Errorf("flood: connection %d of %d: %w (see RaiseFDLimit)", len(f.conns)+1, n, err)
				}
				f.failed++
				continue
			}
			f.conns = append(f.conns, c)
			f.wg.Add(1)
			go f.hold(c, s.Kind)
		}
	}
	return f, nil
}

// hold plays kind on c and reads it until the server closes it or Stop.
func (f *Flood) hold(c net.Conn, kind Kind) {
	defer f.wg.Done()
	switch kind {
	case Garbage:
		b := make([]byte, 64)
		rand.Read(b)
		c.Write(b)
	case HalfClosed:
		c.(*net.TCPConn).CloseWrite()
	case Slow:
		go func() {
			t := time.NewTicker(SlowEvery)
			defer t.Stop()
			b := make([]byte, 1)
			for {
				select {
				case <-f.stop:
					return
				case <-t.C:
				}
				rand.Read(b)
				if _, err := c.Write(b); err != nil {
					return
				}
			}
		}()
	}
	buf := make([]byte, 512)
	for {
		if _, err := c.Read(buf); err != nil {
			select {
			case <-f.stop: // closed by Stop
			default:
				f.closed.Add(1)
			}
			return
		}
	}
}

// Stop closes every connection of the flood and returns its counts. A
// second call does nothing but return them.
func (f *Flood) Stop() Stats {
	select {
	case <-f.stop:
	default:
		// Closed by peer counts are taken before the flood's own closes.
		st := f.stats()
		close(f.stop)
		for _, c := range f.conns {
			c.Close()
		}
		f.wg.Wait()
		f.final = &st
	}
	return *f.final
}

func (f *Flood) stats() Stats {
	return Stats{Opened: len(f.conns), Failed: f.failed, ClosedByPeer: int(f.closed.Load())}
}

// Stats returns the flood's counts so far.
func (f *Flood) Stats() Stats { return f.stats() }

// RaiseFDLimit raises the soft limit on this process's open files to the
// hard limit when it is below need, and fails when the hard limit is too.
func RaiseFDLimit(need int) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("flood: getrlimit: %w", err)
	}
	if lim.Cur >= uint64(need) {
		return nil
	}
	if lim.Max < uint64(need) {
		return fmt.Errorf("flood: %d open files needed, the hard limit is %d", need, lim.Max)
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("flood: setrlimit to %d: %w", lim.Max, err)
	}
	return nil
}
