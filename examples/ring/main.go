// Command ring passes a token around every PE: PE 0 starts it, each PE
// waits for it with WaitUntil, adds its number and passes it on with P, and
// PE 0 prints the value that comes back.
//
//	go run ./launcher/cmd/goshmem-run -np 4 ./examples/ring
package main

import (
	"flag"
	"fmt"
	"log"

	"github.com/goshmem/goshmem/shmem"
)

func main() {
	laps := flag.Int("laps", 1, "times the token goes around")
	flag.Parse()
	if err := shmem.Init(); err != nil {
		log.Fatal(err)
	}
	defer shmem.Finalize()
	me, n := shmem.MyPE(), shmem.NPEs()

	// token[0] holds the token's value; seq[0] the lap it belongs to.
	token, err := shmem.Calloc[int64](1)
	if err != nil {
		log.Fatal(err)
	}
	seq, err := shmem.Calloc[int64](1)
	if err != nil {
		log.Fatal(err)
	}
	next := (me + 1) % n
	var value int64
	for lap := 1; lap <= *laps; lap++ {
		// PE 0 gets the token of the lap before; the others that of this lap.
		if want := int64(lap) - int64(btoi(me == 0)); want > 0 {
			shmem.WaitUntil(&seq[0], shmem.CmpGE, want)
			value = token[0]
		}
		value += int64(me)
		shmem.P(&token[0], value, next)
		shmem.Fence()
		shmem.P(&seq[0], int64(lap), next)
	}
	if me == 0 {
		shmem.WaitUntil(&seq[0], shmem.CmpGE, int64(*laps))
		fmt.Printf("token after %d lap(s) around %d PEs: %d\n", *laps, n, token[0])
	}
	shmem.BarrierAll()
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
