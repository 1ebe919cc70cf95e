package main

import (
	"fmt"
	"strings"
	"testing"
)

// TestCollectives runs each collective test as 2 and 3 PEs, as a full
// table and as JSON.
func TestCollectives(t *testing.T) {
	t.Parallel() // its jobs mostly wait for their processes to start
	for _, name := range collNames {
		for _, np := range []int{2, 3} {
			t.Run(fmt.Sprintf("%s/np=%d", name, np), func(t *testing.T) {
				args := []string{name, "-f", "-min", "4", "-max", "256", "-iters", "10", "-warmup", "1"}
				text := mustRun(t, np, nil, args...)
				r, err := parseText(strings.NewReader(text))
				if err != nil {
					t.Fatalf("table does not parse: %v\n%s", err, text)
				}
				want := []string{colSize, colAvgLatency, colMinLatency, colMaxLatency, colIterations}
				if !cmpStrings(r.Columns, want) || r.Test != name {
					t.Errorf("columns %q test %q, want %q %s", r.Columns, r.Test, want, name)
				}
				sizes := []int{4, 8, 16, 32, 64, 128, 256}
				if len(r.Rows) != len(sizes) {
					t.Fatalf("%d rows, want sizes %v:\n%s", len(r.Rows), sizes, text)
				}
				for i, row := range r.Rows {
					if row.Size != sizes[i] || row.Iterations != 10 || row.MinLatency > row.Latency || row.Latency > row.MaxLatency {
						t.Errorf("row %+v: want size %d, 10 iterations, min <= avg <= max", row, sizes[i])
					}
				}
				jr := decodeReport(t, mustRun(t, np, nil, append(args, "-json")...))
				if jr.NPEs != np || len(jr.Rows) != len(sizes) || jr.Metric != metricLatency {
					t.Errorf("JSON npes %d, %d rows, metric %q; want %d, %d, latency", jr.NPEs, len(jr.Rows), jr.Metric, np, len(sizes))
				}
			})
		}
	}
}
