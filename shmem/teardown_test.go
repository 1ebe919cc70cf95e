package shmem_test

import (
	"strings"
	"testing"

	"github.com/goshmem/goshmem/shmem"
	"github.com/goshmem/goshmem/shmemtest"
)

// TestTeardownQuiet checks that a normal teardown over tcp is no failure:
// contexts that each PE creates, uses against every other PE and destroys
// on its own (no barrier: its peers may still use theirs), and then
// Finalize, print nothing about the transport (no "connection reset", no
// failed endpoint, no connection ended without a goodbye), even at
// UCX_LOG_LEVEL=diag, on any PE.
func TestTeardownQuiet(t *testing.T) {
	shmemtest.RunWith(t, shmemtest.Options{Shared: true,
		NPs:        []int{2, 4},
		Transports: []shmemtest.Transport{shmemtest.TCP},
		// A peer that ended without a goodbye is logged at diag only (its
		// end is reported where it ran): a teardown must not log one.
		Env: []string{"UCX_LOG_LEVEL=diag"},
		Check: func(t *testing.T, output string) {
			for _, line := range strings.Split(output, "\n") {
				if strings.Contains(line, "uct/tcp:") || strings.Contains(line, "ucp:") || strings.Contains(strings.ToLower(line), "connection reset") {
					t.Errorf("a normal teardown printed: %s", line)
				}
			}
		},
	}, func(t *testing.T) {
		me, n := shmem.MyPE(), shmem.NPEs()
		words := calloc[int64](t, n)
		for round := range 5 {
			ctx, err := shmem.CtxCreate(0)
			if err != nil {
				t.Fatal(err)
			}
			for pe := range n {
				shmem.CtxP(ctx, &words[me], int64(round), pe)
				shmem.CtxAtomicAdd(ctx, &words[me], 1, pe)
				if got := shmem.CtxG(ctx, &words[me], pe); got < int64(round) {
					t.Errorf("round %d: PE %d has %d", round, pe, got)
				}
			}
			ctx.Destroy()
		}
		shmem.BarrierAll()
		shmem.Free(words)
	})
}
