// Command goshmem-run starts a goshmem (OpenSHMEM for Go) job: on this
// host, on several hosts through a remote shell, or through a cluster
// manager's spawner (Slurm's srun, Open MPI's mpirun).
//
// Usage:
//
//	goshmem-run -np N [flags] PROGRAM [ARGS...]
//	goshmem-run --hosts h1:4,h2:4 [-np N] [flags] PROGRAM [ARGS...]
//	goshmem-run --spawner 'srun --overcommit' -np N [flags] PROGRAM [ARGS...]
//	goshmem-run --help | --version
//
// It starts N processing elements (PEs), each running PROGRAM with ARGS.
// PROGRAM is an executable (a path, or a name looked up in PATH), or a Go
// main package: a directory such as ./examples/hello, or a package path,
// which goshmem-run builds once with the go command before starting the
// PEs. A Go source file, or a package that is not a main package, is
// refused with a usage error (status 2). Flags must come before PROGRAM;
// everything after it goes to the program.
//
// The flags are:
//
//	-np N, -n N         number of PEs (at least 1; with --hosts or
//	                    --hostfile, default one per slot)
//	-hosts LIST         hosts and their slots: "h1:4,h2:4" (a host without
//	                    ":N" has one slot); the slots are filled in order
//	-hostfile FILE      hosts, one per line: "h1", "h1:4" or "h1 slots=4"
//	-rsh CMD            remote shell that starts the agent of each host that
//	                    is not this one: CMD HOST COMMAND... (default "ssh";
//	                    "ip netns exec" for network namespaces)
//	-spawner CMD        have a cluster manager place the PEs: "srun ...",
//	                    "mpirun ..." or any command that starts N copies of
//	                    the command appended to it (see below)
//	-tag-output         prefix every output line with "[pe N] "
//	-output-dir DIR     write the output of PE N to DIR/pe-N.out (on its
//	                    host) instead of the terminal
//	-x NAME[=VALUE]     pass NAME (with this value, or the current one) to
//	                    the PEs; repeatable
//	-bind ADDR          IP address of the bootstrap seed (default 127.0.0.1
//	                    for a job on this host, else the address that routes
//	                    to the first remote host, or the default route)
//	-kill-grace D       time PEs get between SIGTERM and SIGKILL when the job
//	                    is ended (default 2s)
//	-failure-timeout D  time the job may take to notice a PE, host or
//	                    launcher that stopped answering (default 10s; a PE
//	                    that exits or is killed is noticed at once)
//	-stall-report D     have each PE report where it waits when one of its
//	                    waits lasts longer than D (GOSHMEM_STALL_REPORT)
//	-profile DIR        have each PE write its CPU profile and a summary
//	                    of its communication into DIR (see below)
//	-agent-path PATH    goshmem-run on the other hosts (default this one's
//	                    path)
//	-help               print this usage on standard output and exit 0
//	-version            print the version on standard output and exit 0
//
// Both -flag and --flag forms work.
//
// goshmem-run runs the bootstrap seed (a memberlist node) with a fresh
// random job key, and starts one agent per host (goshmem-run itself, in
// agent mode: directly on this host, through the remote shell on the
// others), or, with --spawner, has the spawner start one agent per PE. Each
// agent joins the job, starts its PEs, forwards their output, tells the
// seed how each PE ended, and ends them when the job ends. The agent's
// configuration, job key included, goes to it on its standard input (or,
// under a spawner, in the environment), never on a command line. Each PE
// gets its place in the job in the environment:
//
//	GOSHMEM_JOBID            the job id
//	GOSHMEM_RANK             the PE's rank, 0 to N-1
//	GOSHMEM_SIZE             N
//	GOSHMEM_SEED             host:port of the seed
//	GOSHMEM_KEY              the job key, base64 (memberlist encryption key,
//	                         and the key of tcp connections between PEs)
//	GOSHMEM_LOCAL_RANK       the PE's rank on its host
//	GOSHMEM_LOCAL_SIZE       the number of PEs on its host
//	GOSHMEM_FAILURE_TIMEOUT  the failure timeout (when set)
//	GOSHMEM_STALL_REPORT     the duration of -stall-report (when given)
//	GOSHMEM_PROFILE          the directory of -profile (when given)
//
// For a job on this host alone, goshmem-run also sets UCX_NET_DEVICES=lo
// (unless it is set), so that every listener of the job is on the loopback.
// PEs on other hosts inherit their agent's environment, plus the UCX_*,
// SHMEM_* and GOSHMEM_* variables of goshmem-run's and those of -x.
//
// With --spawner, the first word of CMD decides the arguments added: srun
// gets "-n N --kill-on-bad-exit=1 --input=0", mpirun (or mpiexec, oshrun)
// gets "-np N -x GOSHMEM_AGENT_CONFIG"; then comes the agent command. Any
// other spawner gets only the agent command, and must start N copies of it
// with GOSHMEM_AGENT_CONFIG and GOSHMEM_SIZE passed on and each copy's place
// in GOSHMEM_RANK, GOSHMEM_LOCAL_RANK and GOSHMEM_LOCAL_SIZE (or in Open
// MPI's, MPICH's or Slurm's variables).
//
// Standard input goes to PE 0. The PEs' standard output and error are
// forwarded one whole line at a time, untagged unless -tag-output asks for
// "[pe N] " prefixes. When the job fails, or a stall report is asked for,
// the lines that follow are tagged, whatever -tag-output says; and the
// first PE of each agent (each host) that fails by itself has the lines
// that say why shown again, tagged, on standard error: the start of its
// crash report (from the Go runtime's "panic: " or "fatal error: " line, 20
// lines), or else its last 20 lines, on both streams (with -output-dir,
// goshmem-run names the PE's output file instead).
//
// SIGQUIT (Ctrl-\) to goshmem-run does not end the job: it asks for a stall
// report. goshmem-run prints "goshmem-run: stall report requested; PEs
// report where they wait:" and every agent sends SIGUSR2 to each of its
// running PEs that joined the job (shmem handles it by printing, on the
// PE's standard error, the routine it waits in, the team, and the PE it
// waits for); PEs that have not joined the job yet are named and not
// signalled, because they may not handle it yet.
//
// When a PE exits with a non-zero status or by a signal, or exits without
// finalizing while the others still run, or is stopped, or stops
// answering, goshmem-run names the PE, its host and how it ended,
// terminates the other PEs (SIGTERM, then SIGKILL) and exits with that PE's
// status (128+signal for a signal, 1 otherwise). It names the first cause:
// not a PE that ended because it lost a peer that failed, or because its
// agent ended it, whatever order the reports arrive in. A PE that calls a
// global exit (bootstrap's Member.GlobalExit, shmem's GlobalExit) ends the
// job the same way, and goshmem-run exits with its status. SIGINT, SIGTERM
// or SIGHUP to goshmem-run ends every PE, and it exits with 128+signal. If
// goshmem-run itself is killed, its agents end the PEs (at once on this
// host and where the remote shell passes the signal on, else within the
// failure timeout); if it is stopped for longer than half the failure
// timeout, it names itself when it resumes and exits 1. A PROGRAM path that
// does not exist exits 127. Nothing is left in /dev/shm. A job that ends
// well exits with 0.
//
// With -profile DIR (made absolute, created, and cleared of the files of
// an earlier profile), each PE that uses shmem records a CPU profile and
// counts the operations it initiates and their bytes, per routine and
// target PE, from Init to its last Finalize, which writes them into DIR on
// the PE's host: pe-N.cpu.pprof (for go tool pprof) and pe-N.comm.json (a
// shmem.CommSummary). After the job, goshmem-run reads the summaries found
// in DIR on this host and writes comm.txt, the operations and bytes of
// each routine over the job and the matrix of bytes from each PE to each
// PE, and comm-matrix.svg, that matrix as a heatmap; it names the PEs
// whose summary is missing (a PE that did not reach its last Finalize, or
// ran on another host without a shared DIR).
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
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"github.com/goshmem/goshmem/bootstrap"
	goversion "github.com/goshmem/goshmem/internal/version"
	"github.com/goshmem/goshmem/launcher"
	"github.com/goshmem/goshmem/shmem"
	"github.com/goshmem/goshmem/ucs"
)

