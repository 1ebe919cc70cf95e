// Package bootstrap connects the processing elements (PEs) of a goshmem job:
// membership, allgather, barrier and failure notice.
//
// The launcher (goshmem-run, package launcher) runs a seed, a memberlist
// node, and one agent per host (per PE under a cluster manager's spawner),
// which joins the seed's memberlist cluster: traffic is encrypted with the
// job key, so nobody without it joins, and labelled with the job id. The
// agents are the job's only members: a PE is not one. Its agent starts it
// with the environment described by Env (GOSHMEM_JOBID, GOSHMEM_RANK,
// GOSHMEM_SIZE, GOSHMEM_SEED, GOSHMEM_KEY, GOSHMEM_LOCAL_RANK,
// GOSHMEM_LOCAL_SIZE, GOSHMEM_AGENT_FD) and a local channel to it (a unix
// socket pair, cluster.Agent.Attach); the PE calls JoinFromOS, which says
// hello on that channel.
//
// Collectives never wait for gossip to converge. A PE sends its blob to its
// agent; the agents gather their PEs' blobs in a tree (package cluster),
// each sending its subtree's in one message to its parent, and the result
// comes back down the tree. Each agent writes an allgather's table once,
// into a sealed memory file that its PEs map read-only (Exchange returns it
// as a Table): a PE reads the entries it needs, and no PE copies the N
// entries. A collective costs each agent a handful of messages, whatever the
// job's size, and O(log agents) hops. Barrier gathers no blobs.
//
// Failures: an agent sees its PEs exit, and tells the seed how each ended
// (cluster.Agent.Report); it also pings those that joined, and names one
// that stops answering (cluster.Agent.Silent). The seed tells every agent,
// and each agent its PEs, when a PE failed: the PEs' pending collectives
// return the Failure. memberlist's failure detection tells the seed when an
// agent (a host) dies, and the agents when the seed does; an agent whose
// seed is gone ends its PEs, and a PE whose agent is gone learns it as a
// failure of the launcher (Rank -1). memberlist is tuned so that a member
// that stops answering is declared dead within about the job's failure
// timeout (Env.FailureTimeout, GOSHMEM_FAILURE_TIMEOUT,
// DefaultFailureTimeout). A PE that ends because it lost a peer says so
// first (Member.ReportLost), and so do agents of the PEs they ended
// themselves, so that the launcher names the first cause of a job's end
// (cluster.Seed.Lost, cluster.Report.EndedByAgent). A PE can end the whole
// job with an exit status of its choosing (Member.GlobalExit).
//
// A program started without the launcher is a job of one PE: JoinFromOS
// returns a singleton Member that opens no socket.
//
// This package is the PE's side: Member, Env, Table and Failure. The agent's
// side, the seed and memberlist are package bootstrap/cluster, which the
// launcher imports and a PE never does: a PE binary links neither memberlist
// nor what it brings (net/http, go-metrics, ...), and starts without their
// initialisation. What both sides share (the messages, the local channel,
// the table file) is bootstrap/internal/wire.
package bootstrap

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/goshmem/goshmem/internal/jobkey"
	"github.com/goshmem/goshmem/ucs"

	"github.com/goshmem/goshmem/bootstrap/internal/wire"
)

// finalizeTimeout bounds the wait for the agent to acknowledge a finalize,
// a global exit or a report of a lost peer.
const finalizeTimeout = 5 * time.Second

// joinTimeout bounds the wait for the agent's welcome.
const joinTimeout = 30 * time.Second

// MaxAllgather is the largest total size, in bytes, of the blobs of one
// Allgather or Exchange (the sum over all PEs). memberlist refuses stream
// messages above 20 MiB; this leaves room for framing and encryption.
const MaxAllgather = wire.MaxAllgather

