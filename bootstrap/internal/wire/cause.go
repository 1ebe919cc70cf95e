package wire

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"syscall"
	"time"
)

// EndKind says how a PE ended, or why the launcher is gone to a PE: the
// kind of an EndCause.
type EndKind uint8

// The kinds of EndCause. EndNone is the zero value: no cause (an event
// other than a PE's end).
const (
	EndNone EndKind = iota
	// EndExited: the PE exited with Status.
	EndExited
	// EndSignaled: a signal (Signal) killed the PE, one its agent did not
	// send for stalling.
	EndSignaled
	// EndStopped: the PE stayed stopped (SIGSTOP, SIGTSTP) for For, half
	// the failure timeout or longer, and its agent killed it for it.
	EndStopped
	// EndHung: the PE stopped answering its agent for For, most of the
	// failure timeout Limit, without exiting, and its agent killed it.
	EndHung
	// EndNotStarted: the PE could not be started; Detail says why.
	EndNotStarted
	// EndNotWaited: the PE's end could not be waited for; Detail says why.
	EndNotWaited
	// EndAgentLeft: the agent that started the PE left the job or was
	// declared dead before it reported the PE's end.
	EndAgentLeft
	// EndAbandoned: the PE finalized and left (it exited) while a
	// collective that needs it is pending, or started after: the PEs that
	// entered it wait for one that will never come. Detail names them.
	EndAbandoned
	// EndSeedGone: (the launcher, rank -1) the seed left the job or was
	// declared dead.
	EndSeedGone
	// EndAgentGone: (the launcher, rank -1) the channel between a PE and
	// its agent closed; Detail says more when known.
	EndAgentGone
	// EndOtherBuild: (the launcher, rank -1) the PE's agent is built from
	// another goshmem; Detail names both and says what to do.
	EndOtherBuild
	endLast = EndOtherBuild
)

// EndCause is how a PE ended, or why the launcher is gone to a PE, as a
// typed value: the bootstrap's messages carry it (a PE's end in an
// agent's report, a failure notice to the PEs), and readers branch on its
// fields, never on its sentence, which String makes.
type EndCause struct {
	Kind   EndKind
	Status int            // EndExited: the exit status
	Signal syscall.Signal // EndSignaled: the signal that killed the PE
	// For is how long the PE stayed stopped (EndStopped) or silent
	// (EndHung); Limit is the failure timeout (EndHung).
	For, Limit time.Duration
	// Detail is what else is known, in words: an error, a limit that was
	// reached, the versions of a mismatch. String appends it.
	Detail string
}

// ReasonSeedGone and ReasonAgentGone are how a PE learns that the launcher
// (Failure rank -1) is gone: memberlist does not tell a seed that left
// from one that died.
const (
	ReasonSeedGone  = "left the job (the launcher ended, was killed or stopped responding)"
	ReasonAgentGone = "is gone: the channel to this PE's agent (goshmem-run) closed (the agent ended or was killed)"
)

// String says how the PE ended, as a sentence that follows its name:
// "exited with status 3", "was killed by signal 9 (killed)", ..., then
// ": " and Detail when there is one.
func (c EndCause) String() string {
	var s string
	switch c.Kind {
	case EndNone:
		s = "ended"
	case EndExited:
		s = "exited with status " + strconv.Itoa(c.Status)
		if c.Status == 0 && c.Detail != "" {
			return s + " but: " + c.Detail
		}
	case EndSignaled:
		s = fmt.Sprintf("was killed by signal %d (%v)", int(c.Signal), c.Signal)
	case EndStopped:
		s = fmt.Sprintf("was stopped (SIGSTOP or SIGTSTP) for %v, longer than half the failure timeout", c.For)
	case EndHung:
		s = fmt.Sprintf("stopped answering its agent for %v, most of the failure timeout of %v (hung: it neither ran nor exited)", c.For, c.Limit)
	case EndNotStarted:
		s = "could not be started"
	case EndNotWaited:
		s = "could not be waited for"
	case EndAgentLeft:
		s = "the agent that started it left the job (it ended, was killed or stopped responding)"
	case EndAbandoned:
		s = "left the job after it finalized, while a collective that cannot complete without it was pending"
	case EndSeedGone:
		s = ReasonSeedGone
	case EndAgentGone:
		s = ReasonAgentGone
	case EndOtherBuild:
		s = "is built from another goshmem version than the program"
	default:
		s = "ended (cause " + strconv.Itoa(int(c.Kind)) + ")"
	}
	if c.Detail != "" {
		s += ": " + c.Detail
	}
	return s
}

// KilledBySignal reports whether a signal killed the PE (one that its agent
// did not send for stalling).
func (c EndCause) KilledBySignal() bool { return c.Kind == EndSignaled }

// Stalled reports whether the PE's agent killed it for stalling (stopped,
// or hung): a failure of the PE's own.
func (c EndCause) Stalled() bool { return c.Kind == EndStopped || c.Kind == EndHung }

// causeMinSize is the size of an encoded EndCause without detail.
const causeMinSize = 1 + 4 + 1 + 8 + 8 + 2

// appendCause appends the encoding of c: kind uint8, status int32, signal
// uint8, for int64 and limit int64 (nanoseconds), detail string.
func appendCause(b []byte, c EndCause) []byte {
	b = append(b, byte(c.Kind))
	b = appendI32(b, c.Status)
	b = append(b, byte(c.Signal))
	b = binary.BigEndian.AppendUint64(b, uint64(c.For))
	b = binary.BigEndian.AppendUint64(b, uint64(c.Limit))
	return appendString16(b, c.Detail)
}

// cause reads an EndCause (see appendCause).
func (d *decoder) cause(what string) EndCause {
	var c EndCause
	c.Kind = EndKind(d.u8(what + " kind"))
	if d.err == nil && c.Kind > endLast {
		d.fail("unknown " + what + " kind")
	}
	c.Status = d.i32(what + " status")
	c.Signal = syscall.Signal(d.u8(what + " signal"))
	c.For = time.Duration(d.u64(what + " duration"))
	c.Limit = time.Duration(d.u64(what + " limit"))
	c.Detail = d.string16(what + " detail")
	return c
}
