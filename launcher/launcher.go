// Package launcher starts the PEs of a goshmem job, as goshmem-run does: on
// this host, on several hosts through a remote shell, or through a cluster
// manager's spawner (Slurm's srun, Open MPI's mpirun). It runs the bootstrap
// seed with a fresh job key, starts each PE with the environment of the
// launcher contract (see package bootstrap), forwards their output line by
// line, and ends the whole job as soon as one PE fails.
//
// On this host alone, Run starts the PEs itself, unless Options.AgentPath
// names an agent binary. Otherwise it starts one agent per host (through
// the remote shell for other hosts), or the spawner starts one agent per PE;
// the agent (AgentMain, a mode of goshmem-run) starts the PEs of its host,
// forwards their output, tells the seed how each ended, and ends them when
// the launcher ends the job or is gone.
package launcher

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goshmem/goshmem/bootstrap"
	"github.com/goshmem/goshmem/bootstrap/cluster"
	"github.com/goshmem/goshmem/ucs"
)

// DefaultKillGrace is the time PEs get between SIGTERM and SIGKILL when the
// launcher ends a job.
const DefaultKillGrace = 2 * time.Second

// Options describe a job for Run.
type Options struct {
	// NP is the number of PEs (at least 1). With Hosts, 0 means one PE
	// per slot.
	NP int
	// Program is the executable each PE runs: a path, or a name looked up
	// in PATH (on the host of the PE). Args are its arguments (without the
	// program name). PEs on other hosts need it at the same path there; a
	// relative path is made absolute first.
	Program string
	Args    []string
	// Env is added to every PE's environment, after the one it inherits;
	// the GOSHMEM_* variables of the launcher contract come last and win.
	// PEs on this host, and those a spawner starts, inherit the launcher's
	// environment (os.Environ()); PEs on other hosts inherit their agent's
	// (the remote shell's), plus the launcher's UCX_*, SHMEM_* and
	// GOSHMEM_* variables.
	Env []string
	// TagOutput prefixes every line a PE writes, on stdout and stderr,
	// with "[pe N] ". A last line without newline then gets one.
	TagOutput bool
	// OutputDir, when set, sends the output of each PE, stdout and stderr
	// in the order written, to the file OutputFileName(rank) in that
	// directory on the PE's host (created if needed; relative to the
	// launcher's working directory) instead of Stdout and Stderr.
	OutputDir string
	// Stdin goes to PE 0; the other PEs read /dev/null. Stdout and Stderr
	// receive the PEs' output, one whole line at a time (lines over 64 KiB
	// are forwarded in pieces). Nil means os.Stdin, os.Stdout, os.Stderr.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// BindAddr is the IP address of the bootstrap seed, which every PE
	// must reach. Empty means 127.0.0.1 for a job on this host alone, and
	// otherwise the address of this host that routes to the first remote
	// host that resolves, or else to the default route.
	BindAddr string
	// KillGrace is how long PEs get to exit after SIGTERM before SIGKILL
	// when the job is ended. Zero means DefaultKillGrace.
	KillGrace time.Duration
	// BindTo pins PEs to CPUs (BindCore) or leaves them to the kernel
	// (BindNone, the default); PEs a spawner starts are its to place.
	BindTo Binding
	// FailureTimeout is how long the job may take to notice a PE, agent or
	// launcher that stopped answering without exiting (stopped, hung, its
	// host or network gone; a PE that exits or is killed is noticed at
	// once). A PE stopped (SIGSTOP, SIGTSTP) for half of it is killed by
	// its agent (or the launcher) and named as stopped. Zero means
	// bootstrap.DefaultFailureTimeout. PEs get it, the default too, in
	// GOSHMEM_FAILURE_TIMEOUT, so that their tcp endpoints time out with
	// it (uct/tcp's own default is for processes outside a job).
	FailureTimeout time.Duration
	// Hosts places the PEs: the slots of each host are filled in order
	// (PEs 0 to Slots-1 on the first host, and so on). Empty means NP PEs
	// on this host. Hosts that are not this host are reached through RSH,
	// and need AgentPath.
	Hosts []Host
	// RSH is the remote shell that starts an agent on another host: the
	// host name and the agent command are appended to it, as separate
	// arguments ("ssh" "h1" "/path/goshmem-run" "--goshmem-agent"), and
	// the agent's configuration, job key included, goes to its standard
	// input. Any command that runs its arguments on the named host with
	// its standard input and output connected works ("ip netns exec" for
	// network namespaces). Nil means []string{"ssh"}.
	RSH []string
	// Spawner, when set, has a cluster manager's spawner place the PEs: it
	// is run with arguments that start NP agents (see below), each of
	// which starts one PE where the spawner placed it; the launcher stays
	// the seed. A first word whose base name is "srun" gets
	// "-n NP --kill-on-bad-exit=1 --input=0"; "mpirun", "mpiexec" or
	// "oshrun" get "-np NP -x GOSHMEM_AGENT_CONFIG"; any other command gets
	// nothing, and must start NP copies of the agent command appended to
	// it, with GOSHMEM_AGENT_CONFIG and GOSHMEM_SIZE passed on, each with
	// its place in GOSHMEM_RANK, GOSHMEM_LOCAL_RANK and GOSHMEM_LOCAL_SIZE
	// (or a known spawner's variables, see bootstrap.PlaceFromOS). Spawner
	// needs AgentPath and excludes Hosts.
	Spawner []string
	// AgentPath is the binary that runs agents: goshmem-run itself, or any
	// binary whose main calls AgentMain. It must be at this path on every
	// host. When set, a job on this host alone is started through a local
	// agent too, which ends the PEs and removes their segments even when
	// the launcher is killed. Empty means that the launcher starts the PEs
	// itself, and then only on this host.
	AgentPath string
	// StallReports, when not nil, asks for stall reports: for each value it
	// receives, the launcher logs "stall report requested; PEs report where
	// they wait:" and has SIGUSR2 sent to every running PE that joined the
	// job (by its agent, or by the launcher for its own PEs; to the PE's
	// process, not to its process group). A PE handles it by writing where
	// it waits to its standard error (shmem does); one that does not handle
	// it dies. PEs that did not join yet are not signalled: they may not
	// handle it yet. The output is tagged ("[pe N] ") from then on.
	StallReports <-chan struct{}
	// Logf receives the launcher's messages (which PE failed, how).
	// Nil means ucs.DefaultLogger() at ucs.LogWarn (standard error,
	// unless UCX_LOG_LEVEL is fatal or error), each message prefixed
	// with "goshmem-run: ".
	Logf func(format string, args ...any)
}

