// Package worldsync is how package shmem lends the world team's barrier to
// a binding that runs it without calling into Go (capi, the C library,
// where a call into Go costs about as much as the whole barrier): the
// places of the barrier's words in the mapped heaps, and the functions a
// binding calls for the parts that stay in Go.
//
// The binding runs the same dissemination as shmem's barrierState, word
// for word, so that a PE may pass one barrier in C and the next in Go, and
// a C PE and a Go PE may meet in one (see shmem's BarrierAll).
package worldsync

import (
	"sync/atomic"
	"unsafe"
)

// Layout is the world barrier of an initialized PE whose barrier is a
// dissemination over PEs whose heaps it maps.
type Layout struct {
	// Number is this PE's barrier number: each barrier adds one to it
	// first, and it is the value the round counters are brought to.
	Number *uint64
	// CollWord is this PE's collective word of the world team: call
	// number << 9 | kind << 1 | 1 while the PE is in a collective (the
	// stall checks read it), its key (the word without bit 0) the same on
	// every PE of a barrier of one kind.
	CollWord *uint64
	// Own and Peer are the cache lines of round k of the dissemination:
	// this PE's, and that of the PE it signals in round k, mapped here.
	// Word 0 is the round's counter, words 1 and 2 the least and greatest
	// key of barriers of even number, words 3 and 4 of odd ones.
	Own, Peer []unsafe.Pointer
	// BarrierAll and SyncAll are the collective kinds of shmem_barrier_all
	// and shmem_sync_all.
	BarrierAll, SyncAll uint64
	// Spin is how many loads a wait makes, a CPU pause between two,
	// before it calls Wait: shmem's spin budget (a call into Go costs more
	// than a barrier, so the budget is the whole of a dedicated core's,
	// not the loads between two progress calls of Go's waits).
	Spin int
	// Wait waits in Go until *p >= v: the part of a wait that lasts,
	// which drives the worker's progress, yields, and serves the stall
	// checks and reports.
	Wait func(p *uint64, v uint64)
	// Mismatch reports that the PEs of a barrier of routine ("BarrierAll"
	// or "SyncAll") made different calls, and ends the job.
	Mismatch func(routine string)
}

var current atomic.Pointer[Layout]

// Publish makes l the layout a binding sees; nil withdraws it (the barrier
// then goes through Go: before Init, after Finalize, or where it is not a
// dissemination over mapped heaps).
func Publish(l *Layout) { current.Store(l) }

// Current returns the published layout, or nil.
func Current() *Layout { return current.Load() }
