package main

import (
	"fmt"
	"time"

	"github.com/goshmem/goshmem/shmem"
)

// Defaults of the OSU collective programs (the PGAS options of
// osu_util_pgas): 1000 timed and 200 warm-up iterations up to 8 KiB, 100
// and 10 above; 4 B to 1 MiB.
var collDefaults = Options{Min: 4, Max: 1 << 20, Iters: 1000, Warmup: 200, ItersLarge: 100,
	WarmupLarge: 10, LargeSize: 8192, Window: 1, Memory: "heap", Precision: 2, Settle: defaultSettle}

func init() {
	for _, name := range collNames {
		register(&command{name: name, title: collTitles[name], defaults: collDefaults,
			pes: atLeastTwo, need: collNeed(name), run: runCollective})
	}
}

// collElems returns the element counts of a collective run: the sizes in
// bytes divided by the 4 bytes of an element (at least one element), as the
// OSU programs count elements and print bytes.
func collElems(o *Options) []int {
	var n []int
	for e := max(o.Min/4, 1); e*4 <= max(o.Max, 4); e *= 2 {
		n = append(n, e)
	}
	return n
}

// collNeed returns the memory a collective test takes: its source and
// destination for the largest size.
func collNeed(name string) func(o *Options, npes int) int {
	return func(o *Options, npes int) int {
		m := max(o.Max, 4) + 2*bufAlign
		switch name {
		case "collect", "fcollect":
			return m + npes*m
		case "alltoall":
			return 2 * npes * m
		}
		return 2 * m
	}
}

// runCollective is broadcast, collect, fcollect, reduce and alltoall: for
// each size every PE times each call of the collective on TeamWorld, with a
// barrier after each (outside the timing), as osu_oshm_broadcast does; the
// row gives the average over the PEs of their mean latency, and the
// smallest and largest.
func runCollective(b *bench) (*Report, error) {
	c, o := b.c, b.o
	elems := collElems(o)
	maxN := elems[len(elems)-1]
	srcN, dstN := maxN, maxN
	switch c.name {
	case "collect", "fcollect":
		dstN = b.npes * maxN
	case "alltoall":
		srcN, dstN = b.npes*maxN, b.npes*maxN
	}
	var op func(n int) error
	if c.name == "reduce" {
		src, err := alloc[float32](b.mem, srcN)
		if err != nil {
			return nil, err
		}
		dst, err := alloc[float32](b.mem, dstN)
		if err != nil {
			return nil, err
		}
		for i := range src {
			src[i] = float32(b.me + i)
		}
		op = func(n int) error { return shmem.SumReduce(shmem.TeamWorld, dst[:n], src[:n]) }
	} else {
		src, err := alloc[uint32](b.mem, srcN)
		if err != nil {
			return nil, err
		}
		dst, err := alloc[uint32](b.mem, dstN)
		if err != nil {
			return nil, err
		}
		for i := range src {
			src[i] = uint32(b.me<<24 + i)
		}
		switch c.name {
		case "broadcast":
			op = func(n int) error { return shmem.Broadcast(shmem.TeamWorld, dst[:n], src[:n], 0) }
		case "collect":
			op = func(n int) error { return shmem.Collect(shmem.TeamWorld, dst[:b.npes*n], src[:n]) }
		case "fcollect":
			op = func(n int) error { return shmem.FCollect(shmem.TeamWorld, dst[:b.npes*n], src[:n]) }
		case "alltoall":
			op = func(n int) error { return shmem.Alltoall(shmem.TeamWorld, dst[:b.npes*n], src[:b.npes*n]) }
		default:
			return nil, fmt.Errorf("no collective %q", c.name)
		}
	}
	cols := []string{colSize, colAvgLatency}
	if o.Full {
		cols = append(cols, colMinLatency, colMaxLatency, colIterations)
	}
	rep := b.report(c, metricLatency, cols...)
	shmem.BarrierAll()
	for _, n := range elems {
		size := 4 * n
		iters, warm := o.loops(size)
		var timer time.Duration
		for i := 0; i < iters+warm; i++ {
			t0 := time.Now()
			err := op(n)
			d := time.Since(t0)
			if err != nil {
				return nil, fmt.Errorf("%s of %d bytes: %w", c.name, size, err)
			}
			if i >= warm {
				timer += d
			}
			shmem.BarrierAll()
		}
		shmem.BarrierAll()
		if row, ok := b.latencyStats(perOp(timer, iters), iters); ok {
			row.Size = size
			rep.Rows = append(rep.Rows, row)
		}
	}
	return rep, nil
}
