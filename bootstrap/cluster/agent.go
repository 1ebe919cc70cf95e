package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/goshmem/goshmem/ucs"
	"github.com/hashicorp/memberlist"

	"github.com/goshmem/goshmem/bootstrap"
	"github.com/goshmem/goshmem/bootstrap/internal/wire"
)

// reportTimeout bounds the wait for the seed to acknowledge an agent's
// report (a variable for the tests that wait for it to pass).
var reportTimeout = 5 * time.Second

// AgentConfig describes an agent's place in its job.
type AgentConfig struct {
	// ID is the agent's id, in [0, Agents).
	ID int
	// Agents is the number of agents of the job (the seed's
	// SeedConfig.Agents).
	Agents int
	// Ranks are the PEs the agent starts (Attach).
	Ranks []int
	// Node names the node the agent runs on, for its PEs' peers: PEs
	// whose agents give the same Node share memory (bootstrap.Table.Node). Empty
	// means this agent's id: a node of its own.
	Node string
	// Logger receives the agent's log (memberlist's, and the messages
	// it drops), at LogDebug (see EnvDebug); nil means
	// ucs.DefaultLogger().
	Logger ucs.Logger
}

// Agent is the member of a job that stands for the PEs of one host (or of
// one PE, under a spawner): the process that starts and watches them for
// the launcher. Agents are the only members of the job besides the seed:
// an agent's PEs reach it over a local channel (Attach), and it carries
// their collectives (gathering them with the other agents in a tree, and
// publishing each allgather's table once for all of them), their
// finalize, global exit and loss reports, and the notices of failures.
// It tells the seed how each of its PEs ended (Report), learns when the
// launcher ends the job (Terminated), notices when the launcher is gone,
// and notices a PE that stops answering (Silent). Its methods are safe for
// concurrent use.
type Agent struct {
	id, agents int
	env        bootstrap.Env
	ranks      []int
	nodeName   string
	list       *memberlist.Memberlist
	transport  *guardedTransport
	deaths     *deathWatch // confirms the seed's death
	seedIP     net.IP
	seedPort   uint16
	addr       string
	logger     *log.Logger
	// send delivers a message to an agent (the seed with id -1); tests
	// replace it.
	send  func(id int, addr string, msg []byte) error
	sends sync.WaitGroup // messages in flight

	// The PEs' liveness: pinged every pingEvery, silent after silentAfter
	// without a word.
	pingEvery, silentAfter time.Duration
	silent                 chan int
	stopPing               chan struct{}

	mu       sync.Mutex
	pes      map[int]*localPE
	joined   bool // some PE connected (EvJoined was queued)
	dirKnown bool
	node     int               // this agent's node number (from the directory)
	parent   wire.AgentEntry   // valid with dirKnown, when id > 0
	children []wire.AgentEntry // valid with dirKnown
	done     uint64            // the last collective completed
	coll     *collective       // the one being gathered, if any
	failures []*wire.Message   // failure notices, for PEs that connect later
	// left is the seed's notice of the first PE that left after it
	// finalized (KindLeft), if any: a collective pending now or later
	// cannot complete. abandoned: it was reported so.
	left      *wire.Message
	abandoned bool
	stats     Stats         // the counters under mu
	term      chan struct{} // closed at the first of: terminate, seed gone
	why       string
	seedGone  bool // the seed left or died (SeedGone)
	closed    bool
	closeCh   chan struct{}
	stall     chan []int // see StallReports

	// Reports go to the seed in batches, one batch in flight.
	repMu    sync.Mutex
	repQueue []pendingEvent
	repKick  chan struct{}
	repSeq   uint64
	repAck   chan uint64
	repDone  chan struct{}
}

// pendingEvent is an event waiting to be reported; done receives the
// outcome.
type pendingEvent struct {
	ev   wire.Event
	done chan error
}

// localPE is what an agent knows of one of its PEs.
type localPE struct {
	rank      int
	conn      *wire.Conn
	joined    bool   // it said hello
	finalized bool   // it finalized and did not gather since
	seq       uint64 // of its last gather
	heard     time.Time
	silentSet bool // reported on Silent
	gone      bool // its channel closed
	// other is set when the PE's first frame was of another version of
	// the messages: the program was built from another goshmem.
	other *wire.VersionError
}

