// Package shmem is the OpenSHMEM API for Go.
//
// A job is a set of processing elements (PEs) started together, usually by
// goshmem-run; each PE calls Init, works on its symmetric heap, and calls
// Finalize. Symmetric objects are Go slices (or pointers) into the heap,
// obtained with the collective Malloc, Calloc, Align and Realloc; the same
// object exists at the same offset on every PE, and the routines of this
// package read and write the copy that lives on another PE:
//
//	if err := shmem.Init(); err != nil { log.Fatal(err) }
//	defer shmem.Finalize()
//	buf, err := shmem.Malloc[int64](4) // collective: every PE asks for the same size
//	if err != nil { log.Fatal(err) }
//	shmem.Put(buf, []int64{1, 2, 3, 4}, (shmem.MyPE()+1)%shmem.NPEs())
//	shmem.BarrierAll()
//
// Memory of the program's outside the heap, the same on every PE (global
// arrays; a C program's static data), becomes symmetric too with
// SetRegions before Init: the routines then take its addresses as they
// take the heap's.
//
// Every operation goes through ucp and uct. For a PE on the same node the
// transport maps its heap, and the operations are single copies or CPU
// atomics through the cached pointer that ucp's rkey gives; for other PEs
// they are ucp operations on the endpoint to that PE.
//
// The routines follow OpenSHMEM 1.6, one generic function per typed family
// (shmem_int_put, shmem_long_put, ... are Put[T]): RMA (Put, Get, P, G,
// their Mem, NBI, strided IPut/IGet and interleaved-block IBPut/IBGet
// forms), put-with-signal (PutSignal, AddSignal, SetSignal,
// SignalWaitUntil, SignalFetch), atomics (AtomicFetchAdd, AtomicFetchOr,
// ..., with non-blocking fetching forms such as AtomicFetchAddNBI),
// point-to-point synchronization (WaitUntil, Test and their All, Any, Some
// and Vector forms), ordering and completion (Fence, Quiet, PEQuiet),
// barriers, collectives on teams (coll.go; the scans SumInscan and
// SumExscan among them) and distributed locks (SetLock, ClearLock,
// TestLock). Every communication routine also exists on a communication
// context (Ctx): CtxPut, CtxAtomicFetchAdd, ...; the routines without a
// context use CtxDefault. A context's sessions (SessionStart) hint at the
// patterns to come.
//
// Completion: a blocking routine returns when its local buffers may be
// reused (and, for fetching routines, when the value is there). A
// non-blocking (NBI) routine may return earlier; its buffers may be reused,
// and the values it fetches are in place, after Quiet on its context.
// Stores (puts, non-fetching atomics, signals) are complete at their target
// after Quiet or a barrier; Fence orders them per target, among the
// operations of its own context only (as OpenSHMEM 1.6 says).
//
// The memory routines (Malloc, Calloc, Align, MallocWithHints, Realloc,
// Free) are collective over TeamWorld.
//
// Goroutines: the default context, and the routines without a context
// argument, serve one goroutine at a time after Init (ThreadSingle), and
// any number at once after InitThread(ThreadMultiple). Goroutines that communicate at
// once each use a context of their own (CtxCreate with CtxPrivate), or
// share one made without CtxPrivate and CtxSerialized.
//
// Teams: TeamWorld is every PE, TeamShared the PEs that map each other's
// heaps; TeamSplitStrided and TeamSplit2D make others, (*Team).Sync
// synchronizes one, and (*Team).CreateCtx gives a context whose PE numbers
// are the team's.
//
// Environment variables, read at Init (those of the OpenSHMEM
// specification):
//
//   - SHMEM_SYMMETRIC_SIZE: the size of each PE's symmetric heap, with an
//     optional K, M, G or T suffix (default 256M). Init fails, before it
//     reaches any peer, for a heap too small for the library's own state
//     (naming the minimum), and for one larger than the memory that can
//     ever back it (an error that wraps ucs.ErrNoMemory; see symheap.New).
//   - SHMEM_DEBUG: when set (to anything but 0, n, no, false or off), every
//     allocation call first checks that every PE makes the same call, and
//     reports a mismatch (ErrDebugMismatch) naming the call and the PE; and
//     the routines check that the symmetric ranges they touch lie inside
//     one allocated object.
//   - SHMEM_INFO: when set, PE 0 prints the version, name, heap size, thread
//     level, the transports it reaches each PE with, and these variables,
//     at Init.
//   - SHMEM_VERSION: when set, PE 0 prints the version at Init.
//
// # Errors
//
// The rule: a routine with an error result (Init, InitThread, the
// allocation routines, CtxCreate and (*Team).CreateCtx, the team splits,
// (*Team).GetConfig and the collectives) reports with an error what can
// go wrong in a correct program and the mistakes of its arguments that
// every PE finds alike; the routines without one (RMA, atomics, signals,
// waits, locks, Fence, Quiet, barriers, (*Team).Sync, Free, Ptr and
// TeamPtr) cannot report, and panic for a mistake in their arguments. The
// Context forms of the waits and of SetLock return their context's error
// only, and panic as the other forms do. Mistakes about the library's
// state (use before Init or after the last Finalize, a destroyed team or
// context, an array that Malloc did not allocate given to Realloc or
// Free) are programming errors that panic everywhere. The queries answer instead of panicking.
// A panic's message names the routine, the argument and the valid range.
//
//	mistake                          with an error result         without one
//	-------------------------------  ---------------------------  ------------------
//	use before Init, after Finalize  panic                        panic
//	PE number outside the job/team   error (ErrInvalidArgument)   panic
//	address outside the heap, or     error (ErrInvalidArgument)   panic
//	  nil where memory is needed
//	length that does not fit         error (ErrInvalidArgument;   panic
//	                                   ErrHeapExhausted in an
//	                                   allocation)
//	unknown option, cmp or op bits   error (ErrInvalidArgument)   panic
//	arguments that differ among PEs  error on every PE (splits,   undefined (may hang)
//	                                   allocation); undefined
//	                                   (may hang) in collectives
//	collectives called out of order  panic (collective mismatch, found while waiting)
//	the invalid team (nil)           error (ErrInvalidTeam)       panic ((*Team).Sync)
//	a destroyed team                 panic                        panic
//	a nil or destroyed *Ctx          panic                        panic
//	an array not from Malloc & co.   panic (Realloc)              panic (Free)
//	heap exhausted                   error (ErrHeapExhausted)     -
//	allocation calls that differ     error (ErrAllocMismatch,     -
//	  (SHMEM_DEBUG)                    on every PE)
//	a failed peer or transport       fatal (below)                fatal (below)
//
// The queries with a sentinel: MyPE and NPEs return -1 before Init;
// (*Team).MyPE and (*Team).NPEs -1 for a nil or destroyed team;
// TeamTranslatePE -1 for a PE outside either team or a nil or destroyed
// team; TeamPtr nil for the invalid team (and where the memory is not
// mapped). (*Team).Destroy of nil or of a destroyed team does nothing;
// Finalize without Init does nothing.
//
// The library ends the process (os.Exit) only in GlobalExit, which ends
// the job with the program's code, and on two fatal paths, each after a
// line at ucs.LogFatal on its logger (SetLogger) and with status 1: a
// communication failure in a routine without an error result (its
// operation cannot complete, and waiting would hang the job); and the
// failure of another PE or of the launcher while the library is
// initialized (waiting on a dead peer would hang).
//
// # Logging
//
// The library writes nothing to standard error by itself: its warnings,
// the errors it cannot return (of Finalize), stall reports and the lines
// of the fatal paths go to its logger, and so do those of ucp, the
// transports and the bootstrap below it. The logger is
// ucs.DefaultLogger() (standard error, at the level UCX_LOG_LEVEL names:
// fatal, error, warn (the default), diag, info, debug, trace, ...), or
// the one SetLogger sets before Init.
package shmem

