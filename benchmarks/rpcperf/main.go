// Command rpcperf measures package rpc (and dist) against what a program
// would write with OpenSHMEM and ucp alone, in one job, and prints a table:
//
//	go run ./launcher/cmd/goshmem-run -np 4 ./benchmarks/rpcperf                      # over shared memory
//	UCX_TLS=tcp,self go run ./launcher/cmd/goshmem-run -np 4 ./benchmarks/rpcperf     # over loopback tcp
//	go run ./launcher/cmd/goshmem-run -np 2 ./benchmarks/rpcperf -t rtt -n 50000
//
// The tests (-t, comma-separated; all by default):
//
//   - rtt: round trips from PE 0 to PE -peer (1), which progresses its
//     worker meanwhile, while every other PE waits in shmem.BarrierAll
//     (-peer 0: to itself, through the self transport, which shows the
//     cost of the software alone). "am" is a raw ucp active-message ping-pong on the
//     job's worker (shmem.Worker, shmem.Endpoint): an 8-byte value goes in
//     a 16-byte header, the peer's handler sends its square back from the
//     handler, and PE 0 progresses until the answer came (ucpperf's
//     ucp_am_lat, over the job's endpoints). "rpc" is rpc.Func.Call of an
//     Inline function on an int64, then Future.Wait; "rpc-invoke" is
//     rpc.Func.Invoke, which is Call then Wait. The ways run -rounds times
//     in alternation, -n round trips each time. The table gives, in
//     microseconds per round trip, the median over the rounds of three
//     figures of a round, and the median of the rounds' ratios to am with
//     their range (lowest-highest): "us", the mean round trip; "p50-us",
//     the median round trip (each timed, time.Now costing alike in every
//     way), which the round trips that a loaded machine's other programs
//     delayed do not move; "cpu-us", the processor time of PE 0's process
//     per round trip (user and system, garbage collection included; it
//     counts the time PE 0 spins for its peer, but not the time other
//     programs took its core). compare.sh runs it pinned, over shared
//     memory and tcp.
//   - gups: every PE adds one to -updates words of the table (-table words
//     per PE, symmetric), each at a random PE and index, three ways:
//     "atomic" with shmem.AtomicAdd, "rpc" with one rpc.Func.Go per update
//     (an Inline handler adds), and "aggregated" with an rpc.Aggregator of
//     that function (the default size). Each way ends when its updates are
//     complete everywhere (shmem.BarrierAll, rpc.Barrier); the table gives
//     the job's millions of updates per second (all PEs), and the ratio to
//     "atomic". The table's sum is checked after each way.
//   - map: every PE inserts -inserts distinct keys, each at the PE its hash
//     names, two ways: "cas" into an open-addressing table over the
//     symmetric heap (shmem.AtomicCompareSwap claims a slot of the key's
//     PE, linear probing, then shmem.AtomicSet writes the value), and
//     "aggregated" with dist.Map.Insert (aggregated rpc calls) and
//     rpc.Barrier. The table gives the job's millions of inserts per
//     second and the ratio to "cas"; both maps' key counts are checked.
//
// PE 0 prints the table; a check that fails makes the job exit 1. Other
// programs share the machine's processors, so numbers from a loaded
// machine are indicative only.
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/goshmem/goshmem/dist"
	"github.com/goshmem/goshmem/rpc"
	"github.com/goshmem/goshmem/shmem"
	"github.com/goshmem/goshmem/ucp"
	"github.com/goshmem/goshmem/ucs"
)

type options struct {
	tests   string
	n       int // round trips per round
	rounds  int
	table   int // GUPS words per PE
	updates int // GUPS updates per PE
	inserts int // map inserts per PE
	peer    int // rtt: the PE PE 0 calls
}

func main() { os.Exit(mainCode()) }

