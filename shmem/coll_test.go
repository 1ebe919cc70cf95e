package shmem_test

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/goshmem/goshmem/shmem"
	"github.com/goshmem/goshmem/shmemtest"
)

// The collectives are checked against models computed here from the same
// value functions every PE can evaluate for every PE. Consecutive calls in
// a check are made back to back, with no barrier between them and with
// sources and dests changed as soon as a call returns, which is what the
// routines must allow.

// num converts x to T (wrapping for the small integer types; a complex
// number gets x - xi).
func num[T shmem.RMA](x int) T {
	var z T
	v := reflect.ValueOf(&z).Elem()
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(x))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		v.SetUint(uint64(x))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(x))
	case reflect.Complex64, reflect.Complex128:
		v.SetComplex(complex(float64(x), float64(-x)))
	}
	return z
}

// collBufs are symmetric arrays for the checks of one type: every PE of the
// job allocates them (allocation is collective over the job), before any
// team is split.
type collBufs[T shmem.RMA] struct{ a, b []T }

func newCollBufs[T shmem.RMA](t *testing.T, n int) collBufs[T] {
	return collBufs[T]{calloc[T](t, n), calloc[T](t, n)}
}

func (c collBufs[T]) free() {
	shmem.Free(c.a)
	shmem.Free(c.b)
}

// sentinel is what the parts of dest a collective must not touch hold.
const sentinel = -99

func fill[T shmem.RMA](s []T, f func(i int) int) {
	for i := range s {
		s[i] = num[T](f(i))
	}
}

// checkUntouched reports the elements of dest[from:] that are no longer
// the sentinel.
func checkUntouched[T shmem.RMA](t *testing.T, what string, dest []T, from int) {
	t.Helper()
	for i := from; i < len(dest); i++ {
		if dest[i] != num[T](sentinel) {
			t.Fatalf("%s: dest[%d] = %v beyond the result (%d elements) was changed", what, i, dest[i], from)
		}
	}
}

func checkSlice[T shmem.RMA](t *testing.T, what string, want, got []T) {
	t.Helper()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("%s (-want +got):\n%s", what, diff)
	}
}

// checkBroadcast broadcasts from every root of team, for each length, back
// to back, into dest with room to spare, and once in place (dest = source).
func checkBroadcast[T shmem.RMA](t *testing.T, what string, team *shmem.Team, bufs collBufs[T], lens []int, mem bool) {
	tm, tn := team.MyPE(), team.NPEs()
	val := func(pe, i, it, root int) int { return 1000*pe + 7*i + 3*it + root }
	it := 0
	for _, nel := range lens {
		for root := 0; root < tn; root++ {
			it++
			src, dst := bufs.a[:nel], bufs.b
			fill(src, func(i int) int { return val(tm, i, it, root) })
			fill(dst, func(int) int { return sentinel })
			var err error
			if mem {
				err = shmem.BroadcastMem(team, bytesOfT(dst), bytesOfT(src), root)
			} else {
				err = shmem.Broadcast(team, dst, src, root)
			}
			w := fmt.Sprintf("%s: Broadcast of %d elements from root %d (call %d)", what, nel, root, it)
			if err != nil {
				t.Fatalf("%s: %v", w, err)
			}
			want := make([]T, nel)
			fill(want, func(i int) int { return val(root, i, it, root) })
			checkSlice(t, w, want, dst[:nel])
			checkUntouched(t, w, dst, nel)
			if tm != root {
				// The source of a non-root is not read, nor changed.
				checkSlice(t, w+": source of a non-root", func() []T { s := make([]T, nel); fill(s, func(i int) int { return val(tm, i, it, root) }); return s }(), src)
			}
		}
	}
	// In place on every PE: dest and source are the same array.
	for root := 0; root < tn; root++ {
		nel := lens[len(lens)-1]
		buf := bufs.a[:nel]
		fill(buf, func(i int) int { return val(tm, i, -1, root) })
		if err := shmem.Broadcast(team, buf, buf, root); err != nil {
			t.Fatalf("%s: in-place Broadcast: %v", what, err)
		}
		want := make([]T, nel)
		fill(want, func(i int) int { return val(root, i, -1, root) })
		checkSlice(t, fmt.Sprintf("%s: in-place Broadcast from root %d", what, root), want, buf)
	}
}

