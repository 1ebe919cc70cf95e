package rpc

import (
	"encoding/binary"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
)

// DefaultAggregateSize is the size, in bytes of arguments, at which an
// Aggregator sends a destination's buffer when NewAggregator is given 0.
const DefaultAggregateSize = 8 << 10

// Aggregator buffers calls without reply (as Go makes them) of one
// function, per destination PE, and sends each destination's calls as one
// message: when its buffer reaches the aggregator's size, at Flush, and at
// Barrier (and Stop), which flush every aggregator of the PE and wait
// until the calls were served. Many small calls to random PEs (updates of
// a table, inserts in a map) then cost what few messages cost. The calls
// of one message run in order at their target. An Aggregator serves one
// goroutine at a time.
type Aggregator[A, R any] struct {
	f      *Func[A, R]
	size   int
	bufs   []*[]byte // per PE: the message being filled, nil when empty
	n      []uint64  // calls in each
	closed atomic.Bool
}

// flusher is an aggregator, for Barrier and Stop.
type flusher interface {
	Flush() error
	shut() // marks the aggregator closed, dropping what it buffered
}

var (
	aggMu sync.Mutex
	aggs  = map[flusher]struct{}{}
)

// NewAggregator returns an aggregator of calls to f that sends a
// destination's calls once their arguments reach size bytes
// (DefaultAggregateSize for 0, at most what one message takes). It must
// be created after Start; Close removes it.
func NewAggregator[A, R any](f *Func[A, R], size int) *Aggregator[A, R] {
	if size <= 0 {
		size = DefaultAggregateSize
	}
	g := &Aggregator[A, R]{f: f, size: size, bufs: make([]*[]byte, rt.n), n: make([]uint64, rt.n)}
	aggMu.Lock()
	aggs[g] = struct{}{}
	aggMu.Unlock()
	return g
}

// Go adds a call of the function on PE pe with argument a to pe's buffer,
// sending the buffer when full. It fails, as an *Error, as Func.Go does,
// and with ErrClosed once the aggregator was closed (Close, Stop).
func (g *Aggregator[A, R]) Go(pe int, a A) error {
	f := g.f
	if g.closed.Load() {
		return &Error{PE: pe, Func: f.name, Err: ErrClosed}
	}
	if err := f.check(pe); err != nil {
		return &Error{PE: pe, Func: f.name, Err: err}
	}
	b := g.bufs[pe]
	if b == nil {
		b = getBuf()
		*b = appendHeader((*b)[:0], kindBatch, f.id, 0)
		g.bufs[pe] = b
	}
	at := len(*b)
	*b = append(*b, 0, 0, 0, 0)
	var err error
	if *b, err = f.ac.appendTo(*b, &a); err != nil {
		*b = (*b)[:at]
		return &Error{PE: pe, Func: f.name, Err: err}
	}
	binary.LittleEndian.PutUint32((*b)[at:], uint32(len(*b)-at-4))
	g.n[pe]++
	if len(*b)-hdrLen >= g.size {
		return g.flush(pe)
	}
	return nil
}

// flush sends pe's buffer.
func (g *Aggregator[A, R]) flush(pe int) error {
	b := g.bufs[pe]
	if b == nil {
		return nil
	}
	binary.LittleEndian.PutUint64((*b)[16:], g.n[pe])
	g.bufs[pe], g.n[pe] = nil, 0
	rt.touched[pe].Store(true)
	if err := send(pe, b); err != nil {
		return &Error{PE: pe, Func: g.f.name, Err: err}
	}
	return nil
}

// Flush sends every destination's buffered calls, and returns the first
// error. Barrier then makes sure they were served.
func (g *Aggregator[A, R]) Flush() error {
	var first error
	for pe := range g.bufs {
		if err := g.flush(pe); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Close flushes the aggregator, removes it from those Barrier flushes, and
// closes it: its later Go fail with ErrClosed. A second Close does
// nothing. Stop closes every aggregator.
func (g *Aggregator[A, R]) Close() error {
	if g.closed.Load() {
		return nil
	}
	aggMu.Lock()
	delete(aggs, g)
	aggMu.Unlock()
	err := g.Flush()
	g.shut()
	return err
}

func (g *Aggregator[A, R]) shut() {
	g.closed.Store(true)
	for pe, b := range g.bufs {
		if b != nil {
			putBuf(b)
			g.bufs[pe], g.n[pe] = nil, 0
		}
	}
}

// closeAggregators closes every aggregator (at Stop, after the Barrier
// that flushed them).
func closeAggregators() {
	aggMu.Lock()
	fl := slices.Collect(maps.Keys(aggs))
	clear(aggs)
	aggMu.Unlock()
	for _, g := range fl {
		g.shut()
	}
}

// serveBatch runs the calls of an aggregated message: count calls of
// function fnid, each its argument's length (u32) then the argument.
func serveBatch(src int, fnid, count uint64, payload []byte) {
	e := lookup(fnid)
	if e == nil {
		logf("rpc: PE %d: %d aggregated calls from PE %d to a function not registered here (id %#x) were dropped", rt.me, count, src, fnid)
		return
	}
	run := func(p []byte, async bool) {
		for len(p) >= 4 {
			n := int(binary.LittleEndian.Uint32(p))
			if n > len(p)-4 {
				logf("rpc: PE %d: a truncated aggregated message from PE %d was dropped", rt.me, src)
				return
			}
			e.exec(src, kindGo, 0, p[4:4+n], async)
			p = p[4+n:]
		}
	}
	if e.mode == Inline {
		run(payload, false)
		return
	}
	p := append([]byte(nil), payload...)
	goHandler(func() { run(p, true) })
}
