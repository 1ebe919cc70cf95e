package ucp

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// What the two-sided protocols (tag matching, active messages, streams)
// share: the dispatch of their uct active messages, the worker's queue of
// sends that wait for transport resources, the sends that wait for their
// receiver and the reply endpoint (protoWorker), the protocol limits of a
// lane, the thresholds that choose a protocol by size, and the cache of
// the keys of senders' data that rendezvous receivers unpack. Their send
// engine is in proto_send.go.

// protoHandler handles one uct active message of a ucp protocol. It is
// the handler registered with uct itself (no dispatcher between them: a
// message costs one indirect call), and arg is the *protoArg of the
// interface it arrived on (protoArgs). It runs from Worker.Progress.
type protoHandler = uct.AMCallback

// protoArg is the argument of a protocol's handlers on one interface:
// made once per interface, so that a message costs no allocation.
type protoArg struct {
	w  *Worker
	wi *workerIface
}

// protoArgs returns the worker and the interface of a protocol handler's
// arg.
func protoArgs(arg any) (*Worker, *workerIface) {
	a := arg.(*protoArg)
	return a.w, a.wi
}

// setProtoHandlers installs fns[k] as the handler of uct active message
// ids[k] on every interface of the worker that carries active messages;
// they run from Progress only.
func (w *Worker) setProtoHandlers(ids []uint8, fns []protoHandler) error {
	for _, wi := range w.ifaces {
		if wi.attr.Flags&capAM == 0 {
			continue
		}
		arg := &protoArg{w: w, wi: wi}
		for k, id := range ids {
			if err := wi.iface.SetAMHandler(id, fns[k], arg, uct.CBFlagSync); err != nil {
				return fmt.Errorf("active-message handler %d on %s: %w", id, wi.rsc.tl.TLName, err)
			}
		}
	}
	return nil
}

// protoOp is a protocol send that the worker's send queue retries while
// the transport has no room.
type protoOp interface {
	// advance hands what the transport takes of the operation to it. It
	// returns OK when the operation is complete, InProgress when all of it
	// was handed over and it ends itself later (zero-copy completions, a
	// reply of the peer), ErrNoResource when it must be retried, or an
	// error.
	advance() ucs.Status
	// end finishes the operation with a final status, OK or an error,
	// once advance returned it.
	end(st ucs.Status)
	// abort gives the operation up with st while it is queued (advance
	// has not returned a final status): it ends now, or when what the
	// transport holds of it completes.
	abort(st ucs.Status)
	// endpoint is the endpoint the operation goes to.
	endpoint() *Endpoint
}

// sendQueue holds, in issue order, the protocol sends that wait for
// transport resources; those of one endpoint go out in order.
type sendQueue struct {
	mu  sync.Mutex
	ops []protoOp
	n   atomic.Int32 // len(ops), read by Progress without the lock
}

// protoStart runs op as far as the transport takes it, or queues it behind
// the endpoint's queued sends. It returns OK when op is complete (end is
// not called), InProgress when it continues (queued, or ending itself
// later), or an error (end is not called).
func (w *Worker) protoStart(op protoOp) ucs.Status {
	ep := op.endpoint()
	q := &w.sendq
	if ep.queued.Load() > 0 {
		q.mu.Lock()
		if ep.queued.Load() > 0 {
			q.pushLocked(op)
			q.mu.Unlock()
			return ucs.InProgress
		}
		q.mu.Unlock()
	}
	st := op.advance()
	if st == ucs.ErrNoResource {
		q.mu.Lock()
		q.pushLocked(op)
		q.mu.Unlock()
		return ucs.InProgress
	}
	return st
}

func (q *sendQueue) pushLocked(op protoOp) {
	op.endpoint().queued.Add(1)
	q.ops = append(q.ops, op)
	q.n.Store(int32(len(q.ops)))
}

// protoProgress advances the queued sends, in order per endpoint, and
// returns how many left the queue. The check of an empty queue, what most
// calls find, is inlined into Worker.Progress.
func (w *Worker) protoProgress() int {
	if w.sendq.n.Load() == 0 {
		return 0
	}
	return w.protoProgressQueued()
}

