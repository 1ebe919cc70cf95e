package bootstrap

import (
	"bytes"
	"fmt"
	"log"
	"net"
	"sync"
	"time"

	"github.com/goshmem/goshmem/ucs"
	"github.com/hashicorp/memberlist"
)

// SeedConfig configures a Seed.
type SeedConfig struct {
	// Size is the number of PEs in the job (at least 1).
	Size int
	// Key is the job key (16, 24 or 32 bytes), used as memberlist's
	// encryption key: only nodes that have it can join or talk to the job.
	Key []byte
	// JobID names the job (1 to 64 characters of [A-Za-z0-9._-]). Empty
	// means a random one; Seed.JobID reports it.
	JobID string
	// BindAddr is the IP address the seed listens on. Empty means
	// "127.0.0.1", which only reaches PEs of the same host.
	BindAddr string
	// Logger receives memberlist's log and the seed's diagnostics (such
	// as rejected messages). Nil discards them.
	Logger *log.Logger
	// Agents is the number of agents (see JoinAgent) that will join the
	// job, with ids 0 to Agents-1; zero when the launcher starts the PEs
	// itself.
	Agents int
	// FailureTimeout is how long the job may take to notice a member that
	// stopped answering; zero means DefaultFailureTimeout. PEs and agents
	// should use the same (the launcher hands it over in
	// GOSHMEM_FAILURE_TIMEOUT).
	FailureTimeout time.Duration
}

// ReportKind tells what a Report is about.
type ReportKind int

// The kinds of Report.
const (
	// ReportExit: an agent reports that the PE Rank ended; How says how
	// ("exited with status 3", "was killed by signal 9 (killed)") and
	// Code is the exit code that stands for it.
	ReportExit ReportKind = 1 + iota
	// ReportGlobalExit: the PE Rank asked to end the whole job with exit
	// status Code (Member.GlobalExit).
	ReportGlobalExit
	// ReportAgentLeft: the agent Agent left the job (How says whether it
	// left or was declared dead). An agent leaves once every PE it
	// started ended.
	ReportAgentLeft
)

// Report is an event of the job that the seed passes on to the launcher,
// besides failures (see Seed.Failures).
type Report struct {
	Kind  ReportKind
	Rank  int    // the PE; -1 for ReportAgentLeft
	Agent int    // the agent that reported (ReportExit, ReportAgentLeft); -1 otherwise
	Host  string // the host of the PE or agent
	How   string // ReportExit: how the PE ended; ReportAgentLeft: how the agent left
	Code  int    // ReportExit: the exit code for how the PE ended; ReportGlobalExit: the job's exit status
	// EndedByAgent (ReportExit): the agent had told the PE to end while it
	// still ran, so its end is a consequence, not a failure of its own;
	// Why says why the agent ended it (Agent.Why, or a signal the agent
	// got).
	EndedByAgent bool
	Why          string
}

// Seed is the memberlist node that the PEs of a job join. It gathers the
// blobs of every Allgather and Barrier and answers each PE with the full
// table (a star, so that nothing waits for gossip to converge), records
// which PEs finalized, and reports PEs that fail or leave before finalize.
// The launcher runs one Seed per job.
type Seed struct {
	size      int
	agents    int
	jobID     string
	list      *memberlist.Memberlist
	transport *guardedTransport
	logger    *log.Logger

	sends sync.WaitGroup // outstanding replies
	// send delivers a message to a PE, sendAgent to an agent; tests
	// replace them.
	send      func(rank int, ip net.IP, port uint16, msg []byte) error
	sendAgent func(id int, ip net.IP, port uint16, msg []byte) error

	mu       sync.Mutex
	pes      []peState
	done     uint64   // last completed collective
	blobs    [][]byte // contributions to collective done+1
	have     []bool
	count    int // len of the have[i] that are true
	failures chan Failure
	reports  chan Report
	agentSt  []agentState
	exited   []bool // an agent reported the PE's end
	gexit    []bool // the PE asked for a global exit
	// terminate is the reason the job is being ended (Terminate), sent to
	// every agent, including those that join later; empty until then.
	terminate string
	closed    bool
}

// peState is what the seed knows of one PE.
type peState struct {
	joined, finalized, failed bool
	host                      string
	ip                        net.IP // where replies go; nil until known
	port                      uint16
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
	host         string
	ip           net.IP // where messages go; nil until known
	port         uint16
}

