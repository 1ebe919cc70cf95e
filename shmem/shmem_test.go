package shmem_test

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"

	"github.com/goshmem/goshmem/shmem"
	"github.com/goshmem/goshmem/shmemtest"
	"github.com/goshmem/goshmem/symheap"
	"github.com/goshmem/goshmem/ucs"
)

// nps are the job sizes every routine is tested with (odd sizes included);
// quickNPs those of them that `go test` runs unless the full matrix is
// asked for (GOSHMEM_TEST_FULL=1, as .ci/run does): an odd size, where the
// mixed variant has PEs of both kinds, and, over shared memory only, one
// PE alone (it reaches only itself, whatever the transports).
var (
	nps          = []int{1, 2, 3, 4}
	quickNPs     = []int{3}
	quickNPsSelf = []int{1, 3}
)

// transports are the ways the routines are tested: over shared memory (the
// default), over loopback TCP only (puts on the tcp lane, gets and atomics in
// software), and mixed: odd PEs use only TCP, so the even PEs reach each
// other through shared memory and the odd ones through TCP, and one word is
// hit at once by CPU atomics and software atomics.
var transports = []shmemtest.Transport{
	{Name: "sm", Env: []string{variantEnv + "=sm"}},
	{Name: "tcp", Env: []string{variantEnv + "=tcp", "UCX_TLS=tcp,self"}},
	{Name: "mixed", Env: []string{variantEnv + "=mixed"}},
}

// mixedSetup makes the odd PEs of the mixed variant use TCP only (before
// Init).
func mixedSetup(t *testing.T) {
	if rank := os.Getenv("GOSHMEM_RANK"); variant() == "mixed" && rank != "" && rank[len(rank)-1]%2 == 1 {
		os.Setenv("UCX_TLS", "tcp,self")
	}
}

// variantEnv tells a PE which transport variant it runs.
const variantEnv = "GOSHMEM_TEST_TRANSPORT"

// variant returns the transport variant this PE runs.
func variant() string { return os.Getenv(variantEnv) }

// job runs body as every PE of jobs of each size in nps, over each of the
// transports, between Init and Finalize.
func job(t *testing.T, body func(t *testing.T, me, n int)) {
	t.Helper()
	jobWith(t, jobOptions{}, body)
}

// jobOptions tune jobWith.
type jobOptions struct {
	nps     []int         // job sizes; nps if nil
	quick   []int         // the sizes of nps that run unless full (all if nil); with nps nil, quickNPs
	timeout time.Duration // bound of each job; shmemtest.DefaultTimeout if 0
	// thread: the PEs start with InitThread(level) in place of Init, and
	// check that they got level.
	thread bool
	level  shmem.ThreadLevel
	// check, if set, is called with each job's output (shmemtest.Options.Check).
	check func(t *testing.T, output string)
}

// jobWith is job with options. The jobs are shared with the other tests
// that use jobWith with the same thread level (shmemtest.Options.Shared):
// a body frees what it allocates.
func jobWith(t *testing.T, o jobOptions, body func(t *testing.T, me, n int)) {
	t.Helper()
	level := shmem.ThreadSingle
	if o.thread {
		level = o.level
	}
	sizes, quick, trs := o.nps, o.quick, transports
	if sizes == nil {
		sizes, quick = nps, quickNPs
		trs = slices.Clone(transports)
		trs[0].QuickNPs = quickNPsSelf // shared memory
	}
	shmemtest.RunWith(t, shmemtest.Options{NPs: sizes, QuickNPs: quick, Transports: trs, Timeout: o.timeout, Check: o.check,
		ThreadLevel: level, Setup: mixedSetup, Shared: true}, func(t *testing.T) {
		if shmem.QueryThread() != level {
			t.Fatalf("QueryThread %v after asking for %v", shmem.QueryThread(), level)
		}
		body(t, shmem.MyPE(), shmem.NPEs())
	})
}

// sameNode reports whether every PE maps every other's heap in this variant.
func sameNode() bool { return variant() == "sm" }

// calloc allocates a zeroed symmetric array or fails the test.
func calloc[T any](t *testing.T, n int) []T {
	t.Helper()
	s, err := shmem.Calloc[T](n)
	if err != nil {
		t.Fatalf("Calloc[%T](%d): %v", *new(T), n, err)
	}
	return s
}

func TestInitAndQueries(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		if me < 0 || me >= n {
			t.Fatalf("MyPE %d of %d", me, n)
		}
		if err := shmem.Init(); err != nil {
			t.Errorf("second Init: %v", err)
		}
		shmem.Finalize() // matches the second Init: a barrier, the library stays
		if !shmem.QueryInitialized() {
			t.Fatal("QueryInitialized false after the Finalize of a second Init")
		}
		for pe := 0; pe < n; pe++ {
			if !shmem.PEAccessible(pe) {
				t.Errorf("PEAccessible(%d) = false", pe)
			}
		}
		if shmem.PEAccessible(n) || shmem.PEAccessible(-1) {
			t.Error("PEAccessible true outside the job")
		}
		x := calloc[int64](t, 1)
		var local int64
		if !shmem.AddrAccessible(&x[0], (me+1)%n) {
			t.Error("AddrAccessible false for a symmetric object")
		}
		if shmem.AddrAccessible(&local, 0) {
			t.Error("AddrAccessible true for a Go variable")
		}
		if shmem.Ptr(&x[0], me) == nil {
			t.Errorf("Ptr to this PE is nil")
		}
		for pe := 0; pe < n && sameNode(); pe++ {
			if shmem.Ptr(&x[0], pe) == nil {
				t.Errorf("Ptr to PE %d is nil on one node", pe)
			}
		}
		x[0] = int64(me)
		shmem.BarrierAll()
		if p := shmem.Ptr(&x[0], (me+1)%n); p != nil && *p != int64((me+1)%n) {
			t.Errorf("load through Ptr = %d, want %d", *p, (me+1)%n)
		}
		if variant() == "tcp" && n > 1 && shmem.Ptr(&x[0], (me+1)%n) != nil {
			t.Errorf("Ptr to another PE is direct with UCX_TLS=tcp,self")
		}
		shmem.BarrierAll()
	})
}

