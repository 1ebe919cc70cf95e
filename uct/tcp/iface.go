package tcp

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/goshmem/goshmem/internal/admit"
	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
	"github.com/goshmem/goshmem/uct/internal/base"
)

// compEvent is a completion that Progress signals.
type compEvent struct {
	comp   *uct.Completion
	status ucs.Status
}

// flushTarget is the frame count an EP must see acknowledged.
type flushTarget struct {
	ep     *EP
	issued uint64
}

// flushWaiter is a flush (of an EP or of the iface) waiting for
// acknowledgements. Waiters are reused (Iface.newFlush), with the room of
// their slices, so that a flush in a loop of puts and quiets allocates
// nothing.
type flushWaiter struct {
	targets []flushTarget
	comp    *uct.Completion
	eps     []*EP // Iface.Flush's copy of the iface's EPs
}

// rxMsgCost is what a queued message counts against UCX_TCP_RX_QUEUE_LEN
// beyond its bytes, so that empty messages count too.
const rxMsgCost = 64

// Iface is a tcp iface: a listener on the address of one network device,
// the connections it accepted, and the EPs it created. See the package
// documentation for its threading.
type Iface struct {
	md      *MD
	worker  *uct.Worker
	progID  int
	cfg     ifaceConfig
	devName string
	ip      net.IP
	id      uint64
	ln      *net.TCPListener
	addr    []byte
	dev     deviceAddr
	devAddr []byte
	bw      float64

	errHandler    func(arg any, ep uct.EP, status ucs.Status)
	errHandlerArg any

	handlers base.AMHandlers
	tracer   uct.AMTraceHook // see SetAMTracer
	rxh      base.Headroom   // IfaceParams.RxHeadroom, in front of each message's buffer

	poll      *pollSet         // the sockets Progress reads (poll.go)
	dirty     atomic.Bool      // Progress has something to do
	nflush    atomic.Int32     // flush waiters
	rxOver    atomic.Bool      // the receive queue is full (rxBytes >= UCX_TCP_RX_QUEUE_LEN)
	unparkDue atomic.Bool      // parked streams may read again (poll.go)
	progSeq   atomic.Uint64    // starts and ends of the Progress calls that poll (odd while one runs), for the poller (poller.go)
	closing   atomic.Bool      // Close waits for the poller to end the streams
	pending   uct.PendingQueue // the EPs' pending requests
	progMu    sync.Mutex       // one Progress at a time
	batch     []base.AMMsg     // Progress's delivery buffer; guarded by progMu
	// spareComps is the completion list Progress gave back, which the
	// next Progress hands to comps; guarded by progMu.
	spareComps []compEvent
	// readComps are the completions of replies that Progress read
	// itself, which it signals before it returns; guarded by progMu.
	readComps []compEvent

	// The EPs that hold a batch of small frames (batch.go), batchSince
	// when the list last became non-empty (UnixNano); pollerBlocked is set
	// while the poller waits on the sockets.
	batchEPs      base.Handoff[*EP]
	batchSince    atomic.Int64
	pollerBlocked atomic.Bool

	pollerStop chan struct{} // closed by Close: the poller ends the streams and returns
	pollerDone chan struct{} // closed when the poller returned
	wg         sync.WaitGroup
	mu         sync.Mutex // guards the fields below
	rxq        []base.AMMsg
	rxHead     int
	rxBytes    int
	comps      []compEvent
	flushes    []*flushWaiter
	spareFlush []*flushWaiter // ended waiters, for newFlush
	failed     []*EP
	eps        map[*EP]struct{}
	epIDs      map[uint64]*EP       // EPs created unconnected, by id
	rxConns    map[*rxConn]struct{} // the one-way connections accepted
	conns      map[*EP]struct{}     // the EPs of every other connection, those no user holds included
	match      *connMatch
	parked     []*inStream // streams waiting for room in the receive queue (poll.go)
	// handshakes bounds the accepted connections still authenticating
	// (accept.go), and hsConns is the set of them.
	handshakes *admit.Gate[net.Conn]
	hsConns    map[net.Conn]struct{}
	closed     bool

	log  ucs.Logger    // IfaceParams.Logger
	warn ifaceWarnings // the warnings a peer or a stranger can cause at any rate
	// cpus is IfaceParams.CPUMask, which the accepting, polling and
	// handshaking goroutines bind their threads to.
	cpus []int
}

