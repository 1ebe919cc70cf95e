package shmem

import (
	"encoding/binary"
	"math/bits"
	"sync/atomic"
	"unsafe"

	"github.com/goshmem/goshmem/symheap"
	"github.com/goshmem/goshmem/ucp"
	"github.com/goshmem/goshmem/ucs"
)

// The words of the collectives. Each team slot of the team pool ends with
// an area of collSigs signal words (uint64 counters that only grow). A PE
// signals another by adding one to a word of the other's area; the
// receiver counts, per word, the signals it has waited for
// (collState.expect) and waits until the word reaches its count. Counting, never resetting, makes back-to-back
// calls safe: the algorithms that signal across nodes on the words below
// sigNet start with a sync of the team, or with the net pattern
// (coll_net.go), after which every PE has heard from every other's part of
// the call, so no signal of the next call reaches a PE before it has
// waited for every signal of the current one. The words from sigNet on are
// the net pattern's (see there).
const collSigs = sigNet + 64

// Signal words of the algorithms: a first and a second series with one word
// per round of a log2 algorithm, and two for the folding of the PEs past a
// power of two in the reductions.
const (
	sigA        = 0
	sigB        = 30
	sigFold     = 60
	sigUnfold   = 61
	maxSigRound = sigB - sigA
)

// collAreaSize is the size of the collectives' area of a team slot: the
// signal words, and the staged area (see coll_staged.go) of a team on one
// node or the net area (coll_net.go) of one across nodes, in the same
// place. Init calls it (initTeams) once st.npes is known.
func collAreaSize() uintptr {
	return collWordsSize() + max(stagedAreaSize(), netAreaSize())
}

// collWordsSize is the size of the signal words of a team's collectives'
// area, and, in a job across nodes too large for the net pattern to carry
// Collect's lengths (netLensFit), of one length word per PE of the job, in
// whole cache lines.
func collWordsSize() uintptr {
	n := uintptr(collSigs)
	if st.netColls && !netLensFit(st.npes) {
		n += uintptr(st.npes)
	}
	return (n*8 + counterStride - 1) / counterStride * counterStride
}

// collState is this PE's state of the collectives of a team.
type collState struct {
	team *Team
	heap *symheap.Heap // the heap the state belongs to (a new Init makes a new one)
	area uintptr       // heap offset of the team's area
	// direct: every PE of the team maps every other's heap (all agree).
	direct bool
	expect [collSigs]uint64
	tmp    []uint64 // private scratch of the reductions
	// The staged calls (coll_staged.go): the heap offset of the team's
	// staged area, the number of the last call, and a number of a call
	// that every PE of the team is known to have finished.
	stage   uintptr
	seq     uint64
	allDone uint64
	// The net calls (coll_net.go), whose area is at stage: the number of
	// the last one, and the private buffer of their messages.
	nseq uint64
	net  []uint64
	// owed messages into slots 0..owed-1 of parity owedPar, which a
	// broadcast's root of key owedKey left to its next collective of the
	// team (netCall.owe).
	owed, owedPar int
	owedKey       uint64
	lens          []int  // collect's lengths and places
	gather        []byte // collect's blocks
}

// collStates are the states of the teams this PE belongs to, by slot.
var collStates [MaxTeams]*collState

// Record kind of the exchange that sets a team's collectives up.
const recCollSetup = 100

// coll returns the team's collective state, setting it up at the team's
// first collective: an exchange in which every PE reports whether it maps
// every other PE of the team, so that all choose the same algorithms.
func (t *Team) coll(routine string) *collState {
	if cs := collStates[t.slot]; cs != nil && cs.team == t && cs.heap == st.heap {
		return cs
	}
	rounds := bits.Len(uint(st.npes - 1))
	area := t.off + uintptr(1+rounds)*counterStride
	cs := &collState{team: t, heap: st.heap, area: area, stage: area + collWordsSize(), direct: true}
	mine := uint64(1)
	for _, pe := range t.members {
		if !st.peers[pe].mapped {
			mine = 0
		}
	}
	if t.npes > 1 {
		recs := t.exchange(routine, teamRecord{0, recCollSetup, mine})
		for _, r := range recs {
			if r[2] == 0 {
				cs.direct = false
			}
		}
		t.sync(routine)
	}
	collStates[t.slot] = cs
	return cs
}

// word returns this PE's signal word i of the team.
func (cs *collState) word(i int) *uint64 {
	return (*uint64)(st.heap.At(int(cs.area) + i*8))
}

// wait waits until n more signals than before have come on word i.
func (cs *collState) wait(i int, n uint64) {
	cs.expect[i] += n
	waitGE(cs.word(i), cs.expect[i])
}

// signal adds one to signal word i of the job's PE pe.
func (cs *collState) signal(routine string, pe, i int) {
	off := cs.area + uintptr(i)*8
	if q := jobPeer(routine, pe); q.base != nil {
		atomic.AddUint64((*uint64)(unsafe.Add(q.base, off)), 1)
		return
	}
	sendSignal(routine, pe, 0, nil, off)
}

