package shmem_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/goshmem/goshmem/shmem"
	"github.com/goshmem/goshmem/shmemtest"
)

// sliceDiff is cmp.Diff for large slices: cmp only runs when they differ
// (it is slow on millions of elements).
func sliceDiff[T comparable](want, got []T) string {
	if slices.Equal(want, got) {
		return ""
	}
	return cmp.Diff(want, got)
}

// nbiRoundTrip checks PutNBI and GetNBI of T between every pair of PEs with
// per elements each: every PE puts a pattern of its own into its slot on
// every PE, completes with Quiet, and reads every PE's array back with
// GetNBI, complete after the next Quiet.
func nbiRoundTrip[T shmem.RMA](t *testing.T, me, n, per int, val func(from, to, i int) T) {
	t.Helper()
	buf := calloc[T](t, n*per)
	srcs := make([][]T, n) // must stay untouched until Quiet
	for to := 0; to < n; to++ {
		srcs[to] = make([]T, per)
		for i := range srcs[to] {
			srcs[to][i] = val(me, to, i)
		}
		shmem.PutNBI(buf[me*per:(me+1)*per], srcs[to], to)
	}
	shmem.Quiet()
	shmem.BarrierAll()
	model := func(pe int) []T {
		want := make([]T, n*per)
		for from := 0; from < n; from++ {
			for i := 0; i < per; i++ {
				want[from*per+i] = val(from, pe, i)
			}
		}
		return want
	}
	if diff := sliceDiff(model(me), buf); diff != "" {
		t.Fatalf("%T: after PutNBI and Quiet (-want +got):\n%.2000s", buf[0], diff)
	}
	got := make([][]T, n)
	for pe := 0; pe < n; pe++ {
		got[pe] = make([]T, n*per)
		shmem.GetNBI(got[pe], buf, pe)
	}
	shmem.Quiet()
	for pe := 0; pe < n; pe++ {
		if diff := sliceDiff(model(pe), got[pe]); diff != "" {
			t.Fatalf("%T: GetNBI from PE %d after Quiet (-want +got):\n%.2000s", buf[0], pe, diff)
		}
	}
	shmem.BarrierAll()
	shmem.Free(buf)
}

func TestPutGetNBI(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		code := func(from, to, i int) int { return from*1000 + to*100 + i + 1 }
		nbiRoundTrip(t, me, n, 7, func(f, o, i int) int8 { return int8(code(f, o, i)) })
		nbiRoundTrip(t, me, n, 7, func(f, o, i int) uint16 { return uint16(code(f, o, i)) })
		nbiRoundTrip(t, me, n, 7, func(f, o, i int) int32 { return int32(-code(f, o, i)) })
		nbiRoundTrip(t, me, n, 7, func(f, o, i int) float64 { return float64(code(f, o, i)) / 3 })
		nbiRoundTrip(t, me, n, 7, func(f, o, i int) complex128 { return complex(float64(code(f, o, i)), 1) })
		// Large enough for zero-copy protocols, several in flight at once.
		nbiRoundTrip(t, me, n, 300_001, func(f, o, i int) uint32 { return uint32(code(f, o, i)) })
	})
}

func TestPutMemGetMemNBI(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		const size = 200_003
		buf := calloc[byte](t, n*size)
		src := make([]byte, size)
		for i := range src {
			src[i] = byte(i*3 + me)
		}
		for to := 0; to < n; to++ {
			// Every length from 0 to 40 at the start of the slot, then the rest.
			for l := 0; l <= 40; l++ {
				shmem.PutMemNBI(buf[me*size:me*size+l], src[:l], to)
			}
			shmem.PutMemNBI(buf[me*size+40:(me+1)*size], src[40:], to)
		}
		shmem.Quiet()
		shmem.BarrierAll()
		want := make([]byte, n*size)
		for from := 0; from < n; from++ {
			for i := 0; i < size; i++ {
				want[from*size+i] = byte(i*3 + from)
			}
		}
		if diff := sliceDiff(want, buf); diff != "" {
			t.Fatalf("after PutMemNBI (-want +got):\n%.2000s", diff)
		}
		to := (me + 1) % n
		got := make([]byte, n*size)
		shmem.GetMemNBI(got[:1], buf[:1], to)
		shmem.GetMemNBI(got[1:], buf[1:], to)
		shmem.GetMemNBI(got[:0], buf[:0], to) // zero length does nothing
		shmem.Quiet()
		if diff := sliceDiff(want, got); diff != "" {
			t.Fatalf("GetMemNBI from PE %d (-want +got):\n%.2000s", to, diff)
		}
		shmem.BarrierAll()
		shmem.Free(buf)
	})
}

