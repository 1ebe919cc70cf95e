package sm

import (
	"encoding/binary"
	"sync"
	"testing"
	"time"
	"unsafe"
)

// TestFIFOProducers: producers with views of their own claim (as EPs do:
// tryClaim, then claim when it fails) and publish cells of a small ring
// while the consumer reads them in ticket order and says, once per round,
// which tickets it is done with. Every message arrives once, each
// producer's in the order it sent them, and none is overwritten before it
// was read; a full ring refuses a claim instead.
func TestFIFOProducers(t *testing.T) {
	for _, ncells := range []int{2, 8, 64} {
		const producers, each = 4, 5000
		stride := cellStride(64)
		mem := make([]uint64, fifoSize(ncells, stride)/8)
		base := unsafe.Pointer(&mem[0])
		initFIFO(base, ncells, stride)
		if err := checkFIFO(base, ncells, stride); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(20 * time.Second)
		var wg sync.WaitGroup
		for p := range producers {
			wg.Go(func() {
				f := viewFIFO(base, ncells, stride)
				for k := 0; k < each; {
					c, lap := f.tryClaim()
					if c == nil {
						c, lap = f.claim()
					}
					if c == nil {
						if time.Now().After(deadline) {
							return // the consumer fails the test
						}
						continue // full: the consumer is behind
					}
					d := f.data(c)
					binary.LittleEndian.PutUint32(d, uint32(p))
					binary.LittleEndian.PutUint32(d[4:], uint32(k))
					publish(c, lap, 1, 8)
					k++
				}
			})
		}
		rx := viewFIFO(base, ncells, stride)
		next := make([]uint32, producers)
		r := start()
		for r.t < producers*each {
			if time.Now().After(deadline) {
				t.Fatalf("%d cells: stuck at ticket %d of %d (a cell overwritten, or a claim refused for good)", ncells, r.t, producers*each)
			}
			round := r.t
			for c := rx.ready(&r); c != nil; c = rx.ready(&r) {
				if want := rx.cell(r.t); c != want {
					t.Fatalf("%d cells: ticket %d: cursor at cell %p, want %p", ncells, r.t, c, want)
				}
				head := r.t
				id, n, err := decodeCellHeader(header(c)[:], rx.payload)
				if err != nil || id != 1 || n != 8 {
					t.Fatalf("%d cells: ticket %d: id %d, %d bytes, %v", ncells, head, id, n, err)
				}
				d := rx.data(c)
				p, k := binary.LittleEndian.Uint32(d), binary.LittleEndian.Uint32(d[4:])
				if p >= producers || k != next[p] {
					t.Fatalf("%d cells: ticket %d: message %d of producer %d, want %d", ncells, head, k, p, next[p])
				}
				next[p]++
				rx.advance(&r)
			}
			if r.t != round {
				rx.done(r.t)
			}
		}
		wg.Wait()
		if tail := *rx.tail; tail != producers*each {
			t.Errorf("%d cells: tail %d after %d messages", ncells, tail, producers*each)
		}
		f := viewFIFO(base, ncells, stride)
		for range ncells {
			if c, _ := f.claim(); c == nil {
				t.Fatalf("%d cells: an empty ring refused a claim", ncells)
			}
		}
		if c, _ := f.tryClaim(); c != nil {
			t.Errorf("%d cells: a full ring took a first try", ncells)
		}
		if c, _ := f.claim(); c != nil || f.hasRoom() {
			t.Errorf("%d cells: a full ring took a claim", ncells)
		}
	}
}