// TestInitFinalizeRepeated: OpenSHMEM 1.6 lets Init and Finalize be
// called more than once: each Init is matched by a Finalize, the last of
// which ends the library, which a later Init starts again.
func TestInitFinalizeRepeated(t *testing.T) {
	shmemtest.RunWith(t, shmemtest.Options{Shared: true, NPs: []int{1, 3}, Transports: transports, NoInit: true, Setup: mixedSetup}, func(t *testing.T) {
		if shmem.QueryInitialized() {
			t.Fatal("QueryInitialized true before Init")
		}
		for round := 0; round < 2; round++ {
			if err := shmem.Init(); err != nil {
				t.Fatalf("round %d: Init: %v", round, err)
			}
			if got, err := shmem.InitThread(shmem.ThreadMultiple); err != nil || got != shmem.ThreadSingle {
				t.Errorf("round %d: InitThread after Init = %v, %v; want the level of Init, ThreadSingle", round, got, err)
			}
			if !shmem.QueryInitialized() {
				t.Fatalf("round %d: QueryInitialized false after Init", round)
			}
			me, n := shmem.MyPE(), shmem.NPEs()
			x := calloc[int64](t, 1)
			shmem.AtomicAdd(&x[0], int64(round+1), (me+1)%n)
			shmem.Finalize() // matches InitThread: a barrier
			if !shmem.QueryInitialized() || x[0] != int64(round+1) {
				t.Fatalf("round %d: after the inner Finalize: initialized %v, counter %d, want true, %d", round, shmem.QueryInitialized(), x[0], round+1)
			}
			shmem.Free(x)
			shmem.Finalize()
			if shmem.QueryInitialized() || shmem.MyPE() != -1 {
				t.Fatalf("round %d: after the last Finalize: QueryInitialized %v, MyPE %d", round, shmem.QueryInitialized(), shmem.MyPE())
			}
		}
	})
}

// TestUseAfterFinalize: a routine called after the last Finalize panics
// saying so, not that it was called before Init (which TestCollBeforeInit
// checks in the test process, where Init was not called yet).
func TestUseAfterFinalize(t *testing.T) {
	shmemtest.RunWith(t, shmemtest.Options{Shared: true, NPs: []int{1}, Transports: []shmemtest.Transport{shmemtest.SharedMemory}, NoInit: true}, func(t *testing.T) {
		if err := shmem.Init(); err != nil {
			t.Fatal(err)
		}
		x := calloc[int64](t, 1)
		shmem.Finalize()
		const want = "called after shmem.Finalize"
		for _, c := range []struct {
			name string
			fn   func()
		}{
			{"P", func() { shmem.P(&x[0], 1, 0) }},                  // a symmetric address
			{"Malloc", func() { shmem.Malloc[int64](1) }},           // an allocation
			{"Quiet", func() { shmem.Quiet() }},                     // the default context
			{"Broadcast", func() { shmem.Broadcast(nil, x, x, 0) }}, // a collective
		} {
			checkPanic(t, c.name+" after Finalize", c.fn, want)
		}
		if shmem.MyPE() != -1 || shmem.QueryInitialized() {
			t.Errorf("after Finalize: MyPE %d, QueryInitialized %v; want -1, false", shmem.MyPE(), shmem.QueryInitialized())
		}
	})
}

// TestPanicWithDeferredFinalize: a PE whose program defers Finalize and
// panics ends with its panic, and the job with it, naming the PE, whatever
// the other PEs do: its Finalize used to wait for them in its barrier,
// which hung the job when they waited for a store of the panicking PE, and
// was reported as a collective mismatch (not the panic) when they were in a
// collective. The job's timeout ends a hang.
func TestPanicWithDeferredFinalize(t *testing.T) {
	for _, c := range []struct {
		name   string
		others func(x []int64) // what the PEs that do not panic do
	}{
		{"others in a barrier", func([]int64) { shmem.BarrierAll() }},
		{"others wait for its store", func(x []int64) { shmem.WaitUntil(&x[0], shmem.CmpEQ, 1) }},
		{"others finalize", func([]int64) {}},
	} {
		t.Run(c.name, func(t *testing.T) {
			shmemtest.RunWith(t, shmemtest.Options{NPs: []int{3}, Transports: transports[:2], NoInit: true, WantExit: 2, Timeout: 60 * time.Second,
				Check: func(t *testing.T, out string) {
					for _, want := range []string{"[pe 1] panic: PE 1 gives up", "PE 1 on host", "exited with status 2"} {
						if !strings.Contains(out, want) {
							t.Errorf("the output does not say %q:\n%s", want, out)
						}
					}
					if strings.Contains(out, "collective mismatch") {
						t.Errorf("the panic was reported as a collective mismatch:\n%s", out)
					}
				}}, func(t *testing.T) {
				if err := shmem.Init(); err != nil {
					t.Fatal(err)
				}
				defer shmem.Finalize()
				x := calloc[int64](t, 1)
				if shmem.MyPE() == 1 {
					panic("PE 1 gives up")
				}
				c.others(x)
			})
		})
	}
}

