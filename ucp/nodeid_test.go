package ucp

import (
	"slices"
	"strings"
	"testing"

	"github.com/goshmem/goshmem/uct"
)

// TestRotateTies checks how the node-local id steers lane selection: in
// each run of equally good candidates, the one at index id modulo the
// run's length comes first; better candidates stay ahead of worse.
func TestRotateTies(t *testing.T) {
	// cand makes a candidate named n (its interface's index) that ranks by
	// score, then by priority.
	cand := func(score float64, prio uint8, n int) candidate {
		return candidate{wi: &workerIface{attr: &uct.IfaceAttr{Priority: prio}, index: n}, score: score}
	}
	for _, tc := range []struct {
		name  string
		cands []candidate
		id    uint64
		want  []int // names, in the order wanted
	}{
		{"id 0 keeps the order", []candidate{cand(1, 0, 1), cand(1, 0, 2), cand(1, 0, 3)}, 0, []int{1, 2, 3}},
		{"id 1 of three", []candidate{cand(1, 0, 1), cand(1, 0, 2), cand(1, 0, 3)}, 1, []int{2, 3, 1}},
		{"id 2 of three", []candidate{cand(1, 0, 1), cand(1, 0, 2), cand(1, 0, 3)}, 2, []int{3, 1, 2}},
		{"id wraps", []candidate{cand(1, 0, 1), cand(1, 0, 2)}, 5, []int{2, 1}},
		{"best alone stays", []candidate{cand(0.5, 0, 9), cand(1, 0, 1), cand(1, 0, 2)}, 1, []int{9, 2, 1}},
		{"each run rotates", []candidate{cand(1, 0, 1), cand(1, 0, 2), cand(2, 0, 4), cand(2, 0, 5), cand(2, 0, 6)}, 1, []int{2, 1, 5, 6, 4}},
		{"priority breaks ties", []candidate{cand(1, 2, 1), cand(1, 1, 2), cand(1, 1, 3)}, 1, []int{1, 3, 2}},
		{"empty", nil, 3, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cands := slices.Clone(tc.cands)
			rotateTies(cands, tc.id)
			var got []int
			for _, c := range cands {
				got = append(got, c.wi.index)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("order %v, want %v", got, tc.want)
			}
		})
	}
}

// TestNodeLocalIDSteersLanes checks that the node-local id reaches lane
// selection: over shared memory, where the posix and sysv transports rank
// the same, contexts with ids 0 and 1 put their active-message lanes on
// different transports.
func TestNodeLocalIDSteersLanes(t *testing.T) {
	amLane := func(id uint64) string {
		cfg, err := ReadConfig("", "")
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.Modify("TLS", "posix,sysv"); err != nil {
			t.Fatal(err)
		}
		c, err := Init(new(Params).SetFeatures(FeatureRMA|FeatureAM).SetNodeLocalID(id), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Cleanup()
		a, b := newWorker(t, c), newWorker(t, c)
		addr, _ := b.Address()
		ep, err := a.NewEndpoint(new(EPParams).SetAddress(addr))
		if err != nil {
			t.Fatal(err)
		}
		defer ep.Close(CloseModeForce)
		ra, err := decodeWorkerAddress(addr)
		if err != nil {
			t.Fatal(err)
		}
		cands := a.candidates(nil, ra, "")
		if len(cands) < 2 || cands[0].better(cands[1]) {
			t.Skipf("posix and sysv do not rank the same here: %v", ep.Query().Lanes)
		}
		for _, l := range ep.Query().Lanes {
			if strings.HasSuffix(l.Usage, "am") {
				return l.Transport
			}
		}
		t.Fatalf("no am lane: %v", ep.Query().Lanes)
		return ""
	}
	if l0, l1 := amLane(0), amLane(1); l0 == l1 {
		t.Errorf("node-local ids 0 and 1 both chose %s for the am lane", l0)
	}
}
