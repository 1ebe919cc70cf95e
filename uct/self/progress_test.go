package self

import (
	"testing"
	"time"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// TestIdleProgressTakesNoLock checks that Progress of an iface with nothing
// queued returns without taking its locks: a worker polls every iface it
// has, and the self iface must not cost a lock per poll. With the queue's
// lock held elsewhere, an idle Progress still returns; a queued message is
// delivered once the lock is free.
func TestIdleProgressTakesNoLock(t *testing.T) {
	i, ep, _ := setup(t, make([]byte, 8))
	got := 0
	i.SetAMHandler(1, func(any, []byte, uint32) ucs.Status { got++; return ucs.OK }, nil, uct.CBFlagSync)
	i.mu.Lock()
	done := make(chan int, 1)
	go func() { done <- i.Progress() }()
	select {
	case n := <-done:
		if n != 0 {
			t.Errorf("idle Progress returned %d", n)
		}
	case <-time.After(10 * time.Second):
		i.mu.Unlock()
		<-done
		t.Fatal("an idle Progress waits for the queue's lock")
	}
	i.mu.Unlock()
	if st := ep.AMShort(1, 7, nil); st != ucs.OK {
		t.Fatal(st)
	}
	if n := i.Progress(); n != 1 || got != 1 {
		t.Fatalf("Progress after a message: %d, handler called %d times", n, got)
	}
	if n := i.Progress(); n != 0 {
		t.Fatalf("Progress with nothing queued: %d", n)
	}
}
