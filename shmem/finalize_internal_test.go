package shmem

import "testing"

// TestPanicking: panicking (what Finalize asks) is true in the deferred
// calls of a panic, deferred directly or called from a deferred function
// however deep, and false outside one and after a recovery has ended it.
// A deferred function that recovers is still part of the panic until it
// returns (Finalize's doc says so).
func TestPanicking(t *testing.T) {
	var deep func(n int) bool
	deep = func(n int) bool {
		if n == 0 {
			return panicking()
		}
		return deep(n - 1)
	}
	for _, c := range []struct {
		name string
		run  func(got *bool)
		want bool
	}{
		{"no panic", func(got *bool) { *got = panicking() }, false},
		{"deferred, no panic", func(got *bool) { defer func() { *got = panicking() }() }, false},
		{"deferred directly", func(got *bool) {
			defer func() { recover() }()
			defer func() { *got = panicking() }()
			panic("x")
		}, true},
		{"called 200 frames below a deferred function", func(got *bool) {
			defer func() { recover() }()
			defer func() { *got = deep(200) }()
			panic("x")
		}, true},
		{"after a deferred function recovered", func(got *bool) {
			defer func() { *got = panicking() }()
			defer func() { recover() }()
			panic("x")
		}, false},
		{"in the deferred function that recovers", func(got *bool) {
			defer func() {
				recover()
				*got = panicking()
			}()
			panic("x")
		}, true},
	} {
		var got bool
		c.run(&got)
		if got != c.want {
			t.Errorf("%s: panicking() = %v, want %v", c.name, got, c.want)
		}
	}
}