// Member is a PE's membership in its job. Its methods are safe for
// concurrent use; collectives (Allgather, Exchange, Barrier) are
// serialized.
type Member struct {
	env    Env
	conn   *wire.Conn // nil for a singleton
	logger *log.Logger

	opMu sync.Mutex // one collective (or finalize) at a time

	mu        sync.Mutex
	seq       uint64 // of the last collective
	reply     chan reply
	finalized bool // Finalize told the agent, and no collective since
	welcome   chan struct{}
	finAck    chan struct{}
	exitAck   chan struct{}
	lostAck   chan struct{}
	failed    map[int]bool
	failures  []Failure
	failCh    chan struct{} // closed at the first failure
	callbacks []func(Failure)
	closed    bool
	closeCh   chan struct{}
}

// reply is what the agent answered to a collective: a result (with the
// table's descriptor) or an abort.
type reply struct {
	m  *wire.Message
	fd int
}

// JoinFromOS joins the job described by the environment (see EnvFromOS). A
// process started without the launcher is a job of one PE: JoinFromOS
// then returns a singleton Member. It is JoinFromOSWithLogger(nil).
func JoinFromOS() (*Member, error) { return JoinFromOSWithLogger(nil) }

// JoinFromOSWithLogger is JoinFromOS for a member whose log goes to l
// (Env.Logger).
func JoinFromOSWithLogger(l ucs.Logger) (*Member, error) {
	env, ok, err := EnvFromOS()
	if err != nil {
		return nil, err
	}
	if !ok {
		env = singletonEnv
	}
	env.Logger = l
	return Join(env)
}

// newMember returns the Member of env, logging to logger, with no channel
// to its agent yet.
func newMember(env Env, logger *log.Logger) *Member {
	return &Member{
		env:     env,
		logger:  logger,
		welcome: make(chan struct{}),
		finAck:  make(chan struct{}),
		exitAck: make(chan struct{}),
		lostAck: make(chan struct{}),
		failed:  make(map[int]bool),
		failCh:  make(chan struct{}),
		closeCh: make(chan struct{}),
	}
}

// Join joins the job through the agent's channel env.AgentFD (which it
// takes over) and returns when the agent has welcomed this PE. With
// env.Size 1 and no seed, it returns a singleton Member that uses no
// channel. The error wraps ucs.ErrInvalidParam for a malformed env, and
// ucs.ErrUnreachable when the agent does not answer.
func Join(env Env) (*Member, error) {
	if err := env.Validate(); err != nil {
		return nil, err
	}
	m := newMember(env, wire.DebugLogger(env.Logger, "goshmem pe-"+strconv.Itoa(env.Rank)+": "))
	if env.Seed == "" {
		return m, nil // singleton
	}
	f := os.NewFile(uintptr(env.AgentFD), "goshmem-agent-channel")
	conn, err := wire.FileConn(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("bootstrap: PE %d: %s=%d: %w: %w", env.Rank, EnvAgentFD, env.AgentFD, ucs.ErrUnreachable, err)
	}
	m.conn = conn
	go m.readLoop()
	fail := func(err error) (*Member, error) {
		m.mu.Lock()
		m.closed = true
		close(m.closeCh)
		m.mu.Unlock()
		conn.Close()
		return nil, fmt.Errorf("bootstrap: PE %d: joining through its agent: %w: %w", env.Rank, ucs.ErrUnreachable, err)
	}
	_, build := wire.Speaks()
	if err := conn.Send(&wire.Message{Kind: wire.KindHello, JobID: env.JobID, Rank: env.Rank, Build: build}, -1); err != nil {
		return fail(err)
	}
	t := time.NewTimer(joinTimeout)
	defer t.Stop()
	select {
	case <-m.welcome:
		return m, nil
	case <-m.failCh:
		m.mu.Lock()
		err := m.failures[0]
		m.mu.Unlock()
		return fail(err)
	case <-t.C:
		return fail(errors.New("no welcome from the agent within " + joinTimeout.String()))
	}
}

