// Package examples_test runs the example programs as real jobs through the
// launcher that goshmem-run uses.
package examples_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/petest"
	"github.com/goshmem/goshmem/launcher"
)

func runExample(t *testing.T, dir string, np int, args ...string) string {
	t.Helper()
	bin, cleanup, err := launcher.BuildProgram(dir)
	if err != nil {
		t.Fatalf("build %s: %v", dir, err)
	}
	defer cleanup()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	code, err := launcher.Run(ctx, launcher.Options{NP: np, Program: bin, Args: args,
		Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out})
	if err != nil || code != 0 {
		t.Fatalf("%s with %d PEs: exit %d, %v; output:\n%s", dir, np, code, err, out.String())
	}
	if left := petest.ShmLeftovers(); len(left) > 0 {
		t.Errorf("%s left %v in /dev/shm", dir, left)
	}
	return out.String()
}

func TestHello(t *testing.T) {
	for _, np := range []int{1, 3, 4} {
		out := runExample(t, "./hello", np)
		for pe := 0; pe < np; pe++ {
			line := fmt.Sprintf("Hello from PE %d of %d\n", pe, np)
			if strings.Count(out, line) != 1 {
				t.Errorf("np=%d: %q printed %d times; output:\n%s", np, line, strings.Count(out, line), out)
			}
		}
	}
}

func TestRing(t *testing.T) {
	for _, tt := range []struct{ np, laps int }{{1, 1}, {2, 3}, {4, 1}, {5, 2}} {
		out := runExample(t, "./ring", tt.np, fmt.Sprintf("-laps=%d", tt.laps))
		want := fmt.Sprintf("token after %d lap(s) around %d PEs: %d\n", tt.laps, tt.np, tt.laps*tt.np*(tt.np-1)/2)
		if !strings.Contains(out, want) {
			t.Errorf("np=%d laps=%d: want %q; output:\n%s", tt.np, tt.laps, want, out)
		}
	}
}
