package launcher

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/bootstrap"
	"github.com/goshmem/goshmem/ucs"
)

// group starts and watches the PEs of one host: the launcher's own (a job on
// this host only) or an agent's. It forwards their output, gives PE 0 its
// standard input, reports how each ended, removes the named shared-memory
// segments of those that exited, and ends them on request (SIGTERM to the
// process group of each, SIGKILL after the grace period).
type group struct {
	program   string
	args      []string
	dir       string // working directory of the PEs; "" for the caller's
	tag       bool
	cpus      []int  // with BindCore, the CPUs the PEs are pinned to, by local rank
	outputDir string // one file per PE there, instead of stdout and stderr
	stdout    io.Writer
	stderr    io.Writer
	outMu     sync.Mutex // one for all output: lines never mix
	// tagNow turns on the "[pe N] " prefix of output that was not asked to
	// be tagged (tag false): the job fails (tagFromNow). replayed is set
	// once the last lines of a PE that failed were shown (replay).
	tagNow   atomic.Bool
	replayed bool
	grace    time.Duration
	logf     func(format string, args ...any)

	pes     map[int]*proc
	running int
	exits   chan peExit
	ending  bool
	kill    <-chan time.Time // armed by terminate
	// stallLimit is how long a PE may stay stopped (SIGSTOP, SIGTSTP)
	// before checkStalled kills it and reports it as the failure it is:
	// half the job's failure timeout, so that its agent names it before
	// memberlist declares it dead for some reason.
	stallLimit time.Duration
}

// proc is one PE process of a group.
type proc struct {
	rank   int
	cmd    *exec.Cmd
	out    *lineWriter
	errw   *lineWriter
	last   *lastLines // the PE's last lines, when its output is not tagged
	file   *os.File   // the PE's output file (outputDir), if any
	exited bool
	// signalled is set before the group signals the PE while it still
	// runs: its end is then the group's doing (read by the goroutine that
	// waits for it).
	signalled atomic.Bool
	// sent holds a bit for each signal the group sent the PE (1<<signo).
	sent atomic.Uint64
	// stoppedSince is when checkStalled first saw the PE stopped; stalled
	// says how it stalled once checkStalled kills it for it (read by the
	// goroutine that waits for it).
	stoppedSince time.Time
	stalled      atomic.Pointer[bootstrap.EndCause]
}

// peExit is the end of a PE process.
type peExit struct {
	rank  int
	state *os.ProcessState
	err   error
	// signalled: the group had told the PE to end (SIGTERM or SIGKILL)
	// before it ended.
	signalled bool
	// noThread: the PE's runtime said that it could not create a thread.
	noThread bool
	// stalled, when set, says how the PE stalled (EndStopped, EndHung):
	// its group killed it for it.
	stalled *bootstrap.EndCause
}

// endedBy is why the PE of e ended, as its report says it (why, the reason
// the agent had for ending its PEs), or "" when its end was a failure of
// its own: it was not signalled, or it was killed for stalling, whatever
// signal reached it after (a SIGTERM of the job's end finds it dying of the
// stall's SIGKILL, and its stall is then still the job's first cause).
func (e peExit) endedBy(why string) string {
	if !e.signalled || e.stalled != nil {
		return ""
	}
	return why
}

func newGroup(program string, args []string, n int) *group {
	return &group{program: program, args: args, pes: make(map[int]*proc, n), exits: make(chan peExit, n)}
}