// strides are the strided and blocked transfers of the tests (strides in
// elements, blocks of bsize elements); every one fits in stridedLen
// elements.
var strides = []struct{ dst, src, bsize, nblocks int }{
	{1, 1, 1, 5}, {2, 3, 1, 7}, {3, 1, 1, 4}, {1, 4, 1, 6}, {5, 2, 1, 0}, {1, 1, 1, 1}, {7, 7, 1, 3},
	{3, 2, 2, 5}, {4, 4, 4, 4}, {5, 3, 3, 3}, {8, 2, 1, 3}, {6, 9, 2, 3}, {2, 2, 2, 0}, {4, 4, 0, 3},
}

const stridedLen = 32

// strided checks IBPut and IBGet of T against a model, and IPut and IGet
// where the blocks are of one element: a put into this PE's region on the
// next PE, a get from the next PE's array.
func strided[T shmem.RMA](t *testing.T, me, n int, val func(pe, i int) T) {
	t.Helper()
	to, from := (me+1)%n, (me-1+n)%n
	for _, c := range strides {
		for _, element := range []bool{false, true} {
			if element && c.bsize != 1 {
				continue
			}
			name := fmt.Sprintf("%T dst stride %d, src stride %d, %d blocks of %d", val(0, 0), c.dst, c.src, c.nblocks, c.bsize)
			region := calloc[T](t, n*stridedLen)
			src := make([]T, stridedLen)
			for i := range src {
				src[i] = val(me, i)
			}
			mine := region[me*stridedLen : (me+1)*stridedLen]
			put, get := "IBPut", "IBGet"
			if element {
				put, get = "IPut", "IGet"
				shmem.IPut(mine, src, c.dst, c.src, c.nblocks, to)
			} else {
				shmem.IBPut(mine, src, c.dst, c.src, c.bsize, c.nblocks, to)
			}
			shmem.BarrierAll()
			want := make([]T, stridedLen)
			for i := 0; i < c.nblocks; i++ {
				for b := 0; b < c.bsize; b++ {
					want[i*c.dst+b] = val(from, i*c.src+b)
				}
			}
			if diff := cmp.Diff(want, region[from*stridedLen:(from+1)*stridedLen]); diff != "" {
				t.Fatalf("%s, %s, from PE %d (-want +got):\n%s", put, name, from, diff)
			}
			// The get: every PE's whole region holds its own pattern.
			for i := range region {
				region[i] = val(me, i)
			}
			shmem.BarrierAll()
			got := make([]T, stridedLen)
			if element {
				shmem.IGet(got, region, c.dst, c.src, c.nblocks, to)
			} else {
				shmem.IBGet(got, region, c.dst, c.src, c.bsize, c.nblocks, to)
			}
			clear(want)
			for i := 0; i < c.nblocks; i++ {
				for b := 0; b < c.bsize; b++ {
					want[i*c.dst+b] = val(to, i*c.src+b)
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("%s, %s, from PE %d (-want +got):\n%s", get, name, to, diff)
			}
			shmem.BarrierAll()
			shmem.Free(region)
		}
	}
}

func TestIPutIGet(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		strided(t, me, n, func(pe, i int) int16 { return int16(pe*100 + i + 1) })
		strided(t, me, n, func(pe, i int) int64 { return int64(pe*100+i+1) << 35 })
		strided(t, me, n, func(pe, i int) uint8 { return uint8(pe*50 + i + 1) })
		strided(t, me, n, func(pe, i int) complex64 { return complex(float32(pe), float32(i)+0.5) })
	})
}