// Validate checks e as Join does. The error wraps ucs.ErrInvalidParam.
func (e Env) Validate() error {
	bad := func(what string) error {
		return fmt.Errorf("bootstrap: env: %s: %w", what, ucs.ErrInvalidParam)
	}
	switch {
	case e.Size < 1 || e.Size > wire.MaxRanks:
		return bad("size " + strconv.Itoa(e.Size) + " out of range")
	case e.Rank < 0 || e.Rank >= e.Size:
		return bad("rank " + strconv.Itoa(e.Rank) + " out of range [0, " + strconv.Itoa(e.Size) + ")")
	case e.LocalSize < 1 || e.LocalSize > e.Size:
		return bad("local size " + strconv.Itoa(e.LocalSize) + " out of range")
	case e.LocalRank < 0 || e.LocalRank >= e.LocalSize:
		return bad("local rank " + strconv.Itoa(e.LocalRank) + " out of range")
	case e.Seed == "" && e.Size != 1:
		return bad("no seed for a job of " + strconv.Itoa(e.Size) + " PEs")
	case e.Seed != "" && !wire.ValidJobID(e.JobID):
		return bad("job id " + strconv.Quote(e.JobID))
	case e.AgentFD < 0:
		return bad("agent channel " + strconv.Itoa(e.AgentFD))
	}
	if e.Seed != "" {
		return jobkey.Check(e.Key)
	}
	return nil
}

// Rank returns this PE's rank in [0, Size()).
func (m *Member) Rank() int { return m.env.Rank }

// Size returns the number of PEs in the job.
func (m *Member) Size() int { return m.env.Size }

// LocalRank returns this PE's rank among the PEs of its host.
func (m *Member) LocalRank() int { return m.env.LocalRank }

// LocalSize returns the number of PEs on this PE's host.
func (m *Member) LocalSize() int { return m.env.LocalSize }

// JobID returns the job id.
func (m *Member) JobID() string { return m.env.JobID }

// Exchange sends blob to every PE and returns the blobs of all PEs, and
// the node of each, in a Table that the PEs of this host share (read-only,
// mapped from the memory file their agent wrote): reading an entry copies
// nothing, and entries that are not read cost nothing. The caller closes
// the Table. It is collective: every PE must call it (or Allgather), and
// calls are matched by their order. Blobs may differ in size; their total
// must not exceed MaxAllgather (the error then wraps ucs.ErrExceedsLimit).
//
// If a PE, an agent or the seed fails or leaves before Close, a pending or
// later Exchange returns an error wrapping the Failure (and
// ucs.ErrConnectionReset). After Close it returns ErrClosed.
func (m *Member) Exchange(blob []byte) (*Table, error) {
	if len(blob) > MaxAllgather {
		return nil, fmt.Errorf("bootstrap: allgather of %d bytes exceeds the limit of %d: %w", len(blob), MaxAllgather, ucs.ErrExceedsLimit)
	}
	if m.conn == nil {
		if err := m.singletonErr(); err != nil {
			return nil, err
		}
		return parseTable(wire.EncodeTable([]wire.Entry{{Blob: blob}}), 1)
	}
	r, err := m.collective(blob, 0)
	if err != nil {
		return nil, err
	}
	t, err := mapTable(r.fd, r.m.Size, m.env.Size)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(t.Blob(m.env.Rank), blob) {
		t.Close()
		return nil, fmt.Errorf("bootstrap: the agent answered with another blob for this PE %d: %w", m.env.Rank, ucs.ErrInvalidParam)
	}
	return t, nil
}

// Allgather is Exchange that returns a copy of the blobs, indexed by rank
// (this PE's entry is a copy of blob).
func (m *Member) Allgather(blob []byte) ([][]byte, error) {
	t, err := m.Exchange(blob)
	if err != nil {
		return nil, err
	}
	defer t.Close()
	all := make([][]byte, t.Len())
	for i := range all {
		all[i] = bytes.Clone(t.Blob(i))
		if all[i] == nil {
			all[i] = []byte{}
		}
	}
	return all, nil
}

