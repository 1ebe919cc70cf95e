package shmem

import (
	"fmt"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
)

// Arguments that every PE of a team must pass alike.
//
// A collective whose PEs pass different lengths (or element types, roots,
// strides) would move data by each PE's own idea of them: a reduction
// combined vectors of different lengths and wrote past the dest of a PE
// with a shorter one. Every collective therefore checks, before it moves
// any data, that its PEs agree, and returns an error wrapping
// ErrInvalidArgument on every PE that finds they do not, naming each PE's
// arguments:
//
//   - The algorithms that start with a sync of the team (alltoall,
//     alltoalls and the scans) fold the arguments into the sync's key
//     (syncArgs): a PE whose key differs makes every PE read every PE's
//     arguments, which each PE stores in the line of its collective word,
//     and report them (argsMismatch).
//   - Across nodes, the reductions, broadcast, collect and fcollect carry
//     the keys in their messages (coll_net.go), which hold the data in the
//     team's net area, not in dest, until every PE has heard every key:
//     when they differ, every PE reports as syncArgs does.
//   - The staged algorithms on one node (broadcast, collect, fcollect and
//     the reductions) read the length and element size that each PE
//     publishes with its contribution, and check them before they copy.
//     Every PE reads every contribution of collect, fcollect and a
//     reduction, and so finds the same error; only the non-roots read the
//     root's of a broadcast, so a broadcast's root finds a difference only
//     with SHMEM_DEBUG set, which adds syncArgs to the staged broadcast.
//
// A call of zero elements takes part too, so that a PE that passed none
// while the others passed some is not left behind.

// collArgs are the arguments of a collective call that every PE of the
// team must pass alike.
type collArgs struct {
	nelems   int // elements of source (of a PE's block for fcollect); -1 where PEs may differ (collect)
	size     int // bytes of an element
	root     int // of a broadcast; 0 otherwise
	dst, sst int // strides of alltoalls; 0 otherwise
	// form says how to name them (describe); it is the routine's, the
	// same on every PE of a call, and is not published.
	form collForm
}

// collForm says how the arguments of a collective routine read: what its
// count counts, and which arguments besides the count and the element
// size its PEs must pass alike.
type collForm uint8

const (
	formBytes   collForm = 1 << iota // a Mem routine: the count is of bytes
	formRoot                         // a broadcast: the root
	formStrides                      // alltoalls: the strides
)

// collArgWords is the number of words of a collArgs, which follow the
// collective word in its line.
const collArgWords = 5

func (a collArgs) words() [collArgWords]uint64 {
	return [collArgWords]uint64{uint64(a.nelems), uint64(a.size), uint64(a.root), uint64(a.dst), uint64(a.sst)}
}

func argsOfWords(w []uint64) collArgs {
	return collArgs{nelems: int(w[0]), size: int(w[1]), root: int(w[2]), dst: int(w[3]), sst: int(w[4])}
}

// key digests the arguments for a sync's key.
func (a collArgs) key() uint64 {
	k := uint64(0x9e3779b97f4a7c15)
	for _, v := range a.words() {
		k = (k ^ v) * 0xff51afd7ed558ccd
		k ^= k >> 29
	}
	return k
}

// describe names the arguments of a call, as its form says: "10
// elements of 8 bytes, root 2".
func (a collArgs) describe() string {
	var d string
	switch {
	case a.nelems < 0:
		d = fmt.Sprintf("elements of %d bytes", a.size)
	case a.form&formBytes != 0:
		d = fmt.Sprintf("%d bytes", a.nelems)
	default:
		d = fmt.Sprintf("%d elements of %d bytes", a.nelems, a.size)
	}
	if a.form&formRoot != 0 {
		d += fmt.Sprintf(", root %d", a.root)
	}
	if a.form&formStrides != 0 {
		d += fmt.Sprintf(", strides dst %d and sst %d", a.dst, a.sst)
	}
	return d
}

// argsErr makes the error of a call of routine, of the given form, whose
// PEs passed different arguments: args[j] are those of the team's PE j,
// grouped by value.
func argsErr(routine string, form collForm, t *Team, args func(j int) collArgs) error {
	var order []string
	pes := map[string][]int{}
	for j := range t.npes {
		a := args(j)
		a.form = form
		d := a.describe()
		if _, ok := pes[d]; !ok {
			order = append(order, d)
		}
		pes[d] = append(pes[d], t.members[j])
	}
	parts := make([]string, len(order))
	for i, d := range order {
		parts[i] = describePEs(pes[d]) + ": " + d
	}
	return argErr(routine, "the PEs of %v passed different arguments: %s (every PE of the team must pass the same lengths, element type, root and strides)",
		t, strings.Join(parts, "; "))
}

// syncArgs is the sync of the team that starts a collective call: it also
// checks that every PE passed the arguments a. When one did not, every PE
// of the team returns the same error naming every PE's arguments
// (argsErr); a PE in another collective panics, as t.sync does.
func (t *Team) syncArgs(routine string, a collArgs) error {
	if t.syncKey(routine, t.argsKey(a)) {
		return nil
	}
	return t.argsMismatch(routine, a.form)
}

// argsKey publishes the arguments a of this PE's call in the line of its
// collective word, for the PEs that read them when the keys differ
// (argsMismatch), and returns the key of the call: the collective word's
// and the arguments'. What publishes the key (a sync, the first message of
// a net call) publishes the arguments.
func (t *Team) argsKey(a collArgs) uint64 {
	line := (*[1 + collArgWords]uint64)(st.heap.At(int(t.collWordOff())))
	for i, v := range a.words() {
		ucs.StoreRelease(&line[1+i], v)
	}
	return collKey(atomic.LoadUint64(&line[0])) ^ a.key()
}

// argsMismatch is the end of a call whose PEs' keys (argsKey) were found
// to differ, by every PE of the team at once: every PE reads every PE's
// arguments and collective word, and returns the error naming every PE's
// arguments (argsErr, of the routine's form), or panics when the PEs are
// in different collectives (reportMismatch).
func (t *Team) argsMismatch(routine string, form collForm) error {
	lines := make([][1 + collArgWords]uint64, t.npes)
	for j := range lines {
		pe := t.members[j]
		if base := st.peers[pe].heap(); base != nil {
			l := (*[1 + collArgWords]uint64)(unsafe.Add(base, t.collWordOff()))
			for i := range l {
				lines[j][i] = atomic.LoadUint64(&l[i])
			}
		} else {
			get2("collective check", pe, t.collWordOff(), unsafe.Slice((*byte)(unsafe.Pointer(&lines[j])), len(lines[j])*8))
		}
	}
	t.syncKey(routine, 0) // every PE has read before any moves on
	words := make([]uint64, t.npes)
	for j := range lines {
		words[j] = lines[j][0]
	}
	for _, w := range words {
		// The root of a broadcast that did not wait joins past its call
		// (collState.settle).
		if collKey(w)&^1 != collKey(words[0])&^1 {
			t.reportMismatch(routine, words)
		}
	}
	return argsErr(routine, form, t, func(j int) collArgs { return argsOfWords(lines[j][1:]) })
}
