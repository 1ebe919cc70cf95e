package ucp

import (
	"fmt"
	"math"

	"github.com/goshmem/goshmem/ucs"
)

// Fields of EPEvaluatePerfParams (ucp_ep_perf_param_field_t).
const (
	EPPerfParamFieldMessageSize uint64 = 1 << 0
)

// Fields of EPEvaluatePerfAttr (ucp_ep_perf_attr_field_t).
const (
	EPPerfAttrFieldEstimatedTime uint64 = 1 << 0
)

// EPEvaluatePerfParams are the parameters of Endpoint.EvaluatePerf
// (ucp_ep_evaluate_perf_param_t). MessageSize is mandatory.
type EPEvaluatePerfParams struct {
	FieldMask   uint64
	MessageSize int
}

// SetMessageSize sets the size, in bytes, of the message to estimate.
func (p *EPEvaluatePerfParams) SetMessageSize(n int) *EPEvaluatePerfParams {
	p.MessageSize, p.FieldMask = n, p.FieldMask|EPPerfParamFieldMessageSize
	return p
}

// EPEvaluatePerfAttr is the answer of Endpoint.EvaluatePerf
// (ucp_ep_evaluate_perf_attr_t). FieldMask says which fields are filled in.
type EPEvaluatePerfAttr struct {
	FieldMask uint64
	// EstimatedTime is the estimated time, in seconds, to send a message of
	// the given size on the endpoint.
	EstimatedTime float64
}

// EvaluatePerf estimates how long sending a message of p.MessageSize bytes
// on the endpoint takes (ucp_ep_evaluate_perf), from the performance figures
// of the interfaces on both sides (uct.IfaceAttr, and those the peer put in
// its address): for each transport the endpoint can send on, the larger of
// the two latencies (the local one for the context's estimated number of
// endpoints), plus both sides' overhead, plus the size divided by the smaller
// of the two bandwidths (the local one shared among the estimated processes
// per node); the estimate is the best of these. A larger message never gets
// a smaller estimate.
//
// It fails with ucs.ErrInvalidParam for nil params or a message size that
// is not set or negative, with ucs.ErrUnreachable when no transport of the
// endpoint can send, and on a closed endpoint.
func (ep *Endpoint) EvaluatePerf(p *EPEvaluatePerfParams) (EPEvaluatePerfAttr, error) {
	if p == nil || p.FieldMask&EPPerfParamFieldMessageSize == 0 || p.MessageSize < 0 {
		return EPEvaluatePerfAttr{}, fmt.Errorf("ucp ep evaluate perf: message size not set or negative: %w", ucs.ErrInvalidParam)
	}
	if ep.closed.Load() {
		return EPEvaluatePerfAttr{}, fmt.Errorf("ucp ep evaluate perf: %w", ErrClosed)
	}
	best := math.Inf(1)
	for i := range ep.cands {
		if c := &ep.cands[i]; c.can(capAM | capRMA) {
			best = math.Min(best, ep.w.ctx.estimateTime(c, p.MessageSize))
		}
	}
	if math.IsInf(best, 1) {
		return EPEvaluatePerfAttr{}, fmt.Errorf("ucp ep evaluate perf: no lane of %s can send %d bytes: %w", ep.name, p.MessageSize, ucs.ErrUnreachable)
	}
	return EPEvaluatePerfAttr{FieldMask: EPPerfAttrFieldEstimatedTime, EstimatedTime: best}, nil
}

// estimateTime estimates the seconds a message of size bytes takes on the
// candidate lane c (see Endpoint.EvaluatePerf); +Inf when a bandwidth is
// not positive and size is not zero.
func (ctx *Context) estimateTime(c *candidate, size int) float64 {
	at := c.wi.attr
	lat := math.Max(at.Latency.C+at.Latency.M*float64(max(ctx.numEPs, 1)), c.remote.latency)
	t := lat + at.Overhead + c.remote.overhead
	if size == 0 {
		return t
	}
	bw := math.Min(at.Bandwidth.Dedicated+at.Bandwidth.Shared/float64(max(ctx.numPPN, 1)), c.remote.bandwidth)
	if !(bw > 0) {
		return math.Inf(1)
	}
	return t + float64(size)/bw
}
