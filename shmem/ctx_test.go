package shmem_test

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"

	"github.com/goshmem/goshmem/shmem"
	"github.com/goshmem/goshmem/shmemtest"
)

// unsafeBytes returns the bytes of s.
func unsafeBytes[T any](s []T) []byte {
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z)))
}

// ctxOptions are the option sets the context tests use.
var ctxOptions = []shmem.CtxOptions{0, shmem.CtxPrivate, shmem.CtxSerialized, shmem.CtxPrivate | shmem.CtxNostore}

// ctxPuts checks the storing RMA routines of a context: into this PE's
// slots on the next PE, completed by the context's Quiet alone.
func ctxPuts(t *testing.T, ctx *shmem.Ctx, me, n int) {
	t.Helper()
	const per = 50_001
	// The strided put moves fewer elements: over tcp each is a message.
	const iputs = 1000
	to, from := (me+1)%n, (me-1+n)%n
	buf := calloc[int32](t, 4*per)
	mem := calloc[byte](t, 2*per)
	one := calloc[float64](t, 1)
	src := make([]int32, per)
	bsrc := make([]byte, per)
	for i := range src {
		src[i], bsrc[i] = int32(me*per+i), byte(me+i)
	}
	shmem.CtxPut(ctx, buf[:per], src, to)
	shmem.CtxPutNBI(ctx, buf[per:2*per], src, to)
	shmem.CtxIPut(ctx, buf[2*per:], src, 2, 3, iputs, to)
	shmem.CtxPutMem(ctx, mem[:per], bsrc, to)
	shmem.CtxPutMemNBI(ctx, mem[per:], bsrc, to)
	shmem.CtxP(ctx, &one[0], float64(me)+0.5, to)
	ctx.Quiet()
	shmem.SyncAll() // no Quiet of the default context: the context's Quiet did it
	want := make([]int32, 4*per)
	wantBytes := make([]byte, 2*per)
	for i := 0; i < per; i++ {
		want[i], want[per+i] = int32(from*per+i), int32(from*per+i)
		wantBytes[i], wantBytes[per+i] = byte(from+i), byte(from+i)
	}
	for i := 0; i < iputs; i++ {
		want[2*per+2*i] = int32(from*per + 3*i)
	}
	if diff := sliceDiff(want, buf); diff != "" {
		t.Fatalf("CtxPut, CtxPutNBI, CtxIPut (-want +got):\n%.2000s", diff)
	}
	if diff := sliceDiff(wantBytes, mem); diff != "" {
		t.Fatalf("CtxPutMem, CtxPutMemNBI (-want +got):\n%.2000s", diff)
	}
	if one[0] != float64(from)+0.5 {
		t.Fatalf("CtxP: %v, want %v", one[0], float64(from)+0.5)
	}
	shmem.BarrierAll()
	shmem.Free(one)
	shmem.Free(mem)
	shmem.Free(buf)
}

// ctxGets checks the fetching RMA routines of a context, from the next PE.
func ctxGets(t *testing.T, ctx *shmem.Ctx, me, n int) {
	t.Helper()
	const per = 50_001
	to := (me + 1) % n
	buf := calloc[int64](t, per)
	for i := range buf {
		buf[i] = int64(me*per + i)
	}
	shmem.BarrierAll()
	want := make([]int64, per)
	for i := range want {
		want[i] = int64(to*per + i)
	}
	got := make([]int64, per)
	shmem.CtxGet(ctx, got, buf, to)
	if diff := sliceDiff(want, got); diff != "" {
		t.Fatalf("CtxGet (-want +got):\n%.2000s", diff)
	}
	nbi := make([]int64, per)
	shmem.CtxGetNBI(ctx, nbi, buf, to)
	mem := make([]byte, 8*per)
	memNBI := make([]byte, 8*per)
	asBytes := unsafeBytes(buf)
	shmem.CtxGetMem(ctx, mem, asBytes, to)
	shmem.CtxGetMemNBI(ctx, memNBI, asBytes, to)
	ctx.Quiet()
	if diff := sliceDiff(want, nbi); diff != "" {
		t.Fatalf("CtxGetNBI (-want +got):\n%.2000s", diff)
	}
	if !bytes.Equal(mem, unsafeBytes(want)) || !bytes.Equal(memNBI, unsafeBytes(want)) {
		t.Fatalf("CtxGetMem or CtxGetMemNBI differ from the source")
	}
	strided := make([]int64, 10)
	shmem.CtxIGet(ctx, strided, buf, 2, 7, 5, to)
	wantStrided := make([]int64, 10)
	for i := 0; i < 5; i++ {
		wantStrided[2*i] = want[7*i]
	}
	if diff := cmp.Diff(wantStrided, strided); diff != "" {
		t.Fatalf("CtxIGet (-want +got):\n%s", diff)
	}
	if g := shmem.CtxG(ctx, &buf[per-1], to); g != want[per-1] {
		t.Fatalf("CtxG = %d, want %d", g, want[per-1])
	}
	shmem.BarrierAll()
	shmem.Free(buf)
}

