package shmem

import (
	"encoding/binary"
	"math/bits"
	"sync/atomic"
	"unsafe"
)

// Collectives across nodes that push their data with their keys.
//
// Across nodes every message costs a network latency, and a get two. A
// reduction, broadcast, collect or fcollect of a team whose PEs do not all
// map each other's heaps is therefore one pattern of messages in which
// each message carries the keys of the call (coll_args.go: the least and
// the greatest key the sender has heard of, as the barrier's dissemination
// carries them, sync.go) and, when the data fits, the data: a reduction's
// partial vector, a broadcast's source. By the pattern's end every PE has
// heard, through some chain of messages, from every PE of the team, so it
// knows whether all keys were equal; the data waits in the team's net area
// (never in dest) until they are. A short call is thus one pattern: for
// two PEs one message each way, one network latency. A long one uses the
// pattern for its keys only, in place of a sync of the team, and then
// moves its data as before (Rabenseifner's reduction, the binomial tree).
//
// The net area of a team holds, for each parity of the team's net calls
// (numbered alike on every PE, as every PE makes the team's collectives in
// the same order), netSlots slots of netSlot bytes: netHdr bytes of keys,
// then up to netPushMax bytes of data. Slot i of parity q has its signal
// word sigNet+2i+q, which counts the messages into the slot. Each
// algorithm sends at most one message per call into each slot of a PE,
// and who sends to whom depends on the team's size only: PEs that passed
// different arguments (a long vector and a short one, other roots) send
// and wait for the same messages, which differ in their data only.
//
// Back-to-back calls need nothing more. A PE that sends into PE X's slot
// in call c+2 has finished call c+1, so it has heard from X's part of
// c+1: X had started c+1, so it had read every slot of call c, the call
// that used the same parity. And a message of call c+2 cannot raise a
// signal word before X waits for that word in call c (so the count of a
// word says that the message of the call waited for is there, whoever
// sent it). Messages of call c+1 use the other parity's slots and words.
//
// The root of a broadcast whose data is pushed is the exception: it sends
// and returns (its messages carry its own key only, and the other PEs
// find any difference), leaving the messages into its slots owed
// (collState.owed) until the start of its next collective of the team
// (beginColl), or Destroy, or Finalize, which wait for them (settle) and,
// when their keys differ, join the other PEs' sync of argsMismatch. The
// argument above holds with that wait in place of the root's: a PE Y
// that sends into X's slot in call c+2 has heard of X's part of c+1 (Y
// the root of c+1 waited for its messages of c+1 at the start of c+2;
// they come through chains of PEs that each send after their receives of
// the earlier rounds, from every PE), which X began once it had read, or
// waited for, every message of call c. And a message of c+2 still cannot
// raise a word of X before X waited for it in c. The root of
// a call sends nothing that depends on what it receives, so the other
// PEs' chains of keys that would pass through it lose what it heard: the
// PE just before the root, which by round k has heard of every PE the
// root would have, relays its keys in round k > 0 to the PE the root sends
// to in that round (in the same slot, at netRelay, on the same word).
// No message is in flight to a PE that has finished a call and settled
// what it owes, so a team's slot may be cleared for a later team once
// every PE destroyed it.

// netHdr is the bytes of a message's keys (the least and the greatest),
// before its data.
const netHdr = 16

// netPushMax is the most data, in bytes, that a message of the net pattern
// pushes: a reduction or a broadcast of at most that many bytes moves its
// data in the pattern (collect and fcollect: when every block fits its
// share of a slot). Its bound is the heap, not the speed: every team slot
// of every PE of a job across nodes holds 2*ceil(log2 npes) slots of it
// (610 KB of team pool in all for 2 PEs, where it is 348 KB without the
// net area, as in a job on one node). Pushing
// still won above it (SumReduce over tcp on one host, 2 and 4 PEs: 8 KiB
// and 16 KiB took about a third of Rabenseifner's time, whose gets go in
// software over tcp).
const netPushMax = 4 << 10

// netSlot is the bytes of a slot of the net area, in whole cache lines.
const netSlot = (netHdr + netPushMax + counterStride - 1) / counterStride * counterStride

// netRelay is the offset in a slot of the keys that the PE before a
// broadcast's root relays (see above), past the data of any broadcast.
const netRelay = netSlot - netHdr

var _ [netRelay - netHdr - netPushMax]struct{} // the relayed keys follow the data

// sigNet is the first signal word of the net slots.
const sigNet = 64

// netSlots is the number of slots of each parity: one per round of a log2
// pattern over the job's PEs. (A reduction over n PEs, not a power of two,
// has its fold in the slot of round log2(p) for the largest power of two p
// below n, a round it does not have.)
func netSlots() int { return max(1, bits.Len(uint(st.npes-1))) }

// netAreaSize is the bytes of a team's net area. A team's calls use either
// its staged area (on one node) or its net area, so the two share the
// place (collAreaSize). A job in which every PE maps every other's heap
// has no team across nodes, and no net area.
func netAreaSize() uintptr {
	if !st.netColls {
		return 0
	}
	return uintptr(2*netSlots()) * netSlot
}