// put2 copies b to heap offset off of the job's PE pe, returning when b may
// be reused.
func put2(routine string, pe int, off uintptr, b []byte) {
	if len(b) == 0 {
		return
	}
	if q := jobPeer(routine, pe); q.base != nil {
		ucs.Copy(unsafe.Slice((*byte)(unsafe.Add(q.base, off)), len(b)), b)
		return
	}
	defaultCtx.putSlow(routine, pe, off, b, false)
}

// putSignal copies b to heap offset off of the job's PE pe and then adds
// one to its signal word i: a PE that sees the signal sees the data.
func (cs *collState) putSignal(routine string, pe int, off uintptr, b []byte, i int) {
	if q := jobPeer(routine, pe); q.base != nil {
		if len(b) > 0 {
			ucs.Copy(unsafe.Slice((*byte)(unsafe.Add(q.base, off)), len(b)), b)
		}
		// The atomic add orders the copy before the signal.
		atomic.AddUint64((*uint64)(unsafe.Add(q.base, cs.area+uintptr(i)*8)), 1)
		return
	}
	if len(b) <= maxSignalData {
		sendSignal(routine, pe, off, b, cs.area+uintptr(i)*8)
		return
	}
	defaultCtx.putSignalSlow(routine, pe, off, b, cs.area+uintptr(i)*8, amoAdd, 1, false)
}

// amSignal is the id of the active message that brings a collective's data
// and signal to a PE whose heap is not mapped here (collState.signal and
// putSignal): the header holds the heap offsets of the data and of the
// signal word (signalMsgLen bytes), the message's data is the data. The
// handler copies the data, then adds one to the word. That is one message
// where a put, a fence and an atomic were three, and it is complete once
// sent: the next Quiet does not wait for the peer's acknowledgement.
// Data above maxSignalData goes as a put and an atomic.
const (
	amSignal      = 1
	signalMsgLen  = 16
	maxSignalData = 8 << 10
)

// eagerParam sends an active message eagerly (its data in the message).
var eagerParam = new(ucp.RequestParam).SetAMSendFlags(ucp.AMSendFlagEager)

// sendSignal sends b to heap offset off of the job's PE pe, and one to add
// to its signal word at soff, in an amSignal message, behind everything
// this PE sent pe before (puts of the same collective may go by another
// lane: the endpoint's fence orders them).
func sendSignal(routine string, pe int, off uintptr, b []byte, soff uintptr) {
	c := &defaultCtx
	if c.session.Load() != nil {
		c.flushBatch(routine, pe)
	}
	ep := c.remote(routine, pe).ep
	if err := ep.Fence(); err != nil {
		fatal(routine, pe, err)
	}
	w := wireBufs.Get().(*wireBuf)
	h := w.bytes(signalMsgLen)
	binary.LittleEndian.PutUint64(h[0:], uint64(off))
	binary.LittleEndian.PutUint64(h[8:], uint64(soff))
	req, err := ep.AMSendNBX(amSignal, h, b, eagerParam)
	c.wait(routine, pe, req, err)
	wireBufs.Put(w)
}

// recvSignal handles an amSignal message, from the worker's Progress. A
// message whose data or signal word falls outside the heap is dropped.
func recvSignal(_ any, header, data []byte, p *ucp.AMRecvParam) ucs.Status {
	if len(header) != signalMsgLen || p.RecvAttr&ucp.AMRecvAttrFlagRNDV != 0 {
		return ucs.OK
	}
	off := binary.LittleEndian.Uint64(header)
	soff := binary.LittleEndian.Uint64(header[8:])
	size := uint64(st.heapSize)
	if soff%8 != 0 || soff > size-8 || off > size || uint64(len(data)) > size-off {
		return ucs.OK
	}
	if len(data) > 0 {
		ucs.Copy(unsafe.Slice((*byte)(st.heap.At(int(off))), len(data)), data)
	}
	atomic.AddUint64((*uint64)(st.heap.At(int(soff))), 1)
	return ucs.OK
}

// get2 copies len(b) bytes from heap offset off of the job's PE pe into b.
func get2(routine string, pe int, off uintptr, b []byte) {
	if len(b) == 0 {
		return
	}
	if q := jobPeer(routine, pe); q.base != nil {
		ucs.Copy(b, unsafe.Slice((*byte)(unsafe.Add(q.base, off)), len(b)))
		return
	}
	defaultCtx.getSlow(routine, pe, off, b, false)
}

// peerBytes returns the n bytes at heap offset off of the job's PE pe,
// whose heap this PE maps.
func peerBytes(pe int, off uintptr, n int) []byte {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Add(jobPeer("collective", pe).base, off)), n)
}

// localBytes returns the n bytes at heap offset off of this PE.
func localBytes(off uintptr, n int) []byte {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(st.heap.At(int(off))), n)
}

// scratch returns a private scratch array of n elements of T.
func scratch[T any](cs *collState, n int) []T {
	var z T
	words := (n*int(unsafe.Sizeof(z)) + 7) / 8
	if words == 0 {
		return nil
	}
	if len(cs.tmp) < words {
		cs.tmp = make([]uint64, words)
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(cs.tmp))), n)
}