// protoProgressQueued is protoProgress of a queue that holds sends.
func (w *Worker) protoProgressQueued() int {
	q := &w.sendq
	q.mu.Lock()
	ops := q.ops
	q.ops = nil
	q.mu.Unlock()
	var blocked []*Endpoint
	keep := ops[:0]
	n := 0
	for _, op := range ops {
		ep := op.endpoint()
		isBlocked := false
		for _, b := range blocked {
			isBlocked = isBlocked || b == ep
		}
		if isBlocked {
			keep = append(keep, op)
			continue
		}
		if st := ep.dead(); st != ucs.OK && !ep.linger.Load() {
			// Failed or closed meanwhile: the queue gives the send up
			// (but for the revokes of an endpoint whose lanes linger).
			n++
			ep.queued.Add(-1)
			op.abort(st)
			continue
		}
		st := op.advance()
		if st == ucs.ErrNoResource {
			blocked = append(blocked, ep)
			keep = append(keep, op)
			continue
		}
		n++
		ep.queued.Add(-1)
		if st != ucs.InProgress {
			op.end(st)
		}
	}
	q.mu.Lock()
	q.ops = append(keep, q.ops...)
	q.n.Store(int32(len(q.ops)))
	q.mu.Unlock()
	return n
}

// protoPurge gives up, with st, the queued sends of ep.
func (w *Worker) protoPurge(ep *Endpoint, st ucs.Status) {
	q := &w.sendq
	q.mu.Lock()
	var gone []protoOp
	keep := q.ops[:0]
	for _, op := range q.ops {
		if op.endpoint() == ep {
			gone = append(gone, op)
		} else {
			keep = append(keep, op)
		}
	}
	clear(q.ops[len(keep):])
	q.ops = keep
	q.n.Store(int32(len(q.ops)))
	q.mu.Unlock()
	for _, op := range gone {
		ep.queued.Add(-1)
		op.abort(st)
	}
}

// protoWorker is what the worker's two-sided protocols (tag matching,
// active messages, streams) share: the sends that wait for their
// receiver's reply, the numbers of sends, messages and receives, and the
// reply endpoint last looked up. In the worker's multi thread mode mu
// guards it; otherwise only one goroutine at a time uses it.
type protoWorker struct {
	modeMutex
	nextID atomic.Uint64
	// sends are the sends that wait for their receiver (a sync send's
	// acknowledgement, a rendezvous reply), by number, each holding a
	// reference of its op (sendOp.reply).
	sends map[uint64]*sendOp
	// waits are the rendezvous receives, of either family, that wait for
	// their sender to push or put the data (proto_recv.go); the lock
	// nests inside a family's (tag, AM).
	waits   rndvWaits
	lastSrc uint64 // the reply endpoint last looked up
	lastEP  *Endpoint
}

// modeMutex guards protocol state in the worker's multi thread mode
// (multi); in the others only one goroutine at a time uses the worker,
// and it takes no lock.
type modeMutex struct {
	multi bool
	mu    sync.Mutex
}

func (m *modeMutex) lock() {
	if m.multi {
		m.mu.Lock()
	}
}

func (m *modeMutex) unlock() {
	if m.multi {
		m.unlockMulti()
	}
}

// unlockMulti is unlock's call of the mutex, kept out of it so that unlock
// is inlined: with sync.Mutex.Unlock inside it was not, and every unlock
// of the single-threaded path paid a call and its frame.
//
//go:noinline
func (m *modeMutex) unlockMulti() { m.mu.Unlock() }

// protoCheck checks that the worker, not destroyed, may do the operation
// named what of a protocol (enabled: its context has feature).
func (w *Worker) protoCheck(what string, enabled bool, feature string) error {
	if !enabled || w.closed.Load() {
		return w.protoCheckErr(what, feature)
	}
	return nil
}

// protoCheckErr is the error of a failed protoCheck, kept out of it so
// that the check is inlined into every send and receive.
func (w *Worker) protoCheckErr(what, feature string) error {
	if w.closed.Load() {
		return fmt.Errorf("ucp %s: %w", what, ErrClosed)
	}
	return fmt.Errorf("ucp %s: the context was created without %s: %w", what, feature, ucs.ErrInvalidParam)
}

