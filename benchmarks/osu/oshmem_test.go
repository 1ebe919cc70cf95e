package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/petest"
)

// TestReferenceProgram builds oshmem/osu_oshm.c, the same loops against a C
// OpenSHMEM, with oshcc and runs some of its tests as 2 PEs with oshrun:
// each table must parse and line up with this program's (title, columns,
// row keys), so that compare pairs every row. Without oshcc and oshrun
// (Debian: openmpi-bin libopenmpi-dev) it is skipped, saying so.
func TestReferenceProgram(t *testing.T) {
	t.Parallel() // its jobs mostly wait for their processes to start
	oshcc, err1 := exec.LookPath("oshcc")
	oshrun, err2 := exec.LookPath("oshrun")
	if err1 != nil || err2 != nil {
		t.Skip("oshcc or oshrun not found (apt-get install openmpi-bin libopenmpi-dev): the C reference program is not checked")
	}
	bin := filepath.Join(t.TempDir(), "osu_oshm")
	if out, err := exec.Command(oshcc, "-O2", "-Wall", "-Werror", "-o", bin, "oshmem/osu_oshm.c").CombinedOutput(); err != nil {
		t.Fatalf("oshcc: %v\n%s", err, out)
	}
	short := []string{"-max", "64", "-iters", "20", "-warmup", "2"}
	// Each table costs an oshrun (seconds of Open MPI's start-up): a plain
	// `go test` checks a point-to-point and a collective one, the full
	// matrix (GOSHMEM_TEST_FULL=1, as .ci/run sets it) all.
	for _, tt := range []struct {
		name  string
		args  []string
		quick bool
	}{
		{"put", tinyArgs, true},
		{"get_nb", tinyArgs, false},
		{"put_bw", tinyArgs, false},
		{"put_mr", []string{"-max", "64", "-iters", "10"}, false},
		{"atomics", []string{"-iters", "50"}, false},
		{"barrier", []string{"-iters", "30", "-warmup", "3"}, false},
		{"broadcast", short, true},
		{"reduce", short, false},
		{"collect", short, false},
		{"fcollect", short, false},
		{"alltoall", short, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if !tt.quick && !petest.Full() {
				t.Skipf("in the full matrix only: %s=1 runs it (.ci/run does)", petest.FullEnv)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			args := append([]string{"--allow-run-as-root", "--oversubscribe", "-np", "2", "-x", "UCX_TLS=sm,self",
				bin, tt.name, "-settle-ms", "1"}, tt.args...)
			// The reference build segfaults in shmem_finalize, after its
			// output (shared/ANCHORS.md): its table is checked, not its
			// exit status.
			out, _ := exec.CommandContext(ctx, oshrun, args...).Output()
			if ctx.Err() != nil {
				t.Fatalf("oshrun %s did not end in time; output:\n%s", tt.name, out)
			}
			ref, err := parseText(bytes.NewReader(out))
			if err != nil {
				t.Fatalf("the reference table does not parse: %v\n%s", err, out)
			}
			mine := decodeReport(t, mustRun(t, 2, nil, append([]string{tt.name, "-json", "-settle", "1ms"}, tt.args...)...))
			if ref.Test != tt.name || ref.Title != mine.Title || !cmpStrings(ref.Columns, mine.Columns) {
				t.Errorf("reference: test %q title %q columns %q; this program: %q %q", ref.Test, ref.Title, ref.Columns, mine.Title, mine.Columns)
			}
			if len(ref.Rows) != len(mine.Rows) {
				t.Fatalf("reference has %d rows, this program %d:\n%s", len(ref.Rows), len(mine.Rows), out)
			}
			for i := range ref.Rows {
				r, m := &ref.Rows[i], &mine.Rows[i]
				if r.key() != m.key() || !(r.value(ref.Metric) > 0) {
					t.Errorf("reference row %d: key %q, %s %v; want key %q and a positive figure", i, r.key(), ref.Metric, r.value(ref.Metric), m.key())
				}
			}
		})
	}
}