// putGetRoundTrip checks Put, Get, P and G of T between every pair of PEs:
// PE i writes a pattern of its own into its slot on every PE, and every PE
// then reads every slot back from every PE.
func putGetRoundTrip[T shmem.RMA](t *testing.T, me, n int, val func(from, to, i int) T) {
	const per = 7 // an odd length, so that copies are not all word multiples
	buf := calloc[T](t, n*per)
	single := calloc[T](t, n)
	for to := 0; to < n; to++ {
		src := make([]T, per)
		for i := range src {
			src[i] = val(me, to, i)
		}
		shmem.Put(buf[me*per:(me+1)*per], src, to)
		shmem.P(&single[me], val(me, to, 99), to)
	}
	shmem.BarrierAll()
	for from := 0; from < n; from++ {
		for i := 0; i < per; i++ {
			if got, want := buf[from*per+i], val(from, me, i); got != want {
				t.Fatalf("after Put from PE %d: element %d = %v, want %v", from, i, got, want)
			}
		}
		if got, want := single[from], val(from, me, 99); got != want {
			t.Fatalf("after P from PE %d: %v, want %v", from, got, want)
		}
	}
	for pe := 0; pe < n; pe++ {
		got := make([]T, n*per)
		shmem.Get(got, buf, pe)
		want := make([]T, n*per)
		for from := 0; from < n; from++ {
			for i := 0; i < per; i++ {
				want[from*per+i] = val(from, pe, i)
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("Get from PE %d (-want +got):\n%s", pe, diff)
		}
		for from := 0; from < n; from++ {
			if got, want := shmem.G(&single[from], pe), val(from, pe, 99); got != want {
				t.Fatalf("G(single[%d]) from PE %d = %v, want %v", from, pe, got, want)
			}
		}
	}
	shmem.BarrierAll()
	shmem.Free(single)
	shmem.Free(buf)
}

func TestPutGetAllTypes(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		code := func(from, to, i int) int { return from*1000 + to*100 + i + 1 }
		putGetRoundTrip(t, me, n, func(f, o, i int) int8 { return int8(code(f, o, i)) })
		putGetRoundTrip(t, me, n, func(f, o, i int) int16 { return int16(-code(f, o, i)) })
		putGetRoundTrip(t, me, n, func(f, o, i int) int32 { return int32(code(f, o, i)) })
		putGetRoundTrip(t, me, n, func(f, o, i int) int64 { return int64(code(f, o, i)) << 33 })
		putGetRoundTrip(t, me, n, func(f, o, i int) int { return -code(f, o, i) })
		putGetRoundTrip(t, me, n, func(f, o, i int) uint8 { return uint8(code(f, o, i)) })
		putGetRoundTrip(t, me, n, func(f, o, i int) uint16 { return uint16(code(f, o, i)) })
		putGetRoundTrip(t, me, n, func(f, o, i int) uint32 { return uint32(code(f, o, i)) })
		putGetRoundTrip(t, me, n, func(f, o, i int) uint64 { return uint64(code(f, o, i)) << 40 })
		putGetRoundTrip(t, me, n, func(f, o, i int) uint { return uint(code(f, o, i)) })
		putGetRoundTrip(t, me, n, func(f, o, i int) uintptr { return uintptr(code(f, o, i)) })
		putGetRoundTrip(t, me, n, func(f, o, i int) float32 { return float32(code(f, o, i)) / 3 })
		putGetRoundTrip(t, me, n, func(f, o, i int) float64 { return float64(code(f, o, i)) / 7 })
		putGetRoundTrip(t, me, n, func(f, o, i int) complex64 { return complex(float32(code(f, o, i)), -1) })
		putGetRoundTrip(t, me, n, func(f, o, i int) complex128 { return complex(1, float64(code(f, o, i))) })
	})
}

func TestPutMemGetMemAndSizes(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		const size = 1<<20 + 13 // large and odd
		buf := calloc[byte](t, size)
		to := (me + 1) % n
		src := make([]byte, size)
		for i := range src {
			src[i] = byte(i*7 + me)
		}
		// Every length from 0 to 70 at an unaligned offset, then the large one.
		for l := 0; l <= 70; l++ {
			shmem.PutMem(buf[3:3+l], src[:l], to)
		}
		shmem.PutMem(buf, src, to)
		shmem.BarrierAll()
		from := (me - 1 + n) % n
		for i := range buf {
			if want := byte(i*7 + from); buf[i] != want {
				t.Fatalf("byte %d = %d, want %d", i, buf[i], want)
			}
		}
		got := make([]byte, size)
		shmem.GetMem(got[5:], buf[5:], to)
		for i := 5; i < size; i++ {
			if want := byte(i*7 + me); got[i] != want {
				t.Fatalf("GetMem byte %d = %d, want %d", i, got[i], want)
			}
		}
		shmem.GetMem(got[:0], buf[:0], to) // zero length does nothing
		shmem.BarrierAll()
		shmem.Free(buf)
	})
}

// atomics checks the AMO routines of T against a model: every PE adds to,
// increments and compare-swaps counters on every PE.
func atomics[T shmem.AMO](t *testing.T, me, n int) {
	ctr := calloc[T](t, 4)
	for pe := 0; pe < n; pe++ {
		shmem.AtomicAdd(&ctr[0], T(me+1), pe)
		shmem.AtomicInc(&ctr[1], pe)
		shmem.AtomicFetchAdd(&ctr[2], T(2), pe)
		shmem.AtomicFetchInc(&ctr[2], pe)
	}
	shmem.BarrierAll()
	want := []T{T(n * (n + 1) / 2), T(n), T(3 * n), 0}
	if diff := cmp.Diff(want, ctr); diff != "" {
		t.Fatalf("counters (-want +got):\n%s", diff)
	}
	shmem.BarrierAll() // everyone has checked before ctr[3] changes
	// Exactly one PE wins each compare-and-swap on ctr[3] of PE 0.
	old := shmem.AtomicCompareSwap(&ctr[3], 0, T(me+1), 0)
	won := calloc[int32](t, 1)
	if old == 0 {
		shmem.AtomicAdd(&won[0], 1, 0)
	}
	shmem.BarrierAll()
	if me == 0 {
		if won[0] != 1 || ctr[3] == 0 || int(ctr[3]) > n {
			t.Fatalf("compare-swap: %d winners, value %v", won[0], ctr[3])
		}
	}
	// Fetch, set and swap.
	to := (me + 1) % n
	shmem.AtomicSet(&ctr[0], T(100+me), to)
	shmem.BarrierAll()
	from := (me - 1 + n) % n
	if got := shmem.AtomicFetch(&ctr[0], me); got != T(100+from) {
		t.Fatalf("AtomicFetch after AtomicSet = %v, want %v", got, 100+from)
	}
	shmem.BarrierAll()
	if got := shmem.AtomicSwap(&ctr[0], T(7), to); got != T(100+me) {
		t.Fatalf("AtomicSwap returned %v, want %v", got, 100+me)
	}
	if got := shmem.AtomicCompareSwap(&ctr[0], T(1), T(9), to); got != T(7) {
		t.Fatalf("failed AtomicCompareSwap returned %v, want 7", got)
	}
	shmem.BarrierAll()
	shmem.Free(won)
	shmem.Free(ctr)
}

func extAtomics[T float32 | float64](t *testing.T, me, n int) {
	x := calloc[T](t, 1)
	to := (me + 1) % n
	shmem.AtomicSet(&x[0], T(me)+0.5, to)
	shmem.BarrierAll()
	from := (me - 1 + n) % n
	if got := shmem.AtomicFetch(&x[0], me); got != T(from)+0.5 {
		t.Fatalf("AtomicFetch = %v, want %v", got, T(from)+0.5)
	}
	shmem.BarrierAll()
	if got := shmem.AtomicSwap(&x[0], T(-2.25), to); got != T(me)+0.5 {
		t.Fatalf("AtomicSwap = %v, want %v", got, T(me)+0.5)
	}
	shmem.BarrierAll()
	shmem.Free(x)
}