func (w *Worker) protoInit() {
	p := &w.proto
	p.multi = w.mode == ucs.ThreadModeMulti
	p.sends = map[uint64]*sendOp{}
	p.waits = rndvWaits{}
}

// newID returns a number for a message, a send or a receive.
func (p *protoWorker) newID() uint64 { return p.nextID.Add(1) }

// register numbers op, a send that waits for its receiver's reply, and
// enters it in sends with a reference for the reply.
func (p *protoWorker) register(op *sendOp) {
	op.sreq, op.reply = p.newID(), true
	op.comp.Count++
	p.lock()
	p.sends[op.sreq] = op
	p.unlock()
}

// replyEP returns the worker's endpoint to the worker uid, or nil; the
// protocol lock is not held.
func (w *Worker) replyEP(uid uint64) *Endpoint {
	p := &w.proto
	p.lock()
	if ep := p.lastEP; ep != nil && p.lastSrc == uid && ep.dead() == ucs.OK {
		p.unlock()
		return ep
	}
	p.unlock()
	ep := w.epByUID(uid)
	if ep != nil {
		p.lock()
		p.lastSrc, p.lastEP = uid, ep
		p.unlock()
	}
	return ep
}

// protoFailEP ends, with st, the sends that wait for the reply of ep's
// peer, which failed or closed. A closed endpoint's rendezvous sends are
// revoked instead (tagRevokeEP): those whose data the receiver may be
// reading end when it answers.
func (w *Worker) protoFailEP(ep *Endpoint, st ucs.Status) {
	p := &w.proto
	closed := ep.failStatus.Load() == 0
	if closed {
		w.tagRevokeEP(ep)
	}
	var ops []*sendOp
	p.lock()
	for id, op := range p.sends {
		if op.ep == ep && !(closed && op.revoked) {
			delete(p.sends, id)
			ops = append(ops, op)
		}
	}
	if p.lastEP == ep {
		p.lastEP = nil
	}
	p.unlock()
	for _, op := range ops {
		op.comp.Invoke(st)
	}
}

// protoDestroy ends the sends still waiting for their receiver's answer
// (revoked or canceled ones) with ucs.ErrCanceled.
func (w *Worker) protoDestroy() {
	p := &w.proto
	var ops []*sendOp
	p.lock()
	for id, op := range p.sends {
		delete(p.sends, id)
		ops = append(ops, op)
	}
	p.unlock()
	for _, op := range ops {
		op.comp.Invoke(ucs.ErrCanceled)
	}
}

// laneLimits are the message sizes the AM lane of an endpoint takes, the
// protocol's header included.
type laneLimits struct {
	short int // one AMShort message, its 8-byte header included (0: none)
	bcopy int // one AMBcopy message
	zcopy int // one AMZcopy message (0: none)
	zhdr  int // the largest header of a zero-copy message
	ziov  int // the most iov elements of a zero-copy message
}

func laneLimitsOf(l *lane) laneLimits {
	at := l.wi.attr
	lim := laneLimits{bcopy: at.AM.MaxBcopy}
	if at.Flags&uct.IfaceFlagAMShort != 0 && l.remote.capFlags&uct.IfaceFlagAMShort != 0 && at.AM.MaxShort >= 8 {
		lim.short = at.AM.MaxShort
	}
	if at.Flags&uct.IfaceFlagAMZcopy != 0 && l.remote.capFlags&uct.IfaceFlagAMZcopy != 0 && at.AM.MaxZcopy > 0 {
		lim.zcopy, lim.zhdr, lim.ziov = at.AM.MaxZcopy, at.AM.MaxHdr, max(at.AM.MaxIOV, 1)
		if lim.zhdr <= 0 || lim.zhdr > lim.zcopy {
			lim.zhdr = lim.zcopy
		}
	}
	return lim
}

// Rendezvous schemes (UCX_RNDV_SCHEME): how a receiver takes the data of
// a rendezvous message.
const (
	rndvAuto = iota // the best the lanes allow: rkey_ptr, get zcopy, am
	rndvGet         // get zcopy (or am where no lane gets)
	rndvPut         // the sender puts into the receiver's buffer (or am)
	rndvAM          // the sender pushes the data in active messages
	rndvSchemes
)

var rndvSchemeNames = [...]string{"auto", "get_zcopy", "put_zcopy", "am"}