// start starts the PE of rank with env. stdin, when not nil, is its
// standard input (see stdinFor); the others read /dev/null. channel, the
// PE's end of its channel to the agent, becomes its descriptor 3.
func (g *group) start(rank, localRank int, env []string, stdin io.Reader, channel *os.File) error {
	p := &proc{rank: rank}
	prefix := peTag(rank)
	if g.outputDir != "" {
		if err := os.MkdirAll(g.outputDir, 0o755); err != nil {
			return fmt.Errorf("output directory: %w", err)
		}
		f, err := os.OpenFile(filepath.Join(g.outputDir, OutputFileName(rank)), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return fmt.Errorf("output file: %w", err)
		}
		p.file = f
		// One file for both streams; whole lines, so that they do not mix.
		p.out = &lineWriter{mu: new(sync.Mutex), dst: f}
		p.errw = &lineWriter{mu: p.out.mu, dst: f}
	} else {
		p.out = &lineWriter{mu: &g.outMu, dst: g.stdout, prefix: prefix}
		p.errw = &lineWriter{mu: &g.outMu, dst: g.stderr, prefix: prefix}
		if !g.tag {
			p.last = new(lastLines)
			p.out.tagOn, p.errw.tagOn = &g.tagNow, &g.tagNow
			p.out.last, p.errw.last = p.last, p.last
		}
	}
	p.errw.threads = &threadWatch{who: "PE " + strconv.Itoa(rank), hint: threadLimitHint}
	cmd := exec.Command(g.program, g.args...)
	cmd.Env = env
	cmd.Dir = g.dir
	cmd.Stdout = p.out
	cmd.Stderr = p.errw
	cmd.ExtraFiles = []*os.File{channel}
	// Let the output of a PE's descendants drain for a while after it
	// exits, not forever.
	cmd.WaitDelay = g.grace
	// Its own process group, so that ending it ends what it started; and
	// killed with the process that started it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var stdinCopy func()
	if stdin != nil {
		in, copyIn, err := stdinFor(stdin)
		if err != nil {
			p.closeFile()
			return err
		}
		cmd.Stdin = in
		stdinCopy = copyIn
		if copyIn != nil {
			defer in.Close() // the child has its copy
		}
	}
	start := cmd.Start
	if len(g.cpus) > 0 {
		start = func() error { return startOnCPU(cmd, g.cpus[localRank%len(g.cpus)]) }
	}
	if err := start(); err != nil {
		p.closeFile()
		return err
	}
	p.cmd = cmd
	g.pes[rank] = p
	g.running++
	if stdinCopy != nil {
		go stdinCopy()
	}
	go func() {
		err := cmd.Wait()
		// Named shared-memory segments (UCX_POSIX_USE_SHM_OPEN) of a PE that
		// died are still in /dev/shm: peers map segments at init, and keep
		// their mappings, so nothing needs the names once the PE is gone.
		if rmErr := ucs.RemoveShmSegments(cmd.Process.Pid); rmErr != nil {
			g.logf("PE %d: removing its shared-memory segments: %v", rank, rmErr)
		}
		p.out.flush()
		p.errw.flush()
		p.closeFile()
		e := peExit{rank: rank, state: cmd.ProcessState, err: err, signalled: p.endedBySignal(cmd.ProcessState), noThread: p.errw.threads.hit}
		e.stalled = p.stalled.Load()
		g.exits <- e
	}()
	return nil
}

func (p *proc) closeFile() {
	if p.file != nil {
		p.file.Close()
	}
}

// OutputFileName is the name of the file, in the output directory
// (Options.OutputDir), that receives the standard output and error of the
// PE of rank.
func OutputFileName(rank int) string { return "pe-" + strconv.Itoa(rank) + ".out" }

// peTag is the prefix of the lines of the PE of rank in tagged output.
func peTag(rank int) []byte { return []byte("[pe " + strconv.Itoa(rank) + "] ") }

// exited records the end of a PE (an event read from g.exits). A PE that
// failed by itself makes the output tagged from now on, and the first such
// PE has its last lines shown again (replay).
func (g *group) exited(e peExit) {
	p := g.pes[e.rank]
	if p == nil || p.exited {
		return
	}
	p.exited = true
	g.running--
	if _, code := describe(e); code != 0 && !e.signalled {
		g.replay(p, e)
	}
}

// tagFromNow prefixes every line of the PEs' output with "[pe N] " from
// now on, when that was not asked for: the job fails, or hangs (a stall
// report was asked for), and the lines must say whose they are.
func (g *group) tagFromNow() { g.tagNow.Store(true) }

// replay handles the first PE of the group that failed by itself, when
// its output was not tagged: it turns tagging on, and shows again, tagged,
// on standard error, the last lines of the PE (see lastLines), which were
// forwarded untagged as the PE wrote them. A PE whose runtime crashed
// needs no replay: its crash report, which says why, was tagged from its
// first line (lineWriter.emit), and is shown once. With an output
// directory it says which file holds the PE's output instead.
func (g *group) replay(p *proc, e peExit) {
	if g.tag || g.replayed {
		return
	}
	g.replayed = true
	how, _ := describe(e)
	if g.outputDir != "" {
		g.logf("PE %d %s; its output is in %s", p.rank, how, filepath.Join(g.outputDir, OutputFileName(p.rank)))
		return
	}
	g.tagFromNow()
	// The PE's writers were flushed before its exit was sent: last is
	// complete, and no longer written.
	lines := p.last.lines()
	if len(lines) == 0 || p.last.crash != nil {
		return
	}
	g.logf("PE %d %s; the last lines it wrote:", p.rank, how)
	prefix := peTag(p.rank)
	var b []byte
	for _, l := range lines {
		b = append(append(append(b, prefix...), l...), '\n')
	}
	g.outMu.Lock()
	defer g.outMu.Unlock()
	g.stderr.Write(b)
}

// terminate sends SIGTERM to every PE still running and arms g.kill.
func (g *group) terminate() {
	if g.ending {
		return
	}
	g.ending = true
	g.tagFromNow()
	for _, p := range g.pes {
		if !p.exited {
			signalPE(p, syscall.SIGTERM)
		}
	}
	g.kill = time.After(g.grace)
}

// killAll sends SIGKILL to every PE still running.
func (g *group) killAll() {
	g.kill = nil
	for _, p := range g.pes {
		if !p.exited {
			g.logf("PE %d did not exit %v after SIGTERM: killing it", p.rank, g.grace)
			signalPE(p, syscall.SIGKILL)
		}
	}
}