import (
	"cmp"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/goshmem/goshmem/bootstrap"
	"github.com/goshmem/goshmem/internal/worldsync"
	"github.com/goshmem/goshmem/symheap"
	"github.com/goshmem/goshmem/ucp"
	"github.com/goshmem/goshmem/ucs"

	// Every transport, for ucp to select among.
	_ "github.com/goshmem/goshmem/uct/transports"
)

// RMA is the set of standard RMA types of OpenSHMEM 1.5 in Go form.
type RMA interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 |
		~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~uintptr |
		~float32 | ~float64 | ~complex64 | ~complex128
}

// AMO is the set of standard AMO types.
type AMO interface {
	~int | ~int32 | ~int64 | ~uint | ~uint32 | ~uint64 | ~uintptr
}

// ExtAMO is the set of extended AMO types: the standard ones and the
// floating-point types (for fetch, set and swap).
type ExtAMO interface {
	AMO | ~float32 | ~float64
}

// Bitwise is the set of bitwise AMO types (the and, or and xor routines):
// unsigned int, unsigned long, unsigned long long, int32, int64, uint32 and
// uint64 in C.
type Bitwise interface {
	~uint | ~uint32 | ~uint64 | ~int32 | ~int64
}

// Point is the set of point-to-point synchronization types.
type Point interface {
	~int16 | ~int32 | ~int64 | ~int | ~uint16 | ~uint32 | ~uint64 | ~uint | ~uintptr
}

