package base

import (
	"sync"
	"sync/atomic"
)

// Handoff is a list that any goroutine adds to and that the goroutine
// which progresses an iface takes whole: the EPs that failed since the
// last Progress call, the EPs that hold a batch of frames. Looking at an
// empty Handoff costs one atomic load, which is what the hot path pays.
// The zero value is empty and ready to use.
type Handoff[T any] struct {
	n     atomic.Int32
	mu    sync.Mutex
	items []T
	spare []T // the backing array of the last list taken, for reuse
}

// Add appends x and reports whether the list was empty before.
func (h *Handoff[T]) Add(x T) (first bool) {
	h.mu.Lock()
	if h.items == nil {
		h.items, h.spare = h.spare[:0], nil
	}
	h.items = append(h.items, x)
	n := len(h.items)
	h.n.Store(int32(n))
	h.mu.Unlock()
	return n == 1
}

// Len returns the number of items the list holds.
func (h *Handoff[T]) Len() int { return int(h.n.Load()) }

// Take empties the list, calls fn on each item it held, in the order they
// were added, and returns their number. Items added while fn runs wait
// for the next Take.
func (h *Handoff[T]) Take(fn func(T)) int {
	if h.n.Load() == 0 {
		return 0 // inlined: the hot path makes no call
	}
	return h.take(fn)
}

func (h *Handoff[T]) take(fn func(T)) int {
	h.mu.Lock()
	items := h.items
	h.items = nil
	h.n.Store(0)
	h.mu.Unlock()
	var zero T
	for k, x := range items {
		fn(x)
		items[k] = zero // no reference kept in the spare array
	}
	h.mu.Lock()
	h.spare = items
	h.mu.Unlock()
	return len(items)
}