// JoinAgent joins the job described by env (its JobID, Size, Seed, Key and
// FailureTimeout; the rank fields are not used) as the agent cfg
// describes. The error wraps ucs.ErrInvalidParam for a malformed env or
// configuration, and ucs.ErrUnreachable when the seed cannot be joined (it
// is not there, or it has another key).
func JoinAgent(env bootstrap.Env, cfg AgentConfig) (*Agent, error) {
	if cfg.Agents < 1 || cfg.Agents > wire.MaxRanks || cfg.ID < 0 || cfg.ID >= cfg.Agents {
		return nil, fmt.Errorf("bootstrap: agent %d of %d: out of range: %w", cfg.ID, cfg.Agents, ucs.ErrInvalidParam)
	}
	if env.Seed == "" {
		return nil, fmt.Errorf("bootstrap: agent %d: no seed: %w", cfg.ID, ucs.ErrInvalidParam)
	}
	env.Rank, env.LocalRank, env.LocalSize, env.AgentFD = 0, 0, 1, 0 // not an agent's
	if err := env.Validate(); err != nil {
		return nil, err
	}
	ranks := slices.Clone(cfg.Ranks)
	slices.Sort(ranks)
	for i, r := range ranks {
		if r < 0 || r >= env.Size || (i > 0 && ranks[i-1] == r) {
			return nil, fmt.Errorf("bootstrap: agent %d: rank %d out of range [0, %d) or repeated: %w", cfg.ID, r, env.Size, ucs.ErrInvalidParam)
		}
	}
	if len(cfg.Node) > maxNodeName {
		return nil, fmt.Errorf("bootstrap: agent %d: node name of %d bytes: %w", cfg.ID, len(cfg.Node), ucs.ErrInvalidParam)
	}
	seed, err := net.ResolveTCPAddr("tcp", env.Seed)
	if err != nil || seed.Port == 0 {
		return nil, fmt.Errorf("bootstrap: seed %q: cannot resolve: %v: %w", env.Seed, err, ucs.ErrInvalidParam)
	}
	bind, err := localIPFor(seed.String())
	if err != nil {
		return nil, fmt.Errorf("bootstrap: no route to seed %s: %w: %w", env.Seed, ucs.ErrUnreachable, err)
	}
	timeout := env.FailureTimeout
	if timeout <= 0 {
		timeout = bootstrap.DefaultFailureTimeout
	}
	a := &Agent{
		id:          cfg.ID,
		agents:      cfg.Agents,
		env:         env,
		ranks:       ranks,
		nodeName:    cfg.Node,
		seedIP:      seed.IP,
		seedPort:    uint16(seed.Port),
		pingEvery:   timeout / 8,
		silentAfter: timeout - timeout/8,
		silent:      make(chan int, len(ranks)),
		stopPing:    make(chan struct{}),
		pes:         make(map[int]*localPE, len(ranks)),
		term:        make(chan struct{}),
		closeCh:     make(chan struct{}),
		stall:       make(chan []int, 1),
		repKick:     make(chan struct{}, 1),
		repAck:      make(chan uint64, 1),
		repDone:     make(chan struct{}),
		deaths:      newDeathWatch(confirmWait(timeout)),
	}
	if a.nodeName == "" {
		a.nodeName = "agent-" + strconv.Itoa(cfg.ID)
	}
	a.logger = wire.DebugLogger(cfg.Logger, "goshmem "+agentName(cfg.ID)+": ")
	nodes := cfg.Agents + 1
	c := newConfig(agentName(cfg.ID), bind, env.JobID, env.Key, a.logger, env.FailureTimeout, nodes)
	c.Delegate = agentDelegate{a}
	c.Events = agentDelegate{a}
	list, tr, err := createList(c, nodes)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: agent %d: starting memberlist: %w", cfg.ID, err)
	}
	a.deaths.attach(list, tr)
	a.mu.Lock() // memberlist's goroutines read these under a.mu
	a.list, a.transport = list, tr
	a.addr = nodeAddr(list.LocalNode())
	a.send = func(id int, addr string, msg []byte) error {
		if id < 0 {
			return sendReliable(list, seedName, a.seedIP, a.seedPort, msg)
		}
		ip, port, err := wire.ParseNodeAddr(addr)
		if err != nil {
			return err
		}
		return sendReliable(list, agentName(id), ip, port, msg)
	}
	a.mu.Unlock()
	if _, err := list.Join([]string{seed.String()}); err != nil {
		a.deaths.close()
		list.Shutdown()
		return nil, fmt.Errorf("bootstrap: agent %d cannot join the seed %s (wrong key or job?): %w: %w", cfg.ID, env.Seed, ucs.ErrUnreachable, err)
	}
	go a.reportLoop()
	go a.pingLoop()
	return a, nil
}

// ID returns the agent's id.
func (a *Agent) ID() int { return a.id }

// Strangers returns what the agent dropped of the traffic to its port that
// did not authenticate with the job key (see Seed.Strangers).
func (a *Agent) Strangers() Strangers { return a.transport.strangersSeen() }

// Attach opens the local channel of the PE rank, one of the agent's
// Ranks, and returns the PE's end: the caller hands it to the PE process
// (as an inherited descriptor whose number it gives in GOSHMEM_AGENT_FD,
// bootstrap.Env.AgentFD) and closes its own copy once the PE started. Attaching a
// rank again replaces its channel (a PE started again). The error wraps
// ucs.ErrInvalidParam for a rank that is not the agent's, and is ErrClosed
// after Close.
func (a *Agent) Attach(rank int) (*os.File, error) {
	if _, ok := slices.BinarySearch(a.ranks, rank); !ok {
		return nil, fmt.Errorf("bootstrap: agent %d: PE %d is not one of its PEs: %w", a.id, rank, ucs.ErrInvalidParam)
	}
	conn, f, err := wire.NewLocalPair()
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		conn.Close()
		f.Close()
		return nil, bootstrap.ErrClosed
	}
	if old := a.pes[rank]; old != nil {
		old.conn.Close()
	}
	p := &localPE{rank: rank, conn: conn}
	a.pes[rank] = p
	a.mu.Unlock()
	go a.serve(p)
	return f, nil
}

