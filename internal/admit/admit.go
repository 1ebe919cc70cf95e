// Package admit bounds what strangers cost a server that accepts
// connections from anyone: the connections it accepted and that have not
// authenticated yet.
//
// A server admits each connection it accepts into a Gate before it reads
// anything from it, and takes it out (Ticket.Done) once it authenticated,
// failed or was closed. A Gate holds at most Limits.PerSource connections
// of one source (an IPv4 address, or an IPv6 /64 prefix, what one host
// usually has) and Limits.Total in all. A new connection beyond a limit is
// never refused: it displaces the oldest connection of its own source, or,
// beyond the total, the oldest of the source that holds the most, which
// the server closes. Idle, slow or half-open connections, however many,
// thus hold no slot that a client that means it needs: such a client
// answers within a few round trips, and strangers would have to open
// PerSource connections from its own address in that time to displace it.
// Nothing else is bounded here: what a connection may allocate once it
// authenticated is the server's business.
package admit

import (
	"cmp"
	"container/list"
	"net/netip"
	"slices"
	"sync"
)

// Limits are the bounds of a Gate; both must be at least 1.
type Limits struct {
	// PerSource bounds the connections of one source.
	PerSource int
	// Total bounds the connections of all sources.
	Total int
}

// Gate holds the unauthenticated connections of a server, each with a
// value of type T (the connection, or what the server closes it by). Its
// methods may be called concurrently.
type Gate[T any] struct {
	lim  Limits
	mu   sync.Mutex
	n    int
	seq  uint64
	srcs map[netip.Prefix]*list.List // of *Ticket[T], oldest first
}

// Ticket is a connection in a Gate.
type Ticket[T any] struct {
	g      *Gate[T]
	v      T
	src    netip.Prefix
	seq    uint64
	el     *list.Element // in its source's list; nil once out of the gate
	ousted bool
}

// New returns a gate with the limits lim; a limit below 1 counts as 1.
func New[T any](lim Limits) *Gate[T] {
	lim.PerSource, lim.Total = max(lim.PerSource, 1), max(lim.Total, 1)
	return &Gate[T]{lim: lim, srcs: make(map[netip.Prefix]*list.List)}
}

// Source returns the source a connection from addr counts against: the
// address itself for IPv4 (an IPv4-mapped IPv6 address counts as its IPv4
// address), its /64 prefix for IPv6.
func Source(addr netip.Addr) netip.Prefix {
	addr = addr.Unmap().WithZone("")
	bits := 32
	if addr.Is6() {
		bits = 64
	}
	p, _ := addr.Prefix(bits)
	return p
}

// Admit enters a connection from the address from, with its value v, and
// returns its ticket. When that goes beyond a limit, it takes the
// displaced connection out of the gate and returns its value as out, with
// ousted true: the caller closes it (its Done then reports that it was
// displaced).
func (g *Gate[T]) Admit(from netip.Addr, v T) (t *Ticket[T], out T, ousted bool) {
	t = &Ticket[T]{g: g, v: v, src: Source(from)}
	g.mu.Lock()
	defer g.mu.Unlock()
	var victim *Ticket[T]
	if l := g.srcs[t.src]; l != nil && l.Len() >= g.lim.PerSource {
		victim = l.Front().Value.(*Ticket[T])
	} else if g.n >= g.lim.Total {
		victim = g.heaviest()
	}
	if victim != nil {
		victim.ousted = true
		g.remove(victim)
		out, ousted = victim.v, true
	}
	g.seq++
	t.seq = g.seq
	l := g.srcs[t.src]
	if l == nil {
		l = list.New()
		g.srcs[t.src] = l
	}
	t.el = l.PushBack(t)
	g.n++
	return t, out, ousted
}

// heaviest returns the oldest connection of the source that holds the
// most (of those, the one whose oldest came first). The gate is not
// empty.
func (g *Gate[T]) heaviest() *Ticket[T] {
	var best *Ticket[T]
	bestLen := 0
	for _, l := range g.srcs {
		front := l.Front().Value.(*Ticket[T])
		if l.Len() > bestLen || l.Len() == bestLen && front.seq < best.seq {
			best, bestLen = front, l.Len()
		}
	}
	return best
}

// remove takes t out of the gate; g.mu is held.
func (g *Gate[T]) remove(t *Ticket[T]) {
	l := g.srcs[t.src]
	l.Remove(t.el)
	if l.Len() == 0 {
		delete(g.srcs, t.src)
	}
	t.el = nil
	g.n--
}

// Done takes the connection out of the gate, once it authenticated,
// failed or closed, and reports whether another connection displaced it
// before (then it is out already, and its value was handed to Admit's
// caller to close). Calls after the first do nothing but report the same.
func (t *Ticket[T]) Done() (ousted bool) {
	g := t.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if t.el != nil {
		g.remove(t)
	}
	return t.ousted
}

// Len returns the number of connections in the gate.
func (g *Gate[T]) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n
}

// Values returns the values of the connections in the gate, oldest first.
func (g *Gate[T]) Values() []T {
	g.mu.Lock()
	var ts []*Ticket[T]
	for _, l := range g.srcs {
		for e := l.Front(); e != nil; e = e.Next() {
			ts = append(ts, e.Value.(*Ticket[T]))
		}
	}
	g.mu.Unlock()
	slices.SortFunc(ts, func(a, b *Ticket[T]) int { return cmp.Compare(a.seq, b.seq) })
	v := make([]T, len(ts))
	for i, t := range ts {
		v[i] = t.v
	}
	return v
}

// Limits returns the gate's limits.
func (g *Gate[T]) Limits() Limits { return g.lim }