// JobError reports the first PE failure of a job, which ended it.
type JobError struct {
	Rank int    // the PE, or -1 for a failure of the seed itself
	Host string // the host it ran on
	How  string // "exited with status 3", "killed by signal 9 (killed)", ...
	Code int    // the exit code Run returned
}

// Error returns a message such as "PE 2 on host n1 exited with status 3".
func (e *JobError) Error() string {
	who := "PE " + strconv.Itoa(e.Rank)
	if e.Rank < 0 {
		who = "the bootstrap seed"
	}
	return who + " on host " + e.Host + " " + e.How
}

// Run starts the PEs of the job opts describes and waits for them.
//
// Each PE runs in its own process group and is killed (SIGKILL) if the
// process that started it dies. Run returns 0 and a nil error when every
// PE exited with status 0, having finalized (bootstrap.Member.Close) or
// never joined the job.
//
// The first PE that exits with a non-zero status or by a signal, exits
// with status 0 without finalizing while others still run and some PE
// joined the job, finalizes and exits while the others wait for it in a
// collective of the bootstrap (which then never completes; the message
// names the PEs that wait), stays stopped (SIGSTOP) for half the failure timeout,
// stops answering its agent for most of the failure timeout (hung), is
// lost with its agent (its host stopped answering), or never reports how
// it ended because its agent or spawner ended first, ends the job: Run logs which PE on which
// host ended how, sends SIGTERM to the other PEs, SIGKILL to those still
// there after KillGrace, and returns a *JobError with the exit code: the
// PE's status, 128+signal for a signal, 1 otherwise. The PE named is the
// first cause: a PE that ended because it learned that another failed
// (bootstrap.Member.ReportLost, or the seed's notice), or that its agent
// ended, ends the job at once but is named only when no PE it lost failed
// by itself. A launcher that did not run for longer than half the failure timeout (it
// was stopped) names itself (Rank -1), with code 1. A PE that calls
// bootstrap.Member.GlobalExit(code) ends the job the same way, and Run
// returns code (with a nil error for 0). When ctx is done first, Run ends
// every PE the same way and returns 1 and ctx.Err(). Other errors end the
// job too: 71 for PEs or agents that cannot be started for lack of
// resources (fork, exec or a pipe fail with EAGAIN, EMFILE, ENFILE or
// ENOMEM; the message names the limit to raise), or that cannot all start
// under the limit on processes and threads (ulimit -u, the cgroup's
// pids.max; checked for this host before anything is started, and by each
// agent for its own), 127 for a program that cannot be started otherwise
// (not found), 2 for options that are wrong (the error wraps
// ucs.ErrInvalidParam).
func Run(ctx context.Context, opts Options) (exitCode int, err error) {
	if opts.Program == "" {
		return 2, fmt.Errorf("launcher: no program: %w", ucs.ErrInvalidParam)
	}
	if opts.NP < 0 || (opts.NP == 0 && len(opts.Hosts) == 0) {
		return 2, fmt.Errorf("launcher: %d PEs: %w", opts.NP, ucs.ErrInvalidParam)
	}
	if len(opts.Spawner) > 0 && len(opts.Hosts) > 0 {
		return 2, fmt.Errorf("launcher: a spawner places the PEs itself: no hosts with it: %w", ucs.ErrInvalidParam)
	}
	if len(opts.Spawner) > 0 && opts.AgentPath == "" {
		return 2, fmt.Errorf("launcher: a spawner needs an agent binary (AgentPath): %w", ucs.ErrInvalidParam)
	}
	if opts.FailureTimeout < 0 {
		return 2, fmt.Errorf("launcher: failure timeout %v: %w", opts.FailureTimeout, ucs.ErrInvalidParam)
	}
	if opts.Stdin == nil {
		opts.Stdin = os.Stdin
	}
	if opts.Stdout == nil {
		opts.Stdout = os.Stdout
	}
	if opts.Stderr == nil {
		opts.Stderr = os.Stderr
	}
	if opts.KillGrace <= 0 {
		opts.KillGrace = DefaultKillGrace
	}
	if opts.RSH == nil {
		opts.RSH = []string{"ssh"}
	}
	if opts.Logf == nil {
		opts.Logf = func(format string, args ...any) {
			ucs.DefaultLogger().Logf(ucs.LogWarn, "goshmem-run: "+format, args...)
		}
	}
	j := &job{opts: opts}
	if err := j.plan(); err != nil {
		return 2, err
	}
	return j.run(ctx)
}

