// Command histogram builds a distributed histogram with atomics: every PE
// draws values (from a generator seeded with its PE number), and counts
// each in its bin, which lives on the PE bin%NPEs at index bin/NPEs, with
// AtomicInc; the bins are allocated with MallocWithHints, telling the
// library they are targets of remote atomics. PE 0 then gathers the bins
// with Get, checks them against the histogram it computes itself from the
// same generators, and prints the result; the job exits non-zero if a bin
// is wrong.
//
//	go run ./launcher/cmd/goshmem-run -np 4 ./examples/histogram -values 100000 -bins 37
package main

import (
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"

	"github.com/goshmem/goshmem/shmem"
)

func main() {
	values := flag.Int("values", 100000, "values each PE draws")
	bins := flag.Int("bins", 37, "bins of the histogram")
	flag.Parse()
	if err := shmem.Init(); err != nil {
		log.Fatal(err)
	}
	defer shmem.Finalize()
	me, n := shmem.MyPE(), shmem.NPEs()
	if *bins < 1 {
		log.Fatalf("histogram: %d bins", *bins)
	}

	// This PE holds bins me, me+n, me+2n, ...: at most ceil(bins/n).
	local, err := shmem.MallocWithHints[int64]((*bins+n-1)/n, shmem.MallocAtomicsRemote)
	if err != nil {
		log.Fatal(err)
	}
	clear(local)
	shmem.BarrierAll()

	draw := generator(me, *bins)
	for i := 0; i < *values; i++ {
		b := draw()
		shmem.AtomicInc(&local[b/n], b%n)
	}
	shmem.BarrierAll() // completes every PE's atomics

	ok := true
	if me == 0 {
		got := make([]int64, *bins)
		row := make([]int64, len(local))
		for pe := 0; pe < n; pe++ {
			shmem.Get(row, local, pe)
			for i, c := range row {
				if b := i*n + pe; b < *bins {
					got[b] = c
				}
			}
		}
		want := make([]int64, *bins)
		for pe := 0; pe < n; pe++ {
			d := generator(pe, *bins)
			for i := 0; i < *values; i++ {
				want[d()]++
			}
		}
		var total int64
		for b := range want {
			total += got[b]
			if got[b] != want[b] {
				ok = false
				fmt.Printf("histogram: bin %d holds %d, want %d\n", b, got[b], want[b])
			}
		}
		verdict := "OK"
		if !ok {
			verdict = "WRONG"
		}
		fmt.Printf("histogram: %d values from each of %d PEs in %d bins: %d counted, %s\n", *values, n, *bins, total, verdict)
	}
	shmem.BarrierAll()
	if !ok {
		shmem.Finalize()
		os.Exit(1)
	}
}

// generator returns the bins PE pe draws: a deterministic sequence, skewed
// towards the low bins so the histogram is not flat.
func generator(pe, bins int) func() int {
	r := rand.New(rand.NewPCG(uint64(pe), 12345))
	return func() int {
		x, y := r.IntN(bins), r.IntN(bins)
		return min(x, y)
	}
}
