package uct

import (
	"fmt"
	"testing"

	"github.com/goshmem/goshmem/ucs"
)

// TestProgressRegisterShared checks the reference count of
// uct_worker_progress_register: registering under the same key again adds
// nothing and counts, and the callback leaves the progress only with its
// last unregistration; plain registrations are each their own.
func TestProgressRegisterShared(t *testing.T) {
	type step struct {
		op   string // "shared a", "shared b", "plain", "unreg N" (N: index of the step whose id to drop)
		want int    // calls of a's, b's and the plain callbacks in one Progress after the step
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"once", []step{{"shared a", 1}, {"unreg 0", 0}}},
		{"twice, one unregister", []step{{"shared a", 1}, {"shared a", 1}, {"unreg 0", 1}, {"unreg 1", 0}}},
		{"three times", []step{{"shared a", 1}, {"shared a", 1}, {"shared a", 1}, {"unreg 0", 1}, {"unreg 0", 1}, {"unreg 0", 0}}},
		{"two keys", []step{{"shared a", 1}, {"shared b", 2}, {"shared a", 2}, {"unreg 1", 1}, {"unreg 0", 1}, {"unreg 2", 0}}},
		{"plain ones are not counted", []step{{"plain", 1}, {"plain", 2}, {"unreg 0", 1}, {"unreg 1", 0}}},
		{"unknown id", []step{{"shared a", 1}, {"unreg 9", 1}}},
		{"again after the last", []step{{"shared a", 1}, {"unreg 0", 0}, {"shared a", 1}, {"unreg 2", 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := NewWorker(ucs.ThreadModeSingle)
			calls := 0
			cb := func() int { calls++; return 0 }
			keyA, keyB := new(int), new(int)
			ids := make([]int, len(tc.steps))
			for i, s := range tc.steps {
				switch s.op {
				case "shared a":
					ids[i] = w.ProgressRegisterShared(keyA, cb)
				case "shared b":
					ids[i] = w.ProgressRegisterShared(keyB, cb)
				case "plain":
					ids[i] = w.ProgressRegister(cb)
				default:
					var n int
					if _, err := fmt.Sscanf(s.op, "unreg %d", &n); err != nil {
						t.Fatal(err)
					}
					id := -1
					if n < len(ids) {
						id = ids[n]
					}
					w.ProgressUnregister(id)
				}
				calls = 0
				w.Progress()
				if calls != s.want {
					t.Fatalf("after step %d (%s): %d callbacks called, want %d", i, s.op, calls, s.want)
				}
			}
		})
	}
}

// TestProgressWhileCounting: Progress runs without a lock while another
// goroutine counts references of a shared callback (a listener's progress
// registered and dropped while the worker progresses); under the race
// detector this fails if Progress reads what the count changes.
func TestProgressWhileCounting(t *testing.T) {
	w := NewWorker(ucs.ThreadModeMulti)
	w.ProgressRegister(func() int { return 0 })
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 1000 {
			w.Progress()
		}
	}()
	key := new(int)
	for range 1000 {
		a := w.ProgressRegisterShared(key, func() int { return 0 })
		b := w.ProgressRegisterShared(key, func() int { return 0 })
		w.ProgressUnregister(b)
		w.ProgressUnregister(a)
	}
	<-done
}

// namedProgress is a Progresser that records its name in *order.
type namedProgress struct {
	name  string
	order *string
}

func (p *namedProgress) Progress() int { *p.order += p.name; return 1 }

// TestSetProgressEnabled: a disabled callback is skipped by Progress and
// keeps its place and id; enabling it again (twice changes nothing) puts
// it back where it was; unregistering a disabled one removes it for good.
func TestSetProgressEnabled(t *testing.T) {
	w := NewWorker(ucs.ThreadModeSingle)
	var order string
	a := w.ProgressRegister(func() int { order += "a"; return 1 })
	b := w.ProgressAdd(&namedProgress{"b", &order})
	c := w.ProgressRegister(func() int { order += "c"; return 1 })
	for _, s := range []struct {
		id      int
		enabled bool
		want    string // the callbacks called, in order
	}{
		{b, false, "ac"},
		{b, false, "ac"},
		{a, false, "c"},
		{a, true, "ac"},
		{b, true, "abc"},
		{b, true, "abc"},
		{99, false, "abc"},
	} {
		w.SetProgressEnabled(s.id, s.enabled)
		order = ""
		if n := w.Progress(); order != s.want || n != len(s.want) {
			t.Errorf("after SetProgressEnabled(%d, %v): called %q (Progress %d), want %q", s.id, s.enabled, order, n, s.want)
		}
	}
	w.SetProgressEnabled(c, false)
	w.ProgressUnregister(c)
	w.SetProgressEnabled(c, true)
	order = ""
	if w.Progress(); order != "ab" {
		t.Errorf("unregistered while disabled, then enabled: called %q", order)
	}
}

// eventProgress is a Progresser that reports events while it has some.
type eventProgress struct{ events, calls int }

func (p *eventProgress) Progress() int {
	p.calls++
	n := p.events
	p.events = 0
	return n
}

// TestDisabledProgress: a disabled callback is called by every Progress
// whose enabled callbacks found nothing and by every ColdProgressEvery-th
// of the others; it stays disabled while it finds nothing, and its first
// event enables it again (adaptive progress).
func TestDisabledProgress(t *testing.T) {
	for _, tc := range []struct {
		name      string
		busy      bool // an enabled callback reports an event on every call
		others    int  // disabled callbacks registered before the one watched
		wantCalls int  // of the disabled callback in 2*ColdProgressEvery calls
	}{
		{"idle worker", false, 0, 2 * ColdProgressEvery},
		{"busy worker", true, 0, 2},
		{"idle worker, two disabled", false, 1, 2 * ColdProgressEvery},
		{"busy worker, two disabled", true, 1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, mode := range []ucs.ThreadMode{ucs.ThreadModeSingle, ucs.ThreadModeMulti} {
				w := NewWorker(mode)
				if tc.busy {
					w.ProgressRegister(func() int { return 1 })
				}
				var others []int
				for range tc.others {
					id := w.ProgressAdd(&eventProgress{})
					w.SetProgressEnabled(id, false)
					others = append(others, id)
				}
				p := &eventProgress{}
				id := w.ProgressAdd(p)
				w.SetProgressEnabled(id, false)
				for range 2 * ColdProgressEvery {
					w.Progress()
				}
				if p.calls != tc.wantCalls || w.ProgressEnabled(id) {
					t.Errorf("%v: disabled callback called %d times in %d Progress calls, want %d; enabled %v", mode, p.calls, 2*ColdProgressEvery, tc.wantCalls, w.ProgressEnabled(id))
				}
				p.events = 1
				got := 0
				for range ColdProgressEvery {
					got += w.Progress()
				}
				if !w.ProgressEnabled(id) || got < 1 {
					t.Errorf("%v: an event (Progress total %d) left the callback disabled", mode, got)
				}
				for _, o := range others {
					if w.ProgressEnabled(o) {
						t.Errorf("%v: the event of callback %d enabled callback %d, which had none", mode, id, o)
					}
				}
				p.calls = 0
				w.Progress()
				if p.calls != 1 {
					t.Errorf("%v: enabled again, called %d times by one Progress", mode, p.calls)
				}
			}
		})
	}
}
