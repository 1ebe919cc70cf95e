package shmem

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/goshmem/goshmem/internal/worldsync"
	"github.com/goshmem/goshmem/symheap"
	"github.com/goshmem/goshmem/ucp"
	"github.com/goshmem/goshmem/ucs"
)

// Cmp is a comparison of the point-to-point synchronization routines.
type Cmp int

// Comparisons (SHMEM_CMP_*).
const (
	CmpEQ Cmp = iota
	CmpNE
	CmpGT
	CmpGE
	CmpLT
	CmpLE
)

// String returns the name of the comparison.
func (c Cmp) String() string {
	switch c {
	case CmpEQ:
		return "CmpEQ"
	case CmpNE:
		return "CmpNE"
	case CmpGT:
		return "CmpGT"
	case CmpGE:
		return "CmpGE"
	case CmpLT:
		return "CmpLT"
	case CmpLE:
		return "CmpLE"
	}
	return fmt.Sprintf("Cmp(%d)", int(c))
}

// fenceWord is the target of the read-modify-write that serves as a full
// memory barrier: it orders this PE's plain stores into mapped peer heaps.
var fenceWord atomic.Uint64

// Quiet waits until every put, atomic, signal and memory store this PE
// issued on the default context is complete and visible at its target, and
// every value a non-blocking get or fetching atomic of the default context
// fetches is in place (shmem_quiet). Other contexts have their own
// (*Ctx).Quiet.
func Quiet() {
	mustInit("Quiet")
	defaultCtx.quiet("Quiet")
}

// PEQuiet is Quiet for the operations to the PEs pes only
// (shmem_pe_quiet, OpenSHMEM 1.6): when it returns, every put, atomic,
// signal and store this PE issued on the default context to one of pes is
// complete and visible, and every value a non-blocking get of the default
// context fetches is in place. An empty pes returns at once. It panics for
// a PE outside the job.
func PEQuiet(pes []int) {
	mustInit("PEQuiet")
	defaultCtx.peQuiet("PEQuiet", pes)
}

// Fence orders the puts, atomics and signals this PE issues on the default
// context to each PE before the call before those it issues after the call
// to the same PE (shmem_fence).
func Fence() {
	mustInit("Fence")
	defaultCtx.fence("Fence")
}

// BarrierAll waits until every PE has called it, after completing every
// operation this PE issued on the default context, as Quiet does
// (shmem_barrier_all).
func BarrierAll() {
	Quiet()
	profCall("BarrierAll")
	teamWorld.beginColl("BarrierAll")
	teamWorld.sync("BarrierAll")
	teamWorld.endColl()
}

// SyncAll waits until every PE has called it, without completing
// outstanding operations (shmem_sync_all).
func SyncAll() {
	mustInit("SyncAll")
	profCall("SyncAll")
	teamWorld.beginColl("SyncAll")
	teamWorld.sync("SyncAll")
	teamWorld.endColl()
}

// barrierState is a dissemination barrier over the symmetric heap: in round
// k of a barrier, PE i brings the round-k counter of PE (i+2^k) mod N to the
// barrier's number, and waits until its own round-k counter reaches it.
// Counters only grow, so back-to-back barriers need no reset: a signal for
// the next barrier that arrives early only satisfies a wait that it would
// satisfy anyway. PE i is the only writer of that counter, so in a mapped
// heap it stores the number with a release store (an atomic add would
// stall it until its CPU owned the peer's cache line: a third of a 2-PE
// barrier here); over the network an active message has the peer store it
// (sendRound).
//
// On a node with more PEs than cores, where every wait may need a peer that
// is not running, a centralized barrier waits once instead of log2(N) times:
// each PE adds one to an arrival counter on PE 0, and the last to arrive
// publishes the barrier's number in a release word there that the others
// wait on.
//
// With GOSHMEM_BARRIER=node-aware, across nodes, where every PE maps the
// heaps of its node's PEs, the barrier is node-aware: the PEs of a node
// arrive at their node's leader
// (its lowest PE) through its arrival counter, folding their keys into its
// release line; the leaders alone disseminate, over the network; each
// leader then publishes the barrier's number, and the outcome of the key
// check, in its release word, which its node's PEs wait on. A job of 2
// nodes of 2 PEs crosses the network twice per barrier instead of 6 times,
// in one round instead of two. It is not the default: on this project's
// 2-core machines, with the nodes made of namespaces that share the cores,
// it measured slower (osu barrier, 2 nodes of 2 PEs: 204 against 167 us on
// shared cores, 159 against 66 us with a core for each node), since every
// node's PEs wait for its leader to be scheduled, where the dissemination
// keeps all of them sending; nodes with cores of their own are where it
// should win, and where it is still to be measured.
type barrierState struct {
	off    uintptr // heap offset of the counters, one cache line each
	rounds int
	// number is this PE's barrier number, in a line of its heap that no
	// other PE touches, so that the C library's barrier (capi, through
	// internal/worldsync) and this one count the same barriers; epoch is
	// its value in the barrier under way.
	number  *uint64
	epoch   uint64
	central bool
	// leaders are the node leaders, in node order, when the barrier is
	// node-aware (nil otherwise); leader is this PE's node leader, lrank
	// its place in leaders (-1 for a PE that leads no node) and local the
	// number of PEs on its node.
	leaders []int
	leader  int
	lrank   int
	local   int
}

