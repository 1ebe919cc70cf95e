package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// timingQueueSize is how many of the latest iteration times the percentile
// is taken over, as in ucx_perftest.
const timingQueueSize = 2048

// reportInterval is the period of the progress lines.
const reportInterval = time.Second

// counters are the running totals of a measurement.
type counters struct {
	iters, bytes, msgs int64
	time               time.Time
}

// perf measures a test the way ucx_perftest's libperf does: every
// iteration calls update, which records the time since the previous one
// (batched for short iterations, see batch) in a circular timing queue and prints a progress line every reportInterval;
// final prints the last line. Latency is per iteration divided by factor
// (2 for ping-pong tests: half a round trip), bandwidth and message rate are
// multiplied by it.
type perf struct {
	out        io.Writer
	factor     float64
	rank       float64 // percentile rank, 50 by default
	print      bool    // print progress lines
	start      time.Time
	cur, prev  counters
	prevTime   time.Time
	queue      [timingQueueSize]time.Duration
	head, qlen int
	nextReport time.Time
	// The clock costs 30-60 ns a reading on the machines we measure on
	// (ucx_perftest reads the TSC in a few), more than a shared-memory
	// operation: when iterations are that short, update reads it once
	// every batch iterations and gives each its share.
	batch, pending int
}

// Batching of clock readings: iterations shorter than batchBelow are timed
// batchSize at a time.
const (
	batchBelow = time.Microsecond
	batchSize  = 32
)

func newPerf(out io.Writer, factor, rank float64, progress bool) *perf {
	p := &perf{out: out, factor: factor, rank: rank, print: progress}
	p.reset()
	return p
}

// reset starts the measurement now.
func (p *perf) reset() {
	now := time.Now()
	p.start, p.prevTime, p.nextReport = now, now, now.Add(reportInterval)
	p.cur = counters{time: now}
	p.prev = p.cur
	p.head, p.qlen = 0, 0
	p.batch, p.pending = 1, 0
}

// update records iters iterations that moved bytes bytes in one message.
func (p *perf) update(iters, bytes int64) {
	p.cur.iters += iters
	p.cur.bytes += bytes
	p.cur.msgs++
	p.pending++
	if p.pending < p.batch {
		return
	}
	now := p.tick()
	if p.print && !now.Before(p.nextReport) {
		fmt.Fprintln(p.out, "[thread 0]"+p.line(p.result()))
		p.prev = p.cur
		p.nextReport = now.Add(reportInterval)
	}
}

// tick reads the clock and records the iterations not timed yet, each with
// its share of the time since the last reading.
func (p *perf) tick() time.Time {
	now := time.Now()
	p.cur.time = now
	each := now.Sub(p.prevTime) / time.Duration(p.pending)
	for ; p.pending > 0; p.pending-- {
		p.queue[p.head] = each
		p.head = (p.head + 1) % timingQueueSize
		if p.qlen < timingQueueSize {
			p.qlen++
		}
	}
	p.batch = 1
	if each < batchBelow {
		p.batch = batchSize
	}
	p.prevTime = now
	return now
}

// result is one line of the table.
type result struct {
	iters                     int64
	percentile, moment, total float64 // latency, seconds
	bwMoment, bwTotal         float64 // bytes per second
	rateMoment, rateTotal     float64 // messages per second
	elapsed                   time.Duration
}

func (p *perf) result() result {
	r := result{iters: p.cur.iters, elapsed: p.cur.time.Sub(p.start)}
	if p.qlen > 0 {
		s := make([]time.Duration, p.qlen)
		copy(s, p.queue[:p.qlen])
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		k := int(float64(p.qlen) * p.rank / 100)
		k = min(max(k, 0), p.qlen-1)
		r.percentile = s[k].Seconds() / p.factor
	}
	dt := p.cur.time.Sub(p.prev.time).Seconds()
	if di := p.cur.iters - p.prev.iters; di > 0 && dt > 0 {
		r.moment = dt / float64(di) / p.factor
		r.bwMoment = float64(p.cur.bytes-p.prev.bytes) / dt * p.factor
		r.rateMoment = float64(p.cur.msgs-p.prev.msgs) / dt * p.factor
	}
	if tt := r.elapsed.Seconds(); p.cur.iters > 0 && tt > 0 {
		r.total = tt / float64(p.cur.iters) / p.factor
		r.bwTotal = float64(p.cur.bytes) / tt * p.factor
		r.rateTotal = float64(p.cur.msgs) / tt * p.factor
	}
	return r
}

// line formats a result as ucx_perftest does, without its 10-character
// prefix ("[thread 0]" or "Final:    ").
func (p *perf) line(r result) string {
	return fmt.Sprintf("%18d %10.3f %9.3f %9.3f %11.2f %10.2f %11.0f %11.0f",
		r.iters, r.percentile*1e6, r.moment*1e6, r.total*1e6,
		r.bwMoment/(1<<20), r.bwTotal/(1<<20), r.rateMoment, r.rateTotal)
}

// final prints the last line: "Final:" and the totals (the moment columns
// cover the time since the last progress line).
func (p *perf) final(finalOnly bool) result {
	if p.pending > 0 {
		p.tick()
	}
	r := p.result()
	prefix := "Final:    "
	if finalOnly {
		prefix = strings.Repeat(" ", 10)
	}
	fmt.Fprintln(p.out, prefix+p.line(r))
	return r
}

// printHeader prints the table header of ucx_perftest.
func printHeader(out io.Writer, rank float64, finalOnly bool) {
	stage := "    Stage     "
	if finalOnly {
		stage = "     Test     "
	}
	sep := "+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+"
	fmt.Fprintln(out, "+--------------+--------------+------------------------------+---------------------+-----------------------+")
	fmt.Fprintln(out, "|              |              |        latency (usec)        |   bandwidth (MB/s)  |  message rate (msg/s) |")
	fmt.Fprintln(out, sep)
	fmt.Fprintf(out, "|%s| # iterations | %4.1f%%ile | average | overall |  average |  overall |  average  |  overall  |\n", stage, rank)
	fmt.Fprintln(out, sep)
}

// printTestBox prints the description of the test that ucx_perftest's
// server prints.
func printTestBox(out io.Writer, t *testDef, size int) {
	border := "+" + strings.Repeat("-", 106) + "+"
	fmt.Fprintln(out, border)
	for _, kv := range [][2]string{
		{"API:", "protocol layer"},
		{"Test:", t.desc},
		{"Data layout:", "(automatic)"},
		{"Send memory:", "host"},
		{"Recv memory:", "host"},
		{"Message size:", fmt.Sprint(size)},
	} {
		fmt.Fprintf(out, "| %-13s %-91s|\n", kv[0], kv[1])
	}
	fmt.Fprintln(out, border)
}
