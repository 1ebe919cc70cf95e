package wire

import (
	"syscall"
	"testing"
	"time"
)

// TestCauseRoundTrip: an EndCause of every kind, every field set, survives
// the two messages that carry one (a failure notice and an agent's report)
// unchanged.
func TestCauseRoundTrip(t *testing.T) {
	for k := EndNone; k <= endLast; k++ {
		c := EndCause{Kind: k, Status: -3, Signal: syscall.SIGKILL, For: 1875 * time.Millisecond, Limit: 5 * time.Second, Detail: "more words"}
		for _, m := range []*Message{
			{Kind: KindFailure, JobID: "j", Rank: -1, FailRank: 2, Host: "h", Cause: c},
			{Kind: KindAgentReport, JobID: "j", Rank: 1, Seq: 1, Addr: "127.0.0.1:1", Events: []Event{
				{Kind: EvExit, Rank: 2, Code: 137, Other: -1, Host: "h", End: c, Why: "why"},
				{Kind: EvAbandoned, Rank: 3, Other: -1, End: c},
			}},
		} {
			got, err := DecodeMessage(AppendMessage(nil, m))
			switch {
			case err != nil:
				t.Errorf("%v with cause %v: decode: %v", m.Kind, k, err)
			case m.Kind == KindFailure && got.Cause != c:
				t.Errorf("%v: cause decoded as %+v, want %+v", m.Kind, got.Cause, c)
			case m.Kind == KindAgentReport && (got.Events[0].End != c || got.Events[1].End != c):
				t.Errorf("%v: causes decoded as %+v and %+v, want %+v", m.Kind, got.Events[0].End, got.Events[1].End, c)
			}
		}
	}
}

// TestCauseString: the sentence of each kind of cause, made in one place.
func TestCauseString(t *testing.T) {
	tests := []struct {
		c    EndCause
		want string
	}{
		{EndCause{Kind: EndExited, Status: 3}, "exited with status 3"},
		{EndCause{Kind: EndExited, Status: 2, Detail: "it could not create a thread"}, "exited with status 2: it could not create a thread"},
		{EndCause{Kind: EndExited, Detail: "waiting: i/o timeout"}, "exited with status 0 but: waiting: i/o timeout"},
		{EndCause{Kind: EndSignaled, Signal: syscall.SIGKILL}, "was killed by signal 9 (killed)"},
		{EndCause{Kind: EndStopped, For: 1875 * time.Millisecond}, "was stopped (SIGSTOP or SIGTSTP) for 1.875s, longer than half the failure timeout"},
		{EndCause{Kind: EndHung, For: 4375 * time.Millisecond, Limit: 5 * time.Second},
			"stopped answering its agent for 4.375s, most of the failure timeout of 5s (hung: it neither ran nor exited)"},
		{EndCause{Kind: EndNotStarted, Detail: "./pe: no such file"}, "could not be started: ./pe: no such file"},
		{EndCause{Kind: EndNotWaited, Detail: "no child"}, "could not be waited for: no child"},
		{EndCause{Kind: EndAgentLeft}, "the agent that started it left the job (it ended, was killed or stopped responding)"},
		{EndCause{Kind: EndAbandoned, Detail: "PE 0 waits in it"},
			"left the job after it finalized, while a collective that cannot complete without it was pending: PE 0 waits in it"},
		{EndCause{Kind: EndSeedGone}, ReasonSeedGone},
		{EndCause{Kind: EndAgentGone, Detail: "read: connection reset"}, ReasonAgentGone + ": read: connection reset"},
		{EndCause{Kind: EndOtherBuild, Detail: "advice"}, "is built from another goshmem version than the program: advice"},
	}
	for _, tt := range tests {
		if got := tt.c.String(); got != tt.want {
			t.Errorf("%+v: String = %q, want %q", tt.c, got, tt.want)
		}
	}
}
