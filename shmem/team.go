package shmem

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"sort"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Team is a set of PEs that take part in team collectives and team
// contexts (shmem_team_t). A PE has a number in each team it belongs to,
// from 0 to NPEs()-1, in the order of the PEs' numbers in the job.
//
// TeamWorld and TeamShared exist from Init to Finalize. TeamSplitStrided
// and TeamSplit2D make others from a parent team; a PE that is not in the
// new team gets nil, which plays the part of SHMEM_TEAM_INVALID: MyPE and
// NPEs of a nil team return -1, TeamTranslatePE returns -1, CreateCtx and
// GetConfig return an error, Destroy does nothing, and splitting it gives
// nil teams and no error.
//
// Each team keeps its own synchronization words in a pool of the symmetric
// heap that Init reserves (a few cache lines per team, for at most
// MaxTeams teams alive at once), so no routine takes a pSync array.
//
// A Team must not be copied. The collective routines of a team (Sync, the
// splits that take it as parent) must be called by every PE of the team,
// in the same order, and by one goroutine of a PE at a time.
type Team struct {
	me, npes int
	// members are the job's numbers of the team's PEs: PE i of the team is
	// PE members[i] of the job. They ascend, or descend in a team split
	// with a negative stride (and the teams split from it).
	members []int
	slot    int     // index of the team's synchronization words in the pool
	off     uintptr // heap offset of those words
	epoch   uint64  // syncs done
	xseq    uint64  // record exchanges done
	config  TeamConfig
	mask    TeamConfigMask
	name    string
	// predefined: TeamWorld or TeamShared, which cannot be destroyed.
	predefined bool
	destroyed  bool
}

// TeamConfig is the configuration of a team (shmem_team_config_t), given
// to the routines that split a team together with a TeamConfigMask naming
// the fields that count.
type TeamConfig struct {
	// NumContexts is the number of contexts the program means to create
	// from the team with CreateCtx (num_contexts, default 0). goshmem
	// creates contexts on demand and reserves nothing for them, so the
	// number is recorded (GetConfig reports it) but is not a limit: more
	// may be created, as long as the transports have resources. It must
	// not be negative.
	NumContexts int
}

// TeamConfigMask names the fields of a TeamConfig that a routine uses,
// or-ed together; 0 names none (every field takes its default).
type TeamConfigMask int

// The fields of TeamConfig.
const (
	// TeamNumContexts is TeamConfig.NumContexts (SHMEM_TEAM_NUM_CONTEXTS).
	TeamNumContexts TeamConfigMask = 1 << iota

	teamAllConfig = TeamNumContexts
)

// MaxTeams is the number of teams a PE can belong to at once, TeamWorld
// and TeamShared included. A split that would need more returns an error.
const MaxTeams = 64

// Slots of the predefined teams in the team pool.
const (
	slotWorld = iota
	slotShared
	firstUserSlot
)

// teamPool is this PE's bookkeeping of the team pool: MaxTeams slots at
// the same heap offset on every PE. Slot s holds a record line (for the
// exchanges of the team collectives) followed by one counter line per round
// of a dissemination barrier over the largest possible team, and the words
// of the collective routines (collAreaSize).
//
// Splits of different parents may run at once in goroutines of a PE
// (ThreadMultiple), so a split claims its slots in two steps: an exchange
// finds slots free on every PE of the parent, then every PE claims them
// (held, under mu) and a second exchange tells whether all could. Claims
// that collide are settled by the parents' slots, which are the same on
// every PE: a split whose parent has the lower slot waits for the other
// split to finish, the other gives up its claim and tries again. Waits
// thus only go from lower parent slots to higher ones, so none is circular,
// and the split of the lowest parent slot never gives up.
var teamPool struct {
	mu       sync.Mutex
	off      uintptr
	slotSize uintptr
	used     uint64 // slots of teams this PE belongs to
	held     uint64 // slots claimed by splits still running
	// holder is the parent slot of the split that holds a slot of held.
	holder [MaxTeams]int
	cursor int // the slot handed out last: new teams take the next free ones
}

// teamWorld and teamShared are the predefined teams; Init fills them.
var (
	teamWorld  = Team{me: -1, npes: -1, name: "TeamWorld", predefined: true}
	teamShared = Team{me: -1, npes: -1, name: "TeamShared", predefined: true}
)

