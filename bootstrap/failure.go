package bootstrap

import (
	"fmt"
	"strconv"

	"github.com/goshmem/goshmem/ucs"
)

// Failure reports that a PE, or the launcher (its seed, or the PE's
// agent), failed or left the job before finalizing. Failure implements error and unwraps to
// ucs.ErrConnectionReset, so a collective that ended because of it can be
// matched with errors.Is(err, ucs.ErrConnectionReset), and the Failure
// itself can be retrieved with errors.As.
type Failure struct {
	Rank   int    // the PE that failed; -1 for the launcher (the seed, or the PE's agent)
	Host   string // the host it ran on, as it reported itself (or its address)
	Reason string // what happened
}

// Error returns a message naming the PE (or the launcher), its host and the
// reason, such as "PE 2 on host n1: exited with status 3".
func (f Failure) Error() string {
	who := "PE " + strconv.Itoa(f.Rank)
	if f.Rank < 0 {
		who = "the launcher (goshmem-run)"
	}
	if f.Host != "" {
		who += " on host " + f.Host
	}
	return who + ": " + f.Reason
}

// Unwrap returns ucs.ErrConnectionReset.
func (f Failure) Unwrap() error { return ucs.ErrConnectionReset }

// ErrClosed is returned by calls on a Member after Close. It wraps
// ucs.ErrNotConnected.
var ErrClosed = fmt.Errorf("bootstrap: member is closed: %w", ucs.ErrNotConnected)
