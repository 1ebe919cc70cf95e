package ucp

import (
	"testing"

	"github.com/goshmem/goshmem/ucs"
)

// TestProgressRegister: a registered callback runs in every Progress and
// its events count in Progress's result; unregistered, it runs no more;
// Wake counts as an event for Arm and Wait, from any goroutine; an idle
// callback costs Progress no allocation.
func TestProgressRegister(t *testing.T) {
	c := newContextWith(t, FeatureWakeup)
	w, err := c.NewWorker(new(WorkerParams).SetThreadMode(ucs.ThreadModeMulti))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Destroy()
	calls, work := 0, 0
	id := w.ProgressRegister(func() int {
		calls++
		n := work
		work = 0
		return n
	})
	for range 3 {
		w.Progress()
	}
	if calls != 3 {
		t.Errorf("3 Progress calls made %d callback calls", calls)
	}
	work = 5
	if n := w.Progress(); n < 5 {
		t.Errorf("Progress returned %d with 5 events of the callback", n)
	}
	if a := testing.AllocsPerRun(100, func() { w.Progress() }); a != 0 {
		t.Errorf("Progress with an idle callback: %v allocations", a)
	}
	w.ProgressUnregister(id)
	w.ProgressUnregister(id + 100) // unknown: ignored
	calls = 0
	w.Progress()
	if calls != 0 {
		t.Errorf("unregistered callback called %d times", calls)
	}

	armQuiet(t, w)
	w.Wake()
	if err := w.Arm(); err != ucs.ErrBusy {
		t.Errorf("Arm after Wake: %v, want ucs.ErrBusy", err)
	}
	armQuiet(t, w)
	waited := make(chan error, 1)
	go func() { waited <- w.Wait() }()
	go w.Wake()
	if err := noHang(t, "Wait for Wake", func() error { return <-waited }); err != nil {
		t.Fatalf("Wait: %v", err)
	}
}
