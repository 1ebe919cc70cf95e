package cluster

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"fmt"
	"log"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/goshmem/goshmem/internal/jobkey"
	"github.com/goshmem/goshmem/ucs"
	"github.com/hashicorp/memberlist"

	"github.com/goshmem/goshmem/bootstrap"
	"github.com/goshmem/goshmem/bootstrap/internal/wire"
)

// SeedConfig configures a Seed.
type SeedConfig struct {
	// Size is the number of PEs in the job (at least 1).
	Size int
	// Agents is the number of agents (see JoinAgent) that will join the
	// job, with ids 0 to Agents-1 (at least 1): one per host, or one per
	// PE under a spawner.
	Agents int
	// Key is the job key (16, 24 or 32 bytes), used as memberlist's
	// encryption key: only nodes that have it can join or talk to the job.
	Key []byte
	// JobID names the job (1 to 64 characters of [A-Za-z0-9._-]). Empty
	// means a random one; Seed.JobID reports it.
	JobID string
	// BindAddr is the IP address the seed listens on. Empty means
	// "127.0.0.1", which only reaches agents of the same host.
	BindAddr string
	// Logger receives memberlist's log and the seed's diagnostics (such
	// as rejected messages), each at the level of its memberlist tag
	// ([ERR], [WARN], [INFO], [DEBUG]; LogInfo without one). Nil discards
	// them.
	Logger ucs.Logger
	// FailureTimeout is how long the job may take to notice a member that
	// stopped answering; zero means DefaultFailureTimeout. Agents and PEs
	// should use the same (the launcher hands it over in
	// GOSHMEM_FAILURE_TIMEOUT).
	FailureTimeout time.Duration
}

// ReportKind tells what a Report is about.
type ReportKind int

// The kinds of Report.
const (
	// ReportExit: an agent reports that the PE Rank ended; End says how
	// (an exit status, a signal, ...) and Code is the exit code that
	// stands for it.
	ReportExit ReportKind = 1 + iota
	// ReportGlobalExit: the PE Rank asked to end the whole job with exit
	// status Code (bootstrap.Member.GlobalExit).
	ReportGlobalExit
	// ReportAgentLeft: the agent Agent left the job, or was declared
	// dead. An agent leaves once every PE it started ended.
	ReportAgentLeft
	// ReportAbandoned: the PE Rank left the job after it finalized (it
	// exited, and its end was reported as such) while a collective that
	// needs it was pending, or started after: the PEs in it wait for
	// Rank forever. End (EndAbandoned) names those the agent Agent saw
	// waiting. It comes once per job, and every PE still running is told
	// of it as a failure of Rank.
	ReportAbandoned
)

// Report is an event of the job that the seed passes on to the launcher.
type Report struct {
	Kind  ReportKind
	Rank  int    // the PE; -1 for ReportAgentLeft
	Agent int    // the agent that reported (ReportExit, ReportAgentLeft); -1 otherwise
	Host  string // the host of the PE or agent
	// End says how the PE ended (ReportExit), or EndAgentLeft
	// (ReportAgentLeft), or EndAbandoned (ReportAbandoned).
	End  bootstrap.EndCause
	Code int // ReportExit: the exit code for how the PE ended; ReportGlobalExit: the job's exit status
	// EndedByAgent (ReportExit): the agent had told the PE to end while it
	// still ran, so its end is a consequence, not a failure of its own;
	// Why says why the agent ended it (Agent.Why, or a signal the agent
	// got).
	EndedByAgent bool
	Why          string
}

// Seed is the memberlist node that the agents of a job join: the
// launcher's. It hands the agents their directory once all joined (they
// then gather their PEs' collectives among themselves, see JoinAgent),
// passes on what the agents report (how each PE ended, global exits) to
// the launcher, records which PEs joined, finalized or ended because they
// lost a peer, tells every agent, for its PEs, when a PE fails, and tells
// the agents when the launcher ends the job. The launcher runs one Seed
// per job.
type Seed struct {
	size      int
	agents    int
	jobID     string
	list      *memberlist.Memberlist
	transport *guardedTransport
	deaths    *deathWatch // confirms the agents' deaths
	logger    *log.Logger

	sends sync.WaitGroup // messages in flight
	// sendAgent delivers a message to an agent; tests replace it.
	sendAgent func(id int, ip net.IP, port uint16, msg []byte) error

	mu        sync.Mutex
	pes       []peState
	anyJoined bool
	agentSt   []agentState
	dirSent   bool
	reports   chan Report
	// terminate is the reason the job is being ended (Terminate), sent to
	// every agent, including those that join later; empty until then.
	terminate string
	// left is the first PE that left after it finalized, which every
	// agent is told of (KindLeft): a collective pending then, or started
	// later, can never complete. -1 until then. abandoned is set once an
	// agent reported such a collective.
	left      int
	leftHost  string
	abandoned bool
	closed    bool
}

