// Package launcher starts the PEs of a goshmem job on this host, as
// goshmem-run does: it runs the bootstrap seed with a fresh job key, starts
// each PE with the environment of the launcher contract (see package
// bootstrap), forwards their output line by line, and ends the whole job
// as soon as one PE fails.
package launcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/goshmem/goshmem/uct/sm"
	"io"
	"log"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/goshmem/goshmem/bootstrap"
	"github.com/goshmem/goshmem/ucs"
)

// DefaultKillGrace is the time PEs get between SIGTERM and SIGKILL when the
// launcher ends a job.
const DefaultKillGrace = 2 * time.Second

// Options describe a job for Run.
type Options struct {
	// NP is the number of PEs (at least 1).
	NP int
	// Program is the executable each PE runs: a path, or a name looked up
	// in PATH. Args are its arguments (without the program name).
	Program string
	Args    []string
	// Env is added to every PE's environment, after the launcher's own
	// (os.Environ()); the GOSHMEM_* variables of the launcher contract
	// come last and win.
	Env []string
	// TagOutput prefixes every line a PE writes, on stdout and stderr,
	// with "[pe N] ". A last line without newline then gets one.
	TagOutput bool
	// Stdin goes to PE 0; the other PEs read /dev/null. Stdout and Stderr
	// receive the PEs' output, one whole line at a time (lines over 64 KiB
	// are forwarded in pieces). Nil means os.Stdin, os.Stdout, os.Stderr.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// BindAddr is the IP address of the bootstrap seed. Empty means
	// "127.0.0.1".
	BindAddr string
	// KillGrace is how long PEs get to exit after SIGTERM before SIGKILL
	// when the job is ended. Zero means DefaultKillGrace.
	KillGrace time.Duration
	// Logf receives the launcher's messages (which PE failed, how).
	// Nil means standard error, each message prefixed with
	// "goshmem-run: ".
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

// Run starts opts.NP PEs running opts.Program and waits for them.
//
// Each PE runs in its own process group and is killed (SIGKILL) if the
// launcher's process dies. Run returns 0 and a nil error when every PE
// exited with status 0, having finalized (bootstrap.Member.Close) or never
// joined the job.
//
// The first PE that exits with a non-zero status or by a signal, exits
// with status 0 without finalizing while others still run and some PE
// joined the job, or is reported failed by the seed, ends the job: Run
// logs which PE on which host ended how, sends SIGTERM to the other PEs,
// SIGKILL to those still there after KillGrace, and returns a *JobError
// with the exit code: the PE's status, 128+signal for a signal, 1
// otherwise. When ctx is done first, Run ends every PE the same way and
// returns 1 and ctx.Err(). Other errors (the program cannot be started)
// end the job too, with code 127 for a program that cannot be started.
func Run(ctx context.Context, opts Options) (exitCode int, err error) {
	if opts.NP < 1 {
		return 2, fmt.Errorf("launcher: %d PEs: %w", opts.NP, ucs.ErrInvalidParam)
	}
	if opts.Program == "" {
		return 2, fmt.Errorf("launcher: no program: %w", ucs.ErrInvalidParam)
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
	if opts.Logf == nil {
		l := log.New(os.Stderr, "goshmem-run: ", 0)
		opts.Logf = l.Printf
	}
	j := &job{opts: opts}
	return j.run(ctx)
}

// job is the state of one Run.
type job struct {
	opts  Options
	seed  *bootstrap.Seed
	host  string
	pes   []*pe
	exits chan peExit

	running int
	first   *JobError // the failure that ended the job
	ending  bool      // PEs were told to terminate
	killed  bool      // PEs were sent SIGKILL
	kill    <-chan time.Time
	// idle holds the ranks that exited 0 without finalize and without
	// having joined while no PE had joined: they fail the job if a PE
	// joins later while others still run.
	idle []int
}

type pe struct {
	rank   int
	cmd    *exec.Cmd
	out    *lineWriter
	errw   *lineWriter
	stdin  *os.File // write end of PE 0's stdin pipe, if any
	exited bool
}

type peExit struct {
	rank  int
	state *os.ProcessState
	err   error
}

func (j *job) run(ctx context.Context) (int, error) {
	o := &j.opts
	key, err := bootstrap.NewKey()
	if err != nil {
		return 1, fmt.Errorf("launcher: %w", err)
	}
	var logger *log.Logger
	if v := os.Getenv(bootstrap.EnvDebug); v != "" && v != "0" {
		logger = log.New(logfWriter(o.Logf), "seed: ", 0)
	}
	j.seed, err = bootstrap.NewSeed(bootstrap.SeedConfig{Size: o.NP, Key: key, BindAddr: o.BindAddr, Logger: logger})
	if err != nil {
		return 1, fmt.Errorf("launcher: %w", err)
	}
	defer j.seed.Close()
	j.host, _ = os.Hostname()
	if j.host == "" {
		j.host = "localhost"
	}

	base := append(os.Environ(), o.Env...)
	outMu := new(sync.Mutex) // one for all output: lines never mix
	j.exits = make(chan peExit, o.NP)
	for r := range o.NP {
		env := bootstrap.Env{JobID: j.seed.JobID(), Rank: r, Size: o.NP, LocalRank: r, LocalSize: o.NP,
			Seed: j.seed.Addr(), Key: key}
		if err := j.start(r, append(base[:len(base):len(base)], env.Environ()...), outMu); err != nil {
			o.Logf("cannot start PE %d (%s): %v", r, o.Program, err)
			j.terminate()
			j.wait(ctx)
			return 127, fmt.Errorf("launcher: starting PE %d: %w", r, err)
		}
	}
	j.wait(ctx)
	switch {
	case j.first != nil:
		return j.first.Code, j.first
	case ctx.Err() != nil:
		return 1, ctx.Err()
	}
	return 0, nil
}

// start starts the PE of rank r.
func (j *job) start(r int, env []string, mu *sync.Mutex) error {
	o := &j.opts
	p := &pe{rank: r}
	var prefix []byte
	if o.TagOutput {
		prefix = []byte("[pe " + strconv.Itoa(r) + "] ")
	}
	p.out = &lineWriter{mu: mu, dst: o.Stdout, prefix: prefix}
	p.errw = &lineWriter{mu: mu, dst: o.Stderr, prefix: prefix}
	cmd := exec.Command(o.Program, o.Args...)
	cmd.Env = env
	cmd.Stdout = p.out
	cmd.Stderr = p.errw
	// Let the output of a PE's descendants drain for a while after it
	// exits, not forever.
	cmd.WaitDelay = o.KillGrace
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var stdinCopy func()
	if r == 0 {
		in, copyIn, err := stdinFor(o.Stdin)
		if err != nil {
			return err
		}
		cmd.Stdin = in
		stdinCopy = copyIn
		if copyIn != nil {
			defer in.Close() // the child has its copy
		}
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	p.cmd = cmd
	j.pes = append(j.pes, p)
	j.running++
	if stdinCopy != nil {
		go stdinCopy()
	}
	go func() {
		err := cmd.Wait()
		// Named shared-memory segments (UCX_POSIX_USE_SHM_OPEN) of a PE that
		// died are still in /dev/shm: peers map segments at init, and keep
		// their mappings, so nothing needs the names once the PE is gone.
		if rmErr := sm.RemoveStaleSegments(cmd.Process.Pid); rmErr != nil {
			j.opts.Logf("PE %d: removing its shared-memory segments: %v", r, rmErr)
		}
		p.out.flush()
		p.errw.flush()
		j.exits <- peExit{rank: r, state: cmd.ProcessState, err: err}
	}()
	return nil
}

// stdinFor returns the file PE 0 reads as stdin. A regular file or a pipe
// is handed over as is. Anything else (a terminal, which a PE in its own
// process group must not read, or a plain io.Reader) goes through a pipe
// fed by the returned copy function; the launcher copies until r ends or
// PE 0 stops reading.
func stdinFor(r io.Reader) (*os.File, func(), error) {
	if f, ok := r.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice == 0 {
			return f, nil, nil
		}
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	return pr, func() {
		io.Copy(pw, r)
		pw.Close()
	}, nil
}

// wait handles PE exits, seed failure reports and cancellation until
// every PE has exited.
func (j *job) wait(ctx context.Context) {
	failures := j.seed.Failures()
	done := ctx.Done()
	var ticker *time.Ticker
	var tick <-chan time.Time
	defer func() {
		if ticker != nil {
			ticker.Stop()
		}
	}()
	for j.running > 0 {
		if len(j.idle) > 0 && ticker == nil {
			ticker = time.NewTicker(100 * time.Millisecond)
			tick = ticker.C
		}
		select {
		case e := <-j.exits:
			j.running--
			j.pes[e.rank].exited = true
			j.exited(e)
		case f, ok := <-failures:
			if !ok {
				failures = nil
				break
			}
			if f.Rank >= 0 && f.Rank < len(j.pes) && j.pes[f.Rank].exited {
				break // its exit was handled
			}
			j.fail(&JobError{Rank: f.Rank, Host: f.Host, How: "failed: " + f.Reason, Code: 1})
		case <-tick:
			j.checkIdle()
		case <-done:
			done = nil
			if !j.ending {
				j.opts.Logf("interrupted: terminating %d running PE(s)", j.running)
				j.terminate()
			}
		case <-j.kill:
			j.kill = nil
			j.killAll()
		}
	}
}

// exited judges the exit of a PE.
func (j *job) exited(e peExit) {
	if j.ending {
		return // the launcher is ending it
	}
	how, code := describe(e)
	switch {
	case code != 0:
		j.fail(&JobError{Rank: e.rank, Host: j.host, How: how, Code: code})
	case j.seed.Finalized(e.rank) || j.running == 0:
	case j.seed.Joined(e.rank) || j.anyJoined():
		j.fail(&JobError{Rank: e.rank, Host: j.host, How: "exited without finalize (status 0) while other PEs still run", Code: 1})
	default:
		// Not a goshmem program, or one that has not initialized yet.
		j.idle = append(j.idle, e.rank)
	}
}

// checkIdle fails the job when PEs joined after others left unfinalized.
func (j *job) checkIdle() {
	if j.ending || len(j.idle) == 0 || !j.anyJoined() {
		return
	}
	r := j.idle[0]
	how := "exited before joining the job (status 0) while other PEs joined it"
	if j.seed.Joined(r) { // the seed learned of its join late
		how = "exited without finalize (status 0) while other PEs still run"
	}
	j.fail(&JobError{Rank: r, Host: j.host, How: how, Code: 1})
}

func (j *job) anyJoined() bool {
	for r := range j.pes {
		if j.seed.Joined(r) {
			return true
		}
	}
	return false
}

// fail records the failure that ends the job and terminates the others.
func (j *job) fail(e *JobError) {
	if j.ending {
		return
	}
	j.first = e
	if j.running > 0 {
		j.opts.Logf("%v; terminating the %d running PE(s)", e, j.running)
	} else {
		j.opts.Logf("%v", e)
	}
	j.terminate()
}

// terminate sends SIGTERM to every PE still running and arms SIGKILL.
func (j *job) terminate() {
	if j.ending {
		return
	}
	j.ending = true
	for _, p := range j.pes {
		if !p.exited {
			signalPE(p, syscall.SIGTERM)
		}
	}
	j.kill = time.After(j.opts.KillGrace)
}

func (j *job) killAll() {
	for _, p := range j.pes {
		if !p.exited {
			j.opts.Logf("PE %d did not exit %v after SIGTERM: killing it", p.rank, j.opts.KillGrace)
			signalPE(p, syscall.SIGKILL)
		}
	}
}

// signalPE signals the process group of a PE (it leads its own), so that
// what the PE started goes too.
func signalPE(p *pe, sig syscall.Signal) {
	pid := p.cmd.Process.Pid
	if err := syscall.Kill(-pid, sig); err != nil {
		p.cmd.Process.Signal(sig)
	}
}

// describe says how a PE ended, and the exit code that stands for it.
func describe(e peExit) (string, int) {
	if e.state == nil {
		return "could not be waited for: " + e.err.Error(), 1
	}
	if ws, ok := e.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		sig := ws.Signal()
		return fmt.Sprintf("was killed by signal %d (%v)", int(sig), sig), 128 + int(sig)
	}
	code := e.state.ExitCode()
	if code != 0 {
		return "exited with status " + strconv.Itoa(code), code
	}
	if e.err != nil && !errors.Is(e.err, exec.ErrWaitDelay) {
		return "exited with status 0 but: " + e.err.Error(), 1
	}
	return "exited with status 0", 0
}

// logfWriter adapts a Logf function to an io.Writer for log.Logger.
type logfWriter func(format string, args ...any)

func (f logfWriter) Write(p []byte) (int, error) {
	f("%s", bytes.TrimSuffix(p, []byte("\n")))
	return len(p), nil
}