// Silent returns the channel on which the agent names (by rank) each of its
// PEs that connected and then stopped answering it for most of the failure
// timeout, without exiting: hung, or frozen. Each PE is named once. The
// caller should report it (Report, its end being the failure) and kill it.
func (a *Agent) Silent() <-chan int { return a.silent }

// Report tells the seed that the PE rank ended: end says how (an exit
// status, a signal, ...), code is the exit code that stands for it, host
// names the host. endedBy, when not empty, says that the agent had told the PE to end
// while it still ran, and why ("the launcher ends the job", Why, or a
// signal the agent got): its end is then a consequence, not a failure of
// its own (Report.EndedByAgent). Whether the PE joined the job and
// finalized goes with it. Report returns once the seed acknowledged the
// report (the launcher then has it), retrying for a few seconds. A seed
// whose port refuses the connection is gone (the process ended), and the
// agent then counts as terminated (SeedGone). The error wraps
// ucs.ErrInvalidParam for a rank out of range, ucs.ErrConnectionReset when
// the seed is gone, ucs.ErrTimedOut when it did not answer, and is
// ErrClosed after Close.
func (a *Agent) Report(rank int, host string, end bootstrap.EndCause, code int, endedBy string) error {
	return <-a.Post(PEEnd{Rank: rank, Host: host, End: end, Code: code, EndedBy: endedBy})
}

// PEEnd is the end of a PE, as its agent reports it (see Report).
type PEEnd struct {
	Rank    int
	Host    string
	End     bootstrap.EndCause
	Code    int
	EndedBy string
}

// Post is Report that does not wait, for the ends of one or more PEs: it
// queues them and returns a channel that receives the outcome (the first
// error, if any). Reports go to the seed in the order they were posted,
// those posted while another is in flight together, in one message; the
// ends posted in one call travel in one message (unless more than
// wire.MaxEvents wait), and the seed passes those of a message on to the
// launcher at once.
func (a *Agent) Post(ends ...PEEnd) <-chan error {
	evs := make([]wire.Event, len(ends))
	for i, e := range ends {
		if e.Rank < 0 || e.Rank >= a.env.Size {
			done := make(chan error, 1)
			done <- fmt.Errorf("bootstrap: agent %d: report of PE %d out of range [0, %d): %w", a.id, e.Rank, a.env.Size, ucs.ErrInvalidParam)
			return done
		}
		e.End.Detail = wire.Clip(e.End.Detail)
		evs[i] = wire.Event{Kind: wire.EvExit, Rank: e.Rank, Code: e.Code, Other: -1, Host: wire.Clip(e.Host), End: e.End}
		if e.EndedBy != "" {
			evs[i].Flags, evs[i].Why = wire.FlagEndedByAgent, wire.Clip(e.EndedBy)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := range evs {
		if p := a.pes[evs[i].Rank]; p != nil {
			if p.joined {
				evs[i].Flags |= wire.FlagJoined
			}
			if p.finalized {
				evs[i].Flags |= wire.FlagFinalized
			}
		}
	}
	return a.queueEventLocked(evs...)
}

// reportLoop sends the queued events to the seed, all that are queued in
// one report, and waits for each report's acknowledgment.
func (a *Agent) reportLoop() {
	defer close(a.repDone)
	for {
		select {
		case <-a.repKick:
		case <-a.closeCh:
			a.failQueued(bootstrap.ErrClosed)
			return
		}
		for {
			a.repMu.Lock()
			batch := a.repQueue
			if len(batch) > wire.MaxEvents {
				batch = batch[:wire.MaxEvents]
			}
			a.repQueue = a.repQueue[len(batch):]
			a.repMu.Unlock()
			if len(batch) == 0 {
				break
			}
			err := a.sendReport(batch)
			if err != nil && err != bootstrap.ErrClosed {
				err = fmt.Errorf("bootstrap: agent %d: report to the seed: %w", a.id, err)
			}
			for _, p := range batch {
				p.done <- err
			}
		}
	}
}

// failQueued ends the queued events with err.
func (a *Agent) failQueued(err error) {
	a.repMu.Lock()
	defer a.repMu.Unlock()
	for _, p := range a.repQueue {
		p.done <- err
	}
	a.repQueue = nil
}

// sendReport sends one report and waits for its acknowledgment, trying
// again for reportTimeout.
func (a *Agent) sendReport(batch []pendingEvent) error {
	a.repSeq++
	seq := a.repSeq
	evs := make([]wire.Event, len(batch))
	for i, p := range batch {
		evs[i] = p.ev
	}
	msg := wire.AppendMessage(nil, &wire.Message{Kind: wire.KindAgentReport, JobID: a.env.JobID, Rank: a.id, Seq: seq, Addr: a.addr, Events: evs})
	deadline := time.NewTimer(reportTimeout)
	defer deadline.Stop()
	for {
		if a.SeedGone() {
			// One try, not waiting for an answer: a launcher that was only
			// stopped reads it when it resumes.
			a.list.SendReliable(&memberlist.Node{Name: seedName, Addr: a.seedIP, Port: a.seedPort}, msg)
			return fmt.Errorf("the seed is gone: %w", ucs.ErrConnectionReset)
		}
		err := a.sendCounted(-1, "", msg)
		if errors.Is(err, syscall.ECONNREFUSED) {
			// Nothing listens on the seed's port: the launcher's process
			// is gone, whatever memberlist will conclude later.
			a.seedLeft()
			return fmt.Errorf("the seed is gone: %w", ucs.ErrConnectionReset)
		}
		retry := time.NewTimer(reportTimeout / 5)
		for acked := false; !acked; {
			select {
			case s := <-a.repAck:
				if s != seq {
					continue // an old report's second acknowledgment
				}
				retry.Stop()
				return nil
			case <-a.closeCh:
				retry.Stop()
				return bootstrap.ErrClosed
			case <-deadline.C:
				retry.Stop()
				if err != nil {
					return fmt.Errorf("%w: %w", ucs.ErrUnreachable, err)
				}
				return fmt.Errorf("the seed did not acknowledge: %w", ucs.ErrTimedOut)
			case <-retry.C:
				acked = true // send it again
			}
		}
	}
}

// sendCounted sends msg to agent id at addr (the seed for -1) and counts
// it.
func (a *Agent) sendCounted(id int, addr string, msg []byte) error {
	a.mu.Lock()
	send := a.send
	a.stats.MsgsSent++
	a.stats.BytesSent += uint64(len(msg))
	a.mu.Unlock()
	return send(id, addr, msg)
}

// sendAsync sends msg to agent id at addr in the background.
func (a *Agent) sendAsync(id int, addr string, msg []byte) {
	a.sends.Add(1)
	go func() {
		defer a.sends.Done()
		if err := a.sendCounted(id, addr, msg); err != nil {
			a.logf("sending to agent %d: %v", id, err)
		}
	}()
}

// SeedGone reports whether the seed (the launcher) left the job or was
// declared dead: Terminated is then closed too.
func (a *Agent) SeedGone() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	select {
	case <-a.term:
		return a.seedGone
	default:
		return false
	}
}

// Terminated returns a channel that is closed when the agent should end
// its PEs: the launcher ends the job (Seed.Terminate), or the seed left or
// was declared dead. Why then says which.
func (a *Agent) Terminated() <-chan struct{} { return a.term }

// Why returns why Terminated was closed, or "" while it is not.
func (a *Agent) Why() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.why
}

