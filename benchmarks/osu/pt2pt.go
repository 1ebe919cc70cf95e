package main

import (
	"fmt"
	"time"

	"github.com/goshmem/goshmem/shmem"
)

// Defaults of the OSU point-to-point programs (osu_oshm_put.c and
// friends): 10000 timed and 1000 warm-up iterations up to 8 KiB, 100 and
// 10 above; sizes 1 B to 1 MiB.
var pt2ptDefaults = Options{Min: 1, Max: 1 << 20, Iters: 10000, Warmup: 1000, ItersLarge: 100,
	WarmupLarge: 10, LargeSize: 8192, Window: 64, Memory: "heap", Precision: 2, Settle: defaultSettle}

func init() {
	for _, c := range []struct{ name, title string }{
		{"put", "OSU OpenSHMEM Put Test"},
		{"get", "OSU OpenSHMEM Get Test"},
		{"put_nb", "OSU OpenSHMEM Put_nbi Test"},
		{"get_nb", "OSU OpenSHMEM Get_nbi Test"},
	} {
		register(&command{name: c.name, title: c.title, defaults: pt2ptDefaults, pes: atLeastTwo,
			need: func(o *Options, _ int) int { return 2*o.Max + 2*bufAlign }, run: runLatency})
	}
	for _, c := range []struct{ name, title string }{
		{"put_bw", "OSU OpenSHMEM Put Bandwidth Test"},
		{"get_bw", "OSU OpenSHMEM Get Bandwidth Test"},
	} {
		register(&command{name: c.name, title: c.title, defaults: pt2ptDefaults, pes: atLeastTwo,
			need: func(o *Options, _ int) int { return 2*o.Max + 2*bufAlign }, run: runBandwidth})
	}
	// osu_oshm_put_mr: 500 puts per size below 8 KiB, 50 from 8 KiB, each
	// to its own offset of one buffer; one warm-up pass of 50 puts of the
	// largest size before the first size.
	mr := pt2ptDefaults
	mr.Iters, mr.Warmup, mr.ItersLarge, mr.WarmupLarge, mr.LargeSize = 500, 0, 50, 0, 4096
	register(&command{name: "put_mr", title: "OSU OpenSHMEM Put Message Rate Test", defaults: mr,
		pes: atLeastTwo, need: func(o *Options, _ int) int { return mrBufSize(o) + bufAlign }, run: runMessageRate})
	// osu_oshm_atomics: 500 operations per kind (OSHM_LOOP_ATOMIC), each on
	// its own element, no warm-up.
	at := pt2ptDefaults
	at.Iters, at.Warmup, at.ItersLarge, at.WarmupLarge = 500, 0, 500, 0
	register(&command{name: "atomics", title: "OSU OpenSHMEM Atomic Operation Rate Test", defaults: at,
		pes: atLeastTwo, need: func(o *Options, _ int) int { return 8*atomicElems(o) + bufAlign }, run: runAtomics})
	// osu_oshm_barrier: the PGAS defaults, 1000 timed and 200 warm-up.
	ba := pt2ptDefaults
	ba.Iters, ba.Warmup, ba.ItersLarge, ba.WarmupLarge = 1000, 200, 1000, 200
	register(&command{name: "barrier", title: "OSU OpenSHMEM Barrier Latency Test", defaults: ba,
		pes: atLeastTwo, need: func(*Options, int) int { return 0 }, run: runBarrier})
}

// runLatency is put, get, put_nb and get_nb: for each size, PE 0 times
// iters transfers to or from PE 1 after warmup untimed ones, as
// osu_oshm_put (putmem then quiet, each iteration), osu_oshm_get (getmem),
// osu_oshm_put_nbi (fence once, then putmem_nbi and quiet each iteration)
// and get_nbi (getmem_nbi and quiet). PE 1 is passive. With more than 2
// PEs (the OSU programs take exactly 2), PE i < n/2 works on PE i+n/2 at
// the same time, and the row is the senders' mean latency.
func runLatency(b *bench) (*Report, error) {
	c := b.c
	o := b.o
	s, err := alloc[byte](b.mem, o.Max)
	if err != nil {
		return nil, err
	}
	r, err := alloc[byte](b.mem, o.Max)
	if err != nil {
		return nil, err
	}
	pairs, peer := b.pairs()
	rep := b.report(c, metricLatency, colSize, colLatency)
	for _, size := range o.sizes() {
		iters, warm := o.loops(size)
		fill(s[:size], 'a')
		fill(r[:size], 'b')
		shmem.BarrierAll()
		var el time.Duration
		if b.me < pairs {
			src, dst := s[:size], r[:size]
			var t0 time.Time
			n := iters + warm
			kind := c.name
			if kind == "put_nb" {
				shmem.Fence()
			}
			// One loop for the four tests, as osu_oshm.c has: the switch
			// on a string that never changes costs a predicted branch.
			for i := 0; i < n; i++ {
				if i == warm {
					t0 = time.Now()
				}
				switch kind {
				case "put":
					shmem.PutMem(dst, src, peer)
					shmem.Quiet()
				case "get":
					shmem.GetMem(dst, src, peer)
				case "put_nb":
					shmem.PutMemNBI(dst, src, peer)
					shmem.Quiet()
				case "get_nb":
					shmem.GetMemNBI(dst, src, peer)
					shmem.Quiet()
				}
			}
			el = time.Since(t0)
		}
		if rows := b.gather(perOp(el, iters)); rows != nil {
			sum := 0.0
			for _, r := range rows[:pairs] {
				sum += r[0]
			}
			rep.Rows = append(rep.Rows, Row{Size: size, Latency: sum / float64(pairs), Iterations: iters})
		}
	}
	return rep, nil
}

