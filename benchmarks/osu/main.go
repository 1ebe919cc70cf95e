// Command osu is the OSU micro-benchmarks for OpenSHMEM (osu_oshm_*)
// written with the shmem package: one program with a sub-command per test,
// printing the tables of the OSU programs, so that goshmem and a C
// OpenSHMEM can be measured side by side and compared.
//
// Usage:
//
//	goshmem-run -np N ./benchmarks/osu TEST [flags] [heap|global]
//	osu compare [-a NAME] [-b NAME] [-svg FILE] [-metric M] A B
//
// for example
//
//	go run ./launcher/cmd/goshmem-run -np 2 ./benchmarks/osu put -max 65536
//	UCX_TLS=tcp,self go run ./launcher/cmd/goshmem-run -np 2 ./benchmarks/osu atomics -json
//
// The tests, with the OSU program each one mirrors:
//
//	put        osu_oshm_put       PE 0 to PE 1: putmem then quiet, per iteration; "# Size  Latency (us)"
//	get        osu_oshm_get       PE 0 from PE 1: getmem per iteration
//	put_nb     osu_oshm_put_nbi   fence, then putmem_nbi and quiet per iteration
//	get_nb     osu_oshm_get_nbi   getmem_nbi and quiet per iteration
//	put_mr     osu_oshm_put_mr    PE i < n/2 puts to PE i+n/2, each put to its own offset,
//	                              one quiet per size; summed "Messages/s"
//	put_bw     osu_oshm_put_bw    windows of -window putmem_nbi, a quiet per window; "Bandwidth (MB/s)"
//	get_bw     osu_oshm_get_bw    the same with getmem_nbi
//	atomics    osu_oshm_atomics   fadd, finc, add, inc, cswap, swap, fetch, set on int64;
//	                              "# Operation  Million ops/s  Latency (us)"
//	barrier    osu_oshm_barrier   BarrierAll; "# Avg Latency(us)" over the PEs
//	broadcast, collect, fcollect, reduce, alltoall
//	           osu_oshm_broadcast, ..._collect, ..._fcollect, ..._reduce and an
//	           alltoall in the same style: the team collectives of TeamWorld on
//	           32-bit elements (float32 sums for reduce), a barrier after each
//	           call; "# Size  Avg Latency(us)" over the PEs
//
// The flags (each test takes the defaults of its OSU program):
//
//	-min, -max BYTES      message sizes: min, 2*min, ... up to max (1 to 1 MiB)
//	-iters, -warmup N     timed and untimed iterations per size; given alone, for
//	                      every size
//	-iters-large, -warmup-large N, -large BYTES
//	                      iterations for the sizes above -large (8 KiB)
//	-window N             operations per quiet of put_bw and get_bw (64)
//	-mem heap|global, -heap, -global, or a last argument heap or global
//	                      where the buffers live (see below; default heap)
//	-f, -full             add the min, max and iterations columns (barrier, collectives)
//	-json                 print one JSON document (test, options, PE count,
//	                      transport: UCX_TLS and the TeamShared size, rows)
//	                      instead of the table
//	-precision N          decimals of the table (2, as OSU)
//
// Memory: the OSU programs take "heap" (buffers from shmem_malloc) or
// "global" (static arrays, which OpenSHMEM makes symmetric). Here heap
// allocates each buffer with shmem.Align; global carves every buffer out
// of one region of the symmetric heap allocated right after Init, before
// anything else, and kept to the end: Go has no symmetric data segment, so
// that region stands for it. Both are the same memory to the transports.
//
// compare reads two results, each a JSON document of -json or a text table
// (an osu_oshm_* program's output, this program's, or the "name value"
// lines of shared/bench/oshm_ref.c and benchmarks/oshmref), and prints
// them side by side with the ratio A/B, row by row (by size or operation).
// With -svg it also draws the main figure (latency, bandwidth or rate)
// against the message size, on a log2 axis, into an SVG file. It refuses
// (status 1, naming both) two results of different tests, or of different
// metrics; the "name value" lines compare with any test of operations.
//
// A usage error exits with status 2, a failed run with 1.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/goshmem/goshmem/shmem"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// usage prints the list of sub-commands.
func usage(w io.Writer) {
	fmt.Fprintf(w, "usage: goshmem-run -np N osu TEST [flags] [heap|global]\n"+
		"       osu compare [-a NAME] [-b NAME] [-svg FILE] [-metric latency|bandwidth|rate] A B\n\n"+
		"tests:\n")
	for _, name := range commandOrder {
		c := commands[name]
		note := ""
		if c.unavailable != "" {
			note = " (not available in this build)"
		}
		fmt.Fprintf(w, "  %-10s %s%s\n", name, c.title, note)
	}
	fmt.Fprintf(w, "\n\"osu TEST -h\" lists the flags.\n")
}

// run runs the program with args and returns its exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return 0
	case "compare":
		return runCompare(args[1:], stdout, stderr)
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "osu: unknown test %q\n\n", name)
		usage(stderr)
		return 2
	}
	if c.unavailable != "" {
		fmt.Fprintf(stderr, "osu: %s is not available in this build: %s\n", name, c.unavailable)
		return 1
	}
	o, err := parseOptions(name, args[1:], c.defaults, stdout, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "osu %s: %v\n", name, strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
		return 2
	}
	return runTest(c, o, stdout, stderr)
}

// runTest runs the test c as this PE of the job.
func runTest(c *command, o *Options, stdout, stderr io.Writer) int {
	if err := shmem.Init(); err != nil {
		fmt.Fprintf(stderr, "osu %s: %v\n", c.name, err)
		return 1
	}
	me, npes := shmem.MyPE(), shmem.NPEs()
	if err := c.checkPEs(npes); err != nil {
		if me == 0 {
			fmt.Fprintf(stderr, "osu %v\n", err)
		}
		shmem.Finalize()
		return 1
	}
	fail := func(err error) int {
		// Every PE reports: a failure need not be the same everywhere,
		// and the launcher ends the job on the first PE that exits.
		fmt.Fprintf(stderr, "osu %s: PE %d: %v\n", c.name, me, err)
		return 1
	}
	b := &bench{c: c, o: o, me: me, npes: npes}
	stats, err := shmem.Calloc[float64](npes * statWidth)
	if err != nil {
		return fail(fmt.Errorf("allocating the statistics array: %w", err))
	}
	b.stats = stats
	if b.mem, err = newMemory(o.Memory == "global", c.need(o, npes)); err != nil {
		return fail(err)
	}
	b.settle(o.Settle)
	rep, err := c.run(b)
	if err != nil {
		return fail(err)
	}
	if me == 0 {
		if o.JSON {
			err = writeJSON(stdout, rep)
		} else {
			err = writeText(stdout, rep, o.Precision)
		}
		if err != nil {
			return fail(err)
		}
	}
	shmem.Finalize()
	return 0
}