// ctxAtomics checks every atomic routine of a context against a model, as
// the tests of the default context do.
func ctxAtomics(t *testing.T, ctx *shmem.Ctx, me, n int) {
	t.Helper()
	c := calloc[int64](t, 6)
	b := calloc[uint32](t, 3)
	seen := calloc[int64](t, 4*n)
	fetched := make([]int64, 4*n)
	fetchedBits := make([]uint32, n)
	bit := uint32(1) << me
	for pe := 0; pe < n; pe++ {
		shmem.CtxAtomicAdd(ctx, &c[0], int64(me+1), pe)
		shmem.CtxAtomicInc(ctx, &c[1], pe)
		fetched[pe] = shmem.CtxAtomicFetchAdd(ctx, &c[2], 3, pe)
		fetched[n+pe] = shmem.CtxAtomicFetchInc(ctx, &c[3], pe)
		shmem.CtxAtomicFetchAddNBI(ctx, &fetched[2*n+pe], &c[4], 5, pe)
		shmem.CtxAtomicFetchIncNBI(ctx, &fetched[3*n+pe], &c[5], pe)
		shmem.CtxAtomicOr(ctx, &b[0], bit, pe)
		if old := shmem.CtxAtomicFetchOr(ctx, &b[1], bit, pe); old&bit != 0 {
			t.Errorf("CtxAtomicFetchOr: old %#x has this PE's bit", old)
		}
		shmem.CtxAtomicFetchOrNBI(ctx, &fetchedBits[pe], &b[2], bit, pe)
	}
	ctx.Quiet()
	for pe := 0; pe < n; pe++ {
		for k := 0; k < 4; k++ {
			shmem.CtxP(ctx, &seen[k*n+me], fetched[k*n+pe], pe)
		}
	}
	ctx.Quiet()
	shmem.BarrierAll()
	all := uint32(1)<<n - 1
	if diff := cmp.Diff([]int64{int64(n * (n + 1) / 2), int64(n), int64(3 * n), int64(n), int64(5 * n), int64(n)}, c); diff != "" {
		t.Fatalf("counters (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]uint32{all, all, all}, b); diff != "" {
		t.Fatalf("or words (-want +got):\n%s", diff)
	}
	for k, step := range []int64{3, 1, 5, 1} {
		got := slices.Clone(seen[k*n : (k+1)*n])
		slices.Sort(got)
		if diff := cmp.Diff(multiples(n, step), got); diff != "" {
			t.Fatalf("old values of counter %d, sorted (-want +got):\n%s", 2+k, diff)
		}
	}
	shmem.BarrierAll()
	// And and xor clear the bits again.
	for pe := 0; pe < n; pe++ {
		shmem.CtxAtomicAnd(ctx, &b[0], ^bit, pe)
		if old := shmem.CtxAtomicFetchXor(ctx, &b[1], bit, pe); old&bit == 0 {
			t.Errorf("CtxAtomicFetchXor: old %#x lacks this PE's bit", old)
		}
		shmem.CtxAtomicFetchAndNBI(ctx, &fetchedBits[pe], &b[2], ^bit, pe)
	}
	ctx.Quiet()
	shmem.BarrierAll()
	if diff := cmp.Diff([]uint32{0, 0, 0}, b); diff != "" {
		t.Fatalf("words after and and xor (-want +got):\n%s", diff)
	}
	shmem.BarrierAll() // every PE checked before the words change again
	for pe := 0; pe < n; pe++ {
		shmem.CtxAtomicXor(ctx, &b[0], bit, pe)
		if old := shmem.CtxAtomicFetchAnd(ctx, &b[1], 0, pe); old != 0 {
			t.Errorf("CtxAtomicFetchAnd of zero: old %#x", old)
		}
		shmem.CtxAtomicFetchXorNBI(ctx, &fetchedBits[pe], &b[2], bit, pe)
	}
	ctx.Quiet()
	shmem.BarrierAll()
	if diff := cmp.Diff([]uint32{all, 0, all}, b); diff != "" {
		t.Fatalf("words after xor (-want +got):\n%s", diff)
	}
	shmem.BarrierAll()
	// Set, fetch, swap and compare-and-swap on the next PE.
	to, from := (me+1)%n, (me-1+n)%n
	f := calloc[float64](t, 1)
	shmem.CtxAtomicSet(ctx, &c[0], int64(me), to)
	shmem.CtxAtomicSet(ctx, &f[0], float64(me)+0.5, to)
	ctx.Quiet()
	shmem.BarrierAll()
	if v := shmem.CtxAtomicFetch(ctx, &c[0], to); v != int64(me) {
		t.Errorf("CtxAtomicFetch = %d, want %d", v, me)
	}
	var vf float64
	var v1, v2 int64
	shmem.CtxAtomicFetchNBI(ctx, &vf, &f[0], to)
	ctx.Quiet()
	if vf != float64(me)+0.5 {
		t.Errorf("CtxAtomicFetchNBI = %v, want %v", vf, float64(me)+0.5)
	}
	if old := shmem.CtxAtomicSwap(ctx, &c[0], 10, to); old != int64(me) {
		t.Errorf("CtxAtomicSwap old = %d, want %d", old, me)
	}
	shmem.CtxAtomicSwapNBI(ctx, &v1, &c[0], 20, to)
	shmem.CtxAtomicCompareSwapNBI(ctx, &v2, &c[1], 0, 30, to) // c[1] is n
	ctx.Quiet()
	if v1 != 10 || v2 != int64(n) {
		t.Errorf("CtxAtomicSwapNBI, CtxAtomicCompareSwapNBI fetched %d, %d, want 10, %d", v1, v2, n)
	}
	if old := shmem.CtxAtomicCompareSwap(ctx, &c[0], 20, 40, to); old != 20 {
		t.Errorf("CtxAtomicCompareSwap old = %d, want 20", old)
	}
	ctx.Quiet()
	shmem.BarrierAll()
	if c[0] != 40 || c[1] != int64(n) {
		t.Errorf("after the swaps from PE %d: %d, %d, want 40, %d", from, c[0], c[1], n)
	}
	shmem.BarrierAll()
	shmem.Free(f)
	shmem.Free(seen)
	shmem.Free(b)
	shmem.Free(c)
}

// ctxSignals checks the put-with-signal routines of a context: every PE
// sends to every PE with each routine, adding to a signal that counts them.
func ctxSignals(t *testing.T, ctx *shmem.Ctx, me, n int) {
	t.Helper()
	const per = 20_000
	data := calloc[int64](t, 2*n*per)
	mem := calloc[byte](t, 2*n*per)
	sig := calloc[uint64](t, 1)
	src := make([]int64, per)
	bsrc := make([]byte, per)
	for i := range src {
		src[i], bsrc[i] = int64(me*per+i), byte(me+i)
	}
	for pe := 0; pe < n; pe++ {
		shmem.CtxPutSignal(ctx, data[2*me*per:(2*me+1)*per], src, &sig[0], 1, shmem.SignalAdd, pe)
		shmem.CtxPutSignalNBI(ctx, data[(2*me+1)*per:(2*me+2)*per], src, &sig[0], 1, shmem.SignalAdd, pe)
		shmem.CtxPutMemSignal(ctx, mem[2*me*per:(2*me+1)*per], bsrc, &sig[0], 1, shmem.SignalAdd, pe)
		shmem.CtxPutMemSignalNBI(ctx, mem[(2*me+1)*per:(2*me+2)*per], bsrc, &sig[0], 1, shmem.SignalAdd, pe)
	}
	if got := shmem.SignalWaitUntil(&sig[0], shmem.CmpEQ, uint64(4*n)); got != uint64(4*n) {
		t.Fatalf("signal = %d, want %d", got, 4*n)
	}
	want := make([]int64, 2*n*per)
	wantBytes := make([]byte, 2*n*per)
	for f := 0; f < 2*n; f++ {
		for i := 0; i < per; i++ {
			want[f*per+i], wantBytes[f*per+i] = int64(f/2*per+i), byte(f/2+i)
		}
	}
	if diff := sliceDiff(want, data); diff != "" {
		t.Fatalf("data when every signal arrived (-want +got):\n%.2000s", diff)
	}
	if diff := sliceDiff(wantBytes, mem); diff != "" {
		t.Fatalf("bytes when every signal arrived (-want +got):\n%.2000s", diff)
	}
	ctx.Quiet()
	shmem.BarrierAll()
	// SignalSet on a context.
	shmem.CtxPutSignal(ctx, data[:1], src[:1], &sig[0], 7, shmem.SignalSet, (me+1)%n)
	if got := shmem.SignalWaitUntil(&sig[0], shmem.CmpEQ, 7); got != 7 {
		t.Fatalf("signal after SignalSet = %d", got)
	}
	ctx.Quiet()
	shmem.BarrierAll()
	shmem.Free(sig)
	shmem.Free(mem)
	shmem.Free(data)
}

func TestCtxRoutines(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		if shmem.CtxDefault.Team() != shmem.TeamWorld || shmem.TeamWorld.MyPE() != me || shmem.TeamWorld.NPEs() != n {
			t.Errorf("default context's team %p (TeamWorld %p): PE %d of %d", shmem.CtxDefault.Team(), shmem.TeamWorld, shmem.TeamWorld.MyPE(), shmem.TeamWorld.NPEs())
		}
		// Stores work on every context, whatever the transport.
		for _, opt := range ctxOptions {
			ctx, err := shmem.CtxCreate(opt)
			if err != nil {
				t.Fatalf("CtxCreate(%v): %v", opt, err)
			}
			if ctx.Team() != shmem.TeamWorld {
				t.Errorf("CtxCreate(%v).Team() is not TeamWorld", opt)
			}
			ctxPuts(t, ctx, me, n)
			ctx.Destroy()
			ctx.Destroy() // a second Destroy does nothing
		}
		for _, opt := range ctxOptions {
			ctx, err := shmem.CtxCreate(opt)
			if err != nil {
				t.Fatalf("CtxCreate(%v): %v", opt, err)
			}
			ctxGets(t, ctx, me, n)
			ctxAtomics(t, ctx, me, n)
			ctxSignals(t, ctx, me, n)
			ctx.Destroy()
		}
		// The default context through the Ctx routines.
		ctxGets(t, shmem.CtxDefault, me, n)
		ctxAtomics(t, shmem.CtxDefault, me, n)
	})
}