func TestAtomics(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		atomics[int32](t, me, n)
		atomics[int64](t, me, n)
		atomics[uint32](t, me, n)
		atomics[uint64](t, me, n)
		atomics[int](t, me, n)
		atomics[uint](t, me, n)
		atomics[uintptr](t, me, n)
		extAtomics[float32](t, me, n)
		extAtomics[float64](t, me, n)
	})
}

func TestWaitUntilAndTest(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		flag16 := calloc[int16](t, 4) // the element at index 1 is not 4-byte aligned
		flag64 := calloc[uint64](t, 1)
		if shmem.Test(&flag64[0], shmem.CmpNE, 0) {
			t.Fatal("Test true before anything was written")
		}
		shmem.BarrierAll()
		to := (me + 1) % n
		shmem.P(&flag16[1], int16(-(me + 1)), to)
		shmem.Fence()
		shmem.AtomicSet(&flag64[0], uint64(me+10), to)
		from := (me - 1 + n) % n
		shmem.WaitUntil(&flag64[0], shmem.CmpEQ, uint64(from+10))
		shmem.WaitUntil(&flag16[1], shmem.CmpLT, 0)
		if flag16[1] != int16(-(from + 1)) {
			t.Fatalf("flag16 = %d, want %d", flag16[1], -(from + 1))
		}
		for _, c := range []struct {
			cmp  shmem.Cmp
			v    uint64
			want bool
		}{
			{shmem.CmpEQ, uint64(from + 10), true}, {shmem.CmpNE, uint64(from + 10), false},
			{shmem.CmpGT, uint64(from + 9), true}, {shmem.CmpGE, uint64(from + 11), false},
			{shmem.CmpLT, uint64(from + 11), true}, {shmem.CmpLE, uint64(from + 9), false},
		} {
			if got := shmem.Test(&flag64[0], c.cmp, c.v); got != c.want {
				t.Errorf("Test(%d %v %d) = %v", flag64[0], c.cmp, c.v, got)
			}
		}
		shmem.BarrierAll()
		shmem.Free(flag64)
		shmem.Free(flag16)
	})
}

func TestBarrierOrdersPuts(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		x := calloc[int64](t, n)
		for round := int64(1); round <= 50; round++ {
			for pe := 0; pe < n; pe++ {
				shmem.P(&x[me], round, pe)
			}
			shmem.BarrierAll()
			for pe := 0; pe < n; pe++ {
				if x[pe] != round {
					t.Fatalf("round %d: slot of PE %d = %d after BarrierAll", round, pe, x[pe])
				}
			}
			shmem.SyncAll()
		}
		shmem.Free(x)
	})
}

func TestAllocation(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		// The same calls give the same offsets on every PE: each PE reports
		// the offsets of its objects relative to the first to PE 0.
		first := calloc[byte](t, 100)
		objs := [][]byte{calloc[byte](t, 1), calloc[byte](t, 4096)}
		a, err := shmem.Align[byte](4096, 10)
		if err != nil {
			t.Fatal(err)
		}
		if addrOf(a)%4096 != 0 {
			t.Errorf("Align(4096) gave %#x", addrOf(a))
		}
		objs = append(objs, a)
		rel := calloc[int64](t, n*len(objs))
		for i, o := range objs {
			shmem.P(&rel[me*len(objs)+i], int64(addrOf(o)-addrOf(first)), 0)
		}
		shmem.BarrierAll()
		if me == 0 {
			for pe := 1; pe < n; pe++ {
				if diff := cmp.Diff(rel[:len(objs)], rel[pe*len(objs):(pe+1)*len(objs)]); diff != "" {
					t.Errorf("PE %d placed objects differently from PE 0 (-0 +pe):\n%s", pe, diff)
				}
			}
		}
		// Realloc keeps the contents, in place or moved.
		r := calloc[int32](t, 3)
		for i := range r {
			r[i] = int32(me*10 + i)
		}
		r, err = shmem.Realloc(r, 5000)
		if err != nil {
			t.Fatal(err)
		}
		if r[0] != int32(me*10) || r[2] != int32(me*10+2) || len(r) != 5000 {
			t.Fatalf("Realloc lost contents: %v", r[:3])
		}
		shmem.P(&r[4999], int32(me), (me+1)%n)
		shmem.BarrierAll()
		if r[4999] != int32((me-1+n)%n) {
			t.Fatalf("put into reallocated array: %d", r[4999])
		}
		r, err = shmem.Realloc(r, 2)
		if err != nil || r[1] != int32(me*10+1) {
			t.Fatalf("shrinking Realloc: %v, %v", r, err)
		}
		// Exhaustion is an error, on every PE alike, and leaves the heap usable.
		if _, err := shmem.Malloc[byte](1 << 40); err == nil {
			t.Fatal("Malloc of 1 TiB succeeded")
		}
		_, err = shmem.Malloc[byte](symheap.DefaultSize)
		if !errors.Is(err, symheap.ErrNoSpace) {
			t.Fatalf("Malloc of the whole heap: %v, want ErrNoSpace", err)
		}
		if _, err := shmem.Malloc[*int](1); err == nil || !strings.Contains(err.Error(), "pointers") {
			t.Fatalf("Malloc of a pointer type: %v", err)
		}
		type rec struct {
			A int64
			B [3]float32
		}
		recs, err := shmem.Malloc[rec](2)
		if err != nil {
			t.Fatalf("Malloc of a pointer-free struct: %v", err)
		}
		shmem.Free(recs)
		shmem.Free(r)
		shmem.Free(rel)
		for _, o := range objs {
			shmem.Free(o)
		}
		shmem.Free(first)
	})
}

// TestAllocAcrossElementTypes: calls that make the same allocation agree
// whatever their element type (64 bytes as Malloc[byte] on some PEs and
// Malloc[int64](8) on others, as a C program's shmem_malloc beside a Go
// PE): no mismatch, and the objects are symmetric. The element type's
// alignment used to be part of the check.
func TestAllocAcrossElementTypes(t *testing.T) {
	jobWith(t, jobOptions{nps: []int{2, 3}, quick: []int{2}}, func(t *testing.T, me, n int) {
		var p unsafe.Pointer
		if me%2 == 0 {
			b, err := shmem.Malloc[byte](64)
			if err != nil {
				t.Fatalf("Malloc[byte](64): %v", err)
			}
			p = unsafe.Pointer(&b[0])
		} else {
			w, err := shmem.Malloc[int64](8)
			if err != nil {
				t.Fatalf("Malloc[int64](8): %v", err)
			}
			p = unsafe.Pointer(&w[0])
		}
		base, _ := shmem.HeapBounds()
		off := int64(uintptr(p) - uintptr(base))
		o, err := shmem.Malloc[int64](1)
		if err != nil {
			t.Fatal(err)
		}
		o[0] = off
		shmem.BarrierAll()
		for pe := 0; pe < n; pe++ {
			if v := shmem.G(&o[0], pe); v != off {
				t.Fatalf("PE %d has the object at heap offset %d, this PE at %d", pe, v, off)
			}
		}
		shmem.BarrierAll()
	})
}

