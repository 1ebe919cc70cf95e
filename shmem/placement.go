package shmem

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucs"
)

// placement is what a PE tells every other at start-up, in one bootstrap
// allgather: the CPUs it may run on and the machine they belong to, and
// what its barrier needs to know (see barrierState.chooseScheme).
type placement struct {
	mapsAll   bool // it maps the heap of every other PE
	mapsNode  bool // it maps the heaps of its node's PEs
	nodeAware bool // it asks for the node-aware barrier
	cpus      unix.CPUSet
	// machine is ucs.MachineID (0 when unknown): PEs of different nodes
	// (containers or network namespaces of their own, which map no heap
	// of each other) may still run on one machine and share its CPUs.
	machine uint64
}

// ownPlacement is this PE's placement. Its CPUs are its affinity mask (what
// goshmem-run --bind-to, taskset or a batch system left it), or every CPU
// the runtime counts when the mask cannot be read.
func ownPlacement() placement {
	p := placement{mapsAll: true, mapsNode: true, nodeAware: st.env.barrier == barrierNodeAware, machine: ucs.MachineID()}
	me := st.table.Node(st.me)
	for pe := range st.peers {
		if pe == st.me || st.peers[pe].mapped {
			continue
		}
		p.mapsAll = false
		if st.table.Node(pe) == me {
			p.mapsNode = false
		}
	}
	if unix.SchedGetaffinity(0, &p.cpus) != nil || p.cpus.Count() == 0 {
		p.cpus.Zero()
		for cpu := range runtime.NumCPU() {
			p.cpus.Set(cpu)
		}
	}
	return p
}

// marshal encodes p: a flags byte, the machine id, then the CPU set's
// words, little endian, without the trailing zero words.
func (p placement) marshal() []byte {
	var flags byte
	for i, f := range []bool{p.mapsAll, p.mapsNode, p.nodeAware} {
		if f {
			flags |= 1 << i
		}
	}
	n := len(p.cpus)
	for n > 0 && p.cpus[n-1] == 0 {
		n--
	}
	b := make([]byte, 1, 1+8+8*n)
	b[0] = flags
	b = binary.LittleEndian.AppendUint64(b, p.machine)
	for _, w := range p.cpus[:n] {
		b = binary.LittleEndian.AppendUint64(b, uint64(w))
	}
	return b
}

// unmarshalPlacement decodes what marshal encodes.
func unmarshalPlacement(b []byte) (placement, error) {
	var p placement
	const head = 1 + 8
	if len(b) < head || (len(b)-head)%8 != 0 || (len(b)-head)/8 > len(p.cpus) {
		return p, fmt.Errorf("placement of %d bytes: want a flags byte, a machine id and at most %d words", len(b), len(p.cpus))
	}
	p.mapsAll, p.mapsNode, p.nodeAware = b[0]&1 != 0, b[0]&2 != 0, b[0]&4 != 0
	p.machine = binary.LittleEndian.Uint64(b[1:])
	for i := range (len(b) - head) / 8 {
		for w := binary.LittleEndian.Uint64(b[head+8*i:]); w != 0; w &= w - 1 {
			p.cpus.Set(64*i + bits.TrailingZeros64(w))
		}
	}
	return p, nil
}

// gatherPlacements exchanges the PEs' placements; the result is in job
// rank order.
func gatherPlacements() ([]placement, error) {
	blobs, err := st.member.Allgather(ownPlacement().marshal())
	if err != nil {
		return nil, fmt.Errorf("placement exchange: %w", err)
	}
	all := make([]placement, len(blobs))
	for pe, b := range blobs {
		if all[pe], err = unmarshalPlacement(b); err != nil {
			return nil, fmt.Errorf("placement exchange: PE %d: %w", pe, err)
		}
	}
	return all, nil
}

// sharers is the number of PEs of PE p's machine that may run on its
// CPUs, itself included (node gives each PE's node). The affinity masks
// decide it, not the CPU count that one PE sees: PEs bound each to a core
// of their own (goshmem-run --bind-to core) each see one CPU, and share
// it with no other PE; two PEs bound to one core share it whatever the
// machine has. The machine counts, not the node: the PEs of "hosts" that
// are containers or network namespaces of one machine share its CPUs
// though they map no heap of each other (2 such hosts x 2 PEs, on 2
// cores, each counted 2 PEs on 2 CPUs, and spun where 4 PEs took turns).
func sharers(all []placement, node func(pe int) int, p int) int {
	n := 0
	for q := range all {
		if sameMachine(all, node, p, q) && overlap(&all[p].cpus, &all[q].cpus) {
			n++
		}
	}
	return n
}

// sameMachine reports whether PEs p and q run on one machine: they are
// on one node, or their kernels have one boot id.
func sameMachine(all []placement, node func(pe int) int, p, q int) bool {
	return node(p) == node(q) || all[p].machine != 0 && all[p].machine == all[q].machine
}

// crowded reports whether some PE of the node of PE me (or of any node,
// with me < 0) has fewer CPUs than PEs of its machine that may run on
// them: the same answer on every PE of that node (of the job).
func crowded(all []placement, node func(pe int) int, me int) bool {
	for p := range all {
		if (me < 0 || node(p) == node(me)) && sharers(all, node, p) > all[p].cpus.Count() {
			return true
		}
	}
	return false
}

// cpuShare is PE me's share of its CPUs: perCPU is the number of PEs that
// may run on each of them, rounded up (1 when it has a CPU to itself or
// more), and procs the number of its CPUs for each such PE, at least one.
func cpuShare(all []placement, node func(pe int) int, me int) (perCPU, procs int) {
	n, cpus := sharers(all, node, me), max(1, all[me].cpus.Count())
	return (n + cpus - 1) / cpus, max(1, cpus/n)
}

// overlap reports whether the CPU sets a and b have a CPU in common.
func overlap(a, b *unix.CPUSet) bool {
	for i := range a {
		if a[i]&b[i] != 0 {
			return true
		}
	}
	return false
}
