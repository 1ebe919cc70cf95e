package shmem

import (
	"context"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// Distributed locks (shmem_set_lock, shmem_clear_lock, shmem_test_lock).
//
// A lock is a symmetric int64 that is zero on every PE before its first use
// (from Calloc, or set to zero and followed by a barrier). It is a queue
// lock in the manner of Mellor-Crummey and Scott, kept in the two 32-bit
// halves of the lock word:
//
//   - the tail: the low half of the word on the lock's home PE (chosen from
//     the word's heap offset, so different locks spread over the PEs)
//     holds 1 + the PE that asked last, or 0 when the lock is free;
//   - the node: the high half of the word on each PE holds, once that PE
//     queues behind another, 1 + the PE queued behind it (bits 1..31) and
//     whether the lock was handed to it (bit 0).
//
// To acquire, a PE clears its node, swaps itself into the tail, and, if
// another PE was there, writes itself into that PE's node and waits on its
// own node for the hand-over. To release, a PE takes itself out of the tail
// with a compare-and-swap; if a PE queued behind it meanwhile, it waits for
// that PE to write its number and hands the lock over. The lock is granted
// in the order of the swaps (first come, first served: no PE starves),
// waiting PEs poll only their own memory, and everything that reaches
// another PE is a 32-bit atomic, which every transport carries (in
// software over tcp).

const lockHandOver = 1

// lockWords checks a lock and returns its tail (on the home PE), this PE's
// node, and the home PE.
func lockWords(routine string, lock *int64) (tail, node *uint32, home int) {
	mustInit(routine)
	off, _ := offsetOf(routine, "lock", unsafe.Pointer(lock), 8)
	if uintptr(unsafe.Pointer(lock))%8 != 0 {
		badAlign(routine, "lock", unsafe.Pointer(lock), 8)
	}
	tail = (*uint32)(unsafe.Pointer(lock))
	node = (*uint32)(unsafe.Add(unsafe.Pointer(lock), 4))
	return tail, node, int(off / 8 % uintptr(st.npes))
}

// SetLock acquires the distributed lock *lock, waiting until no other PE
// holds it (shmem_set_lock). PEs waiting for a lock get it in the order
// they asked. A PE must not ask for a lock it holds. lock must be a
// symmetric int64, zero on every PE before the first use of the lock, and
// is used by the lock routines only.
func SetLock(lock *int64) {
	tail, node, home := lockWords("SetLock", lock)
	me := uint32(st.me + 1)
	atomic.StoreUint32(node, 0)
	prev := amoFetching(&defaultCtx, "SetLock", tail, home, amoSwap, me, 0)
	if prev == 0 {
		return
	}
	// Queue behind prev; the fetch makes sure prev has it before this PE
	// waits.
	amoFetching(&defaultCtx, "SetLock", node, int(prev-1), amoAdd, me<<1, 0)
	w := waiter{what: "SetLock", on: waitForLock(lock, int(prev-1))}
	for atomic.LoadUint32(node)&lockHandOver == 0 {
		w.pause()
	}
	w.done()
}

// SetLockContext acquires the distributed lock *lock as SetLock does, or
// gives up when ctx is done, returning an error that wraps ctx.Err() and
// holding nothing. Unlike SetLock it does not join the lock's queue (a
// queued PE cannot leave it): it takes the lock when it finds it free, as
// TestLock, and so may come after PEs that asked with SetLock later.
func SetLockContext(ctx context.Context, lock *int64) error {
	lockWords("SetLockContext", lock)
	w := waiter{what: "SetLockContext", on: waitForLock(lock, -1)}
	defer w.done()
	for !TestLock(lock) {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("shmem.SetLockContext: %w", err)
		}
		// TestLock is a round trip to the lock's home PE: pause between
		// tries, ever longer, up to a few hundred.
		for range min(1+w.n/16, 256) {
			w.pause()
		}
	}
	return nil
}

// ClearLock releases the distributed lock *lock, which this PE holds
// (shmem_clear_lock), after completing every operation this PE issued on
// the default context (as Quiet does), so that the next holder sees what
// this one wrote. The next PE in line, if any, gets the lock.
func ClearLock(lock *int64) {
	tail, node, home := lockWords("ClearLock", lock)
	Quiet()
	me := uint32(st.me + 1)
	if amoFetching(&defaultCtx, "ClearLock", tail, home, amoCSwap, 0, me) == me {
		return // nobody behind
	}
	// A PE swapped itself in behind this one: wait until it has written
	// its number into this PE's node, then hand the lock over.
	w := waiter{what: "ClearLock", on: waitForLock(lock, -1)}
	next := atomic.LoadUint32(node) >> 1
	for next == 0 {
		w.pause()
		next = atomic.LoadUint32(node) >> 1
	}
	w.done()
	amoFetching(&defaultCtx, "ClearLock", node, int(next-1), amoAdd, lockHandOver, 0)
}

// TestLock acquires the distributed lock *lock if no PE holds it or waits
// for it, and reports whether it did (shmem_test_lock, whose C form returns
// 0 when it acquired the lock). It never waits. The rules of SetLock apply.
func TestLock(lock *int64) bool {
	tail, node, home := lockWords("TestLock", lock)
	atomic.StoreUint32(node, 0)
	return amoFetching(&defaultCtx, "TestLock", tail, home, amoCSwap, uint32(st.me+1), 0) == 0
}