// peer is what a PE keeps for each PE of the job, itself included.
type peer struct {
	// base is the peer's heap mapped here (from the rkey's Ptr), or nil when
	// the peer's memory is reachable only through ucp operations.
	base  unsafe.Pointer
	ep    *ucp.Endpoint
	rkey  *ucp.Rkey
	raddr uint64 // the peer's heap base address, in the peer's address space
	// regions are the peer's symmetric regions (SetRegions), by this PE's
	// region number, reached through ucp (with ep).
	regions []peerRegion
	// ready is set, atomically, once ep and rkey are in place (and base,
	// for a mapped heap): on first use (Ctx.remote), so that a PE that
	// talks to a few PEs never connects to the rest.
	ready uint32
	// mapped says that the peer's heap is mapped here once it is
	// connected: decided at Init without connecting
	// (ucp.Worker.MapsRemoteKey), since the collectives must know from the
	// start which heaps every PE maps.
	mapped bool
	// toMap is non-zero, atomically, while the peer is a mapped one still
	// to connect (Init leaves them to their first use): jobPeer connects it
	// first, so that base is in place before the collectives read it; the
	// routines' hot paths see a nil base and take their slow path, which
	// connects.
	toMap uint32
}

// state is the library state of this PE. The hot paths read it without
// locks: it is written only by Init and Finalize.
type state struct {
	me, npes int
	heapBase uintptr
	heapSize uintptr
	regions  []symRegion // this PE's regions besides the heap (region.go)
	peers    []peer      // those of the default context
	// table holds every PE's worker address and packed heap key (its init
	// blob), in memory the PEs of this host share, for the endpoints made
	// on first use.
	table   *bootstrap.Table
	heap    *symheap.Heap
	member  *bootstrap.Member
	ctx     *ucp.Context
	worker  *ucp.Worker
	barrier barrierState
	spin    int // loads a waiter spins before yielding
	// perCPU is the number of its node's PEs that may run on each of this
	// PE's CPUs, rounded up (see crowding).
	perCPU  int
	netPoll bool // some peer is reached through the network
	// netColls: some PE of the job does not map every other's heap, so a
	// team's collectives may go across nodes (the team slots then hold a
	// net area, coll_net.go). The same on every PE (from the placements).
	netColls bool
	// foreignMu lets one goroutine of another context at a time progress
	// the default worker (foreignProgress).
	foreignMu sync.Mutex
	env       envSettings
	phase     phase
	inits     int // Init and InitThread calls not yet matched by Finalize
	// allocCalls counts the allocation calls, for the reports of calls
	// that differ among the PEs.
	allocCalls uint64
	// oldProcs is GOMAXPROCS before shareCores changed it; 0 if it did not.
	oldProcs int
}

var (
	st      state
	allocMu sync.Mutex // serializes the collective allocation calls
)

// phase is where the library is in its life on this PE. Init and Finalize
// alone change it; the routines read it to tell a use before Init from a
// use after Finalize.
type phase uint8

const (
	notInitialized phase = iota // before the first successful Init
	initialized                 // Init succeeded; the last Finalize did not come yet
	finalized                   // the last Finalize ended the library; Init starts it again
)

// panicUninit panics for routine, called while the library is not
// initialized, saying whether Init was not called yet or Finalize ended
// the library.
//
//go:noinline
func panicUninit(routine string) {
	if st.phase == finalized {
		panic("shmem." + routine + " called after shmem.Finalize (the library ended; Init starts it again)")
	}
	panic("shmem." + routine + " called before shmem.Init")
}

// blobVersion starts the blob each PE publishes at Init.
const blobVersion = 2

// Init starts the library on this PE: it joins the job (a program started
// without goshmem-run is a job of one PE), creates the ucp context and
// worker, maps the symmetric heap (SHMEM_SYMMETRIC_SIZE bytes, default
// 256M), exchanges worker addresses and heap keys with every PE, connects an
// endpoint to each, sets up TeamWorld and TeamShared, and waits for every
// PE to get there. The thread level is ThreadSingle (InitThread asks for
// another). The environment variables SHMEM_DEBUG, SHMEM_INFO and
// SHMEM_VERSION are read here (see the package documentation). On a node
// with more PEs than cores, Init sets GOMAXPROCS to the PE's share of the
// cores (at least 1), unless the environment sets GOMAXPROCS (goshmem-run
// sets it so in the environment of such a host's PEs, so that their
// runtimes start that way); the last Finalize sets it back. When UCX_TLS
// leaves out a transport that would keep a PE's operations on its own
// heap, or those between the PEs of PE 0's node, in memory (tcp without
// self, tcp without sm, posix alone with a sysv heap), PE 0 logs one warning (ucs.LogWarn,
// once per process) that names the UCX_TLS that would.
//
// Init may be called more than once (OpenSHMEM 1.6): a call while the
// library is initialized does nothing but count, and each call must be
// matched by a call to Finalize, the last of which ends the library. After
// that, Init starts it again.
func Init() error {
	if st.phase == initialized {
		st.inits++
		return nil
	}
	return initThread(ThreadSingle)
}