func parseRndvScheme(v string) (int, error) {
	for k, n := range rndvSchemeNames {
		if strings.EqualFold(v, n) {
			return k, nil
		}
	}
	return 0, fmt.Errorf("UCX_RNDV_SCHEME=%q: want one of %s: %w", v, strings.Join(rndvSchemeNames[:], ", "), ucs.ErrInvalidParam)
}

// copyBandwidth is the memory copy speed, bytes per second, that the
// protocol model assumes for the copies a protocol makes beside the
// transport's own: a conservative figure for the machines goshmem is
// measured on (ucs.Memcpy moves cached data several times faster).
const copyBandwidth = 10e9

// Bounds of the automatic rendezvous threshold.
const (
	// rndvAutoMax caps it: beyond, a receiver would buffer large unexpected
	// messages, and a sender hold large eager copies, for a gain the model
	// says is small.
	rndvAutoMax = 256 << 10
)

// protoThresh are the sizes that choose the protocol of a two-sided message
// on an endpoint.
type protoThresh struct {
	lim   laneLimits
	short int // largest data sent in one AMShort after an 8-byte header; -1: none
	zcopy int // data from this size goes zero-copy where the lane has it
	rndv  int // data from this size goes by rendezvous
	// netPut: with UCX_RNDV_SCHEME=auto, rendezvous data moves by a put
	// from the sender (see rndvByPut).
	netPut bool
	// tagShort is the largest data of a tag message sent in one AMShort
	// (tagSend): short, and below rndv.
	tagShort int
}

// thresholds returns the endpoint's protocol thresholds, computing them on
// first use: UCX_RNDV_THRESH, UCX_ZCOPY_THRESH and UCX_BCOPY_THRESH when set,
// and otherwise from the lanes' performance estimates (see autoRndvThresh).
func (ep *Endpoint) thresholds() *protoThresh {
	if t := ep.thresh.Load(); t != nil {
		return t
	}
	return ep.newThresholds()
}

// newThresholds computes the endpoint's thresholds for thresholds, kept
// out of it so that the load of those computed already is inlined.
func (ep *Endpoint) newThresholds() *protoThresh {
	c := ep.w.ctx
	t := &protoThresh{lim: laneLimitsOf(ep.am), short: -1}
	if t.lim.short > 8 {
		t.short = t.lim.short - 8
		if c.bcopyThr > 0 {
			t.short = min(t.short, c.bcopyThr-1)
		}
	}
	switch {
	case c.zcopyThr > 0:
		t.zcopy = c.zcopyThr
	case t.lim.zcopy > t.lim.bcopy:
		// Data that fits one bcopy message is cheaper to copy than to track
		// as a zero-copy send; larger data goes without the copy.
		t.zcopy = t.lim.bcopy
	default:
		// The lane's zero-copy messages are no larger than its copied ones
		// (shared memory copies both into the peer's FIFO): copies only.
		t.zcopy = math.MaxInt
	}
	if c.rndvThr >= 0 {
		t.rndv = c.rndvThr
	} else {
		t.rndv = ep.autoRndvThresh(t)
	}
	t.netPut = ep.rndvByPut()
	t.tagShort = min(t.short, t.rndv-1)
	ep.thresh.Store(t)
	return t
}

// rndvByPut reports whether, with UCX_RNDV_SCHEME=auto, the data of a
// rendezvous with the peer moves by a put from the sender: the AM lane is
// a network connection (tcp), and no other lane reaches the peer's memory
// by mapping it or by a get that this side's kernel or CPU does (cma,
// shared memory). A get over the network connection would be a request
// that the sender's progress answers with the data: the sender's put moves
// it with as many messages and without that reply path, as UCX, whose tcp
// has no get, does (tcp tag_bw 1 MiB: by get 0.65 of the put's
// bandwidth). The sender then announces no key (nothing to register), and
// the receiver sends the key of its buffer with its RTR.
func (ep *Endpoint) rndvByPut() bool {
	if ep.am == nil || !ep.am.deferred() {
		return false
	}
	for i := range ep.cands {
		c := &ep.cands[i]
		if c.wi.rsc.tl.DevType != uct.DeviceTypeNet && (c.can(capGet) || c.wi.rsc.md.attr.Flags&uct.MDFlagRkeyPtr != 0) {
			return false
		}
	}
	return true
}