func bytesOfT[T any](s []T) []byte {
	if len(s) == 0 {
		return []byte{}
	}
	return unsafeBytes(s)
}

// checkReduce runs a reduction with fn on team for each length, back to back
// and once in place, against model, the operation on two values.
func checkReduce[T shmem.RMA](t *testing.T, what string, team *shmem.Team, bufs collBufs[T], lens []int,
	fn func(*shmem.Team, []T, []T) error, model func(a, b T) T, val func(pe, i, it int) int) {
	tm, tn := team.MyPE(), team.NPEs()
	for it, nel := range append(lens, lens...) {
		inPlace := it >= len(lens)
		src, dst := bufs.a[:nel], bufs.b
		fill(src, func(i int) int { return val(tm, i, it) })
		fill(dst, func(int) int { return sentinel })
		var err error
		if inPlace {
			dst = src
			err = fn(team, src, src)
		} else {
			err = fn(team, dst, src)
		}
		w := fmt.Sprintf("%s of %d elements (call %d, in place %v)", what, nel, it, inPlace)
		if err != nil {
			t.Fatalf("%s: %v", w, err)
		}
		want := make([]T, nel)
		for i := range want {
			want[i] = num[T](val(0, i, it))
			for pe := 1; pe < tn; pe++ {
				want[i] = model(want[i], num[T](val(pe, i, it)))
			}
		}
		checkSlice(t, w, want, dst[:nel])
		if !inPlace {
			checkUntouched(t, w, dst, nel)
			got := make([]T, nel)
			fill(got, func(i int) int { return val(tm, i, it) })
			checkSlice(t, w+": source changed", got, src)
		}
	}
}

// smallVal gives values whose products over 4 PEs stay exact in every type.
func smallVal(pe, i, it int) int { return 1 + (pe+i+it)%3 }

// bitsVal gives 7-bit patterns that differ among PEs.
func bitsVal(pe, i, it int) int { return (pe*37 + i*11 + it*5 + 1) & 0x7f }

// mixedVal gives values of both signs.
func mixedVal(pe, i, it int) int { return (pe*13+i*7+it)%41 - 20 }

func checkSum[T shmem.Arith](t *testing.T, what string, team *shmem.Team, lens []int) {
	bufs := newCollBufs[T](t, 3000)
	checkReduce(t, what+" SumReduce", team, bufs, lens, shmem.SumReduce[T], func(a, b T) T { return a + b }, smallVal)
	bufs.free()
}

