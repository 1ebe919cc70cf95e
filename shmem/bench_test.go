package shmem_test

import (
	"testing"

	"github.com/goshmem/goshmem/internal/petest"
	"github.com/goshmem/goshmem/shmem"
)

// The benchmarks run in a 2-PE job on this node; PE 0 drives and PE 1 is
// passive, as in ANCHORS.md's oshm_ref loops. Each reports PE 0's figures.

func benchPair(b *testing.B, body func(b *testing.B, x []int64, big []byte)) {
	petest.Bench(b, 2, func(measure func(fn func(b *testing.B))) {
		if err := shmem.Init(); err != nil {
			b.Fatal(err)
		}
		defer shmem.Finalize()
		x, err := shmem.Calloc[int64](8)
		if err != nil {
			b.Fatal(err)
		}
		big, err := shmem.Calloc[byte](1 << 20)
		if err != nil {
			b.Fatal(err)
		}
		measure(func(b *testing.B) { body(b, x, big) })
		shmem.BarrierAll()
	})
}

func BenchmarkPut8(b *testing.B) {
	benchPair(b, func(b *testing.B, x []int64, _ []byte) {
		src := []int64{42}
		b.ReportAllocs()
		for b.Loop() {
			shmem.Put(x[:1], src, 1)
		}
		shmem.Quiet()
	})
}

func BenchmarkGet8(b *testing.B) {
	benchPair(b, func(b *testing.B, x []int64, _ []byte) {
		dst := make([]int64, 1)
		b.ReportAllocs()
		for b.Loop() {
			shmem.Get(dst, x[:1], 1)
		}
	})
}

func BenchmarkP(b *testing.B) {
	benchPair(b, func(b *testing.B, x []int64, _ []byte) {
		b.ReportAllocs()
		for b.Loop() {
			shmem.P(&x[0], 1, 1)
		}
	})
}

func BenchmarkAtomicFetchAdd(b *testing.B) {
	benchPair(b, func(b *testing.B, x []int64, _ []byte) {
		b.ReportAllocs()
		for b.Loop() {
			shmem.AtomicFetchAdd(&x[1], 1, 1)
		}
	})
}

func BenchmarkAtomicAdd(b *testing.B) {
	benchPair(b, func(b *testing.B, x []int64, _ []byte) {
		b.ReportAllocs()
		for b.Loop() {
			shmem.AtomicAdd(&x[1], 1, 1)
		}
	})
}

func BenchmarkAtomicCompareSwap(b *testing.B) {
	benchPair(b, func(b *testing.B, x []int64, _ []byte) {
		b.ReportAllocs()
		for b.Loop() {
			shmem.AtomicCompareSwap(&x[2], 0, 1, 1)
		}
	})
}

func BenchmarkPut1MiB(b *testing.B) {
	benchPair(b, func(b *testing.B, _ []int64, big []byte) {
		src := make([]byte, len(big))
		b.SetBytes(int64(len(big)))
		b.ReportAllocs()
		for b.Loop() {
			shmem.PutMem(big, src, 1)
		}
		shmem.Quiet()
	})
}

func BenchmarkGet1MiB(b *testing.B) {
	benchPair(b, func(b *testing.B, _ []int64, big []byte) {
		dst := make([]byte, len(big))
		b.SetBytes(int64(len(big)))
		b.ReportAllocs()
		for b.Loop() {
			shmem.GetMem(dst, big, 1)
		}
	})
}
