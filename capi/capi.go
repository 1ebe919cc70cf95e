//go:build cgo && goshmem_capi

// Command capi is goshmem's C library: built with
//
//	go build -buildmode=c-shared -tags goshmem_capi -o libgoshmem.so ./capi
//	go build -buildmode=c-archive -tags goshmem_capi -o libgoshmem.a ./capi
//
// (capi/install.sh does both and installs the headers and goshcc), it
// gives C programs the OpenSHMEM 1.6 API of include/shmem.h on top of
// package shmem. The hot paths (puts, gets and atomics on PEs whose memory
// is mapped here) are C, in gsh.h, reading tables this file fills; the
// rest calls into the Go functions below. The typed routines come from the
// type table of gen (go generate).
package main

//go:generate go run ./gen

/*
#cgo CFLAGS: -I${SRCDIR}/include -O2
#include <stddef.h>
#include <stdint.h>
extern int gsh_npes, gsh_net_peers;
extern char **gsh_heap_peer;
extern char **gsh_data_peer;
extern uint64_t *gsh_static_words;
extern const size_t gsh_static_words_bytes;
size_t gsh_data_publish(void **p);
void gsh_data_attach(int pe, const void *b, size_t n);
void shmemx_data_bounds(void **base, size_t *size);
void gsh_tables_init(int me, int npes, void *heap, size_t heap_size);
void gsh_tables_free(void);
void gsh_wsync_init(int rounds, int spin, uint64_t *number, uint64_t *collword, uint64_t kind_barrier_all, uint64_t kind_sync_all);
void gsh_wsync_round(int k, uint64_t *own, uint64_t *peer);
void gsh_wsync_free(void);
int gsh_wsync_on(void);
void gsh_fatal_go(const char *fn, const char *msg);
typedef struct { int num_contexts; } gsh_team_config;
typedef struct { size_t total_ops; } gsh_session_config;
*/
import "C"

import (
	"fmt"
	"os"
	"sync"
	"unsafe"

	"github.com/goshmem/goshmem/internal/worldsync"
	"github.com/goshmem/goshmem/shmem"
)

func main() {}

// Handles: a C shmem_team_t or shmem_ctx_t is an index into these tables
// (0 is SHMEM_TEAM_INVALID / SHMEM_CTX_INVALID; the predefined ones come
// first), since C must not hold Go pointers.
var (
	handleMu sync.Mutex
	teams    = []*shmem.Team{nil, shmem.TeamWorld, shmem.TeamShared}
	ctxs     = []*shmem.Ctx{nil, shmem.CtxDefault}
)

func teamOf(h C.uintptr_t) *shmem.Team {
	handleMu.Lock()
	defer handleMu.Unlock()
	if uint64(h) < uint64(len(teams)) {
		return teams[h]
	}
	return nil
}

// ctxOf returns the context of handle h; C checked it (gsh_ctx_pe).
func ctxOf(h C.uintptr_t) *shmem.Ctx {
	if h == 1 {
		return shmem.CtxDefault
	}
	handleMu.Lock()
	defer handleMu.Unlock()
	if uint64(h) < uint64(len(ctxs)) && ctxs[h] != nil {
		return ctxs[h]
	}
	panic(fmt.Sprintf("context handle %#x is not a context (invalid, or destroyed)", uint64(h)))
}

// fatalIn is deferred by the Go routines C calls with fn, the routine the
// program called: package shmem panics on an argument it rejects, and a
// C program gets that as one line naming fn, then the job ends as
// gsh_fatal ends it, instead of a Go traceback.
func fatalIn(fn *C.char) {
	if r := recover(); r != nil {
		msg := C.CString(fmt.Sprint(r))
		C.gsh_fatal_go(fn, msg) // does not return
	}
}

// fatalInGo is fatalIn for the routines Go exports under their C name.
func fatalInGo(routine string) {
	if r := recover(); r != nil {
		C.gsh_fatal_go(C.CString(routine), C.CString(fmt.Sprint(r)))
	}
}

func newTeamHandle(t *shmem.Team) C.uintptr_t {
	if t == nil {
		return 0
	}
	handleMu.Lock()
	defer handleMu.Unlock()
	teams = append(teams, t)
	return C.uintptr_t(len(teams) - 1)
}

