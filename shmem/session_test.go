package shmem_test

import (
	"testing"

	"github.com/goshmem/goshmem/shmem"
	"github.com/goshmem/goshmem/shmemtest"
)

// TestSessionBatch: puts gathered by a batch session arrive as if sent one
// by one: element-wise puts to consecutive and scattered addresses, with a
// get, an atomic and a put-with-signal in between (which send the batch of
// their PE first), a Fence before a signal (the receiver then finds the
// data), and Quiet and SessionStop at the end.
func TestSessionBatch(t *testing.T) {
	job(t, func(t *testing.T, me, n int) {
		const elems = 3000
		to, from := (me+1)%n, (me-1+n)%n
		data := calloc[int64](t, elems)
		sig := calloc[uint64](t, 2)
		ctr := calloc[int64](t, 1)
		for _, opt := range []shmem.CtxOptions{shmem.CtxPrivate, 0} {
			ctx, err := shmem.CtxCreate(opt)
			if err != nil {
				t.Fatal(err)
			}
			ctx.SessionStart(shmem.SessionBatch, shmem.SessionConfig{TotalOps: elems}, shmem.SessionTotalOps)
			ctx.SessionStart(0, shmem.SessionConfig{}, 0) // adds nothing
			for i := 0; i < elems/2; i++ {
				shmem.CtxP(ctx, &data[i], int64(me*elems+i), to)
			}
			if got := shmem.CtxG(ctx, &ctr[0], to); got < 0 {
				t.Fatalf("G between gathered puts: %d", got)
			}
			for i := elems - 1; i >= elems/2; i -= 2 { // scattered, downwards
				shmem.CtxP(ctx, &data[i], int64(me*elems+i), to)
			}
			shmem.CtxAtomicAdd(ctx, &ctr[0], 1, to)
			for i := elems / 2; i < elems; i += 2 {
				shmem.CtxPut(ctx, data[i:i+1], []int64{int64(me*elems + i)}, to)
			}
			ctx.Fence()
			shmem.CtxAddSignal(ctx, &sig[0], 1, to)
			shmem.SignalWaitUntil(&sig[0], shmem.CmpGE, 1)
			for i := 0; i < elems; i++ {
				if want := int64(from*elems + i); data[i] != want {
					t.Fatalf("options %v: after the signal behind the fence: data[%d] = %d, want %d", opt, i, data[i], want)
				}
			}
			ctx.SessionStop()
			ctx.SessionStop() // a second stop does nothing
			ctx.Quiet()
			shmem.BarrierAll()
			sig[0] = 0
			clear(data)
			shmem.BarrierAll()
			ctx.Destroy()
		}
		if ctr[0] != 2 {
			t.Errorf("counter %d after two adds", ctr[0])
		}
		// The default context, with Quiet ending the batch.
		shmem.CtxDefault.SessionStart(shmem.SessionBatch, shmem.SessionConfig{}, 0)
		for i := 0; i < elems; i++ {
			shmem.P(&data[i], int64(-i), to)
		}
		shmem.Quiet()
		shmem.CtxDefault.SessionStop()
		shmem.BarrierAll()
		for i := 0; i < elems; i++ {
			if data[i] != int64(-i) {
				t.Fatalf("default context: data[%d] = %d, want %d", i, data[i], -i)
			}
		}
		var nilCtx *shmem.Ctx
		nilCtx.SessionStart(shmem.SessionBatch, shmem.SessionConfig{}, 0) // SHMEM_CTX_INVALID: no action
		nilCtx.SessionStop()
		checkPanic(t, "unknown session options", func() { shmem.CtxDefault.SessionStart(1<<7, shmem.SessionConfig{}, 0) }, "unknown options")
		shmem.BarrierAll()
		shmem.Free(ctr)
		shmem.Free(sig)
		shmem.Free(data)
	})
}

// BenchmarkPConsecutive: 1000 element-wise puts to consecutive addresses,
// then Quiet, with and without a batch session; over the network (run
// with UCX_TLS=tcp,self) the session sends one transfer.
func BenchmarkPConsecutive(b *testing.B) {
	for _, batch := range []bool{false, true} {
		name := "plain"
		if batch {
			name = "batch"
		}
		b.Run(name, func(b *testing.B) {
			shmemtest.Bench(b, 2, 8000, func(measure func(fn func(n int))) {
				x, err := shmem.Calloc[int64](1000)
				if err != nil {
					b.Fatal(err)
				}
				measure(func(n int) {
					for range n {
						if batch {
							shmem.CtxDefault.SessionStart(shmem.SessionBatch, shmem.SessionConfig{}, 0)
						}
						for i := range x {
							shmem.P(&x[i], int64(i), 1)
						}
						shmem.Quiet()
						if batch {
							shmem.CtxDefault.SessionStop()
						}
					}
				})
				shmem.BarrierAll()
			})
		})
	}
}