// TestAllocMismatch: every allocation checks, always (no SHMEM_DEBUG),
// that the PEs asked for the same: when the last PE asks for another size,
// alignment or object, every PE fails with ErrAllocMismatch naming the PEs
// and their calls, allocates nothing, and the heap stays the same on every
// PE. The allocations used to succeed with different offsets and corrupt
// data silently.
func TestAllocMismatch(t *testing.T) {
	jobWith(t, jobOptions{nps: []int{2, 3, 5}, quick: []int{3}}, func(t *testing.T, me, n int) {
		last := me == n-1
		size := 16
		if last {
			size = 24
		}
		if _, err := shmem.Malloc[int64](size); !errors.Is(err, shmem.ErrAllocMismatch) ||
			!strings.Contains(err.Error(), fmt.Sprintf("PE %d: allocation call #1, Malloc[int64](24): 192 bytes", n-1)) ||
			!strings.Contains(err.Error(), "Malloc[int64](16): 128 bytes") {
			t.Fatalf("Malloc of different sizes: %v", err)
		}
		align := 64
		if last {
			align = 4096
		}
		if _, err := shmem.Align[int64](align, 4); !errors.Is(err, shmem.ErrAllocMismatch) ||
			!strings.Contains(err.Error(), "alignment 4096") {
			t.Fatalf("Align with different alignments: %v", err)
		}
		// A size too large for the heap on one PE is a mismatch too, on
		// every PE (it used to fail there alone and leave the others in
		// the barrier).
		big := 4
		if last {
			big = 1 << 50
		}
		if _, err := shmem.Calloc[int64](big); !errors.Is(err, shmem.ErrAllocMismatch) ||
			!strings.Contains(err.Error(), "more bytes than the heap holds") {
			t.Fatalf("Calloc too large on one PE: %v", err)
		}
		// Nothing was allocated: the next allocation is where the first
		// would have been on every PE, and puts through it land.
		a := calloc[int64](t, n)
		b := calloc[int64](t, n)
		shmem.P(&a[me], int64(me+1), (me+1)%n)
		shmem.BarrierAll()
		if want := int64((me-1+n)%n + 1); a[(me-1+n)%n] != want {
			t.Errorf("after the mismatches, a put landed as %d, want %d", a[(me-1+n)%n], want)
		}
		// Freeing different objects panics on every PE.
		wrong := a
		if last {
			wrong = b
		}
		checkPanic(t, "Free of different objects", func() { shmem.Free(wrong) }, shmem.ErrAllocMismatch.Error())
		// Exhaustion names SHMEM_SYMMETRIC_SIZE.
		if _, err := shmem.Malloc[byte](int(^uint(0) >> 2)); !errors.Is(err, shmem.ErrHeapExhausted) || !strings.Contains(err.Error(), "SHMEM_SYMMETRIC_SIZE") {
			t.Errorf("Malloc of more than the heap: %v", err)
		}
		if _, err := shmem.Malloc[byte](symheap.DefaultSize); !errors.Is(err, shmem.ErrHeapExhausted) || !errors.Is(err, symheap.ErrNoSpace) {
			t.Errorf("Malloc of the whole heap: %v", err)
		}
		shmem.BarrierAll()
		shmem.Free(b)
		shmem.Free(a)
	})
}

// TestAllocMismatchAcrossRoutines: two PEs in different allocation
// routines, or in one routine for different bytes, get ErrAllocMismatch
// on every PE (a panic in Free), as the routines' doc says, with a message
// that shows what differs, types and counts included; then the heap works
// on. Align against Malloc and MallocWithHints against Malloc used to
// panic as a collective mismatch, and the calls were reported by their
// bytes alone. (The same bytes of other types are the same allocation:
// TestAllocAcrossElementTypes.)
func TestAllocMismatchAcrossRoutines(t *testing.T) {
	jobWith(t, jobOptions{nps: []int{3}}, func(t *testing.T, me, n int) {
		last := me == n-1
		obj := calloc[int64](t, 4)
		for _, c := range []struct {
			name         string
			mine, others func() error // the last PE's call, the others'
			want         []string     // in the error, on every PE
		}{
			{"Align against Malloc",
				func() error { _, err := shmem.Align[int64](64, 4); return err },
				func() error { _, err := shmem.Malloc[int64](4); return err },
				[]string{fmt.Sprintf("PE %d: allocation call #2, Align[int64](64, 4): 32 bytes, alignment 64", n-1), "allocation call #2, Malloc[int64](4): 32 bytes, alignment 8"}},
			{"MallocWithHints against Malloc",
				func() error { _, err := shmem.MallocWithHints[int64](4, shmem.MallocAtomicsRemote); return err },
				func() error { _, err := shmem.Malloc[int64](4); return err },
				[]string{"MallocWithHints[int64](4, MallocAtomicsRemote): 32 bytes, alignment 8", "Malloc[int64](4): 32 bytes"}},
			{"other bytes of another type",
				func() error { _, err := shmem.Malloc[int32](6); return err },
				func() error { _, err := shmem.Malloc[int64](4); return err },
				[]string{fmt.Sprintf("PE %d: allocation call #4, Malloc[int32](6): 24 bytes, alignment 4", n-1), "Malloc[int64](4): 32 bytes, alignment 8"}},
			{"Realloc against Calloc",
				func() error { _, err := shmem.Realloc(obj, 8); return err },
				func() error { _, err := shmem.Calloc[int64](8); return err },
				[]string{"Realloc[int64](object at heap offset", ", 8): 64 bytes", "Calloc[int64](8): 64 bytes, alignment 8"}},
		} {
			call := c.others
			if last {
				call = c.mine
			}
			err := call()
			if !errors.Is(err, shmem.ErrAllocMismatch) {
				t.Fatalf("%s: %v, want ErrAllocMismatch", c.name, err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: %v\ndoes not say %q", c.name, err, w)
				}
			}
		}
		// Free against Malloc: Free panics, Malloc returns the error.
		if last {
			checkPanic(t, "Free against Malloc", func() { shmem.Free(obj) }, "Free[int64](object at heap offset")
		} else if _, err := shmem.Malloc[int64](4); !errors.Is(err, shmem.ErrAllocMismatch) || !strings.Contains(err.Error(), "Free[int64]") {
			t.Errorf("Malloc against Free: %v", err)
		}
		// Nothing was allocated or freed: the heaps are alike, and work.
		a := calloc[int64](t, n)
		shmem.P(&a[me], int64(me+1), (me+1)%n)
		shmem.P(&obj[0], int64(me+1), (me+1)%n)
		shmem.BarrierAll()
		if want := int64((me-1+n)%n + 1); a[(me-1+n)%n] != want || obj[0] != want {
			t.Errorf("after the mismatches, puts landed as %d and %d, want %d", a[(me-1+n)%n], obj[0], want)
		}
		shmem.BarrierAll()
		shmem.Free(a)
		shmem.Free(obj)
	})
}