// TestCtxGoroutines: several goroutines at once, each with a private
// context of its own, plus one context that all of them share, put and add
// to every PE; everything arrives exactly once.
func TestCtxGoroutines(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		const workers, iters = 4, 40
		slots := calloc[int64](t, n*workers*2)
		ctr := calloc[int64](t, 2)
		shared, err := shmem.CtxCreate(0)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, err := shmem.CtxCreate(shmem.CtxPrivate)
				if err != nil {
					t.Errorf("CtxCreate in goroutine %d: %v", w, err)
					return
				}
				defer ctx.Destroy()
				slot := (me*workers + w) * 2
				src := []int64{0}
				for i := 1; i <= iters; i++ {
					for pe := 0; pe < n; pe++ {
						shmem.CtxP(ctx, &slots[slot], int64(i), pe)
						src[0] = int64(i)
						shmem.CtxPut(shared, slots[slot+1:slot+2], src, pe)
						shmem.CtxAtomicAdd(ctx, &ctr[0], 1, pe)
						shmem.CtxAtomicFetchAdd(shared, &ctr[1], 1, pe)
					}
					if i%10 == 0 {
						ctx.Quiet()
					}
				}
				ctx.Quiet()
				shared.Quiet()
			}()
		}
		wg.Wait()
		shared.Destroy()
		shmem.BarrierAll()
		want := make([]int64, n*workers*2)
		for i := range want {
			want[i] = iters
		}
		if diff := cmp.Diff(want, slots); diff != "" {
			t.Errorf("slots (-want +got):\n%s", diff)
		}
		wantCtr := []int64{int64(n * workers * iters), int64(n * workers * iters)}
		if diff := cmp.Diff(wantCtr, ctr); diff != "" {
			t.Errorf("counters (-want +got):\n%s", diff)
		}
		shmem.BarrierAll()
		shmem.Free(ctr)
		shmem.Free(slots)
	})
}

