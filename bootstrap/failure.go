package bootstrap

import (
	"fmt"
	"strconv"

	"github.com/goshmem/goshmem/bootstrap/internal/wire"
	"github.com/goshmem/goshmem/ucs"
)

// EndCause is how a PE ended, or why the launcher is gone to a PE, as a
// typed value: its Kind (an EndKind), the exit Status (EndExited), the
// Signal that killed it (EndSignaled), how long it stayed stopped or
// silent (For) out of the failure timeout (Limit), and a Detail in words.
// The bootstrap's messages carry it, and its String method makes the
// sentence ("exited with status 3", "was killed by signal 9 (killed)").
type EndCause = wire.EndCause

// EndKind is the kind of an EndCause.
type EndKind = wire.EndKind

// The kinds of EndCause (see the constants of the same names in the
// bootstrap's messages): how a PE ended, and why the launcher (Failure
// rank -1) is gone.
const (
	EndNone       = wire.EndNone       // no cause
	EndExited     = wire.EndExited     // it exited with Status
	EndSignaled   = wire.EndSignaled   // a signal (Signal) killed it
	EndStopped    = wire.EndStopped    // its agent killed it: stopped (SIGSTOP, SIGTSTP) for For
	EndHung       = wire.EndHung       // its agent killed it: silent for For, most of the failure timeout Limit
	EndNotStarted = wire.EndNotStarted // it could not be started (Detail)
	EndNotWaited  = wire.EndNotWaited  // its end could not be waited for (Detail)
	EndAgentLeft  = wire.EndAgentLeft  // its agent left or died before reporting it
	EndAbandoned  = wire.EndAbandoned  // it finalized and left while a collective waits for it
	EndSeedGone   = wire.EndSeedGone   // the launcher: its seed left or died
	EndAgentGone  = wire.EndAgentGone  // the launcher: the PE's channel to its agent closed
	EndOtherBuild = wire.EndOtherBuild // the launcher: the agent is built from another goshmem
)

// Failure reports that a PE, or the launcher (its seed, or the PE's
// agent), failed or left the job before finalizing. Failure implements error and unwraps to
// ucs.ErrConnectionReset, so a collective that ended because of it can be
// matched with errors.Is(err, ucs.ErrConnectionReset), and the Failure
// itself can be retrieved with errors.As.
type Failure struct {
	Rank  int      // the PE that failed; -1 for the launcher (the seed, or the PE's agent)
	Host  string   // the host it ran on, as it reported itself (or its address)
	Cause EndCause // what happened
}

// Error returns a message naming the PE (or the launcher), its host and the
// cause, such as "PE 2 on host n1: exited with status 3".
func (f Failure) Error() string {
	who := "PE " + strconv.Itoa(f.Rank)
	if f.Rank < 0 {
		who = "the launcher (goshmem-run)"
	}
	if f.Host != "" {
		who += " on host " + f.Host
	}
	return who + ": " + f.Cause.String()
}

// Unwrap returns ucs.ErrConnectionReset.
func (f Failure) Unwrap() error { return ucs.ErrConnectionReset }

// ErrClosed is returned by calls on a Member after Close. It wraps
// ucs.ErrNotConnected.
var ErrClosed = fmt.Errorf("bootstrap: member is closed: %w", ucs.ErrNotConnected)
