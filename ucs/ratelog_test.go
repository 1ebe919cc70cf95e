package ucs

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// lines collects what a limiter writes.
type lines struct {
	mu sync.Mutex
	l  []string
}

func (c *lines) logf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.l = append(c.l, fmt.Sprintf(format, args...))
}

func (c *lines) get() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.l...)
}

func TestLogLimiter(t *testing.T) {
	tests := []struct {
		name        string
		burst, n    int
		wantWritten int    // lines written before the summary
		wantSummary string // "" for none
	}{
		{"under the burst", 5, 3, 3, ""},
		{"at the burst", 5, 5, 5, ""},
		{"flood", 5, 2850, 5, "2845 more refused connections not logged"},
		{"burst of one", 1, 10, 1, "9 more refused connections not logged"},
		{"burst below one counts as one", 0, 2, 1, "1 more refused connections not logged"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out lines
			// An interval no test outlives: the summary comes from Flush.
			l := NewLogLimiter("refused connections", tt.burst, time.Hour, out.logf)
			for k := range tt.n {
				l.Logf("refused connection %d", k)
			}
			l.Flush()
			got := out.get()
			if l.Count() != uint64(tt.n) {
				t.Errorf("Count() = %d, want %d", l.Count(), tt.n)
			}
			want := tt.wantWritten
			if tt.wantSummary != "" {
				want++
			}
			if len(got) != want {
				t.Fatalf("%d lines written, want %d: %q", len(got), want, got)
			}
			for k := range tt.wantWritten {
				if w := fmt.Sprintf("refused connection %d", k); got[k] != w {
					t.Errorf("line %d = %q, want %q", k, got[k], w)
				}
			}
			if tt.wantSummary != "" {
				s := got[len(got)-1]
				if !strings.HasPrefix(s, tt.wantSummary) || !strings.Contains(s, fmt.Sprintf("(%d in all)", tt.n)) {
					t.Errorf("summary %q, want %q... (%d in all)", s, tt.wantSummary, tt.n)
				}
			}
			l.Flush() // nothing more to say
			if n := len(out.get()); n != want {
				t.Errorf("a second Flush wrote %d more lines", n-want)
			}
		})
	}
}

// TestLogLimiterSummaryByItself checks that the summary of a flood that
// stops is written at the end of its interval, without another line
// offered or a Flush.
func TestLogLimiterSummaryByItself(t *testing.T) {
	var out lines
	l := NewLogLimiter("bad frames", 2, 20*time.Millisecond, out.logf)
	for range 10 {
		l.Logf("bad frame")
	}
	deadline := time.Now().Add(time.Minute) // a guard, not a timed assertion
	for len(out.get()) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("no summary a minute after the interval: %q", out.get())
		}
		time.Sleep(time.Millisecond)
	}
	if got := out.get(); len(got) != 3 || !strings.HasPrefix(got[2], "8 more bad frames not logged") {
		t.Errorf("lines %q, want 2 and a summary of 8", got)
	}
}

// TestLogLimiterNextInterval checks that a new interval writes a new
// burst, after the summary of the last.
func TestLogLimiterNextInterval(t *testing.T) {
	var out lines
	l := NewLogLimiter("bad frames", 1, time.Millisecond, out.logf)
	l.Logf("first")
	l.Logf("held back")
	time.Sleep(5 * time.Millisecond) // past the interval, whatever the timer did
	l.Logf("second")
	l.Flush()
	got := out.get()
	if len(got) != 3 || got[0] != "first" || !strings.HasPrefix(got[1], "1 more bad frames") || got[2] != "second" {
		t.Errorf("lines %q, want first, a summary of 1, second", got)
	}
}