// runBandwidth is put_bw and get_bw: for each size, PE 0 times iters
// windows of Window non-blocking puts (gets) of the same buffers to (from)
// PE 1, each window ended by a quiet, after warmup untimed windows.
// Bandwidth is bytes moved over time, in MB/s (10^6 bytes per second).
// With more than 2 PEs, PE i < n/2 works on PE i+n/2 at the same time and
// the row is the senders' summed bandwidth.
func runBandwidth(b *bench) (*Report, error) {
	c := b.c
	o := b.o
	s, err := alloc[byte](b.mem, o.Max)
	if err != nil {
		return nil, err
	}
	r, err := alloc[byte](b.mem, o.Max)
	if err != nil {
		return nil, err
	}
	put := c.name == "put_bw"
	pairs, peer := b.pairs()
	rep := b.report(c, metricBandwidth, colSize, colBandwidth)
	for _, size := range o.sizes() {
		iters, warm := o.loops(size)
		fill(s[:size], 'a')
		fill(r[:size], 'b')
		shmem.BarrierAll()
		var bw float64
		if b.me < pairs {
			src, dst := s[:size], r[:size]
			var t0 time.Time
			for i := 0; i < iters+warm; i++ {
				if i == warm {
					t0 = time.Now()
				}
				if put {
					for range o.Window {
						shmem.PutMemNBI(dst, src, peer)
					}
				} else {
					for range o.Window {
						shmem.GetMemNBI(dst, src, peer)
					}
				}
				shmem.Quiet()
			}
			bytes := float64(size) * float64(o.Window) * float64(iters)
			bw = bytes / time.Since(t0).Seconds() / 1e6
		}
		if rows := b.gather(bw); rows != nil {
			sum := 0.0
			for _, r := range rows {
				sum += r[0]
			}
			rep.Rows = append(rep.Rows, Row{Size: size, Bandwidth: sum, Iterations: iters})
		}
	}
	return rep, nil
}

// pairs returns the number of sending PEs of put_mr and atomics (the lower
// half) and this PE's partner: PE i < n/2 works on PE i+n/2.
func (b *bench) pairs() (pairs, partner int) {
	pairs = b.npes / 2
	if b.me < pairs {
		return pairs, b.me + pairs
	}
	return pairs, b.me - pairs
}

// mrBufSize is the buffer of put_mr: room for every put of a size at its
// own offset, and for the warm-up pass.
func mrBufSize(o *Options) int {
	n := o.Max * max(o.WarmupLarge, 1)
	for _, size := range o.sizes() {
		iters, _ := o.loops(size)
		n = max(n, size*iters)
	}
	return n
}

// runMessageRate is put_mr (osu_oshm_put_mr): PE i < n/2 puts to PE
// i+n/2, iters puts of each size to consecutive offsets then one quiet,
// timed; the rates of the senders are summed. The warm-up is one pass of
// WarmupLarge (-warmup-large) puts of the largest size, before the first
// size; -warmup adds untimed puts before each size.
func runMessageRate(b *bench) (*Report, error) {
	c := b.c
	o := b.o
	buf, err := alloc[byte](b.mem, mrBufSize(o))
	if err != nil {
		return nil, err
	}
	fill(buf, 0)
	pairs, peer := b.pairs()
	if b.me < pairs {
		for i := 0; i < o.WarmupLarge && (i+1)*o.Max <= len(buf); i++ {
			p := buf[i*o.Max : (i+1)*o.Max]
			shmem.PutMem(p, p, peer)
		}
		shmem.Quiet()
	}
	shmem.BarrierAll()
	rep := b.report(c, metricRate, colSize, colRate)
	for _, size := range o.sizes() {
		iters, warm := o.loops(size)
		fill(buf[:size*iters], byte(size))
		shmem.BarrierAll()
		var rate float64
		if b.me < pairs {
			for i := range warm {
				p := buf[(i%iters)*size : (i%iters+1)*size]
				shmem.PutMem(p, p, peer)
			}
			shmem.Quiet()
			t0 := time.Now()
			for i := range iters {
				p := buf[i*size : (i+1)*size]
				shmem.PutMem(p, p, peer)
			}
			shmem.Quiet()
			rate = float64(iters) / time.Since(t0).Seconds()
		}
		if rows := b.gather(rate); rows != nil {
			sum := 0.0
			for _, r := range rows {
				sum += r[0]
			}
			rep.Rows = append(rep.Rows, Row{Size: size, Rate: sum, Iterations: iters})
		}
	}
	return rep, nil
}

