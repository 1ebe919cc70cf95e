package shmem

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/goshmem/goshmem/ucp"
	"github.com/goshmem/goshmem/ucs"
)

// CtxOptions are the options of CtxCreate, or-ed together (the options of
// shmem_ctx_create); 0 asks for none.
type CtxOptions int

// Context options.
const (
	// CtxSerialized: several goroutines use the context, but never two at
	// once (SHMEM_CTX_SERIALIZED); the program serializes them. The
	// context's worker then takes no lock.
	CtxSerialized CtxOptions = 1 << iota
	// CtxPrivate: only the goroutine that created the context uses it
	// (SHMEM_CTX_PRIVATE). The context's worker takes no lock.
	CtxPrivate
	// CtxNostore: the context will not be used for stores (puts,
	// non-fetching atomics, signals) (SHMEM_CTX_NOSTORE). It is a hint;
	// goshmem carries stores on such a context all the same.
	CtxNostore
)

const ctxAllOptions = CtxSerialized | CtxPrivate | CtxNostore

// String returns the options' names joined with "|" ("0" for none).
func (o CtxOptions) String() string {
	if o == 0 {
		return "0"
	}
	s := ""
	for _, f := range []struct {
		o    CtxOptions
		name string
	}{{CtxSerialized, "CtxSerialized"}, {CtxPrivate, "CtxPrivate"}, {CtxNostore, "CtxNostore"}} {
		if o&f.o != 0 {
			if s != "" {
				s += "|"
			}
			s += f.name
			o &^= f.o
		}
	}
	if o != 0 {
		if s != "" {
			s += "|"
		}
		s += fmt.Sprintf("%#x", int(o))
	}
	return s
}

// Ctx is a communication context (shmem_ctx_t): a stream of RMA, atomic and
// signal operations whose completion (Quiet) and ordering (Fence) are
// independent of those of the other contexts. CtxDefault is the context of
// the routines without a context argument (Put, Get, ...); CtxCreate makes
// others, each with a ucp worker of its own, so that goroutines working on
// separate contexts neither wait for each other's operations nor share a
// lock. Every routine X of the package that communicates has a form CtxX
// that takes the context as its first argument (CtxPut, CtxAtomicFetchAdd,
// CtxPutSignal, ...).
//
// Operations to a PE whose heap is mapped on this node are loads, stores
// and CPU atomics, complete when they return, whatever the context; the
// others travel on the context's endpoints.
//
// Which goroutines may use a context: CtxDefault one at a time; a context
// made with CtxPrivate only the goroutine that made it; with CtxSerialized
// one at a time; without either, any number at once.
//
// The routines taking a *Ctx panic when it is nil or destroyed.
type Ctx struct {
	peers   []peer
	worker  *ucp.Worker
	conn    *ctxConn // the worker and its endpoints, pooled after Destroy
	options CtxOptions
	team    *Team
	// pending counts the operations that completion callbacks still have to
	// finish (storing a fetched value); Quiet waits for them.
	pending atomic.Int64
	// shared is set for a context several goroutines may use at once (its
	// worker is in multi mode).
	shared    bool
	destroyed bool
	// session is the open session, if any (session.go), and spareSession
	// the last one, kept for its buffers.
	session      atomic.Pointer[session]
	spareSession *session
	// pump progresses the default worker while the context's goroutines
	// wait in blocking ucp calls (withDefaultProgress); nil until the
	// first such wait.
	pump atomic.Pointer[defaultPump]
}

// defaultCtx is the default context, set by Init.
var defaultCtx Ctx

// CtxDefault is the default context (SHMEM_CTX_DEFAULT): the one the
// routines without a context argument use. It exists from Init to Finalize,
// lives on the worker Init creates, and may be used by one goroutine at a
// time, or by several at once after InitThread(ThreadMultiple); it cannot
// be destroyed.
var CtxDefault = &defaultCtx