// netCall is this PE's view of one call of the net pattern.
type netCall struct {
	cs      *collState
	routine string
	par     int    // the parity of the call
	lo, hi  uint64 // the least and greatest key heard of
}

// netBegin starts the team's next net call with the arguments a: it
// publishes them for argsMismatch, and folds their key (with the
// collective word's) into the keys the call's messages carry.
func (cs *collState) netBegin(routine string, a collArgs) netCall {
	key := cs.team.argsKey(a)
	cs.nseq++
	return netCall{cs: cs, routine: routine, par: int(cs.nseq & 1), lo: key, hi: key}
}

// owe leaves the messages into slots 0..k-1 of the call to be waited for
// before the team's next collective on this PE (settle).
func (c *netCall) owe(k int) {
	c.cs.owed, c.cs.owedPar, c.cs.owedKey = k, c.par, c.lo
}

// settle waits for the messages of the team's last net call that this PE
// left owed (see owe), which are in flight or here. Their keys tell
// whether the other PEs found different arguments; they then wait in
// argsMismatch's sync, which this PE joins (its collective word and
// arguments still those of that call).
func (cs *collState) settle(routine string) {
	c := netCall{cs: cs, routine: routine, par: cs.owedPar, lo: cs.owedKey, hi: cs.owedKey}
	for i := range cs.owed {
		c.recv(i, 0)
	}
	cs.owed = 0
	if !c.agreed() {
		cs.team.syncKey(routine, 0)
	}
}

// settleColl settles the owed messages of every team of this heap (see
// owe): Finalize calls it before the heap goes.
func settleColl() {
	for _, cs := range collStates {
		if cs != nil && cs.owed > 0 && cs.heap == st.heap {
			cs.settle("Finalize")
		}
	}
}

// slotOff returns the heap offset of slot i of the call's parity.
func (c *netCall) slotOff(i int) uintptr {
	return c.cs.stage + uintptr(2*i+c.par)*netSlot
}

// send writes the keys heard of into msg's header and sends msg (header
// and data) into slot i of the team's PE j, with a signal. msg is this
// PE's private memory or a slot of its own heap; it may be changed once
// send returns.
func (c *netCall) send(j, i int, msg []byte) {
	c.sendAt(j, i, 0, msg)
}

// sendAt is send to offset at of the slot: 0, or netRelay for relayed
// keys.
func (c *netCall) sendAt(j, i int, at uintptr, msg []byte) {
	binary.LittleEndian.PutUint64(msg, c.lo)
	binary.LittleEndian.PutUint64(msg[8:], c.hi)
	c.cs.putSignal(c.routine, c.cs.team.members[j], c.slotOff(i)+at, msg, sigNet+2*i+c.par)
}

// recv waits for the message into slot i, folds in its keys, and returns
// the slot's header and its first n data bytes.
func (c *netCall) recv(i, n int) []byte {
	c.cs.wait(sigNet+2*i+c.par, 1)
	return c.fold(c.slotOff(i), n)
}

// recvRelayed is recv of slot i that also waits for the keys relayed into
// it (at netRelay) and folds them in.
func (c *netCall) recvRelayed(i, n int) []byte {
	c.cs.wait(sigNet+2*i+c.par, 2)
	c.fold(c.slotOff(i)+netRelay, 0)
	return c.fold(c.slotOff(i), n)
}

// fold folds in the keys at heap offset off and returns them with the n
// data bytes after them.
func (c *netCall) fold(off uintptr, n int) []byte {
	b := localBytes(off, netHdr+n)
	c.lo = min(c.lo, atomic.LoadUint64((*uint64)(unsafe.Pointer(&b[0]))))
	c.hi = max(c.hi, atomic.LoadUint64((*uint64)(unsafe.Pointer(&b[8]))))
	return b
}

// agreed reports, at the end of the pattern, whether every PE passed the
// same key.
func (c *netCall) agreed() bool { return c.lo == c.hi }

// buf returns a private buffer of n bytes, 8-byte aligned, for a message
// that starts in this PE's memory.
func (c *netCall) buf(n int) []byte {
	words := (n + 7) / 8
	if len(c.cs.net) < words {
		c.cs.net = make([]uint64, words)
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(c.cs.net))), n)
}

// netLensFit reports whether a message of the dissemination allgather of
// n PEs (collectNet) fits a slot with the lengths of the blocks it
// carries: for up to about a thousand PEs. A larger team's collect
// gathers the lengths into the length words of its area instead
// (collWordsSize), as the data of blocks that do not fit go by puts.
func netLensFit(n int) bool { return n < 2 || netHdr+8*bruckMost(n) <= netSlot }

// netVec views the data of a message (after its header) as nr elements
// of T.
func netVec[T any](msg []byte, nr int) []T {
	if nr == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&msg[netHdr])), nr)
}
