// Package examples_test runs the example programs as real jobs through the
// launcher that goshmem-run uses.
package examples_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/petest"
	"github.com/goshmem/goshmem/launcher"
	"github.com/goshmem/goshmem/shmemtest"
)

// buildExample builds the example program of dir, removed at the end of
// the test, and returns its path.
func buildExample(t *testing.T, dir string) string {
	t.Helper()
	bin, cleanup, err := launcher.BuildProgram(dir)
	if err != nil {
		t.Fatalf("build %s: %v", dir, err)
	}
	t.Cleanup(cleanup)
	return bin
}

// runBinary runs the built example bin of dir as a job of np PEs with env
// added to their environment, fails the test unless it exits 0 and leaves
// nothing in /dev/shm, and returns its output.
func runBinary(t *testing.T, dir, bin string, np int, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	code, err := launcher.Run(ctx, launcher.Options{NP: np, Program: bin, Args: args, Env: env,
		Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out})
	if err != nil || code != 0 {
		t.Fatalf("%s with %d PEs %v: exit %d, %v; output:\n%s", dir, np, env, code, err, out.String())
	}
	if left := shmemtest.Leftovers(); len(left) > 0 {
		t.Errorf("%s left %v in /dev/shm", dir, left)
	}
	return out.String()
}

// transports are the ways the examples below run: over shared memory (the
// default) and over loopback TCP only.
var transports = []struct {
	name string
	env  []string
}{{"sm", nil}, {"tcp", []string{"UCX_TLS=tcp,self"}}}

// runEverywhere builds the example of dir once and runs it with args as a
// job of each size in nps over each transport, calling check with each
// job's output.
func runEverywhere(t *testing.T, dir string, nps []int, args []string, check func(t *testing.T, np int, out string)) {
	t.Helper()
	t.Parallel() // the jobs wait for their processes to start and meet
	bin := buildExample(t, dir)
	for _, tr := range transports {
		for _, np := range nps {
			t.Run(fmt.Sprintf("%s/np=%d", tr.name, np), func(t *testing.T) {
				check(t, np, runBinary(t, dir, bin, np, tr.env, args...))
			})
		}
	}
}

func TestHello(t *testing.T) {
	t.Parallel()
	bin := buildExample(t, "./hello")
	for _, np := range []int{1, 3, 4} {
		out := runBinary(t, "./hello", bin, np, nil)
		for pe := 0; pe < np; pe++ {
			line := fmt.Sprintf("Hello from PE %d of %d\n", pe, np)
			if strings.Count(out, line) != 1 {
				t.Errorf("np=%d: %q printed %d times; output:\n%s", np, line, strings.Count(out, line), out)
			}
		}
	}
}

// helloRounds is how many times TestHelloEveryTransportSelection runs each
// job; raise it to hunt hangs (the note of issue 19 ran 100 per selection).
var helloRounds = flag.Int("hello.rounds", 1, "runs of each job of TestHelloEveryTransportSelection")

// TestHelloEveryTransportSelection runs hello, which ends with an atomic,
// a barrier and Finalize, under every transport selection that can run a
// job on one node, at 2, 3 and 5 PEs. Selections that reach some heaps
// only through software atomics over shared-memory messages (posix without
// sysv, while the heap is allocated by sysv) hung in Finalize: a PE waited
// for a flush reply from a PE already in the bootstrap's barrier, which
// does not progress the worker.
func TestHelloEveryTransportSelection(t *testing.T) {
	t.Parallel()
	bin := buildExample(t, "./hello")
	for _, tls := range []string{"all", "sm", "shm", "posix", "sysv", "posix,self", "posix,cma", "sysv,self",
		"^sysv", "^posix", "^cma", "tcp", "tcp,self", "tcp,posix"} {
		for _, np := range []int{2, 3, 5} {
			t.Run(fmt.Sprintf("%s/np=%d", tls, np), func(t *testing.T) {
				if np != 3 && !petest.Full() {
					t.Skipf("np=%d is in the full matrix only: %s=1 runs it (.ci/run does)", np, petest.FullEnv)
				}
				for range *helloRounds {
					out := runBinary(t, "./hello", bin, np, []string{"UCX_TLS=" + tls})
					if got := strings.Count(out, "Hello from PE"); got != np {
						t.Fatalf("%d hellos; output:\n%s", got, out)
					}
				}
			})
		}
	}
}

func TestRing(t *testing.T) {
	t.Parallel()
	bin := buildExample(t, "./ring")
	for _, tt := range []struct{ np, laps int }{{1, 1}, {2, 3}, {4, 1}, {5, 2}} {
		out := runBinary(t, "./ring", bin, tt.np, nil, fmt.Sprintf("-laps=%d", tt.laps))
		want := fmt.Sprintf("token after %d lap(s) around %d PEs: %d\n", tt.laps, tt.np, tt.laps*tt.np*(tt.np-1)/2)
		if !strings.Contains(out, want) {
			t.Errorf("np=%d laps=%d: want %q; output:\n%s", tt.np, tt.laps, want, out)
		}
	}
}

func TestHeat(t *testing.T) {
	const cells, steps = 101, 60 // cells not a multiple of the job sizes
	runEverywhere(t, "./heat", []int{1, 3, 4}, []string{fmt.Sprintf("-cells=%d", cells), fmt.Sprintf("-steps=%d", steps)},
		func(t *testing.T, np int, out string) {
			want := fmt.Sprintf("heat: %d cells, %d steps on %d PEs: 0 cells differ from the serial solution", cells, steps, np)
			if !strings.Contains(out, want) {
				t.Errorf("want %q; output:\n%s", want, out)
			}
		})
}

func TestHistogram(t *testing.T) {
	runEverywhere(t, "./histogram", []int{1, 3, 4}, []string{"-values=20000", "-bins=13"},
		func(t *testing.T, np int, out string) {
			want := fmt.Sprintf("histogram: 20000 values from each of %d PEs in 13 bins: %d counted, OK", np, 20000*np)
			if !strings.Contains(out, want) {
				t.Errorf("want %q; output:\n%s", want, out)
			}
		})
}

func TestWorkqueue(t *testing.T) {
	runEverywhere(t, "./workqueue", []int{1, 2, 4}, []string{"-tasks=500"},
		func(t *testing.T, np int, out string) {
			want := fmt.Sprintf("workqueue: 500 tasks on %d PEs: every task done once with the right result", np)
			if !strings.Contains(out, want) {
				t.Errorf("want %q; output:\n%s", want, out)
			}
		})
}

func TestWordcount(t *testing.T) {
	runEverywhere(t, "./wordcount", []int{1, 3}, []string{"-words=5000"},
		func(t *testing.T, np int, out string) {
			want := fmt.Sprintf("%d words on %d PEs; the most frequent: the=", 5000*np, np)
			if !strings.Contains(out, want) || strings.Contains(out, ", want ") {
				t.Errorf("want %q and no wrong count; output:\n%s", want, out)
			}
		})
}