// contexts are those CtxCreate made and Destroy has not destroyed yet;
// ctxMu serializes their creation and destruction, and guards ctxPool.
var (
	ctxMu    sync.Mutex
	contexts = map[*Ctx]struct{}{}
	ctxCount int
)

// ctxConn is the communication resources of a context: a ucp worker and
// its endpoints and heap keys, by PE of the job (entries stay empty for
// the PEs whose heaps are mapped here, and for those the context's team
// did not need yet).
type ctxConn struct {
	worker *ucp.Worker
	name   string
	mode   ucs.ThreadMode
	eps    []peer
}

// ctxPool keeps the resources of destroyed contexts, by thread mode, for
// the contexts created later: opening a worker's interfaces and wiring up
// its endpoints costs far more than a context's life may last (programs
// are meant to make short-lived contexts), while a pooled worker is ready
// at once, its endpoints connected. Destroy has completed every operation
// of a pooled worker, so nothing of the old context remains on it. At most
// ctxPoolMax workers per mode wait in the pool; Finalize destroys them.
var ctxPool [3][]*ctxConn

const ctxPoolMax = 8

// takeConn returns pooled resources for a context of mode, or new ones.
func takeConn(mode ucs.ThreadMode) (*ctxConn, error) {
	if free := ctxPool[mode]; len(free) > 0 {
		cc := free[len(free)-1]
		ctxPool[mode] = free[:len(free)-1]
		return cc, nil
	}
	ctxCount++
	name := fmt.Sprintf("pe%d-ctx%d", st.me, ctxCount)
	w, err := st.ctx.NewWorker(new(ucp.WorkerParams).SetThreadMode(mode).SetName(name))
	if err != nil {
		return nil, err
	}
	return &ctxConn{worker: w, name: name, mode: mode, eps: make([]peer, st.npes)}, nil
}

// ep returns the endpoint and heap key of the job's PE pe, connecting
// them first if needed.
func (cc *ctxConn) ep(pe int) (*peer, error) {
	q := &cc.eps[pe]
	if q.ep == nil {
		if err := connectPeer(q, cc.worker, fmt.Sprintf("%s->pe%d", cc.name, pe), pe, st.table.Blob(pe)); err != nil {
			return nil, err
		}
	}
	return q, nil
}

// putConn gives a destroyed context's resources back to the pool, or
// releases them when the pool is full.
func putConn(cc *ctxConn) {
	if len(ctxPool[cc.mode]) < ctxPoolMax {
		ctxPool[cc.mode] = append(ctxPool[cc.mode], cc)
		return
	}
	cc.close()
}

func (cc *ctxConn) close() {
	closePeers(cc.eps)
	cc.worker.Destroy()
}

// drainCtxPool releases every pooled context resource (at Finalize).
func drainCtxPool() {
	for mode := range ctxPool {
		for _, cc := range ctxPool[mode] {
			cc.close()
		}
		ctxPool[mode] = nil
	}
}

// CtxCreate creates a communication context (shmem_ctx_create) with
// options, a combination of CtxSerialized, CtxPrivate and CtxNostore, or 0.
// A context without CtxPrivate or CtxSerialized may be used by several
// goroutines at once. The context gets a ucp worker of its own, with
// endpoints to every PE whose heap is not mapped on this node, and belongs
// to TeamWorld.
//
// It returns an error, and no context, for unknown options or when the
// worker or its endpoints cannot be created (for example when the
// transports are out of resources). Destroy releases the context.
func CtxCreate(options CtxOptions) (*Ctx, error) {
	mustInit("CtxCreate")
	return newCtx("CtxCreate", TeamWorld, options)
}