const counterStride = symheap.MinAlign

// barrierLines is the number of counter lines of the barrier: one per round
// of the dissemination, then the arrival counter and release word, then
// the barrier number.
func barrierLines() int { return bits.Len(uint(st.npes-1)) + 3 }

func (b *barrierState) init() error {
	lines := barrierLines()
	b.rounds = lines - 3
	off, err := st.heap.Alloc(lines*counterStride, counterStride)
	if err != nil {
		return fmt.Errorf("barrier counters: %w", err)
	}
	clear(unsafe.Slice((*byte)(st.heap.At(off)), lines*counterStride))
	b.off = uintptr(off)
	b.number = (*uint64)(st.heap.At(off + (b.rounds+2)*counterStride))
	// The central barrier's minimum words start above every key.
	for par := range 2 {
		*(*uint64)(st.heap.At(off + (b.rounds+1)*counterStride + 8*(1+2*par))) = math.MaxUint64
	}
	return nil
}

// chooseScheme decides, the same way on every PE, how barriers go, from
// the PEs' placements (in job rank order): centralized where every PE maps
// every other's heap and some PE shares its CPUs with more PEs than it has
// CPUs (crowded), where every wait may need a PE that is not running; node-aware when every PE asks for it
// (GOSHMEM_BARRIER), the job spans nodes, some node runs several PEs, and
// every PE maps the heaps of its node's PEs; otherwise a dissemination over
// every PE. Each PE reports what it maps and what it asks for in its
// placement (transports and environments may differ among PEs, so no PE
// can tell alone).
func (b *barrierState) chooseScheme(all []placement) error {
	allMapped, nodeMapped := true, true
	for _, p := range all {
		allMapped = allMapped && p.mapsAll
		nodeMapped = nodeMapped && p.mapsNode && p.nodeAware
	}
	me := st.table.Node(st.me)
	b.central = allMapped && crowded(all, st.table.Node, -1)
	b.leaders, b.leader, b.lrank, b.local = nil, 0, -1, 0
	nodes := st.table.Nodes()
	if b.central || !nodeMapped || nodes < 2 || nodes >= st.npes {
		return nil // one node, or one PE per node: nothing to gather
	}
	first := make([]int, nodes)
	for i := range first {
		first[i] = -1
	}
	for pe := range st.npes {
		n := st.table.Node(pe)
		if first[n] < 0 {
			first[n] = pe
		}
		if n == me {
			b.local++
		}
	}
	for _, pe := range first {
		if pe < 0 {
			return nil // a node without PEs: the table says otherwise
		}
	}
	b.leaders, b.leader = first, first[me]
	for i, pe := range first {
		if pe == st.me {
			b.lrank = i
		}
	}
	return nil
}

// The values of GOSHMEM_BARRIER.
const (
	envBarrier       = "GOSHMEM_BARRIER"
	barrierAuto      = "auto"
	barrierNodeAware = "node-aware"
)

// scheme names the barrier's algorithm (SHMEM_INFO).
func (b *barrierState) scheme() string {
	switch {
	case b.central:
		return "central (node oversubscribed)"
	case b.leaders != nil:
		return fmt.Sprintf("node-aware (a leader for each of %d nodes)", len(b.leaders))
	}
	return "dissemination"
}

