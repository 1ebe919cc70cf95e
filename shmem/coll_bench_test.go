package shmem_test

import (
	"testing"
	"unsafe"

	"github.com/goshmem/goshmem/shmem"
	"github.com/goshmem/goshmem/shmemtest"
)

// The collective benchmarks run on TeamWorld of a 2-PE job on this node;
// PE 0 reports its time per call.

func benchColl(b *testing.B, bytes int, op func(dest, source []byte) error) {
	shmemtest.Bench(b, 2, int64(bytes), func(measure func(fn func(n int))) {
		src, err := shmem.Calloc[byte](bytes)
		if err != nil {
			b.Fatal(err)
		}
		dst, err := shmem.Calloc[byte](2 * bytes)
		if err != nil {
			b.Fatal(err)
		}
		// Every PE makes the same calls: PE 0 measures, and the other PE
		// runs the same counts, which it learns from PE 0 by broadcast.
		count, err := shmem.Calloc[int64](1)
		if err != nil {
			b.Fatal(err)
		}
		run := func(n int) {
			count[0] = int64(n)
			if err := shmem.Broadcast(shmem.TeamWorld, count, count, 0); err != nil {
				b.Fatal(err)
			}
			for range count[0] {
				if err := op(dst, src); err != nil {
					b.Fatal(err)
				}
			}
		}
		measure(run)
		if shmem.MyPE() != 0 {
			// Follow PE 0's runs until it sends 0.
			for {
				run(0)
				if count[0] == 0 {
					break
				}
			}
		} else {
			run(0)
		}
		shmem.BarrierAll()
	})
}

func bcast(dest, source []byte) error { return shmem.BroadcastMem(shmem.TeamWorld, dest, source, 0) }
func fcollect(dest, source []byte) error {
	return shmem.FCollectMem(shmem.TeamWorld, dest, source)
}
func sumReduce(dest, source []byte) error {
	return shmem.SumReduce(shmem.TeamWorld, i64s(dest[:len(source)]), i64s(source))
}

func BenchmarkBroadcast8(b *testing.B)    { benchColl(b, 8, bcast) }
func BenchmarkBroadcast1MiB(b *testing.B) { benchColl(b, 1<<20, bcast) }
func BenchmarkSumReduce8(b *testing.B)    { benchColl(b, 8, sumReduce) }
func BenchmarkSumReduce1MiB(b *testing.B) { benchColl(b, 1<<20, sumReduce) }
func BenchmarkFCollect8(b *testing.B)     { benchColl(b, 8, fcollect) }
func BenchmarkFCollect1MiB(b *testing.B)  { benchColl(b, 1<<20, fcollect) }

// i64s views b (8-byte aligned, a multiple of 8 long) as int64s.
func i64s(b []byte) []int64 {
	return unsafe.Slice((*int64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8)
}
