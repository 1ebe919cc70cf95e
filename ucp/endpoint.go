package ucp

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"sort"
	"strings"
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

// ErrHandler is called when an endpoint in error mode PEER fails
// (ucp_err_handler_t): once, from Worker.Progress, after the endpoint's
// outstanding requests completed with status, a ucs.Status such as
// ucs.ErrConnectionReset (a transport lost the connection) or
// ucs.ErrEndpointTimeout (the keepalive found the peer gone). userData is
// the endpoint's (EPParams.SetUserData). The handler may call the worker
// (Close(CloseModeForce) on ep is the usual thing to do) but not Progress.
type ErrHandler func(userData any, ep *Endpoint, status error)

// EPParams are the parameters of Worker.NewEndpoint (ucp_ep_params_t).
type EPParams struct {
	FieldMask  uint64
	Address    []byte
	ErrMode    ErrHandlingMode
	ErrHandler ErrHandler
	UserData   any
	Flags      EPParamsFlags
	Name       string
	// SockAddr, LocalSockAddr and ConnRequest make client-server
	// endpoints (ep_sockaddr.go).
	SockAddr      netip.AddrPort
	LocalSockAddr netip.AddrPort
	ConnRequest   *ConnRequest
	// internal: the worker made the endpoint for itself (replies to a
	// peer); it takes no stream connection number (stream.go).
	internal bool
}

// SetAddress sets the remote worker address (mandatory for this kind of
// endpoint creation).
func (p *EPParams) SetAddress(a []byte) *EPParams {
	p.Address, p.FieldMask = a, p.FieldMask|EPParamFieldRemoteAddress
	return p
}

// SetErrMode sets the error handling mode (default ErrHandlingModeNone).
// In ErrHandlingModePeer a peer found gone (a transport's error, or the
// worker's keepalive every UCX_KEEPALIVE_INTERVAL) fails the endpoint: its
// outstanding requests complete with the error, its error handler is
// called once, and later operations fail at once with the error. In
// ErrHandlingModeNone nothing of that happens. Another value makes
// NewEndpoint fail with ucs.ErrInvalidParam.
func (p *EPParams) SetErrMode(m ErrHandlingMode) *EPParams {
	p.ErrMode, p.FieldMask = m, p.FieldMask|EPParamFieldErrMode
	return p
}

// SetErrHandler sets the failure callback of error mode PEER (default
// none: the endpoint fails silently).
func (p *EPParams) SetErrHandler(h ErrHandler) *EPParams {
	p.ErrHandler, p.FieldMask = h, p.FieldMask|EPParamFieldErrHandler
	return p
}

// SetUserData sets the endpoint's user data (default nil).
func (p *EPParams) SetUserData(d any) *EPParams {
	p.UserData, p.FieldMask = d, p.FieldMask|EPParamFieldUserData
	return p
}

// SetName names the endpoint (default: a name unique among the endpoints
// of its worker: the worker's name, the peer's, and a sequence number).
func (p *EPParams) SetName(n string) *EPParams {
	p.Name, p.FieldMask = n, p.FieldMask|EPParamFieldName
	return p
}

// lane is one transport connection of an endpoint.
type lane struct {
	wi     *workerIface
	ep     uct.EP
	remote *addrIface
	owner  *Endpoint
	usage  int // usage* bits; guarded by the owner's laneMu
	// sendMu serializes software-protocol sends, which receive paths also
	// make, the pending requests and the keepalive's peer check with
	// Destroy: those take its mutex (sendMu.mu) always. The two-sided
	// protocols' sends take it only in multi mode (sendMu.lock): in the
	// other modes one goroutine at a time uses the worker, and so sends,
	// destroys the lane and packs into pk, and a transport's check runs
	// concurrently with its sends (uct.EPChecker).
	sendMu modeMutex
	// destroyed is set, under sendMu, when ep was destroyed: the software
	// protocols and the keepalive then leave it alone.
	destroyed bool
	pk        lanePacker // packs the two-sided protocols' messages, under sendMu.lock
}

