package shmem

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/goshmem/goshmem/internal/version"
	"github.com/goshmem/goshmem/ucs"
)

// Hangs that explain themselves.
//
// Every collective call on a team counts: the PE publishes, in a word of
// the team's slot, the number of its latest collective on the team and its
// kind (collWord). A PE whose wait in the library lasts (stallCheckAfter
// and then ever more rarely) reads the words of the teams it is in a
// collective of: a member in the same call number but another routine is
// a mismatch, a programming error that would hang the job forever. The PE
// then reports it in one message that names every member's call (waiting a
// little for the members that have not reached the call number yet), and
// panics: the first report to end the job is complete by itself, whichever
// PE makes it.
//
// Stall reports say where a PE waits: the routine, the team, and the PEs
// it waits for (those of the team that have not reached its call). A PE
// prints one on its standard error when it gets SIGUSR2 (goshmem-run sends
// it to every PE when it gets SIGQUIT), and, with GOSHMEM_STALL_REPORT set
// to a duration (goshmem-run --stall-report), once for every wait that
// lasts longer than that.

// stallCheckAfter is how long a wait lasts before the PE first looks for a
// collective mismatch (times the node's PEs per core, where it has more PEs
// than cores: see firstMismatchCheck); it then looks again after twice as
// long, and so on, up to stallCheckMax apart.
const (
	stallCheckAfter = 500 * time.Millisecond
	stallCheckMax   = 30 * time.Second
	// mismatchGrace is how long a PE that found a mismatch waits for the
	// members of the team that have not reached its call number (times
	// the node's PEs per core), so that its report names their calls too.
	mismatchGrace = 2 * time.Second
)

// collKinds numbers the collective routines for the team words; a
// routine missing here is numbered after them.
var collKinds = []string{"", "BarrierAll", "SyncAll", "(*Team).Sync", "(*Team).Destroy",
	"Broadcast", "BroadcastMem", "Collect", "CollectMem", "FCollect", "FCollectMem",
	"Alltoall", "AlltoallMem", "Alltoalls", "AlltoallsMem",
	"SumReduce", "ProdReduce", "MinReduce", "MaxReduce", "AndReduce", "OrReduce", "XorReduce",
	"SumInscan", "SumExscan", "TeamSplitStrided", "TeamSplit2D",
	"Malloc", "Calloc", "Align", "MallocWithHints", "Realloc", "Free"}

var collKindOf = func() map[string]uint64 {
	m := make(map[string]uint64, len(collKinds))
	for i, name := range collKinds {
		m[name] = uint64(i)
	}
	return m
}()

func collKindName(k uint64) string {
	if k < uint64(len(collKinds)) && k > 0 {
		return collKinds[k]
	}
	return "a collective"
}

// sameCollKind reports whether two PEs whose collective words hold kinds a
// and b, in the same call number, make the same collective: the same
// routine, or two allocation routines, whose differences the allocation's
// checked barrier reports as an error (ErrAllocMismatch).
func sameCollKind(a, b uint64) bool {
	alloc := func(k uint64) bool { return k >= allocKinds[0] && k <= allocKinds[1] }
	return a == b || alloc(a) && alloc(b)
}

// allocKinds are the first and last kinds of the allocation routines.
var allocKinds = [2]uint64{collKindOf["Malloc"], collKindOf["Free"]}

// collKey is the key of a sync of a team whose PEs' collective words are
// w: the same for two words of the same collective (sameCollKind).
func collKey(w uint64) uint64 {
	if k := w >> 1 & 0xff; k > allocKinds[0] && k <= allocKinds[1] {
		w = w&^(0xff<<1) | allocKinds[0]<<1
	}
	return w
}

// teamsBySlot are this PE's teams, by slot, for the stall checks and
// reports, which look at the collective words of every team.
var teamsBySlot [MaxTeams]atomic.Pointer[Team]