// atomicElems is the number of int64 elements of the atomics buffer: one
// per operation of a kind, as OSU's OSHM_LOOP_ATOMIC, capped at 1<<16
// (later operations reuse elements).
func atomicElems(o *Options) int {
	return min(max(o.Iters+o.Warmup, 1), 1<<16)
}

// atomicOps are the operations of the atomics test, on int64 (C's long
// long), each on element i%len of the buffer at the partner PE.
var atomicOps = []struct {
	name string
	op   func(p *int64, peer int)
}{
	{"fadd", func(p *int64, peer int) { shmem.AtomicFetchAdd(p, 1, peer) }},
	{"finc", func(p *int64, peer int) { shmem.AtomicFetchInc(p, peer) }},
	{"add", func(p *int64, peer int) { shmem.AtomicAdd(p, 1, peer) }},
	{"inc", func(p *int64, peer int) { shmem.AtomicInc(p, peer) }},
	{"cswap", func(p *int64, peer int) { shmem.AtomicCompareSwap(p, int64(peer), 7, peer) }},
	{"swap", func(p *int64, peer int) { shmem.AtomicSwap(p, 7, peer) }},
	{"fetch", func(p *int64, peer int) { shmem.AtomicFetch(p, peer) }},
	{"set", func(p *int64, peer int) { shmem.AtomicSet(p, 7, peer) }},
}

// runAtomics is atomics (osu_oshm_atomics): for each operation, PE i < n/2
// times iters operations on PE i+n/2, each on its own element; the table
// gives the senders' summed rate in millions of operations per second and
// their average latency. As in OSU, the non-fetching operations (add, inc,
// set) are timed without a quiet. The compare-and-swap finds its condition
// (the target's PE number) and succeeds on the first operation of each
// element.
func runAtomics(b *bench) (*Report, error) {
	c := b.c
	o := b.o
	buf, err := alloc[int64](b.mem, atomicElems(o))
	if err != nil {
		return nil, err
	}
	pairs, peer := b.pairs()
	rep := b.report(c, metricLatency, colOperation, colMOps, colLatency)
	for _, at := range atomicOps {
		for i := range buf {
			buf[i] = int64(b.me)
		}
		shmem.BarrierAll()
		var rate, lat float64
		if b.me < pairs {
			n := len(buf)
			for i := range o.Warmup {
				at.op(&buf[i%n], peer)
			}
			t0 := time.Now()
			for i := range o.Iters {
				at.op(&buf[i%n], peer)
			}
			el := time.Since(t0)
			rate, lat = float64(o.Iters)/el.Seconds(), perOp(el, o.Iters)
		}
		shmem.Quiet()
		if rows := b.gather(rate, lat); rows != nil {
			var sr, sl float64
			for _, r := range rows {
				sr += r[0]
				sl += r[1]
			}
			rep.Rows = append(rep.Rows, Row{Op: "shmem_int64_" + at.name, MOps: sr / 1e6,
				Latency: sl / float64(pairs), Iterations: o.Iters})
		}
	}
	return rep, nil
}

// runBarrier is barrier (osu_oshm_barrier): every PE times each of iters
// BarrierAll calls, after warmup untimed ones; the row gives the average
// over the PEs of their mean latency, and the smallest and largest.
func runBarrier(b *bench) (*Report, error) {
	c := b.c
	o := b.o
	cols := []string{colAvgLatency}
	if o.Full {
		cols = append(cols, colMinLatency, colMaxLatency, colIterations)
	}
	rep := b.report(c, metricLatency, cols...)
	var timer time.Duration
	for i := 0; i < o.Iters+o.Warmup; i++ {
		t0 := time.Now()
		shmem.BarrierAll()
		if d := time.Since(t0); i >= o.Warmup {
			timer += d
		}
	}
	if row, ok := b.latencyStats(perOp(timer, o.Iters), o.Iters); ok {
		rep.Rows = append(rep.Rows, row)
	}
	return rep, nil
}

// latencyStats gathers every PE's latency and returns, on PE 0, the row of
// their average, minimum and maximum, as OSU's print_data_pgas.
func (b *bench) latencyStats(lat float64, iters int) (Row, bool) {
	rows := b.gather(lat)
	if rows == nil {
		return Row{}, false
	}
	row := Row{MinLatency: rows[0][0], MaxLatency: rows[0][0], Iterations: iters}
	sum := 0.0
	for _, r := range rows {
		sum += r[0]
		row.MinLatency = min(row.MinLatency, r[0])
		row.MaxLatency = max(row.MaxLatency, r[0])
	}
	row.Latency = sum / float64(len(rows))
	return row, true
}

// checkPEs applies the command's PE check.
func (c *command) checkPEs(npes int) error {
	if c.pes == nil {
		return nil
	}
	if err := c.pes(npes); err != nil {
		return fmt.Errorf("%s: %w", c.name, err)
	}
	return nil
}
