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

// ifaceActive reports whether w's interface of transport tl is in the uct
// worker's progress (adaptive progress: see Worker.initProgress).
func ifaceActive(t *testing.T, w *Worker, tl string) bool {
	t.Helper()
	for _, wi := range w.ifaces {
		if wi.rsc.tl.TLName == tl {
			w.actMu.Lock()
			defer w.actMu.Unlock()
			return !wi.inactive
		}
	}
	t.Fatalf("worker has no %s interface", tl)
	return false
}

// TestAdaptiveProgress: the interfaces no endpoint uses are out of the
// worker's progress; a message that a peer sends to one (the only
// transport both have) still arrives, also while the active callbacks
// find work on every Progress, and makes it active; an endpoint's lane
// makes its interface active at the next Progress; an interface with no
// endpoint and no message stays inactive.
func TestAdaptiveProgress(t *testing.T) {
	for _, tc := range []struct {
		name string
		busy bool // a callback of a's reports work on every Progress
	}{{"idle", false}, {"busy", true}} {
		t.Run(tc.name, func(t *testing.T) {
			a := newWorker(t, newContextTLSWith(t, "posix,sysv", FeatureTag))
			b := newWorker(t, newContextTLSWith(t, "sysv", FeatureTag))
			if tc.busy {
				a.ProgressRegister(func() int { return 1 })
			}
			for _, tl := range []string{"posix", "sysv"} {
				if ifaceActive(t, a, tl) {
					t.Errorf("%s active with no endpoint", tl)
				}
			}
			addr, _ := a.Address()
			ep, err := b.NewEndpoint(new(EPParams).SetAddress(addr))
			if err != nil {
				t.Fatal(err)
			}
			defer ep.Close(CloseModeForce)
			buf := make([]byte, 8)
			rr, err := a.TagRecvNBX(buf, 7, tagMaskFull, nil)
			if err != nil {
				t.Fatal(err)
			}
			sr, err := ep.TagSendNBX([]byte("adaptive"), 7, nil)
			if err != nil {
				t.Fatal(err)
			}
			progressUntil(t, a, "the message to an interface no endpoint uses", func() bool {
				b.Progress()
				return rr.IsCompleted()
			})
			if err := rr.Test(nil); err != nil || string(buf) != "adaptive" {
				t.Fatalf("receive: %v, %q", err, buf)
			}
			rr.Free()
			if sr != nil {
				progressUntil(t, b, "the send", func() bool { return sr.IsCompleted() })
				sr.Free()
			}
			if !ifaceActive(t, a, "sysv") || ifaceActive(t, a, "posix") {
				t.Errorf("after a message on sysv: sysv active %v, posix active %v", ifaceActive(t, a, "sysv"), ifaceActive(t, a, "posix"))
			}
			c := newWorker(t, newContextTLS(t, "posix"))
			addr, _ = c.Address()
			ep2, err := a.NewEndpoint(new(EPParams).SetAddress(addr))
			if err != nil {
				t.Fatal(err)
			}
			defer ep2.Close(CloseModeForce)
			for range inactiveEvery {
				a.Progress()
			}
			if !ifaceActive(t, a, "posix") {
				t.Error("posix inactive after an endpoint got a lane on it")
			}
		})
	}
}