func (l *lane) String() string {
	return l.wi.rsc.tl.TLName + "/" + l.wi.rsc.tl.DevName
}

// Endpoint is a connection from a worker to one remote worker (ucp_ep_h).
// In the worker's multi thread mode any number of goroutines may use it at
// once.
type Endpoint struct {
	w          *Worker
	params     EPParams
	name       string
	remoteUID  uint64
	remoteName string
	cands      []candidate  // reachable lanes, best first
	laneMu     sync.Mutex   // guards lanes (appended to by RkeyUnpack) and lane usages
	lanes      []*lane      // the connected ones
	am         *lane        // active messages (and software RMA and atomics); set by wireup
	failStatus atomic.Int32 // the ucs.Status the endpoint failed with (mode PEER); 0 if none
	closing    atomic.Bool  // Close began: the error handler is not called any more
	closed     atomic.Bool  // closed: operations fail
	// linger: closed at once (force), its lanes kept until the revokes of
	// its rendezvous sends went out (tagRevokeEP, epFlushOp.linger).
	linger    atomic.Bool
	swDirty   atomic.Bool  // software puts or atomics sent since the last flush
	wiredBack atomic.Bool  // the peer has this worker's address (swWireup)
	direct    atomic.Bool  // a key unpacked on it maps the peer's memory here
	queued    atomic.Int32 // its sends in the worker's send queue (proto.go)
	thresh    atomic.Pointer[protoThresh]
	sock      sockAddrs // of a client-server endpoint (ep_sockaddr.go)
	// conn is set while a client-server endpoint connects, and after its
	// connection failed (ep_connect.go); nil on a wired endpoint.
	conn atomic.Pointer[epConnect]
	strm *streamQ // its stream (stream.go); nil without FeatureStream
}

// NewEndpoint connects to the worker whose packed address params carries
// (ucp_ep_create). It fails with ucs.ErrInvalidAddr for a malformed address
// and ucs.ErrUnreachable when no selected transport reaches the peer.
//
// In place of the worker's address, params may carry a listener's socket
// address (SetSockAddr, with EPParamsFlagClientServer), to connect as a
// client: NewEndpoint then returns the endpoint at once, connecting, as
// UCX's ucp_ep_create does, and runs the handshake with the listener (see
// Listener) in the background; the worker's Progress wires the endpoint to
// the server's worker once the server's application accepted. Sends,
// active messages, stream sends, flushes and closes issued meanwhile
// return a request and start, in order, when it is wired (a request's
// debug string says "endpoint connecting" until then); RkeyUnpack, stream
// receives and Fence progress the worker until it is. The connection fails
// with ucs.ErrRejected when the server rejected the client or its key does
// not match, ucs.ErrUnreachable when the address cannot be reached,
// ucs.ErrTimedOut or ucs.ErrConnectionReset when the server did not
// answer in time (UCX_CS_HANDSHAKE_TIMEOUT for each step,
// UCX_CS_ACCEPT_TIMEOUT, 30s, for the application's decision) or went
// away: the waiting requests complete with that error, later operations
// and Status return it, and in error mode PEER the error handler is
// called. Only bad parameters make NewEndpoint itself fail. Or params may carry a connection
// request from a listener's ConnHandler (SetConnRequest), to accept it as
// the server: NewEndpoint wires the endpoint to the client's worker, sends
// the server's address and returns; it fails with ucs.ErrConnectionReset
// when the client left. When the client then does not confirm within the
// handshake timeout (it left, or could not connect its side), an endpoint
// in error mode PEER fails, as on the loss of any peer, with
// ucs.ErrConnectionReset or ucs.ErrTimedOut.
//
// In the worker's multi thread mode it may be called from several
// goroutines at once.
func (w *Worker) NewEndpoint(params *EPParams) (*Endpoint, error) {
	if w.closed.Load() {
		return nil, fmt.Errorf("ucp ep create: %w", ErrClosed)
	}
	if params != nil && (params.FieldMask&(EPParamFieldSockAddr|EPParamFieldConnRequest) != 0 ||
		params.FieldMask&EPParamFieldFlags != 0 && params.Flags&EPParamsFlagClientServer != 0) {
		return w.newSockaddrEndpoint(params)
	}
	if params == nil || params.FieldMask&EPParamFieldRemoteAddress == 0 {
		return nil, fmt.Errorf("ucp ep create: remote address not set: %w", ucs.ErrInvalidParam)
	}
	ra, err := decodeWorkerAddress(params.Address)
	if err != nil {
		return nil, fmt.Errorf("ucp ep create: %w", err)
	}
	return w.newEndpointTo(params, ra, "")
}