// checkAllReductions runs every reduction on team with a representative
// type of each class, and SumReduce with every type; the bufs come from
// the caller.
func checkAllReductions(t *testing.T, what string, team *shmem.Team, i64 collBufs[int64], u8 collBufs[uint8], f64 collBufs[float64], c128 collBufs[complex128], lens []int) {
	checkReduce(t, what+" AndReduce[int64]", team, i64, lens, shmem.AndReduce[int64], func(a, b int64) int64 { return a & b }, bitsVal)
	checkReduce(t, what+" OrReduce[int64]", team, i64, lens, shmem.OrReduce[int64], func(a, b int64) int64 { return a | b }, bitsVal)
	checkReduce(t, what+" XorReduce[int64]", team, i64, lens, shmem.XorReduce[int64], func(a, b int64) int64 { return a ^ b }, bitsVal)
	checkReduce(t, what+" AndReduce[uint8]", team, u8, lens, shmem.AndReduce[uint8], func(a, b uint8) uint8 { return a & b }, bitsVal)
	checkReduce(t, what+" OrReduce[uint8]", team, u8, lens, shmem.OrReduce[uint8], func(a, b uint8) uint8 { return a | b }, bitsVal)
	checkReduce(t, what+" XorReduce[uint8]", team, u8, lens, shmem.XorReduce[uint8], func(a, b uint8) uint8 { return a ^ b }, bitsVal)
	checkReduce(t, what+" MaxReduce[int64]", team, i64, lens, shmem.MaxReduce[int64], func(a, b int64) int64 { return max(a, b) }, mixedVal)
	checkReduce(t, what+" MinReduce[int64]", team, i64, lens, shmem.MinReduce[int64], func(a, b int64) int64 { return min(a, b) }, mixedVal)
	checkReduce(t, what+" MaxReduce[float64]", team, f64, lens, shmem.MaxReduce[float64], func(a, b float64) float64 { return max(a, b) }, mixedVal)
	checkReduce(t, what+" MinReduce[float64]", team, f64, lens, shmem.MinReduce[float64], func(a, b float64) float64 { return min(a, b) }, mixedVal)
	checkReduce(t, what+" SumReduce[int64]", team, i64, lens, shmem.SumReduce[int64], func(a, b int64) int64 { return a + b }, mixedVal)
	checkReduce(t, what+" ProdReduce[int64]", team, i64, lens, shmem.ProdReduce[int64], func(a, b int64) int64 { return a * b }, mixedVal)
	checkReduce(t, what+" SumReduce[float64]", team, f64, lens, shmem.SumReduce[float64], func(a, b float64) float64 { return a + b }, mixedVal)
	checkReduce(t, what+" ProdReduce[float64]", team, f64, lens, shmem.ProdReduce[float64], func(a, b float64) float64 { return a * b }, smallVal)
	checkReduce(t, what+" SumReduce[complex128]", team, c128, lens, shmem.SumReduce[complex128], func(a, b complex128) complex128 { return a + b }, mixedVal)
	checkReduce(t, what+" ProdReduce[complex128]", team, c128, lens, shmem.ProdReduce[complex128], func(a, b complex128) complex128 { return a * b }, smallVal)
	checkReduce(t, what+" ProdReduce[uint8]", team, u8, lens, shmem.ProdReduce[uint8], func(a, b uint8) uint8 { return a * b }, bitsVal)
}

// checkCollect runs FCollect (fixed) or Collect on team: PE i contributes
// count(i, it) elements in call it.
func checkCollect[T shmem.RMA](t *testing.T, what string, team *shmem.Team, bufs collBufs[T], calls int, count func(pe, it int) int, fixed, mem bool) {
	tm, tn := team.MyPE(), team.NPEs()
	val := func(pe, i, it int) int { return 100*pe + 3*i + it }
	for it := range calls {
		src, dst := bufs.a[:count(tm, it)], bufs.b
		fill(src, func(i int) int { return val(tm, i, it) })
		fill(dst, func(int) int { return sentinel })
		var err error
		switch {
		case fixed && mem:
			err = shmem.FCollectMem(team, bytesOfT(dst), bytesOfT(src))
		case fixed:
			err = shmem.FCollect(team, dst, src)
		case mem:
			err = shmem.CollectMem(team, bytesOfT(dst), bytesOfT(src))
		default:
			err = shmem.Collect(team, dst, src)
		}
		w := fmt.Sprintf("%s (call %d, %d elements here)", what, it, len(src))
		if err != nil {
			t.Fatalf("%s: %v", w, err)
		}
		var want []T
		for pe := range tn {
			for i := range count(pe, it) {
				want = append(want, num[T](val(pe, i, it)))
			}
		}
		if want == nil {
			want = []T{}
		}
		checkSlice(t, w, want, dst[:len(want)])
		checkUntouched(t, w, dst, len(want))
	}
}

