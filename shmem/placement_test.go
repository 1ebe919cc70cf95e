package shmem

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// onCPUs returns a placement on the CPUs listed.
func onCPUs(list ...int) placement {
	var p placement
	for _, c := range list {
		p.cpus.Set(c)
	}
	return p
}

func TestPlacementRoundTrip(t *testing.T) {
	for _, p := range []placement{
		{},
		{mapsAll: true, nodeAware: true},
		onCPUs(0),
		onCPUs(1, 63, 64, 1023),
		{mapsNode: true, cpus: onCPUs(5, 700).cpus},
		onMachine(7, onCPUs(0, 1)),
	} {
		b := p.marshal()
		got, err := unmarshalPlacement(b)
		if err != nil {
			t.Fatalf("unmarshal(%x): %v", b, err)
		}
		if got != p {
			t.Errorf("round trip of %+v gave %+v", p, got)
		}
	}
	var full unix.CPUSet
	for _, bad := range [][]byte{nil, {0, 1, 2}, make([]byte, 2+8*len(full))} {
		if _, err := unmarshalPlacement(bad); err == nil {
			t.Errorf("unmarshal(%d bytes) = nil error, want one", len(bad))
		}
	}
}

// onMachine returns p on the machine id.
func onMachine(id uint64, p placement) placement {
	p.machine = id
	return p
}

// TestCrowding checks the machine's sharing of CPUs as the affinity masks
// give it: PEs bound each to its own core are not crowded, even though each
// sees a single CPU (the barrier was centralized, and waits yielded at
// once, for 2 PEs on 2 cores under goshmem-run --bind-to core); the PEs of
// nodes that are namespaces or containers of one machine (one boot id)
// share its CPUs (2 such hosts x 2 PEs on 2 cores were each not crowded,
// and their waits spun while the other host's PEs needed the cores).
func TestCrowding(t *testing.T) {
	type want struct {
		Crowded, AnyCrowded bool
		PerCPU, Procs       int
	}
	oneNode := func(int) int { return 0 }
	twoNodes := func(pe int) int { return pe / 2 }
	for _, tc := range []struct {
		name string
		all  []placement
		node func(int) int
		want want
	}{
		{"unbound, 2 PEs on 2 CPUs", []placement{onCPUs(0, 1), onCPUs(0, 1)}, oneNode, want{false, false, 1, 1}},
		{"bound, a core each", []placement{onCPUs(0), onCPUs(1)}, oneNode, want{false, false, 1, 1}},
		{"bound, both on one core", []placement{onCPUs(0), onCPUs(0)}, oneNode, want{true, true, 2, 1}},
		{"unbound, 3 PEs on 2 CPUs", []placement{onCPUs(0, 1), onCPUs(0, 1), onCPUs(0, 1)}, oneNode, want{true, true, 2, 1}},
		{"unbound, 2 PEs on 8 CPUs", []placement{onCPUs(0, 1, 2, 3, 4, 5, 6, 7), onCPUs(0, 1, 2, 3, 4, 5, 6, 7)}, oneNode, want{false, false, 1, 4}},
		{"me alone, two others on one core", []placement{onCPUs(2, 3), onCPUs(0), onCPUs(0)}, oneNode, want{true, true, 1, 2}},
		{"the other node crowded", []placement{onCPUs(0), onCPUs(1), onCPUs(0), onCPUs(0)}, twoNodes, want{false, true, 1, 1}},
		{"two nodes of one machine, 4 PEs on 2 CPUs", []placement{onMachine(1, onCPUs(0, 1)), onMachine(1, onCPUs(0, 1)), onMachine(1, onCPUs(0, 1)), onMachine(1, onCPUs(0, 1))}, twoNodes, want{true, true, 2, 1}},
		{"two nodes of one machine, a core each", []placement{onMachine(1, onCPUs(0)), onMachine(1, onCPUs(1)), onMachine(1, onCPUs(2)), onMachine(1, onCPUs(3))}, twoNodes, want{false, false, 1, 1}},
		{"two machines, 2 PEs on 2 CPUs each", []placement{onMachine(1, onCPUs(0, 1)), onMachine(1, onCPUs(0, 1)), onMachine(2, onCPUs(0, 1)), onMachine(2, onCPUs(0, 1))}, twoNodes, want{false, false, 1, 1}},
		{"two nodes, machines unknown", []placement{onCPUs(0, 1), onCPUs(0, 1), onCPUs(0, 1), onCPUs(0, 1)}, twoNodes, want{false, false, 1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got want
			got.Crowded = crowded(tc.all, tc.node, 0)
			got.AnyCrowded = crowded(tc.all, tc.node, -1)
			got.PerCPU, got.Procs = cpuShare(tc.all, tc.node, 0)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("PE 0 (-want +got):\n%s", diff)
			}
		})
	}
}