// beginColl counts a collective call of routine on t and publishes it in
// the team's collective word: call number << 9 | kind << 1 | 1 while the
// PE is in it. endColl clears the last bit. A collective that fails its
// checks before it communicates does not count. Plain release stores: the
// PE is the only writer of its word, and a barrier pays for nothing more.
func (t *Team) beginColl(routine string) {
	if cs := collStates[t.slot]; cs != nil && cs.owed > 0 && cs.team == t {
		cs.settle(routine) // before this call's word and arguments
	}
	p := t.collWord()
	// The call number is the word's own: the C library's barrier
	// (internal/worldsync) counts the world team's calls in it too.
	ucs.StoreRelease(p, (atomic.LoadUint64(p)>>9+1)<<9|collKindOf[routine]<<1|1)
}

func (t *Team) endColl() {
	p := t.collWord()
	ucs.StoreRelease(p, atomic.LoadUint64(p)&^1)
}

// collWord returns this PE's collective word of the team.
func (t *Team) collWord() *uint64 { return (*uint64)(st.heap.At(int(t.collWordOff()))) }

// splitCollWord splits a collective word.
func splitCollWord(w uint64) (seq, kind uint64, active bool) { return w >> 9, w >> 1 & 0xff, w&1 != 0 }

// collWordOff is the heap offset of the team's collective word, the last
// line of its slot.
func (t *Team) collWordOff() uintptr { return t.off + teamPool.slotSize - counterStride }

// peerColl reads the collective word of the team's PE i; ok is false
// when that takes a get and remote is false (another goroutine than the
// library's user may not use the default context).
func (t *Team) peerColl(i int, remote bool) (seq, kind uint64, ok bool) {
	var w uint64
	pe := t.members[i]
	if base := st.peers[pe].heap(); base != nil {
		w = atomic.LoadUint64((*uint64)(unsafe.Add(base, t.collWordOff())))
	} else if remote {
		get2("stall check", pe, t.collWordOff(), unsafe.Slice((*byte)(unsafe.Pointer(&w)), 8))
	} else {
		return 0, 0, false
	}
	seq, kind, _ = splitCollWord(w)
	return seq, kind, true
}

// waitEntry is a wait that lasted, for the stall reports: the routine,
// what it waits for, since when, and the call stack it was registered from
// (program counters only: a report resolves them, and finds the program's
// call site, callSite).
type waitEntry struct {
	what  string // the routine of a point-to-point wait; "" in a collective
	on    waitOn
	since time.Time
	pcs   [callDepth]uintptr
	npc   int
}

// callDepth bounds the frames a slow wait keeps: those of the library
// between a wait and the program's call are fewer.
const callDepth = 32

// waitOn is what a point-to-point wait waits for, for its stall report:
// n symmetric variables of size bytes from addr (one for the routines on
// one variable), compared with a value (whose bits value holds), or with
// one value each (vector); or, with lock set, the lock at addr, and ahead,
// 1 + the PE ahead of this one in the lock's queue (0: unknown). The zero
// value records nothing (a collective's wait).
type waitOn struct {
	addr   unsafe.Pointer
	n      int
	size   uint8
	signed bool
	vector bool
	lock   bool
	cmp    Cmp
	value  uint64
	ahead  int
}

// waitFor describes a wait on the n variables of type T from p, compared
// with v (or, with vector, with values of their own). It is a few stores:
// the waits build it before they know whether they will last.
func waitFor[T Point](p *T, n int, cmp Cmp, v T, vector bool) waitOn {
	var z T
	return waitOn{addr: unsafe.Pointer(p), n: n, size: uint8(unsafe.Sizeof(z)), signed: ^z < 0, vector: vector, cmp: cmp, value: uint64(v)}
}

// waitForArray is waitFor of the array ivars (of values, when not nil).
func waitForArray[T Point](ivars []T, cmp Cmp, v T, values []T) waitOn {
	return waitFor(unsafe.SliceData(ivars), len(ivars), cmp, v, values != nil)
}

// waitForLock describes a wait for the lock at lock, behind the PE ahead
// (-1: unknown).
func waitForLock(lock *int64, ahead int) waitOn {
	return waitOn{addr: unsafe.Pointer(lock), n: 1, size: 8, lock: true, ahead: ahead + 1}
}

