package shmem

import (
	"testing"

	"github.com/goshmem/goshmem/bootstrap"
)

// TestOnPeerFailureHooks: a failure is handled when a registered hook takes
// charge of it, and not once the hook is removed.
func TestOnPeerFailureHooks(t *testing.T) {
	var got []int
	f := bootstrap.Failure{Rank: 2, Cause: bootstrap.EndCause{Kind: bootstrap.EndExited, Status: 3}}
	rm1 := OnPeerFailure(func(pe int, cause error) bool { got = append(got, pe); return false })
	defer rm1()
	if peerFailureHandled(f) {
		t.Error("handled with no hook taking charge")
	}
	rm2 := OnPeerFailure(func(pe int, cause error) bool { return cause.Error() == f.Error() })
	if !peerFailureHandled(f) {
		t.Error("not handled with a hook taking charge")
	}
	rm2()
	if peerFailureHandled(f) {
		t.Error("handled after the hook was removed")
	}
	if len(got) != 3 || got[0] != 2 {
		t.Errorf("the first hook saw %v, want PE 2 three times", got)
	}
}