// terminate closes Terminated, saying why: the launcher ends the job.
func (a *Agent) terminate(why string) { a.closeTerm(why, false) }

// seedLeft closes Terminated for a seed that left or died (SeedGone). The
// PEs learn it as a failure of the launcher: their collectives cannot
// complete.
func (a *Agent) seedLeft() {
	if a.closeTerm(wire.ReasonSeedGone, true) {
		a.failure(&wire.Message{Kind: wire.KindFailure, JobID: a.env.JobID, Rank: -1, FailRank: -1, Cause: bootstrap.EndCause{Kind: bootstrap.EndSeedGone}})
	}
}

// closeTerm closes Terminated, saying why, and whether the seed is gone.
// It reports whether it did: only the first call does.
func (a *Agent) closeTerm(why string, seedGone bool) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	select {
	case <-a.term:
		return false
	default:
	}
	a.why, a.seedGone = why, seedGone
	close(a.term)
	return true
}

// Stats counts an agent's bootstrap traffic and what it keeps for its PEs.
type Stats struct {
	// MsgsSent, BytesSent, MsgsReceived and BytesReceived count the
	// bootstrap's messages between this agent and the seed or other
	// agents (directory, collectives, reports).
	MsgsSent, BytesSent, MsgsReceived, BytesReceived uint64
	// Packets* and Streams* count memberlist's traffic on the agent's
	// node, its messages above included (gossip and probes go in UDP
	// packets, joins and reliable messages in TCP streams): packets and
	// streams sent and received, and their bytes.
	PacketsSent, PacketsReceived, PacketBytesSent, PacketBytesReceived   uint64
	StreamsOpened, StreamsAccepted, StreamBytesSent, StreamBytesReceived uint64
	// LocalFrames and LocalBytes count the frames, both ways, on the
	// local channels with the agent's PEs.
	LocalFrames, LocalBytes uint64
	// Collectives is the number of collectives the agent completed;
	// TableBytes the size of the largest table it published to its PEs.
	Collectives uint64
	TableBytes  int
	// MaxSilence is the longest a PE that had joined went without a
	// frame to its agent (the agent pings every eighth of the failure
	// timeout, and names a PE silent for seven eighths of it): the margin
	// the failure timeout leaves on a loaded host.
	MaxSilence time.Duration
}