// TeamWorld is the team of every PE of the job (SHMEM_TEAM_WORLD), with the
// PE numbers of the job. Its Sync is SyncAll.
var TeamWorld = &teamWorld

// TeamShared is the team of the PEs whose symmetric heaps this PE and they
// can all load and store directly (SHMEM_TEAM_SHARED): for every two PEs of
// the team, Ptr gives a direct pointer from one to the other's objects. It
// is usually the PEs of this node; a PE restricted to the network (for
// example with UCX_TLS=tcp,self) is alone in its TeamShared. Every PE of a
// TeamShared has the same TeamShared.
var TeamShared = &teamShared

// resetTeams forgets every team (at Finalize, or when Init fails).
func resetTeams() {
	teamWorld = Team{me: -1, npes: -1, name: "TeamWorld", predefined: true}
	teamShared = Team{me: -1, npes: -1, name: "TeamShared", predefined: true}
	teamPool.off, teamPool.slotSize, teamPool.used, teamPool.held, teamPool.cursor = 0, 0, 0, 0, 0
	for i := range teamsBySlot {
		teamsBySlot[i].Store(nil)
	}
}

// teamSlotSize is the size of a slot of the team pool: a record line, the
// counter lines of a dissemination barrier over every PE, the collectives'
// words (coll.go), and a line for the word that tells which collective
// this PE is in (stall.go) and the arguments of the call (coll_args.go).
func teamSlotSize() uintptr {
	rounds := bits.Len(uint(st.npes - 1))
	return uintptr(1+rounds)*counterStride + collAreaSize() + counterStride
}

// initTeams reserves the team pool and sets up TeamWorld and TeamShared.
// Every PE calls it at Init, at the same point of the heap's allocation
// sequence.
func initTeams() error {
	slotSize := teamSlotSize()
	off, dirty, err := st.heap.AllocClean(int(slotSize)*MaxTeams, counterStride)
	if err != nil {
		return fmt.Errorf("team pool: %w", err)
	}
	// The pool comes early from a fresh heap: its pages are zero, and
	// clearing them would cost each its page fault (a quarter of Init's
	// time over tcp).
	clear(unsafe.Slice((*byte)(st.heap.At(off)), dirty))
	teamPool.off, teamPool.slotSize = uintptr(off), slotSize
	teamPool.used = 1<<slotWorld | 1<<slotShared
	teamPool.cursor = slotShared

	world := make([]int, st.npes)
	for i := range world {
		world[i] = i
	}
	teamWorld = Team{me: st.me, npes: st.npes, members: world, slot: slotWorld,
		off: teamPool.off, name: "TeamWorld", predefined: true}

	shared, err := sharedMembers()
	if err != nil {
		return err
	}
	me := sort.SearchInts(shared, st.me)
	teamShared = Team{me: me, npes: len(shared), members: shared, slot: slotShared,
		off: teamPool.off + slotShared*slotSize, name: "TeamShared", predefined: true}
	teamsBySlot[slotWorld].Store(&teamWorld)
	teamsBySlot[slotShared].Store(&teamShared)
	return nil
}

// sharedMembers returns the PEs of this PE's TeamShared. Every PE reports
// which heaps it maps (bootstrap allgather); two PEs share memory when each
// maps the other, and TeamShared is the PEs that share memory with exactly
// the same PEs as this one. That is the PEs of the node when sharing is an
// equivalence (the usual case), and in any case a set whose PEs all share
// memory with each other and agree on the set.
func sharedMembers() ([]int, error) {
	n := st.npes
	mine := make([]byte, (n+7)/8)
	for pe := range st.peers {
		if st.peers[pe].mapped || pe == st.me {
			mine[pe/8] |= 1 << (pe % 8)
		}
	}
	all, err := st.member.Allgather(mine)
	if err != nil {
		return nil, fmt.Errorf("TeamShared: %w", err)
	}
	for pe, b := range all {
		if len(b) != len(mine) {
			return nil, fmt.Errorf("TeamShared: PE %d reported %d bytes of heap reachability, want %d", pe, len(b), len(mine))
		}
	}
	has := func(i, j int) bool { return all[i][j/8]&(1<<(j%8)) != 0 }
	row := func(i int) string {
		r := make([]byte, len(mine))
		for j := 0; j < n; j++ {
			if has(i, j) && has(j, i) {
				r[j/8] |= 1 << (j % 8)
			}
		}
		return string(r)
	}
	my := row(st.me)
	var members []int
	for pe := 0; pe < n; pe++ {
		if pe == st.me || (my[pe/8]&(1<<(pe%8)) != 0 && row(pe) == my) {
			members = append(members, pe)
		}
	}
	return members, nil
}