// QueryInitialized reports whether the library is initialized: Init or
// InitThread succeeded and the matching last Finalize has not been called
// (shmem_query_initialized). It may be called at any time, from any
// goroutine that does not race with Init and Finalize.
func QueryInitialized() bool { return st.phase == initialized }

// NetworkPeers reports whether some PE of the job is reached through the
// network (tcp), not through memory this PE maps: only then does a wait
// on local memory need Progress. It is false before Init.
func NetworkPeers() bool { return st.phase == initialized && st.netPoll }

// Progress drives this PE's communication once, as the library's own
// waits and tests do while they wait. It is for libraries built on this
// package whose waiting loops run outside it (the C library's
// shmem_wait_until, on local memory): where NetworkPeers, so that the
// operations this PE issued and those issued to it move at once, not when
// the transports' passive progress steps in (after UCX_TCP_PASSIVE_DELAY);
// and in any job past a short spin, since the RMA and atomics that peers
// carry in shared-memory messages to memory of this PE's that they do not
// map (static data left in place, when UCX_TLS leaves tcp out) are
// applied only inside the library, and such a loop would otherwise wait
// forever for one. It does nothing before Init and after the last
// Finalize.
func Progress() {
	if st.phase == initialized {
		st.worker.Progress()
	}
}

func initThread(level ThreadLevel) error {
	size, err := symheap.SizeFromEnv()
	if err != nil {
		return fmt.Errorf("shmem init: %w", err)
	}
	m := member
	if m == nil {
		// Once it joined, its agent may signal it for a stall report;
		// until Init listens for that signal it must not end the PE.
		ignoreStallSignal()
		if m, err = bootstrap.JoinFromOSWithLogger(lg()); err != nil {
			return fmt.Errorf("shmem init: join the job: %w", err)
		}
		m.OnFailure(onPeerFailure)
		member = m
	}
	if err := initLocked(m, size, level, readEnv()); err != nil {
		member = nil
		m.Close()
		return fmt.Errorf("shmem init (PE %d of %d): %w", m.Rank(), m.Size(), err)
	}
	return nil
}

// member is this process's membership in its job. The last Finalize
// tells the launcher that the PE finalized but keeps the membership, so
// that Init may start the library again (OpenSHMEM 1.6); the process ends
// it by exiting.
var member *bootstrap.Member

// failuresEnd is set while a failure of another PE ends this one: from
// Init until Finalize begins.
var failuresEnd atomic.Bool

func initLocked(m *bootstrap.Member, size int, level ThreadLevel, env envSettings) (err error) {
	if err := env.check(); err != nil {
		return err
	}
	if err := checkHeapRoom(m, size); err != nil {
		return err
	}
	var undo undoStack
	defer func() {
		if err != nil {
			undo.run()
		}
	}()
	ctx, worker, heap, err := openPE(m, size, level, &undo)
	if err != nil {
		return err
	}
	addr, err := worker.Address()
	if err != nil {
		return err
	}
	rkey, err := heap.PackRkey()
	if err != nil {
		return err
	}
	regions, blobRegions, err := registerRegions(ctx, &undo)
	if err != nil {
		return err
	}
	st.regions = regions // for connectNode
	undo.push(func() { st.regions = nil })
	table, err := m.Exchange(encodeBlob(initBlob{addr: addr, rkey: rkey, base: uint64(uintptr(heap.Base())), size: uint64(heap.Size()), regions: blobRegions, extra: initExtra}))
	if err != nil {
		return fmt.Errorf("exchange addresses: %w", err)
	}
	undo.push(func() { table.Close() })
	peers := make([]peer, m.Size())
	undo.push(func() { closePeers(peers) })
	if err := connectNode(m, ctx, worker, heap, table, peers); err != nil {
		return err
	}
	st.me, st.npes = m.Rank(), m.Size()
	st.member, st.ctx, st.worker, st.heap = m, ctx, worker, heap
	st.heapBase, st.heapSize = uintptr(heap.Base()), uintptr(heap.Size())
	st.peers, st.table = peers, table
	if err := startCollectives(m, level, env); err != nil {
		resetState()
		return err
	}
	return enterInitialized(m, ctx, level)
}

// undoStack is what to undo, last first, when Init fails part way.
type undoStack []func()

func (u *undoStack) push(f func()) { *u = append(*u, f) }

func (u undoStack) run() {
	for i := len(u) - 1; i >= 0; i-- {
		u[i]()
	}
}

