package launcher

import (
	"bytes"
	"cmp"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/goshmem/goshmem/bootstrap"
	"github.com/goshmem/goshmem/bootstrap/cluster"
	"github.com/goshmem/goshmem/ucs"
)

// AgentArg is the argument that makes a binary run as an agent (see
// AgentMain): the launcher starts agents as "AgentPath AgentArg".
const AgentArg = "--goshmem-agent"

// EnvAgentConfig carries an agent's configuration when a spawner (srun,
// mpirun) starts the agents; agents started directly or through a remote
// shell read it from the first line of their standard input instead, so
// that the job key never appears on a command line.
const EnvAgentConfig = "GOSHMEM_AGENT_CONFIG"

// maxConfigLine bounds the configuration line an agent reads.
const maxConfigLine = 1 << 20

// agentConfig is what the launcher tells an agent.
type agentConfig struct {
	JobID          string
	Seed           string
	Key            []byte
	Size           int
	FailureTimeout time.Duration
	// Agent is the agent's id, and Agents the number of agents of the
	// job; with no Ranks (one agent per PE, started by a spawner) the id
	// is the rank of the PE and there are Size agents.
	Agent  int
	Agents int
	// Ranks are the PEs to start, their local ranks in this order. Empty:
	// the one PE that the spawner's variables name (see
	// bootstrap.PlaceFromOS).
	Ranks     []int
	Program   string
	Args      []string
	Env       []string // added to the PEs' environment
	Dir       string   // working directory of the PEs, if it exists here
	TagOutput bool
	OutputDir string
	KillGrace time.Duration
	BindTo    Binding
	// Stdin: PE 0 reads the agent's standard input (the rest of it, after
	// the configuration line).
	Stdin bool
}

// AgentMain runs this process as an agent when it was started as one
// (os.Args[1] is AgentArg), and returns its exit status and true; it
// returns false at once otherwise. goshmem-run's main calls it first; so
// must the main (or TestMain) of any binary given as Options.AgentPath:
//
//	if code, ok := launcher.AgentMain(); ok {
//		os.Exit(code)
//	}
//
// An agent reads its configuration (from GOSHMEM_AGENT_CONFIG, or else from
// the first line of its standard input), joins the job's bootstrap as an
// agent, starts its PEs, forwards their output to its own standard output
// and error (tagged as the launcher asked) or to the output directory,
// reports to the seed how each PE ended, and exits 0 once every PE ended and
// was reported. When the launcher ends the job, when the launcher is gone
// (memberlist notices within the failure timeout), or on SIGTERM, SIGINT or
// SIGHUP, it ends its PEs: SIGTERM, then SIGKILL after the kill grace. It
// removes the named shared-memory segments of every PE that exited. It
// exits 71, before joining, when its PEs cannot all start under the limit
// on processes and threads (ulimit -u, the cgroup's pids.max), and 1 when
// it cannot join the job, start, or report (its errors go to standard
// error, prefixed with "goshmem-run agent on HOST: ").
func AgentMain() (int, bool) {
	if len(os.Args) < 2 || os.Args[1] != AgentArg {
		return 0, false
	}
	return runAgent(context.Background(), os.Stdin, os.Stdout, os.Stderr), true
}

