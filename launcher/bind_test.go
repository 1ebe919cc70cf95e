package launcher

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestParseBinding(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Binding
		ok   bool
	}{
		{"", BindNone, true}, {"none", BindNone, true}, {"core", BindCore, true},
		{"socket", BindNone, false}, {"Core", BindNone, false},
	} {
		got, err := ParseBinding(tt.in)
		if got != tt.want || (err == nil) != tt.ok {
			t.Errorf("ParseBinding(%q) = %v, %v; want %v, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
		if tt.ok && tt.in != "" && got.String() != tt.in {
			t.Errorf("ParseBinding(%q).String() = %q", tt.in, got)
		}
	}
}

// TestBindCore: with BindCore every PE runs on the one CPU of its local
// rank, from its first thread (the shell's CPU list is that of the
// process it started as); the launcher's own threads keep their CPUs.
func TestBindCore(t *testing.T) {
	cpus, err := allowedCPUs()
	if err != nil {
		t.Fatal(err)
	}
	const np = 3
	for _, lm := range launchModes[:3] { // in process, an agent, agents on two hosts
		for _, bind := range []Binding{BindNone, BindCore} {
			t.Run(lm.name+"/"+bind.String(), func(t *testing.T) {
				r := runJob(t, context.Background(), np, "", func(o *Options) {
					lm.set(t, o)
					o.BindTo = bind
					o.Program, o.Args = "sh", []string{"-c", `echo "$GOSHMEM_RANK $GOSHMEM_LOCAL_RANK $(grep Cpus_allowed_list /proc/self/status | cut -f2)"`}
				})
				if r.code != 0 || r.err != nil {
					t.Fatalf("Run = %d, %v; stderr:\n%s", r.code, r.err, r.stderr)
				}
				lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
				if len(lines) != np {
					t.Fatalf("%d lines, want %d:\n%s", len(lines), np, r.stdout)
				}
				for _, line := range lines {
					var rank, local int
					var list string
					if _, err := fmt.Sscan(line, &rank, &local, &list); err != nil {
						t.Fatalf("line %q: %v", line, err)
					}
					one := list == strconv.Itoa(cpus[local%len(cpus)])
					if bind == BindCore && !one {
						t.Errorf("PE %d (local rank %d) runs on CPUs %s, want %d alone", rank, local, list, cpus[local%len(cpus)])
					}
					if bind == BindNone && len(cpus) > 1 && !strings.ContainsAny(list, ",-") {
						t.Errorf("PE %d runs on CPU %s alone without binding", rank, list)
					}
				}
				after, err := allowedCPUs()
				if err != nil || !slices.Equal(after, cpus) {
					t.Errorf("the launcher's CPUs after the job: %v, %v; before %v", after, err, cpus)
				}
			})
		}
	}
}