// mainCode parses the flags, runs the tests in a job, and returns the exit
// code.
func mainCode() int {
	var o options
	flag.StringVar(&o.tests, "t", "rtt,gups,map", "tests to run, comma-separated: rtt, gups, map")
	flag.IntVar(&o.n, "n", 20000, "rtt: round trips per round")
	flag.IntVar(&o.rounds, "rounds", 5, "rtt: rounds, am and rpc alternating")
	flag.IntVar(&o.peer, "peer", 1, "rtt: the PE that PE 0 calls (0: itself, which shows the software's cost alone)")
	flag.IntVar(&o.table, "table", 1<<16, "gups: words of the table per PE")
	flag.IntVar(&o.updates, "updates", 1<<15, "gups: updates per PE and way")
	flag.IntVar(&o.inserts, "inserts", 1<<14, "map: inserts per PE and way")
	cpuprofile := flag.String("cpuprofile", "", "write PE 0's CPU profile to this file")
	flag.Parse()
	if o.n <= 0 || o.rounds <= 0 || o.table <= 0 || o.updates <= 0 || o.inserts <= 0 {
		fmt.Fprintln(os.Stderr, "rpcperf: -n, -rounds, -table, -updates and -inserts must be positive")
		return 2
	}
	if err := shmem.Init(); err != nil {
		fmt.Fprintln(os.Stderr, "rpcperf:", err)
		return 1
	}
	defer shmem.Finalize()
	if *cpuprofile != "" && shmem.MyPE() == 0 {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "rpcperf:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "rpcperf:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	return run(o)
}

// run runs the tests of o and returns the exit code. A test that fails
// ends the process at once: the other PEs may wait in a collective it
// would never join (goshmem-run then ends them). So the tests release what
// they allocate on their way out, not in defers.
func run(o options) int {
	me, n := shmem.MyPE(), shmem.NPEs()
	if err := rpc.Start(rpc.Options{}); err != nil {
		fmt.Fprintln(os.Stderr, "rpcperf:", err)
		return 1
	}
	t := &table{me: me}
	tls := os.Getenv("UCX_TLS")
	if tls == "" {
		tls = "default (sm)"
	}
	t.printf("# rpcperf: %d PEs, UCX_TLS %s\n", n, tls)
	t.printf("%-6s %-11s %12s  %-12s %s\n", "test", "way", "value", "unit", "ratio")
	for _, name := range strings.Split(o.tests, ",") {
		var err error
		switch name {
		case "rtt":
			if o.peer < 0 || o.peer >= n {
				err = fmt.Errorf("-peer %d: not a PE of the job (0..%d)", o.peer, n-1)
				break
			}
			err = roundTrips(t, o)
		case "gups":
			err = gups(t, o)
		case "map":
			err = inserts(t, o)
		default:
			err = fmt.Errorf("unknown test %q (rtt, gups, map)", name)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "rpcperf: PE %d: %s: %v\n", me, name, err)
			os.Exit(1)
		}
	}
	rpc.Stop()
	return 0
}

// table prints PE 0's lines.
type table struct{ me int }

func (t *table) printf(format string, args ...any) {
	if t.me == 0 {
		fmt.Printf(format, args...)
	}
}

// row prints a result, with its ratio to way base when base is not
// empty.
func (t *table) row(test, way string, v float64, unit, base string, ratio float64) {
	r := ""
	if base != "" {
		r = fmt.Sprintf("%.2fx %s", ratio, base)
	}
	t.printf("%-6s %-11s %12.3f  %-12s %s\n", test, way, v, unit, r)
}

// --- rtt

// amID is the active-message id of the raw ping-pong (rpc has
// shmem.FirstUserAMID).
const amID = shmem.FirstUserAMID + 1

// pp is the state of the raw ping-pong on this PE.
var pp struct {
	w     *ucp.Worker
	eps   []*ucp.Endpoint
	pongs int
	last  int64
	stop  bool     // PE 0 is done: the peer stops serving
	hdr   [16]byte // the message being sent (a local would escape)
}

var eager = new(ucp.RequestParam).SetAMSendFlags(ucp.AMSendFlagEager)

