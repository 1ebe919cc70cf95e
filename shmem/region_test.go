package shmem_test

import (
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/shmem"
	"github.com/goshmem/goshmem/shmemtest"
)

// globalRegion is a Go global array made symmetric with SetRegions.
var globalRegion [1024]int64

// regionIters is how many atomics each PE adds to PE 0's counter.
const regionIters = 200

// TestRegions registers two symmetric regions besides the heap, a global
// array and an anonymous mapping (placed anywhere by each PE's kernel),
// and a third on the even PEs only, and runs puts, gets, atomics hammering
// one word, signals and waits on them, over each transport variant:
// the PEs reach each other's regions through ucp (cma, tcp or in
// software), whatever way their heaps are reached. PE 0 waits for the
// total by loading its counter, calling nothing: the atomics complete
// without it.
func TestRegions(t *testing.T) {
	shmemtest.RunWith(t, shmemtest.Options{NPs: []int{3}, Transports: transports, Setup: mixedSetup, NoInit: true}, func(t *testing.T) {
		anon, err := unix.Mmap(-1, 0, 3*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Munmap(anon)
		g := unsafe.Slice((*byte)(unsafe.Pointer(&globalRegion)), unsafe.Sizeof(globalRegion))
		regions := [][]byte{g, anon[:2*4096]}
		if rank := os.Getenv("GOSHMEM_RANK"); rank != "" && (rank[len(rank)-1]-'0')%2 == 0 {
			regions = append(regions, anon[2*4096:]) // only the even PEs have region 2
		}
		if err := shmem.SetRegions(regions...); err != nil {
			t.Fatal(err)
		}
		defer shmem.SetRegions()
		if err := shmem.Init(); err != nil {
			t.Fatal(err)
		}
		defer shmem.Finalize()
		me, n := shmem.MyPE(), shmem.NPEs()
		right, left := (me+1)%n, (me+n-1)%n
		x := globalRegion[:]
		y := unsafe.Slice((*int64)(unsafe.Pointer(&anon[0])), 2*4096/8)

		// Put, Get, P, G, strided.
		src := []int64{int64(me*100 + 1), int64(me*100 + 2), int64(me*100 + 3), int64(me*100 + 4)}
		shmem.Put(x[:4], src, right)
		shmem.P(&y[10], int64(me+7), right)
		shmem.IPut(y[20:], src, 2, 1, 4, right)
		shmem.BarrierAll()
		for i := range 4 {
			if x[i] != int64(left*100+i+1) || y[20+2*i] != int64(left*100+i+1) {
				t.Fatalf("after Put and IPut from PE %d: x[%d] = %d, y[%d] = %d", left, i, x[i], 20+2*i, y[20+2*i])
			}
		}
		if y[10] != int64(left+7) {
			t.Fatalf("after P from PE %d: y[10] = %d", left, y[10])
		}
		got := make([]int64, 4)
		shmem.Get(got, x[:4], right)
		if g := shmem.G(&y[10], right); got[3] != int64(me*100+4) || g != int64(me+7) {
			t.Fatalf("Get from PE %d: %v, G: %d", right, got, g)
		}
		shmem.GetNBI(got[:1], y[22:23], right)
		shmem.Quiet()
		if got[0] != int64(me*100+2) {
			t.Fatalf("GetNBI: %d", got[0])
		}

		// Every PE hammers PE 0's counters; PE 0 adds too, then loads.
		var sum int64
		for range regionIters {
			shmem.AtomicAdd(&x[100], 1, 0)
			sum += shmem.AtomicFetchAdd(&y[100], 1, 0)
		}
		shmem.AtomicAdd(&x[101], sum, 0)
		if shmem.AtomicCompareSwap(&x[102], 0, int64(me+1), 0) == 0 {
			shmem.AtomicInc(&x[103], 0)
		}
		shmem.Quiet()
		if me == 0 {
			total := int64(n * regionIters)
			for atomic.LoadInt64(&x[100]) != total || atomic.LoadInt64(&y[100]) != total ||
				atomic.LoadInt64(&x[101]) != total*(total-1)/2 || atomic.LoadInt64(&x[103]) != 1 {
			}
		}
		shmem.BarrierAll()

		// Signals and waits: data in one region, the signal in the other.
		sig := (*uint64)(unsafe.Pointer(&x[200]))
		shmem.PutSignal(y[300:304], src, sig, 1, shmem.SignalSet, right)
		shmem.SignalWaitUntil(sig, shmem.CmpEQ, 1)
		if y[303] != int64(left*100+4) {
			t.Fatalf("the data of PutSignal from PE %d: %d", left, y[303])
		}
		shmem.AtomicSet(&y[400], 5, right)
		shmem.WaitUntil(&y[400], shmem.CmpEQ, 5)

		// Direct pointers: a PE's own regions; a peer's only where a
		// transport maps them (cma and tcp do not).
		if p := shmem.Ptr(&x[7], me); p != &x[7] {
			t.Errorf("Ptr(&x[7], me) = %p, want %p", p, &x[7])
		}
		if !shmem.AddrAccessible(&y[1], right) {
			t.Errorf("AddrAccessible(&y[1], %d) is false", right)
		}
		var local int64
		if shmem.AddrAccessible(&local, right) {
			t.Errorf("AddrAccessible of a local variable is true")
		}

		// Region 2 is only on the even PEs: an odd PE's is not there.
		z := unsafe.Slice((*int64)(unsafe.Pointer(&anon[2*4096])), 4096/8)
		if me%2 == 0 && n > 1 {
			checkPanic(t, "P into region 2 of PE 1", func() { shmem.P(&z[0], 1, 1) }, "shmem.P: symmetric region 2")
			if shmem.AddrAccessible(&z[0], 1) {
				t.Errorf("AddrAccessible(region 2, PE 1) is true")
			}
		}
		shmem.BarrierAll()
		if me == 0 {
			for i, c := range []struct {
				what      string
				got, want int64
			}{
				{"added", x[100], int64(n * regionIters)},
				{"fetch-added", y[100], int64(n * regionIters)},
				{"sum of fetched", x[101], int64(n*regionIters) * int64(n*regionIters-1) / 2},
				{"compare-and-swap winners", x[103], 1},
			} {
				if c.got != c.want {
					t.Errorf("%d: %s: %d, want %d", i, c.what, c.got, c.want)
				}
			}
		}
		shmem.BarrierAll()
		clear(globalRegion[:])
	})
}

// TestSetRegionsRejects: SetRegions refuses empty, misaligned and
// overlapping regions, and a call while the library is initialized.
func TestSetRegionsRejects(t *testing.T) {
	b := make([]byte, 64)
	for _, tc := range []struct {
		name    string
		regions [][]byte
	}{
		{"empty", [][]byte{b[:0]}},
		{"misaligned", [][]byte{b[1:9]}},
		{"overlap", [][]byte{b[:16], b[8:24]}},
		{"same", [][]byte{b[:8], b[:8]}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := shmem.SetRegions(tc.regions...); !errors.Is(err, shmem.ErrInvalidArgument) {
				t.Errorf("SetRegions: %v, want ErrInvalidArgument", err)
			}
		})
	}
	if err := shmem.SetRegions(b[:8], b[8:16]); err != nil {
		t.Errorf("SetRegions of adjacent regions: %v", err)
	}
	if err := shmem.SetRegions(); err != nil {
		t.Error(err)
	}
}