// MyPE returns the number of this PE in the team (shmem_team_my_pe): -1
// for a nil or destroyed team, and before Init.
func (t *Team) MyPE() int {
	if t == nil || t.destroyed {
		return -1
	}
	return t.me
}

// NPEs returns the number of PEs of the team (shmem_team_n_pes): -1 for a
// nil or destroyed team, and before Init.
func (t *Team) NPEs() int {
	if t == nil || t.destroyed {
		return -1
	}
	return t.npes
}

// String names the team, for messages.
func (t *Team) String() string {
	switch {
	case t == nil:
		return "nil team"
	case t.destroyed:
		return t.name + " (destroyed)"
	}
	return t.name
}

// GetConfig returns the configuration the team was created with
// (shmem_team_get_config), with the fields that mask names filled in and
// the others zero. A field the split's mask did not name has its default.
// It returns an error for the invalid team, nil (ErrInvalidTeam), and for
// unknown mask bits (ErrInvalidArgument); it panics for a destroyed team.
func (t *Team) GetConfig(mask TeamConfigMask) (TeamConfig, error) {
	if t == nil || t.npes < 0 {
		return TeamConfig{}, fmt.Errorf("shmem.(*Team).GetConfig: %v is not a valid team: %w", t, ErrInvalidTeam)
	}
	if t.destroyed {
		t.check("(*Team).GetConfig") // panics
	}
	if mask&^teamAllConfig != 0 {
		return TeamConfig{}, fmt.Errorf("shmem.(*Team).GetConfig: unknown mask bits %#x (valid: TeamNumContexts): %w", int(mask&^teamAllConfig), ErrInvalidArgument)
	}
	var c TeamConfig
	if mask&TeamNumContexts != 0 && t.mask&TeamNumContexts != 0 {
		c.NumContexts = t.config.NumContexts
	}
	return c, nil
}

// check panics when t cannot be used by a collective or a query that
// needs a valid team.
func (t *Team) check(routine string) {
	mustInit(routine)
	if t == nil {
		panic("shmem." + routine + ": nil team (the splits return nil to the PEs outside the new team)")
	}
	if t.destroyed {
		panic("shmem." + routine + ": " + t.name + " was destroyed")
	}
}

// Sync waits until every PE of the team has called it (shmem_team_sync).
// It does not complete the operations this PE issued (Quiet does; SyncAll
// is TeamWorld.Sync). Consecutive Syncs need nothing in between. It panics
// for a nil or destroyed team.
func (t *Team) Sync() {
	t.check("(*Team).Sync")
	profCall("(*Team).Sync")
	t.beginColl("(*Team).Sync")
	t.sync("(*Team).Sync")
	t.endColl()
}

// sync is a barrier of the team: a dissemination over its members on the
// counter lines of its slot (disseminate), or the job's barrier for
// TeamWorld. The PEs' keys are their collective words (stall.go), so a PE
// in another collective of the team than the others is found here, by
// every PE of the team at once, and each panics naming every PE's call
// (collMismatch).
func (t *Team) sync(routine string) {
	if !t.syncKey(routine, collKey(atomic.LoadUint64(t.collWord()))) {
		t.collMismatch(routine)
	}
}

// syncKey is a barrier of the team that reports whether every PE passed
// the same key.
func (t *Team) syncKey(routine string, key uint64) bool {
	if t == &teamWorld {
		return st.barrier.sync(routine, key)
	}
	t.epoch++
	return disseminate(routine, t.members, t.me, t.off+counterStride, t.epoch, key)
}

// teamRecord is what a PE publishes in an exchange of a team collective:
// the exchange's sequence number, the kind of collective, and its
// arguments.
type teamRecord [8]uint64

