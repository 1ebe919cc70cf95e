package ucp

// Setters of the parameter fields that have no behaviour of their own in
// goshmem yet: they record the field mask, so that the values count where
// the UCX documents say they do.

// Worker flags (ucp_worker_flags_t), for WorkerParams.SetFlags.
const (
	// WorkerFlagIgnoreRequestLeak: do not report requests left unreleased
	// when the worker is destroyed. goshmem reports none, so it changes
	// nothing.
	WorkerFlagIgnoreRequestLeak uint64 = 1 << 0
)

// SetCPUMask sets the CPUs on which the worker's resources should preferably
// be allocated (default: the system's policy). goshmem takes it as a hint
// and does not pin anything.
func (p *WorkerParams) SetCPUMask(cpus []int) *WorkerParams {
	p.CPUMask, p.FieldMask = cpus, p.FieldMask|WorkerParamFieldCPUMask
	return p
}

// SetFlags sets WorkerFlag* flags (default 0).
func (p *WorkerParams) SetFlags(f uint64) *WorkerParams {
	p.Flags, p.FieldMask = f, p.FieldMask|WorkerParamFieldFlags
	return p
}

// SetAMAlignment sets the minimal alignment of the data of an active message
// as its handler receives it (default: none asked for).
func (p *WorkerParams) SetAMAlignment(n int) *WorkerParams {
	p.AMAlignment, p.FieldMask = n, p.FieldMask|WorkerParamFieldAMAlignment
	return p
}

// Endpoint flags (ucp_ep_params_flags_field), for EPParams.SetFlags.
const (
	// EPParamsFlagClientServer: connect through a socket address (client
	// and server). goshmem endpoints connect by worker address only.
	EPParamsFlagClientServer uint32 = 1 << 0
	// EPParamsFlagNoLoopback: an endpoint to its own worker is not
	// connected to itself; it affects protocols that send to a particular
	// remote endpoint (stream), which goshmem does not have yet.
	EPParamsFlagNoLoopback uint32 = 1 << 1
	// EPParamsFlagSendClientID: send the worker's client id with a
	// client-server connection request.
	EPParamsFlagSendClientID uint32 = 1 << 2
)

// SetFlags sets EPParamsFlag* flags (default 0).
func (p *EPParams) SetFlags(f uint32) *EPParams {
	p.Flags, p.FieldMask = f, p.FieldMask|EPParamFieldFlags
	return p
}