// checkAlltoall runs Alltoall with each nelems per pair, and Alltoalls with
// each pair of strides, on team.
func checkAlltoall[T shmem.RMA](t *testing.T, what string, team *shmem.Team, bufs collBufs[T], nelemss []int, mem bool) {
	tm, tn := team.MyPE(), team.NPEs()
	val := func(from, to, k, it int) int { return 1000*from + 100*to + 3*k + it }
	for it, nel := range nelemss {
		src, dst := bufs.a[:tn*nel], bufs.b
		for j := range tn {
			fill(src[j*nel:(j+1)*nel], func(k int) int { return val(tm, j, k, it) })
		}
		fill(dst, func(int) int { return sentinel })
		var err error
		if mem {
			err = shmem.AlltoallMem(team, bytesOfT(dst), bytesOfT(src))
		} else {
			err = shmem.Alltoall(team, dst, src)
		}
		w := fmt.Sprintf("%s: Alltoall of %d elements per pair (call %d)", what, nel, it)
		if err != nil {
			t.Fatalf("%s: %v", w, err)
		}
		want := make([]T, tn*nel)
		for j := range tn {
			fill(want[j*nel:(j+1)*nel], func(k int) int { return val(j, tm, k, it) })
		}
		checkSlice(t, w, want, dst[:tn*nel])
		checkUntouched(t, w, dst, tn*nel)
	}
	for it, c := range [][3]int{{1, 1, 3}, {1, 2, 4}, {3, 1, 2}, {2, 3, 5}, {2, 2, 0}} {
		dstS, sstS, nel := c[0], c[1], c[2]
		src, dst := bufs.a, bufs.b
		fill(src, func(int) int { return sentinel })
		for j := range tn {
			for k := range nel {
				src[(j*nel+k)*sstS] = num[T](val(tm, j, k, it))
			}
		}
		fill(dst, func(int) int { return sentinel })
		var err error
		if mem {
			err = shmem.AlltoallsMem(team, bytesOfT(dst), bytesOfT(src), dstS, sstS, nel)
		} else {
			err = shmem.Alltoalls(team, dst, src, dstS, sstS, nel)
		}
		w := fmt.Sprintf("%s: Alltoalls dst %d sst %d nelems %d", what, dstS, sstS, nel)
		if err != nil {
			t.Fatalf("%s: %v", w, err)
		}
		want := make([]T, len(dst))
		fill(want, func(int) int { return sentinel })
		for j := range tn {
			for k := range nel {
				want[(j*nel+k)*dstS] = num[T](val(j, tm, k, it))
			}
		}
		checkSlice(t, w, want, dst)
	}
}

// checkEverything runs every collective on team.
func checkEverything(t *testing.T, what string, team *shmem.Team, i64 collBufs[int64], u8 collBufs[uint8], f64 collBufs[float64], c128 collBufs[complex128]) {
	checkBroadcast(t, what, team, i64, []int{0, 1, 5, 600}, false)
	checkBroadcast(t, what+" (Mem)", team, u8, []int{3, 700}, true)
	checkAllReductions(t, what, team, i64, u8, f64, c128, []int{1, 5, 600})
	// Blocks of up to 2 KiB go through the PEs' staging slots on one node,
	// longer ones are read from the sources (400 int64s).
	checkCollect(t, what+" FCollect", team, i64, 4, func(pe, it int) int { return []int{0, 1, 150, 400}[it] }, true, false)
	checkCollect(t, what+" FCollectMem", team, u8, 2, func(pe, it int) int { return 5 + it }, true, true)
	checkCollect(t, what+" Collect", team, i64, 4, func(pe, it int) int { return (pe*3 + it) % 4 * (1 + 30*(it/3)) }, false, false)
	checkCollect(t, what+" Collect (short and long blocks)", team, i64, 2, func(pe, it int) int { return []int{3, 400}[(pe+it)%2] }, false, false)
	checkCollect(t, what+" CollectMem", team, u8, 2, func(pe, it int) int { return pe + it }, false, true)
	checkAlltoall(t, what, team, i64, []int{0, 1, 3, 100}, false)
	checkAlltoall(t, what+" (Mem)", team, u8, []int{2}, true)
}

// withCollBufs allocates the buffers checkEverything needs.
func withCollBufs(t *testing.T, n int, body func(i64 collBufs[int64], u8 collBufs[uint8], f64 collBufs[float64], c128 collBufs[complex128])) {
	i64, u8 := newCollBufs[int64](t, 4000), newCollBufs[uint8](t, 4000)
	f64, c128 := newCollBufs[float64](t, 4000), newCollBufs[complex128](t, 4000)
	body(i64, u8, f64, c128)
	shmem.BarrierAll()
	i64.free()
	u8.free()
	f64.free()
	c128.free()
}

