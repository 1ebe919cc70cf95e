package shmem_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unsafe"

	"github.com/goshmem/goshmem/shmem"
	"github.com/goshmem/goshmem/shmemtest"
)

// debugJob runs body as every PE of a job of np PEs with SHMEM_DEBUG=1,
// between Init and Finalize, and check with the job's output.
func debugJob(t *testing.T, np int, check func(t *testing.T, out string), body func(t *testing.T, me, n int)) {
	t.Helper()
	debugJobOver(t, np, []shmemtest.Transport{shmemtest.SharedMemory}, check, body)
}

// debugJobOver is debugJob over each of the transports trs.
func debugJobOver(t *testing.T, np int, trs []shmemtest.Transport, check func(t *testing.T, out string), body func(t *testing.T, me, n int)) {
	t.Helper()
	shmemtest.RunWith(t, shmemtest.Options{Shared: true, NPs: []int{np}, Transports: trs, Env: []string{"SHMEM_DEBUG=1"}, Check: check}, func(t *testing.T) {
		body(t, shmem.MyPE(), shmem.NPEs())
	})
}

// TestDebugMismatchedMalloc: with SHMEM_DEBUG, allocation calls that differ
// among the PEs fail on every PE, naming the call and the PE, and the heap
// stays usable.
func TestDebugMismatchedMalloc(t *testing.T) {
	debugJob(t, 3, func(t *testing.T, out string) {
		for _, want := range []string{
			"goshmem: PE 0: SHMEM_DEBUG: shmem.Malloc: the PEs made different allocation calls: PEs 0, 2: allocation call #1, Malloc[int64](20): 160 bytes, alignment 8; PE 1: allocation call #1, Malloc[int64](10): 80 bytes, alignment 8",
			"goshmem: PE 2: SHMEM_DEBUG: shmem.Calloc: the PEs made different allocation calls",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("output does not report %q:\n%s", want, out)
			}
		}
	}, func(t *testing.T, me, n int) {
		// PE 1 asks for 10 elements, the others for 20.
		size := 20
		if me == 1 {
			size = 10
		}
		_, err := shmem.Malloc[int64](size)
		if !errors.Is(err, shmem.ErrDebugMismatch) || !strings.Contains(err.Error(), "PE 1: allocation call #1, Malloc[int64](10): 80 bytes") {
			t.Fatalf("mismatched Malloc: %v, want ErrDebugMismatch naming PE 1", err)
		}
		// PE 2 calls Calloc where the others call Malloc.
		if me == 2 {
			_, err = shmem.Calloc[int64](4)
		} else {
			_, err = shmem.Malloc[int64](4)
		}
		if !errors.Is(err, shmem.ErrDebugMismatch) || !strings.Contains(err.Error(), "PEs 0, 1: allocation call #2, Malloc[int64](4): 32 bytes, alignment 8; PE 2: allocation call #2, Calloc[int64](4): 32 bytes, alignment 8") {
			t.Fatalf("Calloc against Malloc: %v", err)
		}
		// Matching calls work, hints included.
		a, err := shmem.Malloc[int64](4)
		if err != nil {
			t.Fatalf("matching Malloc: %v", err)
		}
		h, err := shmem.MallocWithHints[uint64](2, shmem.MallocSignalRemote)
		if err != nil {
			t.Fatalf("matching MallocWithHints: %v", err)
		}
		b, err := shmem.Calloc[int64](4)
		if err != nil {
			t.Fatalf("matching Calloc: %v", err)
		}
		// Different hints are a mismatch too.
		hints := shmem.MallocAtomicsRemote
		if me == 0 {
			hints = 0
		}
		if _, err := shmem.MallocWithHints[uint64](1, hints); !errors.Is(err, shmem.ErrDebugMismatch) {
			t.Errorf("MallocWithHints with different hints: %v", err)
		}
		// Freeing different objects panics on every PE.
		wrong := a
		if me == n-1 {
			wrong = b
		}
		checkPanic(t, "Free of different objects", func() { shmem.Free(wrong) }, fmt.Sprintf("PE %d: allocation call #7, Free[int64](object at heap offset", n-1))
		// And the heap works afterwards.
		shmem.P(&a[me], int64(me+1), 0)
		shmem.BarrierAll()
		if me == 0 {
			for pe := 0; pe < n; pe++ {
				if a[pe] != int64(pe+1) {
					t.Errorf("slot %d = %d after P", pe, a[pe])
				}
			}
		}
		shmem.BarrierAll()
		shmem.Free(h)
		shmem.Free(b)
		shmem.Free(a)
	})
}