// readAgentConfig returns the agent's configuration: from EnvAgentConfig,
// or else from the first line of stdin, read one byte at a time so that
// nothing after it is consumed.
func readAgentConfig(stdin io.Reader) (*agentConfig, bool, error) {
	var line []byte
	fromEnv := false
	if s, ok := os.LookupEnv(EnvAgentConfig); ok {
		line, fromEnv = []byte(s), true
	} else {
		var b [1]byte
		for {
			n, err := stdin.Read(b[:])
			if n == 1 {
				if b[0] == '\n' {
					break
				}
				line = append(line, b[0])
				if len(line) > maxConfigLine {
					return nil, false, fmt.Errorf("configuration line longer than %d bytes: %w", maxConfigLine, ucs.ErrInvalidParam)
				}
			}
			if err != nil {
				return nil, false, fmt.Errorf("reading the configuration from standard input: %w", err)
			}
		}
	}
	var c agentConfig
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, false, fmt.Errorf("malformed configuration: %w: %w", err, ucs.ErrInvalidParam)
	}
	if c.Program == "" || c.Size < 1 || c.Agent < 0 || c.Agents < 0 || (len(c.Ranks) > 0 && c.Agent >= max(c.Agents, 1)) {
		return nil, false, fmt.Errorf("incomplete configuration: %w", ucs.ErrInvalidParam)
	}
	for _, r := range c.Ranks {
		if r < 0 || r >= c.Size {
			return nil, false, fmt.Errorf("configuration: rank %d out of range [0, %d): %w", r, c.Size, ucs.ErrInvalidParam)
		}
	}
	return &c, fromEnv, nil
}

// runAgent is the agent process; it returns its exit status.
func runAgent(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	// With the launcher gone, writing to its pipes fails: the agent must
	// go on and end its PEs, not die of SIGPIPE. (Handled, not ignored:
	// the PEs get the default disposition back.)
	pipes := make(chan os.Signal, 1)
	signal.Notify(pipes, syscall.SIGPIPE)
	defer signal.Stop(pipes)

	logger := log.New(stderr, "goshmem-run agent on "+hostName()+": ", 0)
	cfg, fromEnv, err := readAgentConfig(stdin)
	if err != nil {
		logger.Printf("%v", err)
		return 1
	}
	// The PEs' environment: this process's, without what concerns agents
	// and without a place of the launcher's own, then the launcher's
	// additions, then the contract.
	var base []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if name == EnvAgentConfig {
			continue
		}
		base = append(base, kv)
	}
	run := &agentRun{cfg: cfg, base: append(base, cfg.Env...), stdout: stdout, stderr: stderr, logf: logger.Printf, sigs: sigs}
	if cfg.Stdin || fromEnv {
		run.stdin = stdin
	}
	if len(cfg.Ranks) == 0 {
		p, ok, err := bootstrap.PlaceFromOS()
		switch {
		case err != nil:
			logger.Printf("%v", err)
			return 1
		case !ok:
			logger.Printf("no rank: the spawner set none of GOSHMEM_RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID")
			return 1
		case p.Size != cfg.Size:
			logger.Printf("the spawner started %d processes (%s's size), for a job of %d PEs", p.Size, p.Source, cfg.Size)
			return 1
		}
		run.slots = []slot{{p.Rank, p.LocalRank, p.LocalSize}}
		cfg.Agent, cfg.Agents = p.Rank, cfg.Size
	} else {
		for i, r := range cfg.Ranks {
			run.slots = append(run.slots, slot{r, i, len(cfg.Ranks)})
		}
	}
	return run.serve(ctx)
}

// slot is the place of a PE an agent starts.
type slot struct{ rank, localRank, localSize int }

// agentRun is an agent at work: in its own process (runAgent), or in the
// launcher's for a job on this host alone.
type agentRun struct {
	cfg            *agentConfig
	slots          []slot
	base           []string // the PEs' environment, before the contract
	stdin          io.Reader
	stdout, stderr io.Writer
	logf           func(format string, args ...any)
	sigs           <-chan os.Signal     // nil in the launcher's process
	joined         func(*cluster.Agent) // if set, gets the agent once it joined
}

// hostName returns this host's name, or "localhost".
func hostName() string {
	if h, _ := os.Hostname(); h != "" {
		return h
	}
	return "localhost"
}

