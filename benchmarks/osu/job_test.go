package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goshmem/goshmem/launcher"
	"github.com/goshmem/goshmem/shmemtest"
)

// osuBin is this program, built once by TestMain for the job tests.
var osuBin string

func TestMain(m *testing.M) {
	bin, cleanup, err := launcher.BuildProgram(".")
	if err != nil {
		fmt.Fprintf(os.Stderr, "build benchmarks/osu: %v\n", err)
		os.Exit(1)
	}
	osuBin = bin
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// runJob runs the program as a job of np PEs through the launcher
// goshmem-run uses, with env added to the PEs' environment, and returns
// its exit code, standard output and standard error.
func runJob(t *testing.T, np int, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out, errb lockedBuffer
	code, err := launcher.Run(ctx, launcher.Options{NP: np, Program: osuBin, Args: args, Env: env,
		Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Logf: func(f string, a ...any) {
			fmt.Fprintf(&errb, "goshmem-run: "+f+"\n", a...)
		}})
	// The launcher is done writing once Run returns.
	if ctx.Err() != nil {
		t.Fatalf("osu %q with %d PEs did not end in time; output:\n%s%s", args, np, out.String(), errb.String())
	}
	if code == 0 && err != nil {
		t.Fatalf("osu %q: %v", args, err)
	}
	if left := shmemtest.Leftovers(); len(left) > 0 {
		t.Errorf("osu %q left %v in /dev/shm", args, left)
	}
	return code, out.String(), errb.String()
}

// lockedBuffer collects output that the launcher writes from several
// goroutines (PE output and its own messages).
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// mustRun is runJob for a job that must succeed.
func mustRun(t *testing.T, np int, env []string, args ...string) string {
	t.Helper()
	code, out, errs := runJob(t, np, env, args...)
	if code != 0 {
		t.Fatalf("osu %q with %d PEs %v: exit %d; stdout:\n%s\nstderr:\n%s", args, np, env, code, out, errs)
	}
	return out
}

// tinyArgs are the sizes and iterations of the job tests: fast, and
// enough to run every loop.
var tinyArgs = []string{"-min", "1", "-max", "64", "-iters", "20", "-warmup", "2"}

// p2pTests are the point-to-point tests with their metric and columns.
var p2pTests = []struct {
	name, metric string
	cols         []string
}{
	{"put", metricLatency, []string{colSize, colLatency}},
	{"get", metricLatency, []string{colSize, colLatency}},
	{"put_nb", metricLatency, []string{colSize, colLatency}},
	{"get_nb", metricLatency, []string{colSize, colLatency}},
	{"put_mr", metricRate, []string{colSize, colRate}},
	{"put_bw", metricBandwidth, []string{colSize, colBandwidth}},
	{"get_bw", metricBandwidth, []string{colSize, colBandwidth}},
}

// checkSizeRows checks the rows of a table by size: sizes 1..64 in order,
// each with a positive, finite figure.
func checkSizeRows(t *testing.T, r *Report, metric string) {
	t.Helper()
	want := []int{1, 2, 4, 8, 16, 32, 64}
	if len(r.Rows) != len(want) {
		t.Fatalf("%s: %d rows, want sizes %v: %+v", r.Test, len(r.Rows), want, r.Rows)
	}
	for i, row := range r.Rows {
		if row.Size != want[i] {
			t.Errorf("%s: row %d has size %d, want %d", r.Test, i, row.Size, want[i])
		}
		if v := row.value(metric); !(v > 0) || v > 1e12 {
			t.Errorf("%s: size %d: %s %v, want a positive figure", r.Test, row.Size, metric, v)
		}
	}
}

// TestPointToPoint runs each point-to-point test as 2 PEs, as a table and
// as JSON, and checks both.
func TestPointToPoint(t *testing.T) {
	t.Parallel() // its jobs mostly wait for their processes to start
	for _, tt := range p2pTests {
		t.Run(tt.name, func(t *testing.T) {
			text := mustRun(t, 2, nil, append([]string{tt.name}, tinyArgs...)...)
			r, err := parseText(strings.NewReader(text))
			if err != nil {
				t.Fatalf("table does not parse: %v\n%s", err, text)
			}
			if r.Title != commands[tt.name].title || r.Test != tt.name {
				t.Errorf("title %q (test %q), want %q (%s)", r.Title, r.Test, commands[tt.name].title, tt.name)
			}
			if !cmpStrings(r.Columns, tt.cols) || r.Metric != tt.metric {
				t.Errorf("columns %q metric %s, want %q %s", r.Columns, r.Metric, tt.cols, tt.metric)
			}
			checkSizeRows(t, r, tt.metric)

			js := mustRun(t, 2, nil, append([]string{tt.name, "-json"}, tinyArgs...)...)
			jr := decodeReport(t, js)
			checkSizeRows(t, jr, tt.metric)
			if jr.Test != tt.name || jr.Metric != tt.metric || jr.NPEs != 2 || !cmpStrings(jr.Columns, tt.cols) {
				t.Errorf("JSON test %q metric %q npes %d columns %q; want %q %q 2 %q", jr.Test, jr.Metric, jr.NPEs, jr.Columns, tt.name, tt.metric, tt.cols)
			}
			if o := jr.Options; o == nil || o.Min != 1 || o.Max != 64 || o.Iters != 20 || o.ItersLarge != 20 || o.Warmup != 2 || o.Memory != "heap" {
				t.Errorf("JSON options %+v, want min 1, max 64, 20 iterations, 2 warm-up, heap", o)
			}
			for _, row := range jr.Rows {
				if row.Iterations != 20 {
					t.Errorf("size %d: %d iterations, want 20", row.Size, row.Iterations)
				}
			}
			if tr := jr.Transport; tr == nil || tr.SharedPEs != 2 || tr.UCXTLS != os.Getenv("UCX_TLS") {
				t.Errorf("JSON transport %+v, want UCX_TLS %q and 2 PEs sharing memory", tr, os.Getenv("UCX_TLS"))
			}
		})
	}
}

// decodeReport decodes the standard output of a -json run, which must be
// exactly one JSON document.
func decodeReport(t *testing.T, out string) *Report {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	var r Report
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("-json output is not a report: %v\n%s", err, out)
	}
	if dec.More() {
		t.Fatalf("-json printed more than one document:\n%s", out)
	}
	return &r
}