// Kinds of collectives that exchange records.
const (
	recSplitStrided = 1 + iota
	recSplit2D
	recClaim // the second exchange of a split
	recText  // exchangeText
)

var recNames = map[uint64]string{recSplitStrided: "TeamSplitStrided", recSplit2D: "TeamSplit2D", recClaim: "a split's claim of team slots", recText: "a report of different calls"}

// exchange publishes rec (its first word replaced by the exchange's
// sequence number) as this PE's record of a collective over t and returns
// every member's record, in team order. The caller must call t.sync after
// it has used the records and before the team's next exchange, so that no
// PE overwrites its record while another still reads it.
func (t *Team) exchange(routine string, rec teamRecord) []teamRecord {
	t.xseq++
	rec[0] = t.xseq
	line := (*teamRecord)(st.heap.At(int(t.off)))
	for i := range rec {
		atomic.StoreUint64(&line[i], rec[i])
	}
	t.sync(routine)
	out := make([]teamRecord, t.npes)
	for i, pe := range t.members {
		q := jobPeer(routine, pe)
		switch {
		case i == t.me:
			out[i] = rec
		case q.base != nil:
			l := (*teamRecord)(unsafe.Add(q.base, t.off))
			for j := range l {
				out[i][j] = atomic.LoadUint64(&l[j])
			}
		default:
			defaultCtx.getSlow(routine, pe, t.off, unsafe.Slice((*byte)(unsafe.Pointer(&out[i])), len(out[i])*8), false)
		}
	}
	return out
}

// exchangeText is exchange for a text of every PE, at most maxText bytes
// (a longer one is cut), in team order: a first exchange gives the
// lengths, then each one moves textChunk bytes of every text. Reports of
// calls that differ among the PEs take it, to name each PE's call in full;
// it syncs the team after each exchange, as exchange asks.
func (t *Team) exchangeText(routine, text string) []string {
	const textChunk = 6 * 8 // words 2 to 7 of a record
	if len(text) > maxText {
		text = text[:maxText]
	}
	recs := t.exchange(routine, teamRecord{0, recText, uint64(len(text))})
	t.sync(routine)
	lens, longest := make([]int, t.npes), 0
	for i, r := range recs {
		lens[i] = min(int(r[2]), maxText)
		longest = max(longest, lens[i])
	}
	texts := make([][]byte, t.npes)
	for at := 0; at < longest; at += textChunk {
		var b [textChunk]byte
		copy(b[:], text[min(at, len(text)):])
		rec := teamRecord{0, recText}
		for w := range textChunk / 8 {
			rec[2+w] = binary.LittleEndian.Uint64(b[8*w:])
		}
		for i, r := range t.exchange(routine, rec) {
			for w := range textChunk / 8 {
				texts[i] = binary.LittleEndian.AppendUint64(texts[i], r[2+w])
			}
		}
		t.sync(routine)
	}
	out := make([]string, t.npes)
	for i := range out {
		out[i] = string(texts[i][:lens[i]])
	}
	return out
}

// maxText is the longest text exchangeText moves.
const maxText = 1 << 10

// split runs the exchanges of a split of t and returns nslots team slots
// that are free on every PE of t and now held by this split on this PE
// (the caller takes each into a team with newTeam, or gives it back with
// releaseSlot), their words cleared on every PE of t. Every PE publishes
// the kind of split and its arguments, whether its own configuration is
// acceptable, and its free slots; every PE then finds the same error, or
// the same slots, which every PE claims (see teamPool). When a PE's claim
// collides with a concurrent split of another parent, every PE gives the
// slots back and the exchange starts over.
func (t *Team) split(routine string, kind uint64, args [3]int, ok bool, nslots int) ([]int, error) {
	profCall(routine)
	t.beginColl(routine)
	defer t.endColl()
	for {
		slots, err := t.proposeSlots(routine, kind, args, ok, nslots)
		if err != nil {
			return nil, err
		}
		claimed := len(slots) == nslots && claimSlots(slots, t.slot)
		recs := t.exchange(routine, teamRecord{0, recClaim, b2u(claimed)})
		all := true
		for _, r := range recs {
			all = all && r[1] == recClaim && r[2] == 1
		}
		if !all {
			if claimed {
				for _, s := range slots {
					releaseSlot(s)
				}
			}
			t.sync(routine) // every PE has read the claims before the next exchange
			continue
		}
		teamPool.mu.Lock()
		teamPool.cursor = slots[len(slots)-1]
		teamPool.mu.Unlock()
		// The slots are held on every PE of the parent: clear their words
		// there before the closing sync, which every PE passes only after
		// every PE cleared them, and so before any PE uses the new teams.
		for _, s := range slots {
			words := unsafe.Slice((*uint64)(st.heap.At(int(teamPool.off+uintptr(s)*teamPool.slotSize))), teamPool.slotSize/8)
			for i := range words {
				atomic.StoreUint64(&words[i], 0)
			}
		}
		t.sync(routine)
		return slots, nil
	}
}

