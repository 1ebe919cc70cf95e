// Command goshmem-info describes the goshmem library, its transports and
// its configuration, as ucx_info does for UCX.
//
// Usage:
//
//	goshmem-info [-v] [-d] [-c] [-b]
//
// The flags are:
//
//	-v  the version: the ucp library version, the Go version that built
//	    the binary, the module version and its VCS revision
//	-d  the memory domains and transports: for every registered component,
//	    its memory domains (capability flags, limits, key size) and their
//	    transport resources (device name and type, iface capability flags,
//	    the limits of every operation, the atomic operations, latency,
//	    bandwidth, overhead, priority, address lengths); then the RDMA
//	    devices of the host with their ports, network devices and
//	    character devices, or "RDMA devices: none"
//	-c  every configuration variable (UCX_*): those of the ucp context,
//	    of every memory domain and of every transport's ifaces, each with
//	    its documentation, its default and its current value (from the
//	    environment)
//	-b  the build: CGO_ENABLED, GOOS/GOARCH, whether the race detector is
//	    on, build tags and the other settings the Go command recorded
//
// Several flags may be given; their sections are printed in the order
// above. With no flag, or a bad one, goshmem-info prints this usage and
// exits with status 2.
//
// Output lines that describe things start with '#', as ucx_info's do;
// configuration lines are VAR=value, ready for a shell.
package main

import (
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
	version := fs.Bool("v", false, "print the version")
	devices := fs.Bool("d", false, "print the memory domains, transports and RDMA devices")
	config := fs.Bool("c", false, "print every configuration variable with its default and current value")
	build := fs.Bool("b", false, "print the build flags")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: goshmem-info [-v] [-d] [-c] [-b]\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2 // the flag package printed the error and the usage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "goshmem-info: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return 2
	}
	if !*version && !*devices && !*config && !*build {
		fs.Usage()
		return 2
	}
	p := &printer{w: stdout}
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
}

// f writes one formatted line.
func (p *printer) f(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format+"\n", args...)
	}
}
