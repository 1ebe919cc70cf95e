package ucp

// Setters of the parameter fields that have no behaviour of their own in
// goshmem yet: they record the field mask, so that the values count where
// the UCX documents say they do. (The worker's CPU mask, flags and AM
// alignment setters are in worker.go, with the wakeup ones.)

// EPParamsFlags are the flags of an endpoint (EPParams.Flags).
type EPParamsFlags uint32

// Endpoint flags (ucp_ep_params_flags_field), for EPParams.SetFlags.
const (
	// EPParamsFlagClientServer: connect through a socket address, to a
	// Listener (EPParams.SetSockAddr; see Worker.NewEndpoint).
	EPParamsFlagClientServer EPParamsFlags = 1 << 0
	// EPParamsFlagNoLoopback: an endpoint to its own worker is not
	// connected to itself: what it sends on its stream goes to another
	// endpoint to self with this flag (the first such endpoint pairs with
	// the second, and so on; see stream.go), not to itself.
	EPParamsFlagNoLoopback EPParamsFlags = 1 << 1
	// EPParamsFlagSendClientID: send the worker's client id with a
	// client-server connection request.
	EPParamsFlagSendClientID EPParamsFlags = 1 << 2
)

// SetFlags sets EPParamsFlag* flags (default 0).
func (p *EPParams) SetFlags(f EPParamsFlags) *EPParams {
	p.Flags, p.FieldMask = f, p.FieldMask|EPParamFieldFlags
	return p
}
