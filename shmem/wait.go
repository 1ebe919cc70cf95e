package shmem

import (
	"context"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// Point-to-point synchronization: a PE waits for, or tests, symmetric
// variables of its own that other PEs update with puts, atomics and
// signals. The routines on arrays (All, Any, Some and their Vector forms)
// take a status mask, documented at WaitUntilAll; where the C routines
// return SIZE_MAX, the Any forms return -1.

// loadPoint atomically loads a point-to-point synchronization variable.
func loadPoint[T Point](p *T) T {
	var z T
	switch unsafe.Sizeof(z) {
	case 2:
		// No 16-bit atomic load in Go: load the aligned 32-bit word around it.
		shift := uintptr(unsafe.Pointer(p)) & 3
		w := atomic.LoadUint32((*uint32)(unsafe.Add(unsafe.Pointer(p), -int(shift))))
		return T(uint16(w >> (shift * 8)))
	case 4:
		return T(atomic.LoadUint32((*uint32)(unsafe.Pointer(p))))
	default:
		return T(atomic.LoadUint64((*uint64)(unsafe.Pointer(p))))
	}
}

func compare[T Point](a T, cmp Cmp, b T) bool {
	switch cmp {
	case CmpEQ:
		return a == b
	case CmpNE:
		return a != b
	case CmpGT:
		return a > b
	case CmpGE:
		return a >= b
	case CmpLT:
		return a < b
	case CmpLE:
		return a <= b
	}
	panic(fmt.Sprintf("shmem: invalid comparison %d (valid: CmpEQ..CmpLE)", int(cmp)))
}

func checkCmp(routine string, cmp Cmp) {
	if cmp < CmpEQ || cmp > CmpLE {
		panic(fmt.Sprintf("shmem.%s: invalid comparison %d (valid: CmpEQ..CmpLE)", routine, int(cmp)))
	}
}

func checkPoint[T Point](routine string, p *T) {
	mustInit(routine)
	var z T
	size := unsafe.Sizeof(z)
	offsetOf(routine, "ivar", unsafe.Pointer(p), int(size))
	if uintptr(unsafe.Pointer(p))%size != 0 {
		badAlign(routine, "ivar", unsafe.Pointer(p), size)
	}
}

// checkPoints checks the arguments of the routines on arrays of variables.
// values is nil for the routines that compare with one value.
func checkPoints[T Point](routine string, ivars []T, status []int, cmp Cmp, values []T) {
	mustInit(routine)
	checkCmp(routine, cmp)
	if status != nil && len(status) != len(ivars) {
		panic(fmt.Sprintf("shmem.%s: status has %d elements, ivars %d (valid: nil or as many as ivars)", routine, len(status), len(ivars)))
	}
	if values != nil && len(values) != len(ivars) {
		panic(fmt.Sprintf("shmem.%s: cmpValues has %d elements, ivars %d (valid: as many as ivars)", routine, len(values), len(ivars)))
	}
	if len(ivars) == 0 {
		return
	}
	var z T
	size := unsafe.Sizeof(z)
	p := unsafe.Pointer(unsafe.SliceData(ivars))
	offsetOf(routine, "ivars", p, len(ivars)*int(size))
	if uintptr(p)%size != 0 {
		badAlign(routine, "ivars", p, size)
	}
}

func checkIndices(routine string, indices []int, n int) {
	if len(indices) < n {
		panic(fmt.Sprintf("shmem.%s: indices has room for %d elements, fewer than the %d of ivars", routine, len(indices), n))
	}
}

// satisfied reports whether ivars[i] compares as asked, with values[i] or,
// when values is nil, with v.
func satisfied[T Point](ivars []T, i int, cmp Cmp, v T, values []T) bool {
	if values != nil {
		v = values[i]
	}
	return compare(loadPoint(&ivars[i]), cmp, v)
}

func excluded(status []int, i int) bool { return status != nil && status[i] != 0 }

// testAll reports whether every element that is not excluded satisfies
// the condition, testing each only until one fails.
func testAll[T Point](ivars []T, status []int, cmp Cmp, v T, values []T) bool {
	for i := range ivars {
		if !excluded(status, i) && !satisfied(ivars, i, cmp, v, values) {
			return false
		}
	}
	return true
}

// testAny returns the index of the first element that is not excluded and
// satisfies the condition, -1 if none does, and whether any element is
// not excluded.
func testAny[T Point](ivars []T, status []int, cmp Cmp, v T, values []T) (int, bool) {
	some := false
	for i := range ivars {
		if excluded(status, i) {
			continue
		}
		some = true
		if satisfied(ivars, i, cmp, v, values) {
			return i, true
		}
	}
	return -1, some
}

// testSome stores the indexes of the elements that are not excluded and
// satisfy the condition in indices, and returns how many there are and
// whether any element is not excluded.
func testSome[T Point](ivars []T, indices, status []int, cmp Cmp, v T, values []T) (int, bool) {
	n, some := 0, false
	for i := range ivars {
		if excluded(status, i) {
			continue
		}
		some = true
		if satisfied(ivars, i, cmp, v, values) {
			indices[n] = i
			n++
		}
	}
	return n, some
}

func waitAll[T Point](routine string, ivars []T, status []int, cmp Cmp, v T, values []T) {
	w := waiter{what: routine, on: waitForArray(ivars, cmp, v, values)}
	// Elements are waited for in order: one that satisfied the condition
	// once is not waited for again.
	for i := range ivars {
		for !excluded(status, i) && !satisfied(ivars, i, cmp, v, values) {
			w.pause()
		}
	}
	w.done()
}

func waitAny[T Point](routine string, ivars []T, status []int, cmp Cmp, v T, values []T) int {
	w := waiter{what: routine, on: waitForArray(ivars, cmp, v, values)}
	defer w.done()
	for {
		i, some := testAny(ivars, status, cmp, v, values)
		if i >= 0 || !some {
			return i
		}
		w.pause()
	}
}

func waitSome[T Point](routine string, ivars []T, indices, status []int, cmp Cmp, v T, values []T) int {
	w := waiter{what: routine, on: waitForArray(ivars, cmp, v, values)}
	defer w.done()
	for {
		n, some := testSome(ivars, indices, status, cmp, v, values)
		if n > 0 || !some {
			return n
		}
		w.pause()
	}
}

// WaitUntil waits until the symmetric object *ivar, updated by other PEs,
// compares to v as cmp says (shmem_wait_until).
func WaitUntil[T Point](ivar *T, cmp Cmp, v T) {
	checkPoint("WaitUntil", ivar)
	checkCmp("WaitUntil", cmp)
	w := waiter{what: "WaitUntil", on: waitFor(ivar, 1, cmp, v, false)}
	for !compare(loadPoint(ivar), cmp, v) {
		w.pause()
	}
	w.done()
}

// ctxPolls is how often, in pauses, the waits with a context.Context look
// at it.
const ctxPolls = 64

// WaitUntilContext is WaitUntil that gives up when ctx is done, returning
// an error that wraps ctx.Err(); it returns nil once *ivar compares to v.
func WaitUntilContext[T Point](ctx context.Context, ivar *T, cmp Cmp, v T) error {
	checkPoint("WaitUntilContext", ivar)
	checkCmp("WaitUntilContext", cmp)
	w := waiter{what: "WaitUntilContext", on: waitFor(ivar, 1, cmp, v, false)}
	defer w.done()
	for !compare(loadPoint(ivar), cmp, v) {
		if w.n%ctxPolls == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("shmem.WaitUntilContext: %w", err)
			}
		}
		w.pause()
	}
	return nil
}

