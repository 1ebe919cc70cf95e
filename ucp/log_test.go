package ucp

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// recordLogger keeps the lines written to it.
type recordLogger struct {
	mu    sync.Mutex
	lines []string
}

func (l *recordLogger) Enabled(level ucs.LogLevel) bool { return level <= ucs.LogWarn }

func (l *recordLogger) Logf(level ucs.LogLevel, format string, args ...any) {
	if !l.Enabled(level) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, level.String()+" "+fmt.Sprintf(format, args...))
}

func (l *recordLogger) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// TestLoggerReachesTransports: the logger of the context's params gets the
// warnings of the transports its workers open (here self's, about an
// active message no handler takes).
func TestLoggerReachesTransports(t *testing.T) {
	rec := new(recordLogger)
	c := newContextParams(t, new(Params).SetFeatures(FeatureAM).SetLogger(rec), "TLS", "self")
	w := newWorker(t, c)
	var self uct.Iface
	for _, wi := range w.ifaces {
		if wi.rsc.tl.TLName == "self" {
			self = wi.iface
		}
	}
	if self == nil {
		t.Fatal("no self iface")
	}
	ep, err := self.EPCreate(&uct.EPParams{DeviceAddr: self.DeviceAddress(), IfaceAddr: self.Address()})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Destroy()
	const unused = 0 // ucp takes ids from the top down
	if st := ep.AMShort(unused, 0, []byte("x")); st.IsErr() {
		t.Fatalf("AMShort: %v", st)
	}
	for range 100 {
		w.Progress()
	}
	if got := rec.all(); !strings.Contains(got, "warn uct/self: dropped active message 0") {
		t.Errorf("the params' logger got %q, want self's warning about message %d", got, unused)
	}
}

// TestErrClosed: the calls on a released worker or context fail with an
// error that matches both ErrClosed and ucs.ErrCanceled.
func TestErrClosed(t *testing.T) {
	c, err := Init(new(Params).SetFeatures(FeatureRMA), nil)
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.NewWorker(nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Destroy()
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrClosed) || !errors.Is(err, ucs.ErrCanceled) {
			t.Errorf("%s: %v, want ErrClosed and ucs.ErrCanceled", what, err)
		}
	}
	_, err = w.Address()
	check("Address of a destroyed worker", err)
	check("Flush of a destroyed worker", w.Flush())
	c.Cleanup()
	_, err = c.NewWorker(nil)
	check("NewWorker of a released context", err)
	if got, want := ErrClosed.Error(), "ucp: use of a released object"; got != want {
		t.Errorf("ErrClosed says %q, want %q", got, want)
	}
}