// checkHeapRoom fails when a heap of size bytes is too small for the
// library's own state (its size depends on the job's) before this PE
// reaches any peer: a peer that got further would see this PE go as a
// connection refused, and might report that first.
func checkHeapRoom(m *bootstrap.Member, size int) error {
	st.npes = m.Size()
	if need, heapSize := runtimeHeapSize(), (size+pageSize-1)/pageSize*pageSize; need > heapSize {
		resetState()
		return fmt.Errorf("SHMEM_SYMMETRIC_SIZE of %d bytes is below the minimum of %d bytes (%s) that goshmem takes for its own state in a job of %d PEs: %w",
			heapSize, need, sizeString(need), m.Size(), symheap.ErrNoSpace)
	}
	return nil
}

// openPE creates this PE's ucp context and worker and its symmetric heap of
// size bytes, pushing on undo how to end each.
func openPE(m *bootstrap.Member, size int, level ThreadLevel, undo *undoStack) (*ucp.Context, *ucp.Worker, *symheap.Heap, error) {
	params := new(ucp.Params).
		SetFeatures(ucp.FeatureRMA | ucp.FeatureAMO32 | ucp.FeatureAMO64 | ucp.FeatureAM).
		SetEstimatedNumEPs(m.Size()).
		SetEstimatedNumPPN(m.LocalSize()).
		SetNodeLocalID(uint64(m.LocalRank())).
		SetName(fmt.Sprintf("goshmem-pe%d", m.Rank())).
		SetLogger(lg())
	ctx, err := ucp.Init(params, nil)
	if err != nil {
		return nil, nil, nil, err
	}
	undo.push(ctx.Cleanup)
	worker, err := ctx.NewWorker(new(ucp.WorkerParams).SetName(fmt.Sprintf("pe%d", m.Rank())).SetThreadMode(level.workerMode()))
	if err != nil {
		return nil, nil, nil, err
	}
	undo.push(worker.Destroy)
	heap, err := symheap.New(ctx, size)
	if err != nil {
		return nil, nil, nil, err
	}
	undo.push(func() { heap.Close() })
	return ctx, worker, heap, nil
}

// connectNode checks the heaps of the PEs of this PE's node and connects
// those it must connect now; the other PEs are connected on first use.
func connectNode(m *bootstrap.Member, ctx *ucp.Context, worker *ucp.Worker, heap *symheap.Heap, table *bootstrap.Table, peers []peer) error {
	node := table.Node(m.Rank())
	named := ctx.NamesMemory()
	for pe := range peers {
		if table.Node(pe) != node {
			// Connected on first use, which reads its blob (and checks
			// its heap's size) then: a PE of a large job reads the
			// blobs of its own node only, not the whole table.
			continue
		}
		b, err := decodeBlob(table.Blob(pe))
		if err != nil {
			return fmt.Errorf("blob of PE %d: %w", pe, err)
		}
		if err := checkHeapSize(pe, b.size, heap.Size()); err != nil {
			return err
		}
		q := &peers[pe]
		if q.mapped, err = worker.MapsRemoteKey(b.addr, b.rkey); err != nil {
			return fmt.Errorf("blob of PE %d: %w", pe, err)
		}
		if q.mapped && pe != m.Rank() && !named {
			q.toMap = 1 // connected on first use, mapped then
			continue
		}
		// This PE itself, a peer whose heap only ucp reaches (that may
		// fail to connect: better now), and every peer of the node when
		// memory has names, which the end of Init removes.
		if err := connectPeer(q, worker, fmt.Sprintf("pe%d->pe%d", m.Rank(), pe), pe, table.Blob(pe)); err != nil {
			return err
		}
	}
	return nil
}

// startCollectives sets up, on the state Init filled in, the collectives'
// messages, the default context, how waits spin, the barrier, the teams
// and the stall reports. The caller resets the state when it fails.
func startCollectives(m *bootstrap.Member, level ThreadLevel, env envSettings) error {
	for id, cb := range map[uint32]ucp.AMRecvCallback{amRound: recvRound, amSignal: recvSignal} {
		if err := st.worker.SetAMRecvHandler(new(ucp.AMHandlerParam).SetID(id).SetCB(cb)); err != nil {
			return fmt.Errorf("collective messages: %w", err)
		}
	}
	defaultCtx = Ctx{peers: st.peers, worker: st.worker, team: TeamWorld, shared: level == ThreadMultiple}
	for i := range st.peers {
		st.netPoll = st.netPoll || !st.peers[i].mapped // so are those of other nodes
	}
	if err := st.barrier.init(); err != nil {
		return err
	}
	st.env = env
	places, err := gatherPlacements()
	if err != nil {
		return err
	}
	var procs int
	st.perCPU, procs = cpuShare(places, st.table.Node, st.me)
	st.spin = spinDedicated
	if crowded(places, st.table.Node, st.me) {
		st.spin = spinOversubscribed
		shareCores(procs)
	}
	if err := st.barrier.chooseScheme(places); err != nil {
		return err
	}
	for _, p := range places {
		st.netColls = st.netColls || !p.mapsAll
	}
	if err := initTeams(); err != nil {
		return err
	}
	return startStallReports()
}