// WaitUntilAll waits until every element of the symmetric array ivars that
// status does not exclude compares to v as cmp says
// (shmem_wait_until_all). It returns at once when ivars is empty or every
// element is excluded.
//
// The status mask of this and the other routines on arrays: status[i] != 0
// excludes ivars[i]; a nil status excludes nothing, and a non-nil one must
// have len(ivars) elements. ivars must be a symmetric array aligned to the
// size of T. Bad arguments (a status or index slice of the wrong length,
// ivars outside the symmetric heap, an invalid cmp) panic.
func WaitUntilAll[T Point](ivars []T, status []int, cmp Cmp, v T) {
	checkPoints("WaitUntilAll", ivars, status, cmp, nil)
	waitAll("WaitUntilAll", ivars, status, cmp, v, nil)
}

// WaitUntilAny waits until an element of the symmetric array ivars that
// status does not exclude compares to v as cmp says, and returns its index
// (shmem_wait_until_any); when several do, the lowest. It returns -1 at
// once when ivars is empty or every element is excluded.
func WaitUntilAny[T Point](ivars []T, status []int, cmp Cmp, v T) int {
	checkPoints("WaitUntilAny", ivars, status, cmp, nil)
	return waitAny("WaitUntilAny", ivars, status, cmp, v, nil)
}

// WaitUntilSome waits until at least one element of the symmetric array
// ivars that status does not exclude compares to v as cmp says, stores the
// indexes of all those that do, in increasing order, at the start of
// indices, and returns how many it stored (shmem_wait_until_some). indices
// must have room for len(ivars) indexes. It returns 0 at once when ivars is
// empty or every element is excluded.
func WaitUntilSome[T Point](ivars []T, indices []int, status []int, cmp Cmp, v T) int {
	checkPoints("WaitUntilSome", ivars, status, cmp, nil)
	checkIndices("WaitUntilSome", indices, len(ivars))
	return waitSome("WaitUntilSome", ivars, indices, status, cmp, v, nil)
}