// proposeSlots runs the first exchange of a split (see split) and returns
// the slots it proposes, the same on every PE of t, or the error every PE
// finds.
func (t *Team) proposeSlots(routine string, kind uint64, args [3]int, ok bool, nslots int) ([]int, error) {
	teamPool.mu.Lock()
	free, cursor, busy := ^(teamPool.used | teamPool.held), teamPool.cursor, teamPool.held != 0
	teamPool.mu.Unlock()
	// Word 5 holds whether this PE's configuration is acceptable (bit 0)
	// and whether other splits hold slots here (bit 1): a shortage of
	// slots is then only for the moment.
	rec := teamRecord{0, kind, uint64(args[0]), uint64(args[1]), uint64(args[2]), b2u(ok) | b2u(busy)<<1, free, uint64(cursor)}
	recs := t.exchange(routine, rec)
	defer t.sync(routine)
	common, last := ^uint64(0), 0
	busy = false // every PE's record, this one's too, says whether it is busy
	for i, r := range recs {
		if r[0] != recs[t.me][0] || r[1] != kind {
			return nil, fmt.Errorf("shmem.%s: PE %d of %v (PE %d of the job) is in collective #%d of the team, %s, while this PE is in #%d, %s: every PE of the parent team must call the same team collectives in the same order",
				routine, i, t, t.members[i], r[0], recNames[r[1]], recs[t.me][0], recNames[kind])
		}
		if r[2] != rec[2] || r[3] != rec[3] || r[4] != rec[4] {
			return nil, fmt.Errorf("shmem.%s: PE %d of %v (PE %d of the job) passed arguments %v, this PE %v: every PE of the parent team must pass the same ones: %w",
				routine, i, t, t.members[i], []int{int(r[2]), int(r[3]), int(r[4])}, args[:], ErrInvalidArgument)
		}
		if r[5]&1 == 0 {
			return nil, fmt.Errorf("shmem.%s: PE %d of %v (PE %d of the job) passed an invalid team configuration: %w", routine, i, t, t.members[i], ErrInvalidArgument)
		}
		busy = busy || r[5]&2 != 0
		common &= r[6]
		last = max(last, int(r[7]))
	}
	if err := checkSplitArgs(routine, kind, args, t.npes); err != nil {
		return nil, err
	}
	// The slots after the last one handed out on any PE come first, so a
	// destroyed team's slot is reused as late as possible.
	var slots []int
	for i := 1; i < MaxTeams && len(slots) < nslots; i++ {
		s := (last + i) % MaxTeams
		if s >= firstUserSlot && common&(1<<s) != 0 {
			slots = append(slots, s)
		}
	}
	if len(slots) < nslots && !busy {
		return nil, fmt.Errorf("shmem.%s: no team slot is free on every PE of %v (at most %d teams, TeamWorld and TeamShared included, may exist at once): destroy teams that are no longer used", routine, t, MaxTeams)
	}
	return slots, nil
}

// claimSlots holds slots for the split of the parent in slot parent,
// all or none, and reports whether it could. It gives up when a slot
// belongs to a team or is held by the split of a lower parent slot, and
// waits, driving progress, while a slot is held by the split of a higher
// one (see teamPool).
func claimSlots(slots []int, parent int) bool {
	var w waiter
	defer w.done()
	teamPool.mu.Lock()
	defer teamPool.mu.Unlock()
	for {
		wait := false
		for _, s := range slots {
			switch {
			case teamPool.used&(1<<s) != 0:
				return false
			case teamPool.held&(1<<s) == 0:
			case teamPool.holder[s] < parent:
				return false
			default:
				wait = true
			}
		}
		if !wait {
			break
		}
		teamPool.mu.Unlock()
		w.pause()
		teamPool.mu.Lock()
	}
	for _, s := range slots {
		teamPool.held |= 1 << s
		teamPool.holder[s] = parent
	}
	return true
}