// enterInitialized makes the library initialized once every PE is, in the
// initial barrier, and then drops the names of named memory segments.
func enterInitialized(m *bootstrap.Member, ctx *ucp.Context, level ThreadLevel) error {
	threadLevel = level
	failuresEnd.Store(true)
	before := st.phase
	st.phase, st.inits = initialized, 1
	if err := m.Barrier(); err != nil {
		stopStallReports()
		resetState()
		st.phase = before
		return fmt.Errorf("initial barrier: %w", err)
	}
	// Every PE mapped the heaps it maps before the barrier: the names of
	// named segments (UCX_POSIX_USE_SHM_OPEN) serve nobody any more, and
	// without them nothing is left in /dev/shm however this PE ends, even
	// killed together with the agent that would remove them.
	if err := ctx.UnlinkMemoryNames(); err != nil {
		lg().Logf(ucs.LogWarn, "goshmem: PE %d: %v", st.me, err)
	}
	if st.me == 0 {
		printStartup(os.Stdout)
		warnSlowSelection()
	}
	profStart()
	publishWorldSync()
	return nil
}

// connectPeer connects q, the record of pe, through worker: the endpoint
// (named name) from the worker address in pe's init blob, and the heap key,
// mapped when this process can map it; then it sets q.ready.
func connectPeer(q *peer, worker *ucp.Worker, name string, pe int, blob []byte) error {
	b, err := decodeBlob(blob)
	if err != nil {
		return fmt.Errorf("blob of PE %d: %w", pe, err)
	}
	base := b.base
	if st.heapSize != 0 { // after Init, which checked the PEs of its node
		if err := checkHeapSize(pe, b.size, int(st.heapSize)); err != nil {
			return err
		}
	}
	ep, err := worker.NewEndpoint(new(ucp.EPParams).SetAddress(b.addr).SetName(name))
	if err != nil {
		return fmt.Errorf("connect to PE %d: %w", pe, err)
	}
	rk, err := ep.RkeyUnpack(b.rkey)
	if err == nil {
		err = checkLanes(ep, pe) // its lanes are chosen now
	} else {
		err = fmt.Errorf("heap key of PE %d: %w", pe, err)
	}
	if err != nil {
		if rk != nil {
			rk.Destroy()
		}
		ep.Close(ucp.CloseModeForce)
		return err
	}
	if p, err := rk.Ptr(base); err == nil {
		atomic.StorePointer(&q.base, p)
	} else if q.mapped {
		rk.Destroy()
		ep.Close(ucp.CloseModeForce)
		return fmt.Errorf("map the heap of PE %d, which its address said this PE maps: %w", pe, err)
	}
	q.ep, q.rkey, q.raddr = ep, rk, base
	q.regions = peerRegions(pe, b.regions)
	atomic.StoreUint32(&q.ready, 1)
	atomic.StoreUint32(&q.toMap, 0)
	return nil
}

// checkHeapSize fails when the heap of PE pe, of size bytes, is not of
// this PE's size mine.
func checkHeapSize(pe int, size uint64, mine int) error {
	if size != uint64(mine) {
		return fmt.Errorf("PE %d has a heap of %d bytes and this PE %d: SHMEM_SYMMETRIC_SIZE must be the same everywhere: %w", pe, size, mine, ErrInvalidArgument)
	}
	return nil
}

// checkLanes fails when the endpoint to pe can neither do RMA and atomics
// itself nor emulate them with active messages: shmem cannot run over it
// (its barriers alone need atomics). cma, for one, has neither atomics nor
// active messages.
func checkLanes(ep *ucp.Endpoint, pe int) error {
	var rma, amo, am bool
	var lanes []string
	for _, l := range ep.Query().Lanes {
		for _, u := range strings.Split(l.Usage, ",") {
			rma = rma || u == "rma"
			amo = amo || u == "amo"
			am = am || u == "am"
		}
		lanes = append(lanes, l.Transport+"/"+l.Device+" ("+l.Usage+")")
	}
	if am || (rma && amo) {
		return nil
	}
	have := "no lane"
	if len(lanes) > 0 {
		have = "only " + strings.Join(lanes, ", ")
	}
	return fmt.Errorf("connect to PE %d: the transports selected (UCX_TLS=%s) give %s: no atomics, and no active messages to emulate RMA and atomics; "+
		"shmem needs a transport with active messages (posix, sysv, tcp, and self for this PE): %w",
		pe, cmp.Or(os.Getenv("UCX_TLS"), "all"), have, ucs.ErrUnsupported)
}

// runtimeHeapSize is the part of the symmetric heap that Init takes for the
// library's own state (the barrier's counters and the team pool), with
// st.npes set: the smallest SHMEM_SYMMETRIC_SIZE that works.
func runtimeHeapSize() int {
	n := barrierLines()*counterStride + int(teamSlotSize())*MaxTeams
	return (n + pageSize - 1) / pageSize * pageSize
}