// TestZeroSizeAllocationsAreNoOps: OpenSHMEM's allocation routines do
// nothing for zero bytes, not even their barrier, and neither does Free of
// nil; Realloc to zero bytes frees the block. PE 0 alone makes the no-op
// calls while the others wait in a barrier: a call that synchronized would
// hang the job.
func TestZeroSizeAllocationsAreNoOps(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		if me == 0 {
			type empty struct{}
			for _, c := range []struct {
				name string
				call func() (bool, error) // whether the result is nil
			}{
				{"Malloc(0)", func() (bool, error) { s, err := shmem.Malloc[int64](0); return s == nil, err }},
				{"Malloc of a zero-size type", func() (bool, error) { s, err := shmem.Malloc[empty](5); return s == nil, err }},
				{"Calloc(0)", func() (bool, error) { s, err := shmem.Calloc[int64](0); return s == nil, err }},
				{"Align(64, 0)", func() (bool, error) { s, err := shmem.Align[int64](64, 0); return s == nil, err }},
				{"Align(3, 0)", func() (bool, error) { s, err := shmem.Align[int64](3, 0); return s == nil, err }},
				{"MallocWithHints(0)", func() (bool, error) {
					s, err := shmem.MallocWithHints[int64](0, shmem.MallocAtomicsRemote)
					return s == nil, err
				}},
				{"Realloc(nil, 0)", func() (bool, error) { s, err := shmem.Realloc[int64](nil, 0); return s == nil, err }},
			} {
				if isNil, err := c.call(); !isNil || err != nil {
					t.Errorf("%s: nil result %v, error %v; want nil, nil", c.name, isNil, err)
				}
			}
			shmem.Free[int64](nil)
		}
		shmem.BarrierAll()
		// Realloc to zero bytes frees the block (collectively): the next
		// allocation of that size takes its place again.
		a := calloc[int64](t, 64)
		where := addrOf(a)
		a, err := shmem.Realloc(a, 0)
		if err != nil || a != nil {
			t.Fatalf("Realloc(s, 0) = %v, %v, want nil, nil", a, err)
		}
		b := calloc[int64](t, 64)
		if addrOf(b) != where {
			t.Errorf("after Realloc(s, 0), an allocation of the same size is at %#x, not at the freed %#x", addrOf(b), where)
		}
		shmem.Free(b)
	})
}

func TestBadInputPanics(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		x := calloc[int64](t, 4)
		var local [4]int64
		cases := []struct {
			name string
			fn   func()
			want string
		}{
			{"P to PE n", func() { shmem.P(&x[0], 1, n) }, fmt.Sprintf("PE %d is not a PE of the job (valid: 0..%d)", n, n-1)},
			{"Put to PE -1", func() { shmem.Put(x, local[:], -1) }, "PE -1 is not a PE of the job"},
			{"Put to a Go array", func() { shmem.Put(local[:], x, 0) }, "shmem.Put: dst"},
			{"Get from a Go array", func() { shmem.Get(x, local[:], 0) }, "shmem.Get: src"},
			{"Put past the end", func() { shmem.Put(x[:1], local[:], 0) }, "fewer than the 4"},
			{"atomic on a Go variable", func() { shmem.AtomicAdd(&local[0], 1, 0) }, "not inside the symmetric heap"},
			{"WaitUntil on a Go variable", func() { shmem.WaitUntil(&local[0], shmem.CmpEQ, 0) }, "WaitUntil: ivar"},
			{"Free of a Go slice", func() { shmem.Free(local[:]) }, "not an object allocated by shmem.Malloc"},
		}
		for _, c := range cases {
			checkPanic(t, c.name, c.fn, c.want)
		}
		shmem.Free(x)
	})
}

// checkPanic checks that fn panics with a message that mentions want.
func checkPanic(t *testing.T, name string, fn func(), want string) {
	t.Helper()
	msg := func() (msg string) {
		defer func() { msg = fmt.Sprint(recover()) }()
		fn()
		return "no panic"
	}()
	if !strings.Contains(msg, want) {
		t.Errorf("%s: panic %q, want it to mention %q", name, msg, want)
	}
}

// allocsPerCall returns the allocations of one call of fn: the least of
// three testing.AllocsPerRun, which counts every goroutine's allocations.
// The transports' and the bootstrap's goroutines may allocate during one
// of them (a connection accepted late, a gossip round); an allocation of
// fn's own shows in all three.
func allocsPerCall(fn func()) float64 {
	a := testing.AllocsPerRun(100, fn)
	for range 2 {
		a = min(a, testing.AllocsPerRun(100, fn))
	}
	return a
}