// WaitUntilAllVector is WaitUntilAll with a value per element: ivars[i] is
// compared to cmpValues[i] (shmem_wait_until_all_vector). cmpValues must
// have len(ivars) elements.
func WaitUntilAllVector[T Point](ivars []T, status []int, cmp Cmp, cmpValues []T) {
	checkPoints("WaitUntilAllVector", ivars, status, cmp, nonNil(cmpValues))
	var z T
	waitAll("WaitUntilAllVector", ivars, status, cmp, z, nonNil(cmpValues))
}

// WaitUntilAnyVector is WaitUntilAny with a value per element
// (shmem_wait_until_any_vector); -1 when nothing can satisfy it.
func WaitUntilAnyVector[T Point](ivars []T, status []int, cmp Cmp, cmpValues []T) int {
	checkPoints("WaitUntilAnyVector", ivars, status, cmp, nonNil(cmpValues))
	var z T
	return waitAny("WaitUntilAnyVector", ivars, status, cmp, z, nonNil(cmpValues))
}

// WaitUntilSomeVector is WaitUntilSome with a value per element
// (shmem_wait_until_some_vector).
func WaitUntilSomeVector[T Point](ivars []T, indices []int, status []int, cmp Cmp, cmpValues []T) int {
	checkPoints("WaitUntilSomeVector", ivars, status, cmp, nonNil(cmpValues))
	checkIndices("WaitUntilSomeVector", indices, len(ivars))
	var z T
	return waitSome("WaitUntilSomeVector", ivars, indices, status, cmp, z, nonNil(cmpValues))
}

// nonNil makes a nil slice of values an empty one, so that it is told
// apart from "no vector".
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// Test reports whether *ivar compares to v as cmp says (shmem_test).
func Test[T Point](ivar *T, cmp Cmp, v T) bool {
	checkPoint("Test", ivar)
	checkCmp("Test", cmp)
	if compare(loadPoint(ivar), cmp, v) {
		return true
	}
	st.worker.Progress()
	return false
}

// tested drives progress after a test that failed, so that a loop of tests
// moves.
func tested(ok bool) bool {
	if !ok {
		st.worker.Progress()
	}
	return ok
}

// TestAll reports whether every element of the symmetric array ivars that
// status does not exclude compares to v as cmp says (shmem_test_all); true
// when ivars is empty or every element is excluded.
func TestAll[T Point](ivars []T, status []int, cmp Cmp, v T) bool {
	checkPoints("TestAll", ivars, status, cmp, nil)
	return tested(testAll(ivars, status, cmp, v, nil))
}

// TestAny returns the index of an element of the symmetric array ivars that
// status does not exclude and that compares to v as cmp says, the lowest
// when several do, or -1 when none does (shmem_test_any).
func TestAny[T Point](ivars []T, status []int, cmp Cmp, v T) int {
	checkPoints("TestAny", ivars, status, cmp, nil)
	i, _ := testAny(ivars, status, cmp, v, nil)
	tested(i >= 0)
	return i
}

// TestSome stores the indexes of the elements of the symmetric array ivars
// that status does not exclude and that compare to v as cmp says, in
// increasing order, at the start of indices, and returns how many it stored
// (shmem_test_some). indices must have room for len(ivars) indexes.
func TestSome[T Point](ivars []T, indices []int, status []int, cmp Cmp, v T) int {
	checkPoints("TestSome", ivars, status, cmp, nil)
	checkIndices("TestSome", indices, len(ivars))
	n, _ := testSome(ivars, indices, status, cmp, v, nil)
	tested(n > 0)
	return n
}

// TestAllVector is TestAll with a value per element: ivars[i] is compared
// to cmpValues[i] (shmem_test_all_vector). cmpValues must have len(ivars)
// elements.
func TestAllVector[T Point](ivars []T, status []int, cmp Cmp, cmpValues []T) bool {
	checkPoints("TestAllVector", ivars, status, cmp, nonNil(cmpValues))
	var z T
	return tested(testAll(ivars, status, cmp, z, nonNil(cmpValues)))
}

// TestAnyVector is TestAny with a value per element
// (shmem_test_any_vector).
func TestAnyVector[T Point](ivars []T, status []int, cmp Cmp, cmpValues []T) int {
	checkPoints("TestAnyVector", ivars, status, cmp, nonNil(cmpValues))
	var z T
	i, _ := testAny(ivars, status, cmp, z, nonNil(cmpValues))
	tested(i >= 0)
	return i
}

// TestSomeVector is TestSome with a value per element
// (shmem_test_some_vector).
func TestSomeVector[T Point](ivars []T, indices []int, status []int, cmp Cmp, cmpValues []T) int {
	checkPoints("TestSomeVector", ivars, status, cmp, nonNil(cmpValues))
	checkIndices("TestSomeVector", indices, len(ivars))
	var z T
	n, _ := testSome(ivars, indices, status, cmp, z, nonNil(cmpValues))
	tested(n > 0)
	return n
}