// newCtx creates a context of team: its peers are the team's PEs, in team
// order.
func newCtx(routine string, team *Team, options CtxOptions) (*Ctx, error) {
	if options&^ctxAllOptions != 0 {
		return nil, fmt.Errorf("shmem.%s: unknown options %v (valid: CtxSerialized, CtxPrivate, CtxNostore): %w", routine, options, ErrInvalidArgument)
	}
	mode := ucs.ThreadModeMulti
	switch {
	case options&CtxPrivate != 0:
		mode = ucs.ThreadModeSingle
	case options&CtxSerialized != 0:
		mode = ucs.ThreadModeSerialized
	}
	ctxMu.Lock()
	defer ctxMu.Unlock()
	cc, err := takeConn(mode)
	if err != nil {
		return nil, fmt.Errorf("shmem.%s: %w", routine, err)
	}
	// The endpoints are made on first use (Ctx.remote).
	peers := make([]peer, team.npes)
	for i, pe := range team.members {
		// Same memory, same mapping: no endpoint needed (a peer still to
		// connect is connected, and mapped, on first use).
		peers[i].mapped, peers[i].base = st.peers[pe].mapped, st.peers[pe].heap()
	}
	c := &Ctx{peers: peers, worker: cc.worker, conn: cc, options: options, team: team, shared: mode == ucs.ThreadModeMulti}
	contexts[c] = struct{}{}
	return c, nil
}

// Destroy completes the context's operations (as Quiet does) and releases
// it (shmem_ctx_destroy). Destroying a destroyed context does nothing; it
// panics for CtxDefault and for nil. No other goroutine may use the context
// during or after the call.
func (c *Ctx) Destroy() {
	if c == nil {
		panic("shmem.(*Ctx).Destroy: nil context")
	}
	if c == &defaultCtx {
		panic("shmem.(*Ctx).Destroy: the default context cannot be destroyed (it lives until Finalize)")
	}
	ctxMu.Lock()
	defer ctxMu.Unlock()
	if c.destroyed {
		return
	}
	c.destroyLocked()
}

func (c *Ctx) destroyLocked() {
	c.quiet("(*Ctx).Destroy")
	if p := c.pump.Load(); p != nil {
		p.close()
	}
	putConn(c.conn)
	delete(contexts, c)
	c.peers, c.worker, c.conn, c.destroyed = nil, nil, nil, true
}

// destroyContexts destroys every context CtxCreate made that is still
// alive, and releases the pooled resources (at Finalize).
func destroyContexts() {
	ctxMu.Lock()
	defer ctxMu.Unlock()
	for c := range contexts {
		c.destroyLocked()
	}
	drainCtxPool()
}

// Quiet waits until every put, atomic, signal and store this PE issued on
// the context is complete and visible at its target, and every value a
// non-blocking fetching atomic or get of the context fetches is in place
// (shmem_ctx_quiet). Operations of other contexts are not waited for.
func (c *Ctx) Quiet() {
	c.check("(*Ctx).Quiet")
	c.quiet("(*Ctx).Quiet")
}

// Fence orders the puts, atomics and signals this PE issues on the context
// to each PE before the call before those it issues after the call to the
// same PE (shmem_ctx_fence).
func (c *Ctx) Fence() {
	c.check("(*Ctx).Fence")
	c.fence("(*Ctx).Fence")
}

// fence orders the context's operations: the stores into mapped heaps
// with a full memory barrier, the rest with the worker's fence, after
// sending what a batch session gathered.
func (c *Ctx) fence(routine string) {
	c.flushBatches(routine)
	fenceWord.Add(1)
	if err := c.worker.Fence(); err != nil {
		fatal(routine, st.me, err)
	}
}

// Team returns the team the context belongs to (shmem_ctx_get_team):
// TeamWorld for CtxDefault and for every context CtxCreate makes, the team
// for a context of (*Team).CreateCtx. The PE numbers given to the routines
// on a context are numbers in its team.
func (c *Ctx) Team() *Team {
	c.check("(*Ctx).Team")
	return c.team
}

// check panics when c cannot be used.
func (c *Ctx) check(routine string) {
	if c == nil || c.peers == nil {
		c.badCtx(routine)
	}
}