func report(routine string, err error) C.int {
	if err == nil {
		return 0
	}
	fmt.Fprintf(os.Stderr, "goshmem: PE %d: %s: %v\n", shmem.MyPE(), routine, err)
	return -1
}

//export goshmem_go_init
func goshmem_go_init(requested C.int, provided *C.int) C.int {
	if !shmem.QueryInitialized() {
		var p unsafe.Pointer
		if n := C.gsh_data_publish(&p); n > 0 {
			shmem.SetInitExtra(C.GoBytes(p, C.int(n)))
		}
		// The static data is the second symmetric region: every PE
		// reaches it through the transports, as it reaches the heap. The
		// library's own words (gsh_static_words) are the third.
		var size C.size_t
		if C.shmemx_data_bounds(&p, &size); size > 0 && C.gsh_static_words != nil {
			words := unsafe.Slice((*byte)(unsafe.Pointer(C.gsh_static_words)), C.gsh_static_words_bytes)
			if err := shmem.SetRegions(unsafe.Slice((*byte)(p), int(size)), words); err != nil {
				fmt.Fprintf(os.Stderr, "goshmem: shmem_init: static data: %v\n", err)
				return -1
			}
		}
	}
	var err error
	if provided == nil {
		err = shmem.Init()
	} else {
		var lvl shmem.ThreadLevel
		lvl, err = shmem.InitThread(shmem.ThreadLevel(requested))
		*provided = C.int(lvl)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "goshmem: shmem_init: %v\n", err)
		return -1
	}
	if C.gsh_npes == 0 {
		base, size := shmem.HeapBounds()
		C.gsh_tables_init(C.int(shmem.MyPE()), C.int(shmem.NPEs()), base, C.size_t(size))
	}
	lendWorldSync()
	C.gsh_net_peers = C.int(b2i(shmem.NetworkPeers()))
	return 0
}

// goshmem_go_progress drives this PE's communication once
// (shmem.Progress), for the C waiting loops and failed tests
// (gsh_wait_pause, gsh_tested).
//
//export goshmem_go_progress
func goshmem_go_progress() { shmem.Progress() }

//export goshmem_go_finalize
func goshmem_go_finalize() {
	shmem.Finalize()
	if !shmem.QueryInitialized() {
		C.gsh_net_peers = 0
		C.gsh_wsync_free()
		C.gsh_tables_free()
	}
}

// goshmem_go_connect fills PE pe's entries of the tables: its heap mapped
// here (connecting the PE, as shmem.Ptr does), and, where the heap is
// mapped, its static data: the transports UCX_TLS selects decide both, so
// that a PE whose heap only the transports reach gets its static data
// through them too.
//
//export goshmem_go_connect
func goshmem_go_connect(pe C.int) {
	base, _ := shmem.HeapBounds()
	n := shmem.NPEs()
	p := shmem.Ptr((*byte)(base), int(pe))
	if p == nil {
		return
	}
	unsafe.Slice(C.gsh_heap_peer, n)[pe] = (*C.char)(unsafe.Pointer(p))
	if x := shmem.PeerExtra(int(pe)); len(x) > 0 {
		C.gsh_data_attach(pe, unsafe.Pointer(&x[0]), C.size_t(len(x)))
	}
}

// goshmem_go_addr_accessible reports whether the static data at p (not
// mapped here) is reachable on PE pe: whether pe registered the same.
//
//export goshmem_go_addr_accessible
func goshmem_go_addr_accessible(p unsafe.Pointer, pe C.int) C.int {
	return b2i(shmem.AddrAccessible((*byte)(p), int(pe)))
}

func bytesAt(p unsafe.Pointer, n C.size_t) []byte { return unsafe.Slice((*byte)(p), int(n)) }

// The kinds of goshmem_go_rma (GSH_RMA_* in gsh.h).
const (
	rmaPut = iota
	rmaGet
	rmaPutNBI
	rmaGetNBI
)

//export goshmem_go_rma
func goshmem_go_rma(ctx C.uintptr_t, kind C.int, dest, source unsafe.Pointer, n C.size_t, pe C.int, fn *C.char) {
	defer fatalIn(fn)
	if n == 0 {
		return
	}
	c, d, s := ctxOf(ctx), bytesAt(dest, n), bytesAt(source, n)
	switch kind {
	case rmaPut:
		shmem.CtxPutMem(c, d, s, int(pe))
	case rmaGet:
		shmem.CtxGetMem(c, d, s, int(pe))
	case rmaPutNBI:
		shmem.CtxPutMemNBI(c, d, s, int(pe))
	case rmaGetNBI:
		shmem.CtxGetMemNBI(c, d, s, int(pe))
	}
}