// syncNodes is the node-aware barrier (see barrierState): the key
// check's least and greatest keys are folded at the node's leader, the
// leaders disseminate them, and each leader publishes the outcome beside
// its release word. The leader resets the key words of the next barrier
// before it releases its node (every PE of the node has folded into this
// barrier's words, and read the last one's outcome, by then).
func (b *barrierState) syncNodes(routine string, key uint64) bool {
	root := jobPeer(routine, b.leader).base
	line := func(l int) unsafe.Pointer { return unsafe.Add(root, b.off+uintptr(l*counterStride)) }
	arrive := (*uint64)(line(b.rounds))
	release := (*uint64)(line(b.rounds + 1))
	word := func(w int) *uint64 { return (*uint64)(unsafe.Add(line(b.rounds+1), 8*w)) }
	par := int(b.epoch & 1)
	lo, hi, outcome := word(1+2*par), word(2+2*par), word(5+par)
	if b.lrank < 0 {
		foldMin(lo, key)
		foldMax(hi, key)
		atomic.AddUint64(arrive, 1)
		waitGE(release, b.epoch)
		return atomic.LoadUint64(outcome) == 1
	}
	waitGE(arrive, b.epoch*uint64(b.local-1))
	l, h := min(key, atomic.LoadUint64(lo)), max(key, atomic.LoadUint64(hi))
	atomic.StoreUint64(word(1+2*(par^1)), math.MaxUint64)
	atomic.StoreUint64(word(2+2*(par^1)), 0)
	ok := disseminateKeys(routine, b.leaders, b.lrank, b.off, b.epoch, l, h)
	var agreed uint64
	if ok {
		agreed = 1
	}
	atomic.StoreUint64(outcome, agreed)
	ucs.StoreRelease(release, b.epoch)
	return ok
}

// syncCentral is the centralized barrier: every PE also folds key into
// the minimum and maximum words of PE 0's release line, and it returns
// whether they are equal after the barrier. The last PE to arrive resets
// the words of the next barrier (every PE has read those of the previous
// one: it arrived at this one) before it releases the others.
func (b *barrierState) syncCentral(routine string, key uint64) bool {
	root := jobPeer(routine, 0).base
	line := func(l int) unsafe.Pointer { return unsafe.Add(root, b.off+uintptr(l*counterStride)) }
	arrive := (*uint64)(line(b.rounds))
	release := (*uint64)(line(b.rounds + 1))
	par := int(b.epoch & 1)
	lo := (*uint64)(unsafe.Add(line(b.rounds+1), 8*(1+2*par)))
	hi := (*uint64)(unsafe.Add(line(b.rounds+1), 8*(2+2*par)))
	foldMin(lo, key)
	foldMax(hi, key)
	if atomic.AddUint64(arrive, 1) == b.epoch*uint64(st.npes) {
		atomic.StoreUint64((*uint64)(unsafe.Add(line(b.rounds+1), 8*(1+2*(par^1)))), math.MaxUint64)
		atomic.StoreUint64((*uint64)(unsafe.Add(line(b.rounds+1), 8*(2+2*(par^1)))), 0)
		atomic.StoreUint64(release, b.epoch)
	} else {
		waitGE(release, b.epoch)
	}
	return atomic.LoadUint64(lo) == atomic.LoadUint64(hi)
}

// foldMin and foldMax lower or raise *p to v, atomically.
func foldMin(p *uint64, v uint64) {
	for old := atomic.LoadUint64(p); v < old && !atomic.CompareAndSwapUint64(p, old, v); old = atomic.LoadUint64(p) {
	}
}

func foldMax(p *uint64, v uint64) {
	for old := atomic.LoadUint64(p); v > old && !atomic.CompareAndSwapUint64(p, old, v); old = atomic.LoadUint64(p) {
	}
}

// sync is the job's barrier. Every PE passes a key, and sync reports
// whether all passed the same one; see disseminate.
func (b *barrierState) sync(routine string, key uint64) bool {
	*b.number++
	b.epoch = *b.number
	switch {
	case b.central:
		return b.syncCentral(routine, key)
	case b.leaders != nil:
		return b.syncNodes(routine, key)
	}
	return disseminate(routine, teamWorld.members, st.me, b.off, b.epoch, key)
}