//go:noinline
func (c *Ctx) badCtx(routine string) {
	switch {
	case st.phase != initialized:
		panicUninit(routine)
	case c == nil:
		panic("shmem." + routine + ": nil context (use shmem.CtxDefault or one from shmem.CtxCreate)")
	case c.destroyed:
		panic("shmem." + routine + ": the context was destroyed")
	}
	panic("shmem." + routine + ": the context is not initialized (use shmem.CtxDefault or one from shmem.CtxCreate)")
}

// peer returns the peer record of pe in the context, panicking with a clear
// message for a PE outside the job, a context that cannot be used, or use
// before Init. Its endpoint may not be connected yet, and the base of a
// heap mapped on connection not set yet: the routines take their slow
// path then, which connects (see remote).
func (c *Ctx) peer(routine string, pe int) *peer {
	if c == nil || uint(pe) >= uint(len(c.peers)) {
		c.badPE(routine, pe)
	}
	return &c.peers[pe]
}

// connectMu serializes the connections made on first use.
var connectMu sync.Mutex

// remote returns the peer record of pe (a valid PE of the context) with its
// endpoint and heap key, connecting them on first use; a PE that cannot be
// connected ends this one, as a failed operation does.
func (c *Ctx) remote(routine string, pe int) *peer {
	q := &c.peers[pe]
	if atomic.LoadUint32(&q.ready) == 0 {
		if err := c.connect(pe); err != nil {
			fatal(routine, pe, err)
		}
	}
	return q
}

// connect connects the context to its PE pe, unless that is done.
func (c *Ctx) connect(pe int) error {
	connectMu.Lock()
	defer connectMu.Unlock()
	q := &c.peers[pe]
	if q.ready != 0 {
		return nil
	}
	if c.conn == nil { // the default context
		return connectPeer(q, st.worker, fmt.Sprintf("pe%d->pe%d", st.me, pe), pe, st.table.Blob(pe))
	}
	gpe := c.team.members[pe]
	var base unsafe.Pointer
	if q.mapped {
		// The default context's mapping serves every context; the
		// context's own endpoint serves the operation that connects.
		g := &st.peers[gpe]
		if g.ready == 0 {
			if err := connectPeer(g, st.worker, fmt.Sprintf("pe%d->pe%d", st.me, gpe), gpe, st.table.Blob(gpe)); err != nil {
				return err
			}
		}
		base = g.base
	}
	p, err := c.conn.ep(gpe)
	if err != nil {
		return err
	}
	if base != nil {
		atomic.StorePointer(&q.base, base)
	}
	q.ep, q.rkey, q.raddr, q.regions = p.ep, p.rkey, p.raddr, p.regions
	atomic.StoreUint32(&q.ready, 1)
	return nil
}

// connected reports whether the endpoint of the context to pe is made.
func (q *peer) connected() bool { return atomic.LoadUint32(&q.ready) != 0 && q.ep != nil }

// heap returns the peer's heap as mapped here, or nil when it is not
// mapped, or not yet (the routines then take their slow path, which
// connects): it connects nothing.
func (q *peer) heap() unsafe.Pointer { return atomic.LoadPointer(&q.base) }

// jobPeer returns the default context's record of the job's PE pe, with
// its heap's base in place when this PE maps it: a peer still to connect
// is connected first.
func jobPeer(routine string, pe int) *peer {
	q := &st.peers[pe]
	if atomic.LoadUint32(&q.toMap) != 0 {
		defaultCtx.remote(routine, pe)
	}
	return q
}

//go:noinline
func (c *Ctx) badPE(routine string, pe int) {
	c.check(routine)
	of := "the job"
	if c.team != TeamWorld {
		of = "the context's team, " + c.team.String()
	}
	panic(fmt.Sprintf("shmem.%s: PE %d is not a PE of %s (valid: 0..%d)", routine, pe, of, len(c.peers)-1))
}

// quiet completes the context's operations: a full memory barrier for the
// stores into mapped heaps, a worker flush for the rest, then the
// completion callbacks of the non-blocking operations.
func (c *Ctx) quiet(routine string) {
	c.flushBatches(routine)
	fenceWord.Add(1)
	if err := c.flush(); err != nil {
		fatal(routine, st.me, err)
	}
	for c.pending.Load() > 0 {
		if c.worker.Progress() == 0 {
			c.idle()
		}
	}
}