// peState is what the seed knows of one PE.
type peState struct {
	joined, finalized, exited, gexit bool
	// lost is set when the PE learned that the PE lostRank failed (it
	// said so, or the seed told it): the PE's own end is then a
	// consequence of that failure.
	lost     bool
	lostRank int
	lostWhy  string
}

// agentState is what the seed knows of one agent.
type agentState struct {
	joined, left bool
	host, node   string
	first, count int    // its PEs, when they are consecutive (count 0: unknown)
	ip           net.IP // where messages go; nil until known
	port         uint16
}

// NewSeed starts a seed on a random port of cfg.BindAddr. The error wraps
// ucs.ErrInvalidParam for a bad configuration.
func NewSeed(cfg SeedConfig) (*Seed, error) {
	if cfg.Size < 1 || cfg.Size > wire.MaxRanks {
		return nil, fmt.Errorf("bootstrap: seed size %d out of range [1, %d]: %w", cfg.Size, wire.MaxRanks, ucs.ErrInvalidParam)
	}
	if cfg.Agents < 1 || cfg.Agents > wire.MaxRanks {
		return nil, fmt.Errorf("bootstrap: %d agents out of range [1, %d]: %w", cfg.Agents, wire.MaxRanks, ucs.ErrInvalidParam)
	}
	if err := jobkey.Check(cfg.Key); err != nil {
		return nil, err
	}
	if cfg.JobID == "" {
		cfg.JobID = newJobID()
	}
	if !wire.ValidJobID(cfg.JobID) {
		return nil, fmt.Errorf("bootstrap: job id %q: want 1 to 64 characters of [A-Za-z0-9._-]: %w", cfg.JobID, ucs.ErrInvalidParam)
	}
	if cfg.BindAddr == "" {
		cfg.BindAddr = "127.0.0.1"
	}
	if net.ParseIP(cfg.BindAddr) == nil {
		return nil, fmt.Errorf("bootstrap: seed bind address %q is not an IP address: %w", cfg.BindAddr, ucs.ErrInvalidParam)
	}
	if cfg.FailureTimeout != 0 && cfg.FailureTimeout < wire.MinFailureTimeout {
		return nil, fmt.Errorf("bootstrap: failure timeout %v below the minimum of %v: %w", cfg.FailureTimeout, wire.MinFailureTimeout, ucs.ErrInvalidParam)
	}
	logger := wire.DiscardLogger()
	if cfg.Logger != nil {
		logger = log.New(wire.LevelWriter{Logger: cfg.Logger, Floor: ucs.LogFatal}, "", 0)
	}
	s := &Seed{
		size:   cfg.Size,
		agents: cfg.Agents,
		jobID:  cfg.JobID,
		logger: logger,
		pes:    make([]peState, cfg.Size),
		// Each PE ends once and asks for a global exit at most once, each
		// agent leaves once, one collective is abandoned: sends never
		// block.
		reports: make(chan Report, 2*cfg.Size+cfg.Agents+1),
		left:    -1,
		agentSt: make([]agentState, cfg.Agents),
		deaths:  newDeathWatch(confirmWait(cmp.Or(cfg.FailureTimeout, bootstrap.DefaultFailureTimeout))),
	}
	nodes := cfg.Agents + 1
	c := newConfig(seedName, cfg.BindAddr, cfg.JobID, cfg.Key, logger, cfg.FailureTimeout, nodes)
	c.Delegate = seedDelegate{s}
	c.Events = seedDelegate{s}
	list, tr, err := createList(c, nodes)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: starting the seed: %w", err)
	}
	s.deaths.attach(list, tr)
	s.mu.Lock() // memberlist's goroutines read these under s.mu
	s.list, s.transport = list, tr
	s.sendAgent = func(id int, ip net.IP, port uint16, msg []byte) error {
		return sendReliable(list, agentName(id), ip, port, msg)
	}
	s.mu.Unlock()
	return s, nil
}

// Addr returns the host:port of the seed, the value of GOSHMEM_SEED.
func (s *Seed) Addr() string { return nodeAddr(s.list.LocalNode()) }

// JobID returns the job id, the value of GOSHMEM_JOBID.
func (s *Seed) JobID() string { return s.jobID }

// Strangers returns what the seed dropped of the traffic to its port that
// did not authenticate with the job key: someone who is not a member of
// the job connected to it, or sent it packets. Nothing is dropped in a
// job nobody else talks to.
func (s *Seed) Strangers() Strangers { return s.transport.strangersSeen() }

