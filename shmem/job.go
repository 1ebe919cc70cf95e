package shmem

import (
	"fmt"

	"github.com/goshmem/goshmem/bootstrap"
	"github.com/goshmem/goshmem/internal/hooks"
	"github.com/goshmem/goshmem/ucp"
)

// Hooks for libraries built on this package that talk over the job's ucp
// worker themselves (package rpc: remote procedure calls over active
// messages), so that they reach every PE over the transports the job uses
// and are served by the same progress as the library's own operations.

// FirstUserAMID is the first active-message id of Worker that a library
// built on this package may use: the ids below it are this package's own
// (its barriers' and collectives' messages), now and in later versions.
const FirstUserAMID = 16

// Worker returns the ucp worker of the job on this PE (that of the default
// context), or nil before Init and after the last Finalize. Every blocking
// routine of this package progresses it, so active-message handlers set on
// it (with ids from FirstUserAMID) run while this PE waits in the library.
// Its thread mode follows the thread level (multi for ThreadMultiple): a
// program at a lower level must call it from one goroutine at a time.
func Worker() *ucp.Worker {
	if st.phase != initialized {
		return nil
	}
	return st.worker
}

// Endpoint returns the default context's endpoint from this PE to the
// job's PE pe (itself included), connecting it on first use. It fails
// before Init, for a pe outside the job, and when the PE cannot be
// connected.
func Endpoint(pe int) (*ucp.Endpoint, error) {
	if st.phase != initialized {
		return nil, fmt.Errorf("shmem.Endpoint: the library is not initialized")
	}
	if pe < 0 || pe >= st.npes {
		return nil, fmt.Errorf("shmem.Endpoint: PE %d is not a PE of the job (0..%d)", pe, st.npes-1)
	}
	q := &st.peers[pe]
	if !q.connected() {
		if err := defaultCtx.connect(pe); err != nil {
			return nil, fmt.Errorf("shmem.Endpoint: %w", err)
		}
	}
	return q.ep, nil
}

// failureHooks are the functions OnPeerFailure registered.
var failureHooks hooks.Set[func(pe int, cause error) bool]

// OnPeerFailure registers fn, called (from the goroutine that learns it)
// when another PE of the job fails while the library is initialized, with
// the PE's number (-1 for the launcher) and the cause (a
// bootstrap.Failure, which wraps ucs.ErrConnectionReset). This PE ends
// then, as waiting on a dead PE would hang, unless some registered fn
// returns true: the library that registered it takes charge of the
// failure (it completes what waited on the PE with an error), and this PE
// only logs it. The returned function removes the registration.
func OnPeerFailure(fn func(pe int, cause error) bool) (remove func()) {
	return failureHooks.Add(fn)
}

// peerFailureHandled calls the hooks of OnPeerFailure with f, and reports
// whether one of them took charge of it.
func peerFailureHandled(f bootstrap.Failure) bool {
	handled := false
	for _, fn := range failureHooks.All() {
		handled = fn(f.Rank, f) || handled
	}
	return handled
}