// NewSeed starts a seed on a random port of cfg.BindAddr. The error wraps
// ucs.ErrInvalidParam for a bad configuration.
func NewSeed(cfg SeedConfig) (*Seed, error) {
	if cfg.Size < 1 || cfg.Size > maxRanks {
		return nil, fmt.Errorf("bootstrap: seed size %d out of range [1, %d]: %w", cfg.Size, maxRanks, ucs.ErrInvalidParam)
	}
	if err := checkKey(cfg.Key); err != nil {
		return nil, err
	}
	if cfg.JobID == "" {
		cfg.JobID = newJobID()
	}
	if !validJobID(cfg.JobID) {
		return nil, fmt.Errorf("bootstrap: job id %q: want 1 to 64 characters of [A-Za-z0-9._-]: %w", cfg.JobID, ucs.ErrInvalidParam)
	}
	if cfg.BindAddr == "" {
		cfg.BindAddr = "127.0.0.1"
	}
	if net.ParseIP(cfg.BindAddr) == nil {
		return nil, fmt.Errorf("bootstrap: seed bind address %q is not an IP address: %w", cfg.BindAddr, ucs.ErrInvalidParam)
	}
	if cfg.Agents < 0 || cfg.Agents > maxRanks {
		return nil, fmt.Errorf("bootstrap: %d agents out of range [0, %d]: %w", cfg.Agents, maxRanks, ucs.ErrInvalidParam)
	}
	if cfg.FailureTimeout != 0 && cfg.FailureTimeout < minFailureTimeout {
		return nil, fmt.Errorf("bootstrap: failure timeout %v below the minimum of %v: %w", cfg.FailureTimeout, minFailureTimeout, ucs.ErrInvalidParam)
	}
	if cfg.Logger == nil {
		cfg.Logger = discardLogger()
	}
	s := &Seed{
		size:     cfg.Size,
		agents:   cfg.Agents,
		jobID:    cfg.JobID,
		logger:   cfg.Logger,
		pes:      make([]peState, cfg.Size),
		blobs:    make([][]byte, cfg.Size),
		have:     make([]bool, cfg.Size),
		failures: make(chan Failure, cfg.Size),
		// Each PE ends once and asks for a global exit at most once, each
		// agent leaves once: sends never block.
		reports: make(chan Report, 2*cfg.Size+cfg.Agents),
		agentSt: make([]agentState, cfg.Agents),
		exited:  make([]bool, cfg.Size),
		gexit:   make([]bool, cfg.Size),
	}
	nodes := cfg.Size + cfg.Agents + 1
	c := newConfig(seedName, cfg.BindAddr, cfg.JobID, cfg.Key, cfg.Logger, cfg.FailureTimeout, nodes)
	c.Delegate = seedDelegate{s}
	c.Events = seedDelegate{s}
	list, tr, err := createList(c, nodes)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: starting the seed: %w", err)
	}
	s.mu.Lock() // memberlist's goroutines read these under s.mu
	s.list, s.transport = list, tr
	s.send = func(rank int, ip net.IP, port uint16, msg []byte) error {
		return sendReliable(list, peName(rank), ip, port, msg)
	}
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

// Failures returns the channel on which the seed reports each PE that
// failed (memberlist declared it dead) or left before calling Close, once
// per PE. It has room for one report per PE, so reports are not lost when
// nobody reads. It is closed by Close.
func (s *Seed) Failures() <-chan Failure { return s.failures }

// Reports returns the channel on which the seed passes on what agents
// report (the end of each PE they started, once per PE; their own leaving,
// once per agent) and the global exit requests of PEs (once per PE). It has
// room for every report, so none is lost when nobody reads. It is closed by
// Close.
func (s *Seed) Reports() <-chan Report { return s.reports }

// Terminate tells every agent, those that join later included, to end the
// PEs it started (see Agent.Terminated), giving reason. Only the first call
// has an effect. PEs that no agent started are the launcher's to end.
func (s *Seed) Terminate(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.terminate != "" {
		return
	}
	if reason == "" {
		reason = "the launcher ends the job"
	}
	if len(reason) > maxString {
		reason = reason[:maxString]
	}
	s.terminate = reason
	var ids []int
	for id := range s.agentSt {
		if a := &s.agentSt[id]; a.ip != nil && !a.left {
			ids = append(ids, id)
		}
	}
	s.sendAgentsLocked(ids, s.terminateMsgLocked())
}