// Reports returns the channel on which the seed passes on what agents
// report (the end of each PE they started, once per PE; their own leaving,
// once per agent) and the global exit requests of PEs (once per PE). It has
// room for every report, so none is lost when nobody reads. It is closed by
// Close.
func (s *Seed) Reports() <-chan Report { return s.reports }

// Terminate tells every agent, those that join later included, to end the
// PEs it started (see Agent.Terminated), giving reason. Only the first call
// has an effect.
func (s *Seed) Terminate(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.terminate != "" {
		return
	}
	if reason == "" {
		reason = "the launcher ends the job"
	}
	s.terminate = wire.Clip(reason)
	s.sendAgentsLocked(s.liveAgentsLocked(), s.terminateMsgLocked())
}

func (s *Seed) leftMsgLocked() []byte {
	return wire.AppendMessage(nil, &wire.Message{Kind: wire.KindLeft, JobID: s.jobID, Rank: -1, FailRank: s.left, Host: wire.Clip(s.leftHost)})
}

func (s *Seed) terminateMsgLocked() []byte {
	return wire.AppendMessage(nil, &wire.Message{Kind: wire.KindTerminate, JobID: s.jobID, Rank: -1, Reason: s.terminate})
}

// Finalized reports whether the PE of that rank ended having finalized
// (bootstrap.Member.Finalize or Close, and no collective since), as its agent
// reported. It is false for ranks out of range.
func (s *Seed) Finalized(rank int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return rank >= 0 && rank < s.size && s.pes[rank].finalized
}

// Lost reports whether the PE of that rank learned, before it ended, that
// another PE failed: it told the seed so (bootstrap.Member.ReportLost), or the seed
// told it (through its agent). Its end is then a consequence of the
// failure of PE peer, not a failure of its own; why says how it learned
// it. ok is false for a PE that learned of no failure and for ranks out of
// range.
func (s *Seed) Lost(rank int) (peer int, why string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rank < 0 || rank >= s.size || !s.pes[rank].lost {
		return -1, "", false
	}
	pe := &s.pes[rank]
	return pe.lostRank, pe.lostWhy, true
}

// Joined reports whether the PE of that rank joined the job (connected to
// its agent), as far as the seed knows: an agent says so for the first of
// its PEs that joins, and for each PE when it reports its end. It is false
// for ranks out of range.
func (s *Seed) Joined(rank int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return rank >= 0 && rank < s.size && s.pes[rank].joined
}

// AnyJoined reports whether some PE joined the job.
func (s *Seed) AnyJoined() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.anyJoined
}

// Close leaves the job and shuts the seed down. Agents still in the job
// see the seed leave (and end their PEs). Close waits for messages in
// flight to end; it is idempotent.
func (s *Seed) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.reports)
	s.mu.Unlock()

	s.deaths.close()
	s.list.Leave(leaveTimeout) // a timeout only means nobody heard it
	err := s.list.Shutdown()
	s.sends.Wait()
	if err != nil {
		return fmt.Errorf("bootstrap: closing the seed: %w", err)
	}
	return nil
}

func (s *Seed) logf(format string, args ...any) {
	s.logger.Printf("[WARN] goshmem seed: "+format, args...)
}