func TestCollWorld(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		withCollBufs(t, n, func(i64 collBufs[int64], u8 collBufs[uint8], f64 collBufs[float64], c128 collBufs[complex128]) {
			checkEverything(t, "TeamWorld", shmem.TeamWorld, i64, u8, f64, c128)
			// Long vectors: the sliced reduction on one node.
			checkReduce(t, "TeamWorld long SumReduce[int64]", shmem.TeamWorld, i64, []int{3000}, shmem.SumReduce[int64], func(a, b int64) int64 { return a + b }, mixedVal)
			checkReduce(t, "TeamWorld long MaxReduce[float64]", shmem.TeamWorld, f64, []int{3000}, shmem.MaxReduce[float64], func(a, b float64) float64 { return max(a, b) }, mixedVal)
		})
	})
}

func TestCollTeams(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		withCollBufs(t, n, func(i64 collBufs[int64], u8 collBufs[uint8], f64 collBufs[float64], c128 collBufs[complex128]) {
			checkEverything(t, "TeamShared", shmem.TeamShared, i64, u8, f64, c128)
			// The odd PEs (strided from 1), and the evens of a 2-column grid's
			// columns, then every PE but the first.
			splits := [][3]int{{1, 2, n / 2}, {0, 2, (n + 1) / 2}, {1, 1, n - 1}}
			for _, s := range splits {
				if s[2] < 1 {
					continue
				}
				what := fmt.Sprintf("team (%d, %d, %d)", s[0], s[1], s[2])
				team, err := shmem.TeamSplitStrided(shmem.TeamWorld, s[0], s[1], s[2], shmem.TeamConfig{}, 0)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				if team != nil {
					checkEverything(t, what, team, i64, u8, f64, c128)
					team.Destroy()
				}
				shmem.BarrierAll()
			}
			x, y, err := shmem.TeamSplit2D(shmem.TeamWorld, 2, shmem.TeamConfig{}, 0, shmem.TeamConfig{}, 0)
			if err != nil {
				t.Fatalf("TeamSplit2D: %v", err)
			}
			// Rows and columns work at once, each on its own.
			checkEverything(t, "row of 2D", x, i64, u8, f64, c128)
			shmem.BarrierAll()
			checkEverything(t, "column of 2D", y, i64, u8, f64, c128)
			x.Destroy()
			y.Destroy()
		})
	})
}

func TestCollAllTypes(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		lens := []int{1, 9}
		w := shmem.TeamWorld
		checkSum[int](t, "int", w, lens)
		checkSum[int8](t, "int8", w, lens)
		checkSum[int16](t, "int16", w, lens)
		checkSum[int32](t, "int32", w, lens)
		checkSum[int64](t, "int64", w, lens)
		checkSum[uint](t, "uint", w, lens)
		checkSum[uint8](t, "uint8", w, lens)
		checkSum[uint16](t, "uint16", w, lens)
		checkSum[uint32](t, "uint32", w, lens)
		checkSum[uint64](t, "uint64", w, lens)
		checkSum[uintptr](t, "uintptr", w, lens)
		checkSum[float32](t, "float32", w, lens)
		checkSum[float64](t, "float64", w, lens)
		checkSum[complex64](t, "complex64", w, lens)
		checkSum[complex128](t, "complex128", w, lens)
		// The bitwise reductions take every integer type but int.
		checkXor[int8](t, w)
		checkXor[int16](t, w)
		checkXor[int32](t, w)
		checkXor[uint16](t, w)
		checkXor[uint32](t, w)
		checkXor[uint64](t, w)
		checkXor[uint](t, w)
		checkXor[uintptr](t, w)
		// Broadcast and FCollect of every type, through one generic path.
		checkMove[int](t, w)
		checkMove[int8](t, w)
		checkMove[int16](t, w)
		checkMove[int32](t, w)
		checkMove[uint16](t, w)
		checkMove[uint32](t, w)
		checkMove[uint64](t, w)
		checkMove[uint](t, w)
		checkMove[uintptr](t, w)
		checkMove[float32](t, w)
		checkMove[complex64](t, w)
	})
}