// ppRecv handles the ping-pong's messages: a ping (kind 1) is answered
// from the handler with the square of its value, as an Inline rpc handler
// answers; a pong (kind 2) is counted; a stop (kind 3) ends the peer's
// serving.
func ppRecv(_ any, header, _ []byte, _ *ucp.AMRecvParam) ucs.Status {
	if len(header) != 16 {
		return ucs.OK
	}
	v := int64(binary.LittleEndian.Uint64(header[8:]))
	switch header[0] {
	case 2:
		pp.pongs++
		pp.last = v
		return ucs.OK
	case 3:
		pp.stop = true
		return ucs.OK
	}
	src := int(binary.LittleEndian.Uint32(header[4:]))
	if err := ppSend(src, 2, v*v); err != nil {
		fmt.Fprintln(os.Stderr, "rpcperf: pong:", err)
	}
	return ucs.OK
}

// ppSend sends a message of kind with value v to pe; the header is copied
// before AMSendNBX returns.
func ppSend(pe int, kind byte, v int64) error {
	h := &pp.hdr
	h[0] = kind
	binary.LittleEndian.PutUint32(h[4:], uint32(shmem.MyPE()))
	binary.LittleEndian.PutUint64(h[8:], uint64(v))
	r, err := pp.eps[pe].AMSendNBX(amID, h[:], nil, eager)
	if r != nil {
		r.Free()
	}
	return err
}

// amRTT makes len(lat) raw round trips to PE peer and sets lat[i] to the
// time of the i-th.
func amRTT(peer int, lat []time.Duration) error {
	prev := time.Now()
	for i := range lat {
		want := pp.pongs + 1
		if err := ppSend(peer, 1, int64(i)); err != nil {
			return err
		}
		for pp.pongs < want {
			if pp.w.Progress() == 0 {
				pp.w.Idle()
			}
		}
		if pp.last != int64(i)*int64(i) {
			return fmt.Errorf("am pong %d, want %d", pp.last, i*i)
		}
		now := time.Now()
		lat[i], prev = now.Sub(prev), now
	}
	return nil
}

var square = rpc.Register("rpcperf.square", rpc.Inline, func(_ int, x int64) (int64, error) { return x * x, nil })

// rpcRTT makes len(lat) calls to PE peer, with call, and sets lat[i] to
// the time of the i-th.
func rpcRTT(call func(pe int, x int64) (int64, error), peer int, lat []time.Duration) error {
	prev := time.Now()
	for i := range lat {
		v, err := call(peer, int64(i))
		if err != nil {
			return err
		}
		if v != int64(i)*int64(i) {
			return fmt.Errorf("rpc result %d, want %d", v, i*i)
		}
		now := time.Now()
		lat[i], prev = now.Sub(prev), now
	}
	return nil
}

// The ways of a round trip: raw active messages, then rpc's two.
var rttWays = []struct {
	name string
	rtt  func(peer int, lat []time.Duration) error
}{
	{"am", amRTT},
	{"rpc", func(peer int, lat []time.Duration) error {
		return rpcRTT(func(pe int, x int64) (int64, error) { return square.Call(pe, x).Wait() }, peer, lat)
	}},
	{"rpc-invoke", func(peer int, lat []time.Duration) error { return rpcRTT(square.Invoke, peer, lat) }},
}