// serve joins the job, starts the PEs, reports how each ended, and ends
// them when the launcher ends the job, when the launcher is gone, on a
// signal (sigs) or when ctx is done. It returns the agent's exit status.
func (r *agentRun) serve(ctx context.Context) int {
	// PEs that cannot all start would die one by one with crash dumps,
	// and this agent with them.
	if err := checkProcessRoom(len(r.slots), r.cfg.Program, 0); err != nil {
		r.logf("cannot start %d PE(s): %v", len(r.slots), err)
		return startStatus(err)
	}
	agent, err := r.join()
	if err != nil {
		r.logf("%v", err)
		return 1
	}
	defer agent.Close()
	if r.joined != nil {
		r.joined(agent)
	}
	s := &agentServe{agentRun: r, agent: agent, host: hostName(),
		failureTimeout: cmp.Or(r.cfg.FailureTimeout, bootstrap.DefaultFailureTimeout)}
	if s.g, err = s.newGroup(); err != nil {
		r.logf("%v", err)
		return 1
	}
	s.reports = startReporter(agent, len(r.slots), r.logf)
	s.startPEs()
	s.loop(ctx)
	ok := s.reports.finish()
	if os.Getenv(EnvStats) != "" {
		r.logf("%s", statsLine(agent, len(r.slots)))
	}
	if err := agent.Close(); err != nil && !errors.Is(err, bootstrap.ErrClosed) {
		r.logf("%v", err)
	}
	if !ok {
		return 1
	}
	return 0
}

// join joins the job's bootstrap as the agent of r's slots.
func (r *agentRun) join() (*cluster.Agent, error) {
	cfg := r.cfg
	ranks := make([]int, len(r.slots))
	for i, s := range r.slots {
		ranks[i] = s.rank
	}
	return cluster.JoinAgent(bootstrap.Env{JobID: cfg.JobID, Size: cfg.Size, Seed: cfg.Seed, Key: cfg.Key,
		FailureTimeout: cfg.FailureTimeout}, cluster.AgentConfig{ID: cfg.Agent, Agents: cmp.Or(cfg.Agents, 1), Ranks: ranks,
		Node: hex.EncodeToString(ucs.ShmDomain())})
}

// agentServe is an agent's serve once it joined the job: its PEs' group,
// the reports of their ends on their way to the launcher, and why the agent
// ends its PEs, once it does.
type agentServe struct {
	*agentRun
	agent          *cluster.Agent
	host           string
	failureTimeout time.Duration
	g              *group
	reports        *reporter
	endedBy        string // why the agent ends its PEs, once it does
}

// newGroup returns the group of the agent's PEs, as the configuration
// says: output, kill grace, binding, stall limit and directory.
func (s *agentServe) newGroup() (*group, error) {
	cfg := s.cfg
	g := newGroup(cfg.Program, cfg.Args, len(s.slots))
	g.tag = cfg.TagOutput
	g.outputDir = cfg.OutputDir
	g.stdout, g.stderr = s.stdout, s.stderr
	g.grace = cfg.KillGrace
	if g.grace <= 0 {
		g.grace = DefaultKillGrace
	}
	g.logf = s.logf
	if cfg.BindTo == BindCore && len(cfg.Ranks) > 0 {
		cpus, err := allowedCPUs()
		if err != nil {
			return nil, fmt.Errorf("cannot bind PEs to cores: %w", err)
		}
		g.cpus = cpus
	}
	g.stallLimit = s.failureTimeout / 2
	if cfg.Dir != "" {
		if fi, err := os.Stat(cfg.Dir); err == nil && fi.IsDir() {
			g.dir = cfg.Dir
		}
	}
	return g, nil
}

