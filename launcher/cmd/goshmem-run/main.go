// Command goshmem-run starts a goshmem (OpenSHMEM for Go) job on this host.
//
// Usage:
//
//	goshmem-run -np N [flags] PROGRAM [ARGS...]
//
// It starts N processing elements (PEs), each running PROGRAM with ARGS.
// PROGRAM is an executable (a path, or a name looked up in PATH), or a Go
// main package: a directory such as ./examples/hello, or a package path,
// which goshmem-run builds once with the go command before starting the
// PEs. Flags must come before PROGRAM; everything after it goes to the
// program.
//
// The flags are:
//
//	-np N          number of PEs (required, at least 1)
//	-tag-output    prefix every output line with "[pe N] "
//	-bind ADDR     IP address of the bootstrap seed (default 127.0.0.1)
//	-kill-grace D  time PEs get between SIGTERM and SIGKILL when the job
//	               is ended (default 2s)
//
// Both -flag and --flag forms work.
//
// goshmem-run runs the bootstrap seed (a memberlist node) with a fresh
// random job key, and hands each PE its place in the job in the
// environment:
//
//	GOSHMEM_JOBID       the job id
//	GOSHMEM_RANK        the PE's rank, 0 to N-1
//	GOSHMEM_SIZE        N
//	GOSHMEM_SEED        host:port of the seed
//	GOSHMEM_KEY         the job key, base64 (memberlist encryption key)
//	GOSHMEM_LOCAL_RANK  the PE's rank on this host
//	GOSHMEM_LOCAL_SIZE  the number of PEs on this host
//
// Standard input goes to PE 0. The PEs' standard output and error are
// forwarded one whole line at a time.
//
// When a PE exits with a non-zero status or by a signal, or exits without
// finalizing while the others still run, or the seed reports it failed,
// goshmem-run names the PE, its host and how it ended, terminates the
// other PEs (SIGTERM, then SIGKILL) and exits with that PE's status
// (128+signal for a signal, 1 otherwise). SIGINT or SIGTERM to
// goshmem-run ends every PE, and it exits with 128+signal. If goshmem-run
// itself is killed, the kernel kills the PEs. A job that ends well exits
// with 0.
//
// Setting GOSHMEM_DEBUG=1 shows the memberlist logs of the seed and PEs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"

	"github.com/goshmem/goshmem/launcher"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("goshmem-run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	np := fs.Int("np", 0, "number of PEs (at least 1)")
	tag := fs.Bool("tag-output", false, `prefix every output line with "[pe N] "`)
	bind := fs.String("bind", "127.0.0.1", "IP address of the bootstrap seed")
	grace := fs.Duration("kill-grace", launcher.DefaultKillGrace, "time between SIGTERM and SIGKILL when ending the job")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: goshmem-run -np N [flags] PROGRAM [ARGS...]\n\n"+
			"PROGRAM is an executable or a Go main package (directory or package path).\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2 // flag printed the error and the usage
	}
	if *np < 1 || fs.NArg() < 1 {
		if *np < 1 {
			fmt.Fprintf(stderr, "goshmem-run: -np must be at least 1\n")
		} else {
			fmt.Fprintf(stderr, "goshmem-run: no PROGRAM\n")
		}
		fs.Usage()
		return 2
	}

	program, build, err := resolve(fs.Arg(0))
	if err != nil {
		fmt.Fprintf(stderr, "goshmem-run: %v\n", err)
		return 127
	}
	if build {
		bin, cleanup, err := launcher.BuildProgram(program)
		if err != nil {
			fmt.Fprintf(stderr, "goshmem-run: %v\n", err)
			return 1
		}
		defer cleanup()
		program = bin
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	got := make(chan syscall.Signal, 1)
	go func() {
		if s, ok := <-sigs; ok {
			got <- s.(syscall.Signal)
			cancel()
		}
	}()

	code, err := launcher.Run(ctx, launcher.Options{
		NP:        *np,
		Program:   program,
		Args:      fs.Args()[1:],
		TagOutput: *tag,
		BindAddr:  *bind,
		KillGrace: *grace,
		Stdout:    stdout,
		Stderr:    stderr,
		Logf: func(format string, args ...any) {
			fmt.Fprintf(stderr, "goshmem-run: "+format+"\n", args...)
		},
	})
	select {
	case s := <-got:
		return 128 + int(s)
	default:
	}
	var jobErr *launcher.JobError
	if err != nil && !errors.As(err, &jobErr) {
		fmt.Fprintf(stderr, "goshmem-run: %v\n", err) // a failed PE was reported already
	}
	return code
}

// resolve tells whether prog is an executable to run or a Go package to
// build first.
func resolve(prog string) (path string, build bool, err error) {
	fi, err := os.Stat(prog)
	switch {
	case err == nil && fi.IsDir():
		return prog, true, nil
	case err == nil:
		if !strings.ContainsRune(prog, os.PathSeparator) {
			prog = "." + string(os.PathSeparator) + prog // not a PATH lookup
		}
		return prog, false, nil
	case !strings.ContainsRune(prog, '/'):
		p, err := exec.LookPath(prog)
		if err != nil {
			return "", false, fmt.Errorf("%s: not a file, a directory or a command in PATH", prog)
		}
		return p, false, nil
	}
	// A package path such as github.com/x/y/cmd/z: the go command decides.
	return prog, true, nil
}
