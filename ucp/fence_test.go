package ucp

import (
	"encoding/binary"
	"sync/atomic"
	"testing"
	"unsafe"
)

// TestFenceAcrossPaths issues an atomic that goes in software (a message
// the target applies when it progresses), fences, and then puts to the same
// word directly into the target's mapped memory: the atomic must land
// first. The target is the worker itself, so that nothing applies the
// atomic until the worker progresses.
func TestFenceAcrossPaths(t *testing.T) {
	for _, fence := range []struct {
		name string
		f    func(w *Worker, ep *Endpoint) error
	}{
		{"worker", func(w *Worker, _ *Endpoint) error { return w.Fence() }},
		{"endpoint", func(_ *Worker, ep *Endpoint) error { return ep.Fence() }},
	} {
		t.Run(fence.name, func(t *testing.T) {
			c := newContextCfg(t, FeatureRMA|FeatureAMO64, "TLS", "sm")
			w := newWorker(t, c)
			p := newPair(t, c, w, w, 4096)
			if p.rkey.base == nil {
				t.Skip("no transport maps the memory here")
			}
			sw, err := p.ep.RkeyUnpack(p.rkey.packed)
			if err != nil {
				t.Fatal(err)
			}
			defer sw.Destroy()
			forceSoftware(sw)
			word := (*uint64)(unsafe.Pointer(&p.mem[0]))
			for round := uint64(1); round <= 3; round++ {
				atomic.StoreUint64(word, 0)
				if _, err := p.ep.AtomicOpNBX(AtomicOpAdd, 1, p.base, sw, nil); err != nil {
					t.Fatal(err)
				}
				if err := fence.f(w, p.ep); err != nil {
					t.Fatal(err)
				}
				var v [8]byte
				binary.LittleEndian.PutUint64(v[:], 100*round)
				if _, err := p.ep.PutNBX(v[:], p.base, p.rkey, nil); err != nil {
					t.Fatal(err)
				}
				if err := p.ep.Flush(); err != nil {
					t.Fatal(err)
				}
				if got := atomic.LoadUint64(word); got != 100*round {
					t.Fatalf("round %d: word %d after atomic add, fence, put of %d: the atomic landed after the put", round, got, 100*round)
				}
			}
		})
	}
}