// IfaceOpen opens a tcp iface on the device params.DevName: it listens on
// the device's address, on a port the kernel picks, starts its poller
// (poller.go), and registers its Progress with worker (when not nil).
// params.ErrHandler, when set, is called from Progress when an EP fails.
// An unknown device, or one without a usable address, fails with
// ucs.ErrNoDevice; bad configuration values with ucs.ErrInvalidParam.
func (m *MD) IfaceOpen(worker *uct.Worker, params *uct.IfaceParams, config *ucs.Config) (uct.Iface, error) {
	if params == nil || params.DevName == "" || (params.TLName != "" && params.TLName != TLName) {
		return nil, fmt.Errorf("uct/tcp: iface open: no tcp device named: %w", ucs.ErrNoDevice)
	}
	cfg, err := parseConfig(config)
	if err != nil {
		return nil, err
	}
	rxh, err := base.NewHeadroom("uct/tcp", params)
	if err != nil {
		return nil, err
	}
	ifi, err := net.InterfaceByName(params.DevName)
	if err != nil {
		return nil, fmt.Errorf("uct/tcp: iface open on %s: %w: %w", params.DevName, ucs.ErrNoDevice, err)
	}
	ip, err := deviceIP(ifi)
	if err != nil {
		return nil, err
	}
	ps, err := openPollSet()
	if err != nil {
		return nil, err
	}
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: ip})
	if err != nil {
		ps.close()
		return nil, fmt.Errorf("uct/tcp: iface open on %s: listen on %v: %w: %w", params.DevName, ip, ucs.ErrIOError, err)
	}
	i := &Iface{
		md:         m,
		worker:     worker,
		cfg:        cfg,
		rxh:        rxh,
		devName:    params.DevName,
		ip:         ip,
		id:         randomID(),
		ln:         ln,
		bw:         deviceBandwidth(ifi),
		eps:        make(map[*EP]struct{}),
		epIDs:      make(map[uint64]*EP),
		rxConns:    make(map[*rxConn]struct{}),
		conns:      make(map[*EP]struct{}),
		handshakes: admit.New[net.Conn](admit.Limits{PerSource: cfg.maxHSSource, Total: cfg.maxHS}),
		hsConns:    make(map[net.Conn]struct{}),
		poll:       ps,
		pollerStop: make(chan struct{}),
		pollerDone: make(chan struct{}),
		log:        params.Log(),
		warn:       newIfaceWarnings(params.Log(), ln.Addr()),
		cpus:       append([]int(nil), params.CPUMask...),
	}
	i.errHandler, i.errHandlerArg = params.ErrHandler, params.ErrHandlerArg
	i.match = newConnMatch(i.id)
	a := ifaceAddr{ip: ip, port: uint16(ln.Addr().(*net.TCPAddr).Port), id: i.id}
	i.addr = a.encode()
	i.dev = deviceAddr{family: 6, loopback: ip.IsLoopback()}
	if ip.To4() != nil {
		i.dev.family = 4
	}
	if i.dev.loopback {
		i.dev.host = hostID()
	}
	i.devAddr = i.dev.encode()
	i.wg.Add(1)
	go i.accept()
	go i.poller()
	if worker != nil {
		i.progID = worker.ProgressAdd(i)
	}
	return i, nil
}

// deviceCost is the cost model of an iface on a device of bandwidth bw
// (deviceBandwidth), shared by the processes on it.
func deviceCost(bw float64) base.Cost {
	return base.Cost{Overhead: 1e-6, Latency: 10e-6, Bandwidth: uct.Bandwidth{Shared: bw}}
}