// TestDebugRangeChecks: with SHMEM_DEBUG, the routines refuse a range that
// runs past its object or lies in freed memory, which the heap bounds
// alone allow.
func TestDebugRangeChecks(t *testing.T) {
	debugJob(t, 2, nil, func(t *testing.T, me, n int) {
		x := calloc[int64](t, 4)
		y := calloc[int64](t, 4)
		src := []int64{1, 2}
		past := unsafe.Slice(&x[3], 2) // one element of x and one past it
		checkPanic(t, "Put past the end of its object", func() { shmem.Put(past, src, (me+1)%n) }, "runs past the end of its object (32 bytes")
		shmem.Free(y)
		checkPanic(t, "Put into a freed object", func() { shmem.Put(y[:2], src, (me+1)%n) }, "is not inside an allocated object")
		checkPanic(t, "atomic on a freed object", func() { shmem.AtomicAdd(&y[0], 1, 0) }, "AtomicAdd: SHMEM_DEBUG: dest")
		// In range: fine. Realloc moves the object and the check follows.
		shmem.Put(x[2:4], src, (me+1)%n)
		x, err := shmem.Realloc(x, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if x[2] != 1 || x[3] != 2 {
			t.Errorf("Realloc lost the contents: %v", x[:4])
		}
		shmem.P(&x[999], 7, (me+1)%n)
		shmem.BarrierAll()
		if x[999] != 7 {
			t.Errorf("P into the reallocated object: %d", x[999])
		}
		shmem.BarrierAll()
		shmem.Free(x)
	})
}

// TestMallocWithHints: the hints are accepted, the objects work as targets
// of atomics and signals, and unknown hints are an error.
func TestMallocWithHints(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		ctr, err := shmem.MallocWithHints[int64](1, shmem.MallocAtomicsRemote)
		if err != nil {
			t.Fatal(err)
		}
		sig, err := shmem.MallocWithHints[uint64](1, shmem.MallocSignalRemote|shmem.MallocAtomicsRemote)
		if err != nil {
			t.Fatal(err)
		}
		plain, err := shmem.MallocWithHints[int64](3, 0)
		if err != nil {
			t.Fatal(err)
		}
		ctr[0], sig[0] = 0, 0
		shmem.BarrierAll()
		for pe := 0; pe < n; pe++ {
			shmem.AtomicAdd(&ctr[0], int64(me+1), pe)
		}
		to := (me + 1) % n
		shmem.PutSignal(plain, []int64{int64(me), 2, 3}, &sig[0], 1, shmem.SignalAdd, to)
		shmem.SignalWaitUntil(&sig[0], shmem.CmpEQ, 1)
		if from := (me - 1 + n) % n; plain[0] != int64(from) {
			t.Errorf("data with the signal: %v, want [%d 2 3]", plain, from)
		}
		shmem.BarrierAll()
		if want := int64(n * (n + 1) / 2); ctr[0] != want {
			t.Errorf("counter = %d, want %d", ctr[0], want)
		}
		if _, err := shmem.MallocWithHints[int64](1, 1<<7); err == nil || !strings.Contains(err.Error(), "unknown hints") {
			t.Errorf("unknown hints: %v", err)
		}
		shmem.BarrierAll()
		shmem.Free(plain)
		shmem.Free(sig)
		shmem.Free(ctr)
	})
}
