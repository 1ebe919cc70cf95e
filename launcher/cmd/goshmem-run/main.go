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
//	                    launcher that stopped answering (default 5s; a PE
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
//	GOSHMEM_FAILURE_TIMEOUT  the failure timeout (-failure-timeout)
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
// "[pe N] " prefixes. When the job fails, a PE's crash report starts (the
// Go runtime's "panic: " or "fatal error: " line), or a stall report is
// asked for, the lines that follow are tagged, whatever -tag-output says
// (a crash report is so shown once, tagged); and the first PE of each
// agent (each host) that fails by itself otherwise has its last 20 lines,
// on both streams, shown again, tagged, on standard error (with
// -output-dir, goshmem-run names the PE's output file instead).
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
// profile.Summary). After the job, goshmem-run reads the summaries found
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
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/goshmem/goshmem/bootstrap"
	goversion "github.com/goshmem/goshmem/internal/version"
	"github.com/goshmem/goshmem/launcher"
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

// runFlags are goshmem-run's flags, once parsed.
type runFlags struct {
	np, perHost                      *int
	hostList, hostfile, rsh, spawner *string
	tag                              *bool
	outDir, bind, bindTo             *string
	env                              envFlags
	grace, failTimeout, stallReport  *time.Duration
	profile, agentPath               *string
	version                          *bool
}

