package launcher

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goshmem/goshmem/bootstrap"
)

func init() {
	// Every PE but TEST_LATE_PE joins, says it is ready, and waits for
	// SIGUSR2, which it answers on standard error. TEST_LATE_PE (which
	// does not handle SIGUSR2: it would die of one) joins once the file
	// TEST_GO_FILE exists. Then they all finalize.
	morePEModes["stallreport"] = func(rank int) int {
		late := os.Getenv("TEST_LATE_PE") == strconv.Itoa(rank)
		var usr2 chan os.Signal
		if !late {
			usr2 = make(chan os.Signal, 1)
			signal.Notify(usr2, syscall.SIGUSR2)
		}
		if late {
			fmt.Printf("ready %d\n", rank)
			for {
				if _, err := os.Stat(os.Getenv("TEST_GO_FILE")); err == nil {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		m, err := bootstrap.JoinFromOS()
		if err != nil {
			fmt.Fprintf(os.Stderr, "PE %d: join: %v\n", rank, err)
			return 10
		}
		if !late {
			fmt.Printf("ready %d\n", rank)
			<-usr2
			fmt.Fprintf(os.Stderr, "PE %d waits in a barrier\n", rank)
		}
		if err := m.Barrier(); err != nil {
			return 13
		}
		if err := m.Close(); err != nil {
			return 12
		}
		return 0
	}
}

// lineWatch is an io.Writer that counts the lines containing a given
// string, for tests that wait for output.
type lineWatch struct {
	mu   sync.Mutex
	want string
	buf  []byte
	n    int
}

func (w *lineWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	w.n = strings.Count(string(w.buf), w.want)
	return len(p), nil
}

func (w *lineWatch) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// TestStallReport asks a job for stall reports: every PE that joined the
// job gets SIGUSR2 and answers on standard error, tagged; a PE that did
// not join yet is not signalled (it would die).
func TestStallReport(t *testing.T) {
	t.Parallel()
	forEachMode(t, func(t *testing.T, lm launchMode) {
		for _, late := range []bool{false, true} {
			t.Run(fmt.Sprintf("late=%v", late), func(t *testing.T) { testStallReport(t, lm, late) })
		}
	})
}

func testStallReport(t *testing.T, lm launchMode, late bool) {
	const np = 3
	goFile := filepath.Join(t.TempDir(), "go")
	ready := &lineWatch{want: "ready "}
	reported := &lineWatch{want: " waits in a barrier\n"}
	requests := make(chan struct{})
	stop := make(chan struct{})
	defer close(stop)
	// Ask until every PE that joins reported; a PE that reported once
	// ignores the requests that follow.
	go func() {
		for ready.count() < np {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		for reported.count() < np-btoi(late) {
			select {
			case requests <- struct{}{}:
			case <-stop:
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
		os.WriteFile(goFile, nil, 0o644)
	}()
	r := runJob(t, context.Background(), np, "stallreport", func(o *Options) {
		lm.set(t, o)
		o.Env = append(o.Env, "TEST_GO_FILE="+goFile)
		if late {
			o.Env = append(o.Env, "TEST_LATE_PE=1")
		}
		o.Stdout = io.MultiWriter(o.Stdout, ready)
		o.Stderr = io.MultiWriter(o.Stderr, reported)
		o.StallReports = requests
	})
	if r.code != 0 || r.err != nil {
		t.Fatalf("Run = %d, %v; stderr:\n%s", r.code, r.err, r.stderr)
	}
	logs := strings.Join(r.logs, "\n")
	if !strings.Contains(logs, "stall report requested; PEs report where they wait:") {
		t.Errorf("launcher log %q lacks the stall report header", r.logs)
	}
	for rank := range np {
		want := fmt.Sprintf("[pe %d] PE %d waits in a barrier\n", rank, rank)
		if got := strings.Contains(r.stderr, want); got != !(late && rank == 1) {
			t.Errorf("stderr has %q: %v", want, got)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