func roundTrips(t *table, o options) error {
	me, n := shmem.MyPE(), shmem.NPEs()
	pp.w = shmem.Worker()
	pp.eps = make([]*ucp.Endpoint, n)
	for pe := range n {
		ep, err := shmem.Endpoint(pe)
		if err != nil {
			return err
		}
		pp.eps[pe] = ep
	}
	if err := pp.w.SetAMRecvHandler(new(ucp.AMHandlerParam).SetID(amID).SetCB(ppRecv)); err != nil {
		return err
	}
	defer pp.w.SetAMRecvHandler(new(ucp.AMHandlerParam).SetID(amID))
	shmem.BarrierAll()
	// Per way, per round, in microseconds: the mean and the median round
	// trip, and the processor time per round trip.
	us := make([][]float64, len(rttWays))
	p50 := make([][]float64, len(rttWays))
	cpu := make([][]float64, len(rttWays))
	var err error
	if me == 0 {
		lat := make([]time.Duration, o.n)
		// Warm every path up (endpoints, buffers, pools) before measuring.
		for _, w := range rttWays {
			if err = w.rtt(o.peer, lat[:o.n/10+1]); err != nil {
				break
			}
		}
		for r := 0; r < o.rounds && err == nil; r++ {
			for i, w := range rttWays {
				c0 := cpuTime()
				start := time.Now()
				if err = w.rtt(o.peer, lat); err != nil {
					break
				}
				d := time.Since(start)
				c := cpuTime() - c0
				us[i] = append(us[i], float64(d.Nanoseconds())/1e3/float64(o.n))
				cpu[i] = append(cpu[i], float64(c.Nanoseconds())/1e3/float64(o.n))
				slices.Sort(lat)
				p50[i] = append(p50[i], float64(lat[len(lat)/2].Nanoseconds())/1e3)
			}
		}
		if o.peer != 0 {
			if serr := ppSend(o.peer, 3, 0); err == nil {
				err = serr
			}
		}
	} else if me == o.peer {
		// Serve as ucx_perftest's server does: progress, and nothing else
		// (shmem.BarrierAll would progress the worker only now and then
		// while it polls its counters).
		for !pp.stop {
			if pp.w.Progress() == 0 {
				pp.w.Idle()
			}
		}
	}
	shmem.BarrierAll()
	if err != nil || me != 0 { // PE 0 measured
		return err
	}
	for _, m := range []struct {
		unit string
		v    [][]float64
	}{{"us", us}, {"p50-us", p50}, {"cpu-us", cpu}} {
		t.row("rtt", rttWays[0].name, median(m.v[0]), m.unit, "", 0)
		for i, w := range rttWays[1:] {
			// The ratio is the median of each round's: a round's ways
			// ran close in time, under the same load.
			ratios := make([]float64, len(m.v[0]))
			for r := range ratios {
				ratios[r] = m.v[i+1][r] / m.v[0][r]
			}
			t.rowRange("rtt", w.name, median(m.v[i+1]), m.unit, rttWays[0].name, ratios)
		}
	}
	return nil
}