// TestHotPathsAllocateNothing: the routines of loops, on every transport:
// through memory, and through the network (tcp), where P and G send their
// value from a buffer of the library's, the non-blocking routines and the
// flush that Quiet waits for reuse their bookkeeping, and the signals, the
// barrier and the collectives send their rounds as messages.
func TestHotPathsAllocateNothing(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		x := calloc[int64](t, 8)
		sig := calloc[uint64](t, 1)
		coll := calloc[int64](t, 4*n)
		to := (me + 1) % n
		src := []int64{1, 2, 3, 4}
		dst := make([]int64, 4)
		must := func(err error) {
			if err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range []struct {
			name string
			fn   func()
		}{
			{"Put", func() { shmem.Put(x[:4], src, to) }},
			{"Get", func() { shmem.Get(dst, x[:4], to) }},
			{"P", func() { shmem.P(&x[5], 5, to) }},
			{"G", func() { _ = shmem.G(&x[5], to) }},
			{"AtomicFetchAdd", func() { shmem.AtomicFetchAdd(&x[6], 1, to) }},
			{"AtomicAdd+Quiet", func() { shmem.AtomicAdd(&x[6], 1, to); shmem.Quiet() }},
			{"AtomicCompareSwap", func() { shmem.AtomicCompareSwap(&x[7], 0, 1, to) }},
			{"PutNBI+Quiet", func() { shmem.PutNBI(x[:4], src, to); shmem.Quiet() }},
			{"GetNBI+Quiet", func() { shmem.GetNBI(dst, x[:4], to); shmem.Quiet() }},
			{"PutSignal", func() { shmem.PutSignal(x[:4], src, &sig[0], 1, shmem.SignalAdd, to) }},
			{"BarrierAll", shmem.BarrierAll},
			{"SyncAll", shmem.SyncAll},
			{"Broadcast", func() { must(shmem.Broadcast(shmem.TeamWorld, coll[:4], x[:4], 0)) }},
			{"SumReduce", func() { must(shmem.SumReduce(shmem.TeamWorld, coll[:4], x[:4])) }},
			{"FCollect", func() { must(shmem.FCollect(shmem.TeamWorld, coll[:4*n], x[:4])) }},
			{"Alltoall", func() { must(shmem.Alltoall(shmem.TeamWorld, coll[:n], x[:n])) }},
		} {
			// Over tcp, up to UCX_TCP_TX_BATCH bytes of small frames
			// wait in a batch, each holding a pooled frame: the pool
			// fills during the first hundreds of puts.
			for range 1000 {
				c.fn()
			}
			if a := allocsPerCall(c.fn); a != 0 {
				t.Errorf("%s allocates %v times per call", c.name, a)
			}
			shmem.BarrierAll()
		}
		shmem.Free(coll)
		shmem.Free(sig)
		shmem.Free(x)
	})
}

func TestLargeHeap(t *testing.T) {
	shmemtest.RunWith(t, shmemtest.Options{Shared: true, NPs: []int{2}, Transports: []shmemtest.Transport{shmemtest.SharedMemory}, Env: []string{"SHMEM_SYMMETRIC_SIZE=1G"}}, func(t *testing.T) {
		me, n := shmem.MyPE(), shmem.NPEs()
		big := calloc[byte](t, 1000<<20)
		// Touch only the far end: the rest of the pages stay unallocated.
		shmem.P(&big[len(big)-1], byte(me+1), (me+1)%n)
		shmem.BarrierAll()
		if want := byte((me-1+n)%n + 1); big[len(big)-1] != want {
			t.Fatalf("last byte of a 1000 MiB object = %d, want %d", big[len(big)-1], want)
		}
		shmem.BarrierAll()
		shmem.Free(big)
	})
}

func TestInitRejectsBadHeapSize(t *testing.T) {
	if shmemtest.IsPE() {
		t.Skip("runs in the test process only")
	}
	for _, v := range []string{"lots", "0", "-5M"} {
		t.Setenv("SHMEM_SYMMETRIC_SIZE", v)
		err := shmem.Init()
		if err == nil {
			shmem.Finalize()
			t.Fatalf("Init with SHMEM_SYMMETRIC_SIZE=%s succeeded", v)
		}
		if !strings.Contains(err.Error(), "SHMEM_SYMMETRIC_SIZE") {
			t.Errorf("error %q does not name the variable", err)
		}
	}
}

// TestInitNamesMinimumHeap: a heap too small for the library's own state
// fails Init with the minimum to give, and that minimum works.
func TestInitNamesMinimumHeap(t *testing.T) {
	if shmemtest.IsPE() {
		t.Skip("runs in the test process only")
	}
	t.Setenv("SHMEM_SYMMETRIC_SIZE", "4K")
	err := shmem.Init()
	if err == nil {
		shmem.Finalize()
		t.Fatal("Init with a heap of 4K succeeded")
	}
	m := regexp.MustCompile(`below the minimum of \d+ bytes \((\d+K)\)`).FindStringSubmatch(err.Error())
	if m == nil || !errors.Is(err, symheap.ErrNoSpace) {
		t.Fatalf("Init with a heap of 4K: %v; want the minimum SHMEM_SYMMETRIC_SIZE, wrapping symheap.ErrNoSpace", err)
	}
	t.Setenv("SHMEM_SYMMETRIC_SIZE", m[1])
	if err := shmem.Init(); err != nil {
		t.Fatalf("Init with the minimum it named, %s: %v", m[1], err)
	}
	shmem.Finalize()
}

// TestInitNeedsActiveMessages: transports that can neither do atomics nor
// carry active messages (cma alone) fail Init, saying what is missing,
// instead of the first barrier.
func TestInitNeedsActiveMessages(t *testing.T) {
	if shmemtest.IsPE() {
		t.Skip("runs in the test process only")
	}
	t.Setenv("UCX_TLS", "cma")
	err := shmem.Init()
	if err == nil {
		t.Fatal("Init over cma alone succeeded")
	}
	if !errors.Is(err, ucs.ErrUnsupported) || !strings.Contains(err.Error(), "no atomics, and no active messages") ||
		!strings.Contains(err.Error(), "UCX_TLS=cma") {
		t.Errorf("Init over cma alone: %v; want ucs.ErrUnsupported saying that atomics and active messages are missing", err)
	}
}

