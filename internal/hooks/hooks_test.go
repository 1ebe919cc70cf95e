package hooks

import "testing"

func TestSet(t *testing.T) {
	var s Set[func() int]
	if len(s.All()) != 0 {
		t.Fatal("a zero Set is not empty")
	}
	rm1 := s.Add(func() int { return 1 })
	rm2 := s.Add(func() int { return 2 })
	sum := func() (n int) {
		for _, fn := range s.All() {
			n += fn()
		}
		return n
	}
	if got := sum(); got != 3 {
		t.Errorf("sum of both: %d, want 3", got)
	}
	rm1()
	rm1() // again: nothing
	if got := sum(); got != 2 {
		t.Errorf("after removing the first: %d, want 2", got)
	}
	rm2()
	if got := len(s.All()); got != 0 {
		t.Errorf("%d left after removing both", got)
	}
}