// newEndpointTo creates an endpoint to the worker with address ra, with
// network lanes only from interfaces on netDev when it is not "" (a
// client-server endpoint's, ep_sockaddr.go).
func (w *Worker) newEndpointTo(params *EPParams, ra *workerAddress, netDev string) (*Endpoint, error) {
	if m := params.ErrMode; params.FieldMask&EPParamFieldErrMode != 0 && m != ErrHandlingModeNone && m != ErrHandlingModePeer {
		return nil, fmt.Errorf("ucp ep create: error handling mode %d: %w", m, ucs.ErrInvalidParam)
	}
	ep := w.newEndpointShell(params, ra.name)
	if err := ep.wireTo(ra, netDev); err != nil {
		return nil, err
	}
	return ep, nil
}

// newEndpointShell returns an endpoint with params (checked) and no lanes,
// to the worker named remote.
func (w *Worker) newEndpointShell(params *EPParams, remote string) *Endpoint {
	ep := &Endpoint{w: w, params: *params, remoteName: remote}
	if params.FieldMask&EPParamFieldErrMode == 0 {
		ep.params.ErrMode = ErrHandlingModeNone
	}
	if params.FieldMask&EPParamFieldUserData == 0 {
		ep.params.UserData = nil
	}
	if params.FieldMask&EPParamFieldName != 0 {
		ep.name = params.Name
	} else {
		// The sequence number tells apart endpoints to the same peer.
		ep.name = fmt.Sprintf("%s->%s#%d", w.name, remote, w.epSeq.Add(1))
	}
	return ep
}

// wireTo connects the endpoint's lanes to the worker with address ra and
// makes it one of the worker's endpoints.
func (ep *Endpoint) wireTo(ra *workerAddress, netDev string) error {
	w := ep.w
	ep.remoteUID, ep.remoteName = ra.uid, ra.name
	ep.laneMu.Lock()
	err := ep.wireup(ra, netDev)
	ep.laneMu.Unlock()
	if err != nil {
		ep.destroyLanes()
		return fmt.Errorf("ucp ep create to %q: %w", ra.name, err)
	}
	w.epMu.Lock()
	w.eps = append(w.eps, ep)
	w.epMu.Unlock()
	w.streamAddEP(ep)
	if w.closed.Load() { // destroyed meanwhile: Destroy may have missed ep
		ep.closeNow(ucs.ErrCanceled)
		return fmt.Errorf("ucp ep create: %w", ErrClosed)
	}
	if ep.params.ErrMode == ErrHandlingModePeer {
		w.startKeepalive()
	}
	return nil
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
// reaches (of the local network interfaces, those on netDev, unless it is
// ""), ranked by the latency and overhead both sides advertise. The
// active-message lane (the best candidate that carries AMs) is connected
// now; RMA and atomic lanes are chosen per remote key, among the candidates
// whose memory domain registered the key's memory (Endpoint.RkeyUnpack), and
// connected then.
func (ep *Endpoint) wireup(ra *workerAddress, netDev string) error {
	ep.cands = ep.w.candidates(ep.cands, ra, netDev)
	if len(ep.cands) == 0 {
		return fmt.Errorf("no transport reaches the peer: %w", ucs.ErrUnreachable)
	}
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

// candidates appends to cands the candidate lanes of the worker to the
// remote worker ra (of the local network interfaces, those on netDev,
// unless it is ""), best first: every pair of a local and a remote
// interface of the same transport that the local one reaches, ranked by
// the latency and overhead both sides advertise.
func (w *Worker) candidates(cands []candidate, ra *workerAddress, netDev string) []candidate {
	for i := range ra.ifaces {
		r := &ra.ifaces[i]
		for _, wi := range w.ifaces {
			if !onNetDev(wi, netDev) || !wi.reaches(r) {
				continue
			}
			lat := math.Max(wi.attr.Latency.C, r.latency) + wi.attr.Overhead + r.overhead
			cands = append(cands, candidate{wi: wi, remote: r, score: lat})
		}
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].better(cands[j]) })
	rotateTies(cands, w.ctx.nodeID)
	return cands
}