// deviceBandwidth estimates the bandwidth of ifi in bytes per second: its
// link speed where the kernel reports one, what loopback measured on this
// project's machines for "lo", and 10 Gb/s otherwise.
func deviceBandwidth(ifi *net.Interface) float64 {
	if ifi.Flags&net.FlagLoopback != 0 {
		return 2e9
	}
	b, err := os.ReadFile("/sys/class/net/" + ifi.Name + "/speed")
	if err == nil {
		if mbps, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && mbps > 0 {
			return float64(mbps) * 1e6 / 8
		}
	}
	return 1.25e9
}

// Query describes the iface: active messages, puts, gets, and 32- and
// 64-bit atomics applied by the target's CPU (IfaceFlagAtomicCPU: with
// the same CPU atomics as the shared-memory transports, so a word that
// peers on the node and across the network hit at once stays coherent).
// The target checks every access against the registered range of its
// key (IfaceFlagErrhandleRemoteMem), and its readers call the handlers
// installed with uct.CBFlagAsync (IfaceFlagAMAsyncDelivery).
func (i *Iface) Query() (*uct.IfaceAttr, error) {
	flags := base.AMFlags | base.RMAFlags | uct.IfaceFlagAtomicCPU |
		uct.IfaceFlagConnectToIface | uct.IfaceFlagConnectToEP | uct.IfaceFlagErrhandlePeerDown |
		uct.IfaceFlagErrhandleRemoteMem | uct.IfaceFlagAMAsyncDelivery
	a := base.IfaceAttr(flags, DeviceAddrLen, IfaceAddrLen, deviceCost(i.bw))
	a.Atomic32, a.Atomic64 = base.AllAtomics, base.AllAtomics
	a.Put = base.OpCaps(maxShort, i.cfg.segSize, maxPutLen, maxIOV)
	a.Get = base.OpCaps(0, i.cfg.segSize, maxPutLen, maxIOV)
	a.AM = base.AMCaps(min(maxShort, i.cfg.rxSegSize), i.cfg.segSize, i.cfg.rxSegSize, maxIOV, i.cfg.segSize)
	a.EPAddrLen = EPAddrLen
	a.RxHeadroom = i.rxh.Len()
	return a, nil
}

// maxIOV is the largest iov of a zcopy operation.
const maxIOV = 256

// DeviceAddress returns the DeviceAddrLen-byte address of the device: its
// address family and, for a loopback device, the host and network namespace.
func (i *Iface) DeviceAddress() []byte { return append([]byte(nil), i.devAddr...) }

// Address returns the IfaceAddrLen-byte address of the iface: IP, port and
// iface id.
func (i *Iface) Address() []byte { return append([]byte(nil), i.addr...) }

// IsReachable reports whether the addresses are well formed and name an
// iface this one can connect to: same address family, and loopback devices
// only to loopback devices of the same host and network namespace.
func (i *Iface) IsReachable(deviceAddr, ifaceAddr []byte) bool {
	return i.reachable(deviceAddr, ifaceAddr) == nil
}

// reachable is IsReachable with the reason.
func (i *Iface) reachable(devAddr, ifAddr []byte) error {
	d, err := decodeDeviceAddr(devAddr)
	if err != nil {
		return err
	}
	a, err := decodeIfaceAddr(ifAddr)
	if err != nil {
		return err
	}
	fam := uint8(6)
	if a.ip.To4() != nil {
		fam = 4
	}
	switch {
	case fam != d.family || d.family != i.dev.family:
		return fmt.Errorf("uct/tcp: IPv%d iface %v on an IPv%d device, from IPv%d: %w", fam, a.ip, d.family, i.dev.family, ucs.ErrUnreachable)
	case a.ip.IsLoopback() != d.loopback:
		return fmt.Errorf("uct/tcp: iface %v and its device disagree on loopback: %w", a.ip, ucs.ErrInvalidAddr)
	case d.loopback != i.dev.loopback:
		return fmt.Errorf("uct/tcp: loopback and network devices do not reach each other: %w", ucs.ErrUnreachable)
	case d.loopback && d.host != i.dev.host:
		return fmt.Errorf("uct/tcp: loopback device of another host or network namespace: %w", ucs.ErrUnreachable)
	}
	return nil
}

