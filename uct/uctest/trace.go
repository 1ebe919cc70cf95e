package uctest

import (
	"bytes"
	"sync"
	"testing"

	"github.com/goshmem/goshmem/uct"
)

// TraceArg is the argument transport tests install their TraceLog tracer
// with; the tracer panics when called with another one.
const TraceArg = "arg"

// TraceEvent is one call of an active-message tracer.
type TraceEvent struct {
	Type uct.AMTraceType
	ID   uint8
	Data []byte
}

// Ev returns a TraceEvent.
func Ev(typ uct.AMTraceType, id uint8, data []byte) TraceEvent {
	return TraceEvent{Type: typ, ID: id, Data: data}
}

func (e TraceEvent) equal(o TraceEvent) bool {
	return e.Type == o.Type && e.ID == o.ID && bytes.Equal(e.Data, o.Data)
}

// TraceLog records the calls of a tracer; it is safe for concurrent use.
type TraceLog struct {
	mu sync.Mutex
	ev []TraceEvent
}

// Tracer is a uct.AMTracer that records each call, with a copy of the data.
func (l *TraceLog) Tracer(arg any, typ uct.AMTraceType, id uint8, data []byte) {
	if arg != TraceArg {
		panic("tracer called with the wrong arg")
	}
	l.mu.Lock()
	l.ev = append(l.ev, Ev(typ, id, append([]byte(nil), data...)))
	l.mu.Unlock()
}

// Take returns the recorded events and forgets them.
func (l *TraceLog) Take() []TraceEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	ev := l.ev
	l.ev = nil
	return ev
}

// Len returns the number of recorded events.
func (l *TraceLog) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ev)
}

// CheckTrace fails t unless got holds the events of want, in order.
func CheckTrace(t testing.TB, what string, got, want []TraceEvent) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: traced %+v, want %+v", what, got, want)
	}
	for k := range want {
		if !got[k].equal(want[k]) {
			t.Errorf("%s: event %d is %+v, want %+v", what, k, got[k], want[k])
		}
	}
}

// SameTrace reports whether got holds the events of want in any order (a
// transport may trace from several goroutines).
func SameTrace(got, want []TraceEvent) bool {
	if len(got) != len(want) {
		return false
	}
	used := make([]bool, len(got))
next:
	for _, w := range want {
		for k, g := range got {
			if !used[k] && g.equal(w) {
				used[k] = true
				continue next
			}
		}
		return false
	}
	return true
}