// describe says what the wait waits for: " until *0x... (heap offset
// 0x40) CmpEQ 1 (it holds 0; ...)", " for the lock at ..., queued behind
// PE 2 ...".
func (o *waitOn) describe() string {
	if o.n == 0 {
		return ""
	}
	where := fmt.Sprintf("%p (heap offset %#x)", o.addr, uintptr(o.addr)-st.heapBase)
	if o.lock {
		s := " for the lock at " + where
		if o.ahead > 0 {
			s += fmt.Sprintf(", queued behind PE %d (which holds the lock, or waits for it ahead of this PE: its own stall report says which)", o.ahead-1)
		}
		return s
	}
	const by = "another PE's store, atomic or signal"
	if o.n > 1 || o.vector {
		what := fmt.Sprintf("%d elements at %s", o.n, where)
		if o.vector {
			return fmt.Sprintf(" until the %s compare %v to their cmpValues (%s)", what, o.cmp, by)
		}
		return fmt.Sprintf(" until the %s compare %v %s (%s)", what, o.cmp, o.format(o.value), by)
	}
	return fmt.Sprintf(" until *%s %v %s (it holds %s; %s)", where, o.cmp, o.format(o.value), o.format(o.load()), by)
}

// load reads the (first) variable atomically.
func (o *waitOn) load() uint64 {
	switch o.size {
	case 2:
		return uint64(loadPoint((*uint16)(o.addr)))
	case 4:
		return uint64(loadPoint((*uint32)(o.addr)))
	default:
		return loadPoint((*uint64)(o.addr))
	}
}

// format prints the bits v of a variable as the program wrote its value.
func (o *waitOn) format(v uint64) string {
	if !o.signed {
		return strconv.FormatUint(v&(1<<(8*uint(o.size))-1), 10)
	}
	shift := 64 - 8*uint(o.size)
	return strconv.FormatInt(int64(v<<shift)>>shift, 10)
}

// callSite names the program's call that led to the wait whose stack is
// pcs: the first frame outside the library (inLibrary), " at file.go:42
// (pkg.Func)"; "" when every frame is the library's.
func callSite(pcs []uintptr) string {
	frames := runtime.CallersFrames(pcs)
	for {
		f, more := frames.Next()
		if f.Function != "" && !inLibrary(f.Function, f.File) {
			return fmt.Sprintf(" at %s:%d (%s)", filepath.Base(f.File), f.Line, f.Function[strings.LastIndexByte(f.Function, '/')+1:])
		}
		if !more {
			return ""
		}
	}
}

// inLibrary reports whether the function fn, defined in file, is part of
// goshmem rather than of the program: a function of a package of the
// goshmem module that is not in a test file. (A main package's functions
// are named main.*: the module's commands and examples count as programs.)
func inLibrary(fn, file string) bool {
	return strings.HasPrefix(fn, version.ModulePath+"/") && !strings.HasSuffix(file, "_test.go")
}

// slowWaits are the waits in the library that lasted, by entry, and the
// entries of those that ended, for reuse: a contended lock or a late peer
// makes waits last often, and registering one must not allocate.
var slowWaits struct {
	sync.Mutex
	m    map[*waitEntry]struct{}
	free []*waitEntry
}

// stallReportAfter is GOSHMEM_STALL_REPORT: 0 for none.
var stallReportAfter time.Duration

// slow is the part of a waiter for a wait that lasts: every stallPolls
// pauses past its spin budget it looks at the clock, registers itself for
// the stall reports, checks the collectives for a mismatch, and reports a
// stall past GOSHMEM_STALL_REPORT.
func (w *waiter) slow() {
	now := time.Now()
	if w.entry == nil {
		w.next = firstMismatchCheck()
		slowWaits.Lock()
		if slowWaits.m == nil {
			slowWaits.m = make(map[*waitEntry]struct{})
		}
		if n := len(slowWaits.free); n > 0 {
			w.entry = slowWaits.free[n-1]
			slowWaits.free = slowWaits.free[:n-1]
		} else {
			w.entry = new(waitEntry)
		}
		w.entry.what, w.entry.on, w.entry.since = w.what, w.on, now
		// Skipping runtime.Callers and slow: the stack from pause on.
		w.entry.npc = runtime.Callers(2, w.entry.pcs[:])
		slowWaits.m[w.entry] = struct{}{}
		slowWaits.Unlock()
		return
	}
	waited := now.Sub(w.entry.since)
	if stallReportAfter > 0 && waited >= stallReportAfter && !w.reported {
		w.reported = true
		lg().Logf(ucs.LogPrint, "%s", stallReport(st.me, w.entry, now, true))
	}
	if w.what == "" && waited >= w.next {
		w.next = min(2*w.next, stallCheckMax)
		checkMismatch()
	}
}

