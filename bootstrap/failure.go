package bootstrap

import (
	"fmt"
	"strconv"

	"github.com/goshmem/goshmem/ucs"
)

// Failure reports that a PE, or the seed (the launcher), failed or left the
// job before finalizing. Failure implements error and unwraps to
// ucs.ErrConnectionReset, so a collective that ended because of it can be
// matched with errors.Is(err, ucs.ErrConnectionReset), and the Failure
// itself can be retrieved with errors.As.
type Failure struct {
	Rank   int    // the PE that failed; -1 for the seed (the launcher)
	Host   string // the host it ran on, as it reported itself (or its address)
	Reason string // what happened
}

// Error returns a message naming the PE (or the launcher), its host and the
// reason, such as "PE 2 on host n1 (10.0.0.7): left the job before
// finalize".
func (f Failure) Error() string {
	who := "PE " + strconv.Itoa(f.Rank)
	if f.Rank < 0 {
		who = "the launcher (bootstrap seed)"
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

// Reasons given in Failure.Reason. memberlist does not tell a node that
// left from one that died, and a PE only leaves after finalize, so both
// read the same.
const (
	reasonGone     = "left the job before finalize (it exited, was killed or stopped responding)"
	reasonSeedGone = "left the job (the launcher ended, was killed or stopped responding)"
)
