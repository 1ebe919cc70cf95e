package shmem_test

import (
	"testing"

	"github.com/goshmem/goshmem/shmem"
	"github.com/goshmem/goshmem/shmemtest"
)

// The benchmarks run in a 2-PE job on this node; PE 0 drives and PE 1 is
// passive, as in ANCHORS.md's oshm_ref loops. Each reports PE 0's figures
// per operation.

func benchPair(b *testing.B, bytesPerOp int64, op func(n int, x []int64, big []byte)) {
	shmemtest.Bench(b, 2, bytesPerOp, func(measure func(fn func(n int))) {
		x, err := shmem.Calloc[int64](8)
		if err != nil {
			b.Fatal(err)
		}
		big, err := shmem.Calloc[byte](1 << 20)
		if err != nil {
			b.Fatal(err)
		}
		measure(func(n int) { op(n, x, big) })
		shmem.BarrierAll()
	})
}

func BenchmarkPut8(b *testing.B) {
	src := []int64{42}
	benchPair(b, 0, func(n int, x []int64, _ []byte) {
		for range n {
			shmem.Put(x[:1], src, 1)
		}
		shmem.Quiet()
	})
}

func BenchmarkGet8(b *testing.B) {
	dst := make([]int64, 1)
	benchPair(b, 0, func(n int, x []int64, _ []byte) {
		for range n {
			shmem.Get(dst, x[:1], 1)
		}
	})
}

func BenchmarkP(b *testing.B) {
	benchPair(b, 0, func(n int, x []int64, _ []byte) {
		for i := range n {
			shmem.P(&x[0], int64(i), 1)
		}
	})
}

func BenchmarkG(b *testing.B) {
	benchPair(b, 0, func(n int, x []int64, _ []byte) {
		var s int64
		for range n {
			s += shmem.G(&x[0], 1)
		}
		_ = s
	})
}

func BenchmarkAtomicFetchAdd(b *testing.B) {
	benchPair(b, 0, func(n int, x []int64, _ []byte) {
		for range n {
			shmem.AtomicFetchAdd(&x[1], 1, 1)
		}
	})
}

func BenchmarkAtomicAdd(b *testing.B) {
	benchPair(b, 0, func(n int, x []int64, _ []byte) {
		for range n {
			shmem.AtomicAdd(&x[1], 1, 1)
		}
	})
}

func BenchmarkAtomicCompareSwap(b *testing.B) {
	benchPair(b, 0, func(n int, x []int64, _ []byte) {
		for range n {
			shmem.AtomicCompareSwap(&x[2], 0, 1, 1)
		}
	})
}

func BenchmarkPut1MiB(b *testing.B) {
	src := make([]byte, 1<<20)
	benchPair(b, 1<<20, func(n int, _ []int64, big []byte) {
		for range n {
			shmem.PutMem(big, src, 1)
		}
		shmem.Quiet()
	})
}

func BenchmarkGet1MiB(b *testing.B) {
	dst := make([]byte, 1<<20)
	benchPair(b, 1<<20, func(n int, _ []int64, big []byte) {
		for range n {
			shmem.GetMem(dst, big, 1)
		}
	})
}

// BenchmarkCtxCreateDestroy: a context made and destroyed, as programs
// that use short-lived contexts do.
func BenchmarkCtxCreateDestroy(b *testing.B) {
	benchPair(b, 0, func(n int, _ []int64, _ []byte) {
		for range n {
			ctx, err := shmem.CtxCreate(shmem.CtxPrivate)
			if err != nil {
				b.Fatal(err)
			}
			ctx.Destroy()
		}
	})
}
