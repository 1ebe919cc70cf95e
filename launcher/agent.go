package launcher

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/goshmem/goshmem/bootstrap"
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
	// Agent is the agent's id; with no Ranks (one agent per PE, started
	// by a spawner) the id is the rank of the PE.
	Agent int
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
// exits 1 when it cannot join the job, start, or report (its errors go to
// standard error, prefixed with "goshmem-run agent on HOST: ").
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
	if c.Program == "" || c.Size < 1 || c.Agent < 0 {
		return nil, false, fmt.Errorf("incomplete configuration: %w", ucs.ErrInvalidParam)
	}
	for _, r := range c.Ranks {
		if r < 0 || r >= c.Size {
			return nil, false, fmt.Errorf("configuration: rank %d out of range [0, %d): %w", r, c.Size, ucs.ErrInvalidParam)
		}
	}
	return &c, fromEnv, nil
}

// runAgent is the agent; it returns its exit status.
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

	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	logger := log.New(stderr, "goshmem-run agent on "+host+": ", 0)
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
	base = append(base, cfg.Env...)

	type slot struct{ rank, localRank, localSize int }
	var slots []slot
	id := cfg.Agent
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
		slots = []slot{{p.Rank, p.LocalRank, p.LocalSize}}
		id = p.Rank
	} else {
		for i, r := range cfg.Ranks {
			slots = append(slots, slot{r, i, len(cfg.Ranks)})
		}
	}

	agent, err := bootstrap.JoinAgent(bootstrap.Env{JobID: cfg.JobID, Size: cfg.Size, Seed: cfg.Seed, Key: cfg.Key,
		FailureTimeout: cfg.FailureTimeout}, id)
	if err != nil {
		logger.Printf("%v", err)
		return 1
	}
	defer agent.Close()

	g := newGroup(cfg.Program, cfg.Args, len(slots))
	g.tag = cfg.TagOutput
	g.outputDir = cfg.OutputDir
	g.stdout, g.stderr = stdout, stderr
	g.grace = cfg.KillGrace
	if g.grace <= 0 {
		g.grace = DefaultKillGrace
	}
	g.logf = logger.Printf
	g.stallLimit = cmp.Or(cfg.FailureTimeout, bootstrap.DefaultFailureTimeout) / 2
	if cfg.Dir != "" {
		if fi, err := os.Stat(cfg.Dir); err == nil && fi.IsDir() {
			g.dir = cfg.Dir
		}
	}

	// Reports go out one at a time, in the order the PEs ended, without
	// holding up the loop below.
	type report struct {
		rank    int
		how     string
		code    int
		endedBy string // why the agent had told the PE to end, if it had
	}
	reports := make(chan report, len(slots))
	reported := make(chan bool, 1)
	go func() {
		ok := true
		for r := range reports {
			if err := agent.Report(r.rank, host, r.how, r.code, r.endedBy); err != nil {
				logger.Printf("PE %d %s, and the launcher could not be told: %v", r.rank, r.how, err)
				ok = false
			}
		}
		reported <- ok
	}()

	for _, s := range slots {
		env := bootstrap.Env{JobID: cfg.JobID, Rank: s.rank, Size: cfg.Size, LocalRank: s.localRank, LocalSize: s.localSize,
			Seed: cfg.Seed, Key: cfg.Key, FailureTimeout: cfg.FailureTimeout}
		var in io.Reader
		if s.rank == 0 && (cfg.Stdin || fromEnv) {
			in = stdin
		}
		if err := g.start(s.rank, append(base[:len(base):len(base)], env.Environ()...), in); err != nil {
			reports <- report{s.rank, "could not be started (" + cfg.Program + "): " + err.Error(), 127, ""}
		}
	}

	terminated := agent.Terminated()
	done := ctx.Done()
	var endedBy string // why the agent ends its PEs, once it does
	stalls := time.NewTicker(g.stallLimit / 4)
	defer stalls.Stop()
	for g.running > 0 {
		select {
		case <-stalls.C:
			g.checkStalled()
		case e := <-g.exits:
			g.exited(e)
			how, code := describe(e)
			r := report{e.rank, how, code, ""}
			if e.signalled {
				r.endedBy = endedBy
			}
			reports <- r
		case <-terminated:
			terminated = nil
			if agent.SeedGone() {
				logger.Printf("the launcher is gone: ending %d PE(s)", g.running)
				endedBy = cmp.Or(endedBy, "the agent lost the launcher, which "+agent.Why())
			}
			endedBy = cmp.Or(endedBy, "the launcher ends the job: "+agent.Why())
			g.terminate()
		case s := <-sigs:
			logger.Printf("%v: ending %d PE(s)", s, g.running)
			endedBy = cmp.Or(endedBy, "the agent got signal "+s.String())
			g.terminate()
		case <-done:
			done = nil
			endedBy = cmp.Or(endedBy, "the agent was cancelled")
			g.terminate()
		case ranks := <-agent.StallReports():
			g.stallReport(ranks)
		case <-g.kill:
			g.killAll()
		}
	}
	close(reports)
	ok := <-reported
	if err := agent.Close(); err != nil && !errors.Is(err, bootstrap.ErrClosed) {
		logger.Printf("%v", err)
	}
	if !ok {
		return 1
	}
	return 0
}
