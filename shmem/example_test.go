package shmem_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/goshmem/goshmem/shmem"
)

// The examples run as a job of one PE (a program started without
// goshmem-run is one), so their output is fixed; started with
// `goshmem-run -np N`, the same code runs on N PEs.

// A program's shape: Init, symmetric allocation, communication, a barrier,
// Finalize.
func Example() {
	if err := shmem.Init(); err != nil {
		log.Fatal(err)
	}
	defer shmem.Finalize()
	me, n := shmem.MyPE(), shmem.NPEs()
	buf, err := shmem.Calloc[int64](1)
	if err != nil {
		log.Fatal(err)
	}
	shmem.P(&buf[0], int64(100+me), (me+1)%n) // to the next PE
	shmem.BarrierAll()
	fmt.Printf("PE %d of %d got %d\n", me, n, buf[0])
	shmem.Free(buf)
	// Output: PE 0 of 1 got 100
}

func ExamplePut() {
	if err := shmem.Init(); err != nil {
		log.Fatal(err)
	}
	defer shmem.Finalize()
	dst, err := shmem.Calloc[float64](4)
	if err != nil {
		log.Fatal(err)
	}
	shmem.Put(dst, []float64{1.5, 2.5, 3.5}, 0) // the first three elements on PE 0
	shmem.Quiet()                               // complete at PE 0
	fmt.Println(dst)
	shmem.Free(dst)
	// Output: [1.5 2.5 3.5 0]
}

func ExampleGet() {
	if err := shmem.Init(); err != nil {
		log.Fatal(err)
	}
	defer shmem.Finalize()
	src, err := shmem.Malloc[int32](3)
	if err != nil {
		log.Fatal(err)
	}
	copy(src, []int32{7, 8, 9})
	shmem.BarrierAll()
	got := make([]int32, 2)
	shmem.Get(got, src[1:], 0) // two elements from PE 0, from the second on
	fmt.Println(got)
	shmem.Free(src)
	// Output: [8 9]
}

func ExampleAtomicFetchAdd() {
	if err := shmem.Init(); err != nil {
		log.Fatal(err)
	}
	defer shmem.Finalize()
	counter, err := shmem.Calloc[int64](1)
	if err != nil {
		log.Fatal(err)
	}
	// Every PE takes a ticket from the counter on PE 0.
	ticket := shmem.AtomicFetchAdd(&counter[0], 1, 0)
	shmem.BarrierAll()
	fmt.Println("ticket", ticket, "of", counter[0])
	shmem.Free(counter)
	// Output: ticket 0 of 1
}

func ExampleSumReduce() {
	if err := shmem.Init(); err != nil {
		log.Fatal(err)
	}
	defer shmem.Finalize()
	src, err := shmem.Malloc[int64](2)
	if err != nil {
		log.Fatal(err)
	}
	dst, err := shmem.Malloc[int64](2)
	if err != nil {
		log.Fatal(err)
	}
	src[0], src[1] = int64(shmem.MyPE()), 10
	if err := shmem.SumReduce(shmem.TeamWorld, dst, src); err != nil {
		log.Fatal(err)
	}
	fmt.Println(dst) // the sums over every PE
	shmem.Free(dst)
	shmem.Free(src)
	// Output: [0 10]
}

func ExampleSumInscan() {
	if err := shmem.Init(); err != nil {
		log.Fatal(err)
	}
	defer shmem.Finalize()
	src, err := shmem.Malloc[int64](1)
	if err != nil {
		log.Fatal(err)
	}
	dst, err := shmem.Malloc[int64](1)
	if err != nil {
		log.Fatal(err)
	}
	src[0] = 5
	// PE i gets the sum of the sources of PEs 0..i.
	if err := shmem.SumInscan(shmem.TeamWorld, dst, src); err != nil {
		log.Fatal(err)
	}
	fmt.Println(dst[0])
	shmem.Free(dst)
	shmem.Free(src)
	// Output: 5
}