// PEQuiet is Quiet of the context for the operations to the context's
// PEs pes only (shmem_ctx_pe_quiet, OpenSHMEM 1.6); see shmem.PEQuiet.
func (c *Ctx) PEQuiet(pes []int) {
	c.check("(*Ctx).PEQuiet")
	c.peQuiet("(*Ctx).PEQuiet", pes)
}

// peQuiet flushes the endpoints to pes (the PEs whose heaps are mapped
// here take only the memory barrier: their stores are complete), then
// waits for the completion callbacks of the context's non-blocking
// operations, which are not kept per PE: the routine may wait for more
// than it must, as OpenSHMEM allows.
func (c *Ctx) peQuiet(routine string, pes []int) {
	for _, pe := range pes {
		c.peer(routine, pe)
	}
	if len(pes) == 0 {
		return
	}
	for _, pe := range pes {
		c.flushBatch(routine, pe)
	}
	fenceWord.Add(1)
	for _, pe := range pes {
		if q := &c.peers[pe]; q.connected() {
			if err := c.withDefaultProgress(q.ep.Flush); err != nil {
				fatal(routine, pe, err)
			}
		}
	}
	for c.pending.Load() > 0 {
		if c.worker.Progress() == 0 {
			c.idle()
		}
	}
}

// flush flushes the context's worker. The operations of every context
// land on the default worker of their target, and over transports without
// passive progress (software atomics and flushes over shared-memory
// messages) only that worker's progress serves them: while this PE waits
// for its context's operations, its default worker must go on serving the
// operations of the PEs that wait for it, or two PEs waiting for each other
// would wait forever. ucp's flush progresses the context's worker only, so
// a goroutine progresses the default worker meanwhile. Other contexts'
// goroutines may wait at the same time: below ThreadMultiple they take
// turns (foreignProgress); in ThreadMultiple the worker takes a lock.
func (c *Ctx) flush() error { return c.withDefaultProgress(c.worker.Flush) }

// withDefaultProgress runs wait, a blocking ucp call on the context's
// worker, while the context's pump progresses the default worker (see
// flush).
func (c *Ctx) withDefaultProgress(wait func() error) error {
	if c == &defaultCtx || !st.netPoll {
		return wait()
	}
	p := c.defaultPump()
	p.begin()
	err := wait()
	p.end()
	return err
}

// defaultPump returns the context's pump, made at its first use.
func (c *Ctx) defaultPump() *defaultPump {
	if p := c.pump.Load(); p != nil {
		return p
	}
	p := newDefaultPump()
	if !c.pump.CompareAndSwap(nil, p) {
		p.close() // another goroutine's came first
	}
	return c.pump.Load()
}

// defaultPump is a goroutine that progresses the default worker while at
// least one goroutine of its context waits in a blocking ucp call on the
// context's worker (withDefaultProgress). It lives from the context's
// first such wait to its Destroy, parked between waits: a goroutine and
// two channels made for each wait cost three allocations per quiet of a
// context over the network.
type defaultPump struct {
	mu     sync.Mutex
	waits  int           // waits under way
	run    atomic.Bool   // the goroutine progresses while set
	wake   chan struct{} // a first wait began; closed by close
	parked chan struct{} // the goroutine stopped progressing
}

func newDefaultPump() *defaultPump {
	p := &defaultPump{wake: make(chan struct{}), parked: make(chan struct{})}
	go p.serve()
	return p
}

func (p *defaultPump) serve() {
	for range p.wake {
		for p.run.Load() {
			if foreignProgress() == 0 {
				st.worker.Idle()
			}
		}
		p.parked <- struct{}{}
	}
}

// begin starts the progress for a wait; end ends it once no wait is under
// way, and returns when the goroutine no longer progresses.
func (p *defaultPump) begin() {
	p.mu.Lock()
	if p.waits++; p.waits == 1 {
		p.run.Store(true)
		p.wake <- struct{}{}
	}
	p.mu.Unlock()
}