func checkXor[T shmem.BitwiseReduce](t *testing.T, team *shmem.Team) {
	bufs := newCollBufs[T](t, 64)
	checkReduce(t, fmt.Sprintf("XorReduce[%T]", *new(T)), team, bufs, []int{1, 9}, shmem.XorReduce[T], func(a, b T) T { return a ^ b }, bitsVal)
	bufs.free()
}

func checkMove[T shmem.RMA](t *testing.T, team *shmem.Team) {
	bufs := newCollBufs[T](t, 64)
	name := fmt.Sprintf("%T", *new(T))
	checkBroadcast(t, name, team, bufs, []int{3}, false)
	checkCollect(t, name+" FCollect", team, bufs, 1, func(int, int) int { return 2 }, true, false)
	bufs.free()
}

// TestCollLargerJobs runs every collective in jobs of 5 to 8 PEs over shared
// memory, and over TCP for 5 and 8 (the cross-node algorithms: a power of
// two and past one), on TeamWorld and on the odd PEs.
func TestCollLargerJobs(t *testing.T) {
	for _, c := range []struct {
		name  string
		nps   []int
		quick []int // the sizes of nps that run unless the full matrix is asked for
		env   []string
	}{
		{"sm", []int{5, 6, 7, 8}, []int{7}, []string{variantEnv + "=sm"}},
		{"tcp", []int{5, 8}, []int{5}, []string{variantEnv + "=tcp", "UCX_TLS=tcp,self"}},
	} {
		shmemtest.RunWith(t, shmemtest.Options{Shared: true, NPs: c.nps, QuickNPs: c.quick, Transports: []shmemtest.Transport{{Name: c.name, Env: c.env}}, Timeout: 3 * shmemtest.DefaultTimeout}, func(t *testing.T) {
			n := shmem.NPEs()
			withCollBufs(t, n, func(i64 collBufs[int64], u8 collBufs[uint8], f64 collBufs[float64], c128 collBufs[complex128]) {
				checkEverything(t, "TeamWorld", shmem.TeamWorld, i64, u8, f64, c128)
				team, err := shmem.TeamSplitStrided(shmem.TeamWorld, 1, 2, n/2, shmem.TeamConfig{}, 0)
				if err != nil {
					t.Fatal(err)
				}
				if team != nil {
					checkEverything(t, "odd PEs", team, i64, u8, f64, c128)
					team.Destroy()
				}
			})
		})
	}
}

// TestCollBackToBackStress runs reductions, broadcasts, fcollects and
// collects back to back, many times, each PE late by turns (it spins a
// while before some calls), and every PE changes its source and dest as
// soon as a call returns: across nodes their data waits in the team's net
// area, which a fast PE's next calls must not overwrite before a slow PE
// has read it. Short vectors (pushed with the calls' keys) and long ones
// (the bandwidth algorithms) alternate, over 2, 3 and 5 PEs (folded
// reductions) and 4. Broadcasts come in runs, of one root and of roots
// that change, whose root across nodes returns without waiting for the
// other PEs (coll_net.go): its next calls must not overtake them.
func TestCollBackToBackStress(t *testing.T) {
	jobWith(t, jobOptions{nps: []int{2, 3, 4, 5}, quick: []int{2, 3, 5}}, func(t *testing.T, me, n int) {
		const calls = 200
		// The kinds of call: 0 SumReduce, 1 Broadcast, 2 FCollect, 3
		// Collect.
		kinds := []int{0, 1, 1, 1, 2, 1, 1, 3, 1, 0, 1}
		src, dst := calloc[int64](t, 1200*n), calloc[int64](t, 1200*n)
		defer shmem.Free(dst)
		defer shmem.Free(src)
		w := shmem.TeamWorld
		for it := range calls {
			if (it+me)%n == 0 {
				late(it)
			}
			nel := []int{1, 7, 300, 600, 1}[it%5] // 600 int64s: past the push
			kind := kinds[it%len(kinds)]
			root := (it / 3) % n
			// k is the block of PE pe in a Collect: a length of its own.
			k := func(pe int) int { return (nel + 250*pe) % 700 }
			val := func(pe, i int) int64 { return int64(1000*pe + 3*i + it) }
			for i := range max(nel, k(me)) {
				src[i] = val(me, i)
			}
			var err error
			var want []int64
			switch kind {
			case 0:
				err = shmem.SumReduce(w, dst[:nel], src[:nel])
				want = make([]int64, nel)
				for i := range want {
					for pe := range n {
						want[i] += val(pe, i)
					}
				}
			case 1:
				err = shmem.Broadcast(w, dst[:nel], src[:nel], root)
				want = make([]int64, nel)
				for i := range want {
					want[i] = val(root, i)
				}
			case 2:
				err = shmem.FCollect(w, dst[:n*nel], src[:nel])
				for pe := range n {
					for i := range nel {
						want = append(want, val(pe, i))
					}
				}
			case 3:
				err = shmem.Collect(w, dst, src[:k(me)])
				for pe := range n {
					for i := range k(pe) {
						want = append(want, val(pe, i))
					}
				}
			}
			what := fmt.Sprintf("call %d (kind %d, %d elements, root %d)", it, kind, nel, root)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			checkSlice(t, what, want, dst[:len(want)])
			// Change both at once, as a program may.
			for i := range max(len(want), nel, k(me)) {
				src[i], dst[i] = -1, -1
			}
		}
		shmem.BarrierAll()
	})
}