func cmpStrings(a, b []string) bool {
	return strings.Join(a, "\x00") == strings.Join(b, "\x00")
}

// TestAtomicsAndBarrier runs atomics and barrier (full) as 2 and 3 PEs.
func TestAtomicsAndBarrier(t *testing.T) {
	t.Parallel() // its jobs mostly wait for their processes to start
	for _, np := range []int{2, 3} {
		t.Run(fmt.Sprintf("np=%d", np), func(t *testing.T) {
			r := decodeReport(t, mustRun(t, np, nil, "atomics", "-json", "-iters", "50", "-warmup", "5"))
			var ops []string
			for _, row := range r.Rows {
				ops = append(ops, strings.TrimPrefix(row.Op, "shmem_int64_"))
				if !(row.Latency > 0) || !(row.MOps > 0) || row.Iterations != 50 {
					t.Errorf("atomics row %+v: want positive latency and rate, 50 iterations", row)
				}
			}
			if want := []string{"fadd", "finc", "add", "inc", "cswap", "swap", "fetch", "set"}; !cmpStrings(ops, want) {
				t.Errorf("atomics operations %q, want %q", ops, want)
			}
			text := mustRun(t, np, nil, "barrier", "-f", "-iters", "30", "-warmup", "3")
			b, err := parseText(strings.NewReader(text))
			if err != nil {
				t.Fatalf("barrier table: %v\n%s", err, text)
			}
			if len(b.Rows) != 1 || b.Test != "barrier" {
				t.Fatalf("barrier table has %d rows (test %q), want 1:\n%s", len(b.Rows), b.Test, text)
			}
			row := b.Rows[0]
			if row.Iterations != 30 || row.MinLatency > row.Latency || row.Latency > row.MaxLatency || !(row.MaxLatency > 0) {
				t.Errorf("barrier row %+v: want min <= avg <= max, positive, 30 iterations\n%s", row, text)
			}
		})
	}
}

