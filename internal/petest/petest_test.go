package petest

import (
	"slices"
	"testing"
)

// TestStallReports: the stall reports of a job that timed out are the
// lines of its PEs' reports after the launcher asked for them; the same
// words before the request (GOSHMEM_STALL_REPORT) or from another PE's
// mouth are not.
func TestStallReports(t *testing.T) {
	for _, c := range []struct {
		name, output string
		want         []Failure
	}{
		{"none asked", "[pe 0] goshmem: PE 0: stall report: waiting 1s in shmem.BarrierAll\n", nil},
		{"asked", "[pe 0] goshmem: PE 0: stall report: early\n" + stallRequested + "; PEs report where they wait:\n" +
			"[pe 1] goshmem: PE 1: stall report: waiting 2s in shmem.WaitUntil\n[pe 1] other\n" +
			"[pe 0] goshmem: PE 2: stall report: not PE 0's\n[pe 0] goshmem: PE 0: stall report: not waiting in the library\n",
			[]Failure{{1, "goshmem: PE 1: stall report: waiting 2s in shmem.WaitUntil"}, {0, "goshmem: PE 0: stall report: not waiting in the library"}}},
	} {
		if got := StallReports(c.output); !slices.Equal(got, c.want) {
			t.Errorf("%s: StallReports = %+v, want %+v", c.name, got, c.want)
		}
	}
}