func TestCtxBadUse(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		x := calloc[int64](t, 2)
		if _, err := shmem.CtxCreate(1 << 8); err == nil || !strings.Contains(err.Error(), "unknown options") {
			t.Errorf("CtxCreate(1<<8): %v, want an error about unknown options", err)
		}
		ctx, err := shmem.CtxCreate(shmem.CtxPrivate)
		if err != nil {
			t.Fatal(err)
		}
		ctx.Destroy()
		for _, c := range []struct {
			name string
			fn   func()
			want string
		}{
			{"nil context", func() { shmem.CtxPut(nil, x, x, 0) }, "shmem.CtxPut: nil context"},
			{"nil context Quiet", func() { (*shmem.Ctx)(nil).Quiet() }, "shmem.(*Ctx).Quiet: nil context"},
			{"destroyed context", func() { shmem.CtxAtomicFetchAdd(ctx, &x[0], 1, 0) }, "shmem.CtxAtomicFetchAdd: the context was destroyed"},
			{"destroyed context Fence", func() { ctx.Fence() }, "shmem.(*Ctx).Fence: the context was destroyed"},
			{"zero context", func() { shmem.CtxG(new(shmem.Ctx), &x[0], 0) }, "shmem.CtxG: the context is not initialized"},
			{"Destroy the default", func() { shmem.CtxDefault.Destroy() }, "the default context cannot be destroyed"},
			{"PE n on a context", func() { shmem.CtxGetNBI(shmem.CtxDefault, x, x, n) }, fmt.Sprintf("shmem.CtxGetNBI: PE %d is not a PE of the job", n)},
		} {
			checkPanic(t, c.name, c.fn, c.want)
		}
		// Contexts the program does not destroy are destroyed by Finalize.
		if _, err := shmem.CtxCreate(0); err != nil {
			t.Fatal(err)
		}
		shmem.BarrierAll()
		shmem.Free(x)
	})
}