// TestRegionsTargetProgress: where no transport reaches a peer's region
// on its own (UCX_TLS=sm,self: the region is not mapped, and the atomics
// on it are shared-memory messages the target applies in its Progress),
// the first PE that reaches one says so in one warning, naming the
// UCX_TLS that serves them; with tcp among the transports, nothing is
// said. The operations complete here because the target is inside the
// library (a barrier) when they arrive.
func TestRegionsTargetProgress(t *testing.T) {
	const warning = "are shared-memory messages that PE 1 applies only while it is inside the library"
	for _, tc := range []struct {
		name string
		tls  string
		warn bool
	}{
		{"sm", "sm,self", true},
		{"sm-tcp", "sm,tcp,self", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check := func(t *testing.T, out string) {
				if strings.Contains(out, warning) != tc.warn {
					t.Errorf("UCX_TLS=%s: warning %q in the output is %v, want %v:\n%s", tc.tls, warning, !tc.warn, tc.warn, out)
				}
			}
			o := shmemtest.Options{NPs: []int{2}, Transports: []shmemtest.Transport{{Name: tc.name, Env: []string{"UCX_TLS=" + tc.tls}}}, NoInit: true, Check: check}
			shmemtest.RunWith(t, o, func(t *testing.T) {
				g := unsafe.Slice((*byte)(unsafe.Pointer(&globalRegion)), unsafe.Sizeof(globalRegion))
				if err := shmem.SetRegions(g); err != nil {
					t.Fatal(err)
				}
				defer shmem.SetRegions()
				if err := shmem.Init(); err != nil {
					t.Fatal(err)
				}
				defer shmem.Finalize()
				globalRegion[5] = 0
				shmem.BarrierAll()
				if shmem.MyPE() == 0 {
					shmem.AtomicAdd(&globalRegion[5], 3, 1)
					shmem.Quiet()
				}
				shmem.BarrierAll()
				if shmem.MyPE() == 1 && globalRegion[5] != 3 {
					t.Errorf("PE 1's word: %d, want 3", globalRegion[5])
				}
			})
		})
	}
}
