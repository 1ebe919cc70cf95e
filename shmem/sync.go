package shmem

import (
	"fmt"
	"github.com/goshmem/goshmem/ucs"
	"math"
	"math/bits"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/symheap"
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
	st.barrier.sync()
}

// SyncAll waits until every PE has called it, without completing
// outstanding operations (shmem_sync_all).
func SyncAll() {
	mustInit("SyncAll")
	st.barrier.sync()
}

// barrierState is a dissemination barrier over the symmetric heap: in round
// k of a barrier, PE i brings the round-k counter of PE (i+2^k) mod N to the
// barrier's number, and waits until its own round-k counter reaches it.
// Counters only grow, so back-to-back barriers need no reset: a signal for
// the next barrier that arrives early only satisfies a wait that it would
// satisfy anyway. PE i is the only writer of that counter, so in a mapped
// heap it stores the number with a release store (an atomic add would
// stall it until its CPU owned the peer's cache line: a third of a 2-PE
// barrier here); over the network it adds one.
//
// On a node with more PEs than cores, where every wait may need a peer that
// is not running, a centralized barrier waits once instead of log2(N) times:
// each PE adds one to an arrival counter on PE 0, and the last to arrive
// publishes the barrier's number in a release word there that the others
// wait on.
type barrierState struct {
	off     uintptr // heap offset of the counters, one cache line each
	rounds  int
	epoch   uint64
	central bool
}

const counterStride = symheap.MinAlign

// barrierLines is the number of counter lines of the barrier: one per round
// of the dissemination, then the arrival counter and release word.
func barrierLines() int { return bits.Len(uint(st.npes-1)) + 2 }

func (b *barrierState) init() error {
	lines := barrierLines()
	b.rounds = lines - 2
	off, err := st.heap.Alloc(lines*counterStride, counterStride)
	if err != nil {
		return fmt.Errorf("barrier counters: %w", err)
	}
	clear(unsafe.Slice((*byte)(st.heap.At(off)), lines*counterStride))
	b.off = uintptr(off)
	// The central barrier's minimum words start above every key.
	for par := range 2 {
		*b.keyWord(b.rounds+1, par, 0) = math.MaxUint64
	}
	return nil
}

// A checked barrier (syncChecked) carries the least and the greatest key
// that the PEs passed, in the cache line of each counter after the counter
// word: at words 1 and 2 for barriers of even number, 3 and 4 for odd
// ones. Two sets suffice: no PE can write the words of barrier e+2 into a
// PE's line before that PE has left barrier e, since it cannot leave
// barrier e+1 before that PE has entered it.

// keyWord returns this PE's word of the key minimum (i 0) or maximum (i 1)
// of barriers of parity par in counter line line.
func (b *barrierState) keyWord(line, par, i int) *uint64 {
	return (*uint64)(st.heap.At(int(b.off) + line*counterStride + 8*(1+2*par+i)))
}

// chooseCentral decides, the same way on every PE, whether barriers are
// centralized: only on an oversubscribed node where every PE maps every
// other's heap, which every PE reports in a bootstrap allgather (transports
// may differ among PEs, so no PE can tell alone).
func (b *barrierState) chooseCentral() error {
	mapped := byte(1)
	for i := range st.peers {
		if st.peers[i].base == nil {
			mapped = 0
		}
	}
	all, err := st.member.Allgather([]byte{mapped})
	if err != nil {
		return fmt.Errorf("barrier setup: %w", err)
	}
	b.central = st.spin == spinOversubscribed
	for _, m := range all {
		if len(m) != 1 || m[0] != 1 {
			b.central = false
		}
	}
	return nil
}