// TestPairs runs the tests that pair PE i with PE i+n/2 as 4 PEs (two
// pairs) and 3 PEs (one pair, PE 2 idle).
func TestPairs(t *testing.T) {
	t.Parallel() // its jobs mostly wait for their processes to start
	for _, tt := range []struct {
		np     int
		args   []string
		metric string
	}{
		{4, []string{"put_mr", "-max", "64", "-iters", "10", "-warmup-large", "2"}, metricRate},
		{4, append([]string{"put"}, tinyArgs...), metricLatency},
		{4, append([]string{"get_nb"}, tinyArgs...), metricLatency},
		{4, append([]string{"put_bw"}, tinyArgs...), metricBandwidth},
		{3, append([]string{"get"}, tinyArgs...), metricLatency},
	} {
		t.Run(fmt.Sprintf("%s/np=%d", tt.args[0], tt.np), func(t *testing.T) {
			r := decodeReport(t, mustRun(t, tt.np, nil, append(tt.args, "-json")...))
			if r.NPEs != tt.np {
				t.Errorf("npes %d, want %d", r.NPEs, tt.np)
			}
			checkSizeRows(t, r, tt.metric)
		})
	}
}

// TestGlobalMemoryAndTCP runs put and get with global memory, over shared
// memory and over loopback TCP only.
func TestGlobalMemoryAndTCP(t *testing.T) {
	t.Parallel() // its jobs mostly wait for their processes to start
	for _, tr := range []struct {
		name   string
		env    []string
		shared int
	}{{"sm", nil, 2}, {"tcp", []string{"UCX_TLS=tcp,self"}, 1}} {
		for _, test := range []string{"put", "get_bw"} {
			t.Run(tr.name+"/"+test, func(t *testing.T) {
				r := decodeReport(t, mustRun(t, 2, tr.env, append([]string{test, "-json", "global"}, tinyArgs...)...))
				if r.Options.Memory != "global" {
					t.Errorf("memory %q, want global", r.Options.Memory)
				}
				wantTLS := os.Getenv("UCX_TLS")
				if tr.env != nil {
					wantTLS = "tcp,self"
				}
				if r.Transport.UCXTLS != wantTLS || (tr.env != nil && r.Transport.SharedPEs != tr.shared) {
					t.Errorf("transport %+v, want UCX_TLS %q and %d PEs sharing memory", r.Transport, wantTLS, tr.shared)
				}
				checkSizeRows(t, r, r.Metric)
			})
		}
	}
}

// TestJobErrors checks that bad command lines and job sizes end the job
// with a non-zero status and a message.
func TestJobErrors(t *testing.T) {
	for _, tt := range []struct {
		np   int
		args []string
		code int
		msg  string
	}{
		{2, []string{"put", "-min", "128", "-max", "64"}, 2, "bad size range: -min 128 is larger than -max 64"},
		{2, []string{"get", "-mem", "disk"}, 2, `-mem "disk"`},
		{1, []string{"put", "-max", "8"}, 1, "put: this test requires at least two processes, not 1"},
		{1, []string{"get_bw", "-max", "8"}, 1, "get_bw: this test requires at least two processes, not 1"},
		{1, []string{"barrier"}, 1, "barrier: this test requires at least two processes, not 1"},
	} {
		code, out, errs := runJob(t, tt.np, nil, tt.args...)
		if code != tt.code || !strings.Contains(errs, tt.msg) {
			t.Errorf("osu %q with %d PEs: exit %d, want %d with %q; stdout:\n%s\nstderr:\n%s", tt.args, tt.np, code, tt.code, tt.msg, out, errs)
		}
	}
}