// checkStalled kills the PEs that have stayed stopped (process state T:
// SIGSTOP, SIGTSTP) for stallLimit or longer, each as a failure of its own
// that its exit reports (peExit.stalled). Call it every stallLimit/4 or so.
func (g *group) checkStalled() {
	if g.stallLimit <= 0 || g.ending {
		return
	}
	now := time.Now()
	for _, p := range g.pes {
		if p.exited || p.stalled.Load() != nil {
			continue
		}
		if procState(p.cmd.Process.Pid) != 'T' {
			p.stoppedSince = time.Time{}
			continue
		}
		if p.stoppedSince.IsZero() {
			p.stoppedSince = now
			continue
		}
		if d := now.Sub(p.stoppedSince); d >= g.stallLimit {
			g.stall(p.rank, bootstrap.EndCause{Kind: bootstrap.EndStopped, For: d.Round(time.Millisecond)})
		}
	}
}

// stall kills the PE of rank, which stalled as how says (EndStopped,
// EndHung), as a failure of its own that its exit reports
// (peExit.stalled). It reports whether it did: the PE ran and had not
// stalled already.
func (g *group) stall(rank int, how bootstrap.EndCause) bool {
	p := g.pes[rank]
	if p == nil || p.exited || !p.stalled.CompareAndSwap(nil, &how) {
		return false
	}
	g.logf("PE %d %v: killing it", p.rank, how)
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		p.cmd.Process.Kill()
	}
	return true
}

// procState returns the state of process pid (R, S, D, T, t, Z, ...), or 0
// when it cannot be read.
func procState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// pid (comm) S ...: the state follows the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

// signalPE signals the process group of a PE (it leads its own), so that
// what the PE started goes too. A PE that still runs is marked signalled
// first; one that ended already, and is not reaped yet, ended by itself.
func signalPE(p *proc, sig syscall.Signal) {
	pid := p.cmd.Process.Pid
	if !ended(pid) {
		p.sent.Or(1 << uint(sig))
		p.signalled.Store(true)
	}
	if err := syscall.Kill(-pid, sig); err != nil {
		p.cmd.Process.Signal(sig)
	}
}

// endedBySignal reports whether the end of the PE, whose state is st, was
// the group's doing: the group had signalled it, and it did not die of a
// signal that the group never sent. A PE that a SIGKILL of its own (or the
// kernel's) ends is still dying, not yet a zombie, when the group's SIGTERM
// finds it; its end is its own.
func (p *proc) endedBySignal(st *os.ProcessState) bool {
	var ws syscall.WaitStatus
	if st != nil {
		ws, _ = st.Sys().(syscall.WaitStatus)
	}
	return p.endedByStatus(ws)
}

// endedByStatus is endedBySignal for the wait status ws.
func (p *proc) endedByStatus(ws syscall.WaitStatus) bool {
	if !p.signalled.Load() {
		return false
	}
	if ws.Signaled() && ws.Signal() < 64 {
		return p.sent.Load()&(1<<uint(ws.Signal())) != 0
	}
	return true
}

// ended reports whether the child process pid has ended: it is waitable (a
// zombie), or reaped already. It reaps nothing.
func ended(pid int) bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	// Without a waitable child the kernel leaves the zeroed info as is.
	return err != nil || info.Signo == int32(unix.SIGCHLD)
}

// stdinFor returns the file a PE reads as stdin. A regular file or a pipe
// is handed over as is. Anything else (a terminal, which a PE in its own
// process group must not read, or a plain io.Reader) goes through a pipe
// fed by the returned copy function; it copies until r ends or the reader
// stops reading.
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

// describe says how a PE ended, and the exit code that stands for it.
func describe(e peExit) (bootstrap.EndCause, int) {
	if e.stalled != nil {
		return *e.stalled, 1
	}
	end, code := describeStatus(e)
	if e.noThread {
		addDetail(&end, "it could not create a thread, "+threadLimitHint())
	}
	return end, code
}

// addDetail adds more words to the detail of end.
func addDetail(end *bootstrap.EndCause, more string) {
	if end.Detail != "" {
		more = end.Detail + "; " + more
	}
	end.Detail = more
}

// describeStatus says how a PE ended, from its status.
func describeStatus(e peExit) (bootstrap.EndCause, int) {
	if e.state == nil {
		return bootstrap.EndCause{Kind: bootstrap.EndNotWaited, Detail: e.err.Error()}, 1
	}
	if ws, ok := e.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		sig := ws.Signal()
		return bootstrap.EndCause{Kind: bootstrap.EndSignaled, Signal: sig}, 128 + int(sig)
	}
	code := e.state.ExitCode()
	end := bootstrap.EndCause{Kind: bootstrap.EndExited, Status: code}
	if code == 0 && e.err != nil && !errors.Is(e.err, exec.ErrWaitDelay) {
		end.Detail = e.err.Error() // "exited with status 0 but: ..."
		return end, 1
	}
	return end, code
}
