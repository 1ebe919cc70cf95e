// Command goshmem-info describes the goshmem library, its transports and
// its configuration, as oshmem_info and ucx_info do.
//
// Usage:
//
//	goshmem-info [-s] [-v] [-d] [-c] [-b]
//
// With no flag, goshmem-info prints the summary (-s). The flags are:
//
//	-s  the summary, as oshmem_info prints it: the package and its
//	    version, the OpenSHMEM version and name, the ucp library version,
//	    the Go version and platform, the thread levels, the transports and
//	    their devices, the symmetric heap size, and the launcher
//	-v  the version: the ucp library version, the Go version that built
//	    the binary, the module version and its VCS revision
//	-d  the memory domains and transports: for every registered component,
//	    its memory domains (capability flags, limits, key size) and their
//	    transport resources (device name and type, iface capability flags,
//	    the limits of every operation, the atomic operations, latency,
//	    bandwidth, overhead, priority, address lengths); then the RDMA
//	    devices of the host with their ports, network devices and
//	    character devices, or "RDMA devices: none". Flags print by name.
//	-c  every configuration variable: the OpenSHMEM ones (SHMEM_*) and
//	    goshmem's own (GOSHMEM_*), each with its documentation and its
//	    value in the environment; then the UCX_* ones, those of the ucp
//	    context, of every memory domain and of every transport's ifaces,
//	    each with its documentation, its default and its current value
//	-b  the build: CGO_ENABLED, GOOS/GOARCH, whether the race detector is
//	    on, build tags and the other settings the Go command recorded
//	-help  this usage, on standard output
//
// Several flags may be given; their sections are printed in the order
// above, and a line that an earlier section printed (the Go version, the
// VCS revision, the ucp library version) is not printed again. A bad flag or an argument prints the usage on standard error and
// exits with status 2.
//
// Output lines that describe things start with '#', as ucx_info's do;
// configuration lines are VAR=value, ready for a shell.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is goshmem-info with the given arguments; it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("goshmem-info", flag.ContinueOnError)
	fs.SetOutput(stderr)
	summary := fs.Bool("s", false, "print the summary (the default)")
	version := fs.Bool("v", false, "print the version")
	devices := fs.Bool("d", false, "print the memory domains, transports and RDMA devices")
	config := fs.Bool("c", false, "print every configuration variable (SHMEM_*, GOSHMEM_*, UCX_*) with its current value")
	build := fs.Bool("b", false, "print the build flags")
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "usage: goshmem-info [-s] [-v] [-d] [-c] [-b]\n\nWith no flag, the summary (-s).\n\nflags:\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(stderr)
	}
	fs.Usage = func() {} // printed below: on stdout for -help
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return 0
		}
		usage(stderr) // after the flag package's error
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "goshmem-info: unexpected argument %q\n", fs.Arg(0))
		usage(stderr)
		return 2
	}
	if !*version && !*devices && !*config && !*build {
		*summary = true
	}
	p := &printer{w: stdout}
	if *summary {
		printSummary(p)
	}
	if *version {
		printVersion(p)
	}
	if *devices {
		printDevices(p, rdmaDevices())
	}
	if *config {
		printConfig(p)
	}
	if *build {
		printBuild(p)
	}
	if p.err != nil {
		fmt.Fprintf(stderr, "goshmem-info: %v\n", p.err)
		return 1
	}
	return 0
}

// printer writes formatted lines and remembers the first write error.
type printer struct {
	w   io.Writer
	err error
	// facts are the labels that fact printed: a fact that several
	// sections give (the Go version, in -s, -v and -b) is printed once.
	facts map[string]bool
}

// f writes one formatted line.
func (p *printer) f(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format+"\n", args...)
	}
}

// fact writes "# label: value" (the value formatted), unless a section
// printed before wrote the fact of that label.
func (p *printer) fact(label, format string, args ...any) {
	if p.facts[label] {
		return
	}
	if p.facts == nil {
		p.facts = map[string]bool{}
	}
	p.facts[label] = true
	p.f("# "+label+": "+format, args...)
}