// handle processes a message from an agent. Everything is validated; what
// is wrong is logged and dropped.
func (s *Seed) handle(b []byte) {
	m, err := wire.DecodeMessage(bytes.Clone(b))
	if err != nil {
		s.logf("dropping message: %v", err)
		return
	}
	if m.JobID != s.jobID {
		s.logf("dropping %v message for job %q (this is job %q)", m.Kind, m.JobID, s.jobID)
		return
	}
	if m.Kind != wire.KindAgentReport {
		s.logf("dropping unexpected %v message from %d", m.Kind, m.Rank)
		return
	}
	id := m.Rank
	if id < 0 || id >= s.agents {
		s.logf("dropping a report from agent %d: out of range [0, %d)", id, s.agents)
		return
	}
	ip, port, err := wire.ParseNodeAddr(m.Addr)
	if err != nil {
		s.logf("dropping a report from agent %d: %v", id, err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	a := &s.agentSt[id]
	a.ip, a.port = ip, port
	for _, e := range m.Events {
		s.eventLocked(id, ip, e)
	}
	// Every well-formed report is acknowledged, so that an agent that
	// retries is answered: the events count once.
	s.sendAgentsLocked([]int{id}, wire.AppendMessage(nil, &wire.Message{Kind: wire.KindAgentAck, JobID: s.jobID, Rank: -1, Seq: m.Seq}))
}

// eventLocked handles one event of a report of agent id.
func (s *Seed) eventLocked(id int, ip net.IP, e wire.Event) {
	if e.Rank < 0 || e.Rank >= s.size {
		s.logf("dropping a %d event of agent %d: PE %d out of range [0, %d)", e.Kind, id, e.Rank, s.size)
		return
	}
	pe := &s.pes[e.Rank]
	switch e.Kind {
	case wire.EvJoined:
		pe.joined, s.anyJoined = true, true
	case wire.EvExit:
		if pe.exited {
			return
		}
		pe.exited = true
		if e.Flags&wire.FlagJoined != 0 {
			pe.joined, s.anyJoined = true, true
		}
		pe.finalized = e.Flags&wire.FlagFinalized != 0
		s.reports <- Report{Kind: ReportExit, Rank: e.Rank, Agent: id, Host: e.Host, End: e.End, Code: e.Code,
			EndedByAgent: e.Flags&wire.FlagEndedByAgent != 0, Why: e.Why}
		if !pe.finalized && (pe.joined || e.Code != 0) {
			s.failLocked(bootstrap.Failure{Rank: e.Rank, Host: e.Host, Cause: e.End})
		}
		if pe.finalized && s.left < 0 && s.terminate == "" {
			// Its agent has nothing more of it to gather: one that holds
			// a collective that waits for it reports it (EvAbandoned).
			s.left, s.leftHost = e.Rank, e.Host
			s.sendAgentsLocked(s.liveAgentsLocked(), s.leftMsgLocked())
		}
	case wire.EvAbandoned:
		if e.Rank != s.left || s.abandoned {
			return // one report is enough, and only of the PE the agents were told of
		}
		s.abandoned = true
		s.reports <- Report{Kind: ReportAbandoned, Rank: e.Rank, Agent: id, Host: e.Host, End: e.End, Code: 1}
		s.failLocked(bootstrap.Failure{Rank: e.Rank, Host: e.Host, Cause: e.End})
	case wire.EvLost:
		if e.Other < 0 || e.Other >= s.size || e.Other == e.Rank {
			s.logf("dropping a lost event of PE %d: PE %d out of range [0, %d) or itself", e.Rank, e.Other, s.size)
			return
		}
		if !pe.lost { // the first loss it learned of is the cause
			pe.lost, pe.lostRank, pe.lostWhy = true, e.Other, e.Why
		}
	case wire.EvGlobalExit:
		if !pe.gexit {
			pe.gexit = true
			s.reports <- Report{Kind: ReportGlobalExit, Rank: e.Rank, Agent: -1, Host: hostAt(e.Host, ip), Code: e.Code}
		}
	}
}

// failLocked tells every agent, for its PEs, that the PE f.Rank failed,
// unless the job is being ended already (or ends by that PE's global
// exit): the PEs still running learn it as the cause of their own end.
func (s *Seed) failLocked(f bootstrap.Failure) {
	s.logf("%v", f)
	if s.terminate != "" || s.pes[f.Rank].gexit {
		return
	}
	for i := range s.pes {
		if p := &s.pes[i]; i != f.Rank && !p.exited && !p.finalized && !p.lost {
			p.lost, p.lostRank, p.lostWhy = true, f.Rank, "the seed told it that "+f.Error()
		}
	}
	msg := wire.AppendMessage(nil, &wire.Message{Kind: wire.KindFailure, JobID: s.jobID, Rank: -1, FailRank: f.Rank, Host: f.Host, Cause: f.Cause})
	s.sendAgentsLocked(s.liveAgentsLocked(), msg)
}

// liveAgentsLocked returns the agents that joined and did not leave.
func (s *Seed) liveAgentsLocked() []int {
	var ids []int
	for id := range s.agentSt {
		if a := &s.agentSt[id]; a.ip != nil && !a.left {
			ids = append(ids, id)
		}
	}
	return ids
}

// maxParallelSends bounds the concurrent messages of one broadcast.
const maxParallelSends = 16

// sendAgentsLocked sends msg to the agents of the given ids in the
// background.
func (s *Seed) sendAgentsLocked(ids []int, msg []byte) {
	type dest struct {
		id   int
		ip   net.IP
		port uint16
	}
	var dests []dest
	for _, id := range ids {
		if a := &s.agentSt[id]; a.ip != nil {
			dests = append(dests, dest{id, a.ip, a.port})
		}
	}
	s.sends.Add(len(dests))
	send := s.sendAgent
	sem := make(chan struct{}, maxParallelSends)
	go func() {
		for _, d := range dests {
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; s.sends.Done() }()
				if err := send(d.id, d.ip, d.port, msg); err != nil {
					s.logf("sending to agent %d: %v", d.id, err)
				}
			}()
		}
	}()
}