func main() {
	if code, ok := launcher.AgentMain(); ok {
		os.Exit(code)
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// envFlags collects repeated -x flags.
type envFlags []string

func (e *envFlags) String() string { return strings.Join(*e, ",") }

func (e *envFlags) Set(v string) error {
	name, _, hasValue := strings.Cut(v, "=")
	if name == "" {
		return fmt.Errorf("want NAME or NAME=VALUE")
	}
	if !hasValue {
		v = name + "=" + os.Getenv(name)
	}
	*e = append(*e, v)
	return nil
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("goshmem-run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	np := fs.Int("np", 0, "number of PEs (at least 1; with -hosts or -hostfile, default one per slot)")
	fs.IntVar(np, "n", 0, "the same as -np")
	perHost := fs.Int("N", 0, "PEs per host: with -hosts or -hostfile, N on each host whatever its slots; on this host alone, the same as -np")
	// Flags people type out of habit from oshrun and mpirun, which change
	// nothing here: a host takes any number of PEs, and root may run them.
	fs.Bool("oversubscribe", false, "accepted for oshrun's sake (no effect: this host alone takes any -np)")
	fs.Bool("allow-run-as-root", false, "accepted for oshrun's sake (no effect: root runs jobs without it)")
	hostList := fs.String("hosts", "", `hosts and slots, "h1:4,h2:4"`)
	hostfile := fs.String("hostfile", "", `file of hosts, one per line: "h1", "h1:4" or "h1 slots=4"`)
	rsh := fs.String("rsh", "ssh", "remote shell: CMD HOST COMMAND... runs COMMAND on HOST")
	spawner := fs.String("spawner", "", `spawner that places the PEs: "srun ...", "mpirun ..." or another command`)
	tag := fs.Bool("tag-output", false, `prefix every output line with "[pe N] " (a failing job's lines are tagged anyway)`)
	outDir := fs.String("output-dir", "", "write the output of PE N to DIR/pe-N.out instead of the terminal")
	var env envFlags
	fs.Var(&env, "x", "pass NAME[=VALUE] to the PEs (repeatable)")
	bind := fs.String("bind", "", "IP address of the bootstrap seed (default: 127.0.0.1 on one host, else chosen by route)")
	grace := fs.Duration("kill-grace", launcher.DefaultKillGrace, "time between SIGTERM and SIGKILL when ending the job")
	failTimeout := fs.Duration("failure-timeout", bootstrap.DefaultFailureTimeout, "time to notice a PE, host or launcher that stopped answering")
	stallReport := fs.Duration("stall-report", 0, "have each PE report where it waits when a wait lasts longer than this (GOSHMEM_STALL_REPORT)")
	profile := fs.String("profile", "", "write each PE's CPU profile and communication summary to DIR, and the job's PE-to-PE byte matrix (GOSHMEM_PROFILE)")
	agentPath := fs.String("agent-path", "", "path of goshmem-run on the other hosts (default: this one's)")
	version := fs.Bool("version", false, "print the version and exit")
	usageTo := func(w io.Writer) {
		fmt.Fprintf(w, "usage: goshmem-run -np N [flags] PROGRAM [ARGS...]\n"+
			"       goshmem-run -hosts h1:4,h2:4 [-np N] [flags] PROGRAM [ARGS...]\n"+
			"       goshmem-run -spawner 'srun ...' -np N [flags] PROGRAM [ARGS...]\n"+
			"       goshmem-run -help | -version\n\n"+
			"PROGRAM is an executable or a Go main package (directory or package path).\n"+
			"SIGQUIT (Ctrl-\\) asks the PEs where they wait, without ending the job.\n\nflags:\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(stderr)
	}
	fs.Usage = func() {} // printed below: on stdout for -help
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usageTo(stdout)
			return 0
		}
		usageTo(stderr) // after flag's message
		return 2
	}
	if *version {
		printVersion(stdout)
		return 0
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "goshmem-run: "+format+"\n", a...)
		usageTo(stderr)
		return 2
	}
	var hosts []launcher.Host
	var err error
	switch {
	case *hostList != "" && *hostfile != "":
		return usage("give -hosts or -hostfile, not both")
	case *hostList != "":
		hosts, err = launcher.ParseHosts(*hostList)
	case *hostfile != "":
		hosts, err = launcher.ReadHostfile(*hostfile)
	}
	if err != nil {
		return usage("%v", err)
	}
	if *spawner != "" && hosts != nil {
		return usage("-spawner places the PEs itself: no -hosts or -hostfile with it")
	}
	switch {
	case *perHost < 0:
		return usage("-N must be at least 1")
	case *perHost == 0:
	case *spawner != "":
		return usage("-N: the spawner places the PEs (give it its own per-host option)")
	case hosts != nil:
		for i := range hosts {
			hosts[i].Slots = *perHost
		}
	case *np == 0:
		*np = *perHost
	case *np > *perHost:
		return usage("-np %d PEs do not fit -N %d on this host alone (give -hosts or -hostfile for more hosts)", *np, *perHost)
	}
	if *np < 0 || (*np == 0 && hosts == nil) {
		return usage("-np must be at least 1")
	}
	if fs.NArg() < 1 {
		return usage("no PROGRAM")
	}
	if *stallReport < 0 {
		return usage("-stall-report %v: want a positive duration", *stallReport)
	}
	if *stallReport > 0 {
		env = append(env, envStallReport+"="+stallReport.String())
	}
	if *profile != "" {
		dir, err := filepath.Abs(*profile)
		if err == nil {
			err = prepareProfileDir(dir)
		}
		if err != nil {
			fmt.Fprintf(stderr, "goshmem-run: -profile: %v\n", err)
			return 1
		}
		*profile = dir
		env = append(env, envProfile+"="+dir)
	}
	rshWords, err := splitWords(*rsh)
	if err != nil || len(rshWords) == 0 {
		return usage("-rsh %q: %v", *rsh, err)
	}
	var spawnerWords []string
	if *spawner != "" {
		if spawnerWords, err = splitWords(*spawner); err != nil || len(spawnerWords) == 0 {
			return usage("-spawner %q: %v", *spawner, err)
		}
	}
	if *agentPath == "" {
		if *agentPath, err = os.Executable(); err != nil {
			fmt.Fprintf(stderr, "goshmem-run: cannot find its own executable for the agents: %v\n", err)
			return 1
		}
	}

	program, build, err := resolve(fs.Arg(0))
	if errors.Is(err, ucs.ErrInvalidParam) {
		return usage("%s", plain(err))
	}
	if err != nil {
		fmt.Fprintf(stderr, "goshmem-run: %v\n", err)
		return 127
	}
	if build {
		bin, cleanup, err := launcher.BuildProgram(program)
		if _, serr := os.Stat(program); err != nil && errors.Is(serr, os.ErrNotExist) {
			fmt.Fprintf(stderr, "goshmem-run: %s: no such file or directory, nor a Go package the go command can build: %v\n", program, err)
			return 127
		}
		if errors.Is(err, ucs.ErrInvalidParam) {
			return usage("%s", plain(err))
		}
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
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	got := make(chan syscall.Signal, 1)
	go func() {
		if s, ok := <-sigs; ok {
			got <- s.(syscall.Signal)
			cancel()
		}
	}()
	// SIGQUIT asks for a stall report instead of ending goshmem-run with a
	// dump of its own goroutines.
	quits := make(chan os.Signal, 1)
	signal.Notify(quits, syscall.SIGQUIT)
	defer func() {
		signal.Stop(quits)
		close(quits) // nothing sends on it any more
	}()
	stallReports := make(chan struct{}, 1)
	go func() {
		for range quits {
			select {
			case stallReports <- struct{}{}:
			default: // one is pending
			}
		}
	}()

	code, err := launcher.Run(ctx, launcher.Options{
		NP:             *np,
		Program:        program,
		Args:           fs.Args()[1:],
		Env:            env,
		TagOutput:      *tag,
		OutputDir:      *outDir,
		BindAddr:       *bind,
		KillGrace:      *grace,
		FailureTimeout: *failTimeout,
		Hosts:          hosts,
		RSH:            rshWords,
		Spawner:        spawnerWords,
		AgentPath:      *agentPath,
		StallReports:   stallReports,
		Stdout:         stdout,
		Stderr:         stderr,
		Logf: func(format string, args ...any) {
			fmt.Fprintf(stderr, "goshmem-run: "+format+"\n", args...)
		},
	})
	if *profile != "" {
		writeProfile(*profile, *np, stderr)
	}
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

// splitWords splits a command line into words at spaces, keeping what is
// inside single or double quotes (without the quotes) in one word.
func splitWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	for _, c := range s {
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				cur.WriteRune(c)
			}
		case c == '\'' || c == '"':
			quote, inWord = c, true
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(c)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated quote")
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// plain is the message of a usage error without the "launcher: " and
// ": Invalid parameter" that frame it for a library's caller.
func plain(err error) string {
	msg := strings.TrimPrefix(err.Error(), "launcher: ")
	return strings.TrimSuffix(msg, ": "+ucs.ErrInvalidParam.Error())
}

// envStallReport is the PE environment variable of -stall-report.
const envStallReport = "GOSHMEM_STALL_REPORT"

// printVersion prints goshmem-run's version, as -version does.
func printVersion(w io.Writer) {
	version, revision := goversion.Module()
	fmt.Fprintf(w, "goshmem-run: %s\n", shmem.VendorString)
	fmt.Fprintf(w, "OpenSHMEM %d.%d; module %s %s; revision %s; built with %s\n",
		shmem.MajorVersion, shmem.MinorVersion, goversion.ModulePath, version, revision, runtime.Version())
}

// resolve tells whether prog is an executable to run or a Go package to
// build first. A path that names a file, absolute or starting with ./ or
// ../, must exist. A Go source file is an error that wraps
// ucs.ErrInvalidParam.
func resolve(prog string) (path string, build bool, err error) {
	fi, err := os.Stat(prog)
	switch {
	case err == nil && fi.IsDir():
		return prog, true, nil
	case err == nil && strings.HasSuffix(prog, ".go"):
		dir := filepath.Dir(prog)
		if !filepath.IsAbs(dir) && dir != "." && !strings.HasPrefix(dir, ".") {
			dir = "./" + dir
		}
		return "", false, fmt.Errorf("%s is a Go source file, not a program: give the directory of its main package (%s), or a binary built from it: %w",
			prog, dir, ucs.ErrInvalidParam)
	case err == nil:
		if !strings.ContainsRune(prog, os.PathSeparator) {
			prog = "." + string(os.PathSeparator) + prog // not a PATH lookup
		}
		return prog, false, nil
	case filepath.IsAbs(prog) || prog == "." || prog == ".." || strings.HasPrefix(prog, "./") || strings.HasPrefix(prog, "../"):
		if errors.Is(err, os.ErrNotExist) {
			return "", false, fmt.Errorf("%s: no such file or directory", prog)
		}
		return "", false, err
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