// firstMismatchCheck is how long a wait lasts before the first look for a
// collective mismatch. A look may connect to a few PEs not connected yet
// and map their heaps (checkPartners); on a node with more PEs than cores,
// where every wait is slow, it waits as many times longer as the node has
// PEs per core, so that a start-up of many PEs on few cores does not pay
// for it.
func firstMismatchCheck() time.Duration {
	return stallCheckAfter * time.Duration(max(1, st.perCPU))
}

// done ends a wait.
func (w *waiter) done() {
	if w.entry != nil {
		slowWaits.Lock()
		delete(slowWaits.m, w.entry)
		slowWaits.free = append(slowWaits.free, w.entry)
		slowWaits.Unlock()
		w.entry = nil
	}
}

// collWords reads the collective words of every PE of the team, in team
// order.
func (t *Team) collWords() []uint64 {
	words := make([]uint64, t.npes)
	for j := range words {
		pe := t.members[j]
		if base := st.peers[pe].heap(); base != nil {
			words[j] = atomic.LoadUint64((*uint64)(unsafe.Add(base, t.collWordOff())))
		} else {
			get2("collective check", pe, t.collWordOff(), unsafe.Slice((*byte)(unsafe.Pointer(&words[j])), 8))
		}
	}
	return words
}

// collAgree returns, after a sync of the team whose keys differed, when
// every PE is in the same collective (sameCollKind: so the keys differed
// in something else); otherwise it reports the mismatch as collMismatch
// does, with the same single sync, so that a PE here and one in
// collMismatch sync alike. Every PE of the team calls it at once.
func (t *Team) collAgree(routine string) {
	words := t.collWords()
	t.syncKey(routine, 0) // every PE has read before any moves on
	for _, w := range words {
		seq, kind, active := splitCollWord(w)
		seq0, kind0, active0 := splitCollWord(words[0])
		if seq != seq0 || active != active0 || !sameCollKind(kind, kind0) {
			t.reportMismatch(routine, words)
		}
	}
}

// collMismatch reports a sync of the team in which the PEs were in
// different collectives: every PE of the team calls it at once, prints a
// message naming every PE's call on its standard error, and panics with
// it.
func (t *Team) collMismatch(routine string) {
	words := t.collWords()
	t.syncKey(routine, 0) // every PE has read before any ends
	t.reportMismatch(routine, words)
}

// reportMismatch prints, once every PE's collective word is read, a
// message naming every PE's call, and panics with it.
func (t *Team) reportMismatch(routine string, words []uint64) {
	var order []uint64
	pes := map[uint64][]int{}
	for j, w := range words {
		if _, ok := pes[w]; !ok {
			order = append(order, w)
		}
		pes[w] = append(pes[w], t.members[j])
	}
	parts := make([]string, len(order))
	for i, w := range order {
		seq, kind, active := splitCollWord(w)
		d := fmt.Sprintf("collective #%d, %s", seq, collKindName(kind))
		if !active {
			d = fmt.Sprintf("past its collective #%d, %s", seq, collKindName(kind))
		}
		parts[i] = describePEs(pes[w]) + ": " + d
	}
	msg := fmt.Sprintf("shmem.%s: collective mismatch on %v: %s (every PE of a team must call the same collectives in the same order)",
		routine, t, strings.Join(parts, "; "))
	lg().Logf(ucs.LogError, "goshmem: PE %d: %s", st.me, msg)
	panic(msg)
}

