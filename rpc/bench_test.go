package rpc_test

import (
	"testing"

	"github.com/goshmem/goshmem/rpc"
	"github.com/goshmem/goshmem/shmem"
	"github.com/goshmem/goshmem/shmemtest"
)

// The benchmarks run in a 2-PE job on this node: PE 0 calls, PE 1 serves
// from shmem.BarrierAll. Each reports PE 0's figures per call; rpcperf
// (benchmarks/rpcperf) compares them with raw active messages, atomics and
// a compare-and-swap table.

func benchPair(b *testing.B, op func(n int)) {
	shmemtest.Bench(b, 2, 0, func(measure func(fn func(n int))) {
		if err := rpc.Start(rpc.Options{}); err != nil {
			b.Fatal(err)
		}
		measure(op)
		shmem.BarrierAll()
		rpc.Stop()
	})
}

// BenchmarkCall is a call's round trip: Call, then Wait.
func BenchmarkCall(b *testing.B) {
	benchPair(b, func(n int) {
		for i := range n {
			if _, err := square.Call(1, int64(i)).Wait(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkInvoke is a call's round trip without a future: Invoke.
func BenchmarkInvoke(b *testing.B) {
	benchPair(b, func(n int) {
		for i := range n {
			if _, err := square.Invoke(1, int64(i)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkGo is a call without reply, until Quiet.
func BenchmarkGo(b *testing.B) {
	benchPair(b, func(n int) {
		for range n {
			if err := add.Go(1, 1); err != nil {
				b.Fatal(err)
			}
		}
		rpc.Quiet()
	})
}

// BenchmarkAggregator is an aggregated call without reply, until Quiet.
func BenchmarkAggregator(b *testing.B) {
	benchPair(b, func(n int) {
		g := rpc.NewAggregator(add, 0)
		for range n {
			if err := g.Go(1, 1); err != nil {
				b.Fatal(err)
			}
		}
		g.Close()
		rpc.Quiet()
	})
}
