package bootstrap

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/goshmem/goshmem/ucs"
	"github.com/hashicorp/memberlist"
)

// reportTimeout bounds the wait for the seed to acknowledge an agent's
// report.
const reportTimeout = 5 * time.Second

// Agent is a member of a job that is not a PE: the process that starts and
// watches the PEs of one host (or one PE) for the launcher, when the
// launcher cannot do it itself (PEs on other hosts, started through a
// remote shell or a cluster manager). It tells the seed how each of its PEs
// ended (Report), learns when the launcher ends the job (Terminated), and
// notices when the launcher is gone. Its methods are safe for concurrent
// use.
type Agent struct {
	id       int
	env      Env
	list     *memberlist.Memberlist
	seedIP   net.IP
	seedPort uint16
	addr     string
	logger   interface{ Printf(string, ...any) }

	reportMu sync.Mutex // one report at a time

	mu      sync.Mutex
	seq     uint64        // of the latest report
	ack     chan struct{} // closed when report seq is acknowledged
	done    chan struct{} // closed at the first of: terminate, seed gone
	why     string
	closed  bool
	closeCh chan struct{}
	stall   chan []int // see StallReports
}

// JoinAgent joins the job described by env (its JobID, Size, Seed, Key and
// FailureTimeout; the rank fields are not used) as the agent id, which must
// be in [0, agents) for the agents count the seed was configured with. The
// error wraps ucs.ErrInvalidParam for a malformed env or id, and
// ucs.ErrUnreachable when the seed cannot be joined (it is not there, or it
// has another key).
func JoinAgent(env Env, id int) (*Agent, error) {
	if id < 0 || id >= maxRanks {
		return nil, fmt.Errorf("bootstrap: agent id %d out of range: %w", id, ucs.ErrInvalidParam)
	}
	if env.Seed == "" {
		return nil, fmt.Errorf("bootstrap: agent %d: no seed: %w", id, ucs.ErrInvalidParam)
	}
	env.Rank, env.LocalRank, env.LocalSize = 0, 0, 1 // not an agent's
	if err := checkEnv(env); err != nil {
		return nil, err
	}
	seed, err := net.ResolveTCPAddr("tcp", env.Seed)
	if err != nil || seed.Port == 0 {
		return nil, fmt.Errorf("bootstrap: seed %q: cannot resolve: %v: %w", env.Seed, err, ucs.ErrInvalidParam)
	}
	bind, err := localIPFor(seed.String())
	if err != nil {
		return nil, fmt.Errorf("bootstrap: no route to seed %s: %w: %w", env.Seed, ucs.ErrUnreachable, err)
	}
	a := &Agent{
		id:       id,
		env:      env,
		seedIP:   seed.IP,
		seedPort: uint16(seed.Port),
		done:     make(chan struct{}),
		closeCh:  make(chan struct{}),
		stall:    make(chan []int, 1),
	}
	logger := debugLogger("goshmem " + agentName(id) + ": ")
	a.logger = logger
	nodes := 2*env.Size + 1
	c := newConfig(agentName(id), bind, env.JobID, env.Key, logger, env.FailureTimeout, nodes)
	c.Delegate = agentDelegate{a}
	c.Events = agentDelegate{a}
	list, _, err := createList(c, nodes)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: agent %d: starting memberlist: %w", id, err)
	}
	if _, err := list.Join([]string{seed.String()}); err != nil {
		list.Shutdown()
		return nil, fmt.Errorf("bootstrap: agent %d cannot join the seed %s (wrong key or job?): %w: %w", id, env.Seed, ucs.ErrUnreachable, err)
	}
	a.mu.Lock()
	a.list = list
	a.addr = nodeAddr(list.LocalNode())
	a.mu.Unlock()
	return a, nil
}

// ID returns the agent's id.
func (a *Agent) ID() int { return a.id }