func ExampleTeamSplitStrided() {
	if err := shmem.Init(); err != nil {
		log.Fatal(err)
	}
	defer shmem.Finalize()
	// The even PEs of the job: PE 0, 2, 4, ...
	evens, err := shmem.TeamSplitStrided(shmem.TeamWorld, 0, 2, (shmem.NPEs()+1)/2, shmem.TeamConfig{}, 0)
	if err != nil {
		log.Fatal(err)
	}
	if evens != nil { // nil on the odd PEs
		fmt.Println("PE", shmem.MyPE(), "is PE", evens.MyPE(), "of", evens.NPEs(), "evens")
		evens.Destroy()
	}
	// Output: PE 0 is PE 0 of 1 evens
}

func ExampleCtxCreate() {
	if err := shmem.Init(); err != nil {
		log.Fatal(err)
	}
	defer shmem.Finalize()
	x, err := shmem.Calloc[int64](1)
	if err != nil {
		log.Fatal(err)
	}
	// A context whose operations complete independently of the others:
	// one per goroutine, or per phase of a program.
	ctx, err := shmem.CtxCreate(shmem.CtxPrivate)
	if err != nil {
		log.Fatal(err)
	}
	shmem.CtxAtomicAdd(ctx, &x[0], 3, 0)
	ctx.Quiet()
	ctx.Destroy()
	shmem.BarrierAll()
	fmt.Println(x[0])
	shmem.Free(x)
	// Output: 3
}

func ExamplePutSignal() {
	if err := shmem.Init(); err != nil {
		log.Fatal(err)
	}
	defer shmem.Finalize()
	data, err := shmem.Calloc[int32](2)
	if err != nil {
		log.Fatal(err)
	}
	sig, err := shmem.Calloc[uint64](1)
	if err != nil {
		log.Fatal(err)
	}
	// The data, then the signal: a PE that sees the signal sees the data.
	shmem.PutSignal(data, []int32{4, 2}, &sig[0], 1, shmem.SignalSet, 0)
	shmem.SignalWaitUntil(&sig[0], shmem.CmpEQ, 1)
	fmt.Println(data)
	shmem.Free(sig)
	shmem.Free(data)
	// Output: [4 2]
}

func ExampleWaitUntilContext() {
	if err := shmem.Init(); err != nil {
		log.Fatal(err)
	}
	defer shmem.Finalize()
	flag, err := shmem.Calloc[int64](1)
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	// Nobody sets the flag: the wait gives up when ctx is done.
	err = shmem.WaitUntilContext(ctx, &flag[0], shmem.CmpEQ, 1)
	fmt.Println(err)
	shmem.Free(flag)
	// Output: shmem.WaitUntilContext: context deadline exceeded
}

func ExampleSetLock() {
	if err := shmem.Init(); err != nil {
		log.Fatal(err)
	}
	defer shmem.Finalize()
	lock, err := shmem.Calloc[int64](1) // zero on every PE before first use
	if err != nil {
		log.Fatal(err)
	}
	total, err := shmem.Calloc[int64](1)
	if err != nil {
		log.Fatal(err)
	}
	shmem.SetLock(&lock[0])
	v := shmem.G(&total[0], 0) // a read-modify-write under the lock
	shmem.P(&total[0], v+1, 0)
	shmem.ClearLock(&lock[0])
	shmem.BarrierAll()
	fmt.Println(total[0])
	shmem.Free(total)
	shmem.Free(lock)
	// Output: 1
}

func ExampleCtx_SessionStart() {
	if err := shmem.Init(); err != nil {
		log.Fatal(err)
	}
	defer shmem.Finalize()
	table, err := shmem.Calloc[int64](1000)
	if err != nil {
		log.Fatal(err)
	}
	// A batch of small puts: to PEs on other hosts, goshmem sends them
	// together.
	shmem.CtxDefault.SessionStart(shmem.SessionBatch, shmem.SessionConfig{TotalOps: len(table)}, shmem.SessionTotalOps)
	for i := range table {
		shmem.P(&table[i], int64(i), 0)
	}
	shmem.CtxDefault.SessionStop()
	shmem.Quiet()
	fmt.Println(table[999])
	shmem.Free(table)
	// Output: 999
}
