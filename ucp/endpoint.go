package ucp

import (
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// Fields of EPParams (ucp_ep_params_field).
const (
	EPParamFieldRemoteAddress uint64 = 1 << 0
	EPParamFieldErrMode       uint64 = 1 << 1
	EPParamFieldErrHandler    uint64 = 1 << 2
	EPParamFieldUserData      uint64 = 1 << 3
	EPParamFieldSockAddr      uint64 = 1 << 4
	EPParamFieldFlags         uint64 = 1 << 5
	EPParamFieldConnRequest   uint64 = 1 << 6
	EPParamFieldName          uint64 = 1 << 7
	EPParamFieldLocalSockAddr uint64 = 1 << 8
)

// ErrHandlingMode is an endpoint's error handling mode
// (ucp_err_handling_mode_t).
type ErrHandlingMode int

// Error handling modes.
const (
	// ErrHandlingModeNone: no guarantee about what happens on failure.
	ErrHandlingModeNone ErrHandlingMode = iota
	// ErrHandlingModePeer: a failed peer is reported to the error handler and
	// the endpoint's outstanding requests complete with an error.
	ErrHandlingModePeer
)

// ErrHandler is called when an endpoint fails (ucp_err_handler_t).
type ErrHandler func(userData any, ep *Endpoint, status error)

// EPParams are the parameters of Worker.NewEndpoint (ucp_ep_params_t).
type EPParams struct {
	FieldMask  uint64
	Address    []byte
	ErrMode    ErrHandlingMode
	ErrHandler ErrHandler
	UserData   any
	Flags      uint32
	Name       string
}

// SetAddress sets the remote worker address (mandatory for this kind of
// endpoint creation).
func (p *EPParams) SetAddress(a []byte) *EPParams {
	p.Address, p.FieldMask = a, p.FieldMask|EPParamFieldRemoteAddress
	return p
}

// SetErrMode sets the error handling mode (default ErrHandlingModeNone).
func (p *EPParams) SetErrMode(m ErrHandlingMode) *EPParams {
	p.ErrMode, p.FieldMask = m, p.FieldMask|EPParamFieldErrMode
	return p
}

// SetErrHandler sets the failure callback (default none).
func (p *EPParams) SetErrHandler(h ErrHandler) *EPParams {
	p.ErrHandler, p.FieldMask = h, p.FieldMask|EPParamFieldErrHandler
	return p
}

// SetUserData sets the endpoint's user data (default nil).
func (p *EPParams) SetUserData(d any) *EPParams {
	p.UserData, p.FieldMask = d, p.FieldMask|EPParamFieldUserData
	return p
}

// SetName names the endpoint (default: a unique generated name).
func (p *EPParams) SetName(n string) *EPParams {
	p.Name, p.FieldMask = n, p.FieldMask|EPParamFieldName
	return p
}

// lane is one transport connection of an endpoint.
type lane struct {
	wi     *workerIface
	ep     uct.EP
	remote *addrIface
	usage  int        // usage* bits
	sendMu sync.Mutex // serializes software-protocol sends, which receive paths also make
}

func (l *lane) String() string {
	return l.wi.rsc.tl.TLName + "/" + l.wi.rsc.tl.DevName
}

// Endpoint is a connection from a worker to one remote worker (ucp_ep_h).
type Endpoint struct {
	w          *Worker
	params     EPParams
	name       string
	remoteUID  uint64
	remoteName string
	cands      []candidate // reachable lanes, best first
	lanes      []*lane     // the connected ones
	am         *lane       // active messages (and software RMA and atomics)
	failed     error
	closed     bool
	swDirty    atomic.Bool // software puts or atomics sent since the last flush
	amq        amEP        // active messages (am.go)
}

// NewEndpoint connects to the worker whose packed address params carries
// (ucp_ep_create). It fails with ucs.ErrInvalidAddr for a malformed address
// and ucs.ErrUnreachable when no selected transport reaches the peer.
func (w *Worker) NewEndpoint(params *EPParams) (*Endpoint, error) {
	if w.closed {
		return nil, fmt.Errorf("ucp ep create: %w", errClosed)
	}
	if params == nil || params.FieldMask&EPParamFieldRemoteAddress == 0 {
		return nil, fmt.Errorf("ucp ep create: remote address not set: %w", ucs.ErrInvalidParam)
	}
	ra, err := decodeWorkerAddress(params.Address)
	if err != nil {
		return nil, fmt.Errorf("ucp ep create: %w", err)
	}
	ep := &Endpoint{w: w, params: *params, remoteUID: ra.uid, remoteName: ra.name}
	if params.FieldMask&EPParamFieldErrMode == 0 {
		ep.params.ErrMode = ErrHandlingModeNone
	}
	if params.FieldMask&EPParamFieldName != 0 {
		ep.name = params.Name
	} else {
		ep.name = fmt.Sprintf("%s->%s", w.name, ra.name)
	}
	if err := ep.wireup(ra); err != nil {
		ep.destroyLanes()
		return nil, fmt.Errorf("ucp ep create to %q: %w", ra.name, err)
	}
	w.epMu.Lock()
	w.eps = append(w.eps, ep)
	w.epMu.Unlock()
	return ep, nil
}

type candidate struct {
	wi     *workerIface
	remote *addrIface
	score  float64 // estimated seconds for a small operation; lower is better
}

func (c candidate) better(o candidate) bool {
	if c.score != o.score {
		return c.score < o.score
	}
	return c.wi.attr.Priority > o.wi.attr.Priority
}

const (
	capRMA = uct.IfaceFlagPutShort | uct.IfaceFlagPutBcopy | uct.IfaceFlagPutZcopy
	capGet = uct.IfaceFlagGetBcopy | uct.IfaceFlagGetZcopy
	capAM  = uct.IfaceFlagAMShort | uct.IfaceFlagAMBcopy
	capAMO = uct.IfaceFlagAtomicCPU | uct.IfaceFlagAtomicDevice
)

// wireup finds the candidate lanes to the remote worker: every pair of a
// local and a remote interface of the same transport that the local one
// reaches, ranked by the latency and overhead both sides advertise. The
// active-message lane (the best candidate that carries AMs) is connected
// now; RMA and atomic lanes are chosen per remote key, among the candidates
// whose memory domain registered the key's memory (Endpoint.RkeyUnpack), and
// connected then.
func (ep *Endpoint) wireup(ra *workerAddress) error {
	for i := range ra.ifaces {
		r := &ra.ifaces[i]
		for _, wi := range ep.w.ifaces {
			if wi.rsc.tl.TLName != r.tlName || wi.rsc.md.comp.Name() != r.component {
				continue
			}
			if !wi.iface.IsReachable(r.deviceAddr, r.ifaceAddr) {
				continue
			}
			lat := math.Max(wi.attr.Latency.C, r.latency) + wi.attr.Overhead + r.overhead
			ep.cands = append(ep.cands, candidate{wi: wi, remote: r, score: lat})
		}
	}
	if len(ep.cands) == 0 {
		return fmt.Errorf("no transport reaches the peer: %w", ucs.ErrUnreachable)
	}
	sort.SliceStable(ep.cands, func(i, j int) bool { return ep.cands[i].better(ep.cands[j]) })
	useful := false
	for _, c := range ep.cands {
		useful = useful || c.can(capRMA) || c.canAMO()
		if ep.am == nil && c.can(capAM) {
			l, err := ep.laneFor(&c)
			if err != nil {
				return err
			}
			ep.am, l.usage = l, l.usage|usageAM
		}
	}
	if !useful && ep.am == nil {
		return fmt.Errorf("no transport offers RMA, atomics or active messages to the peer: %w", ucs.ErrUnreachable)
	}
	return nil
}

// can reports whether both sides of the candidate have one of flags.
func (c candidate) can(flags uint64) bool {
	return c.wi.attr.Flags&flags != 0 && c.remote.capFlags&flags != 0
}

// canAMO reports whether both sides do the 64-bit atomics ucp needs on a
// device lane.
func (c candidate) canAMO() bool {
	const need64 = 1<<uct.AtomicOpAdd | 1<<uct.AtomicOpSwap | 1<<uct.AtomicOpCSwap
	return c.can(capAMO) && c.wi.attr.Atomic64.FopFlags&need64 == need64 && (c.remote.atomics>>24)&need64 == need64
}

// Lane usages, for Query.
const (
	usageRMA = 1 << iota
	usageAMO
	usageAM
)

// laneFor returns the lane for the candidate, creating its uct endpoint
// unless another lane already connects the same pair of interfaces.
func (ep *Endpoint) laneFor(c *candidate) (*lane, error) {
	for _, l := range ep.lanes {
		if l.wi == c.wi && l.remote == c.remote {
			return l, nil
		}
	}
	uep, err := c.wi.iface.EPCreate(&uct.EPParams{DeviceAddr: c.remote.deviceAddr, IfaceAddr: c.remote.ifaceAddr})
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", c.wi.rsc.tl.TLName, err)
	}
	c.wi.used.Store(true)
	l := &lane{wi: c.wi, ep: uep, remote: c.remote}
	ep.lanes = append(ep.lanes, l)
	return l, nil
}