// SetAMHandler installs cb for id; a nil cb removes it. id must be below
// uct.AMMaxID and flags one of uct.CBFlagSync (cb is called from Progress)
// and uct.CBFlagAsync (cb is called from the goroutine that received the
// message, concurrently with everything else); ucs.ErrInvalidParam
// otherwise.
func (i *Iface) SetAMHandler(id uint8, cb uct.AMCallback, arg any, flags uct.CBFlags) error {
	return i.handlers.Set("uct/tcp", id, cb, arg, flags, true)
}

// ReleaseDesc gives back the data of an active message that a handler kept
// by returning ucs.InProgress.
func (i *Iface) ReleaseDesc(data []byte) { i.putAM(data) }

// RxHeadroom returns the IfaceParams.RxHeadroom bytes in front of data,
// AM data this iface handed to a handler (see uct.Iface.RxHeadroom).
func (i *Iface) RxHeadroom(data []byte) []byte { return i.rxh.Of(data) }

// getAM returns the buffer of an active message of n bytes, as handed to
// handlers: the headroom lies in front of it.
func (i *Iface) getAM(n int) []byte {
	if i.rxh.Len() == 0 {
		return getBuf(n)
	}
	return i.rxh.Data(getBuf(i.rxh.Len()+max(n, 1)), n)
}

// putAM gives back the buffer of getAM that data is.
func (i *Iface) putAM(data []byte) { putBuf(i.rxh.Buffer(data)) }

// markDirty tells Progress it has work, and signals the worker with ev,
// the uct.Event* kinds of the work.
func (i *Iface) markDirty(ev uint32) {
	i.dirty.Store(true)
	if i.worker != nil {
		i.worker.Signal(ev)
	}
}

// Progress serves the connections whose sockets are ready (one
// epoll_wait that does not wait; see rx.go and poll.go): it reads and
// applies their frames, answers gets and atomics, writes what waits in
// the EPs' queues, and signals the completions of the replies it read.
// Then it delivers up to UCX_TCP_MAX_POLL queued active messages to their
// handlers, calls the error handler for failed EPs, signals the other
// completions (zcopy operations, flushes, replies the poller read), and
// calls pending requests of EPs that have room again. It returns the
// number of events handled; with no connection and nothing to do it costs
// one atomic load.
func (i *Iface) Progress() int {
	polling := i.poll.n.Load() > 0
	if !polling && !i.dirty.Load() {
		return 0
	}
	i.progMu.Lock()
	defer i.progMu.Unlock()
	n := 0
	if polling {
		i.progSeq.Add(1)
		defer i.progSeq.Add(1)
		// Batches go out before the sockets are read, and one that
		// another goroutine started as the call began goes out before it
		// returns (batch.go).
		i.writeBatches()
		defer i.writeBatches()
		n = i.pollStreams()
		if len(i.readComps) > 0 {
			n += i.signalRead()
		}
	}
	if !i.dirty.Load() {
		return n
	}
	i.dirty.Store(false)
	n += i.deliver()
	if i.unparkDue.Load() {
		n += i.unpark()
	}

	i.mu.Lock()
	comps := i.comps
	i.comps, i.spareComps = i.spareComps, nil // no allocation per completion
	failed := i.failed
	i.failed = nil
	if i.nflush.Load() > 0 {
		comps = i.takeDoneFlushesLocked(comps)
	}
	i.mu.Unlock()
	// The error handler runs before the completions: a request that ends
	// with an EP's error ends after the handler was told of it (fail makes
	// the error visible and queues the EP under i.mu, in one step).
	if i.errHandler != nil {
		for _, e := range failed {
			i.errHandler(i.errHandlerArg, e, e.status())
		}
	}
	n += len(failed)
	for _, c := range comps {
		c.comp.Invoke(c.status)
	}
	n += len(comps)
	clear(comps)
	i.spareComps = comps[:0]
	if i.pending.Len() > 0 {
		n += i.pending.Dispatch()
	}
	return n
}

