package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/goshmem/goshmem/launcher"
	"github.com/goshmem/goshmem/shmemtest"
)

// TestJob runs the program, briefly, as jobs over shared memory and tcp:
// every test's rows come out, and its checks (the GUPS table's sum, the
// maps' key counts, the round trips' results) pass, or the job would exit
// 1.
func TestJob(t *testing.T) {
	bin, cleanup, err := launcher.BuildProgram(".")
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	row := func(test, way string) *regexp.Regexp {
		return regexp.MustCompile(`(?m)^` + test + ` +` + way + ` +[0-9.]+ `)
	}
	for _, c := range []struct {
		name string
		np   int
		env  []string
		args []string
	}{
		{"sm", 3, nil, nil},
		{"tcp", 2, []string{"UCX_TLS=tcp,self"}, nil},
		{"self", 1, nil, []string{"-t", "rtt", "-peer", "0"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			var out bytes.Buffer
			args := append([]string{"-n", "200", "-rounds", "2", "-table", "512", "-updates", "300", "-inserts", "300"}, c.args...)
			code, err := launcher.Run(ctx, launcher.Options{NP: c.np, Program: bin, Args: args, Env: c.env,
				Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out})
			if err != nil || code != 0 {
				t.Fatalf("exit %d, %v; output:\n%s", code, err, out.String())
			}
			want := [][2]string{{"rtt", "am"}, {"rtt", "rpc"}, {"rtt", "rpc-invoke"}}
			if c.args == nil {
				want = append(want, [][2]string{{"gups", "atomic"}, {"gups", "rpc"}, {"gups", "aggregated"}, {"map", "cas"}, {"map", "aggregated"}}...)
			}
			for _, w := range want {
				if !row(w[0], w[1]).MatchString(out.String()) {
					t.Errorf("no row %s %s; output:\n%s", w[0], w[1], out.String())
				}
			}
			if left := shmemtest.Leftovers(); len(left) > 0 {
				t.Errorf("left %v in /dev/shm", left)
			}
		})
	}
}