func (ep *Endpoint) destroyLanes() {
	for _, l := range ep.lanes {
		l.ep.Destroy()
	}
	ep.lanes, ep.am = nil, nil
	ep.closed = true
}

// Endpoint close modes (ucp_ep_close_mode).
const (
	// CloseModeFlush completes outstanding operations before closing.
	CloseModeFlush = iota
	// CloseModeForce closes at once; outstanding operations fail.
	CloseModeForce
)

// Close closes the endpoint (ucp_ep_close_nbx): in CloseModeFlush after its
// operations complete, in CloseModeForce at once.
func (ep *Endpoint) Close(mode int) error {
	if ep.closed {
		return nil
	}
	var err error
	if mode == CloseModeFlush {
		err = ep.Flush()
	}
	w := ep.w
	w.epMu.Lock()
	for i, e := range w.eps {
		if e == ep {
			w.eps = append(w.eps[:i], w.eps[i+1:]...)
			break
		}
	}
	w.epMu.Unlock()
	ep.destroyLanes()
	return err
}

// Flush waits until every operation issued on the endpoint has completed at
// the target (ucp_ep_flush).
func (ep *Endpoint) Flush() error {
	if ep.closed {
		return fmt.Errorf("ucp ep flush: %w", errClosed)
	}
	if err := ep.swFlush(); err != nil {
		return fmt.Errorf("ucp ep flush: %w", err)
	}
	if err := ep.amFlush(); err != nil {
		return fmt.Errorf("ucp ep flush: %w", err)
	}
	for _, l := range ep.lanes {
		if err := ep.w.waitStatus(func(c *uct.Completion) ucs.Status { return l.ep.Flush(0, c) }); err != nil {
			return fmt.Errorf("ucp ep flush %s: %w", l, err)
		}
	}
	return nil
}