// autoRndvThresh chooses the rendezvous threshold from the lanes'
// estimates. Eager costs one message and, at the receiver, one copy out of
// the transport's buffer: lat + n/bw(AM) + n/copy. Rendezvous costs the
// request (RTS) and the acknowledgement (ATS) on the AM lane, and moves the
// data once: with the peer's memory mapped (rkey_ptr) n/copy, with a lane
// that gets a get's latency and n/bw(get). The threshold is where
// rendezvous becomes cheaper, but no less than what one eager message
// carries (fragments cost messages the model does not count) and no more
// than rndvAutoMax. Over the network (the AM lane is tcp) it is that one
// message's size.
func (ep *Endpoint) autoRndvThresh(t *protoThresh) int {
	ctx := ep.w.ctx
	var am *candidate
	for i := range ep.cands {
		if c := &ep.cands[i]; c.wi == ep.am.wi && c.remote == ep.am.remote {
			am = c
		}
	}
	floor := max(t.lim.bcopy, t.lim.zcopy) - tagEagerHdrLen + 1
	if am == nil || ep.am.deferred() {
		// Over the network, data longer than one eager message goes in
		// fragments, each a message of its own that the model does not
		// count, and rendezvous moves it in one transfer (UCX's tcp
		// switches there too): tcp tag_bw 64 KiB 1.4-1.7 -> 2.3-3.1 GB/s,
		// tag_lat 25 -> 35 us (UCX: 2.2-2.3 GB/s, 53 us).
		return max(floor, 0)
	}
	step := ctx.estimateTime(am, 0) // one message on the AM lane
	eagerA, eagerB := step, (ctx.estimateTime(am, 1<<20)-step)/(1<<20)+1/copyBandwidth
	best := math.Inf(1)
	for i := range ep.cands {
		c := &ep.cands[i]
		var a, b float64
		switch {
		case c.wi.rsc.md.attr.Flags&uct.MDFlagRkeyPtr != 0 && c.wi.rsc.tl.DevType != uct.DeviceTypeNet:
			a, b = 2*step, 1/copyBandwidth
		case c.can(capGet):
			g0 := ctx.estimateTime(c, 0)
			a, b = 2*step+2*g0, (ctx.estimateTime(c, 1<<20)-g0)/(1<<20)
		default:
			continue
		}
		if b >= eagerB {
			continue
		}
		best = math.Min(best, (a-eagerA)/(eagerB-b))
	}
	if math.IsInf(best, 1) || best > rndvAutoMax {
		return max(floor, rndvAutoMax)
	}
	return max(floor, int(best))
}

// rkeyCacheSize bounds the keys of senders' data a worker keeps unpacked.
const rkeyCacheSize = 32

// rkeyCache keeps the keys of senders' rendezvous data unpacked, so that
// data sent again from the same memory (a buffer in mapped memory, or a
// memory handle the sender passes) is not mapped again for every message.
// An entry in use by a transfer is destroyed only when the transfer ends.
// Destroyed entries are unpacked again, for other keys (a sender's key of
// data registered for one transfer is new every time, tcp's for one).
type rkeyCache struct {
	mu      sync.Mutex
	entries []*rkeyRef // oldest first
	free    []*rkeyRef // destroyed, at most rkeyCacheSize
}

// rkeyRef is a cached key and its users.
type rkeyRef struct {
	rk      *Rkey
	users   int
	evicted bool
}