// foundMismatch reports a mismatch that this PE found alone, outside a
// sync of the team (in a staged collective's contribution, or in a wait's
// look at its partners' words), and panics. The other members may not
// have reached this PE's call number yet: it waits for them, for up to
// mismatchGrace, so that the report names every member's call, as a sync's
// does; one that has not arrived by then is named where it is.
func (t *Team) foundMismatch(routine string, seq uint64) {
	deadline := time.Now().Add(mismatchGrace * time.Duration(max(1, st.perCPU)))
	for {
		words := t.collWords()
		behind := false
		for _, w := range words {
			if s, _, _ := splitCollWord(w); s < seq {
				behind = true
			}
		}
		if !behind || time.Now().After(deadline) {
			t.reportMismatch(routine, words)
		}
		// Not a waiter: its slow path looks for mismatches.
		st.worker.Progress()
		time.Sleep(time.Millisecond)
	}
}

// stagedMismatch reports a staged collective of the team whose
// contribution from a member is of another kind than this PE's call, and
// panics. The staged calls do not sync the team, so the PE that reads the
// contribution is the one that finds it; the others find it in their
// waits (checkMismatch).
func (t *Team) stagedMismatch() {
	seq, mine, _ := splitCollWord(atomic.LoadUint64(t.collWord()))
	t.foundMismatch(collKindName(mine), seq)
}

// describePEs names a list of PEs: "PE 3", "PEs 0, 1, 2".
func describePEs(list []int) string {
	if len(list) == 1 {
		return "PE " + strconv.Itoa(list[0])
	}
	strs := make([]string, len(list))
	for j, pe := range list {
		strs[j] = strconv.Itoa(pe)
	}
	return "PEs " + strings.Join(strs, ", ")
}

// activeColls yields each team this PE is in a collective of, with its
// collective word (splitCollWord).
func activeColls(yield func(t *Team, word uint64) bool) {
	for i := range teamsBySlot {
		t := teamsBySlot[i].Load()
		if t == nil {
			continue
		}
		w := atomic.LoadUint64(t.collWord())
		if _, _, active := splitCollWord(w); active && !yield(t, w) {
			return
		}
	}
}

// checkMismatch looks at the words of every team this PE is in a
// collective of (checkPartners says which members it reads); on a
// mismatch it reports it (foundMismatch) and panics.
func checkMismatch() {
	for t, w := range activeColls {
		mySeq, myKind, _ := splitCollWord(w)
		for j := range t.checkPartners {
			seq, kind, _ := t.peerColl(j, true)
			if seq != mySeq || sameCollKind(kind, myKind) {
				continue
			}
			t.foundMismatch(collKindName(myKind), mySeq)
		}
	}
}

// checkPartners yields the team indexes whose collective words a look for
// a mismatch reads: every member whose heap is mapped here already (a
// load), and the members at distances ±1, ±2, ±4, ... in the team's order,
// whatever reaching them takes. Reading every member's word instead made
// every waiting PE of a large job connect to all the others at once (a
// handshake storm that cut connections at 256 PEs) and map every heap of
// its node: N² connections for the job, where this is N·2·log₂N at most.
// A mismatch that hangs a team leaves two neighbours in the ring of its
// members in the same call number and different routines, and the
// distance-1 partners alone find those when every member waits in the
// same call number; the others find more of the rest, and sooner.
func (t *Team) checkPartners(yield func(j int) bool) {
	n := t.npes
	if n <= 1 {
		return
	}
	partner := func(j int) bool {
		for d := 1; d < n; d <<= 1 {
			if j == (t.me+d)%n || j == (t.me-d%n+n)%n {
				return true
			}
		}
		return false
	}
	for j := 0; j < n; j++ {
		if j == t.me {
			continue
		}
		if st.peers[t.members[j]].heap() == nil && !partner(j) {
			continue
		}
		if !yield(j) {
			return
		}
	}
}

