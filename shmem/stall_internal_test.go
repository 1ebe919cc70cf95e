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
	var lock int64
	wait := func() {
		w := waiter{what: "SetLock", on: waitForLock(&lock, 2)}
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

// TestStallReportNames: a stall report names the program's call site (the
// first frame outside the library: here this test file), what a wait waits
// for (the variable, the value and what it holds; the PE ahead in a lock's
// queue), with values of every size and sign printed as the program wrote
// them.
func TestStallReportNames(t *testing.T) {
	var (
		i16  = []int16{-3, 0}
		u32  = []uint32{7}
		i64  int64
		u64  = ^uint64(0)
		lock int64
	)
	tests := []struct {
		name string
		what string
		on   waitOn
		want []string
	}{
		{"int16", "WaitUntil", waitFor(&i16[0], 1, CmpGE, -1, false), []string{"in shmem.WaitUntil at stall_internal_test.go:", "(shmem.TestStallReportNames.func1)", " CmpGE -1 (it holds -3;"}},
		{"uint32", "SignalWaitUntil", waitFor(&u32[0], 1, CmpEQ, 4000000000, false), []string{" CmpEQ 4000000000 (it holds 7;"}},
		{"int64", "WaitUntilContext", waitFor(&i64, 1, CmpNE, 0, false), []string{" CmpNE 0 (it holds 0;"}},
		{"uint64", "WaitUntil", waitFor(&u64, 1, CmpLT, 5, false), []string{" CmpLT 5 (it holds 18446744073709551615;"}},
		{"array", "WaitUntilAll", waitForArray(i16, CmpEQ, -2, nil), []string{"until the 2 elements at ", " compare CmpEQ -2"}},
		{"vector", "WaitUntilAnyVector", waitForArray(i16, CmpGT, 0, []int16{1, 2}), []string{" compare CmpGT to their cmpValues"}},
		{"lock", "SetLock", waitForLock(&lock, 3), []string{"in shmem.SetLock at stall_internal_test.go:", " for the lock at ", "queued behind PE 3 (which holds the lock"}},
		{"lock, nobody known ahead", "SetLockContext", waitForLock(&lock, -1), []string{" for the lock at "}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := waiter{what: tt.what, on: tt.on}
			w.slow()
			report := allStalls(0)
			w.done()
			for _, want := range tt.want {
				if !strings.Contains(report, want) {
					t.Errorf("no %q in the report:\n%s", want, report)
				}
			}
			if tt.on.lock && tt.on.ahead == 0 && strings.Contains(report, "queued behind") {
				t.Errorf("the report names a PE ahead that is not known:\n%s", report)
			}
		})
	}
}

// TestInLibrary: the call site of a wait is the first frame that is not
// goshmem's: the program's, or a test's of goshmem itself.
func TestInLibrary(t *testing.T) {
	for _, c := range []struct {
		fn, file string
		want     bool
	}{
		{"github.com/goshmem/goshmem/shmem.WaitUntil[...]", "/src/goshmem/shmem/wait.go", true},
		{"github.com/goshmem/goshmem/shmem.(*waiter).pause", "/src/goshmem/shmem/sync.go", true},
		{"github.com/goshmem/goshmem/internal/petest.RunWith.func1", "/src/goshmem/internal/petest/petest.go", true},
		{"github.com/goshmem/goshmem/shmem_test.TestRing.func1", "/src/goshmem/shmem/ring_test.go", false},
		{"main.main", "/home/me/prog/main.go", false},
		{"example.com/app/work.Step", "/home/me/app/work/step.go", false},
		{"github.com/goshmem/goshmemx/pkg.F", "/x/pkg/f.go", false},
	} {
		if got := inLibrary(c.fn, c.file); got != c.want {
			t.Errorf("inLibrary(%q, %q) = %v, want %v", c.fn, c.file, got, c.want)
		}
	}
}