// Barrier returns when every PE has called it. It is collective and
// ordered with Allgather and Exchange, and fails like them.
func (m *Member) Barrier() error {
	if m.conn == nil {
		return m.singletonErr()
	}
	_, err := m.collective(nil, wire.FlagBarrier)
	return err
}

// singletonErr is what a collective of a singleton returns: ErrClosed
// after Close.
func (m *Member) singletonErr() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	return nil
}

// collective sends this PE's contribution to the next collective and waits
// for the agent's result.
func (m *Member) collective(blob []byte, flags uint8) (reply, error) {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	m.mu.Lock()
	if err := m.errLocked(); err != nil {
		m.mu.Unlock()
		return reply{}, err
	}
	m.seq++
	seq := m.seq
	ch := make(chan reply, 1)
	m.reply = ch
	m.finalized = false // the gather tells the agent this PE is active again
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.reply = nil
		m.mu.Unlock()
	}()

	msg := &wire.Message{Kind: wire.KindGather, JobID: m.env.JobID, Rank: m.env.Rank, Seq: seq, Flags: flags, Payload: blob}
	if err := m.conn.Send(msg, -1); err != nil {
		m.mu.Lock()
		ferr := m.errLocked()
		m.mu.Unlock()
		if ferr != nil {
			return reply{}, ferr
		}
		return reply{}, fmt.Errorf("bootstrap: PE %d: sending to its agent: %w: %w", m.env.Rank, ucs.ErrUnreachable, err)
	}
	select {
	case r := <-ch:
		if r.m.Kind == wire.KindAbort {
			return reply{}, fmt.Errorf("bootstrap: allgather aborted: %s: %w", r.m.Reason, ucs.ErrExceedsLimit)
		}
		if r.m.Flags != flags || (flags&wire.FlagBarrier == 0) != (r.fd >= 0) {
			wire.CloseFD(r.fd)
			return reply{}, fmt.Errorf("bootstrap: PE %d: the agent answered a %v with another kind of result: %w",
				m.env.Rank, map[bool]string{true: "barrier", false: "allgather"}[flags&wire.FlagBarrier != 0], ucs.ErrInvalidParam)
		}
		return r, nil
	case <-m.failCh:
	case <-m.closeCh:
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return reply{}, m.errLocked()
}

// errLocked returns the error that ends collectives, if any.
func (m *Member) errLocked() error {
	if m.closed {
		return ErrClosed
	}
	if len(m.failures) > 0 {
		return fmt.Errorf("bootstrap: PE %d: %w", m.env.Rank, m.failures[0])
	}
	return nil
}

// OnFailure registers fn to be called, in a goroutine of its own, for each
// PE that fails or leaves before Close, and with Rank -1 when the launcher
// (its seed, or this PE's agent) leaves or fails. Failures that happened
// before OnFailure are reported too. No call is made after Close. A
// singleton never fails.
func (m *Member) OnFailure(fn func(f Failure)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	m.callbacks = append(m.callbacks, fn)
	for _, f := range m.failures {
		go fn(f)
	}
}

// recordFailure notes f (once per rank), ends the pending collective and
// calls the callbacks.
func (m *Member) recordFailure(f Failure) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || m.failed[f.Rank] {
		return
	}
	m.failed[f.Rank] = true
	m.failures = append(m.failures, f)
	if len(m.failures) == 1 {
		close(m.failCh)
	}
	for _, fn := range m.callbacks {
		go fn(f)
	}
}

// Close finalizes the PE: it tells its agent that this PE ends cleanly
// (waiting a few seconds at most for the acknowledgment), unless Finalize
// did since the last collective, and closes the channel. A collective
// pending in another goroutine returns ErrClosed. Close is idempotent;
// calls after the first return nil. An error means the agent could not be
// told (it is gone): the launcher may then report this PE as failed.
func (m *Member) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	close(m.closeCh)
	lost, finalized := m.failed[-1], m.finalized
	m.mu.Unlock()
	if m.conn == nil {
		return nil
	}
	m.opMu.Lock() // wait for a pending collective to return
	defer m.opMu.Unlock()
	var err error
	if !lost && !finalized {
		err = m.finalize()
	}
	m.conn.Close()
	return err
}