// Stats returns the agent's counters.
func (a *Agent) Stats() Stats {
	a.mu.Lock()
	s := a.stats
	for _, p := range a.pes {
		s.LocalFrames += p.conn.Sent.Msgs.Load() + p.conn.Received.Msgs.Load()
		s.LocalBytes += p.conn.Sent.Bytes.Load() + p.conn.Received.Bytes.Load()
	}
	a.mu.Unlock()
	a.transport.addStats(&s)
	return s
}

// Close closes the local channels, leaves the job and shuts memberlist
// down; a Report in progress returns ErrClosed. Call it once every PE of
// the agent ended and was reported. It is idempotent.
func (a *Agent) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	close(a.closeCh)
	close(a.stopPing)
	a.deaths.close()
	for _, p := range a.pes {
		p.conn.Close()
	}
	a.mu.Unlock()
	<-a.repDone
	a.sends.Wait()
	a.list.Leave(leaveTimeout) // a timeout only means nobody heard it
	if err := a.list.Shutdown(); err != nil {
		return fmt.Errorf("bootstrap: agent %d: %w", a.id, err)
	}
	return nil
}

func (a *Agent) logf(format string, args ...any) {
	a.logger.Printf("[WARN] goshmem agent: "+format, args...)
}

// handle processes a message from the seed or another agent. Everything is
// validated; what is wrong is logged and dropped.
func (a *Agent) handle(b []byte) {
	msg, err := wire.DecodeMessage(bytes.Clone(b))
	if err != nil {
		a.logf("dropping message: %v", err)
		return
	}
	if msg.JobID != a.env.JobID {
		a.logf("dropping %v message of job %q", msg.Kind, msg.JobID)
		return
	}
	a.mu.Lock()
	a.stats.MsgsReceived++
	a.stats.BytesReceived += uint64(len(b))
	a.mu.Unlock()
	switch msg.Kind {
	case wire.KindAgentAck:
		if msg.Rank == -1 {
			select {
			case a.repAck <- msg.Seq:
			default: // one acknowledgment waits at most; the sender retries
			}
		}
	case wire.KindTerminate:
		if msg.Rank == -1 {
			a.terminate(msg.Reason)
		}
	case wire.KindStallReport:
		if msg.Rank == -1 {
			a.stallReport(msg.Ranks)
		}
	case wire.KindLeft:
		if msg.Rank == -1 && msg.FailRank < a.env.Size {
			a.mu.Lock()
			if a.left == nil {
				a.left = msg
				a.checkAbandonedLocked()
			}
			a.mu.Unlock()
		}
	case wire.KindFailure:
		if msg.Rank == -1 && msg.FailRank >= -1 && msg.FailRank < a.env.Size {
			a.failure(msg)
		}
	case wire.KindDirectory:
		a.directory(msg)
	case wire.KindUp:
		a.up(msg)
	case wire.KindDown, wire.KindAbort:
		a.down(msg)
	default:
		a.logf("dropping unexpected %v message from %d", msg.Kind, msg.Rank)
	}
}

// failure passes a failure notice of the seed on to the PEs, and keeps it
// for those that connect later.
func (a *Agent) failure(msg *wire.Message) {
	msg = &wire.Message{Kind: wire.KindFailure, JobID: a.env.JobID, Rank: -1, FailRank: msg.FailRank, Host: msg.Host, Cause: msg.Cause}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.failures = append(a.failures, msg)
	for _, p := range a.pes {
		if p.joined && !p.gone {
			a.toPE(p, msg, -1)
		}
	}
}