// releaseSlot gives back a slot a split held.
func releaseSlot(s int) {
	teamPool.mu.Lock()
	teamPool.held &^= 1 << s
	teamPool.mu.Unlock()
}

// checkSplitArgs checks arguments that every PE passed alike, so every PE
// finds the same.
func checkSplitArgs(routine string, kind uint64, args [3]int, n int) error {
	switch kind {
	case recSplitStrided:
		start, stride, size := args[0], args[1], args[2]
		switch {
		case size < 1:
			return fmt.Errorf("shmem.%s: size %d (valid: 1..%d): %w", routine, size, n, ErrInvalidArgument)
		case start < 0 || start >= n:
			return fmt.Errorf("shmem.%s: start %d (valid: 0..%d, the parent team's PEs): %w", routine, start, n-1, ErrInvalidArgument)
		case size > 1 && stride == 0:
			return fmt.Errorf("shmem.%s: stride 0 with size %d (valid: size 1 with stride 0): %w", routine, size, ErrInvalidArgument)
		case size > 1 && stride > 0 && stride > (n-1-start)/(size-1):
			return fmt.Errorf("shmem.%s: start %d, stride %d and size %d reach PE %d of a parent team of %d PEs (a split may not wrap around): %w", routine, start, stride, size, start+stride*(size-1), n, ErrInvalidArgument)
		case size > 1 && stride < 0 && -stride > start/(size-1):
			return fmt.Errorf("shmem.%s: start %d, stride %d and size %d reach PE %d of the parent team (a split may not wrap around): %w", routine, start, stride, size, start+stride*(size-1), ErrInvalidArgument)
		}
	case recSplit2D:
		if args[0] < 1 {
			return fmt.Errorf("shmem.%s: xrange %d (valid: 1 or more): %w", routine, args[0], ErrInvalidArgument)
		}
	}
	return nil
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// newTeam makes this PE's handle of a team made of the parent's PEs
// parentPEs, in slot (whose words split cleared).
func newTeam(parent *Team, parentPEs []int, slot int, config TeamConfig, mask TeamConfigMask, name string) *Team {
	members := make([]int, len(parentPEs))
	me := -1
	for i, p := range parentPEs {
		members[i] = parent.members[p]
		if members[i] == st.me {
			me = i
		}
	}
	off := teamPool.off + uintptr(slot)*teamPool.slotSize
	teamPool.mu.Lock()
	teamPool.used |= 1 << slot
	teamPool.held &^= 1 << slot
	teamPool.mu.Unlock()
	t := &Team{me: me, npes: len(members), members: members, slot: slot, off: off,
		config: config, mask: mask, name: name}
	teamsBySlot[slot].Store(t)
	return t
}

// configOK reports whether a split's configuration is acceptable.
func configOK(config TeamConfig, mask TeamConfigMask) bool {
	return mask&^teamAllConfig == 0 && (mask&TeamNumContexts == 0 || config.NumContexts >= 0)
}

// TeamSplitStrided creates a team of the PEs start, start+stride, ...,
// start+(size-1)*stride of parent (shmem_team_split_strided), numbered in
// that order. It is collective over parent: every PE of parent must call
// it, with the same start, stride and size (config and configMask may
// differ), after any earlier collective of parent. A PE of the new team
// gets its handle; the other PEs of parent get nil and no error.
//
// The PEs must lie in parent without wrapping around (OpenSHMEM 1.6):
// 0 <= start < parent.NPEs() and size >= 1; for size > 1 a positive
// stride counts up from start (start+(size-1)*stride < parent.NPEs()) and
// a negative one down from it (start+(size-1)*stride >= 0), numbering the
// new team's PEs in the reverse order of parent's; a stride of 0 takes
// size 1. configMask names the fields of config that count
// (TeamNumContexts, or 0 for none).
//
// It returns an error, on every PE of parent alike and without creating a
// team, when the arguments are invalid, differ among the PEs of parent, a
// PE passes an invalid configuration, or a PE of parent already belongs to
// MaxTeams teams. A nil parent (SHMEM_TEAM_INVALID) creates no team: the
// call returns nil and an error wrapping ErrInvalidTeam at once, without
// communicating (the specification's nonzero return). It panics for a
// destroyed parent, whose use is a programming error.
func TeamSplitStrided(parent *Team, start, stride, size int, config TeamConfig, configMask TeamConfigMask) (*Team, error) {
	const routine = "TeamSplitStrided"
	if parent == nil {
		mustInit(routine)
		return nil, fmt.Errorf("shmem.%s: the parent is the invalid team (nil): %w", routine, ErrInvalidTeam)
	}
	parent.check(routine)
	slots, err := parent.split(routine, recSplitStrided, [3]int{start, stride, size}, configOK(config, configMask), 1)
	if err != nil {
		return nil, err
	}
	if stride == 0 {
		stride = 1 // size is 1
	}
	if d := parent.me - start; d%stride != 0 || d/stride < 0 || d/stride >= size {
		releaseSlot(slots[0])
		return nil, nil
	}
	pes := make([]int, size)
	for i := range pes {
		pes[i] = start + i*stride
	}
	return newTeam(parent, pes, slots[0], config, configMask,
		fmt.Sprintf("team (%d, %d, %d) of %s", start, stride, size, parent.name)), nil
}

// TeamSplit2D splits parent into the rows and the columns of a grid of
// xrange columns (shmem_team_split_2d): the PE p of parent is at column
// p%xrange and row p/xrange, and the last row has fewer PEs when xrange
// does not divide parent.NPEs(). A larger xrange than parent.NPEs() counts
// as parent.NPEs(). It returns the team of this PE's row (the x-axis team,
// numbered by column) and of its column (the y-axis team, numbered by row);
// every PE of parent gets both. xconfig/xmask and yconfig/ymask configure
// them as in TeamSplitStrided.
//
// It is collective over parent: every PE of parent must call it with the
// same xrange. It returns an error, on every PE of parent alike and without
// creating teams, when xrange is less than 1, differs among the PEs, a
// configuration is invalid, or a PE of parent cannot belong to two more
// teams. A nil parent (SHMEM_TEAM_INVALID) creates no teams: the call
// returns two nil teams and an error wrapping ErrInvalidTeam at once,
// without communicating. It panics for a destroyed parent.
func TeamSplit2D(parent *Team, xrange int, xconfig TeamConfig, xmask TeamConfigMask, yconfig TeamConfig, ymask TeamConfigMask) (x, y *Team, err error) {
	const routine = "TeamSplit2D"
	if parent == nil {
		mustInit(routine)
		return nil, nil, fmt.Errorf("shmem.%s: the parent is the invalid team (nil): %w", routine, ErrInvalidTeam)
	}
	parent.check(routine)
	ok := configOK(xconfig, xmask) && configOK(yconfig, ymask)
	slots, err := parent.split(routine, recSplit2D, [3]int{xrange, 0, 0}, ok, 2)
	if err != nil {
		return nil, nil, err
	}
	n := parent.npes
	xrange = min(xrange, n)
	col, row := parent.me%xrange, parent.me/xrange
	var xs, ys []int
	for p := row * xrange; p < min(n, (row+1)*xrange); p++ {
		xs = append(xs, p)
	}
	for p := col; p < n; p += xrange {
		ys = append(ys, p)
	}
	x = newTeam(parent, xs, slots[0], xconfig, xmask, fmt.Sprintf("row %d of the %d-column grid of %s", row, xrange, parent.name))
	y = newTeam(parent, ys, slots[1], yconfig, ymask, fmt.Sprintf("column %d of the %d-column grid of %s", col, xrange, parent.name))
	return x, y, nil
}

// TeamTranslatePE returns the number in dst of the PE numbered srcPE in
// src (shmem_team_translate_pe), or -1 when that PE is not in dst, srcPE is
// not a PE of src, or either team is nil or destroyed.
func TeamTranslatePE(src *Team, srcPE int, dst *Team) int {
	if src.NPEs() < 0 || dst.NPEs() < 0 || srcPE < 0 || srcPE >= src.npes {
		return -1
	}
	return dst.rank(src.members[srcPE])
}

// rank returns the number in t of the job's PE pe, or -1 when pe is not
// in t. The members ascend or descend (see Team), so a binary search finds
// it either way.
func (t *Team) rank(pe int) int {
	n := len(t.members)
	desc := n > 1 && t.members[0] > t.members[n-1]
	i := sort.Search(n, func(i int) bool {
		if desc {
			return t.members[i] <= pe
		}
		return t.members[i] >= pe
	})
	if i < n && t.members[i] == pe {
		return i
	}
	return -1
}

// TeamPtr returns a pointer through which this PE can load and store the
// copy of the symmetric object *p that lives on the team's PE pe
// (shmem_team_ptr, OpenSHMEM 1.6), or nil where that PE's memory is not
// directly reachable, and nil for a nil (invalid) team. For TeamWorld it
// is Ptr. It panics for a destroyed team, a pe outside the team, or a p
// that is not symmetric.
func TeamPtr[T any](team *Team, p *T, pe int) *T {
	const routine = "TeamPtr"
	mustInit(routine)
	if team == nil {
		return nil
	}
	team.check(routine)
	if pe < 0 || pe >= team.npes {
		panic(fmt.Sprintf("shmem.%s: PE %d is not a PE of %v (valid: 0..%d)", routine, pe, team, team.npes-1))
	}
	var z T
	return (*T)(peerPtr(routine, unsafe.Pointer(p), int(unsafe.Sizeof(z)), team.members[pe]))
}

// CreateCtx creates a communication context of the team
// (shmem_team_create_ctx): PE numbers given to the routines on it are
// numbers in the team (0..t.NPEs()-1), and its Team method returns t. It
// is not collective. options are those of CtxCreate, and so are the errors;
// it also returns an error for the invalid team, nil (ErrInvalidTeam), and
// panics for a destroyed team. Destroying the team destroys its contexts.
func (t *Team) CreateCtx(options CtxOptions) (*Ctx, error) {
	mustInit("(*Team).CreateCtx")
	if t == nil {
		return nil, fmt.Errorf("shmem.(*Team).CreateCtx: %v is not a valid team: %w", t, ErrInvalidTeam)
	}
	t.check("(*Team).CreateCtx") // panics for a destroyed team
	return newCtx("(*Team).CreateCtx", t, options)
}

// Destroy destroys the team (shmem_team_destroy): it destroys the
// contexts created from it (completing their operations), completes the
// operations of the default context (so that nothing of the team's
// synchronization is still on its way to another PE), and frees the team's
// synchronization words for later teams. Every PE of the team must destroy
// it before the words can be reused, and no PE may use the team
// afterwards. A team that ran staged collectives (broadcast, collect,
// fcollect or a reduction on one node, which other PEs read from this
// PE's words after it returned) is synchronized first, so Destroy is
// then collective over the team, as shmem_team_destroy is; otherwise it
// does not wait for the others. Destroying nil or a destroyed team does
// nothing; it panics for TeamWorld and TeamShared.
func (t *Team) Destroy() {
	if t == nil || t.destroyed {
		return
	}
	if t.predefined {
		panic("shmem.(*Team).Destroy: " + t.name + " cannot be destroyed (it lives until Finalize)")
	}
	mustInit("(*Team).Destroy")
	profCall("(*Team).Destroy")
	ctxMu.Lock()
	for c := range contexts {
		if c.team == t {
			c.destroyLocked()
		}
	}
	ctxMu.Unlock()
	Quiet()
	if cs := collStates[t.slot]; cs != nil && cs.team == t && cs.owed > 0 {
		// A broadcast's root may owe the wait for messages into its slots
		// (netCall.owe): none may come once a later team clears them.
		cs.settle("(*Team).Destroy")
	}
	if cs := collStates[t.slot]; cs != nil && cs.team == t && cs.seq > 0 {
		// Every PE of the team made the same staged calls; once all are
		// here, none reads this PE's slots any more, and a later team may
		// clear them.
		t.beginColl("(*Team).Destroy")
		t.sync("(*Team).Destroy")
		t.endColl()
	}
	teamsBySlot[t.slot].CompareAndSwap(t, nil)
	teamPool.mu.Lock()
	teamPool.used &^= 1 << t.slot
	teamPool.mu.Unlock()
	t.destroyed = true
}
