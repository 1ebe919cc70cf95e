package rpc

// PeerFailed is the hook that shmem.OnPeerFailure calls, for the tests.
var PeerFailed = peerFailed

// SetSurvive sets Options.SurvivePeerFailure after Start, for the tests.
func SetSurvive(b bool) { rt.survive = b }