// pattern is the data a PE sends in round r of the signal tests.
func pattern(from, r, per int) []int32 {
	s := make([]int32, per)
	for i := range s {
		s[i] = int32(from*10000 + r*100 + i)
	}
	return s
}

func TestPutSignal(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		const rounds, per = 6, 9
		to, from := (me+1)%n, (me-1+n)%n
		buf := calloc[int32](t, rounds*per)
		sig := calloc[uint64](t, 2)
		// A ring with SignalSet: round r fills slot r and sets the signal to
		// r; blocking and non-blocking rounds alternate.
		srcs := make([][]int32, rounds) // non-blocking sources stay untouched until Quiet
		for r := 1; r <= rounds; r++ {
			srcs[r-1] = pattern(me, r, per)
			slot := buf[(r-1)*per : r*per]
			if r%2 == 0 {
				shmem.PutSignal(slot, srcs[r-1], &sig[0], uint64(r), shmem.SignalSet, to)
			} else {
				shmem.PutSignalNBI(slot, srcs[r-1], &sig[0], uint64(r), shmem.SignalSet, to)
			}
		}
		if got := shmem.SignalWaitUntil(&sig[0], shmem.CmpEQ, rounds); got != rounds {
			t.Fatalf("SignalWaitUntil(== %d) returned %d", rounds, got)
		}
		// The last signal implies every round's data.
		var want []int32
		for r := 1; r <= rounds; r++ {
			want = append(want, pattern(from, r, per)...)
		}
		if diff := cmp.Diff(want, buf); diff != "" {
			t.Fatalf("data when the signal arrived (-want +got):\n%s", diff)
		}
		if got := shmem.SignalFetch(&sig[0]); got != rounds {
			t.Fatalf("SignalFetch = %d, want %d", got, rounds)
		}
		shmem.Quiet()
		shmem.BarrierAll()

		// Every PE to every PE with SignalAdd of me+1, in bytes large
		// enough for zero-copy protocols.
		const size = 100_003
		data := calloc[byte](t, n*size)
		src := make([]byte, size)
		for i := range src {
			src[i] = byte(i + 7*me)
		}
		for pe := 0; pe < n; pe++ {
			slot := data[me*size : (me+1)*size]
			if pe%2 == 0 {
				shmem.PutMemSignal(slot, src, &sig[1], uint64(me+1), shmem.SignalAdd, pe)
			} else {
				shmem.PutMemSignalNBI(slot, src, &sig[1], uint64(me+1), shmem.SignalAdd, pe)
			}
		}
		sum := uint64(n * (n + 1) / 2)
		if got := shmem.SignalWaitUntil(&sig[1], shmem.CmpGE, sum); got != sum {
			t.Fatalf("SignalWaitUntil(>= %d) returned %d", sum, got)
		}
		wantData := make([]byte, n*size)
		for f := 0; f < n; f++ {
			for i := 0; i < size; i++ {
				wantData[f*size+i] = byte(i + 7*f)
			}
		}
		if diff := sliceDiff(wantData, data); diff != "" {
			t.Fatalf("data when every signal arrived (-want +got):\n%.2000s", diff)
		}
		// A signal without data.
		shmem.Quiet()
		shmem.BarrierAll()
		shmem.PutSignal(data[:0], nil, &sig[0], 1000, shmem.SignalAdd, to)
		if got := shmem.SignalWaitUntil(&sig[0], shmem.CmpGT, rounds); got != rounds+1000 {
			t.Fatalf("signal of an empty put: %d, want %d", got, rounds+1000)
		}
		shmem.BarrierAll()
		shmem.Free(data)
		shmem.Free(sig)
		shmem.Free(buf)
	})
}

