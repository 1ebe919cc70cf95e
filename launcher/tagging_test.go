package launcher

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/goshmem/goshmem/bootstrap"
)

func init() {
	// PE 1 crashes once every PE is ready; the others say so on standard
	// error when the launcher ends them.
	morePEModes["failoutput"] = func(rank int) int {
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		m, err := bootstrap.JoinFromOS()
		if err != nil {
			fmt.Fprintf(os.Stderr, "PE %d: join: %v\n", rank, err)
			return 10
		}
		if err := m.Barrier(); err != nil && rank == 1 {
			return 13
		}
		// A PE still in the barrier when PE 1 crashes sees it fail; it is
		// ended all the same.
		if rank == 1 {
			fmt.Printf("PE 1 starts\n")
			fmt.Fprintf(os.Stderr, "panic: boom\n\ngoroutine 1 [running]:\nmain.main()\n")
			return 3
		}
		<-term
		fmt.Fprintf(os.Stderr, "PE %d got SIGTERM\n", rank)
		return 1
	}
}

// TestFailingJobTagged checks that the output of a job that was not asked
// to be tagged is tagged once a PE failed; the failed PE's crash report is
// tagged from its first line, and shown once (not again as a replay).
func TestFailingJobTagged(t *testing.T) {
	t.Parallel()
	forEachMode(t, func(t *testing.T, lm launchMode) {
		const np = 3
		r := runJob(t, context.Background(), np, "failoutput", func(o *Options) { lm.set(t, o) })
		checkFailure(t, r, 3, 1, "exited with status 3")
		// PE 1's line, written before it crashed, once: untagged, or tagged
		// when the crash report on the other stream came through first.
		if strings.Count(r.stdout, "PE 1 starts\n") != 1 {
			t.Errorf("stdout %q: want PE 1's line once", r.stdout)
		}
		// PE 1's crash report, tagged, in the order it came, once; its
		// standard output may come between the lines of its standard
		// error.
		report := "[pe 1] panic: boom\n[pe 1] \n[pe 1] goroutine 1 [running]:\n[pe 1] main.main()\n"
		var errLines strings.Builder
		for _, l := range strings.SplitAfter(r.stderr, "\n") {
			if l != "[pe 1] PE 1 starts\n" {
				errLines.WriteString(l)
			}
		}
		if n := strings.Count(errLines.String(), report); n != 1 {
			t.Errorf("stderr has PE 1's crash report %q tagged %d times, want once:\n%s", report, n, r.stderr)
		}
		if strings.HasPrefix(r.stderr, "panic: boom\n") || strings.Contains(r.stderr, "\npanic: boom\n") {
			t.Errorf("stderr has PE 1's crash report untagged too:\n%s", r.stderr)
		}
		logs := r.stderr + strings.Join(r.logs, "\n")
		for _, again := range []string{"the start of its crash report", "the last lines it wrote"} {
			if strings.Contains(logs, again) {
				t.Errorf("the crash report is shown again (%q):\n%s", again, logs)
			}
		}
		for rank := range np {
			if rank == 1 {
				continue
			}
			if want := fmt.Sprintf("[pe %d] PE %d got SIGTERM\n", rank, rank); !strings.Contains(r.stderr, want) {
				t.Errorf("stderr lacks %q: lines written after the failure are tagged", want)
			}
		}
	})
}

func TestLastLines(t *testing.T) {
	numbered := func(from, to int) []string {
		var l []string
		for i := from; i < to; i++ {
			l = append(l, fmt.Sprintf("line %d", i))
		}
		return l
	}
	long := strings.Repeat("y", replayLineMax+5)
	tests := []struct {
		name   string
		writes []string
		want   []string
	}{
		{"none", nil, nil},
		{"few", []string{"a\nb\n", "c"}, []string{"a", "b", "c"}},
		{"last ones", []string{strings.Join(numbered(0, replayLines+7), "\n") + "\n"}, numbered(7, replayLines+7)},
		{"crash report start", []string{"x\npanic: oops [recovered]\n", strings.Join(numbered(0, 2*replayLines), "\n") + "\n"},
			append([]string{"panic: oops [recovered]"}, numbered(0, replayLines-1)...)},
		{"fatal error", []string{"fatal error: all goroutines are asleep - deadlock!\n\ngoroutine 1\n"},
			[]string{"fatal error: all goroutines are asleep - deadlock!", "", "goroutine 1"}},
		{"long line cut", []string{long + "\n"}, []string{long[:replayLineMax]}},
		{"overlong line once", []string{strings.Repeat("z", maxLine+10) + "\nend\n"}, []string{strings.Repeat("z", replayLineMax), "end"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			last := new(lastLines)
			var tag atomic.Bool
			w := &lineWriter{mu: new(sync.Mutex), dst: io.Discard, prefix: peTag(0), tagOn: &tag, last: last}
			for _, s := range tt.writes {
				w.Write([]byte(s))
			}
			w.flush()
			var got []string
			for _, l := range last.lines() {
				got = append(got, string(l))
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("lines %q, want %q", got, tt.want)
			}
		})
	}
}