// TestPeerFailureEndsJob: a PE that dies while the others wait in a barrier
// ends the job, promptly, with a message that names it; nothing hangs and
// nothing is left in /dev/shm (the harness checks).
func TestPeerFailureEndsJob(t *testing.T) {
	kill := func() { syscall.Kill(os.Getpid(), syscall.SIGKILL) }
	for _, how := range []struct {
		name     string
		env      []string
		wantExit int
		wantMsg  string
		die      func()
	}{
		{"exit", nil, 3, "PE 1 on host", func() { os.Exit(3) }},
		{"sigkill", nil, 137, "killed by signal 9", kill},
		// Named /dev/shm segments of a killed PE are removed by the launcher
		// (the harness checks /dev/shm after the job).
		{"sigkill-named-segments", []string{"UCX_POSIX_USE_SHM_OPEN=y", "UCX_ALLOC_PRIO=md:posix"}, 137, "killed by signal 9", kill},
	} {
		shmemtest.RunWith(t, shmemtest.Options{Shared: true,
			NPs: []int{3}, Transports: []shmemtest.Transport{{Name: how.name, Env: how.env}}, WantExit: how.wantExit, NoInit: true,
			Check: func(t *testing.T, out string) {
				if !strings.Contains(out, how.wantMsg) {
					t.Errorf("output does not say %q:\n%s", how.wantMsg, out)
				}
			},
		}, func(t *testing.T) {
			if err := shmem.Init(); err != nil {
				t.Fatal(err)
			}
			if shmem.MyPE() == 1 {
				how.die()
			}
			shmem.BarrierAll() // never completes: PE 1 is gone
			t.Error("BarrierAll returned without PE 1")
		})
	}
}

// TestSharesCoresWhenOversubscribed: on a node with more PEs than cores,
// Init gives each PE its share of the cores as GOMAXPROCS (at least 1), the
// last Finalize gives the old value back, and a GOMAXPROCS set in the
// environment is left alone.
func TestSharesCoresWhenOversubscribed(t *testing.T) {
	cores := runtime.NumCPU()
	if cores > 8 {
		t.Skipf("%d cores: a job with more PEs than cores would be too large for this test", cores)
	}
	for _, c := range []struct {
		name string
		env  []string
		want func(before int) int
	}{
		{"default", nil, func(int) int { return max(1, cores/(cores+1)) }},
		{"GOMAXPROCS set", []string{"GOMAXPROCS=2"}, func(before int) int { return before }},
	} {
		t.Run(c.name, func(t *testing.T) {
			shmemtest.RunWith(t, shmemtest.Options{Shared: true, NPs: []int{cores + 1}, Transports: []shmemtest.Transport{shmemtest.SharedMemory}, Env: c.env, NoInit: true}, func(t *testing.T) {
				before := runtime.GOMAXPROCS(0)
				if err := shmem.Init(); err != nil {
					t.Fatal(err)
				}
				got := runtime.GOMAXPROCS(0)
				shmem.Finalize()
				if want := c.want(before); got != want {
					t.Errorf("GOMAXPROCS in a job of %d PEs on %d cores: %d, want %d", cores+1, cores, got, want)
				}
				if after := runtime.GOMAXPROCS(0); after != before {
					t.Errorf("GOMAXPROCS after Finalize: %d, want %d as before Init", after, before)
				}
			})
		})
	}
}

// TestHeapSizeMismatch: PEs whose SHMEM_SYMMETRIC_SIZE differs fail Init
// with an error that names the variable, rather than running with heaps
// whose offsets do not match.
func TestHeapSizeMismatch(t *testing.T) {
	setup := func(t *testing.T) {
		if os.Getenv("GOSHMEM_RANK") == "1" {
			os.Setenv("SHMEM_SYMMETRIC_SIZE", "48M")
		}
	}
	shmemtest.RunWith(t, shmemtest.Options{NPs: []int{2}, Transports: transports[:2], Env: []string{"SHMEM_SYMMETRIC_SIZE=32M"}, NoInit: true, Setup: setup}, func(t *testing.T) {
		err := shmem.Init()
		if err == nil {
			shmem.Finalize()
			t.Fatal("Init succeeded with heaps of 32M and 48M")
		}
		if !errors.Is(err, shmem.ErrInvalidArgument) || !strings.Contains(err.Error(), "SHMEM_SYMMETRIC_SIZE must be the same everywhere") {
			t.Errorf("Init: %v; want ErrInvalidArgument naming SHMEM_SYMMETRIC_SIZE", err)
		}
	})
}

// TestInitFailsOnOnePE: a PE whose Init fails (a setting of its own)
// finalizes and exits 0 while the other waits for it in Init's exchange:
// the job ends, naming that PE and the one that waited, instead of
// waiting forever.
func TestInitFailsOnOnePE(t *testing.T) {
	setup := func(t *testing.T) {
		if os.Getenv("GOSHMEM_RANK") == "1" {
			os.Setenv("GOSHMEM_BARRIER", "tree")
		}
	}
	check := func(t *testing.T, out string) {
		const want = "left the job after it finalized, while a collective that cannot complete without it was pending: PE(s) 0 wait in it"
		if !strings.Contains(out, "goshmem-run: PE 1 on host ") || !strings.Contains(out, want) {
			t.Errorf("output does not name PE 1, which left, and PE 0, which waited (%q):\n%s", want, out)
		}
	}
	shmemtest.RunWith(t, shmemtest.Options{NPs: []int{2}, Transports: transports[:1], NoInit: true, Setup: setup,
		WantExit: 1, Check: check, Timeout: 2 * time.Minute}, func(t *testing.T) {
		err := shmem.Init()
		if err == nil {
			shmem.Finalize()
			t.Fatal("Init succeeded")
		}
		t.Logf("Init: %v", err) // PE 1: GOSHMEM_BARRIER; PE 0: PE 1 left
	})
}

// TestBarrierSetting: GOSHMEM_BARRIER takes auto and node-aware (which on
// one node is the dissemination: there is nothing to gather); anything
// else fails Init, naming the variable.
func TestBarrierSetting(t *testing.T) {
	for _, tt := range []struct {
		value   string
		wantErr bool
	}{
		{"auto", false},
		{"node-aware", false},
		{"tree", true},
	} {
		t.Run(tt.value, func(t *testing.T) {
			shmemtest.RunWith(t, shmemtest.Options{NPs: []int{2}, Transports: transports[:1], Env: []string{"GOSHMEM_BARRIER=" + tt.value}, NoInit: true}, func(t *testing.T) {
				err := shmem.Init()
				if tt.wantErr {
					if err == nil {
						shmem.Finalize()
						t.Fatal("Init succeeded")
					}
					if !errors.Is(err, shmem.ErrInvalidArgument) || !strings.Contains(err.Error(), "GOSHMEM_BARRIER") {
						t.Errorf("Init: %v; want ErrInvalidArgument naming GOSHMEM_BARRIER", err)
					}
					return
				}
				if err != nil {
					t.Fatalf("Init: %v", err)
				}
				for range 10 {
					shmem.BarrierAll()
				}
				shmem.Finalize()
			})
		})
	}
}