func strided[T shmem.RMA](c *shmem.Ctx, get bool, dest, source unsafe.Pointer, dst, sst, bsize, nblocks, pe int) {
	span := func(stride int) int { return (nblocks-1)*stride + bsize }
	d, s := unsafe.Slice((*T)(dest), span(dst)), unsafe.Slice((*T)(source), span(sst))
	if get {
		shmem.CtxIBGet(c, d, s, dst, sst, bsize, nblocks, pe)
	} else {
		shmem.CtxIBPut(c, d, s, dst, sst, bsize, nblocks, pe)
	}
}

//export goshmem_go_strided
func goshmem_go_strided(ctx C.uintptr_t, get C.int, dest, source unsafe.Pointer, dst, sst C.ptrdiff_t, bsize, nblocks C.size_t, esize, pe C.int, fn *C.char) {
	defer fatalIn(fn)
	c, g := ctxOf(ctx), get != 0
	a := []int{int(dst), int(sst), int(bsize), int(nblocks), int(pe)}
	switch esize {
	case 1:
		strided[int8](c, g, dest, source, a[0], a[1], a[2], a[3], a[4])
	case 2:
		strided[int16](c, g, dest, source, a[0], a[1], a[2], a[3], a[4])
	case 4:
		strided[int32](c, g, dest, source, a[0], a[1], a[2], a[3], a[4])
	case 8:
		strided[int64](c, g, dest, source, a[0], a[1], a[2], a[3], a[4])
	case 16:
		strided[complex128](c, g, dest, source, a[0], a[1], a[2], a[3], a[4])
	default:
		panic(fmt.Sprintf("goshmem: strided transfer of %d-byte elements", esize))
	}
}

//export goshmem_go_put_signal
func goshmem_go_put_signal(ctx C.uintptr_t, dest, source unsafe.Pointer, n C.size_t, sig *C.uint64_t, signal C.uint64_t, op, nbi, pe C.int, fn *C.char) {
	defer fatalIn(fn)
	c, d, s := ctxOf(ctx), bytesAt(dest, n), bytesAt(source, n)
	sp := (*uint64)(unsafe.Pointer(sig))
	if nbi != 0 {
		shmem.CtxPutMemSignalNBI(c, d, s, sp, uint64(signal), shmem.SignalOp(op), int(pe))
	} else {
		shmem.CtxPutMemSignal(c, d, s, sp, uint64(signal), shmem.SignalOp(op), int(pe))
	}
}

//export goshmem_go_quiet
func goshmem_go_quiet(ctx C.uintptr_t, fn *C.char) {
	defer fatalIn(fn)
	ctxOf(ctx).Quiet()
}

// The atomic operations (GSH_AMO_* in gsh.h, amoOps in gen).
const (
	amoFetch = iota
	amoSet
	amoSwap
	amoCompareSwap
	amoFetchInc
	amoInc
	amoFetchAdd
	amoAdd
	amoFetchAnd
	amoAnd
	amoFetchOr
	amoOr
	amoFetchXor
	amoXor
)

func amo[T uint32 | uint64](c *shmem.Ctx, op int, p *T, v, cond T, pe int) T {
	switch op {
	case amoFetch:
		return shmem.CtxAtomicFetch(c, p, pe)
	case amoSet:
		shmem.CtxAtomicSet(c, p, v, pe)
	case amoSwap:
		return shmem.CtxAtomicSwap(c, p, v, pe)
	case amoCompareSwap:
		return shmem.CtxAtomicCompareSwap(c, p, cond, v, pe)
	case amoFetchInc:
		return shmem.CtxAtomicFetchInc(c, p, pe)
	case amoInc:
		shmem.CtxAtomicInc(c, p, pe)
	case amoFetchAdd:
		return shmem.CtxAtomicFetchAdd(c, p, v, pe)
	case amoAdd:
		shmem.CtxAtomicAdd(c, p, v, pe)
	case amoFetchAnd:
		return shmem.CtxAtomicFetchAnd(c, p, v, pe)
	case amoAnd:
		shmem.CtxAtomicAnd(c, p, v, pe)
	case amoFetchOr:
		return shmem.CtxAtomicFetchOr(c, p, v, pe)
	case amoOr:
		shmem.CtxAtomicOr(c, p, v, pe)
	case amoFetchXor:
		return shmem.CtxAtomicFetchXor(c, p, v, pe)
	case amoXor:
		shmem.CtxAtomicXor(c, p, v, pe)
	}
	return 0
}

