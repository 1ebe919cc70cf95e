package main

import (
	"fmt"
	"os"
	"runtime"
	"time"
	"unsafe"

	"github.com/goshmem/goshmem/shmem"
)

// command is a benchmark sub-command.
type command struct {
	name  string
	title string // the OSU program's title
	// defaults are the options of the OSU program it mirrors.
	defaults Options
	// pes checks the job size; nil accepts any.
	pes func(npes int) error
	// need is the symmetric memory, in bytes, the run takes for its
	// buffers (the size of the global region with -mem global).
	need func(o *Options, npes int) int
	// run measures; its report matters on PE 0 only.
	run func(b *bench) (*Report, error)
	// unavailable, when set, is why the command cannot run in this build.
	unavailable string
}

// commands are the benchmark sub-commands, by name.
var commands = map[string]*command{}

// register adds a sub-command.
func register(c *command) {
	if _, dup := commands[c.name]; dup {
		panic("osu: sub-command registered twice: " + c.name)
	}
	commands[c.name] = c
}

// commandOrder is the order of the sub-commands in the usage text.
var commandOrder = []string{"put", "get", "put_nb", "get_nb", "put_mr", "put_bw", "get_bw",
	"atomics", "barrier", "broadcast", "collect", "fcollect", "reduce", "alltoall"}

// atLeastTwo is the PE check of every test: the point-to-point ones pair
// PE i < n/2 with PE i+n/2 (the OSU programs of put, get and bandwidth take
// exactly 2 PEs; these take any number from 2), the others are collective.
func atLeastTwo(npes int) error {
	if npes < 2 {
		return fmt.Errorf("this test requires at least two processes, not %d", npes)
	}
	return nil
}

// statWidth is the number of figures each PE contributes to a gather.
const statWidth = 4

// bench is the state of one run on one PE.
type bench struct {
	c        *command
	o        *Options
	me, npes int
	mem      *memory
	stats    []float64 // symmetric: npes*statWidth figures gathered on PE 0
}

// memory hands out the symmetric buffers of a run: with heap, each one
// from the symmetric heap allocator (shmem.Align, as OSU's shmem_malloc);
// with global, carved from one region allocated right after Init, which
// stands for the static arrays a C program declares (OpenSHMEM makes a C
// program's data segment symmetric; a Go program has none, so this region
// plays its part: allocated once, before any other, and never freed).
type memory struct {
	global bool
	arena  []byte
	off    int
}

// bufAlign is the alignment of every buffer (OSU's MESSAGE_ALIGNMENT).
const bufAlign = 64

func newMemory(global bool, size int) (*memory, error) {
	m := &memory{global: global}
	if global {
		a, err := shmem.Align[byte](4096, size+bufAlign)
		if err != nil {
			return nil, fmt.Errorf("allocating the %d-byte global region: %w", size, err)
		}
		m.arena = a
	}
	return m, nil
}

// alloc returns a symmetric array of n elements of T, every PE making the
// same calls.
func alloc[T any](m *memory, n int) ([]T, error) {
	var zero T
	bytes := n * int(unsafe.Sizeof(zero))
	if !m.global {
		s, err := shmem.Align[T](bufAlign, n)
		if err != nil {
			return nil, fmt.Errorf("allocating %d bytes on the symmetric heap (SHMEM_SYMMETRIC_SIZE): %w", bytes, err)
		}
		return s, nil
	}
	off := (m.off + bufAlign - 1) / bufAlign * bufAlign
	if off+bytes > len(m.arena) {
		return nil, fmt.Errorf("the global region has %d bytes, the run needs %d more", len(m.arena)-off, bytes)
	}
	m.off = off + bytes
	if n == 0 {
		return nil, nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&m.arena[off])), n), nil
}

// defaultSettle is the default of -settle.
const defaultSettle = 20 * time.Millisecond

// settle runs barriers for at least d, by PE 0's clock (it tells the others
// when to stop, so that every PE makes the same calls), before the first
// timing. For the first milliseconds after Init, the Go runtime's sysmon
// thread wakes every 20 us: it backs off, to 10 ms, only after some 50
// wake-ups with no blocking system call to retake, and Init ends with many.
// On a node with as many PEs as cores each wake-up takes a core from a
// spinning PE for tens of microseconds (about 50 on the 2-core VMs here),
// which stalls every PE waiting for it; a loop of 1000 barriers that
// begins at once measured 2 to 8 us instead of 0.3.
func (b *bench) settle(d time.Duration) {
	if d <= 0 {
		return
	}
	start := time.Now()
	for {
		for range 1000 {
			shmem.BarrierAll()
		}
		if b.me == 0 {
			b.stats[0] = 0
			if time.Since(start) >= d {
				b.stats[0] = 1
			}
		}
		if err := shmem.Broadcast(shmem.TeamWorld, b.stats[1:2], b.stats[:1], 0); err != nil {
			panic(err) // TeamWorld and the statistics array are always valid
		}
		if b.stats[1] != 0 {
			break
		}
	}
	clear(b.stats)
	shmem.BarrierAll()
}

// gather collects statWidth figures from every PE on PE 0, which gets one
// row per PE; the other PEs get nil. Every PE must call it.
func (b *bench) gather(v ...float64) [][]float64 {
	var mine [statWidth]float64
	copy(mine[:], v)
	shmem.Put(b.stats[b.me*statWidth:(b.me+1)*statWidth], mine[:], 0)
	shmem.BarrierAll()
	var rows [][]float64
	if b.me == 0 {
		for pe := 0; pe < b.npes; pe++ {
			rows = append(rows, append([]float64(nil), b.stats[pe*statWidth:(pe+1)*statWidth]...))
		}
	}
	shmem.BarrierAll()
	return rows
}

// report starts the report of command c.
func (b *bench) report(c *command, metric string, cols ...string) *Report {
	host, _ := os.Hostname()
	return &Report{
		Test: c.name, Title: c.title, Impl: shmem.InfoGetName(), Metric: metric,
		Columns: cols, NPEs: b.npes, Options: b.o,
		Transport: &Transport{UCXTLS: os.Getenv("UCX_TLS"), SharedPEs: shmem.TeamShared.NPEs(),
			Host: host, GoVersion: runtime.Version(), GOMAXPROCS: runtime.GOMAXPROCS(0)},
	}
}

// perOp returns microseconds per operation.
func perOp(d time.Duration, n int) float64 {
	return float64(d.Nanoseconds()) / 1e3 / float64(n)
}

// fill sets every byte of s to v.
func fill(s []byte, v byte) {
	for i := range s {
		s[i] = v
	}
}

// collNames are the collective tests (coll.go), and collTitles their OSU
// titles.
var (
	collNames  = []string{"broadcast", "collect", "fcollect", "reduce", "alltoall"}
	collTitles = map[string]string{
		"broadcast": "OSU OpenSHMEM Broadcast Latency Test",
		"collect":   "OSU OpenSHMEM Collect Latency Test",
		"fcollect":  "OSU OpenSHMEM FCollect Latency Test",
		"reduce":    "OSU OpenSHMEM Reduce Latency Test",
		"alltoall":  "OSU OpenSHMEM Alltoall Latency Test",
	}
)