func (s *Seed) terminateMsgLocked() []byte {
	return appendMessage(nil, &message{kind: kindTerminate, jobID: s.jobID, rank: -1, reason: s.terminate})
}

// Finalized reports whether the PE of that rank finalized (Close or
// Finalize, which the seed acknowledged) and did not gather since. It is
// false for ranks out of range.
func (s *Seed) Finalized(rank int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return rank >= 0 && rank < s.size && s.pes[rank].finalized
}

// Lost reports whether the PE of that rank learned, before it ended, that
// another PE failed: it told the seed so (Member.ReportLost), or the seed
// told it (a Failure). Its end is then a consequence of the failure of PE
// peer, not a failure of its own; why says how it learned it. ok is false
// for a PE that learned of no failure and for ranks out of range.
func (s *Seed) Lost(rank int) (peer int, why string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rank < 0 || rank >= s.size || !s.pes[rank].lost {
		return -1, "", false
	}
	pe := &s.pes[rank]
	return pe.lostRank, pe.lostWhy, true
}

// Joined reports whether the PE of that rank has joined the job. It is
// false for ranks out of range.
func (s *Seed) Joined(rank int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return rank >= 0 && rank < s.size && s.pes[rank].joined
}

// Close leaves the job and shuts the seed down. PEs still in the job see
// the seed leave (a Failure with Rank -1). Close waits for replies in
// flight to end; it is idempotent.
func (s *Seed) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.failures)
	close(s.reports)
	s.mu.Unlock()

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

