package petest

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// benchPrefix starts the result lines a PE prints for the parent.
const benchPrefix = "PETEST-BENCH "

// BenchTime is how long PE 0 measures each benchmark.
const BenchTime = time.Second

// Bench runs a benchmark in a real job of np PEs. In every PE, body runs
// once (the job's benchmark binary is started with -test.benchtime=1x so all
// PEs make the same collective calls); body calls measure with a function
// that does the operation n times. PE 0 times it with n growing until a run
// lasts BenchTime, as the testing package does (testing.Benchmark itself
// cannot run inside a benchmark), and counts allocations; the other PEs
// skip it. The parent reports PE 0's ns/op, B/op and allocs/op as the
// benchmark's own.
//
// bytesPerOp, when positive, is the data one operation moves; the parent
// then also reports MB/s.
func Bench(b *testing.B, np int, bytesPerOp int64, body func(measure func(fn func(n int)))) {
	b.Helper()
	if IsPE() {
		body(func(fn func(n int)) {
			if os.Getenv("GOSHMEM_RANK") != "0" {
				return
			}
			n, ns, bytes, allocs := measure(fn)
			fmt.Printf("%s%d %g %g %g\n", benchPrefix, n, ns, bytes, allocs)
		})
		return
	}
	b.ReportAllocs() // show B/op and allocs/op; report replaces the values with PE 0's
	if v, ok := benchCache[b.Name()]; ok {
		// The framework asks again with a larger b.N; the job already
		// measured with an adaptive N of its own.
		report(b, v, bytesPerOp)
		return
	}
	code, out, timedOut, err := launch(DefaultTimeout, np, []string{"-test.run=^$", "-test.bench=" + runPattern(b.Name()), "-test.benchtime=1x", "-test.count=1"}, nil, false)
	if timedOut {
		b.Fatalf("benchmark job of %d PEs did not end within %v; output, with the stall reports of its PEs:\n%s", np, DefaultTimeout, out)
	}
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
		report(b, v, bytesPerOp)
		return
	}
	b.Fatalf("benchmark job printed no result; output:\n%s", out)
}

// benchCache keeps each benchmark's result: iterations, ns/op, B/op,
// allocs/op.
var benchCache = map[string][4]float64{}

func report(b *testing.B, v [4]float64, bytesPerOp int64) {
	b.ReportMetric(v[1], "ns/op")
	if bytesPerOp > 0 && v[1] > 0 {
		b.ReportMetric(float64(bytesPerOp)*1e3/v[1], "MB/s")
	}
	b.ReportMetric(v[2], "B/op")
	b.ReportMetric(v[3], "allocs/op")
	b.ReportMetric(v[0], "pe-iters")
}

// measure times fn(n) for growing n until one run lasts BenchTime, and
// returns the last n with its nanoseconds, bytes and allocations per
// operation.
func measure(fn func(n int)) (n int, ns, bytes, allocs float64) {
	var before, after runtime.MemStats
	n = 1
	for {
		runtime.GC()
		runtime.ReadMemStats(&before)
		start := time.Now()
		fn(n)
		d := time.Since(start)
		runtime.ReadMemStats(&after)
		if d >= BenchTime || n >= 1e9 {
			return n, float64(d.Nanoseconds()) / float64(n),
				float64(after.TotalAlloc-before.TotalAlloc) / float64(n),
				float64(after.Mallocs-before.Mallocs) / float64(n)
		}
		// Aim 20% past the target, growing at most 100-fold, as testing does.
		next := int(float64(n) * 1.2 * float64(BenchTime) / float64(max(d, 1)))
		n = min(max(next, n+1), 100*n, 1e9)
	}
}