// stallReport describes one wait of PE me: the routine, for how long, and
// for a collective the team and the PEs it waits for (those reached only
// through the network when remote is set: it takes gets).
func stallReport(me int, e *waitEntry, now time.Time, remote bool) string {
	waited := now.Sub(e.since).Round(time.Millisecond)
	site := callSite(e.pcs[:e.npc])
	if e.what != "" {
		on := e.on.describe()
		if on == "" {
			on = " (for another PE's store, atomic or signal)"
		}
		return fmt.Sprintf("goshmem: PE %d: stall report: waiting %v in shmem.%s%s%s\n", me, waited, e.what, site, on)
	}
	var b strings.Builder
	for t, w := range activeColls {
		mySeq, myKind, _ := splitCollWord(w)
		fmt.Fprintf(&b, "goshmem: PE %d: stall report: waiting %v in shmem.%s%s, collective #%d of %v", me, waited, collKindName(myKind), site, mySeq, t)
		var behind []string
		for j := 0; j < t.npes; j++ {
			if j == t.me {
				continue
			}
			seq, kind, ok := t.peerColl(j, remote)
			switch {
			case !ok:
				behind = append(behind, fmt.Sprintf("PE %d (maybe; reached through the network)", t.members[j]))
			case seq < mySeq:
				behind = append(behind, fmt.Sprintf("PE %d (at its #%d, %s)", t.members[j], seq, collKindName(kind)))
			case seq == mySeq && kind != myKind:
				behind = append(behind, fmt.Sprintf("PE %d (in #%d, %s: a mismatch)", t.members[j], seq, collKindName(kind)))
			}
		}
		if len(behind) > 0 {
			fmt.Fprintf(&b, "; waits for %s", strings.Join(behind, ", "))
		}
		b.WriteString("\n")
	}
	if b.Len() == 0 {
		fmt.Fprintf(&b, "goshmem: PE %d: stall report: waiting %v in the library\n", me, waited)
	}
	return b.String()
}

// stallSignals serves SIGUSR2 while the library is initialized: each one
// prints a report of every wait in the library that lasted, or that the
// PE waits in none.
var stallSignals struct {
	ch     chan os.Signal
	done   chan struct{} // closed to stop the goroutine
	exited chan struct{} // closed when it stopped
}

// ignoreStallSignal ignores SIGUSR2 in a PE that goshmem-run started,
// until startStallReports listens for it.
func ignoreStallSignal() {
	if os.Getenv("GOSHMEM_RANK") != "" && !signal.Ignored(syscall.SIGUSR2) {
		signal.Ignore(syscall.SIGUSR2)
	}
}

// startStallReports reads GOSHMEM_STALL_REPORT and, for a PE that
// goshmem-run started, listens for SIGUSR2 (Init).
func startStallReports() error {
	stallReportAfter = 0
	if v := os.Getenv("GOSHMEM_STALL_REPORT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("GOSHMEM_STALL_REPORT=%q is not a positive duration (like 30s)", v)
		}
		stallReportAfter = d
	}
	if os.Getenv("GOSHMEM_RANK") == "" {
		return nil // not started by goshmem-run: leave the program's signals alone
	}
	ch, done, exited := make(chan os.Signal, 1), make(chan struct{}), make(chan struct{})
	signal.Notify(ch, syscall.SIGUSR2)
	stallSignals.ch, stallSignals.done, stallSignals.exited = ch, done, exited
	me := st.me
	go func() {
		defer close(exited)
		for {
			select {
			case <-done:
				return
			case <-ch:
				lg().Logf(ucs.LogPrint, "%s", allStalls(me))
			}
		}
	}()
	return nil
}

// stopStallReports stops listening for SIGUSR2 (Finalize).
func stopStallReports() {
	if stallSignals.ch != nil {
		signal.Stop(stallSignals.ch)
		close(stallSignals.done)
		<-stallSignals.exited // a report under way reads the library's state
		stallSignals.ch, stallSignals.done, stallSignals.exited = nil, nil, nil
	}
}

// allStalls reports every wait that lasted.
func allStalls(me int) string {
	// Copies: an entry is reused once its wait ends.
	slowWaits.Lock()
	entries := make([]*waitEntry, 0, len(slowWaits.m))
	for e := range slowWaits.m {
		c := *e
		entries = append(entries, &c)
	}
	slowWaits.Unlock()
	if len(entries) == 0 {
		return fmt.Sprintf("goshmem: PE %d: stall report: not waiting in the library\n", me)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].since.Before(entries[j].since) })
	now := time.Now()
	var b strings.Builder
	seenColl := false
	for _, e := range entries {
		if e.what == "" {
			if seenColl {
				continue // the collectives are reported once, all together
			}
			seenColl = true
		}
		b.WriteString(stallReport(me, e, now, false))
	}
	return b.String()
}
