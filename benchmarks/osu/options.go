package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// maxSizeLimit is the largest message size -max accepts (1 GiB); the
// symmetric heap (SHMEM_SYMMETRIC_SIZE) limits it further at run time.
const maxSizeLimit = 1 << 30

// errUsage marks an error in the command line (exit status 2).
var errUsage = errors.New("usage")

// Options are the settings of one benchmark run, from the command line.
// Zero fields take the defaults of the sub-command (those of the OSU
// program it mirrors).
type Options struct {
	// Min and Max bound the message sizes, in bytes: Min, 2*Min, ... up
	// to Max.
	Min int `json:"min_size"`
	Max int `json:"max_size"`
	// Iters and Warmup are the timed and untimed iterations per size for
	// sizes up to LargeSize; ItersLarge and WarmupLarge for larger ones.
	Iters       int `json:"iterations"`
	Warmup      int `json:"warmup"`
	ItersLarge  int `json:"iterations_large"`
	WarmupLarge int `json:"warmup_large"`
	LargeSize   int `json:"large_size"`
	// Window is the number of non-blocking operations between two
	// Quiets in the bandwidth tests.
	Window int `json:"window,omitempty"`
	// Memory is "heap" (buffers from shmem.Malloc, like shmem_malloc) or
	// "global" (buffers carved from one static symmetric region allocated
	// right after Init, which stands for C's global arrays).
	Memory string `json:"memory"`
	// Full adds the minimum, maximum and iterations columns to the
	// collective and barrier tables (OSU's -f).
	Full bool `json:"full,omitempty"`
	// JSON prints one JSON document instead of the table.
	JSON bool `json:"-"`
	// Precision is the number of decimals in the table (OSU prints 2).
	Precision int `json:"-"`
	// Settle is how long the PEs run barriers, untimed, before the first
	// timing (see settle).
	Settle time.Duration `json:"settle_ns,omitempty"`
}

// sizes returns the message sizes of the run: Min, doubling, up to Max.
func (o *Options) sizes() []int {
	var s []int
	for n := o.Min; n <= o.Max; n *= 2 {
		s = append(s, n)
	}
	return s
}

// loops returns the timed and warm-up iterations for a message of size bytes.
func (o *Options) loops(size int) (iters, warmup int) {
	if size > o.LargeSize {
		return o.ItersLarge, o.WarmupLarge
	}
	return o.Iters, o.Warmup
}

// parseOptions parses the flags of a benchmark sub-command into a copy of
// defaults. An explicit -iters (-warmup) without -iters-large
// (-warmup-large) applies to every size. The OSU programs' positional
// "heap" or "global" argument is accepted as well as -heap, -global and
// -mem.
//
// -help prints the flags on stdout and returns flag.ErrHelp; a bad flag
// prints them on stderr.
func parseOptions(name string, args []string, defaults Options, stdout, stderr io.Writer) (*Options, error) {
	o := defaults
	fs := flag.NewFlagSet("osu "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // printed below: on stdout for -help
	fs.IntVar(&o.Min, "min", o.Min, "smallest message size in bytes")
	fs.IntVar(&o.Max, "max", o.Max, "largest message size in bytes")
	fs.IntVar(&o.Iters, "iters", o.Iters, "timed iterations per size (all sizes unless -iters-large is given)")
	fs.IntVar(&o.Warmup, "warmup", o.Warmup, "untimed iterations before the timed ones (all sizes unless -warmup-large is given)")
	fs.IntVar(&o.ItersLarge, "iters-large", o.ItersLarge, "timed iterations for sizes above -large")
	fs.IntVar(&o.WarmupLarge, "warmup-large", o.WarmupLarge, "untimed iterations for sizes above -large")
	fs.IntVar(&o.LargeSize, "large", o.LargeSize, "sizes above this many bytes use -iters-large and -warmup-large")
	fs.IntVar(&o.Window, "window", o.Window, "non-blocking operations per quiet (bandwidth tests)")
	mem := fs.String("mem", o.Memory, `buffers: "heap" (shmem.Malloc) or "global" (static symmetric region)`)
	heap := fs.Bool("heap", false, "same as -mem heap")
	global := fs.Bool("global", false, "same as -mem global")
	fs.BoolVar(&o.Full, "f", o.Full, "full table: min, max latency and iterations (collectives, barrier)")
	fs.BoolVar(&o.Full, "full", o.Full, "same as -f")
	fs.BoolVar(&o.JSON, "json", false, "print one JSON document instead of the table")
	fs.IntVar(&o.Precision, "precision", o.Precision, "decimals in the table")
	fs.DurationVar(&o.Settle, "settle", o.Settle, "untimed barriers for this long before the first timing (0: none)")
	// Flags may come before and after the positional heap or global.
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			w := stderr
			if errors.Is(err, flag.ErrHelp) {
				w = stdout
			}
			fmt.Fprintf(w, "usage: osu %s [flags] [heap|global]\n\nflags:\n", name)
			fs.SetOutput(w)
			fs.PrintDefaults()
			return nil, fmt.Errorf("%w: %w", errUsage, err)
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["iters"] && !set["iters-large"] {
		o.ItersLarge = o.Iters
	}
	if set["warmup"] && !set["warmup-large"] {
		o.WarmupLarge = o.Warmup
	}
	var choices []string
	if set["mem"] {
		choices = append(choices, *mem)
	}
	if *heap {
		choices = append(choices, "heap")
	}
	if *global {
		choices = append(choices, "global")
	}
	for _, a := range positional {
		if a != "heap" && a != "global" {
			return nil, fmt.Errorf("%w: unexpected argument %q (want heap or global)", errUsage, a)
		}
		choices = append(choices, a)
	}
	if len(choices) > 1 {
		return nil, fmt.Errorf("%w: give the memory kind once (-mem, -heap, -global or heap/global), not %v", errUsage, choices)
	}
	if len(choices) == 1 {
		o.Memory = choices[0]
	}
	if err := o.check(); err != nil {
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	return &o, nil
}

// check validates the options.
func (o *Options) check() error {
	var errs []string
	if o.Min < 1 {
		errs = append(errs, fmt.Sprintf("-min %d: want at least 1 byte", o.Min))
	}
	if o.Max > maxSizeLimit {
		errs = append(errs, fmt.Sprintf("-max %d: want at most %d bytes", o.Max, maxSizeLimit))
	}
	if o.Max < o.Min {
		errs = append(errs, fmt.Sprintf("bad size range: -min %d is larger than -max %d", o.Min, o.Max))
	}
	if o.Iters < 1 || o.ItersLarge < 1 {
		errs = append(errs, fmt.Sprintf("-iters %d, -iters-large %d: want at least 1", o.Iters, o.ItersLarge))
	}
	if o.Warmup < 0 || o.WarmupLarge < 0 {
		errs = append(errs, fmt.Sprintf("-warmup %d, -warmup-large %d: want 0 or more", o.Warmup, o.WarmupLarge))
	}
	if o.LargeSize < 0 {
		errs = append(errs, fmt.Sprintf("-large %d: want 0 or more", o.LargeSize))
	}
	if o.Window < 1 {
		errs = append(errs, fmt.Sprintf("-window %d: want at least 1", o.Window))
	}
	if o.Memory != "heap" && o.Memory != "global" {
		errs = append(errs, fmt.Sprintf("-mem %q: want heap or global", o.Memory))
	}
	if o.Precision < 0 || o.Precision > 9 {
		errs = append(errs, fmt.Sprintf("-precision %d: want 0 to 9", o.Precision))
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}