// Report tells the seed that the PE rank ended: how says how ("exited with
// status 3"), code is the exit code that stands for it, host names the
// host. endedBy, when not empty, says that the agent had told the PE to end
// while it still ran, and why ("the launcher ends the job", Why, or a
// signal the agent got): its end is then a consequence, not a failure of
// its own (Report.EndedByAgent). Report returns once the seed acknowledged
// the report (the launcher then has it), retrying for a few seconds; a
// seed whose port refuses the connection is gone (the process ended), and
// the agent then counts as terminated (SeedGone). The error wraps
// ucs.ErrInvalidParam for a rank out of range, ucs.ErrConnectionReset when
// the seed is gone, ucs.ErrTimedOut when it did not answer, and is
// ErrClosed after Close.
func (a *Agent) Report(rank int, host, how string, code int, endedBy string) error {
	if rank < 0 || rank >= a.env.Size {
		return fmt.Errorf("bootstrap: agent %d: report of PE %d out of range [0, %d): %w", a.id, rank, a.env.Size, ucs.ErrInvalidParam)
	}
	host, how, endedBy = clip(host), clip(how), clip(endedBy)
	a.reportMu.Lock()
	defer a.reportMu.Unlock()
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return ErrClosed
	}
	a.seq++
	seq := a.seq
	ack := make(chan struct{})
	a.ack = ack
	a.mu.Unlock()

	m := &message{kind: kindAgentReport, jobID: a.env.JobID, rank: a.id, seq: seq,
		addr: a.addr, failRank: rank, code: code, host: host, reason: how}
	if endedBy != "" {
		m.flags, m.why = flagEndedByAgent, endedBy
	}
	msg := appendMessage(nil, m)
	deadline := time.NewTimer(reportTimeout)
	defer deadline.Stop()
	for {
		if a.SeedGone() {
			// One try, not waiting for an answer: a launcher that was only
			// stopped reads it when it resumes.
			a.list.SendReliable(&memberlist.Node{Name: seedName, Addr: a.seedIP, Port: a.seedPort}, msg)
			return fmt.Errorf("bootstrap: agent %d: report of PE %d: the seed is gone: %w", a.id, rank, ucs.ErrConnectionReset)
		}
		err := sendReliable(a.list, seedName, a.seedIP, a.seedPort, msg)
		if errors.Is(err, syscall.ECONNREFUSED) {
			// Nothing listens on the seed's port: the launcher's process
			// is gone, whatever memberlist will conclude later.
			a.terminate(reasonSeedGone)
			return fmt.Errorf("bootstrap: agent %d: report of PE %d: the seed is gone: %w", a.id, rank, ucs.ErrConnectionReset)
		}
		retry := time.NewTimer(reportTimeout / 5)
		select {
		case <-ack:
			retry.Stop()
			return nil
		case <-a.closeCh:
			retry.Stop()
			return ErrClosed
		case <-deadline.C:
			retry.Stop()
			if err != nil {
				return fmt.Errorf("bootstrap: agent %d: report of PE %d: %w: %w", a.id, rank, ucs.ErrUnreachable, err)
			}
			return fmt.Errorf("bootstrap: agent %d: the seed did not acknowledge the report of PE %d: %w", a.id, rank, ucs.ErrTimedOut)
		case <-retry.C:
		}
	}
}

// clip cuts s to the longest string a message carries.
func clip(s string) string {
	if len(s) > maxString {
		return s[:maxString]
	}
	return s
}

// SeedGone reports whether the seed (the launcher) left the job or was
// declared dead: Terminated is then closed too.
func (a *Agent) SeedGone() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	select {
	case <-a.done:
		return a.why == reasonSeedGone
	default:
		return false
	}
}

// Terminated returns a channel that is closed when the agent should end
// its PEs: the launcher ends the job (Seed.Terminate), or the seed left or
// was declared dead. Why then says which.
func (a *Agent) Terminated() <-chan struct{} { return a.done }

// Why returns why Terminated was closed, or "" while it is not.
func (a *Agent) Why() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.why
}

func (a *Agent) terminate(why string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	select {
	case <-a.done:
	default:
		a.why = why
		close(a.done)
	}
}

// Close leaves the job and shuts memberlist down; a Report in progress
// returns ErrClosed. Call it once every PE of the agent ended and was
// reported. It is idempotent.
func (a *Agent) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	close(a.closeCh)
	a.mu.Unlock()
	a.list.Leave(leaveTimeout) // a timeout only means nobody heard it
	if err := a.list.Shutdown(); err != nil {
		return fmt.Errorf("bootstrap: agent %d: %w", a.id, err)
	}
	return nil
}

// handle processes a message from the seed.
func (a *Agent) handle(b []byte) {
	msg, err := decodeMessage(bytes.Clone(b))
	if err != nil {
		a.logger.Printf("[WARN] goshmem: dropping message: %v", err)
		return
	}
	if msg.jobID != a.env.JobID || msg.rank != -1 {
		a.logger.Printf("[WARN] goshmem: dropping %v message from rank %d of job %q", msg.kind, msg.rank, msg.jobID)
		return
	}
	switch msg.kind {
	case kindAgentAck:
		a.mu.Lock()
		if msg.seq == a.seq && a.ack != nil {
			close(a.ack)
			a.ack = nil
		}
		a.mu.Unlock()
	case kindTerminate:
		a.terminate(msg.reason)
	case kindStallReport:
		a.stallReport(msg.ranks)
	default:
		a.logger.Printf("[WARN] goshmem: dropping unexpected %v message", msg.kind)
	}
}

// agentDelegate receives an agent's memberlist callbacks.
type agentDelegate struct{ a *Agent }

func (d agentDelegate) NodeMeta(limit int) []byte                  { return hostMeta(limit) }
func (d agentDelegate) NotifyMsg(b []byte)                         { d.a.handle(b) }
func (d agentDelegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d agentDelegate) LocalState(join bool) []byte                { return nil }
func (d agentDelegate) MergeRemoteState(buf []byte, join bool)     {}
func (d agentDelegate) NotifyJoin(n *memberlist.Node)              {}
func (d agentDelegate) NotifyUpdate(n *memberlist.Node)            {}

// NotifyLeave ends the agent's PEs when the seed leaves or dies.
func (d agentDelegate) NotifyLeave(n *memberlist.Node) {
	if n.Name == seedName {
		d.a.terminate(reasonSeedGone)
	}
}
