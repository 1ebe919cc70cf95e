package ucp

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestMixedAtomicsCoherent hits one word of a target at once from a worker
// that reaches it through shared memory (CPU atomics on the mapped memory)
// and from one that reaches it through tcp only (software atomics that the
// target applies with CPU atomics): no update may be lost.
func TestMixedAtomicsCoherent(t *testing.T) {
	target := newContextTLS(t, "all")
	tb := newWorker(t, target)
	smInit := newWorker(t, newContextTLS(t, "sm,self"))
	tcpInit := newWorker(t, newContextTLS(t, "tcp,self"))
	memh, err := target.MemMap(new(MemMapParams).SetLength(4096).SetFlags(MemMapAllocate))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { target.MemUnmap(memh) })
	packed, err := target.RkeyPack(memh)
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := tb.Address()
	word := (*uint64)(memh.Address())
	raddr := uint64(uintptr(memh.Address()))
	const perWorker = 3000
	var wg sync.WaitGroup
	for _, w := range []*Worker{smInit, tcpInit} {
		ep, err := w.NewEndpoint(new(EPParams).SetAddress(addr))
		if err != nil {
			t.Fatal(err)
		}
		rk, err := ep.RkeyUnpack(packed)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: atomics on %s", w.name, ep.Query().Lanes)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer rk.Destroy()
			defer ep.Close(CloseModeFlush)
			var old uint64
			for k := range perWorker {
				p := new(RequestParam)
				if k%2 == 1 {
					p.SetReply(&old) // fetching and posted adds alike
				}
				req, err := ep.AtomicOpNBX(AtomicOpAdd, 1, raddr, rk, p)
				if err == nil && req != nil {
					err = req.Wait()
					req.Free()
				}
				if err != nil {
					t.Errorf("%s: add %d: %v", w.name, k, err)
					return
				}
			}
			if err := ep.Flush(); err != nil {
				t.Errorf("%s: flush: %v", w.name, err)
			}
		}()
	}
	// The target progresses, for transports whose handlers run from
	// Progress.
	stop, done := serve(tb)
	wg.Wait()
	close(stop)
	<-done
	if got := atomic.LoadUint64(word); got != 2*perWorker {
		t.Errorf("word = %d after %d adds from each of two workers", got, perWorker)
	}
}