// job is the state of one Run.
type job struct {
	opts   Options
	np     int
	places []placement // with Hosts, or this host alone; nil with a spawner
	single bool        // every PE on this host
	seed   *cluster.Seed
	// localAgent is the agent in this process, once it joined (a job on
	// this host alone).
	localAgent atomic.Pointer[cluster.Agent]
	key        []byte
	host       string // this host's name
	outMu      sync.Mutex

	pes     []peState
	running int // PEs whose end is not known
	units   []*unit
	unitsUp int // units still running
	unitEnd chan unitExit

	first  *JobError // the failure that ended the job
	ending bool      // PEs were told to terminate
	// consequence is the first end of a PE that learned of another PE's
	// failure first (cluster.Seed.Lost): the job is ended at once, but
	// the PE it lost, lostPeer, is named if its own failure turns up
	// (blameOpen until then); consequence is named only if none does.
	consequence *JobError
	lostPeer    int
	blameOpen   bool
	unitTerm    <-chan time.Time
	unitKill    <-chan time.Time
	// alive is when the launcher last checked that it runs (see
	// checkStopped); failureTimeout is the job's; continued receives
	// SIGCONT, which a stopped launcher gets when it resumes.
	alive          time.Time
	failureTimeout time.Duration
	continued      chan os.Signal
	// idle holds the ranks that exited 0 without finalize and without
	// having joined while no PE had joined: they fail the job if a PE
	// joins later while others still run.
	idle []int
}

// peState is what the launcher knows of a PE.
type peState struct {
	ended bool
	agent int // the agent that started it
}

// unit is what the launcher started to start PEs: an agent (directly or
// through the remote shell, or in the launcher's own process) or a
// spawner.
type unit struct {
	name  string // "the agent for host h2 (ssh h2 ...)"
	host  string
	ranks []int     // the PEs it starts; nil: all (a spawner)
	cmd   *exec.Cmd // nil for the agent in the launcher's process
	// cancel ends the agent in the launcher's process (its PEs first).
	cancel context.CancelFunc
	ended  bool
	// threads watches the standard error of an agent (not a spawner's,
	// which mixes those of many agents) for its runtime's report that it
	// could not create a thread.
	threads *threadWatch
}

type unitExit struct {
	u     *unit
	state *os.ProcessState
	err   error
	code  int // of the agent in the launcher's process (cmd nil)
}

