package ucp

import (
	"errors"
	"testing"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
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

// ifaceActive reports whether w's interface of transport tl is enabled in
// the uct worker's progress (adaptive progress: see Worker.initProgress).
func ifaceActive(t *testing.T, w *Worker, tl string) bool {
	t.Helper()
	for _, wi := range w.ifaces {
		if wi.rsc.tl.TLName == tl {
			return wi.iface.(uct.ProgressController).ProgressEnabled()
		}
	}
	t.Fatalf("worker has no %s interface", tl)
	return false
}

// TestAdaptiveProgress: a worker's interfaces start disabled in the uct
// worker's progress; a message that a peer sends to one (the only
// transport both have), which no endpoint of the worker uses, arrives, also
// while the worker's other callbacks find work on every Progress, and
// enables it; the interface nothing came to stays disabled.
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
					t.Errorf("%s enabled before any message", tl)
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
			progressUntil(t, a, "the message to a disabled interface", func() bool {
				b.Progress()
				return rr.IsCompleted()
			})
			if err := rr.Status(); err != nil || string(buf) != "adaptive" {
				t.Fatalf("receive: %v, %q", err, buf)
			}
			rr.Free()
			if sr != nil {
				progressUntil(t, b, "the send", sr.IsCompleted)
				sr.Free()
			}
			if !ifaceActive(t, a, "sysv") || ifaceActive(t, a, "posix") {
				t.Errorf("after a message on sysv: sysv enabled %v, posix enabled %v", ifaceActive(t, a, "sysv"), ifaceActive(t, a, "posix"))
			}
		})
	}
}

// TestAdaptiveProgressConfig: UCX_ADAPTIVE_PROGRESS=n leaves every
// interface enabled from the start; y (the default) disables them; a value
// that is not a boolean fails Init.
func TestAdaptiveProgressConfig(t *testing.T) {
	for _, tc := range []struct {
		val     string
		enabled bool
		fails   bool
	}{{"y", false, false}, {"n", true, false}, {"off", true, false}, {"maybe", false, true}} {
		t.Run(tc.val, func(t *testing.T) {
			cfg, err := ReadConfig("", "")
			if err != nil {
				t.Fatal(err)
			}
			if err := cfg.Modify("TLS", "posix,sysv"); err != nil {
				t.Fatal(err)
			}
			if err := cfg.Modify("ADAPTIVE_PROGRESS", tc.val); err != nil {
				t.Fatal(err)
			}
			c, err := Init(new(Params).SetFeatures(FeatureTag), cfg)
			if tc.fails {
				if !errors.Is(err, ucs.ErrInvalidParam) {
					t.Fatalf("Init with UCX_ADAPTIVE_PROGRESS=%s: %v, want ErrInvalidParam", tc.val, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Cleanup)
			w := newWorker(t, c)
			for _, tl := range []string{"posix", "sysv"} {
				if got := ifaceActive(t, w, tl); got != tc.enabled {
					t.Errorf("%s enabled %v, want %v", tl, got, tc.enabled)
				}
			}
		})
	}
}