// newFlags defines goshmem-run's flags on a new flag set that reports to
// stderr.
func newFlags(stderr io.Writer) (*flag.FlagSet, *runFlags) {
	fs := flag.NewFlagSet("goshmem-run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := &runFlags{}
	f.np = fs.Int("np", 0, "number of PEs (at least 1; with -hosts or -hostfile, default one per slot)")
	fs.IntVar(f.np, "n", 0, "the same as -np")
	f.perHost = fs.Int("N", 0, "PEs per host: with -hosts or -hostfile, N on each host whatever its slots; on this host alone, the same as -np")
	// Flags people type out of habit from oshrun and mpirun, which change
	// nothing here: a host takes any number of PEs, and root may run them.
	fs.Bool("oversubscribe", false, "accepted for oshrun's sake (no effect: this host alone takes any -np)")
	fs.Bool("allow-run-as-root", false, "accepted for oshrun's sake (no effect: root runs jobs without it)")
	f.hostList = fs.String("hosts", "", `hosts and slots, "h1:4,h2:4"`)
	f.hostfile = fs.String("hostfile", "", `file of hosts, one per line: "h1", "h1:4" or "h1 slots=4"`)
	f.rsh = fs.String("rsh", "ssh", "remote shell: CMD HOST COMMAND... runs COMMAND on HOST")
	f.spawner = fs.String("spawner", "", `spawner that places the PEs: "srun ...", "mpirun ..." or another command`)
	f.tag = fs.Bool("tag-output", false, `prefix every output line with "[pe N] " (a failing job's lines are tagged anyway)`)
	f.bindTo = fs.String("bind-to", "none", `pin each PE to a CPU: "core" (the PEs of a host take the CPUs goshmem-run may use in turn, by local rank) or "none"`)
	f.outDir = fs.String("output-dir", "", "write the output of PE N to DIR/pe-N.out instead of the terminal")
	fs.Var(&f.env, "x", "pass NAME[=VALUE] to the PEs (repeatable)")
	f.bind = fs.String("bind", "", "IP address of the bootstrap seed (default: 127.0.0.1 on one host, else chosen by route)")
	f.grace = durationVar(fs, "kill-grace", launcher.DefaultKillGrace, "time between SIGTERM and SIGKILL when ending the job")
	f.failTimeout = durationVar(fs, "failure-timeout", bootstrap.DefaultFailureTimeout, "time to notice a PE, host or launcher that stopped answering")
	f.stallReport = durationVar(fs, "stall-report", 0, "have each PE report where it waits when a wait lasts longer than this, in GOSHMEM_STALL_REPORT")
	f.profile = fs.String("profile", "", "write each PE's CPU profile and communication summary to DIR, and the job's PE-to-PE byte matrix (GOSHMEM_PROFILE)")
	f.agentPath = fs.String("agent-path", "", "path of goshmem-run on the other hosts (default: this one's)")
	f.version = fs.Bool("version", false, "print the version and exit")
	return fs, f
}

// usageFunc prints "goshmem-run: " and the message, then the usage, to
// stderr, and returns exit code 2.
type usageFunc func(format string, a ...any) int

func run(args []string, stdout, stderr io.Writer) int {
	fs, f := newFlags(stderr)
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
	if *f.version {
		printVersion(stdout)
		return 0
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "goshmem-run: "+format+"\n", a...)
		usageTo(stderr)
		return 2
	}
	opts, code, ok := f.options(fs, usage, stderr)
	if !ok {
		return code
	}
	program, cleanup, code, ok := prepareProgram(fs.Arg(0), usage, stderr)
	if !ok {
		return code
	}
	defer cleanup()
	opts.Program = program

	ctx, got, stallReports, stop := watchSignals()
	defer stop()
	opts.StallReports = stallReports
	opts.Stdout, opts.Stderr = stdout, stderr
	opts.Logf = func(format string, args ...any) {
		fmt.Fprintf(stderr, "goshmem-run: "+format+"\n", args...)
	}
	code, err := launcher.Run(ctx, opts)
	if *f.profile != "" {
		writeProfile(*f.profile, *f.np, stderr)
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

// options checks the parsed flags and turns them into the job's options,
// all but the program and what run adds (signals, output). On a bad flag it
// returns usage's code, on another failure 1 after printing it; ok is false
// then. It prepares the -profile directory.
func (f *runFlags) options(fs *flag.FlagSet, usage usageFunc, stderr io.Writer) (opts launcher.Options, code int, ok bool) {
	var hosts []launcher.Host
	var err error
	switch {
	case *f.hostList != "" && *f.hostfile != "":
		return opts, usage("give -hosts or -hostfile, not both"), false
	case *f.hostList != "":
		hosts, err = launcher.ParseHosts(*f.hostList)
	case *f.hostfile != "":
		hosts, err = launcher.ReadHostfile(*f.hostfile)
	}
	if err != nil {
		return opts, usage("%v", err), false
	}
	if *f.spawner != "" && hosts != nil {
		return opts, usage("-spawner places the PEs itself: no -hosts or -hostfile with it"), false
	}
	switch {
	case *f.perHost < 0:
		return opts, usage("-N must be at least 1"), false
	case *f.perHost == 0:
	case *f.spawner != "":
		return opts, usage("-N: the spawner places the PEs (give it its own per-host option)"), false
	case hosts != nil:
		for i := range hosts {
			hosts[i].Slots = *f.perHost
		}
	case *f.np == 0:
		*f.np = *f.perHost
	case *f.np > *f.perHost:
		return opts, usage("-np %d PEs do not fit -N %d on this host alone (give -hosts or -hostfile for more hosts)", *f.np, *f.perHost), false
	}
	if *f.np < 0 || (*f.np == 0 && hosts == nil) {
		return opts, usage("-np must be at least 1"), false
	}
	if fs.NArg() < 1 {
		return opts, usage("no PROGRAM"), false
	}
	env := f.env
	if *f.stallReport < 0 {
		return opts, usage("-stall-report %v: want a positive duration", *f.stallReport), false
	}
	bindTo, err := launcher.ParseBinding(*f.bindTo)
	if err != nil {
		return opts, usage("-%v", err), false
	}
	if *f.stallReport > 0 {
		env = append(env, envStallReport+"="+f.stallReport.String())
	}
	if *f.profile != "" {
		dir, err := filepath.Abs(*f.profile)
		if err == nil {
			err = prepareProfileDir(dir)
		}
		if err != nil {
			fmt.Fprintf(stderr, "goshmem-run: -profile: %v\n", err)
			return opts, 1, false
		}
		*f.profile = dir
		env = append(env, envProfile+"="+dir)
	}
	rshWords, err := splitWords(*f.rsh)
	if err != nil || len(rshWords) == 0 {
		return opts, usage("-rsh %q: %v", *f.rsh, err), false
	}
	var spawnerWords []string
	if *f.spawner != "" {
		if spawnerWords, err = splitWords(*f.spawner); err != nil || len(spawnerWords) == 0 {
			return opts, usage("-spawner %q: %v", *f.spawner, err), false
		}
	}
	agentPath := *f.agentPath
	if agentPath == "" {
		if agentPath, err = os.Executable(); err != nil {
			fmt.Fprintf(stderr, "goshmem-run: cannot find its own executable for the agents: %v\n", err)
			return opts, 1, false
		}
	}
	return launcher.Options{
		NP:             *f.np,
		Args:           fs.Args()[1:],
		Env:            env,
		TagOutput:      *f.tag,
		OutputDir:      *f.outDir,
		BindAddr:       *f.bind,
		KillGrace:      *f.grace,
		BindTo:         bindTo,
		FailureTimeout: *f.failTimeout,
		Hosts:          hosts,
		RSH:            rshWords,
		Spawner:        spawnerWords,
		AgentPath:      agentPath,
	}, 0, true
}

// prepareProgram finds the executable that arg names, building it first
// when arg is a Go package; cleanup removes what the build left. ok is
// false, with the exit code, when there is no program to run: 2 for a bad
// argument (after the usage), 127 when arg names nothing, 1 when the build
// failed.
func prepareProgram(arg string, usage usageFunc, stderr io.Writer) (program string, cleanup func(), code int, ok bool) {
	program, build, err := resolve(arg)
	if errors.Is(err, ucs.ErrInvalidParam) {
		return "", nil, usage("%s", plain(err)), false
	}
	if err != nil {
		fmt.Fprintf(stderr, "goshmem-run: %v\n", err)
		return "", nil, 127, false
	}
	if !build {
		return program, func() {}, 0, true
	}
	bin, cleanup, err := launcher.BuildProgram(program)
	if _, serr := os.Stat(program); err != nil && errors.Is(serr, os.ErrNotExist) {
		fmt.Fprintf(stderr, "goshmem-run: %s: no such file or directory, nor a Go package the go command can build: %v\n", program, err)
		return "", nil, 127, false
	}
	if errors.Is(err, ucs.ErrInvalidParam) {
		return "", nil, usage("%s", plain(err)), false
	}
	if err != nil {
		fmt.Fprintf(stderr, "goshmem-run: %v\n", err)
		return "", nil, 1, false
	}
	return bin, cleanup, 0, true
}

// watchSignals turns SIGINT, SIGTERM and SIGHUP into the cancellation of
// ctx, the signal then in got, and SIGQUIT into a request on stallReports
// (at most one pending) instead of ending goshmem-run with a dump of its
// own goroutines. stop undoes it and cancels ctx.
func watchSignals() (ctx context.Context, got <-chan syscall.Signal, stallReports chan struct{}, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	gotc := make(chan syscall.Signal, 1)
	go func() {
		if s, ok := <-sigs; ok {
			gotc <- s.(syscall.Signal)
			cancel()
		}
	}()
	quits := make(chan os.Signal, 1)
	signal.Notify(quits, syscall.SIGQUIT)
	stallReports = make(chan struct{}, 1)
	go func() {
		for range quits {
			select {
			case stallReports <- struct{}{}:
			default: // one is pending
			}
		}
	}()
	stop = func() {
		signal.Stop(quits)
		close(quits) // nothing sends on it any more
		signal.Stop(sigs)
		cancel()
	}
	return ctx, gotc, stallReports, stop
}

// durationFlag is a flag's duration (time.ParseDuration's form) whose
// parse error says the form, which the flag package's does not ("parse
// error"): "30" is a number of seconds to most people, and the message
// names 30s.
type durationFlag time.Duration

func (d *durationFlag) String() string { return time.Duration(*d).String() }

func (d *durationFlag) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		if _, nerr := strconv.ParseFloat(s, 64); nerr == nil {
			return fmt.Errorf("a duration needs a unit: %ss for seconds, %sm for minutes", s, s)
		}
		return fmt.Errorf("want a duration such as 30s, 1m or 1m30s")
	}
	*d = durationFlag(v)
	return nil
}

// durationVar defines a duration flag, as fs.Duration does, whose usage
// line names its argument "duration" and gives examples of the form.
func durationVar(fs *flag.FlagSet, name string, value time.Duration, usage string) *time.Duration {
	d := (*durationFlag)(&value)
	fs.Var(d, name, usage+" (a `duration` such as 30s or 1m)")
	return (*time.Duration)(d)
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
	fmt.Fprintf(w, "goshmem-run: %s\n", goversion.Vendor)
	fmt.Fprintf(w, "OpenSHMEM %d.%d; module %s %s; revision %s; built with %s\n",
		goversion.SpecMajor, goversion.SpecMinor, goversion.ModulePath, version, revision, runtime.Version())
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