func (j *job) run(ctx context.Context) (int, error) {
	o := &j.opts
	var err error
	j.key, err = bootstrap.NewKey()
	if err != nil {
		return 1, fmt.Errorf("launcher: %w", err)
	}
	bind := o.BindAddr
	if bind == "" && !j.single {
		if bind, err = j.chooseBindAddr(); err != nil {
			return 2, err
		}
	}
	if err := j.checkRoom(); err != nil {
		return startStatus(err), err
	}
	var logger ucs.Logger
	if v := os.Getenv(bootstrap.EnvDebug); v != "" && v != "0" {
		logger = logfLogger(func(format string, args ...any) { o.Logf("seed: "+format, args...) })
	}
	agents := len(j.places)
	if len(o.Spawner) > 0 {
		agents = j.np
	}
	j.seed, err = cluster.NewSeed(cluster.SeedConfig{Size: j.np, Key: j.key, BindAddr: bind, Logger: logger,
		Agents: agents, FailureTimeout: o.FailureTimeout})
	if err != nil {
		return 1, fmt.Errorf("launcher: %w", err)
	}
	defer j.seed.Close()
	j.host, _ = os.Hostname()
	if j.host == "" {
		j.host = "localhost"
	}
	j.pes = make([]peState, j.np)
	j.running = j.np
	j.failureTimeout = cmp.Or(o.FailureTimeout, bootstrap.DefaultFailureTimeout)
	j.alive = time.Now()
	j.continued = make(chan os.Signal, 1)
	signal.Notify(j.continued, syscall.SIGCONT)
	defer signal.Stop(j.continued)
	j.unitEnd = make(chan unitExit, len(j.places)+1)

	if code, err := j.startAll(); err != nil {
		j.terminate("the job could not be started")
		j.wait(ctx)
		return code, err
	}
	j.wait(ctx)
	switch {
	case j.first != nil && j.first.Code == 0:
		return 0, nil // a global exit with status 0
	case j.first != nil:
		return j.first.Code, j.first
	case ctx.Err() != nil:
		return 1, ctx.Err()
	}
	return 0, nil
}

// checkRoom fails, before anything is started, when the PEs of this host
// and the agent that starts them cannot all start under the limits on
// processes and threads (see checkProcessRoom): the launcher itself would
// be as likely as any of them to die for want of a thread, with a crash
// dump that no one cuts.
func (j *job) checkRoom() error {
	pes, agents := 0, 0
	for _, p := range j.places {
		if p.local {
			pes += len(p.ranks)
			if j.opts.AgentPath != "" {
				agents++
			}
		}
	}
	if err := checkProcessRoom(pes, j.opts.Program, agents); err != nil {
		return fmt.Errorf("launcher: cannot start the job on this host: %w", err)
	}
	return nil
}

// startAll starts the agents (one in this process, for a job on this host
// without AgentPath) or the spawner.
func (j *job) startAll() (int, error) {
	o := &j.opts
	cfg := agentConfig{JobID: j.seed.JobID(), Seed: j.seed.Addr(), Key: j.key, Size: j.np, Agents: len(j.places),
		FailureTimeout: o.FailureTimeout, Program: o.Program, Args: o.Args, Env: j.forwardedEnv(),
		TagOutput: o.TagOutput, OutputDir: o.OutputDir, KillGrace: o.KillGrace, BindTo: o.BindTo}
	if wd, err := os.Getwd(); err == nil {
		cfg.Dir = wd
	}
	if len(o.Spawner) > 0 {
		for r := range j.pes {
			j.pes[r].agent = r
		}
		cfg.Agents = j.np
		return j.startSpawner(cfg)
	}
	for id, p := range j.places {
		c := cfg
		c.Agent = id
		c.Stdin = contains(p.ranks, 0)
		c.Ranks = p.ranks
		for _, r := range p.ranks {
			j.pes[r].agent = id
		}
		if o.AgentPath == "" {
			j.startInProcess(&c)
			continue
		}
		argv := []string{o.AgentPath, AgentArg}
		name := "the agent for host " + p.host.Name
		if !p.local {
			argv = append(append(append([]string{}, o.RSH...), p.host.Name), shellWord(o.AgentPath), AgentArg)
			name += " (" + strings.Join(argv, " ") + ")"
		}
		line, err := json.Marshal(c)
		if err != nil {
			return 1, fmt.Errorf("launcher: %w", err)
		}
		var tail io.Reader
		if c.Stdin {
			tail = o.Stdin
		}
		u := &unit{name: name, host: p.host.Name, ranks: c.Ranks}
		// The agent's runtime may fail to create a thread as its PEs
		// start: what it writes then is cut to one line (threadWatch).
		u.threads = &threadWatch{who: "the agent for host " + p.host.Name, hint: threadLimitHint}
		if !p.local {
			u.threads.hint = remoteThreadLimitHint(p.host.Name)
		}
		if err := j.startUnit(u, argv, nil, append(line, '\n'), tail); err != nil {
			err = startError(err)
			o.Logf("cannot start %s: %v", name, err)
			return startStatus(err), fmt.Errorf("launcher: starting %s: %w", name, err)
		}
	}
	return 0, nil
}