// directory takes the directory of this agent's subtree, and passes each
// child its part.
func (a *Agent) directory(msg *wire.Message) {
	parent := treeParent(a.id)
	if msg.Rank != parent || len(msg.Agents) == 0 || msg.Agents[0].ID != a.id {
		a.logf("dropping a directory from %d (the parent is %d)", msg.Rank, parent)
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.dirKnown || a.closed {
		return
	}
	a.node = msg.Agents[0].Node
	if parent >= 0 {
		a.parent = wire.AgentEntry{ID: parent, Addr: msg.Addr}
	}
	for _, c := range treeChildren(a.id, a.agents) {
		sub := subDirectory(msg.Agents, c)
		if len(sub) == 0 || sub[0].ID != c {
			a.logf("the directory has no entry for child agent %d", c)
			return
		}
		a.children = append(a.children, sub[0])
		out := wire.AppendMessage(nil, &wire.Message{Kind: wire.KindDirectory, JobID: a.env.JobID, Rank: a.id, Addr: a.addr, Agents: sub})
		a.sendAsync(c, sub[0].Addr, out)
	}
	a.dirKnown = true
	a.advanceLocked()
}

// up takes what a child's subtree gathered.
func (a *Agent) up(msg *wire.Message) {
	if !slices.Contains(treeChildren(a.id, a.agents), msg.Rank) || msg.Count > a.env.Size {
		a.logf("dropping an up message from %d", msg.Rank)
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	c, err := a.collLocked(msg.Seq, msg.Flags&wire.FlagBarrier != 0)
	if err == nil && c.children[msg.Rank] != nil {
		err = errors.New("a second contribution")
	}
	if err != nil {
		a.logf("dropping an up message from agent %d: %v", msg.Rank, err)
		return
	}
	c.children[msg.Rank] = msg
	a.advanceLocked()
}

// down takes the result of a collective from the parent.
func (a *Agent) down(msg *wire.Message) {
	if msg.Rank != treeParent(a.id) || msg.Rank < 0 {
		a.logf("dropping a %v message from %d", msg.Kind, msg.Rank)
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.coll
	if c == nil || !c.sentUp || msg.Seq != c.seq || (msg.Kind == wire.KindDown && c.barrier != (msg.Flags&wire.FlagBarrier != 0)) {
		a.logf("dropping a %v message for sequence %d (at %d)", msg.Kind, msg.Seq, a.done)
		return
	}
	if msg.Kind == wire.KindDown && !c.barrier {
		if _, err := completeTable(msg.Entries, a.env.Size); err != nil {
			msg = &wire.Message{Kind: wire.KindAbort, JobID: a.env.JobID, Seq: msg.Seq, Reason: "the table from the parent agent: " + err.Error()}
		}
	}
	a.deliverLocked(msg)
}

// collLocked returns the collective of sequence seq, which must be the
// next one, starting it if needed.
func (a *Agent) collLocked(seq uint64, barrier bool) (*collective, error) {
	if seq != a.done+1 {
		return nil, fmt.Errorf("sequence %d, expecting %d", seq, a.done+1)
	}
	if a.coll == nil {
		a.coll = &collective{seq: seq, local: make(map[int][]byte), children: make(map[int]*wire.Message)}
	}
	if a.coll.sentUp {
		return nil, errors.New("the collective was sent up already")
	}
	return a.coll, a.coll.check(barrier)
}

// advanceLocked sends what the subtree gathered up once every PE of the
// agent and every child contributed; the root completes the collective.
func (a *Agent) advanceLocked() {
	a.checkAbandonedLocked()
	c := a.coll
	if c == nil || c.sentUp || len(c.local) < len(a.ranks) || a.closed {
		return
	}
	if a.agents > 1 && !a.dirKnown {
		return // the parent's address, the node number
	}
	if len(c.children) < len(treeChildren(a.id, a.agents)) {
		return
	}
	c.sentUp = true
	count, es := c.gathered(a.node)
	var flags uint8
	if c.barrier {
		flags = wire.FlagBarrier
	}
	if a.id != 0 {
		msg := wire.AppendMessage(nil, &wire.Message{Kind: wire.KindUp, JobID: a.env.JobID, Rank: a.id, Seq: c.seq, Flags: flags, Count: count, Entries: es})
		a.sendAsync(a.parent.ID, a.parent.Addr, msg)
		return
	}
	result := &wire.Message{Kind: wire.KindDown, JobID: a.env.JobID, Rank: a.id, Seq: c.seq, Flags: flags}
	var err error
	if count != a.env.Size {
		err = fmt.Errorf("%d PEs gathered for a job of %d", count, a.env.Size)
	} else if !c.barrier {
		result.Entries, err = completeTable(es, a.env.Size)
	}
	if err != nil {
		result = &wire.Message{Kind: wire.KindAbort, JobID: a.env.JobID, Rank: a.id, Seq: c.seq, Reason: err.Error()}
	}
	a.deliverLocked(result)
}

// checkAbandonedLocked reports, once, a collective that waits here for a
// subtree that cannot complete it because a PE left the job after it
// finalized (the seed's notice, left): that PE finalized once its last
// collective completed, so it is not in this one, which nobody else can
// end. (A PE that closes its Member while its collective is pending is
// counted as not in it.) The seed then tells every PE, and the launcher
// ends the job, naming the PE that left and those that wait here.
func (a *Agent) checkAbandonedLocked() {
	c := a.coll
	if a.left == nil || c == nil || c.sentUp || a.abandoned || a.closed {
		return
	}
	a.abandoned = true
	waiting := make([]int, 0, len(c.local))
	for r := range c.local {
		waiting = append(waiting, r)
	}
	slices.Sort(waiting)
	detail := fmt.Sprintf("agent %d waits for it in collective %d", a.id, c.seq)
	if len(waiting) > 0 {
		detail = strings.Trim(fmt.Sprint(waiting), "[]")
		detail = fmt.Sprintf("PE(s) %s wait in it (collective %d, on agent %d)", strings.ReplaceAll(detail, " ", ", "), c.seq, a.id)
	}
	a.queueEventLocked(wire.Event{Kind: wire.EvAbandoned, Rank: a.left.FailRank, Other: -1, Host: a.left.Host,
		End: bootstrap.EndCause{Kind: bootstrap.EndAbandoned, Detail: wire.Clip(detail)}})
}

// deliverLocked completes the collective with result (a down or abort
// message): it passes it on to the children and to the PEs.
func (a *Agent) deliverLocked(result *wire.Message) {
	c := a.coll
	a.coll = nil
	a.done = c.seq
	a.stats.Collectives++
	out := *result
	out.Rank = a.id
	down := wire.AppendMessage(nil, &out)
	for _, ch := range a.children {
		a.sendAsync(ch.ID, ch.Addr, down)
	}
	toPEs := &wire.Message{Kind: wire.KindResult, JobID: a.env.JobID, Rank: -1, Seq: c.seq}
	fd := -1
	switch {
	case result.Kind == wire.KindAbort:
		toPEs = &wire.Message{Kind: wire.KindAbort, JobID: a.env.JobID, Rank: -1, Seq: c.seq, Reason: result.Reason}
	case c.barrier:
		toPEs.Flags = wire.FlagBarrier
	default:
		table := wire.EncodeTable(result.Entries)
		var err error
		if fd, err = wire.WriteTableFile(table); err != nil {
			toPEs = &wire.Message{Kind: wire.KindAbort, JobID: a.env.JobID, Rank: -1, Seq: c.seq, Reason: err.Error()}
		} else {
			toPEs.Size = uint64(len(table))
			a.stats.TableBytes = max(a.stats.TableBytes, len(table))
		}
	}
	for r := range c.local {
		if p := a.pes[r]; p != nil && !p.gone {
			a.toPE(p, toPEs, fd)
		}
	}
	wire.CloseFD(fd)
}

// toPE sends msg (with the descriptor fd, when >= 0) to the PE p; a PE
// that cannot be written to is gone.
func (a *Agent) toPE(p *localPE, msg *wire.Message, fd int) {
	if err := p.conn.Send(msg, fd); err != nil {
		a.logf("PE %d: %v", p.rank, err)
		p.gone = true
		p.conn.Close()
	}
}

// serve reads the frames of the PE p until its channel closes.
func (a *Agent) serve(p *localPE) {
	for {
		m, fd, err := p.conn.Recv()
		wire.CloseFD(fd) // a PE sends no descriptor
		if err != nil {
			a.mu.Lock()
			var ve *wire.VersionError
			if errors.As(err, &ve) && !p.joined && p.other == nil {
				// A hello of another version: the PE learns this
				// agent's version from the welcome (its layout is
				// every version's), and the launcher from the PE's
				// report (VersionMismatch).
				p.other = ve
				_, build := wire.Speaks()
				a.toPE(p, &wire.Message{Kind: wire.KindWelcome, JobID: a.env.JobID, Rank: -1, Build: build}, -1)
				a.logf("PE %d: a hello of another goshmem version: %s", p.rank, ve.Advice(false))
			}
			p.gone = true
			a.mu.Unlock()
			p.conn.Close()
			return
		}
		a.fromPE(p, m)
	}
}

// VersionMismatch returns, for the PE rank, an error that says that its
// program is built from another goshmem version than the agent (its hello
// was of another version of the bootstrap's messages), naming both and
// what to do; nil if it is not. The PE reports it too, and ends: the
// caller says it with the PE's end (Report).
func (a *Agent) VersionMismatch(rank int) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p := a.pes[rank]; p != nil && p.other != nil {
		return errors.New("the program is built from another goshmem version than goshmem-run: " + p.other.Advice(false))
	}
	return nil
}

// fromPE handles a frame of the PE p.
func (a *Agent) fromPE(p *localPE, m *wire.Message) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	if !p.heard.IsZero() {
		a.stats.MaxSilence = max(a.stats.MaxSilence, now.Sub(p.heard))
	}
	p.heard = now
	if m.JobID != a.env.JobID || m.Rank != p.rank {
		// Not the PE this channel was made for: nothing it says counts.
		a.logf("PE %d: closing its channel: a %v message of job %q from rank %d", p.rank, m.Kind, m.JobID, m.Rank)
		p.gone = true
		p.conn.Close()
		return
	}
	if !p.joined && m.Kind != wire.KindHello {
		a.logf("PE %d: dropping a %v message before its hello", p.rank, m.Kind)
		return
	}
	switch m.Kind {
	case wire.KindHello:
		if p.joined {
			return
		}
		p.joined = true
		a.toPE(p, &wire.Message{Kind: wire.KindWelcome, JobID: a.env.JobID, Rank: -1}, -1)
		for _, f := range a.failures {
			a.toPE(p, f, -1)
		}
		if !a.joined {
			a.joined = true
			a.queueEventLocked(wire.Event{Kind: wire.EvJoined, Rank: p.rank, Other: -1})
		}
	case wire.KindGather:
		c, err := a.collLocked(m.Seq, m.Flags&wire.FlagBarrier != 0)
		switch {
		case err != nil:
		case m.Seq != p.seq+1:
			err = fmt.Errorf("sequence %d after %d", m.Seq, p.seq)
		case c.local[p.rank] != nil:
			err = errors.New("a second contribution")
		}
		if err != nil {
			a.logf("PE %d: dropping a gather: %v", p.rank, err)
			a.toPE(p, &wire.Message{Kind: wire.KindAbort, JobID: a.env.JobID, Rank: -1, Seq: m.Seq, Reason: err.Error()}, -1)
			return
		}
		p.seq, p.finalized = m.Seq, false
		if m.Payload == nil {
			m.Payload = []byte{}
		}
		c.local[p.rank] = m.Payload
		a.advanceLocked()
	case wire.KindFinalize:
		p.finalized = true
		a.toPE(p, &wire.Message{Kind: wire.KindFinalizeAck, JobID: a.env.JobID, Rank: -1}, -1)
	case wire.KindGlobalExit:
		a.relayLocked(p, wire.Event{Kind: wire.EvGlobalExit, Rank: p.rank, Code: m.Code, Other: -1, Host: m.Host}, wire.KindGlobalExitAck)
	case wire.KindLost:
		if m.FailRank < 0 || m.FailRank >= a.env.Size || m.FailRank == p.rank {
			a.logf("PE %d: dropping a report of lost PE %d", p.rank, m.FailRank)
			return
		}
		a.relayLocked(p, wire.Event{Kind: wire.EvLost, Rank: p.rank, Other: m.FailRank, Why: m.Reason}, wire.KindLostAck)
	case wire.KindPong:
	default:
		a.logf("PE %d: dropping unexpected %v message", p.rank, m.Kind)
	}
}

// relayLocked reports ev to the seed and, once the seed acknowledged it,
// acknowledges it to the PE p with a message of kind ack.
func (a *Agent) relayLocked(p *localPE, ev wire.Event, ack wire.Kind) {
	done := a.queueEventLocked(ev)
	go func() {
		if err := <-done; err != nil {
			a.logf("PE %d: the seed was not told of its %v: %v", p.rank, ack, err)
			return // the PE's wait times out
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		if !p.gone {
			a.toPE(p, &wire.Message{Kind: ack, JobID: a.env.JobID, Rank: -1}, -1)
		}
	}()
}

// queueEventLocked queues evs for the seed, all at once (so that they
// travel in one report); the returned channel gets the outcome, the first
// error of theirs. The caller holds a.mu.
func (a *Agent) queueEventLocked(evs ...wire.Event) chan error {
	if a.closed {
		done := make(chan error, 1)
		done <- bootstrap.ErrClosed
		return done
	}
	each := make(chan error, len(evs))
	a.repMu.Lock()
	for _, ev := range evs {
		a.repQueue = append(a.repQueue, pendingEvent{ev, each})
	}
	a.repMu.Unlock()
	select {
	case a.repKick <- struct{}{}:
	default:
	}
	if len(evs) == 1 {
		return each
	}
	done := make(chan error, 1)
	go func() {
		var first error
		for range evs {
			if err := <-each; first == nil {
				first = err
			}
		}
		done <- first
	}()
	return done
}

// pingLoop pings the PEs that connected, and names on Silent those that
// stay silent for silentAfter while the agent runs: after a gap in the
// agent's own ticks (it was stopped, or starved of CPU, as its process is
// when it is the launcher's and the launcher was stopped), its PEs got no
// pings to answer, and their silence counts from then.
func (a *Agent) pingLoop() {
	t := time.NewTicker(a.pingEvery)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-a.stopPing:
			return
		case <-t.C:
			now := time.Now()
			gap := now.Sub(last) > 2*a.pingEvery
			last = now
			a.mu.Lock()
			for _, p := range a.pes {
				if !p.joined || p.gone || p.silentSet {
					continue
				}
				if gap {
					p.heard = now
				}
				if now.Sub(p.heard) >= a.silentAfter {
					p.silentSet = true
					select {
					case a.silent <- p.rank:
					default: // named already (a PE attached again)
					}
					continue
				}
				a.toPE(p, &wire.Message{Kind: wire.KindPing, JobID: a.env.JobID, Rank: -1}, -1)
			}
			a.mu.Unlock()
		}
	}
}

// agentDelegate receives an agent's memberlist callbacks.
type agentDelegate struct{ a *Agent }

func (d agentDelegate) NodeMeta(limit int) []byte {
	return nodeMeta(limit, d.a.nodeName, d.a.ranks)
}
func (d agentDelegate) NotifyMsg(b []byte)                         { d.a.handle(b) }
func (d agentDelegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d agentDelegate) LocalState(join bool) []byte                { return nil }
func (d agentDelegate) MergeRemoteState(buf []byte, join bool)     {}
func (d agentDelegate) NotifyJoin(n *memberlist.Node)              { d.a.deaths.joined(n.Name) }
func (d agentDelegate) NotifyUpdate(n *memberlist.Node)            {}

// NotifyLeave ends the agent's PEs when the seed leaves, or is declared
// dead and stays unreachable (deathWatch).
func (d agentDelegate) NotifyLeave(n *memberlist.Node) {
	if n.Name == seedName {
		d.a.deaths.left(n, func(*memberlist.Node) { d.a.seedLeft() })
	}
}