// late spins for a while that depends on it, so that PEs fall behind by
// turns.
func late(it int) {
	end := time.Now().Add(time.Duration(50+it%7*40) * time.Microsecond)
	for time.Now().Before(end) {
	}
}

// TestSmallHeapOneNode: a job whose PEs all map each other's heaps starts
// with a heap of 512K and runs its collectives: its team pool holds no
// net area (coll_net.go), which no team of it uses (with one, 2 PEs took
// 610 KB of team pool and Init failed).
func TestSmallHeapOneNode(t *testing.T) {
	shmemtest.RunWith(t, shmemtest.Options{NPs: []int{2}, Transports: []shmemtest.Transport{shmemtest.SharedMemory},
		Env: []string{"SHMEM_SYMMETRIC_SIZE=512K"}}, func(t *testing.T) {
		me, n := shmem.MyPE(), shmem.NPEs()
		src, dst := calloc[int64](t, 4), calloc[int64](t, 4)
		src[0] = int64(me + 1)
		if err := shmem.SumReduce(shmem.TeamWorld, dst[:1], src[:1]); err != nil {
			t.Fatal(err)
		}
		if want := int64(n * (n + 1) / 2); dst[0] != want {
			t.Fatalf("SumReduce: %d, want %d", dst[0], want)
		}
		shmem.BarrierAll()
		shmem.Free(dst)
		shmem.Free(src)
	})
}

// TestBroadcastRootThenDestroy: across nodes the root of a short broadcast
// returns before the other PEs' messages reach it; destroying the team at
// once, and splitting a new one into its slot, must neither lose them nor
// let them count in the new team's words.
func TestBroadcastRootThenDestroy(t *testing.T) {
	jobWith(t, jobOptions{nps: []int{3}}, func(t *testing.T, me, n int) {
		src, dst := calloc[int64](t, 4), calloc[int64](t, 4)
		defer shmem.Free(dst)
		defer shmem.Free(src)
		for it := range 20 {
			team, err := shmem.TeamSplitStrided(shmem.TeamWorld, 0, 1, n, shmem.TeamConfig{}, 0)
			if err != nil {
				t.Fatal(err)
			}
			root := it % n
			src[0], dst[0] = int64(100*me+it), -1
			for range 3 {
				if err := shmem.Broadcast(team, dst[:1], src[:1], root); err != nil {
					t.Fatalf("split %d: %v", it, err)
				}
				if want := int64(100*root + it); dst[0] != want {
					t.Fatalf("split %d: Broadcast from %d: %d, want %d", it, root, dst[0], want)
				}
			}
			team.Destroy()
		}
		shmem.BarrierAll()
	})
}
