package shmem

import (
	"cmp"
	"os"
	"slices"
	"strings"

	"github.com/goshmem/goshmem/ucp"
	"github.com/goshmem/goshmem/ucs"
)

// selectionWarned is set once this process has looked at its transport
// selection: a program that calls Init again is not told twice.
var selectionWarned bool

// warnSlowSelection logs one line at ucs.LogWarn when UCX_TLS leaves out a
// transport that would keep operations in memory: when a PE's operations
// on its own heap go through a transport such as tcp, because self is left
// out (with UCX_TLS=tcp, issue 28 measured a hash table on one PE 180
// times slower than with tcp,self), or when PEs of one node do not map
// each other's heaps, because the shared-memory transports are left out
// (tcp, cma, posix alone with the heap from sysv by UCX_ALLOC_PRIO, ...). The line
// names the UCX_TLS
// that keeps them in memory and says that UCX_LOG_LEVEL=error silences it.
// PE 0 alone calls it, at the end of Init, and judges by what it sees: its
// own heap, and the PEs of its node. A selection whose cost is not the
// selection's (the default one, on a host without shared memory) is not
// warned about.
func warnSlowSelection() {
	if selectionWarned {
		return
	}
	selectionWarned = true
	var lost, add, via []string
	if own := &st.peers[st.me]; own.base == nil {
		lost = append(lost, "each PE's operations on its own heap")
		add = append(add, "self")
		via = appendLaneTransports(via, own.ep)
	}
	node := st.table.Node(st.me)
	for pe := range st.peers {
		// A PE of the node that this PE does not map is connected already:
		// Init connects those.
		if q := &st.peers[pe]; pe != st.me && !q.mapped && st.table.Node(pe) == node {
			lost = append(lost, "those between the PEs of a node")
			add = append(add, "sm")
			via = appendLaneTransports(via, q.ep)
			break
		}
	}
	if len(add) == 0 {
		return
	}
	better := st.ctx.SelectionWith(add...)
	if better == "" {
		return
	}
	lg().Logf(ucs.LogWarn, "goshmem: UCX_TLS=%s: %s go through %s, not memory; UCX_TLS=%s keeps them in memory (UCX_LOG_LEVEL=error silences this warning)",
		cmp.Or(os.Getenv("UCX_TLS"), "all"), strings.Join(lost, " and "), andList(via), better)
}

// andList writes items as a sentence lists them: "a", "a and b", "a, b and
// c".
func andList(items []string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}

// appendLaneTransports appends to names those of the transports of ep's
// lanes that it lacks.
func appendLaneTransports(names []string, ep *ucp.Endpoint) []string {
	if ep == nil {
		return names
	}
	for _, l := range ep.Query().Lanes {
		if !slices.Contains(names, l.Transport) {
			names = append(names, l.Transport)
		}
	}
	return names
}