// pageSize is the unit of the heap's size (symheap.New rounds it up).
const pageSize = 4096

// sizeString writes n, a multiple of 1K, as SHMEM_SYMMETRIC_SIZE takes it,
// rounded up to the largest unit that keeps it exact or small: "340K",
// "2M".
func sizeString(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dM", (n+1<<20-1)>>20)
	}
	return fmt.Sprintf("%dK", (n+1<<10-1)>>10)
}

// shareCores makes procs, this PE's share of the cores it may run on
// (see crowding), the Go runtime's processors (GOMAXPROCS), when its node
// has more PEs than cores and the environment does not set GOMAXPROCS:
// with a processor per core in every PE, the runtimes' idle processors
// spin and wake each other (about a fifth of an oversubscribed job's CPU
// time), on cores that the PEs' own work needs. resetState gives the old
// value back.
func shareCores(procs int) {
	if _, set := os.LookupEnv("GOMAXPROCS"); set {
		return
	}
	st.oldProcs = runtime.GOMAXPROCS(procs)
}

// resetState forgets everything Init set but the phase, which only Init
// and Finalize change.
func resetState() {
	worldsync.Publish(nil)
	if st.oldProcs != 0 {
		runtime.GOMAXPROCS(st.oldProcs)
	}
	st = state{phase: st.phase}
	defaultCtx = Ctx{}
	resetTeams()
	resetDebug()
	threadLevel = ThreadSingle
}

func closePeers(peers []peer) {
	for i := range peers {
		if peers[i].rkey != nil {
			peers[i].rkey.Destroy()
		}
		destroyRegions(peers[i].regions)
		if peers[i].ep != nil {
			peers[i].ep.Close(ucp.CloseModeForce)
		}
	}
}

// onPeerFailure ends this PE when another PE or the launcher fails while
// the library is initialized: waiting on a dead peer would hang. A library
// that registered with OnPeerFailure may take charge of a PE's failure.
func onPeerFailure(f bootstrap.Failure) {
	if !failuresEnd.Load() {
		return
	}
	if f.Rank >= 0 && peerFailureHandled(f) {
		lg().Logf(ucs.LogError, "goshmem: PE %d: %v (handled by a library on this PE)", member.Rank(), f)
		return
	}
	lg().Logf(ucs.LogFatal, "goshmem: PE %d: ending the job: %v", member.Rank(), f)
	os.Exit(1)
}

// Finalize ends the library on this PE: it completes every operation of the
// default context, destroys the contexts that CtxCreate made and the program
// did not destroy (completing their operations), waits for every PE to
// finalize (so no PE unmaps memory another still uses), releases the heap,
// endpoints and worker, and leaves the job. Nothing is left in /dev/shm.
// It is collective: every PE must call it.
//
// When Init was called more than once, only the Finalize that matches the
// first Init ends the library; the others are BarrierAll (OpenSHMEM 1.6)
// and release nothing. Calling it without Init, or after the library
// ended, does nothing.
//
// Called while its goroutine panics (deferred, as in `defer
// shmem.Finalize()`, or from a deferred function), Finalize waits for no
// other PE and releases nothing: it says so and returns, so that the panic
// is printed and ends the PE, and goshmem-run ends the job naming it, as
// for a PE that panics without a deferred Finalize. The other PEs are
// elsewhere (in a collective, or waiting for this PE's store), and its
// collective would hang or be reported as a mismatch instead of the panic.
// A deferred function that recovers the panic is still running during it:
// one that is to carry on must return before the PE finalizes (defer
// Finalize before it, so that it runs after).
func Finalize() {
	if st.phase != initialized {
		return
	}
	if panicking() {
		lg().Logf(ucs.LogError, "goshmem: PE %d: Finalize during a panic: this PE leaves the job without finalizing", st.me)
		return
	}
	if st.inits > 1 {
		st.inits--
		BarrierAll()
		return
	}
	// The profile ends before the job's last barrier, which the program
	// did not call; and every PE has written its files once any returns.
	profStop()
	worldsync.Publish(nil)
	Quiet()
	settleColl()
	destroyContexts()
	// A PE may be completing operations that need another PE's progress
	// (software atomics and flushes over shared-memory messages are served
	// only when the target progresses its worker), and the bootstrap
	// barrier below does not progress it: pass the job's barrier first,
	// which progresses while it waits and which every PE enters only once
	// its own operations are complete.
	teamWorld.sync("Finalize")
	m := st.member
	failuresEnd.Store(false)
	if err := m.Barrier(); err != nil {
		lg().Logf(ucs.LogError, "goshmem: PE %d: finalize barrier: %v", st.me, err)
	}
	closePeers(st.peers)
	st.table.Close()
	closeRegions()
	st.heap.Close()
	st.worker.Destroy()
	st.ctx.Cleanup()
	if err := m.Finalize(); err != nil {
		lg().Logf(ucs.LogError, "goshmem: PE %d: finalize: %v", st.me, err)
	}
	stopStallReports()
	resetState()
	st.phase = finalized
}

