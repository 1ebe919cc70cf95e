package petest

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/goshmem/goshmem/launcher"
)

// benchPrefix starts the result lines a PE prints for the parent.
const benchPrefix = "PETEST-BENCH "

// BenchTime is how long PE 0 measures each benchmark.
const BenchTime = "1s"

// Bench runs a benchmark in a real job of np PEs. In every PE, body runs
// once (the job's benchmark binary is started with -test.benchtime=1x so all
// PEs make the same collective calls); body calls measure with the function
// to time, which PE 0 runs under testing.Benchmark (b.N adapts to BenchTime
// inside the PE) and the other PEs skip. The parent reports PE 0's ns/op,
// B/op and allocs/op as the benchmark's own.
func Bench(b *testing.B, np int, body func(measure func(fn func(b *testing.B)))) {
	b.Helper()
	if IsPE() {
		body(func(fn func(b *testing.B)) {
			if os.Getenv("GOSHMEM_RANK") != "0" {
				return
			}
			// The outer benchmark keeps the 1x it started with; the inner one
			// adapts.
			if f := flag.Lookup("test.benchtime"); f != nil {
				f.Value.Set(BenchTime)
			}
			r := testing.Benchmark(fn)
			ns := float64(r.T.Nanoseconds()) / float64(max(r.N, 1))
			fmt.Printf("%s%d %g %d %d\n", benchPrefix, r.N, ns, r.AllocedBytesPerOp(), r.AllocsPerOp())
		})
		return
	}
	if v, ok := benchCache[b.Name()]; ok {
		// The framework asks again with a larger b.N; the job already
		// measured with an adaptive N of its own.
		report(b, v)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	defer cancel()
	w := &lockedWriter{buf: new(bytes.Buffer)}
	code, err := launcher.Run(ctx, launcher.Options{
		NP: np, Program: os.Args[0],
		Args:   []string{"-test.run=^$", "-test.bench=" + runPattern(b.Name()), "-test.benchtime=1x", "-test.count=1"},
		Env:    []string{childEnv + "=1"},
		Stdin:  strings.NewReader(""),
		Stdout: w, Stderr: w,
		Logf: func(format string, args ...any) { fmt.Fprintf(w, "goshmem-run: "+format+"\n", args...) },
	})
	out := w.String()
	if err != nil || code != 0 {
		b.Fatalf("benchmark job of %d PEs: exit %d, %v; output:\n%s", np, code, err, out)
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		i := strings.Index(line, benchPrefix)
		if i < 0 {
			continue
		}
		var v [4]float64
		f := strings.Fields(line[i+len(benchPrefix):])
		if len(f) != len(v) {
			continue
		}
		for j := range v {
			v[j], _ = strconv.ParseFloat(f[j], 64)
		}
		benchCache[b.Name()] = v
		report(b, v)
		return
	}
	b.Fatalf("benchmark job printed no result; output:\n%s", out)
}

// benchCache keeps each benchmark's result: iterations, ns/op, B/op,
// allocs/op.
var benchCache = map[string][4]float64{}

func report(b *testing.B, v [4]float64) {
	b.ReportMetric(v[1], "ns/op")
	b.ReportMetric(v[2], "B/op")
	b.ReportMetric(v[3], "allocs/op")
	b.ReportMetric(v[0], "pe-iters")
}
