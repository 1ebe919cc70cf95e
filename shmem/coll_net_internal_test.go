package shmem

import "testing"

// TestBruckMost: the slot of a message of the dissemination allgather
// holds the most blocks any round sends (a slot too small for the round
// before the last of 5 PEs let FCollect overwrite the next slot).
func TestBruckMost(t *testing.T) {
	for n := 2; n <= 300; n++ {
		most := 0
		for d := 1; d < n; d *= 2 {
			most = max(most, min(d, n-d))
		}
		if got := bruckMost(n); got != most {
			t.Errorf("bruckMost(%d) = %d, want %d", n, got, most)
		}
	}
}

// TestNetLensFit: a message of collect's dissemination allgather, with
// the lengths of the blocks it carries, fits a slot of the net area for
// every team that netLensFit lets carry them (its block capacity is then
// not negative, which as a uint64 would let every block "fit" and run
// past the slot); the teams it does not, from about a thousand PEs, have
// a length word for every PE in their area; and netLensFit does not turn
// true again for a larger team (the area is sized by the job's PEs, a
// team's count is at most that).
func TestNetLensFit(t *testing.T) {
	saved, savedNet := st.npes, st.netColls
	t.Cleanup(func() { st.npes, st.netColls = saved, savedNet })
	st.netColls = true
	first := 0
	for n := 2; n <= 1<<17; n++ {
		fit := netLensFit(n)
		if fit {
			if first != 0 {
				t.Fatalf("netLensFit(%d) is true after netLensFit(%d) was false", n, first)
			}
			if msg := netHdr + 8*bruckMost(n); msg > netSlot {
				t.Fatalf("%d PEs: a message of %d bytes of lengths alone, in a slot of %d", n, msg, netSlot)
			}
			if c := (netSlot-netHdr)/bruckMost(n) - 8; c < 0 {
				t.Fatalf("%d PEs: block capacity %d", n, c)
			}
			continue
		}
		if first == 0 {
			first = n
		}
		if n&(n-1) == 0 || n == first {
			st.npes = n
			if words := collWordsSize() / 8; words < uintptr(collSigs+n) {
				t.Errorf("%d PEs: %d words in a team's collective area, want %d signal and %d length words", n, words, collSigs, n)
			}
		}
	}
	if first == 0 || first < 512 {
		t.Errorf("netLensFit first false at %d PEs", first)
	}
	t.Logf("collect carries the lengths in its messages up to %d PEs", first-1)
}