// panicking reports whether the calling goroutine is running the deferred
// calls of a panic: the runtime calls them from runtime.gopanic, which is
// then among the callers. (recover cannot tell: it answers only a function
// that the panic calls directly, and it would stop the panic.)
func panicking() bool {
	var pcs [64]uintptr
	for skip := 2; ; skip += len(pcs) {
		n := runtime.Callers(skip, pcs[:])
		frames := runtime.CallersFrames(pcs[:n])
		for {
			f, more := frames.Next()
			if f.Function == "runtime.gopanic" {
				return true
			}
			if !more {
				break
			}
		}
		if n < len(pcs) {
			return false
		}
	}
}

// MyPE returns the number of this PE, from 0 to NPEs()-1; -1 before Init
// and after the last Finalize.
func MyPE() int {
	if st.phase != initialized {
		return -1
	}
	return st.me
}

// NPEs returns the number of PEs of the job; -1 before Init and after the
// last Finalize.
func NPEs() int {
	if st.phase != initialized {
		return -1
	}
	return st.npes
}

// initBlob is what a PE publishes at Init: its worker's address, its
// heap's key, address and size, its regions', and the bytes of
// SetInitExtra.
type initBlob struct {
	addr, rkey []byte
	base, size uint64
	regions    []blobRegion
	extra      []byte
}

// Blob layout (little endian): u8 version, u32 len + worker address,
// u32 len + rkey, u64 heap base, u64 heap size, u32 number of regions
// and, for each, u32 len + rkey, u64 base, u64 size; and, when
// SetInitExtra gave some, u32 len + the extra bytes.
func encodeBlob(in initBlob) []byte {
	b := make([]byte, 0, 1+4+len(in.addr)+4+len(in.rkey)+16+4)
	b = append(b, blobVersion)
	b = appendU32(b, uint32(len(in.addr)))
	b = append(b, in.addr...)
	b = appendU32(b, uint32(len(in.rkey)))
	b = append(b, in.rkey...)
	b = appendU64(b, in.base)
	b = appendU64(b, in.size)
	b = appendU32(b, uint32(len(in.regions)))
	for _, r := range in.regions {
		b = appendU32(b, uint32(len(r.rkey)))
		b = append(b, r.rkey...)
		b = appendU64(b, r.base)
		b = appendU64(b, r.size)
	}
	if len(in.extra) > 0 {
		b = appendU32(b, uint32(len(in.extra)))
		b = append(b, in.extra...)
	}
	return b
}

func appendU32(b []byte, v uint32) []byte {
	return append(b, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
}

func appendU64(b []byte, v uint64) []byte {
	return appendU32(appendU32(b, uint32(v)), uint32(v>>32))
}

// decodeBlob parses an init blob; anything malformed fails.
func decodeBlob(b []byte) (initBlob, error) {
	var out initBlob
	bad := fmt.Errorf("malformed init blob of %d bytes", len(b))
	u32 := func() (uint32, bool) {
		if len(b) < 4 {
			return 0, false
		}
		v := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
		b = b[4:]
		return v, true
	}
	u64 := func() (uint64, bool) {
		lo, ok1 := u32()
		hi, ok2 := u32()
		return uint64(hi)<<32 | uint64(lo), ok1 && ok2
	}
	bytes := func() ([]byte, bool) {
		n, ok := u32()
		if !ok || uint64(n) > uint64(len(b)) {
			return nil, false
		}
		v := b[:n]
		b = b[n:]
		return v, true
	}
	if len(b) < 1 || b[0] != blobVersion {
		return out, bad
	}
	b = b[1:]
	var ok [5]bool
	out.addr, ok[0] = bytes()
	out.rkey, ok[1] = bytes()
	out.base, ok[2] = u64()
	out.size, ok[3] = u64()
	n, ok4 := u32()
	ok[4] = ok4 && uint64(n) <= uint64(len(b))/20 // each region takes 20 bytes at least
	if ok != [5]bool{true, true, true, true, true} {
		return out, bad
	}
	for range n {
		var r blobRegion
		var ok1, ok2, ok3 bool
		r.rkey, ok1 = bytes()
		r.base, ok2 = u64()
		r.size, ok3 = u64()
		if !ok1 || !ok2 || !ok3 {
			return out, bad
		}
		out.regions = append(out.regions, r)
	}
	if len(b) != 0 { // the extra bytes
		if out.extra, ok[0] = bytes(); !ok[0] || len(b) != 0 || len(out.extra) == 0 {
			return out, bad
		}
	}
	return out, nil
}
