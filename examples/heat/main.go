// Command heat solves the 1-D heat equation u_t = u_xx on a rod whose ends
// are held at 0, by explicit finite differences, with the cells split
// among the PEs. Each step, a PE sends its first and last cells to its
// neighbours' ghost cells with PutSignal and waits for theirs with
// SignalWaitUntil (the ghosts and signals alternate between two sets, so a
// neighbour a step ahead never overwrites a ghost still in use). Every PE
// then checks its cells against the same computation done serially, and
// PE 0 prints the result; the job exits non-zero if any cell differs.
//
//	go run ./launcher/cmd/goshmem-run -np 4 ./examples/heat -cells 1000 -steps 500
package main

import (
	"flag"
	"fmt"
	"log"
	"os"

	"github.com/goshmem/goshmem/shmem"
)

const alpha = 0.25 // dt/dx², at most 0.5 for stability

func main() {
	cells := flag.Int("cells", 1000, "cells of the rod")
	steps := flag.Int("steps", 500, "time steps")
	flag.Parse()
	if err := shmem.Init(); err != nil {
		log.Fatal(err)
	}
	defer shmem.Finalize()
	me, n := shmem.MyPE(), shmem.NPEs()
	if *cells < n {
		log.Fatalf("heat: %d cells for %d PEs: need at least one cell per PE", *cells, n)
	}

	// This PE's cells are [lo, hi) of the rod (the first PEs take one more
	// when n does not divide the cells).
	lo, hi := span(me, n, *cells)
	u := initial(*cells)[lo:hi]
	next := make([]float64, len(u))

	// ghost[p] and ghost[2+p] are the left and right ghost cells of step
	// parity p; sig[...] the matching signals, set to the step number.
	ghost, err := shmem.Calloc[float64](4)
	if err != nil {
		log.Fatal(err)
	}
	sig, err := shmem.Calloc[uint64](4)
	if err != nil {
		log.Fatal(err)
	}
	left, right := me-1, me+1 // -1 or n: the held end of the rod
	for s := 1; s <= *steps; s++ {
		p := s % 2
		if left >= 0 {
			shmem.PutSignal(ghost[2+p:3+p], u[:1], &sig[2+p], uint64(s), shmem.SignalSet, left)
		}
		if right < n {
			shmem.PutSignal(ghost[p:p+1], u[len(u)-1:], &sig[p], uint64(s), shmem.SignalSet, right)
		}
		l, r := 0.0, 0.0
		if left >= 0 {
			shmem.SignalWaitUntil(&sig[p], shmem.CmpGE, uint64(s))
			l = ghost[p]
		}
		if right < n {
			shmem.SignalWaitUntil(&sig[2+p], shmem.CmpGE, uint64(s))
			r = ghost[2+p]
		}
		for i := range u {
			um, up := l, r
			if i > 0 {
				um = u[i-1]
			}
			if i < len(u)-1 {
				up = u[i+1]
			}
			next[i] = u[i] + alpha*(um-2*u[i]+up)
		}
		u, next = next, u
	}

	// Check against the serial computation, and count the differences on
	// PE 0.
	want := serial(*cells, *steps)[lo:hi]
	bad, err := shmem.Calloc[int64](1)
	if err != nil {
		log.Fatal(err)
	}
	heat, err := shmem.Calloc[float64](n)
	if err != nil {
		log.Fatal(err)
	}
	var diff int64
	var sum float64
	for i := range u {
		if u[i] != want[i] {
			diff++
		}
		sum += u[i]
	}
	shmem.AtomicAdd(&bad[0], diff, 0)
	shmem.P(&heat[me], sum, 0)
	shmem.BarrierAll()
	if me == 0 {
		total := 0.0
		for _, h := range heat {
			total += h
		}
		fmt.Printf("heat: %d cells, %d steps on %d PEs: %d cells differ from the serial solution; heat left %.6f\n",
			*cells, *steps, n, bad[0], total)
	}
	failed := bad[0] != 0
	shmem.BarrierAll()
	if failed {
		shmem.Finalize()
		os.Exit(1)
	}
}

// span returns the cells [lo, hi) of PE me of n.
func span(me, n, cells int) (lo, hi int) {
	per, extra := cells/n, cells%n
	lo = me*per + min(me, extra)
	hi = lo + per
	if me < extra {
		hi++
	}
	return lo, hi
}

// initial is the rod at time 0: a block of heat in its middle third.
func initial(cells int) []float64 {
	u := make([]float64, cells)
	for i := cells / 3; i < 2*cells/3; i++ {
		u[i] = 1
	}
	return u
}

// serial computes the same steps on one PE, in the same floating-point
// operations, so the results must be identical.
func serial(cells, steps int) []float64 {
	u, next := initial(cells), make([]float64, cells)
	for s := 0; s < steps; s++ {
		for i := range u {
			um, up := 0.0, 0.0
			if i > 0 {
				um = u[i-1]
			}
			if i < cells-1 {
				up = u[i+1]
			}
			next[i] = u[i] + alpha*(um-2*u[i]+up)
		}
		u, next = next, u
	}
	return u
}