// TestCtxPoolReuse: contexts reuse the workers and endpoints of destroyed
// ones. More contexts than the pool keeps live at once; after they are
// destroyed, new contexts of TeamWorld and of a team of other PE numbers
// take pooled workers and must still reach the right PEs.
func TestCtxPoolReuse(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		ctxs := make([]*shmem.Ctx, 10)
		for i := range ctxs {
			ctx, err := shmem.CtxCreate(0)
			if err != nil {
				t.Fatalf("CtxCreate #%d: %v", i, err)
			}
			ctxs[i] = ctx
		}
		for _, ctx := range ctxs {
			ctxPuts(t, ctx, me, n)
		}
		for _, ctx := range ctxs {
			ctx.Destroy()
		}
		for round := 0; round < 3; round++ {
			ctx, err := shmem.CtxCreate(0)
			if err != nil {
				t.Fatalf("round %d: CtxCreate: %v", round, err)
			}
			ctxGets(t, ctx, me, n)
			ctxAtomics(t, ctx, me, n)
			ctx.Destroy()
		}
		// A team whose PE numbers differ from the job's: the last PEs,
		// from PE 1 on (or PE 0 alone).
		start := min(1, n-1)
		team, err := shmem.TeamSplitStrided(shmem.TeamWorld, start, 1, n-start, shmem.TeamConfig{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		buf := calloc[int64](t, n)
		if team != nil {
			for round := 0; round < 3; round++ {
				checkTeamRoundTrip(t, fmt.Sprintf("round %d of a context of PEs %d.. on a pooled worker", round, start), team, pes(start, 1, n-start), buf)
			}
			team.Destroy()
		}
		shmem.BarrierAll()
		shmem.Free(buf)
	})
}

// TestCtxQuietServesPeers: with the heaps reachable only through software
// atomics over shared-memory messages (the posix transport alone, heaps
// allocated by sysv), every PE adds to the next PE through a context of
// its own and quiets it, all at once. Each quiet waits for a flush reply
// from the next PE's default worker, which only that PE's progress
// serves: a quiet that progressed its context alone waited forever for a
// PE that waited for it.
func TestCtxQuietServesPeers(t *testing.T) {
	const rounds = 200
	sysvHeapPosixOnly := shmemtest.Transport{Name: "posix-only", Env: []string{"UCX_TLS=posix", "UCX_ALLOC_PRIO=md:sysv"}}
	shmemtest.RunWith(t, shmemtest.Options{Shared: true, NPs: []int{2, 3}, Transports: []shmemtest.Transport{sysvHeapPosixOnly}, Timeout: 60 * time.Second}, func(t *testing.T) {
		me, n := shmem.MyPE(), shmem.NPEs()
		x := calloc[int64](t, 1)
		next := (me + 1) % n
		if shmem.Ptr(&x[0], next) != nil {
			t.Fatalf("PE %d's heap is mapped here: the test needs heaps reached through software atomics", next)
		}
		ctx, err := shmem.CtxCreate(shmem.CtxPrivate)
		if err != nil {
			t.Fatal(err)
		}
		for range rounds {
			shmem.CtxAtomicAdd(ctx, &x[0], 1, next)
			ctx.Quiet()
		}
		ctx.Destroy()
		shmem.BarrierAll()
		if x[0] != rounds {
			t.Errorf("counter %d after %d adds from PE %d", x[0], rounds, (me-1+n)%n)
		}
		shmem.BarrierAll()
		shmem.Free(x)
	})
}