// signalRead signals the completions of the replies Progress read;
// i.progMu is held. A completion may start operations, which may add to
// the list meanwhile.
func (i *Iface) signalRead() int {
	n := 0
	for k := 0; k < len(i.readComps); k++ {
		c := i.readComps[k]
		i.readComps[k] = compEvent{}
		c.comp.Invoke(c.status)
		n++
	}
	i.readComps = i.readComps[:0]
	return n
}

// complete signals c with st: from Progress at once (before it returns)
// when Progress read the reply, otherwise through the completion queue.
func (i *Iface) complete(c *uct.Completion, st ucs.Status, progress bool) {
	if progress {
		i.readComps = append(i.readComps, compEvent{c, st})
		return
	}
	i.pushComp(c, st)
}

// deliver calls the handlers of up to UCX_TCP_MAX_POLL queued messages.
func (i *Iface) deliver() int {
	i.mu.Lock()
	k := min(len(i.rxq)-i.rxHead, i.cfg.maxPoll)
	if k == 0 {
		i.mu.Unlock()
		return 0
	}
	i.batch = append(i.batch[:0], i.rxq[i.rxHead:i.rxHead+k]...)
	clear(i.rxq[i.rxHead : i.rxHead+k])
	i.rxHead += k
	for _, m := range i.batch {
		i.rxBytes -= len(m.Data) + rxMsgCost
	}
	i.rxOver.Store(i.rxBytes >= i.cfg.rxQueueLen)
	switch {
	case i.rxHead == len(i.rxq):
		i.rxq, i.rxHead = i.rxq[:0], 0
	case i.rxHead > 1024 && i.rxHead > len(i.rxq)/2:
		n := copy(i.rxq, i.rxq[i.rxHead:])
		clear(i.rxq[n:])
		i.rxq, i.rxHead = i.rxq[:n], 0
	}
	if len(i.rxq) > i.rxHead {
		i.dirty.Store(true)
	}
	if len(i.parked) > 0 && i.rxBytes < i.cfg.rxQueueLen {
		i.unparkDue.Store(true)
	}
	i.mu.Unlock()
	for k, m := range i.batch {
		h := i.handlers[m.ID].Load()
		switch {
		case h == nil:
			i.tracer.Trace(uct.AMTraceRecvDrop, m.ID, m.Data)
			i.warn.dropped.Logf("dropped active message %d (%d bytes): no handler", m.ID, len(m.Data))
			i.putAM(m.Data)
		default:
			i.tracer.Trace(uct.AMTraceRecv, m.ID, m.Data)
			if h.CB(h.Arg, m.Data, uct.CBParamFlagDesc) != ucs.InProgress {
				i.putAM(m.Data)
			}
		}
		i.batch[k] = base.AMMsg{}
	}
	return k
}

// takeDoneFlushesLocked removes the flushes whose EPs have seen every
// frame acknowledged (or failed) and appends their completions to comps;
// i.mu is held.
func (i *Iface) takeDoneFlushesLocked(comps []compEvent) []compEvent {
	kept := i.flushes[:0]
	for _, w := range i.flushes {
		if !w.done() {
			kept = append(kept, w)
			continue
		}
		st := ucs.OK
		for _, t := range w.targets {
			if s := t.ep.status(); s.IsErr() && t.ep.acked.Load() < t.issued {
				st = s
				break
			}
		}
		comps = append(comps, compEvent{w.comp, st})
		i.spareFlushLocked(w)
	}
	clear(i.flushes[len(kept):])
	i.flushes = kept
	i.nflush.Store(int32(len(kept)))
	return comps
}