func TestRMABadInputPanics(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		x := calloc[int64](t, 8)
		sig := calloc[uint64](t, 2)
		var local [8]int64
		var localSig uint64
		for _, c := range []struct {
			name string
			fn   func()
			want string
		}{
			{"PutNBI to PE n", func() { shmem.PutNBI(x, local[:], n) }, fmt.Sprintf("shmem.PutNBI: PE %d is not a PE of the job (valid: 0..%d)", n, n-1)},
			{"GetNBI from a Go array", func() { shmem.GetNBI(x, local[:], 0) }, "shmem.GetNBI: src"},
			{"GetMemNBI too short", func() { shmem.GetMemNBI(make([]byte, 9), make([]byte, 8), 0) }, "shmem.GetMemNBI: the symmetric object has 8 elements, fewer than the 9"},
			{"IPut stride 0", func() { shmem.IPut(x, local[:], 0, 1, 2, 0) }, "shmem.IPut: dst stride 0 (valid: 1 or more)"},
			{"IPut past the end", func() { shmem.IPut(x, local[:], 3, 1, 4, 0) }, "shmem.IPut: dst has 8 elements, fewer than 4 elements at stride 3 reach"},
			{"IGet nelems -1", func() { shmem.IGet(local[:], x, 1, 1, -1, 0) }, "shmem.IGet: nelems -1"},
			{"IGet from a Go array", func() { shmem.IGet(x, local[:], 1, 1, 2, 0) }, "shmem.IGet: src"},
			{"IGet src too short", func() { shmem.IGet(local[:], x[:3], 1, 2, 3, 0) }, "shmem.IGet: src has 3 elements"},
			{"IBPut stride below bsize", func() { shmem.IBPut(x, local[:], 2, 3, 3, 2, 0) }, "shmem.IBPut: dst stride 2 (valid: 3 or more)"},
			{"IBGet past the end", func() { shmem.IBGet(local[:], x, 2, 3, 2, 4, 0) }, "shmem.IBGet: src has 8 elements, fewer than 4 blocks of 2 elements at stride 3 reach"},
			{"IBPut bsize -1", func() { shmem.IBPut(x, local[:], 1, 1, -1, 2, 0) }, "shmem.IBPut: bsize -1"},
			{"PutSignal bad op", func() { shmem.PutSignal(x, local[:], &sig[0], 1, shmem.SignalOp(7), 0) }, "invalid signal operation 7"},
			{"PutSignal local signal", func() { shmem.PutSignal(x, local[:], &localSig, 1, shmem.SignalSet, 0) }, "shmem.PutSignal: sig"},
			{"PutSignal to PE -1", func() { shmem.PutMemSignal(nil, nil, &sig[0], 1, shmem.SignalSet, -1) }, "shmem.PutMemSignal: PE -1"},
			{"SignalWaitUntil local", func() { shmem.SignalWaitUntil(&localSig, shmem.CmpEQ, 0) }, "shmem.SignalWaitUntil: ivar"},
			{"SignalFetch local", func() { shmem.SignalFetch(&localSig) }, "shmem.SignalFetch: ivar"},
		} {
			checkPanic(t, c.name, c.fn, c.want)
		}
		shmem.BarrierAll()
		shmem.Free(sig)
		shmem.Free(x)
	})
}

