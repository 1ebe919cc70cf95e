package rpc

import "fmt"

// PeerFailed is the hook that shmem.OnPeerFailure calls, for the tests.
var PeerFailed = peerFailed

// SetSurvive sets Options.SurvivePeerFailure after Start, for the tests.
func SetSurvive(b bool) { rt.survive = b }

// Leftovers describes the state of the package that outlives a Stop: empty
// when there is none.
func Leftovers() string {
	aggMu.Lock()
	na := len(aggs)
	aggMu.Unlock()
	np := 0
	for _, s := range rt.pend.slots {
		if s.c != nil {
			np++
		}
	}
	nt := 0
	for i := range rt.touched {
		if rt.touched[i].Load() {
			nt++
		}
	}
	if na+np+len(rt.sends)+len(rt.queue)+len(quietWait)+len(arrived)+nt == 0 {
		return ""
	}
	return fmt.Sprintf("%d aggregators, %d pending calls, %d sends, %d queued replies, %d Quiet replies, %d Barrier replies, %d PEs touched",
		na, np, len(rt.sends), len(rt.queue), len(quietWait), len(arrived), nt)
}
