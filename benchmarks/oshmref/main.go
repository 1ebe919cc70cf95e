// Command oshmref runs the loops of ANCHORS.md's reference benchmark
// (shared/bench/oshm_ref.c) written with the shmem package, and prints the
// same "name microseconds" lines, so that goshmem and a C OpenSHMEM can be
// compared side by side on one machine:
//
//	go run ./launcher/cmd/goshmem-run -np 2 ./benchmarks/oshmref [iters [loops]]
//
// PE 0 drives and PE 1 is the passive target; every PE takes part in the
// barrier loop. loops, a comma-separated list of the names the lines
// print (put8,get8,...), runs only those: a count of one loop's
// instructions (valgrind, iterations against fewer iterations) then
// holds nothing else.
package main

import (
	"fmt"
	"log"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goshmem/goshmem/shmem"
)

// loops are the names of the loops, as their lines print them.
var loops = []string{"put8", "get8", "fadd", "add", "cswap", "put1m", "get1m", "barrier"}

func main() {
	iters := 200000
	if len(os.Args) > 1 {
		n, err := strconv.Atoi(os.Args[1])
		if err != nil || n <= 0 {
			log.Fatalf("iterations %q: want a positive number", os.Args[1])
		}
		iters = n
	}
	run := func(string) bool { return true }
	if len(os.Args) > 2 {
		want := map[string]bool{}
		for _, l := range strings.Split(os.Args[2], ",") {
			if !slices.Contains(loops, l) {
				log.Fatalf("loop %q: want some of %s", l, strings.Join(loops, ","))
			}
			want[l] = true
		}
		run = func(l string) bool { return want[l] }
	}
	if err := shmem.Init(); err != nil {
		log.Fatal(err)
	}
	defer shmem.Finalize()
	if shmem.NPEs() < 2 {
		log.Fatal("oshmref needs at least 2 PEs")
	}
	me := shmem.MyPE()
	const big = 1 << 20
	sbuf, err := shmem.Malloc[byte](big)
	if err != nil {
		log.Fatal(err)
	}
	rbuf, err := shmem.Calloc[byte](big)
	if err != nil {
		log.Fatal(err)
	}
	ctr, err := shmem.Calloc[int64](1)
	if err != nil {
		log.Fatal(err)
	}
	for i := range sbuf {
		sbuf[i] = 1
	}
	shmem.BarrierAll()
	us := func(start time.Time, n int) float64 {
		return float64(time.Since(start).Nanoseconds()) / 1e3 / float64(n)
	}
	if me == 0 {
		for range 1000 {
			shmem.PutMem(rbuf[:8], sbuf[:8], 1)
		}
		if run("put8") {
			t := time.Now()
			for range iters {
				shmem.PutMem(rbuf[:8], sbuf[:8], 1)
			}
			shmem.Quiet()
			fmt.Printf("put8 %.4f\n", us(t, iters))
		}
		if run("get8") {
			t := time.Now()
			for range iters {
				shmem.GetMem(rbuf[:8], sbuf[:8], 1)
			}
			fmt.Printf("get8 %.4f\n", us(t, iters))
		}
		if run("fadd") {
			t := time.Now()
			for range iters {
				shmem.AtomicFetchAdd(&ctr[0], 1, 1)
			}
			fmt.Printf("fadd %.4f\n", us(t, iters))
		}
		if run("add") {
			t := time.Now()
			for range iters {
				shmem.AtomicAdd(&ctr[0], 1, 1)
			}
			shmem.Quiet()
			fmt.Printf("add %.4f\n", us(t, iters))
		}
		if run("cswap") {
			t := time.Now()
			for range iters {
				shmem.AtomicCompareSwap(&ctr[0], -1, 0, 1)
			}
			fmt.Printf("cswap %.4f\n", us(t, iters))
		}
		bi := iters/200 + 10
		if run("put1m") {
			t := time.Now()
			for range bi {
				shmem.PutMem(rbuf, sbuf, 1)
			}
			shmem.Quiet()
			fmt.Printf("put1m %.4f\n", us(t, bi))
		}
		if run("get1m") {
			t := time.Now()
			for range bi {
				shmem.GetMem(rbuf, sbuf, 1)
			}
			fmt.Printf("get1m %.4f\n", us(t, bi))
		}
	}
	shmem.BarrierAll()
	if run("barrier") {
		bi := iters/20 + 10
		t := time.Now()
		for range bi {
			shmem.BarrierAll()
		}
		if me == 0 {
			fmt.Printf("barrier %.4f\n", us(t, bi))
		}
	}
}