// get returns the key packed as key, unpacked on ep, with a reference the
// caller gives back with put, when it can be used to take data from the
// peer (its memory is mapped here, or a lane gets with it) or, with
// forPut, to write data there (mapped, or a lane puts); nil otherwise.
func (c *rkeyCache) get(ep *Endpoint, key []byte, forPut bool) *rkeyRef {
	c.mu.Lock()
	for i, e := range c.entries {
		if e.rk.ep == ep && string(e.rk.packed) == string(key) {
			if !ep.closed.Load() {
				e.users++
				c.mu.Unlock()
				return e
			}
			c.entries = append(c.entries[:i], c.entries[i+1:]...)
			c.evictLocked(e)
			break
		}
	}
	var e *rkeyRef
	if n := len(c.free); n > 0 {
		e, c.free = c.free[n-1], c.free[:n-1]
	}
	c.mu.Unlock()
	if e == nil {
		e = &rkeyRef{rk: new(Rkey)}
	}
	rk := e.rk
	if err := ep.rkeyUnpack(rk, key); err != nil {
		c.recycle(e)
		return nil
	}
	if rk.base == nil && (rk.rma == nil || (!forPut && !rk.rma.get)) {
		rk.Destroy()
		c.recycle(e)
		return nil
	}
	e.users, e.evicted = 1, false
	c.mu.Lock()
	if len(c.entries) == rkeyCacheSize {
		c.evictLocked(c.entries[0])
		c.entries = append(c.entries[:0], c.entries[1:]...)
	}
	c.entries = append(c.entries, e)
	c.mu.Unlock()
	return e
}

// put gives back a reference from get.
func (c *rkeyCache) put(e *rkeyRef) {
	c.mu.Lock()
	e.users--
	gone := e.evicted && e.users == 0
	c.mu.Unlock()
	if gone {
		e.rk.Destroy()
		c.recycle(e)
	}
}

// evictLocked drops e from the cache's care: it is destroyed now, or when
// its last user gives it back. c.mu is held.
func (c *rkeyCache) evictLocked(e *rkeyRef) {
	e.evicted = true
	if e.users == 0 {
		e.rk.Destroy()
		c.recycleLocked(e)
	}
}

// recycle keeps e, destroyed and out of the cache, for get to unpack
// another key into.
func (c *rkeyCache) recycle(e *rkeyRef) {
	c.mu.Lock()
	c.recycleLocked(e)
	c.mu.Unlock()
}

// recycleLocked is recycle with c.mu held. Only the key's buffers stay:
// it refers to no endpoint any more.
func (c *rkeyCache) recycleLocked(e *rkeyRef) {
	if len(c.free) < rkeyCacheSize {
		rk := e.rk
		*rk = Rkey{packed: rk.packed[:0], entries: rk.entries}
		c.free = append(c.free, e)
	}
}

// clear destroys every cached key not in use; those in use go when their
// users give them back.
func (c *rkeyCache) clear() {
	c.mu.Lock()
	for _, e := range c.entries {
		c.evictLocked(e)
	}
	c.entries, c.free = nil, nil
	c.mu.Unlock()
}

// rndvKey returns the packed key through which the peer of ep may take
// data (get) or, with put, write it, or nil when it cannot: the key of
// param's memory handle when data lies in it, or of mapped memory the data
// lies in, or else of data registered now (returned, to be unmapped when
// the transfer ends: the key, in the handle, is valid until then) with the
// memory domain of a lane to the peer that gets (or puts). data must not
// be empty.
func (w *Worker) rndvKey(ep *Endpoint, data []byte, param *RequestParam, put bool) ([]byte, *MemHandle) {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
	prot, caps := ProtRemoteRead, uct.IfaceFlags(capGet)
	if put {
		prot, caps = ProtRemoteWrite, capRMA
	}
	if param != nil && param.OpAttrMask&OpAttrFieldMemh != 0 && param.Memh != nil {
		if key := param.Memh.keyFor(p, len(data), prot); key != nil {
			return key, nil
		}
	}
	if m := w.ctx.mappedAt(p, len(data), prot); m != nil {
		if key := m.keyFor(p, len(data), prot); key != nil {
			return key, nil
		}
	}
	for _, c := range ep.cands {
		if c.can(caps) && c.wi.rsc.md.attr.Flags&uct.MDFlagReg != 0 {
			m, err := w.ctx.memRegFor(data, c.wi.rsc.md)
			if err != nil {
				w.warnf("ucp: worker %s: registering %d bytes for a rendezvous with %s: %v", w.name, len(data), c.wi.rsc.md.md.Name(), err)
				return nil, nil
			}
			// The key lives in the handle, until the transfer unmaps it.
			if m.packed, err = w.ctx.rkeyAppend(m.packed[:0], m); err != nil {
				w.ctx.MemUnmap(m)
				return nil, nil
			}
			return m.packed, m
		}
	}
	return nil, nil
}
