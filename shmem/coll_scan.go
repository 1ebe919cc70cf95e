package shmem

import "unsafe"

// The scans (OpenSHMEM 1.6): prefix sums over the team's PEs in the order
// of their team numbers.
//
// Every PE runs the same log2 rounds (Hillis and Steele): in round k, with
// d = 2^k, PE i reads the partial sum in the dest of PE i-d and adds it to
// its own, so that after the round its dest holds the sum of the sources
// of PEs i-2d+1..i. A dest is read before it changes: PE i tells PE i+d
// when its dest holds the round's partial (signal series A), PE i+d
// answers once it has read it (series B), and only then does PE i add.
// The exclusive scan also adds what it reads into a private sum, which
// misses exactly the PE's own source. log2(n) rounds of one get and two
// signals; the call starts with a sync of the team, as the other
// algorithms that signal do, and needs none at the end: every read of a
// PE's dest is answered before that PE returns.

// SumInscan computes the inclusive prefix sums of the source arrays over
// the team (shmem_sum_inscan, OpenSHMEM 1.6): on the team's PE i,
// dest[j] becomes the sum of source[j] of the team's PEs 0..i. nelems is
// len(source), which must be the same on every PE, and dest must hold at
// least that many elements; dest and source are the same array or do not
// overlap. It is collective over the team. It returns an error for an
// invalid team (ErrInvalidTeam), a dest shorter than source, overlapping
// arrays or arrays outside the symmetric heap (ErrInvalidArgument).
func SumInscan[T Arith](team *Team, dest, source []T) error {
	return scan("SumInscan", team, dest, source, false)
}

// SumExscan computes the exclusive prefix sums of the source arrays over
// the team (shmem_sum_exscan, OpenSHMEM 1.6): on the team's PE i, dest[j]
// becomes the sum of source[j] of the team's PEs 0..i-1, and zero on PE 0.
// The arguments and errors are those of SumInscan.
func SumExscan[T Arith](team *Team, dest, source []T) error {
	return scan("SumExscan", team, dest, source, true)
}

func scan[T Arith](routine string, t *Team, dest, source []T, exclusive bool) error {
	cs, err := collTeam(routine, t)
	if err != nil {
		return err
	}
	t.beginColl(routine)
	defer t.endColl()
	nr := len(source)
	if len(dest) < nr {
		return argErr(routine, "dest has %d elements, fewer than the %d of source", len(dest), nr)
	}
	dest = dest[:nr]
	db, sb := bytesOf(dest), bytesOf(source)
	doff, soff, err := symOffsets(routine, db, sb)
	if err != nil {
		return err
	}
	if doff != soff && doff < soff+uintptr(len(sb)) && soff < doff+uintptr(len(db)) {
		return argErr(routine, "dest and source overlap without being the same array")
	}
	n, me := t.npes, t.me
	if n == 1 {
		if exclusive {
			clear(dest)
		} else {
			copy(dest, source)
		}
		return nil
	}
	var z T
	if err := t.syncArgs(routine, collArgs{nelems: nr, size: int(unsafe.Sizeof(z))}); err != nil || nr == 0 {
		return err
	}
	profTeam(routine, t, me+1, len(sb))
	// Two private vectors: what this PE reads, and the exclusive sum.
	both := scratch[T](cs, 2*nr)
	tmp, sum := both[:nr], both[nr:]
	copy(dest, source)
	summed := false
	for k, d := 0, 1; d < n; k, d = k+1, d<<1 {
		if me+d < n {
			cs.signal(routine, t.members[me+d], sigA+k)
		}
		if me-d >= 0 {
			cs.wait(sigA+k, 1)
			get2(routine, t.members[me-d], doff, bytesOf(tmp))
			cs.signal(routine, t.members[me-d], sigB+k)
		}
		if me+d < n {
			cs.wait(sigB+k, 1) // PE me+d has read this round's partial
		}
		if me-d < 0 {
			continue
		}
		if exclusive {
			if summed {
				sumInto(sum, tmp)
			} else {
				copy(sum, tmp)
				summed = true
			}
		}
		sumInto(dest, tmp)
	}
	if exclusive {
		if summed {
			copy(dest, sum)
		} else {
			clear(dest)
		}
	}
	return nil
}