// disseminate is a dissemination barrier over the job's PEs members (the
// PEs of a team, in its order; me is this PE's place), whose round k
// counter is the first word of the cache line at heap offset
// off0+k*counterStride on every PE: in round k, PE i brings the round-k
// counter of PE (i+2^k) mod n to epoch (a release store in a mapped heap,
// an add of one over the network) and waits until its own counter reaches
// it. Counters only grow, so back-to-back barriers need no reset.
//
// The least and the greatest key of the PEs travel with the signals, and
// disseminate reports whether they are equal: in round k each PE folds in
// what it received, having then heard of 2^(k+1) PEs, and after the last
// round of all. They take words 1 and 2 of the counter's line for even
// epochs, 3 and 4 for odd ones: no PE can write those of barrier e+2 into
// a PE's line before that PE has left barrier e, since it cannot leave
// barrier e+1 before that PE entered it. On one node the two words are
// stored before the counter's release store, in the line the signal
// brings anyway; over the network one active message brings all three
// (sendRound).
func disseminate(routine string, members []int, me int, off0 uintptr, epoch, key uint64) bool {
	return disseminateKeys(routine, members, me, off0, epoch, key, key)
}

// disseminateKeys is disseminate with this PE's least and greatest keys
// lo and hi (a node leader's, folded from its node's PEs).
func disseminateKeys(routine string, members []int, me int, off0 uintptr, epoch, lo, hi uint64) bool {
	n := len(members)
	par := uintptr(epoch & 1)
	for k, dist := 0, 1; dist < n; k, dist = k+1, dist<<1 {
		off := off0 + uintptr(k)*counterStride
		keys := off + 8*(1+2*par)
		pe := members[(me+dist)%n]
		if q := jobPeer(routine, pe); q.base != nil {
			// The counter's release store publishes the keys: plain
			// stores (an atomic store is a locked exchange on amd64,
			// which waits for this CPU to own the peer's line).
			ucs.StoreRelease((*uint64)(unsafe.Add(q.base, keys)), lo)
			ucs.StoreRelease((*uint64)(unsafe.Add(q.base, keys+8)), hi)
			ucs.StoreRelease((*uint64)(unsafe.Add(q.base, off)), epoch)
		} else {
			sendRound(routine, pe, off, epoch, lo, hi)
		}
		waitGE((*uint64)(st.heap.At(int(off))), epoch)
		lo = min(lo, atomic.LoadUint64((*uint64)(st.heap.At(int(keys)))))
		hi = max(hi, atomic.LoadUint64((*uint64)(st.heap.At(int(keys+8)))))
	}
	return lo == hi
}

// amRound is the id of the active message that brings a round of a
// barrier or sync (disseminate) to a PE whose heap is not mapped here: the
// offset of the round's counter, the barrier's number and the two keys, in
// one message (roundMsgLen bytes of header). A put of the keys and an
// atomic on the counter took two, and the next Quiet waited for the peer
// to acknowledge them; an active message is complete once sent. shmem
// owns the ids of its worker.
const (
	amRound     = 0
	roundMsgLen = 32
)

// sendRound brings the round counter at heap offset off of the job's PE pe
// to epoch, with the keys lo and hi (see disseminate), in an amRound
// message.
func sendRound(routine string, pe int, off uintptr, epoch, lo, hi uint64) {
	b := wireBufs.Get().(*wireBuf)
	h := b.bytes(roundMsgLen)
	binary.LittleEndian.PutUint64(h[0:], uint64(off))
	binary.LittleEndian.PutUint64(h[8:], epoch)
	binary.LittleEndian.PutUint64(h[16:], lo)
	binary.LittleEndian.PutUint64(h[24:], hi)
	req, err := defaultCtx.remote(routine, pe).ep.AMSendNBX(amRound, h, nil, nil)
	defaultCtx.wait(routine, pe, req, err)
	wireBufs.Put(b)
}