// agentJoined records an agent's node, tells it to end its PEs at once
// when the job is being ended already, and sends agent 0 the directory
// once every agent joined.
func (s *Seed) agentJoined(id int, n *memberlist.Node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id >= s.agents {
		s.logf("node %q joined: not an agent of this job of %d agents", n.Name, s.agents)
		return
	}
	a := &s.agentSt[id]
	a.ip, a.port = n.Addr, n.Port
	if a.joined {
		return
	}
	a.joined = true
	_, a.node, a.first, a.count = parseNodeMeta(n.Meta)
	a.host = nodeHost(n)
	if a.first+a.count > s.size {
		a.first, a.count = 0, 0
	}
	if a.node == "" {
		a.node = agentName(id)
	}
	if s.terminate != "" && !s.closed {
		s.sendAgentsLocked([]int{id}, s.terminateMsgLocked())
	}
	if s.left >= 0 && !s.closed {
		s.sendAgentsLocked([]int{id}, s.leftMsgLocked())
	}
	s.sendDirectoryLocked()
}

// sendDirectoryLocked sends agent 0 the directory of every agent, with
// their nodes numbered, once they all joined (a job of one agent needs
// none).
func (s *Seed) sendDirectoryLocked() {
	if s.dirSent || s.agents == 1 || s.closed {
		return
	}
	for i := range s.agentSt {
		if !s.agentSt[i].joined {
			return
		}
	}
	s.dirSent = true
	nodes := map[string]int{}
	dir := make([]wire.AgentEntry, s.agents)
	for id := range s.agentSt {
		a := &s.agentSt[id]
		n, ok := nodes[a.node]
		if !ok {
			n = len(nodes)
			nodes[a.node] = n
		}
		dir[id] = wire.AgentEntry{ID: id, Node: n, Addr: net.JoinHostPort(a.ip.String(), strconv.Itoa(int(a.port))), Host: wire.Clip(a.host)}
	}
	s.sendAgentsLocked([]int{0}, wire.AppendMessage(nil, &wire.Message{Kind: wire.KindDirectory, JobID: s.jobID, Rank: -1, Agents: dir}))
}

// agentLeft reports an agent that left or was declared dead; when some of
// its PEs did not end, the others learn that the first of them failed.
func (s *Seed) agentLeft(id int, n *memberlist.Node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id >= s.agents || s.closed || s.agentSt[id].left {
		return
	}
	a := &s.agentSt[id]
	a.left = true
	s.reports <- Report{Kind: ReportAgentLeft, Rank: -1, Agent: id, Host: nodeHost(n), End: bootstrap.EndCause{Kind: bootstrap.EndAgentLeft}}
	for r := a.first; r < a.first+a.count; r++ {
		if !s.pes[r].exited {
			s.failLocked(bootstrap.Failure{Rank: r, Host: nodeHost(n), Cause: bootstrap.EndCause{Kind: bootstrap.EndAgentLeft}})
			return
		}
	}
}

// seedDelegate receives the seed's memberlist callbacks.
type seedDelegate struct{ s *Seed }

func (d seedDelegate) NodeMeta(limit int) []byte                  { return nodeMeta(limit, "", nil) }
func (d seedDelegate) NotifyMsg(b []byte)                         { d.s.handle(b) }
func (d seedDelegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d seedDelegate) LocalState(join bool) []byte                { return nil }
func (d seedDelegate) MergeRemoteState(buf []byte, join bool)     {}
func (d seedDelegate) NotifyUpdate(n *memberlist.Node)            {}

func (d seedDelegate) NotifyJoin(n *memberlist.Node) {
	d.s.deaths.joined(n.Name)
	if id := agentOf(n.Name); id >= 0 {
		d.s.agentJoined(id, n)
	} else if n.Name != seedName {
		d.s.logf("node %q joined: not an agent", n.Name)
	}
}

// NotifyLeave reports an agent that left, or was declared dead and stays
// unreachable (deathWatch).
func (d seedDelegate) NotifyLeave(n *memberlist.Node) {
	if id := agentOf(n.Name); id >= 0 {
		d.s.deaths.left(n, func(n *memberlist.Node) { d.s.agentLeft(id, n) })
	}
}

// newJobID returns a random job id.
func newJobID() string {
	var b [8]byte
	rand.Read(b[:]) // never fails (crypto/rand.Read panics rather than fail)
	return fmt.Sprintf("%x", b[:])
}