func amoNBI[T uint32 | uint64](c *shmem.Ctx, op int, fetch, p *T, v, cond T, pe int) {
	switch op {
	case amoFetch:
		shmem.CtxAtomicFetchNBI(c, fetch, p, pe)
	case amoSwap:
		shmem.CtxAtomicSwapNBI(c, fetch, p, v, pe)
	case amoCompareSwap:
		shmem.CtxAtomicCompareSwapNBI(c, fetch, p, cond, v, pe)
	case amoFetchInc:
		shmem.CtxAtomicFetchIncNBI(c, fetch, p, pe)
	case amoFetchAdd:
		shmem.CtxAtomicFetchAddNBI(c, fetch, p, v, pe)
	case amoFetchAnd:
		shmem.CtxAtomicFetchAndNBI(c, fetch, p, v, pe)
	case amoFetchOr:
		shmem.CtxAtomicFetchOrNBI(c, fetch, p, v, pe)
	case amoFetchXor:
		shmem.CtxAtomicFetchXorNBI(c, fetch, p, v, pe)
	}
}

//export goshmem_go_amo
func goshmem_go_amo(ctx C.uintptr_t, op C.int, dest unsafe.Pointer, v, cond C.uint64_t, size, pe C.int, fn *C.char) C.uint64_t {
	defer fatalIn(fn)
	c := ctxOf(ctx)
	if size == 4 {
		return C.uint64_t(amo(c, int(op), (*uint32)(dest), uint32(v), uint32(cond), int(pe)))
	}
	return C.uint64_t(amo(c, int(op), (*uint64)(dest), uint64(v), uint64(cond), int(pe)))
}

//export goshmem_go_amo_nbi
func goshmem_go_amo_nbi(ctx C.uintptr_t, op C.int, fetch, dest unsafe.Pointer, v, cond C.uint64_t, size, pe C.int, fn *C.char) {
	defer fatalIn(fn)
	c := ctxOf(ctx)
	if size == 4 {
		amoNBI(c, int(op), (*uint32)(fetch), (*uint32)(dest), uint32(v), uint32(cond), int(pe))
		return
	}
	amoNBI(c, int(op), (*uint64)(fetch), (*uint64)(dest), uint64(v), uint64(cond), int(pe))
}

//export goshmem_go_reduce
func goshmem_go_reduce(team C.uintptr_t, op, ty C.int, dest, source unsafe.Pointer, n C.size_t, fn *C.char) C.int {
	defer fatalIn(fn)
	t := teamOf(team)
	if t == nil {
		return report(C.GoString(fn), fmt.Errorf("invalid team: %w", shmem.ErrInvalidTeam))
	}
	err, ok := reduceTyped(t, int(op), int(ty), dest, source, int(n))
	if !ok {
		return -2
	}
	return report(C.GoString(fn), err)
}

// heapTail returns the bytes from p to the end of the heap: the longest
// slice a collective's destination there may be.
func heapTail(p unsafe.Pointer) int {
	base, size := shmem.HeapBounds()
	off := uintptr(p) - uintptr(base)
	if off >= uintptr(size) {
		return 1 // not in the heap: shmem reports it
	}
	return size - int(off)
}

func alltoalls[T shmem.RMA](t *shmem.Team, dest, source unsafe.Pointer, dst, sst, n, esize int) error {
	d := unsafe.Slice((*T)(dest), heapTail(dest)/esize)
	s := unsafe.Slice((*T)(source), heapTail(source)/esize)
	return shmem.Alltoalls(t, d, s, dst, sst, n)
}

// The kinds of goshmem_go_coll (GSH_COLL_* in gsh.h).
const (
	collBroadcast = iota
	collCollect
	collFCollect
	collAlltoall
	collAlltoalls
)