// cpuTime returns the processor time this process spent so far (user and
// system, every thread).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rowRange prints a result with the median of ratios, its ratios to way
// base, and their range.
func (t *table) rowRange(test, way string, v float64, unit, base string, ratios []float64) {
	lo, hi := slices.Min(ratios), slices.Max(ratios)
	t.printf("%-6s %-11s %12.3f  %-12s %.2fx %s (%.2f-%.2f)\n", test, way, v, unit, median(ratios), base, lo, hi)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

// --- gups

// words is this PE's part of the GUPS table.
var words []int64

// update adds one to a word of this PE's part of the table.
var update = rpc.Register("rpcperf.update", rpc.Inline, func(_ int, i uint32) (struct{}, error) {
	words[i]++
	return struct{}{}, nil
})

// rng is splitmix64: cheap, and seeded per PE.
type rng uint64

func (r *rng) next() uint64 {
	*r += 0x9e3779b97f4a7c15
	z := uint64(*r)
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func gups(t *table, o options) error {
	me, n := shmem.MyPE(), shmem.NPEs()
	var err error
	if words, err = shmem.Calloc[int64](o.table); err != nil {
		return err
	}
	agg := rpc.NewAggregator(update, 0)
	// target draws an update's PE and index.
	target := func(r *rng) (int, uint32) {
		x := r.next()
		return int(x % uint64(n)), uint32((x >> 32) % uint64(o.table))
	}
	ways := []struct {
		name string
		run  func(r *rng) error
	}{
		{"atomic", func(r *rng) error {
			for range o.updates {
				pe, i := target(r)
				shmem.AtomicAdd(&words[i], 1, pe)
			}
			shmem.BarrierAll()
			return nil
		}},
		{"rpc", func(r *rng) error {
			for range o.updates {
				pe, i := target(r)
				if err := update.Go(pe, i); err != nil {
					return err
				}
			}
			return rpc.Barrier()
		}},
		{"aggregated", func(r *rng) error {
			for range o.updates {
				pe, i := target(r)
				if err := agg.Go(pe, i); err != nil {
					return err
				}
			}
			return rpc.Barrier()
		}},
	}
	var base float64
	for _, w := range ways {
		r := rng(me + 1)
		shmem.BarrierAll()
		start := time.Now()
		if err := w.run(&r); err != nil {
			return err
		}
		d := time.Since(start)
		if err := checkSum(words, int64(o.updates*n)); err != nil {
			return fmt.Errorf("%s: %w", w.name, err)
		}
		clear(words)
		rate := float64(o.updates*n) / d.Seconds() / 1e6
		if base == 0 {
			base = rate
			t.row("gups", w.name, rate, "Mupdates/s", "", 0)
		} else {
			t.row("gups", w.name, rate, "Mupdates/s", "atomic", rate/base)
		}
	}
	if err := agg.Close(); err != nil {
		return err
	}
	shmem.Free(words) // a barrier
	return nil
}

// checkSum checks that the sum of every PE's count is want. A collective.
func checkSum(local []int64, want int64) error {
	var s int64
	for _, v := range local {
		s += v
	}
	return checkTotal(s, want)
}

// checkTotal checks that the sum of every PE's v is want. A collective.
func checkTotal(v, want int64) error {
	buf, err := shmem.Calloc[int64](2)
	if err != nil {
		return err
	}
	buf[0] = v
	if err := shmem.SumReduce(shmem.TeamWorld, buf[1:], buf[:1]); err != nil {
		return err
	}
	if got := buf[1]; got != want {
		return fmt.Errorf("total %d, want %d", got, want)
	}
	shmem.Free(buf)
	return nil
}

// --- map

// casMap is an open-addressing hash table over the symmetric heap: key 0
// marks a free slot.
type casMap struct {
	keys, vals []uint64
	mask       uint64
	n          uint64
}

func mix(k uint64) uint64 {
	r := rng(k)
	return r.next()
}

func (m *casMap) insert(k, v uint64) {
	h := mix(k)
	pe := int(h % m.n)
	for s := (h >> 32) & m.mask; ; s = (s + 1) & m.mask {
		if old := shmem.AtomicCompareSwap(&m.keys[s], 0, k, pe); old == 0 || old == k {
			shmem.AtomicSet(&m.vals[s], v, pe)
			return
		}
	}
}

func inserts(t *table, o options) error {
	me, n := shmem.MyPE(), shmem.NPEs()
	// A PE holds about -inserts keys: a quarter of its slots.
	slots := 1
	for slots < 4*o.inserts {
		slots <<= 1
	}
	keys, err := shmem.Calloc[uint64](slots)
	if err != nil {
		return err
	}
	vals, err := shmem.Calloc[uint64](slots)
	if err != nil {
		return err
	}
	cm := &casMap{keys: keys, vals: vals, mask: uint64(slots - 1), n: uint64(n)}
	dm, err := dist.NewMap[uint64, uint64](nil)
	if err != nil {
		return err
	}
	first := uint64(me*o.inserts + 1) // this PE's keys; 0 is not a key
	total := int64(o.inserts * n)

	shmem.BarrierAll()
	start := time.Now()
	for i := range uint64(o.inserts) {
		cm.insert(first+i, i)
	}
	shmem.BarrierAll()
	cas := float64(total) / time.Since(start).Seconds() / 1e6
	used := 0
	for _, k := range keys {
		if k != 0 {
			used++
		}
	}
	if err := checkTotal(int64(used), total); err != nil {
		return fmt.Errorf("cas: %w", err)
	}
	t.row("map", "cas", cas, "Minserts/s", "", 0)

	shmem.BarrierAll()
	start = time.Now()
	for i := range uint64(o.inserts) {
		if err := dm.Insert(first+i, i); err != nil {
			return err
		}
	}
	if err := rpc.Barrier(); err != nil {
		return err
	}
	agg := float64(total) / time.Since(start).Seconds() / 1e6
	if err := checkTotal(int64(dm.Len()), total); err != nil {
		return fmt.Errorf("aggregated: %w", err)
	}
	t.row("map", "aggregated", agg, "Minserts/s", "cas", agg/cas)
	if err := dm.Destroy(); err != nil {
		return err
	}
	shmem.Free(vals)
	shmem.Free(keys)
	return nil
}