// Finalize tells the agent that this PE ended its part of the job cleanly,
// as Close does, but stays a member: a process that may initialize again
// (OpenSHMEM 1.6 lets a program finalize and initialize more than once)
// keeps its Member, and its next collective tells the agent that it is
// active again, so that an exit without finalize is then a failure again.
// Close after Finalize does not tell the agent twice. It returns ErrClosed
// after Close, and the errors of Close.
func (m *Member) Finalize() error {
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if m.conn == nil {
		return nil
	}
	m.opMu.Lock()
	defer m.opMu.Unlock()
	return m.finalize()
}

// finalize tells the agent that this PE finalized and waits a few seconds
// at most for its acknowledgment. The caller holds opMu.
func (m *Member) finalize() error {
	m.mu.Lock()
	ack := make(chan struct{})
	m.finAck, m.finalized = ack, true
	m.mu.Unlock()
	return m.sendWait(&wire.Message{Kind: wire.KindFinalize, JobID: m.env.JobID, Rank: m.env.Rank}, ack, "finalize")
}

// GlobalExit asks the launcher to end the whole job with exit status code:
// it tells the seed, through the agent (waiting a few seconds at most for
// the acknowledgment), after which the launcher ends every PE and exits
// with code. The caller should then exit with code itself (as OpenSHMEM's
// shmem_global_exit does); the launcher ends it otherwise. GlobalExit does
// not wait for a pending collective, and may be called after a failure. For
// a singleton it does nothing. The error wraps ucs.ErrUnreachable when the
// agent cannot be told, ucs.ErrTimedOut when the seed did not acknowledge,
// and is ErrClosed after Close.
func (m *Member) GlobalExit(code int) error {
	msg := &wire.Message{Kind: wire.KindGlobalExit, JobID: m.env.JobID, Rank: m.env.Rank, Code: code, Host: wire.HostName(wire.MaxString)}
	return m.tellAgent(msg, m.exitAck, "global exit")
}

// ReportLost tells the seed, through the agent, that this PE is about to
// end because it lost the PE rank (a connection to it failed: reason says
// how), and waits a few seconds at most for the seed's acknowledgment. The
// launcher then takes this PE's end for a consequence of that PE's
// failure, and names the PE that failed first, whatever order the ends of
// the two reach it in. Call it before exiting; only the first loss a PE
// reports counts. For a singleton it does nothing. The error wraps
// ucs.ErrInvalidParam for a rank out of range or this PE's own, and is
// otherwise that of GlobalExit.
func (m *Member) ReportLost(rank int, reason string) error {
	if rank < 0 || rank >= m.env.Size || rank == m.env.Rank {
		return fmt.Errorf("bootstrap: PE %d: report of lost PE %d: out of range [0, %d) or this PE: %w", m.env.Rank, rank, m.env.Size, ucs.ErrInvalidParam)
	}
	msg := &wire.Message{Kind: wire.KindLost, JobID: m.env.JobID, Rank: m.env.Rank, FailRank: rank, Reason: wire.Clip(reason)}
	return m.tellAgent(msg, m.lostAck, "report of lost PE "+strconv.Itoa(rank))
}

// tellAgent sends msg to the agent and waits, finalizeTimeout at most, for
// ack to be closed (by the acknowledgment). It returns ErrClosed after
// Close.
func (m *Member) tellAgent(msg *wire.Message, ack chan struct{}, what string) error {
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return ErrClosed
	}
	return m.sendWait(msg, ack, what)
}

