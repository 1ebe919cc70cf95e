package cluster

import (
	"fmt"
	"slices"

	"github.com/goshmem/goshmem/bootstrap/internal/wire"
)

// The agents of a job gather the contributions of their PEs in a tree:
// agent 0 is the root, agent i has the children treeFanout*i+1 to
// treeFanout*i+treeFanout. An agent waits for its own PEs and its children,
// sends what its subtree gathered to its parent in one message, and the
// root, having everything, sends the result back down the tree; each agent
// hands it to its PEs. A collective costs each agent one message up and
// treeFanout down, and takes 2*log(agents)/log(treeFanout) hops: nothing
// goes through the seed, and no agent talks to more than treeFanout+1
// others.
//
// The agents' addresses come down the same tree once, when every agent
// has joined: the seed sends agent 0 the directory of all agents, and each
// agent passes on to each child the part of it that is the child's subtree.

// treeFanout is the number of children of an agent in the tree.
const treeFanout = 4

// treeParent returns the parent of agent id, or -1 for the root.
func treeParent(id int) int {
	if id <= 0 {
		return -1
	}
	return (id - 1) / treeFanout
}

// treeChildren returns the children of agent id among agents.
func treeChildren(id, agents int) []int {
	var c []int
	for k := id*treeFanout + 1; k <= id*treeFanout+treeFanout && k < agents; k++ {
		c = append(c, k)
	}
	return c
}

// inSubtree reports whether agent x is in the subtree of agent root.
func inSubtree(x, root int) bool {
	for x > root {
		x = treeParent(x)
	}
	return x == root
}

// collective is an agent's part in the collective it is gathering.
type collective struct {
	seq      uint64
	barrier  bool
	local    map[int][]byte        // the blobs of its PEs, by rank
	children map[int]*wire.Message // the up messages of its children, by id
	sentUp   bool
}

// contribute adds the contribution of the local PE rank (or, with child,
// of a child agent) and says what was wrong with it.
func (c *collective) check(barrier bool) error {
	if len(c.local)+len(c.children) > 0 && c.barrier != barrier {
		return fmt.Errorf("a barrier and an allgather at once (sequence %d)", c.seq)
	}
	c.barrier = barrier
	return nil
}

// gathered returns the number of PEs the subtree gathered and, for an
// allgather, their entries, this agent's tagged with node.
func (c *collective) gathered(node int) (int, []wire.Entry) {
	count := len(c.local)
	for _, m := range c.children {
		count += m.Count
	}
	if c.barrier {
		return count, nil
	}
	es := make([]wire.Entry, 0, count)
	for r, b := range c.local {
		es = append(es, wire.Entry{Rank: r, Node: node, Blob: b})
	}
	for _, m := range c.children {
		es = append(es, m.Entries...)
	}
	return count, es
}

// completeTable checks that es hold exactly one entry for each of the size
// ranks, sorts them by rank, and bounds their total size.
func completeTable(es []wire.Entry, size int) ([]wire.Entry, error) {
	if len(es) != size {
		return nil, fmt.Errorf("%d entries gathered for %d PEs", len(es), size)
	}
	slices.SortFunc(es, func(a, b wire.Entry) int { return a.Rank - b.Rank })
	total := 0
	for i, e := range es {
		if e.Rank != i {
			return nil, fmt.Errorf("PE %d is missing or contributed twice", i)
		}
		total += len(e.Blob)
	}
	if total > wire.MaxAllgather {
		return nil, fmt.Errorf("allgather of %d bytes in all exceeds the limit of %d", total, wire.MaxAllgather)
	}
	return es, nil
}

// subDirectory returns the entries of dir in the subtree of agent root.
func subDirectory(dir []wire.AgentEntry, root int) []wire.AgentEntry {
	var sub []wire.AgentEntry
	for _, a := range dir {
		if inSubtree(a.ID, root) {
			sub = append(sub, a)
		}
	}
	return sub
}