//export goshmem_go_coll
func goshmem_go_coll(team C.uintptr_t, kind C.int, dest, source unsafe.Pointer, nbytes C.size_t, a, b C.ptrdiff_t, esize C.int, fn *C.char) C.int {
	defer fatalIn(fn)
	t := teamOf(team)
	if t == nil {
		return report(C.GoString(fn), fmt.Errorf("invalid team: %w", shmem.ErrInvalidTeam))
	}
	n := int(nbytes)
	// A collective of no data may pass NULL arrays.
	d := func(k int) []byte {
		if dest == nil {
			return nil
		}
		return unsafe.Slice((*byte)(dest), k)
	}
	s := func(k int) []byte {
		if source == nil {
			return nil
		}
		return unsafe.Slice((*byte)(source), k)
	}
	var err error
	switch kind {
	case collBroadcast:
		if n == 0 {
			return 0
		}
		err = shmem.BroadcastMem(t, d(n), s(n), int(a))
	case collCollect:
		err = shmem.CollectMem(t, d(heapTail(dest)), s(n))
	case collFCollect:
		err = shmem.FCollectMem(t, d(n*t.NPEs()), s(n))
	case collAlltoall:
		err = shmem.AlltoallMem(t, d(n*t.NPEs()), s(n*t.NPEs()))
	case collAlltoalls:
		e := int(esize)
		switch e {
		case 1:
			err = alltoalls[int8](t, dest, source, int(a), int(b), n/e, e)
		case 2:
			err = alltoalls[int16](t, dest, source, int(a), int(b), n/e, e)
		case 4:
			err = alltoalls[int32](t, dest, source, int(a), int(b), n/e, e)
		case 8:
			err = alltoalls[int64](t, dest, source, int(a), int(b), n/e, e)
		default:
			err = alltoalls[complex128](t, dest, source, int(a), int(b), n/e, e)
		}
	}
	return report(C.GoString(fn), err)
}

// goshmem_go_global_exit tells the launcher that the job ends with status;
// shmem_global_exit (core.c) then exits through C.
//
//export goshmem_go_global_exit
func goshmem_go_global_exit(status C.int) { shmem.GlobalExitNotify(int(status)) }

//export pshmem_pe_accessible
func pshmem_pe_accessible(pe C.int) C.int { return b2i(shmem.PEAccessible(int(pe))) }

//export goshmem_go_pcontrol
func goshmem_go_pcontrol(level C.int) { shmem.Pcontrol(int(level)) }