// Worker returns the endpoint's worker.
func (ep *Endpoint) Worker() *Worker { return ep.w }

// UserData returns the user data the endpoint was created with.
func (ep *Endpoint) UserData() any { return ep.params.UserData }

// LaneInfo names a lane of an endpoint: what it is used for, and its
// transport and device.
type LaneInfo struct {
	Usage     string // "rma", "amo", "am", or several joined with ","
	Transport string
	Device    string
}

// EPAttr describes an endpoint (ucp_ep_attr_t).
type EPAttr struct {
	Name       string
	RemoteName string
	Lanes      []LaneInfo
}

// Query describes the endpoint and its lanes (ucp_ep_query).
func (ep *Endpoint) Query() EPAttr {
	a := EPAttr{Name: ep.name, RemoteName: ep.remoteName}
	for _, l := range ep.lanes {
		var use []string
		if l.usage&usageRMA != 0 {
			use = append(use, "rma")
		}
		if l.usage&usageAMO != 0 {
			use = append(use, "amo")
		}
		if l.usage&usageAM != 0 {
			use = append(use, "am")
		}
		u := ""
		for i, s := range use {
			if i > 0 {
				u += ","
			}
			u += s
		}
		a.Lanes = append(a.Lanes, LaneInfo{Usage: u, Transport: l.wi.rsc.tl.TLName, Device: l.wi.rsc.tl.DevName})
	}
	return a
}
