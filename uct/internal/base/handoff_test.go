package base

import (
	"slices"
	"sync"
	"testing"
)

// TestHandoff: Take returns every item added once, in order, and nothing
// twice; an item added during a Take waits for the next one; Add reports
// the first item of a list; a steady Add and Take allocate nothing.
func TestHandoff(t *testing.T) {
	var h Handoff[int]
	if n := h.Take(func(int) { t.Fatal("called on an empty list") }); n != 0 {
		t.Fatalf("Take of an empty list = %d", n)
	}
	if !h.Add(1) || h.Add(2) || h.Len() != 2 {
		t.Fatalf("Add: first item not reported, or Len %d != 2", h.Len())
	}
	var got []int
	n := h.Take(func(x int) {
		got = append(got, x)
		if x == 1 {
			h.Add(3) // during the Take
		}
	})
	if n != 2 || !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("Take = %d %v, want 2 [1 2]", n, got)
	}
	got = got[:0]
	if n := h.Take(func(x int) { got = append(got, x) }); n != 1 || !slices.Equal(got, []int{3}) {
		t.Fatalf("second Take = %d %v, want 1 [3]", n, got)
	}
	if h.Len() != 0 {
		t.Fatalf("Len after Take = %d", h.Len())
	}
	if a := testing.AllocsPerRun(100, func() {
		h.Add(1)
		h.Add(2)
		h.Take(func(int) {})
	}); a != 0 {
		t.Errorf("Add and Take allocate %v times", a)
	}

	// Concurrent adders, one taker: every item exactly once.
	var wg sync.WaitGroup
	const adders, each = 4, 1000
	seen := make([]int, adders*each)
	for a := range adders {
		wg.Go(func() {
			for k := range each {
				h.Add(a*each + k)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for stop := false; !stop; {
		select {
		case <-done:
			stop = true
		default:
		}
		h.Take(func(x int) { seen[x]++ })
	}
	for x, c := range seen {
		if c != 1 {
			t.Fatalf("item %d taken %d times", x, c)
		}
	}
}
