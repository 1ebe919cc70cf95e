package ucp

import "testing"

// TestIdleYields checks how often Idle gives the P away while it polls: a
// worker that reads from the network yields the goroutine only every
// idleGoschedEvery-th call (runtime.Gosched wakes a thread for an idle P,
// two futex calls), one served by shared memory alone at every call.
func TestIdleYields(t *testing.T) {
	for _, tc := range []struct {
		name    string
		netPoll bool
		want    int
	}{
		{"network", true, idleSpin / idleGoschedEvery},
		{"memory", false, idleSpin},
	} {
		t.Run(tc.name, func(t *testing.T) {
			yields := 0
			defer func(f func()) { yieldGoroutine = f }(yieldGoroutine)
			yieldGoroutine = func() { yields++ }
			w := &Worker{netPoll: tc.netPoll}
			for range idleSpin {
				w.Idle()
			}
			if yields != tc.want {
				t.Errorf("%d calls of Idle yielded %d times, want %d", idleSpin, yields, tc.want)
			}
		})
	}
}
