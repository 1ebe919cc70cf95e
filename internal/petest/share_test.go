package petest

import (
	"slices"
	"testing"
)

func TestSplitPattern(t *testing.T) {
	for _, c := range []struct {
		pattern string
		want    []string
	}{
		{"TestA", []string{"TestA"}},
		{"TestA/tcp/np=3", []string{"TestA", "tcp", "np=3"}},
		{"Test(A/B)/tcp", []string{"Test(A/B)", "tcp"}},
		{"Test[/]x/y", []string{"Test[/]x", "y"}},
		{`Test\/x/y`, []string{`Test\/x`, "y"}},
		{"TestA/", []string{"TestA", ""}},
	} {
		if got := splitPattern(c.pattern); !slices.Equal(got, c.want) {
			t.Errorf("splitPattern(%q) = %q, want %q", c.pattern, got, c.want)
		}
	}
}

func TestSelectedBy(t *testing.T) {
	path := []string{"TestAtomics", "tcp", "np=3"}
	for _, c := range []struct {
		run, skip string
		want      bool
	}{
		{"", "", true},
		{"TestAtomics", "", true},
		{"Atomics$", "", true},
		{"TestPut", "", false},
		{"TestAtomics/sm", "", false},
		{"TestAtomics/tcp", "", true},
		{"TestAtomics/tcp/np=3/deeper", "", true}, // a prefix of what runs
		{"TestAtomics/tcp/np=4", "", false},
		{"", "TestAtomics", false},
		{"", "TestAtomics/tcp", false},
		{"", "TestAtomics/sm", true},
		{"", "TestAtomics/tcp/np=3/deeper", true}, // skips only deeper tests
		{"TestAtomics", "/mixed", true},
		{"TestAtomics", "/tcp", false},
		{"(", "", false}, // an invalid pattern selects nothing
	} {
		if got := selectedBy(c.run, c.skip, path); got != c.want {
			t.Errorf("selectedBy(run %q, skip %q, %q) = %v, want %v", c.run, c.skip, path, got, c.want)
		}
	}
}

func TestSharedPassed(t *testing.T) {
	out := "[pe 0] --- PASS: TestA/sm/np=2 (0.01s)\n[pe 1] --- PASS: TestA/sm/np=2 (0.01s)\n" +
		"[pe 0] --- PASS: TestB/sm/np=2 (0.01s)\n" +
		"[pe 0]     x_test.go:9: no heap here\n[pe 0] --- SKIP: TestC/sm/np=2 (0.00s)\n[pe 1]     x_test.go:9: no heap here\n[pe 1] --- SKIP: TestC/sm/np=2 (0.00s)\n" +
		"[pe 0] --- FAIL: TestD/sm/np=2 (PE ends the job)\n"
	j := &sharedJob{np: 2, output: out, code: 1}
	for _, c := range []struct {
		name string
		ok   bool
		skip string
	}{
		{"TestA/sm/np=2", true, ""},
		{"TestA/sm/np=2/x", false, ""},
		{"TestA/sm", false, ""},
		{"TestB/sm/np=2", false, ""}, // one PE of two
		{"TestC/sm/np=2", true, "x_test.go:9: no heap here"},
		{"TestD/sm/np=2", false, ""},
		{"TestE/sm/np=2", false, ""},
	} {
		if ok, skip := j.passed(c.name); ok != c.ok || skip != c.skip {
			t.Errorf("passed(%q) = %v, %q, want %v, %q", c.name, ok, skip, c.ok, c.skip)
		}
	}
}