func b2i(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

//export goshmem_go_barrier_all
func goshmem_go_barrier_all() {
	defer fatalInGo("shmem_barrier_all")
	shmem.BarrierAll()
}

//export goshmem_go_sync_all
func goshmem_go_sync_all() {
	defer fatalInGo("shmem_sync_all")
	shmem.SyncAll()
}

// lendWorldSync gives the C barrier (gsh_wsync in core.c) the world
// barrier's layout, when package shmem lends it (internal/worldsync).
func lendWorldSync() {
	l := worldsync.Current()
	if l == nil || C.gsh_wsync_on() != 0 {
		return
	}
	C.gsh_wsync_init(C.int(len(l.Own)), C.int(l.Spin), (*C.uint64_t)(unsafe.Pointer(l.Number)),
		(*C.uint64_t)(unsafe.Pointer(l.CollWord)), C.uint64_t(l.BarrierAll), C.uint64_t(l.SyncAll))
	for k := range l.Own {
		C.gsh_wsync_round(C.int(k), (*C.uint64_t)(l.Own[k]), (*C.uint64_t)(l.Peer[k]))
	}
}

//export goshmem_go_world_wait
func goshmem_go_world_wait(p *C.uint64_t, v C.uint64_t) {
	defer fatalInGo("shmem_barrier_all")
	worldsync.Current().Wait((*uint64)(unsafe.Pointer(p)), uint64(v))
}

//export goshmem_go_world_mismatch
func goshmem_go_world_mismatch(sync C.int) {
	routine, name := "BarrierAll", "shmem_barrier_all"
	if sync != 0 {
		routine, name = "SyncAll", "shmem_sync_all"
	}
	defer fatalInGo(name)
	worldsync.Current().Mismatch(routine)
}

//export pshmem_team_sync
func pshmem_team_sync(team C.uintptr_t) C.int {
	defer fatalInGo("shmem_team_sync")
	t := teamOf(team)
	if t == nil {
		return report("shmem_team_sync", fmt.Errorf("invalid team: %w", shmem.ErrInvalidTeam))
	}
	t.Sync()
	return 0
}

// Memory management.

func allocated(routine string, s []byte, err error) unsafe.Pointer {
	if err != nil {
		report(routine, err)
		return nil
	}
	if len(s) == 0 {
		return nil
	}
	return unsafe.Pointer(&s[0])
}

//export pshmem_malloc
func pshmem_malloc(size C.size_t) unsafe.Pointer {
	defer fatalInGo("shmem_malloc")
	s, err := shmem.Malloc[byte](int(size))
	return allocated("shmem_malloc", s, err)
}

//export pshmem_calloc
func pshmem_calloc(count, size C.size_t) unsafe.Pointer {
	defer fatalInGo("shmem_calloc")
	if size != 0 && count > C.size_t(^uint(0)>>1)/size {
		report("shmem_calloc", fmt.Errorf("%d elements of %d bytes overflow: %w", count, size, shmem.ErrHeapExhausted))
		return nil
	}
	s, err := shmem.Calloc[byte](int(count * size))
	return allocated("shmem_calloc", s, err)
}

//export pshmem_align
func pshmem_align(alignment, size C.size_t) unsafe.Pointer {
	defer fatalInGo("shmem_align")
	s, err := shmem.Align[byte](int(alignment), int(size))
	return allocated("shmem_align", s, err)
}

// pshmem_malloc_with_hints passes package shmem the hints it knows and
// drops the others: in C a hint is advice that an implementation may not
// act on, and the allocation is then shmem_malloc's (package shmem, whose
// callers name hints by constant, rejects unknown ones instead).
//
//export pshmem_malloc_with_hints
func pshmem_malloc_with_hints(size C.size_t, hints C.long) unsafe.Pointer {
	defer fatalInGo("shmem_malloc_with_hints")
	known := shmem.MallocAtomicsRemote | shmem.MallocSignalRemote
	s, err := shmem.MallocWithHints[byte](int(size), shmem.MallocHints(hints)&known)
	return allocated("shmem_malloc_with_hints", s, err)
}

//export pshmem_realloc
func pshmem_realloc(p unsafe.Pointer, size C.size_t) unsafe.Pointer {
	defer fatalInGo("shmem_realloc")
	var old []byte
	if p != nil {
		old = unsafe.Slice((*byte)(p), 1)
	}
	s, err := shmem.Realloc(old, int(size))
	return allocated("shmem_realloc", s, err)
}

//export pshmem_free
func pshmem_free(p unsafe.Pointer) {
	defer fatalInGo("shmem_free")
	if p != nil {
		shmem.Free(unsafe.Slice((*byte)(p), 1))
	}
}

// Teams.

//export pshmem_team_my_pe
func pshmem_team_my_pe(team C.uintptr_t) C.int {
	if t := teamOf(team); t != nil {
		return C.int(t.MyPE())
	}
	return -1
}

//export pshmem_team_n_pes
func pshmem_team_n_pes(team C.uintptr_t) C.int {
	if t := teamOf(team); t != nil {
		return C.int(t.NPEs())
	}
	return -1
}

//export pshmem_team_get_config
func pshmem_team_get_config(team C.uintptr_t, mask C.long, config *C.gsh_team_config) C.int {
	defer fatalInGo("shmem_team_get_config")
	t := teamOf(team)
	if t == nil {
		return -1
	}
	cfg, err := t.GetConfig(shmem.TeamConfigMask(mask))
	if err != nil {
		return report("shmem_team_get_config", err)
	}
	if mask&1 != 0 {
		config.num_contexts = C.int(cfg.NumContexts)
	}
	return 0
}

//export pshmem_team_translate_pe
func pshmem_team_translate_pe(src C.uintptr_t, pe C.int, dst C.uintptr_t) C.int {
	s, d := teamOf(src), teamOf(dst)
	if s == nil || d == nil {
		return -1
	}
	return C.int(shmem.TeamTranslatePE(s, int(pe), d))
}

func teamConfig(c *C.gsh_team_config, mask C.long) (shmem.TeamConfig, shmem.TeamConfigMask) {
	if c == nil {
		return shmem.TeamConfig{}, 0
	}
	return shmem.TeamConfig{NumContexts: int(c.num_contexts)}, shmem.TeamConfigMask(mask)
}

//export pshmem_team_split_strided
func pshmem_team_split_strided(parent C.uintptr_t, start, stride, size C.int, config *C.gsh_team_config, mask C.long, newTeam *C.uintptr_t) C.int {
	defer fatalInGo("shmem_team_split_strided")
	*newTeam = 0
	cfg, m := teamConfig(config, mask)
	t, err := shmem.TeamSplitStrided(teamOf(parent), int(start), int(stride), int(size), cfg, m)
	if err != nil {
		return report("shmem_team_split_strided", err)
	}
	*newTeam = newTeamHandle(t)
	return 0
}

//export pshmem_team_split_2d
func pshmem_team_split_2d(parent C.uintptr_t, xrange C.int, xconfig *C.gsh_team_config, xmask C.long, xteam *C.uintptr_t, yconfig *C.gsh_team_config, ymask C.long, yteam *C.uintptr_t) C.int {
	defer fatalInGo("shmem_team_split_2d")
	*xteam, *yteam = 0, 0
	xc, xm := teamConfig(xconfig, xmask)
	yc, ym := teamConfig(yconfig, ymask)
	x, y, err := shmem.TeamSplit2D(teamOf(parent), int(xrange), xc, xm, yc, ym)
	if err != nil {
		return report("shmem_team_split_2d", err)
	}
	*xteam, *yteam = newTeamHandle(x), newTeamHandle(y)
	return 0
}

//export pshmem_team_destroy
func pshmem_team_destroy(team C.uintptr_t) {
	defer fatalInGo("shmem_team_destroy")
	t := teamOf(team)
	if t == nil || team <= 2 {
		return
	}
	t.Destroy()
	handleMu.Lock()
	teams[team] = nil
	handleMu.Unlock()
}

// Contexts: C keeps each context's team map (struct goshmem_ctx) and
// calls these with Go's handle.

func newCtxHandle(c *shmem.Ctx) C.uintptr_t {
	handleMu.Lock()
	defer handleMu.Unlock()
	ctxs = append(ctxs, c)
	return C.uintptr_t(len(ctxs) - 1)
}

// goshmem_go_ctx_create makes a context on team (0: shmem_ctx_create's).
//
//export goshmem_go_ctx_create
func goshmem_go_ctx_create(team C.uintptr_t, options C.long, out *C.uintptr_t, fn *C.char) C.int {
	defer fatalIn(fn)
	var c *shmem.Ctx
	var err error
	if team == 0 {
		c, err = shmem.CtxCreate(shmem.CtxOptions(options))
	} else if t := teamOf(team); t == nil {
		err = fmt.Errorf("invalid team: %w", shmem.ErrInvalidTeam)
	} else {
		c, err = t.CreateCtx(shmem.CtxOptions(options))
	}
	if err != nil {
		return report(C.GoString(fn), err)
	}
	*out = newCtxHandle(c)
	return 0
}

//export goshmem_go_ctx_destroy
func goshmem_go_ctx_destroy(ctx C.uintptr_t, fn *C.char) {
	defer fatalIn(fn)
	ctxOf(ctx).Destroy()
	handleMu.Lock()
	ctxs[ctx] = nil
	handleMu.Unlock()
}

//export goshmem_go_ctx_get_team
func goshmem_go_ctx_get_team(ctx C.uintptr_t, team *C.uintptr_t) C.int {
	t := ctxOf(ctx).Team()
	handleMu.Lock()
	defer handleMu.Unlock()
	for i, x := range teams {
		if x == t && t != nil {
			*team = C.uintptr_t(i)
			return 0
		}
	}
	return -1
}

//export goshmem_go_session_start
func goshmem_go_session_start(ctx C.uintptr_t, options C.long, config *C.gsh_session_config, mask C.long, fn *C.char) {
	defer fatalIn(fn)
	var cfg shmem.SessionConfig
	if config != nil {
		cfg.TotalOps = int(config.total_ops)
	}
	ctxOf(ctx).SessionStart(shmem.SessionOptions(options), cfg, shmem.SessionConfigMask(mask))
}

//export goshmem_go_session_stop
func goshmem_go_session_stop(ctx C.uintptr_t, fn *C.char) {
	defer fatalIn(fn)
	ctxOf(ctx).SessionStop()
}