// done reports whether every target of w is acknowledged or failed.
func (w *flushWaiter) done() bool {
	for _, t := range w.targets {
		if t.ep.acked.Load() < t.issued && !t.ep.status().IsErr() {
			return false
		}
	}
	return true
}

// pushComp queues a completion for Progress.
func (i *Iface) pushComp(c *uct.Completion, st ucs.Status) {
	i.pushCompQuiet(c, st)
	i.markDirty(uct.EventSendComp)
}

// pushCompQuiet queues a completion; the caller marks the iface dirty.
func (i *Iface) pushCompQuiet(c *uct.Completion, st ucs.Status) {
	i.mu.Lock()
	i.comps = append(i.comps, compEvent{c, st})
	i.mu.Unlock()
}

// newFlush returns a waiter with no targets, an ended one when there is.
func (i *Iface) newFlush() *flushWaiter {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.newFlushLocked()
}

// newFlushLocked is newFlush with i.mu held.
func (i *Iface) newFlushLocked() *flushWaiter {
	if n := len(i.spareFlush); n > 0 {
		w := i.spareFlush[n-1]
		i.spareFlush[n-1] = nil
		i.spareFlush = i.spareFlush[:n-1]
		return w
	}
	return new(flushWaiter)
}

// spareFlushLocked keeps w, which ended or was never registered, for
// newFlush; i.mu is held.
func (i *Iface) spareFlushLocked(w *flushWaiter) {
	clear(w.targets)
	clear(w.eps)
	w.targets, w.eps, w.comp = w.targets[:0], w.eps[:0], nil
	i.spareFlush = append(i.spareFlush, w)
}

// addFlush registers a flush waiter; Progress signals it.
func (i *Iface) addFlush(w *flushWaiter) {
	i.mu.Lock()
	i.flushes = append(i.flushes, w)
	i.nflush.Store(int32(len(i.flushes)))
	i.mu.Unlock()
	// An acknowledgement may have come before the waiter was visible.
	i.markDirty(uct.EventSendComp)
}

// Flush returns OK when every EP of the iface has every frame acknowledged
// (failed EPs are skipped); otherwise ucs.InProgress, and comp (when not
// nil) is signalled from Progress once they are, with the error of an EP
// that failed meanwhile.
func (i *Iface) Flush(flags uct.FlushFlags, comp *uct.Completion) ucs.Status {
	i.mu.Lock()
	w := i.newFlushLocked()
	for e := range i.eps {
		w.eps = append(w.eps, e)
	}
	i.mu.Unlock()
	for _, e := range w.eps {
		if t, st := e.flushTarget(); st == ucs.InProgress {
			w.targets = append(w.targets, flushTarget{e, t})
		}
	}
	if len(w.targets) == 0 || comp == nil {
		st := ucs.OK
		if len(w.targets) > 0 {
			st = ucs.InProgress
		}
		i.mu.Lock()
		i.spareFlushLocked(w)
		i.mu.Unlock()
		return st
	}
	clear(w.eps)
	w.eps, w.comp = w.eps[:0], comp
	i.addFlush(w)
	return ucs.InProgress
}

// Fence returns OK: each EP's frames are applied in order.
func (*Iface) Fence(uint32) ucs.Status { return ucs.OK }

// WakeupFD fails with ucs.ErrUnsupported: tcp ifaces are polled.
func (*Iface) WakeupFD() (int, error) {
	return -1, fmt.Errorf("uct/tcp: wakeup fd: %w", ucs.ErrUnsupported)
}

// InputFD returns the iface's epoll set (uct.InputPoller): it polls
// readable while a connection has bytes for Progress to read, or a queue
// that its socket now takes (the poller's wake descriptor, in the set
// too, may make it readable once for nothing). It is valid until Close.
func (i *Iface) InputFD() int { return i.poll.fd }

// rxFull reports whether the queue of received active messages is full.
func (i *Iface) rxFull() bool { return i.rxOver.Load() }