func (p *defaultPump) end() {
	p.mu.Lock()
	if p.waits--; p.waits == 0 {
		p.run.Store(false)
		<-p.parked
	}
	p.mu.Unlock()
}

// close ends the goroutine; no wait may be under way.
func (p *defaultPump) close() { close(p.wake) }

// idle gives the processor away in a wait loop that made no progress. A
// context other than the default one first progresses the default worker,
// which serves the operations other PEs wait for (see flush).
func (c *Ctx) idle() {
	if c != &defaultCtx && st.netPoll && foreignProgress() > 0 {
		return
	}
	c.worker.Idle()
}

// foreignProgress progresses the default worker from the goroutine of
// another context (flush's goroutine, idle) and returns its events. The
// goroutines of several contexts may wait at once, and below
// ThreadMultiple the default worker is not made for concurrent calls
// (its thread mode is single or serialized): one of them progresses it at
// a time, and the others, finding it taken, leave it to that one (0).
func foreignProgress() int {
	if defaultCtx.shared {
		return st.worker.Progress()
	}
	if !st.foreignMu.TryLock() {
		return 0
	}
	defer st.foreignMu.Unlock()
	return st.worker.Progress()
}

// asyncOp is an operation of a context that completes after its routine
// returned; Quiet waits for it. A fetching one stores its value into fetch
// when it completes. Operations are recycled (asyncOps): one is free again
// once it completed.
type asyncOp struct {
	c       *Ctx
	routine string
	pe      int
	fetch   unsafe.Pointer // where the fetched value goes, or nil
	size    uintptr        // of the fetched value
	reply   uint64
	params  ucp.RequestParam // of the ucp call that starts it
}

// asyncOps holds the operations that completed, for newAsync: a loop of
// non-blocking operations and quiets over the network allocated two
// objects per operation.
var asyncOps = sync.Pool{New: func() any { return new(asyncOp) }}

// newAsync starts the bookkeeping of an operation that may complete late.
func (c *Ctx) newAsync(routine string, pe int) *asyncOp {
	c.pending.Add(1)
	op := asyncOps.Get().(*asyncOp)
	op.c, op.routine, op.pe = c, routine, pe
	return op
}

// param returns the request parameters of the operation: its completion
// callback, and the reply buffer when it fetches. They are the
// operation's, valid until it completes.
func (op *asyncOp) param(fetching bool) *ucp.RequestParam {
	op.params = ucp.RequestParam{}
	p := op.params.SetCallback(asyncDone).SetUserData(op)
	if fetching {
		p.SetReply(&op.reply)
	}
	return p
}

// started takes the result of the ucp call that started the operation.
func (op *asyncOp) started(req *ucp.Request, err error) {
	if err != nil {
		fatal(op.routine, op.pe, err)
	}
	if req == nil {
		op.done() // completed at once: ucp calls no callback
		return
	}
	req.Free() // the completion releases it, after the callback
}

func asyncDone(_ *ucp.Request, status error, userData any) {
	op := userData.(*asyncOp)
	if status != nil {
		fatal(op.routine, op.pe, status)
	}
	op.done()
}

func (op *asyncOp) done() {
	if op.fetch != nil {
		if op.size == 4 {
			*(*uint32)(op.fetch) = uint32(op.reply)
		} else {
			*(*uint64)(op.fetch) = op.reply
		}
	}
	c := op.c
	*op = asyncOp{}
	asyncOps.Put(op)
	c.pending.Add(-1)
}

// wait waits for a request of a blocking routine and frees it.
func (c *Ctx) wait(routine string, pe int, req *ucp.Request, err error) {
	if err == nil && req != nil {
		for !req.IsCompleted() {
			if c.worker.Progress() == 0 {
				c.idle()
			}
		}
		err = req.Status()
		req.Free()
	}
	if err != nil {
		fatal(routine, pe, err)
	}
}