// startPEs starts a PE in each slot, with its channel to the agent. The
// PEs that cannot be started are reported together, once every PE that
// can be started runs: the launcher, which names the first, then counts
// as running only the PEs that run.
func (s *agentServe) startPEs() {
	cfg := s.cfg
	base := s.base[:len(s.base):len(s.base)]
	if len(s.slots) > 0 {
		if procs := shareOfCores(base, s.slots[0].localSize); procs != "" {
			base = append(base, procs)
		}
	}
	var notStarted []cluster.PEEnd
	for _, sl := range s.slots {
		env := bootstrap.Env{JobID: cfg.JobID, Rank: sl.rank, Size: cfg.Size, LocalRank: sl.localRank, LocalSize: sl.localSize,
			Seed: cfg.Seed, Key: cfg.Key, FailureTimeout: s.failureTimeout, AgentFD: peAgentFD}
		var in io.Reader
		if sl.rank == 0 {
			in = s.stdin
		}
		channel, err := s.agent.Attach(sl.rank)
		if err == nil {
			err = s.g.start(sl.rank, sl.localRank, append(base[:len(base):len(base)], env.Environ()...), in, channel)
			channel.Close() // the PE has its copy
		}
		if err != nil {
			notStarted = append(notStarted, cluster.PEEnd{Rank: sl.rank, Host: s.host, Code: startStatus(err),
				End: bootstrap.EndCause{Kind: bootstrap.EndNotStarted, Detail: cfg.Program + ": " + startError(err).Error()}})
		}
	}
	if len(notStarted) > 0 {
		s.reports.send(notStarted...)
	}
}

// loop serves the PEs and the job until every PE ended: it reports each
// PE's end, checks for stopped PEs, answers stall reports, and ends the
// PEs when the launcher ends the job or is gone, on a signal, or when ctx
// is done.
func (s *agentServe) loop(ctx context.Context) {
	terminated := s.agent.Terminated()
	done := ctx.Done()
	stalls := time.NewTicker(s.g.stallLimit / 4)
	defer stalls.Stop()
	for s.g.running > 0 {
		select {
		case <-stalls.C:
			s.g.checkStalled()
		case rank := <-s.agent.Silent():
			s.silent(rank)
		case e := <-s.g.exits:
			s.exited(e)
		case <-terminated:
			terminated = nil
			s.launcherEnds()
		case sig := <-s.sigs:
			s.logf("%v: ending %d PE(s)", sig, s.g.running)
			s.end("the agent got signal " + sig.String())
		case <-done:
			done = nil
			s.end("the agent was cancelled")
		case ranks := <-s.agent.StallReports():
			s.g.stallReport(ranks)
		case <-s.g.kill:
			s.g.killAll()
		}
	}
}

// silent reports the end of a PE that stopped answering the agent: hung
// or frozen, it may not die before it runs again, so its end is reported
// now, and again (to no effect) when it exits.
func (s *agentServe) silent(rank int) {
	how := bootstrap.EndCause{Kind: bootstrap.EndHung, For: s.failureTimeout - s.failureTimeout/8, Limit: s.failureTimeout}
	if s.g.stall(rank, how) {
		s.reports.send(cluster.PEEnd{Rank: rank, Host: s.host, End: how, Code: 1})
	}
}

// exited reports how a PE ended, and why the agent had told it to end, if
// it had.
func (s *agentServe) exited(e peExit) {
	s.g.exited(e)
	end, code := describe(e)
	if err := s.agent.VersionMismatch(e.rank); err != nil {
		addDetail(&end, err.Error())
	}
	s.reports.send(cluster.PEEnd{Rank: e.rank, Host: s.host, End: end, Code: code, EndedBy: e.endedBy(s.endedBy)})
}

// launcherEnds ends the PEs when the launcher ends the job, or is gone.
func (s *agentServe) launcherEnds() {
	why := "the launcher ends the job: " + s.agent.Why()
	if s.agent.SeedGone() {
		s.logf("the launcher is gone: ending %d PE(s)", s.g.running)
		why = "the agent lost the launcher, which " + s.agent.Why()
	}
	s.end(why)
}

// end ends the PEs, for why unless the agent ends them already.
func (s *agentServe) end(why string) {
	s.endedBy = cmp.Or(s.endedBy, why)
	s.g.terminate()
}

// reporter posts an agent's reports of its PEs' ends to the seed, in the
// order the PEs ended, without holding up the agent's loop; those made
// while one is in flight travel together, and so do those of each batch
// (the PEs that could not be started).
type reporter struct {
	batches chan []cluster.PEEnd
	ok      chan bool // whether the launcher was told every end, once all went
}

