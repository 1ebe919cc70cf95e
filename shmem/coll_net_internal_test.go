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