// handle processes one message from a PE or an agent. Everything is
// validated; what is wrong is logged and dropped.
func (s *Seed) handle(b []byte) {
	m, err := decodeMessage(bytes.Clone(b))
	if err != nil {
		s.logf("dropping message: %v", err)
		return
	}
	if m.jobID != s.jobID {
		s.logf("dropping %v message for job %q (this is job %q)", m.kind, m.jobID, s.jobID)
		return
	}
	switch m.kind {
	case kindGather, kindFinalize, kindGlobalExit, kindLost:
		if m.rank < 0 || m.rank >= s.size {
			s.logf("dropping %v message from rank %d: out of range [0, %d)", m.kind, m.rank, s.size)
			return
		}
	case kindAgentReport:
		s.handleAgent(m)
		return
	default:
		s.logf("dropping unexpected %v message from rank %d", m.kind, m.rank)
		return
	}
	ip, port, err := parseNodeAddr(m.addr)
	if err != nil {
		s.logf("dropping %v message from rank %d: %v", m.kind, m.rank, err)
		return
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	pe := &s.pes[m.rank]
	if pe.failed && m.kind != kindGlobalExit && m.kind != kindLost {
		s.logf("dropping %v message from rank %d: it was reported failed", m.kind, m.rank)
		return
	}
	pe.ip, pe.port = ip, port
	switch m.kind {
	case kindFinalize:
		if len(m.payload) != 0 {
			s.logf("dropping finalize message from rank %d: non-empty payload", m.rank)
			return
		}
		pe.finalized = true
		ack := appendMessage(nil, &message{kind: kindFinalizeAck, jobID: s.jobID, rank: -1, seq: m.seq})
		s.sendLocked([]int{m.rank}, ack)

	case kindGlobalExit:
		if !s.gexit[m.rank] {
			s.gexit[m.rank] = true
			// The request names the PE's host itself: it may come before
			// memberlist tells the seed of the PE's node.
			s.reports <- Report{Kind: ReportGlobalExit, Rank: m.rank, Agent: -1, Host: hostAt(m.host, ip), Code: m.code}
		}
		ack := appendMessage(nil, &message{kind: kindGlobalExitAck, jobID: s.jobID, rank: -1, seq: m.seq})
		s.sendLocked([]int{m.rank}, ack)

	case kindLost:
		if m.failRank < 0 || m.failRank >= s.size || m.failRank == m.rank {
			s.logf("dropping lost message from rank %d: PE %d out of range [0, %d) or itself", m.rank, m.failRank, s.size)
			return
		}
		if !pe.lost { // the first loss it learned of is the cause
			pe.lost, pe.lostRank, pe.lostWhy = true, m.failRank, m.reason
		}
		ack := appendMessage(nil, &message{kind: kindLostAck, jobID: s.jobID, rank: -1, seq: m.seq})
		s.sendLocked([]int{m.rank}, ack)

	case kindGather:
		if m.seq != s.done+1 {
			s.logf("dropping gather message from rank %d: sequence %d, expecting %d", m.rank, m.seq, s.done+1)
			return
		}
		if s.have[m.rank] {
			s.logf("dropping duplicate gather message from rank %d for sequence %d", m.rank, m.seq)
			return
		}
		// A PE that finalized and gathers again initialized again
		// (Member.Finalize): it is active until it finalizes anew.
		pe.finalized = false
		s.have[m.rank] = true
		s.blobs[m.rank] = m.payload
		s.count++
		if s.count == s.size {
			s.completeLocked()
		}
	}
}

// handleAgent processes a report of an agent: it passes the end of a PE on
// to the launcher (once per PE) and acknowledges every well-formed report,
// so that an agent that retries is answered.
func (s *Seed) handleAgent(m *message) {
	id := m.rank
	if id < 0 || id >= s.agents {
		s.logf("dropping %v message from agent %d: out of range [0, %d)", m.kind, id, s.agents)
		return
	}
	if m.failRank < 0 || m.failRank >= s.size {
		s.logf("dropping %v message from agent %d: PE %d out of range [0, %d)", m.kind, id, m.failRank, s.size)
		return
	}
	ip, port, err := parseNodeAddr(m.addr)
	if err != nil {
		s.logf("dropping %v message from agent %d: %v", m.kind, id, err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	a := &s.agentSt[id]
	a.ip, a.port = ip, port
	if !s.exited[m.failRank] {
		s.exited[m.failRank] = true
		s.reports <- Report{Kind: ReportExit, Rank: m.failRank, Agent: id, Host: m.host, How: m.reason, Code: m.code,
			EndedByAgent: m.flags&flagEndedByAgent != 0, Why: m.why}
	}
	ack := appendMessage(nil, &message{kind: kindAgentAck, jobID: s.jobID, rank: -1, seq: m.seq})
	s.sendAgentsLocked([]int{id}, ack)
}

// completeLocked answers every PE with the table of the collective that
// just completed and starts the next one.
func (s *Seed) completeLocked() {
	s.done++
	total := 0
	for _, b := range s.blobs {
		total += len(b)
	}
	reply := &message{kind: kindTable, jobID: s.jobID, rank: -1, seq: s.done, table: s.blobs}
	if total > MaxAllgather {
		reply = &message{kind: kindAbort, jobID: s.jobID, rank: -1, seq: s.done,
			reason: fmt.Sprintf("allgather of %d bytes in all exceeds the limit of %d", total, MaxAllgather)}
	}
	msg := appendMessage(nil, reply)
	s.blobs = make([][]byte, s.size)
	clear(s.have)
	s.count = 0
	all := make([]int, s.size)
	for i := range all {
		all[i] = i
	}
	s.sendLocked(all, msg)
}

// maxParallelSends bounds the concurrent replies of one broadcast.
const maxParallelSends = 16

// sendLocked sends msg to the PEs of the given ranks in the background.
func (s *Seed) sendLocked(ranks []int, msg []byte) {
	type dest struct {
		rank int
		ip   net.IP
		port uint16
	}
	dests := make([]dest, 0, len(ranks))
	for _, r := range ranks {
		pe := &s.pes[r]
		if pe.ip == nil {
			s.logf("cannot reach rank %d: address unknown", r)
			continue
		}
		dests = append(dests, dest{r, pe.ip, pe.port})
	}
	s.sends.Add(len(dests))
	send := s.send
	sem := make(chan struct{}, maxParallelSends)
	go func() {
		for _, d := range dests {
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; s.sends.Done() }()
				if err := send(d.rank, d.ip, d.port, msg); err != nil {
					s.logf("sending to rank %d: %v", d.rank, err)
				}
			}()
		}
	}()
}

// sendAgentsLocked sends msg to the agents of the given ids in the
// background.
func (s *Seed) sendAgentsLocked(ids []int, msg []byte) {
	send := s.sendAgent
	for _, id := range ids {
		a := &s.agentSt[id]
		if a.ip == nil {
			continue
		}
		ip, port := a.ip, a.port
		s.sends.Add(1)
		go func() {
			defer s.sends.Done()
			if err := send(id, ip, port, msg); err != nil {
				s.logf("sending to agent %d: %v", id, err)
			}
		}()
	}
}

// agentJoined records an agent's node, and tells it to end its PEs at once
// when the job is being ended already.
func (s *Seed) agentJoined(id int, n *memberlist.Node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id >= s.agents {
		s.logf("node %q joined: not an agent of this job of %d agents", n.Name, s.agents)
		return
	}
	a := &s.agentSt[id]
	a.joined = true
	a.host = nodeHost(n)
	if a.ip == nil {
		a.ip, a.port = n.Addr, n.Port
	}
	if s.terminate != "" && !s.closed {
		s.sendAgentsLocked([]int{id}, s.terminateMsgLocked())
	}
}

// agentLeft reports an agent that left or was declared dead.
func (s *Seed) agentLeft(id int, n *memberlist.Node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id >= s.agents || s.closed || s.agentSt[id].left {
		return
	}
	a := &s.agentSt[id]
	a.left = true
	s.reports <- Report{Kind: ReportAgentLeft, Rank: -1, Agent: id, Host: nodeHost(n),
		How: "left the job (it ended, was killed or stopped responding)"}
}

// peJoined records a PE's node.
func (s *Seed) peJoined(n *memberlist.Node) {
	if n.Name == seedName {
		return
	}
	if id := agentOf(n.Name); id >= 0 {
		s.agentJoined(id, n)
		return
	}
	r := rankOf(n.Name)
	s.mu.Lock()
	defer s.mu.Unlock()
	if r < 0 || r >= s.size {
		s.logf("node %q joined: not a PE of this job of %d", n.Name, s.size)
		return
	}
	pe := &s.pes[r]
	pe.joined = true
	pe.host = nodeHost(n)
	if pe.ip == nil {
		pe.ip, pe.port = n.Addr, n.Port
	}
}

// peLeft reports a PE that left or died before finalize.
func (s *Seed) peLeft(n *memberlist.Node) {
	if id := agentOf(n.Name); id >= 0 {
		s.agentLeft(id, n)
		return
	}
	r := rankOf(n.Name)
	if r < 0 || r >= s.size {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	pe := &s.pes[r]
	if s.closed || pe.finalized || pe.failed {
		return
	}
	pe.failed = true
	f := Failure{Rank: r, Host: nodeHost(n), Reason: reasonGone}
	s.logf("%v", f)
	s.failures <- f // never blocks: room for one per PE, each reported once
	if s.terminate != "" || s.gexit[r] {
		// The job is being ended (or ends by this PE's global exit): the
		// other PEs are told to end, not that a peer failed.
		return
	}
	msg := appendMessage(nil, &message{kind: kindFailure, jobID: s.jobID, rank: -1,
		failRank: f.Rank, host: f.Host, reason: f.Reason})
	var others []int // sendLocked skips those with no known address
	for i := range s.pes {
		if p := &s.pes[i]; !p.failed && !p.finalized {
			others = append(others, i)
			if !p.lost {
				p.lost, p.lostRank, p.lostWhy = true, r, "the seed told it that "+f.Error()
			}
		}
	}
	s.sendLocked(others, msg)
}

// seedDelegate receives the seed's memberlist callbacks.
type seedDelegate struct{ s *Seed }

func (d seedDelegate) NodeMeta(limit int) []byte                  { return hostMeta(limit) }
func (d seedDelegate) NotifyMsg(b []byte)                         { d.s.handle(b) }
func (d seedDelegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d seedDelegate) LocalState(join bool) []byte                { return nil }
func (d seedDelegate) MergeRemoteState(buf []byte, join bool)     {}
func (d seedDelegate) NotifyJoin(n *memberlist.Node)              { d.s.peJoined(n) }
func (d seedDelegate) NotifyLeave(n *memberlist.Node)             { d.s.peLeft(n) }
func (d seedDelegate) NotifyUpdate(n *memberlist.Node)            {}