// recvRound handles an amRound message, from the worker's Progress: it
// stores the keys, then the counter with a release store, as a PE that
// maps this heap does. A message that does not name a counter line of the
// heap is dropped.
func recvRound(_ any, header, _ []byte, _ *ucp.AMRecvParam) ucs.Status {
	if len(header) != roundMsgLen {
		return ucs.OK
	}
	off := binary.LittleEndian.Uint64(header)
	epoch := binary.LittleEndian.Uint64(header[8:])
	if off%counterStride != 0 || off > uint64(st.heapSize) || uint64(st.heapSize)-off < counterStride {
		return ucs.OK
	}
	keys := int(off) + 8*(1+2*int(epoch&1))
	atomic.StoreUint64((*uint64)(st.heap.At(keys)), binary.LittleEndian.Uint64(header[16:]))
	atomic.StoreUint64((*uint64)(st.heap.At(keys+8)), binary.LittleEndian.Uint64(header[24:]))
	ucs.StoreRelease((*uint64)(st.heap.At(int(off))), epoch)
	return ucs.OK
}

// waitGE waits until *p >= v, in a collective.
func waitGE(p *uint64, v uint64) {
	var w waiter
	for atomic.LoadUint64(p) < v {
		w.pause()
	}
	w.done()
}

// waiter paces a wait loop: it spins on the loads for a few microseconds
// (a peer running on another core answers within that), driving the
// worker's progress now and then, and then also yields the processor. On a
// node with more PEs than cores the peer that must answer may not be running
// at all, so there it yields almost at once.
//
// A wait that lasts also serves the stall checks and reports (stall.go):
// what names the routine of a point-to-point wait ("" in a collective),
// and every stallPolls pauses past the spin budget the waiter calls slow.
// on, when set, says what a point-to-point wait waits for (the variable
// and value, or the lock). A wait loop calls done when it ends.
type waiter struct {
	n        int
	what     string
	on       waitOn
	entry    *waitEntry    // the registered slow wait
	next     time.Duration // when to check for a mismatch next
	reported bool          // GOSHMEM_STALL_REPORT has reported it
}

// stallPolls is how many pauses past the spin budget a waiter makes
// between two looks at the clock: each of those pauses yields the
// processor or sleeps, so a clock reading among 16 costs nothing
// measurable. It is small because on a loaded node one yield can last
// milliseconds, and a wait must still be seen to last.
const stallPolls = 16

// Spin budgets, in loads, before a waiter starts yielding.
const (
	spinDedicated      = 2048
	spinOversubscribed = 8
)

func (w *waiter) pause() {
	w.n++
	if w.n%progressLoads == 0 {
		st.worker.Progress()
	}
	if w.n > st.spin {
		// The first pause past the budget starts the clock of the wait.
		if (w.n-st.spin)%stallPolls == 1 {
			w.slow()
		}
		if st.netPoll {
			// Progress reads the sockets (see ucp.Worker.Idle): it runs
			// at every pause, and Idle yields, or sleeps when nothing
			// came for long.
			if st.worker.Progress() == 0 {
				defaultCtx.idle()
				if st.spin == spinOversubscribed {
					// The peer that must answer may be waiting for
					// this core.
					ucs.YieldThread()
				}
			}
			return
		}
		ucs.YieldThread()
	}
}

// progressLoads is how many loads a wait makes between two calls of the
// worker's progress (waiter.pause).
const progressLoads = 256

// publishWorldSync lends the world team's barrier to the C library
// (internal/worldsync) when it is a dissemination over heaps this PE maps
// and nothing else needs Go (profiling counts the calls in Go): the C
// barrier then costs no call into Go. It connects the PEs this PE signals,
// as the first barrier would.
func publishWorldSync() {
	worldsync.Publish(nil)
	b := &st.barrier
	if profOn || b.central || b.leaders != nil {
		return
	}
	l := &worldsync.Layout{
		Number:     b.number,
		CollWord:   teamWorld.collWord(),
		BarrierAll: collKindOf["BarrierAll"],
		SyncAll:    collKindOf["SyncAll"],
		Spin:       st.spin,
		Wait:       waitGE,
		Mismatch:   teamWorld.collMismatch,
	}
	n := teamWorld.npes
	for k, dist := 0, 1; dist < n; k, dist = k+1, dist<<1 {
		q := jobPeer("Init", teamWorld.members[(teamWorld.me+dist)%n])
		if q.base == nil {
			return
		}
		off := b.off + uintptr(k)*counterStride
		l.Own = append(l.Own, st.heap.At(int(off)))
		l.Peer = append(l.Peer, unsafe.Add(q.base, off))
	}
	worldsync.Publish(l)
}
