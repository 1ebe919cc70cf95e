package wire

import "time"

// SampleMessages returns a message of each kind, the seed corpus of the
// fuzz tests of the decoders of bootstrap messages (the codec's, the
// seed's, the agents' and the PEs'). A function, not a variable: a PE
// binary does not link it.
func SampleMessages() []*Message {
	return []*Message{
		{Kind: KindHello, JobID: "job-1", Rank: 3, Build: "v0.4.0"},
		{Kind: KindWelcome, JobID: "job-1", Rank: -1, Build: "(devel) revision 0123456789ab"},
		{Kind: KindGather, JobID: "job-1", Rank: 3, Seq: 7, Payload: []byte("worker address")},
		{Kind: KindGather, JobID: "j", Rank: 0, Seq: 1, Flags: FlagBarrier, Payload: []byte{}},
		{Kind: KindResult, JobID: "job-1", Rank: -1, Seq: 7, Size: 4096},
		{Kind: KindResult, JobID: "job-1", Rank: -1, Seq: 8, Flags: FlagBarrier},
		{Kind: KindFinalize, JobID: "job-1", Rank: 2},
		{Kind: KindFinalizeAck, JobID: "job-1", Rank: -1},
		{Kind: KindPing, JobID: "job-1", Rank: -1},
		{Kind: KindPong, JobID: "job-1", Rank: 2},
		{Kind: KindGlobalExit, JobID: "job-1", Rank: 2, Code: 3, Host: "n1"},
		{Kind: KindGlobalExit, JobID: "job-1", Rank: 0, Code: -7},
		{Kind: KindGlobalExitAck, JobID: "job-1", Rank: -1},
		{Kind: KindLost, JobID: "job-1", Rank: 2, FailRank: 1, Reason: "connection reset by peer"},
		{Kind: KindLostAck, JobID: "job-1", Rank: -1},
		{Kind: KindFailure, JobID: "job-1", Rank: -1, FailRank: 5, Host: "n1 (10.0.0.2)", Cause: EndCause{Kind: EndExited, Status: 3}},
		{Kind: KindFailure, JobID: "job-1", Rank: -1, FailRank: -1, Host: "", Cause: EndCause{Kind: EndSeedGone}},
		{Kind: KindDirectory, JobID: "job-1", Rank: -1, Agents: []AgentEntry{{0, 0, "10.0.0.1:7946", "h1"}, {1, 0, "10.0.0.2:7946", "h2"}}},
		{Kind: KindDirectory, JobID: "job-1", Rank: 0, Addr: "10.0.0.1:7946", Agents: []AgentEntry{{4, 2, "[::1]:1", ""}}},
		{Kind: KindUp, JobID: "job-1", Rank: 3, Seq: 2, Count: 2, Entries: []Entry{{5, 1, []byte("a")}, {6, 1, []byte{}}}},
		{Kind: KindUp, JobID: "job-1", Rank: 3, Seq: 3, Flags: FlagBarrier, Count: 7},
		{Kind: KindDown, JobID: "job-1", Rank: 0, Seq: 2, Entries: []Entry{{0, 0, []byte("a")}, {1, 0, []byte("bb")}}},
		{Kind: KindDown, JobID: "job-1", Rank: 0, Seq: 3, Flags: FlagBarrier},
		{Kind: KindAbort, JobID: "job-1", Rank: 0, Seq: 3, Reason: "too large"},
		{Kind: KindAgentReport, JobID: "job-1", Rank: 1, Seq: 4, Addr: "10.0.0.1:7946", Events: []Event{
			{Kind: EvExit, Rank: 3, Code: 137, Other: -1, Host: "h2", End: EndCause{Kind: EndSignaled, Signal: 9}, Flags: FlagJoined},
			{Kind: EvExit, Rank: 0, Code: 143, Other: -1, Host: "h1", End: EndCause{Kind: EndSignaled, Signal: 15},
				Flags: FlagEndedByAgent | FlagJoined | FlagFinalized, Why: ReasonSeedGone},
			{Kind: EvJoined, Rank: 2, Other: -1},
			{Kind: EvLost, Rank: 2, Other: 1, Why: "connection reset by peer"},
			{Kind: EvExit, Rank: 4, Code: 1, Other: -1, Host: "h2", End: EndCause{Kind: EndHung, For: 4375 * time.Millisecond, Limit: 5 * time.Second}},
			{Kind: EvExit, Rank: 5, Code: 127, Other: -1, Host: "h2", End: EndCause{Kind: EndNotStarted, Detail: "./pe: no such file or directory"}},
			{Kind: EvAbandoned, Rank: 6, Other: -1, Host: "h2", End: EndCause{Kind: EndAbandoned, Detail: "PE 7 waits"}},
			{Kind: EvGlobalExit, Rank: 2, Code: 7, Other: -1, Host: "h1"},
		}},
		{Kind: KindAgentAck, JobID: "job-1", Rank: -1, Seq: 4},
		{Kind: KindTerminate, JobID: "job-1", Rank: -1, Reason: "PE 3 on host h2 was killed by signal 9 (killed)"},
		{Kind: KindStallReport, JobID: "job-1", Rank: -1, Ranks: []int{0, 5, 9}},
		{Kind: KindHello, JobID: "j", Rank: 0},
		{Kind: KindLeft, JobID: "job-1", Rank: -1, FailRank: 3, Host: "h2"},
	}
}