// syncCentral is the centralized barrier; with checked, every PE also
// folds key into the minimum and maximum words of PE 0's release line, and
// it returns whether they are equal after the barrier. The last PE to
// arrive resets the words of the next barrier (every PE has read those of
// the previous one: it arrived at this one) before it releases the others.
func (b *barrierState) syncCentral(checked bool, key uint64) bool {
	root := st.peers[0].base
	line := func(l int) unsafe.Pointer { return unsafe.Add(root, b.off+uintptr(l*counterStride)) }
	arrive := (*uint64)(line(b.rounds))
	release := (*uint64)(line(b.rounds + 1))
	par := int(b.epoch & 1)
	lo := (*uint64)(unsafe.Add(line(b.rounds+1), 8*(1+2*par)))
	hi := (*uint64)(unsafe.Add(line(b.rounds+1), 8*(2+2*par)))
	if checked {
		foldMin(lo, key)
		foldMax(hi, key)
	}
	if atomic.AddUint64(arrive, 1) == b.epoch*uint64(st.npes) {
		atomic.StoreUint64((*uint64)(unsafe.Add(line(b.rounds+1), 8*(1+2*(par^1)))), math.MaxUint64)
		atomic.StoreUint64((*uint64)(unsafe.Add(line(b.rounds+1), 8*(2+2*(par^1)))), 0)
		atomic.StoreUint64(release, b.epoch)
	} else {
		waitGE(release, b.epoch)
	}
	return !checked || atomic.LoadUint64(lo) == atomic.LoadUint64(hi)
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

func (b *barrierState) sync() {
	b.epoch++
	if b.central {
		b.syncCentral(false, 0)
		return
	}
	for k, dist := 0, 1; k < b.rounds; k, dist = k+1, dist<<1 {
		off := b.off + uintptr(k*counterStride)
		signalRound("BarrierAll", (st.me+dist)%st.npes, off, b.epoch)
		waitGE((*uint64)(st.heap.At(int(off))), b.epoch)
	}
}

// syncChecked is sync that also tells whether every PE passed the same
// key: the least and the greatest key travel with the barrier's signals,
// each PE folding in what it receives (in round k of the dissemination a
// PE has heard of 2^(k+1) PEs; after the last, of all), so the check costs
// two words per signal and no extra round. On one node they are stored
// before the release store of the counter; over the network they are put
// before the counter's add, behind a fence.
func (b *barrierState) syncChecked(routine string, key uint64) bool {
	b.epoch++
	if b.central {
		return b.syncCentral(true, key)
	}
	par := int(b.epoch & 1)
	lo, hi := key, key
	for k, dist := 0, 1; k < b.rounds; k, dist = k+1, dist<<1 {
		off := b.off + uintptr(k*counterStride)
		keys := off + uintptr(8*(1+2*par))
		pe := (st.me + dist) % st.npes
		if q := &st.peers[pe]; q.base != nil {
			atomic.StoreUint64((*uint64)(unsafe.Add(q.base, keys)), lo)
			atomic.StoreUint64((*uint64)(unsafe.Add(q.base, keys+8)), hi)
			ucs.StoreRelease((*uint64)(unsafe.Add(q.base, off)), b.epoch)
		} else {
			v := [2]uint64{lo, hi}
			defaultCtx.putSignalSlow(routine, pe, keys, unsafe.Slice((*byte)(unsafe.Pointer(&v)), 16), off, amoAdd, 1, false)
		}
		waitGE((*uint64)(st.heap.At(int(off))), b.epoch)
		lo = min(lo, atomic.LoadUint64(b.keyWord(k, par, 0)))
		hi = max(hi, atomic.LoadUint64(b.keyWord(k, par, 1)))
	}
	return lo == hi
}

// signalRound brings the round counter at heap offset off of the job's PE
// pe to epoch, in a dissemination barrier or sync whose only writer of that
// counter is this PE: a release store into a mapped heap, an add of one
// over the network. No flush: the peer waits for the signal, and the
// operations before a barrier were completed by its Quiet already.
func signalRound(routine string, pe int, off uintptr, epoch uint64) {
	if q := &st.peers[pe]; q.base != nil {
		ucs.StoreRelease((*uint64)(unsafe.Add(q.base, off)), epoch)
		return
	}
	defaultCtx.amoSlow(routine, pe, off, 8, amoAdd, 1, 0, amoPost, nil)
}

// waitGE waits until *p >= v.
func waitGE(p *uint64, v uint64) {
	var w waiter
	for atomic.LoadUint64(p) < v {
		w.pause()
	}
}

// waiter paces a wait loop: it spins on the loads for a few microseconds
// (a peer running on another core answers within that), driving the
// worker's progress now and then, and then also yields the processor. On a
// node with more PEs than cores the peer that must answer may not be running
// at all, so there it yields almost at once.
type waiter struct{ n int }

// Spin budgets, in loads, before a waiter starts yielding.
const (
	spinDedicated      = 2048
	spinOversubscribed = 8
)

func (w *waiter) pause() {
	w.n++
	if w.n%256 == 0 {
		st.worker.Progress()
	}
	if w.n > st.spin {
		if st.netPoll {
			// Progress reads the sockets (see ucp.Worker.Idle): it runs
			// at every pause, and Idle yields, or sleeps when nothing
			// came for long.
			if st.worker.Progress() == 0 {
				defaultCtx.idle()
			}
			return
		}
		unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
	}
}