// startInProcess runs the agent of cfg in this process: the launcher
// starts the PEs of a job on this host itself.
func (j *job) startInProcess(cfg *agentConfig) {
	o := &j.opts
	ctx, cancel := context.WithCancel(context.Background())
	u := &unit{name: "the launcher's agent", host: j.host, ranks: cfg.Ranks, cancel: cancel}
	run := &agentRun{cfg: cfg, base: j.baseEnv(), stdin: o.Stdin, stdout: o.Stdout, stderr: o.Stderr, logf: o.Logf,
		joined: j.localAgent.Store}
	for i, r := range cfg.Ranks {
		run.slots = append(run.slots, slot{r, i, len(cfg.Ranks)})
	}
	j.units = append(j.units, u)
	j.unitsUp++
	go func() {
		code := run.serve(ctx)
		cancel()
		j.unitEnd <- unitExit{u: u, code: code}
	}()
}

// startSpawner runs the spawner, which starts one agent per PE.
func (j *job) startSpawner(cfg agentConfig) (int, error) {
	o := &j.opts
	cfg.Agent = 0
	line, err := json.Marshal(cfg)
	if err != nil {
		return 1, fmt.Errorf("launcher: %w", err)
	}
	argv := append([]string{}, o.Spawner...)
	np := strconv.Itoa(j.np)
	switch filepath.Base(o.Spawner[0]) {
	case "srun":
		argv = append(argv, "-n", np, "--kill-on-bad-exit=1", "--input=0")
	case "mpirun", "mpiexec", "oshrun":
		argv = append(argv, "-np", np, "-x", EnvAgentConfig)
	}
	argv = append(argv, o.AgentPath, AgentArg)
	env := append(j.baseEnv(), EnvAgentConfig+"="+string(line), bootstrap.EnvSize+"="+np)
	u := &unit{name: filepath.Base(o.Spawner[0]) + " (" + strings.Join(argv, " ") + ")", host: j.host}
	if err := j.startUnit(u, argv, env, nil, o.Stdin); err != nil {
		err = startError(err)
		o.Logf("cannot start the spawner %s: %v", o.Spawner[0], err)
		return startStatus(err), fmt.Errorf("launcher: starting the spawner: %w", err)
	}
	return 0, nil
}

// startUnit starts a unit: argv with env (nil: the launcher's, without
// the contract's variables), whose standard input is head, then tail.
func (j *job) startUnit(u *unit, argv, env []string, head []byte, tail io.Reader) error {
	if env == nil {
		env = j.baseEnv()
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	out := &lineWriter{mu: &j.outMu, dst: j.opts.Stdout}
	errw := &lineWriter{mu: &j.outMu, dst: j.opts.Stderr, threads: u.threads}
	cmd.Stdout, cmd.Stderr = out, errw
	cmd.WaitDelay = j.opts.KillGrace
	// SIGTERM, not SIGKILL, when the launcher dies: an agent then ends
	// its PEs and removes their segments; srun and mpirun end their tasks.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	var feed func()
	switch {
	case head != nil:
		pr, pw, err := os.Pipe()
		if err != nil {
			return err
		}
		defer pr.Close() // the child has its copy
		cmd.Stdin = pr
		feed = func() {
			defer pw.Close()
			if _, err := pw.Write(head); err != nil || tail == nil {
				return
			}
			io.Copy(pw, tail)
		}
	case tail != nil:
		in, copyIn, err := stdinFor(tail)
		if err != nil {
			return err
		}
		cmd.Stdin = in
		if copyIn != nil {
			defer in.Close()
			feed = copyIn
		}
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	u.cmd = cmd
	j.units = append(j.units, u)
	j.unitsUp++
	if feed != nil {
		go feed()
	}
	go func() {
		err := cmd.Wait()
		out.flush()
		errw.flush()
		j.unitEnd <- unitExit{u: u, state: cmd.ProcessState, err: err}
	}()
	return nil
}

// shellWord returns s as one word for a remote shell that runs its
// arguments through a shell (ssh): as is when it has no special
// characters, else single-quoted.
func shellWord(s string) string {
	safe := s != ""
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("/._-+,:@=%", c)) {
			safe = false
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// logfLogger adapts a Logf function to a ucs.Logger that writes the lines
// of every level.
type logfLogger func(format string, args ...any)

func (logfLogger) Enabled(ucs.LogLevel) bool { return true }

func (f logfLogger) Logf(_ ucs.LogLevel, format string, args ...any) { f(format, args...) }