// rotateTies spreads the processes of a node over equally good lanes, as
// UCX uses the node-local id (Params.SetNodeLocalID, UCX_LOCAL_NODE_ID):
// in each run of candidates that rank the same (better says neither is),
// the one at index id modulo the run's length comes first, the others
// following in order. With id 0 the order stays as it is.
func rotateTies(cands []candidate, id uint64) {
	for i := 0; i < len(cands); {
		j := i + 1
		for j < len(cands) && !cands[i].better(cands[j]) && !cands[j].better(cands[i]) {
			j++
		}
		if k := int(id % uint64(j-i)); k != 0 {
			run := cands[i:j]
			slices.Reverse(run[:k])
			slices.Reverse(run[k:])
			slices.Reverse(run)
		}
		i = j
	}
}

// reaches reports whether the interface reaches the remote one r: the same
// transport of the same component, and reachable as the transport says.
func (wi *workerIface) reaches(r *addrIface) bool {
	return wi.rsc.tl.TLName == r.tlName && wi.rsc.md.comp.Name() == r.component && wi.iface.IsReachable(r.deviceAddr, r.ifaceAddr)
}

// can reports whether both sides of the candidate have one of flags.
func (c candidate) can(flags uct.IfaceFlags) bool {
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
// unless another lane already connects the same pair of interfaces. The
// caller holds ep.laneMu.
func (ep *Endpoint) laneFor(c *candidate) (*lane, error) {
	if ep.closed.Load() {
		return nil, ErrClosed
	}
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
	l := &lane{wi: c.wi, ep: uep, remote: c.remote, owner: ep}
	l.sendMu.multi = ep.w.mode == ucs.ThreadModeMulti
	ep.lanes = append(ep.lanes, l)
	return l, nil
}

// lanesSnapshot returns the endpoint's lanes as they are now; the slice
// must not be modified (lanes are only ever appended, or all dropped).
func (ep *Endpoint) lanesSnapshot() []*lane {
	ep.laneMu.Lock()
	defer ep.laneMu.Unlock()
	return ep.lanes[:len(ep.lanes):len(ep.lanes)]
}

// destroyLanes destroys the transport endpoints of every lane. A lane's
// uct endpoint is destroyed under its sendMu, so that no software message,
// pending request or keepalive check (nor, in multi mode, a two-sided send:
// sendMu.lock) is using it meanwhile; requests still
// queued for resources complete with the endpoint's status (ucs.ErrCanceled
// unless it failed).
func (ep *Endpoint) destroyLanes() {
	ep.laneMu.Lock()
	lanes := ep.lanes
	ep.lanes = nil
	ep.laneMu.Unlock()
	st := ep.dead()
	if st == ucs.OK {
		st = ucs.ErrCanceled
	}
	for _, l := range lanes {
		l.sendMu.mu.Lock()
		reqs := l.takePendingLocked()
		if !l.destroyed {
			l.destroyed = true
			l.ep.Destroy()
		}
		l.sendMu.mu.Unlock()
		for _, r := range reqs {
			r.complete(st)
		}
	}
}

// dead returns OK for an endpoint that may be used, the status it failed
// with (mode PEER), or ucs.ErrCanceled once it is closed.
func (ep *Endpoint) dead() ucs.Status {
	if st := ep.failStatus.Load(); st != 0 {
		return ucs.Status(st)
	}
	if ep.closed.Load() {
		return ucs.ErrCanceled
	}
	return ucs.OK
}

// Status returns nil while the endpoint works (or a client-server one
// connects), the error it failed with in error mode PEER (a ucs.Status such
// as ucs.ErrConnectionReset), the error a client-server endpoint's
// connection failed with, or an error once it is closed.
func (ep *Endpoint) Status() error {
	if st := ep.failStatus.Load(); st != 0 {
		return ucs.Status(st)
	}
	if ep.closed.Load() {
		return ErrClosed
	}
	if cs := ep.conn.Load(); cs != nil {
		cs.mu.Lock()
		defer cs.mu.Unlock()
		return cs.failErr
	}
	return nil
}

// Endpoint close modes (ucp_ep_close_mode).
const (
	// CloseModeFlush completes outstanding operations before closing.
	CloseModeFlush = iota
	// CloseModeForce closes at once; outstanding operations fail with
	// ucs.ErrCanceled.
	CloseModeForce
)

// Close closes the endpoint (ucp_ep_close_nbx). In CloseModeFlush it first
// flushes the endpoint, as Flush does, and returns the flush's error, if
// any; an endpoint that failed (mode PEER) is not flushed. In CloseModeForce
// it closes at once: every outstanding request of the endpoint completes
// with ucs.ErrCanceled (those the transports hold, from a later Progress).
// Either way the endpoint's transport connections are released and later
// operations fail; its error handler is not called any more. A rendezvous
// tag send that the receiver has not answered is revoked (the receiver drops
// the message, or its receive waiting for the data fails with
// ucs.ErrCanceled): it completes with ucs.ErrCanceled, but where the
// receiver may read its buffer directly (shared memory, cma, self) only once
// the receiver answered, from a later Progress, and with OK when a receive
// took the data first. After a force close that revoked sends, the
// connections are released once the revokes are out, from a later Progress.
// Closing a closed endpoint does nothing and returns nil; an unknown mode
// fails with ucs.ErrInvalidParam. In multi mode several goroutines may close
// endpoints at once.
func (ep *Endpoint) Close(mode int) error {
	r, err := ep.EPCloseNB(mode)
	if err != nil {
		return err
	}
	if err := waitDone(r, nil); err != nil {
		return fmt.Errorf("ucp ep close: %w", err)
	}
	return nil
}

// closeNow marks the endpoint closed, completes its queued and software
// requests with st and destroys its lanes.
func (ep *Endpoint) closeNow(st ucs.Status) {
	if cs := ep.conn.Load(); cs != nil {
		ep.abortConnect(cs)
	}
	ep.closing.Store(true)
	ep.closed.Store(true)
	ep.purge(st)
	if !ep.linger.Load() {
		ep.destroyLanes()
	}
	ep.swClean()
}

// Flush waits until every operation issued on the endpoint has completed at
// the target (ucp_ep_flush). On an endpoint that failed (mode PEER) it
// fails at once with the endpoint's error, and a failure while it waits
// ends it with that error. On a client-server endpoint that connects it
// first waits for the connection, and fails with its error.
func (ep *Endpoint) Flush() error {
	if ep.closed.Load() {
		return fmt.Errorf("ucp ep flush: %w", ErrClosed)
	}
	if st := ep.failStatus.Load(); st != 0 {
		return fmt.Errorf("ucp ep flush to %s: %w", ep.remoteName, ucs.Status(st))
	}
	return ep.flush()
}

func (ep *Endpoint) flush() error {
	r, err := ep.flushStart(nil, false)
	if err != nil {
		return err
	}
	if err := waitDone(r, nil); err != nil {
		return fmt.Errorf("ucp ep flush to %s: %w", ep.remoteName, err)
	}
	return nil
}

// Fence orders the RMA and atomic operations issued on the endpoint before
// it before those issued after it, at the target (ucp_ep_fence). Where they
// all travel one transport connection, its fence orders them. Where they
// may take different paths (software RMA and atomics, which the target
// applies as their messages arrive, beside direct access to the target's
// mapped memory or another lane), the fence waits until the earlier ones
// completed at the target, as UCX's strong fence does: an emulated atomic
// issued before the fence lands before a direct put issued after it. It
// fails with the endpoint's error on a failed or closed endpoint.
func (ep *Endpoint) Fence() error {
	if ep.closed.Load() {
		return fmt.Errorf("ucp ep fence: %w", ErrClosed)
	}
	if err := ep.waitConnected(); err != nil {
		return fmt.Errorf("ucp ep fence: %w", err)
	}
	if st := ep.failStatus.Load(); st != 0 {
		return fmt.Errorf("ucp ep fence to %s: %w", ep.remoteName, ucs.Status(st))
	}
	if err := ep.fence(); err != nil {
		return fmt.Errorf("ucp ep fence: %w", err)
	}
	return nil
}

// fence orders the endpoint's earlier operations before its later ones:
// software operations are flushed (the target applies them when their
// messages arrive), so are the RMA lanes whose transport completes at the
// target after its call returned (network lanes) when another path (direct
// access, another lane) could overtake them; the other lanes are fenced.
func (ep *Endpoint) fence() error {
	if ep.swDirty.Load() {
		if err := ep.swFlush(); err != nil {
			return err
		}
	}
	strong := ep.deferredPaths()
	for _, l := range ep.lanesSnapshot() {
		var err error
		if strong && l.usage&(usageRMA|usageAMO) != 0 && l.deferred() {
			err = ep.w.waitStatus(func(c *uct.Completion) ucs.Status { return l.ep.Flush(0, c) })
		} else if st := l.ep.Fence(0); st.IsErr() {
			err = st
		}
		if err != nil {
			return fmt.Errorf("%s: %w", l, err)
		}
	}
	return nil
}

// needsFlushFence reports whether a fence of the endpoint must wait for
// earlier operations (see fence) rather than only fence its lanes.
func (ep *Endpoint) needsFlushFence() bool {
	return ep.swDirty.Load() || ep.deferredPaths()
}

// deferredPaths reports whether the endpoint has an RMA or atomic lane
// whose operations complete at the target after their call returned,
// beside another path to the target's memory.
func (ep *Endpoint) deferredPaths() bool {
	ep.laneMu.Lock()
	defer ep.laneMu.Unlock()
	paths, deferred := 0, false
	if ep.direct.Load() {
		paths++
	}
	for _, l := range ep.lanes {
		// The active message lane is a path too: it carries the
		// software puts and atomics (another transport's, with
		// UCX_TLS=tcp,posix).
		if l.usage&(usageRMA|usageAMO|usageAM) != 0 {
			paths++
		}
		if l.usage&(usageRMA|usageAMO) != 0 {
			deferred = deferred || l.deferred()
		}
	}
	return deferred && paths > 1
}

// deferred reports whether the lane's transport may complete an operation
// at the target after its call returned (a network transport), where
// shared memory, cma and self are done when the call returns.
func (l *lane) deferred() bool { return l.wi.rsc.tl.DevType == uct.DeviceTypeNet }

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

// Fields of EPAttr (ucp_ep_attr_field), for Endpoint.QueryAttr.
// EPAttrFieldRemoteName is goshmem's.
const (
	EPAttrFieldName           uint64 = 1 << 0
	EPAttrFieldLocalSockAddr  uint64 = 1 << 1
	EPAttrFieldRemoteSockAddr uint64 = 1 << 2
	EPAttrFieldTransports     uint64 = 1 << 3
	EPAttrFieldRemoteName     uint64 = 1 << 32

	epAttrFieldsSock = EPAttrFieldLocalSockAddr | EPAttrFieldRemoteSockAddr
	epAttrFieldsAll  = EPAttrFieldName | epAttrFieldsSock | EPAttrFieldTransports | EPAttrFieldRemoteName
)

// EPAttr describes an endpoint (ucp_ep_attr_t). FieldMask says which
// fields are filled in.
type EPAttr struct {
	FieldMask  uint64
	Name       string
	RemoteName string
	// Lanes are the endpoint's transports (EPAttrFieldTransports).
	Lanes []LaneInfo
	// LocalSockAddr and RemoteSockAddr are, for a client-server endpoint,
	// the two ends of the connection it was set up over (the server's
	// listening address is the client's remote one); zero otherwise.
	LocalSockAddr, RemoteSockAddr netip.AddrPort
}

// Query describes the endpoint and its lanes: every field of EPAttr that
// applies (the socket addresses only for a client-server endpoint that
// connected), as QueryAttr with them.
func (ep *Endpoint) Query() EPAttr {
	a := EPAttr{FieldMask: epAttrFieldsAll}
	if ep.QueryAttr(&a) != nil {
		a = EPAttr{FieldMask: epAttrFieldsAll &^ epAttrFieldsSock}
		ep.QueryAttr(&a) // nothing else fails
	}
	return a
}

// QueryAttr fills in the fields of attr that attr.FieldMask selects and
// clears the others (ucp_ep_query); unknown bits are ignored. The socket
// addresses exist only for an endpoint created from a socket address or a
// connection request: for an endpoint created from a worker address, or
// one that has not connected yet, asking for them fails with
// ucs.ErrNotConnected, as in UCX. A nil attr fails with
// ucs.ErrInvalidParam.
func (ep *Endpoint) QueryAttr(attr *EPAttr) error {
	if attr == nil {
		return fmt.Errorf("ucp ep query: %w", ucs.ErrInvalidParam)
	}
	mask := attr.FieldMask
	*attr = EPAttr{FieldMask: mask}
	if mask&epAttrFieldsSock != 0 {
		if ep.params.FieldMask&(EPParamFieldSockAddr|EPParamFieldConnRequest) == 0 || !ep.sock.remote.IsValid() {
			return fmt.Errorf("ucp ep query: %s has no socket addresses: %w", ep.name, ucs.ErrNotConnected)
		}
		if mask&EPAttrFieldLocalSockAddr != 0 {
			attr.LocalSockAddr = ep.sock.local
		}
		if mask&EPAttrFieldRemoteSockAddr != 0 {
			attr.RemoteSockAddr = ep.sock.remote
		}
	}
	if mask&EPAttrFieldName != 0 {
		attr.Name = ep.name
	}
	if mask&EPAttrFieldRemoteName != 0 {
		attr.RemoteName = ep.remoteName
	}
	if mask&EPAttrFieldTransports != 0 {
		attr.Lanes = ep.laneInfos()
	}
	return nil
}

// laneInfos describes the endpoint's lanes.
func (ep *Endpoint) laneInfos() []LaneInfo {
	var infos []LaneInfo
	ep.laneMu.Lock()
	defer ep.laneMu.Unlock()
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
		infos = append(infos, LaneInfo{Usage: strings.Join(use, ","), Transport: l.wi.rsc.tl.TLName, Device: l.wi.rsc.tl.DevName})
	}
	return infos
}
