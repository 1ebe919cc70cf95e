package shmem

import (
	"math/bits"
	"strings"
	"testing"
	"unsafe"
)

// TestCheckPartners: a look for a collective mismatch reads the members
// at distances ±2^k in the team's order and no other unmapped one, so a
// large team's PEs do not each connect to every other (N² handshakes at
// once); the distance-1 neighbours are always read, so that a mismatch
// between two groups of a team is found when every member waits in the
// same call.
func TestCheckPartners(t *testing.T) {
	saved := st.peers
	defer func() { st.peers = saved }()
	for _, n := range []int{1, 2, 3, 5, 8, 9, 64, 257} {
		st.peers = make([]peer, n) // no heap mapped
		members := make([]int, n)
		for i := range members {
			members[i] = i
		}
		for me := 0; me < n; me++ {
			tm := &Team{me: me, npes: n, members: members}
			got := map[int]bool{}
			for j := range tm.checkPartners {
				if j == me || got[j] {
					t.Fatalf("n=%d me=%d: partner %d given twice or is the PE itself", n, me, j)
				}
				got[j] = true
			}
			limit := 2 * bits.Len(uint(n-1))
			if len(got) > limit || len(got) > n-1 {
				t.Errorf("n=%d me=%d: %d partners, want at most %d", n, me, len(got), min(limit, n-1))
			}
			if n > 1 && (!got[(me+1)%n] || !got[(me+n-1)%n]) {
				t.Errorf("n=%d me=%d: the ring neighbours are not read: %v", n, me, got)
			}
			if n == 64 {
				// A member whose heap is mapped here is read too (a load).
				var word uint64
				far := (me + 3*n/8) % n // not at a distance ±2^k
				st.peers[far].base = unsafe.Pointer(&word)
				found := false
				for j := range tm.checkPartners {
					found = found || j == far
				}
				st.peers[far].base = nil
				if !found {
					t.Errorf("n=%d me=%d: the mapped member %d is not read", n, me, far)
				}
			}
			if n <= 5 && len(got) != n-1 {
				t.Errorf("n=%d me=%d: a small team should read every member, got %v", n, me, got)
			}
		}
	}
}

// TestSlowWaitAllocatesNothing: registering a wait that lasts reuses the
// entry of one that ended, so a contended lock, whose waits on an
// oversubscribed node nearly all last, allocates nothing; and a stall
// report lists the waits under way, from copies.
func TestSlowWaitAllocatesNothing(t *testing.T) {
	wait := func() {
		w := waiter{what: "SetLock"}
		w.slow()
		w.done()
	}
	wait()
	if a := testing.AllocsPerRun(100, wait); a != 0 {
		t.Errorf("a slow wait allocates %v times", a)
	}
	w := waiter{what: "SetLock"}
	w.slow()
	report := allStalls(0)
	w.done()
	if !strings.Contains(report, "SetLock") {
		t.Errorf("stall report during a slow SetLock:\n%s", report)
	}
	if report := allStalls(0); !strings.Contains(report, "not waiting") {
		t.Errorf("stall report after the wait:\n%s", report)
	}
}