// sendWait sends msg to the agent and waits, finalizeTimeout at most, for
// ack to be closed.
func (m *Member) sendWait(msg *wire.Message, ack chan struct{}, what string) error {
	if m.conn == nil {
		return nil
	}
	if err := m.conn.Send(msg, -1); err != nil {
		return fmt.Errorf("bootstrap: PE %d: %s: %w: %w", m.env.Rank, what, ucs.ErrUnreachable, err)
	}
	t := time.NewTimer(finalizeTimeout)
	defer t.Stop()
	select {
	case <-ack:
		return nil
	case <-t.C:
		return fmt.Errorf("bootstrap: PE %d: the %s was not acknowledged: %w", m.env.Rank, what, ucs.ErrTimedOut)
	}
}

// readLoop reads the agent's frames until the channel closes; a channel
// that closes before Close is a lost agent.
func (m *Member) readLoop() {
	for {
		msg, fd, err := m.conn.Recv()
		if err != nil {
			m.mu.Lock()
			closed := m.closed
			m.mu.Unlock()
			if !closed {
				m.recordFailure(Failure{Rank: -1, Host: wire.HostName(wire.MaxString), Cause: m.agentLost(err)})
			}
			return
		}
		m.handle(msg, fd)
	}
}

// agentLost says why the channel to the agent failed with err: the agent
// is gone, or was built from another goshmem (it answered the hello with
// a welcome of another version, or, older than version 4, closed the
// channel without one).
func (m *Member) agentLost(err error) EndCause {
	var ve *wire.VersionError
	if errors.As(err, &ve) {
		return EndCause{Kind: EndOtherBuild, Detail: ve.Advice(true)}
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		return EndCause{Kind: EndAgentGone, Detail: err.Error()}
	}
	select {
	case <-m.welcome:
		return EndCause{Kind: EndAgentGone}
	default:
	}
	v, build := wire.Speaks()
	return EndCause{Kind: EndAgentGone, Detail: "before it welcomed this PE: if goshmem-run is built from a goshmem older than the program's (which speaks version " +
		strconv.Itoa(v) + " of the bootstrap's messages, goshmem " + build + "), it could not read the PE's hello: then " + wire.AdviceRebuild}
}

// handle processes a frame of the agent.
func (m *Member) handle(msg *wire.Message, fd int) {
	if msg.JobID != m.env.JobID || msg.Rank != -1 {
		m.logger.Printf("[WARN] goshmem: dropping %v message from %d of job %q", msg.Kind, msg.Rank, msg.JobID)
		wire.CloseFD(fd)
		return
	}
	switch msg.Kind {
	case wire.KindResult, wire.KindAbort:
		m.mu.Lock()
		if msg.Seq == m.seq && m.reply != nil {
			m.reply <- reply{msg, fd} // buffered, and m.reply is cleared below
			m.reply = nil
			fd = -1
		} else {
			m.logger.Printf("[WARN] goshmem: dropping %v message for sequence %d (at %d)", msg.Kind, msg.Seq, m.seq)
		}
		m.mu.Unlock()
	case wire.KindWelcome, wire.KindFinalizeAck, wire.KindGlobalExitAck, wire.KindLostAck:
		m.mu.Lock()
		ch := m.welcome
		switch msg.Kind {
		case wire.KindFinalizeAck:
			ch = m.finAck
		case wire.KindGlobalExitAck:
			ch = m.exitAck
		case wire.KindLostAck:
			ch = m.lostAck
		}
		select {
		case <-ch:
		default:
			close(ch)
		}
		m.mu.Unlock()
	case wire.KindPing:
		if err := m.conn.Send(&wire.Message{Kind: wire.KindPong, JobID: m.env.JobID, Rank: m.env.Rank}, -1); err != nil {
			m.logger.Printf("[WARN] goshmem: answering the agent: %v", err)
		}
	case wire.KindFailure:
		if msg.FailRank < -1 || msg.FailRank >= m.env.Size {
			m.logger.Printf("[WARN] goshmem: dropping failure message for rank %d", msg.FailRank)
			break
		}
		m.recordFailure(Failure{Rank: msg.FailRank, Host: msg.Host, Cause: msg.Cause})
	default:
		m.logger.Printf("[WARN] goshmem: dropping unexpected %v message", msg.Kind)
	}
	wire.CloseFD(fd)
}
