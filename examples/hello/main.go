// Command hello is the smallest goshmem program: every PE says hello, then
// PE 0 checks that one atomic from every PE arrived.
//
//	go run ./launcher/cmd/goshmem-run -np 4 ./examples/hello
package main

import (
	"fmt"
	"log"

	"github.com/goshmem/goshmem/shmem"
)

func main() {
	if err := shmem.Init(); err != nil {
		log.Fatal(err)
	}
	defer shmem.Finalize()
	me, n := shmem.MyPE(), shmem.NPEs()
	fmt.Printf("Hello from PE %d of %d\n", me, n)

	count, err := shmem.Calloc[int64](1)
	if err != nil {
		log.Fatal(err)
	}
	shmem.AtomicInc(&count[0], 0)
	shmem.BarrierAll()
	if me == 0 && count[0] != int64(n) {
		log.Fatalf("PE 0 counted %d arrivals, want %d", count[0], n)
	}
	shmem.Free(count)
}