// TestPEQuietAndSignalRoutines: the OpenSHMEM 1.6 PEQuiet (on the default
// context and on a context) completes the non-blocking puts to the PEs it
// names, so a signal sent after it finds the data in place; AddSignal and
// SetSignal update a signal word with no data.
func TestPEQuietAndSignalRoutines(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		const per = 3000
		to, from := (me+1)%n, (me-1+n)%n
		data := calloc[int64](t, 2*per)
		sig := calloc[uint64](t, 4)
		ctx, err := shmem.CtxCreate(0)
		if err != nil {
			t.Fatal(err)
		}
		src := make([]int64, 2*per)
		for i := range src {
			src[i] = int64(me*1_000_000 + i)
		}
		shmem.PutNBI(data[:per], src[:per], to)
		shmem.PEQuiet([]int{to})
		shmem.SetSignal(&sig[0], 7, to)
		shmem.CtxPutNBI(ctx, data[per:], src[per:], to)
		ctx.PEQuiet([]int{to, me})
		shmem.CtxAddSignal(ctx, &sig[1], 5, to)
		shmem.AddSignal(&sig[2], 2, to)
		shmem.CtxSetSignal(ctx, &sig[3], 9, to)
		shmem.SignalWaitUntil(&sig[0], shmem.CmpEQ, 7)
		for i := 0; i < per; i++ {
			if want := int64(from*1_000_000 + i); data[i] != want {
				t.Fatalf("after the signal sent after PEQuiet: data[%d] = %d, want %d", i, data[i], want)
			}
		}
		shmem.SignalWaitUntil(&sig[1], shmem.CmpEQ, 5)
		for i := per; i < 2*per; i++ {
			if want := int64(from*1_000_000 + i); data[i] != want {
				t.Fatalf("after the signal sent after the context's PEQuiet: data[%d] = %d, want %d", i, data[i], want)
			}
		}
		shmem.SignalWaitUntil(&sig[3], shmem.CmpEQ, 9)
		shmem.AddSignal(&sig[2], 3, to) // a second add
		shmem.BarrierAll()
		if sig[2] != 5 {
			t.Errorf("signal word after AddSignal 2 and 3: %d, want 5", sig[2])
		}
		shmem.PEQuiet(nil) // nothing to wait for
		checkPanic(t, "PEQuiet of PE n", func() { shmem.PEQuiet([]int{0, n}) }, fmt.Sprintf("shmem.PEQuiet: PE %d is not a PE of the job", n))
		ctx.Destroy()
		shmem.BarrierAll()
		shmem.Free(sig)
		shmem.Free(data)
	})
}

// TestPutSignalOrderAcrossLanes: with UCX_TLS=tcp,posix the heaps are not
// mapped (they are sysv segments), so puts go over tcp while the signal's
// atomic goes in software over posix's active messages: the fence between
// them must keep the signal behind the data even though they travel on
// different transports. Every PE puts a round's pattern and signals its
// right neighbour, which checks the pattern when it sees the signal.
func TestPutSignalOrderAcrossLanes(t *testing.T) {
	const rounds, words = 300, 512
	tcpPosix := shmemtest.Transport{Name: "tcp,posix", Env: []string{"UCX_TLS=tcp,posix"}}
	shmemtest.RunWith(t, shmemtest.Options{Shared: true, NPs: []int{2, 3}, Transports: []shmemtest.Transport{tcpPosix}, Timeout: 60 * time.Second}, func(t *testing.T) {
		me, n := shmem.MyPE(), shmem.NPEs()
		data := calloc[int64](t, 2*words)
		sig := calloc[uint64](t, 1)
		next := (me + 1) % n
		src := make([]int64, words)
		for r := 1; r <= rounds; r++ {
			for i := range src {
				src[i] = int64(r*words + i)
			}
			half := data[(r%2)*words : (r%2+1)*words]
			shmem.PutSignal(half, src, &sig[0], 1, shmem.SignalAdd, next)
			shmem.SignalWaitUntil(&sig[0], shmem.CmpGE, uint64(r))
			for i, v := range data[(r%2)*words : (r%2+1)*words] {
				if v != int64(r*words+i) {
					t.Fatalf("round %d: element %d is %d when the signal came, want %d: the signal overtook the data", r, i, v, r*words+i)
				}
			}
			// The halves alternate; a sync keeps a PE from writing the
			// half its neighbour still reads two rounds later.
			shmem.SyncAll()
		}
		shmem.BarrierAll()
		shmem.Free(sig)
		shmem.Free(data)
	})
}