// startReporter starts the reporter of the agent of pes PEs; logf says
// which ends the launcher could not be told.
func startReporter(agent *cluster.Agent, pes int, logf func(format string, args ...any)) *reporter {
	rep := &reporter{batches: make(chan []cluster.PEEnd, 2*pes+1), ok: make(chan bool, 1)}
	go rep.post(agent, logf)
	return rep
}

// post posts each batch as it comes, then waits for every post to be
// answered.
func (rep *reporter) post(agent *cluster.Agent, logf func(format string, args ...any)) {
	type posted struct {
		batch []cluster.PEEnd
		done  <-chan error
	}
	var all []posted
	for batch := range rep.batches {
		all = append(all, posted{batch, agent.Post(batch...)})
	}
	ok := true
	for _, p := range all {
		if err := <-p.done; err != nil {
			for _, e := range p.batch {
				logf("PE %d %v, and the launcher could not be told: %v%s", e.Rank, e.End, err, strangersNote(agent))
			}
			ok = false
		}
	}
	rep.ok <- ok
}

// send reports a batch of ends.
func (rep *reporter) send(batch ...cluster.PEEnd) { rep.batches <- batch }

// finish reports whether the launcher was told every end sent, once it
// was answered for each.
func (rep *reporter) finish() bool {
	close(rep.batches)
	return <-rep.ok
}

// strangersNote says what agent dropped of the traffic that did not
// authenticate, if it dropped any: the flood that may have cut it off.
func strangersNote(agent *cluster.Agent) string {
	if s := agent.Strangers(); s.Any() {
		return " (this agent's port was flooded: it dropped " + s.String() + ")"
	}
	return ""
}

// peAgentFD is the descriptor number of a PE's channel to its agent: the
// first after standard input, output and error.
const peAgentFD = 3

// EnvStats, when set to a non-empty value, has every agent write its
// bootstrap counters (cluster.Stats) on its standard error as it ends, on
// one line that starts with "bootstrap-stats".
const EnvStats = "GOSHMEM_STATS"

// statsLine formats the counters of agent, which started pes PEs.
func statsLine(agent *cluster.Agent, pes int) string {
	s := agent.Stats()
	return fmt.Sprintf("bootstrap-stats agent=%d pes=%d msgs_sent=%d bytes_sent=%d msgs_received=%d bytes_received=%d "+
		"packets_sent=%d packet_bytes_sent=%d packets_received=%d packet_bytes_received=%d "+
		"streams_opened=%d stream_bytes_sent=%d streams_accepted=%d stream_bytes_received=%d "+
		"local_frames=%d local_bytes=%d collectives=%d table_bytes=%d max_silence_ms=%d",
		agent.ID(), pes, s.MsgsSent, s.BytesSent, s.MsgsReceived, s.BytesReceived,
		s.PacketsSent, s.PacketBytesSent, s.PacketsReceived, s.PacketBytesReceived,
		s.StreamsOpened, s.StreamBytesSent, s.StreamsAccepted, s.StreamBytesReceived,
		s.LocalFrames, s.LocalBytes, s.Collectives, s.TableBytes, s.MaxSilence.Milliseconds())
}

// shareOfCores returns the GOMAXPROCS setting of the PEs of a host that
// runs pes of them on fewer cores, "GOMAXPROCS=1" (a PE's share of the
// cores, rounded up to one), or "" where the host has a core for each PE
// or the environment env sets GOMAXPROCS already. shmem.Init would set the same
// share itself, but changing GOMAXPROCS stops the world of a runtime that
// started with a processor per core: 4% of a PE's CPU in a 64-PE start
// on 2 cores.
func shareOfCores(env []string, pes int) string {
	if pes <= runtime.NumCPU() {
		return ""
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, "GOMAXPROCS=") {
			return ""
		}
	}
	return "GOMAXPROCS=1"
}
