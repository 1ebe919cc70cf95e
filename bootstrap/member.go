// Package bootstrap connects the processing elements (PEs) of a goshmem job:
// membership, allgather, barrier and failure notice.
//
// The launcher (goshmem-run, package launcher) runs a Seed and starts each
// PE with the environment described by Env (GOSHMEM_JOBID, GOSHMEM_RANK,
// GOSHMEM_SIZE, GOSHMEM_SEED, GOSHMEM_KEY, GOSHMEM_LOCAL_RANK,
// GOSHMEM_LOCAL_SIZE). A PE calls JoinFromOS, which joins the seed's
// memberlist cluster: traffic is encrypted with the job key, so nobody
// without it joins, and labelled with the job id.
//
// Collectives never wait for gossip to converge. Allgather (and Barrier,
// an Allgather of nothing) is a star: each PE sends its blob to the seed in
// a reliable memberlist message; once the seed has the blobs of all PEs it
// answers each PE with the full table. memberlist's failure detection tells
// the seed when a PE dies or leaves before Close; the seed then tells the
// other PEs, whose pending collectives return the Failure, as they do when
// the seed itself leaves or dies.
//
// A program started without the launcher is a job of one PE: JoinFromOS
// returns a singleton Member that opens no socket.
//
// Where the launcher cannot start and watch the PEs itself (other hosts,
// a cluster manager's spawner), an Agent on the PEs' host does: it joins
// the job as a member that is not a PE (JoinAgent), reports how each of its
// PEs ended (the seed passes it on, Seed.Reports), and learns when the
// launcher ends the job (Seed.Terminate) or is gone. A PE can end the whole
// job with an exit status of its choosing (Member.GlobalExit).
//
// Failure detection is memberlist's, tuned so that a member that stops
// answering is declared dead within about the job's failure timeout
// (Env.FailureTimeout, GOSHMEM_FAILURE_TIMEOUT, DefaultFailureTimeout).
// Members that exit are noticed at once by the process that started them.
// A PE that ends because it lost a peer says so first (Member.ReportLost),
// and so do agents of the PEs they ended themselves, so that the launcher
// names the first cause of a job's end (Seed.Lost, Report.EndedByAgent).
//
// Inbound memberlist streams are bounded before they are authenticated
// (transport.go): how many are read at once, and how many bytes they may
// bring, per node and per remote address.
//
// Bootstrap messages cost each PE one message to the seed and one answer
// per collective, whatever the job size; memberlist's own gossip of the
// membership reaches each member O(N) times in all.
//
// memberlist's log is discarded unless GOSHMEM_DEBUG is set, in which case
// it goes to standard error.
package bootstrap

import (
	"bytes"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/goshmem/goshmem/ucs"
	"github.com/hashicorp/memberlist"
)

// finalizeTimeout bounds the wait for the seed to acknowledge a finalize.
const finalizeTimeout = 5 * time.Second

// Member is a PE's membership in its job. Its methods are safe for
// concurrent use, but the collectives (Allgather, Barrier) are serialized:
// each must be called by every PE of the job, in the same order.
type Member struct {
	env       Env
	list      *memberlist.Memberlist // nil for a singleton
	transport *guardedTransport      // list's
	seedIP    net.IP
	seedPort  uint16
	addr      string // host:port of this PE's node
	logger    interface{ Printf(string, ...any) }

	opMu sync.Mutex // serializes collectives and finalize

	mu        sync.Mutex
	seq       uint64        // sequence of the latest collective
	reply     chan *message // the reply to collective seq, while waiting
	finAck    chan struct{} // closed when the seed acknowledges the latest finalize
	finalized bool          // Finalize told the seed, and no collective came since
	exitAck   chan struct{} // closed when the seed acknowledges a global exit
	lostAck   chan struct{} // closed when the seed acknowledges a ReportLost
	failures  []Failure
	failed    map[int]bool
	failCh    chan struct{} // closed at the first failure
	callbacks []func(Failure)
	closed    bool
	closeCh   chan struct{}
}

// JoinFromOS joins the job described by the environment (see EnvFromOS). A
// process started without the launcher is a job of one PE: JoinFromOS then
// returns a singleton Member.
func JoinFromOS() (*Member, error) {
	env, ok, err := EnvFromOS()
	if err != nil {
		return nil, err
	}
	if !ok {
		env = singletonEnv
	}
	return Join(env)
}

// Join joins the job through its seed at env.Seed and returns when the
// seed has accepted this PE. With env.Size 1 and no seed, it returns a
// singleton Member that uses no network. The error wraps
// ucs.ErrInvalidParam for a malformed env, and ucs.ErrUnreachable when the
// seed cannot be joined (it is not there, or it has another key).
func Join(env Env) (*Member, error) {
	if err := checkEnv(env); err != nil {
		return nil, err
	}
	m := &Member{
		env:     env,
		finAck:  make(chan struct{}),
		exitAck: make(chan struct{}),
		lostAck: make(chan struct{}),
		failed:  make(map[int]bool),
		failCh:  make(chan struct{}),
		closeCh: make(chan struct{}),
	}
	if env.Seed == "" {
		return m, nil // singleton
	}
	seed, err := net.ResolveTCPAddr("tcp", env.Seed)
	if err != nil || seed.Port == 0 {
		return nil, fmt.Errorf("bootstrap: seed %q: cannot resolve: %v: %w", env.Seed, err, ucs.ErrInvalidParam)
	}
	m.seedIP, m.seedPort = seed.IP, uint16(seed.Port)
	bind, err := localIPFor(seed.String())
	if err != nil {
		return nil, fmt.Errorf("bootstrap: no route to seed %s: %w: %w", env.Seed, ucs.ErrUnreachable, err)
	}
	logger := debugLogger("goshmem " + peName(env.Rank) + ": ")
	m.logger = logger
	nodes := 2*env.Size + 1 // the seed, the PEs and up to one agent per PE
	c := newConfig(peName(env.Rank), bind, env.JobID, env.Key, logger, env.FailureTimeout, nodes)
	c.Delegate = memberDelegate{m}
	c.Events = memberDelegate{m}
	list, tr, err := createList(c, nodes)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: PE %d: starting memberlist: %w", env.Rank, err)
	}
	if _, err := list.Join([]string{seed.String()}); err != nil {
		list.Shutdown()
		return nil, fmt.Errorf("bootstrap: PE %d cannot join the seed %s (wrong key or job?): %w: %w", env.Rank, env.Seed, ucs.ErrUnreachable, err)
	}
	m.list, m.transport = list, tr
	m.addr = nodeAddr(list.LocalNode())
	return m, nil
}

func checkEnv(e Env) error {
	bad := func(what string) error {
		return fmt.Errorf("bootstrap: env: %s: %w", what, ucs.ErrInvalidParam)
	}
	switch {
	case e.Size < 1 || e.Size > maxRanks:
		return bad("size " + strconv.Itoa(e.Size) + " out of range")
	case e.Rank < 0 || e.Rank >= e.Size:
		return bad("rank " + strconv.Itoa(e.Rank) + " out of range [0, " + strconv.Itoa(e.Size) + ")")
	case e.LocalSize < 1 || e.LocalSize > e.Size:
		return bad("local size " + strconv.Itoa(e.LocalSize) + " out of range")
	case e.LocalRank < 0 || e.LocalRank >= e.LocalSize:
		return bad("local rank " + strconv.Itoa(e.LocalRank) + " out of range")
	case e.Seed == "" && e.Size != 1:
		return bad("no seed for a job of " + strconv.Itoa(e.Size) + " PEs")
	case e.Seed != "" && !validJobID(e.JobID):
		return bad("job id " + strconv.Quote(e.JobID))
	}
	if e.Seed != "" {
		return checkKey(e.Key)
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

// Allgather sends blob to every PE and returns the blobs of all PEs,
// indexed by rank (this PE's entry is a copy of blob). It is collective:
// every PE must call it, and calls are matched by their order. Blobs may
// differ in size; their total must not exceed MaxAllgather (the error then
// wraps ucs.ErrExceedsLimit).
//
// If a PE or the seed fails or leaves before Close, a pending or later
// Allgather returns an error wrapping the Failure (and
// ucs.ErrConnectionReset). After Close it returns ErrClosed.
func (m *Member) Allgather(blob []byte) ([][]byte, error) {
	if len(blob) > MaxAllgather {
		return nil, fmt.Errorf("bootstrap: allgather of %d bytes exceeds the limit of %d: %w", len(blob), MaxAllgather, ucs.ErrExceedsLimit)
	}
	if m.list == nil {
		m.mu.Lock()
		closed := m.closed
		m.mu.Unlock()
		if closed {
			return nil, ErrClosed
		}
		return [][]byte{bytes.Clone(blob)}, nil
	}

	m.opMu.Lock()
	defer m.opMu.Unlock()
	m.mu.Lock()
	if err := m.errLocked(); err != nil {
		m.mu.Unlock()
		return nil, err
	}
	m.seq++
	seq := m.seq
	reply := make(chan *message, 1)
	m.reply = reply
	m.finalized = false // the gather tells the seed this PE is active again
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.reply = nil
		m.mu.Unlock()
	}()

	msg := appendMessage(nil, &message{kind: kindGather, jobID: m.env.JobID, rank: m.env.Rank,
		seq: seq, addr: m.addr, payload: blob})
	if err := sendReliable(m.list, seedName, m.seedIP, m.seedPort, msg); err != nil {
		m.mu.Lock()
		ferr := m.errLocked()
		m.mu.Unlock()
		if ferr != nil {
			return nil, ferr
		}
		return nil, fmt.Errorf("bootstrap: PE %d: sending to the seed %s: %w: %w", m.env.Rank, m.env.Seed, ucs.ErrUnreachable, err)
	}

	select {
	case r := <-reply:
		if r.kind == kindAbort {
			return nil, fmt.Errorf("bootstrap: allgather aborted by the seed: %s: %w", r.reason, ucs.ErrExceedsLimit)
		}
		if len(r.table) != m.env.Size {
			return nil, fmt.Errorf("bootstrap: seed answered with %d blobs for a job of %d PEs: %w", len(r.table), m.env.Size, ucs.ErrInvalidParam)
		}
		if !bytes.Equal(r.table[m.env.Rank], blob) {
			return nil, fmt.Errorf("bootstrap: seed answered with another blob for this PE %d: %w", m.env.Rank, ucs.ErrInvalidParam)
		}
		return r.table, nil
	case <-m.failCh:
	case <-m.closeCh:
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return nil, m.errLocked()
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

// Barrier returns when every PE has called it. It is collective and
// ordered with Allgather, and fails like it.
func (m *Member) Barrier() error {
	_, err := m.Allgather(nil)
	return err
}

// OnFailure registers fn to be called, in a goroutine of its own, for each
// PE that fails or leaves before Close, and with Rank -1 when the seed (the
// launcher) leaves or fails. Failures that happened before OnFailure are
// reported too. No call is made after Close. A singleton never fails.
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

// Close finalizes the PE: it tells the seed that this PE ends cleanly
// (waiting a few seconds at most for the acknowledgment), unless Finalize
// did since the last collective, leaves the cluster and shuts memberlist
// down. A collective pending in another goroutine returns ErrClosed. Close
// is idempotent; calls after the first return nil. An error means the seed
// could not be told (it is gone): the launcher may then report this PE as
// failed.
func (m *Member) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	close(m.closeCh)
	seedFailed, finalized := m.failed[-1], m.finalized
	m.mu.Unlock()
	if m.list == nil {
		return nil
	}

	m.opMu.Lock() // wait for a pending collective to return
	defer m.opMu.Unlock()
	var err error
	if !seedFailed && !finalized {
		err = m.finalize()
	}
	m.list.Leave(leaveTimeout) // a timeout only means nobody heard it
	if serr := m.list.Shutdown(); serr != nil && err == nil {
		err = fmt.Errorf("bootstrap: PE %d: %w", m.env.Rank, serr)
	}
	return err
}

// Finalize tells the seed that this PE ended its part of the job cleanly,
// as Close does, but stays a member: a process that may initialize again
// (OpenSHMEM 1.6 lets a program finalize and initialize more than once)
// keeps its Member, and its next collective tells the seed that it is
// active again, so that an exit without finalize is then a failure again.
// Close after Finalize does not tell the seed twice. It returns ErrClosed
// after Close, and the errors of Close.
func (m *Member) Finalize() error {
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if m.list == nil {
		return nil
	}
	m.opMu.Lock()
	defer m.opMu.Unlock()
	return m.finalize()
}

// finalize tells the seed that this PE finalized and waits a few seconds
// at most for its acknowledgment. The caller holds opMu.
func (m *Member) finalize() error {
	m.mu.Lock()
	ack := make(chan struct{})
	m.finAck, m.finalized = ack, true
	m.mu.Unlock()
	msg := appendMessage(nil, &message{kind: kindFinalize, jobID: m.env.JobID, rank: m.env.Rank, addr: m.addr})
	if err := sendReliable(m.list, seedName, m.seedIP, m.seedPort, msg); err != nil {
		return fmt.Errorf("bootstrap: PE %d: finalize: %w: %w", m.env.Rank, ucs.ErrUnreachable, err)
	}
	t := time.NewTimer(finalizeTimeout)
	defer t.Stop()
	select {
	case <-ack:
		return nil
	case <-t.C:
		return fmt.Errorf("bootstrap: PE %d: the seed did not acknowledge finalize: %w", m.env.Rank, ucs.ErrTimedOut)
	}
}

// GlobalExit asks the launcher to end the whole job with exit status code:
// it tells the seed (waiting a few seconds at most for its
// acknowledgment), after which the launcher ends every PE and exits with
// code. The caller should then exit with code itself (as OpenSHMEM's
// shmem_global_exit does); the launcher ends it otherwise. GlobalExit does
// not wait for a pending collective, and may be called after a failure. For
// a singleton it does nothing. The error wraps ucs.ErrUnreachable when the
// seed cannot be told, ucs.ErrTimedOut when it did not acknowledge, and is
// ErrClosed after Close.
func (m *Member) GlobalExit(code int) error {
	msg := &message{kind: kindGlobalExit, jobID: m.env.JobID, rank: m.env.Rank, addr: m.addr, code: code,
		host: string(hostMeta(maxString))}
	return m.tellSeed(msg, m.exitAck, "global exit")
}

// ReportLost tells the seed that this PE is about to end because it lost
// the PE rank (a connection to it failed: reason says how), and waits a few
// seconds at most for the seed's acknowledgment. The launcher then takes
// this PE's end for a consequence of that PE's failure, and names the PE
// that failed first, whatever order the ends of the two reach it in. Call
// it before exiting; only the first loss a PE reports counts. For a
// singleton it does nothing. The error wraps ucs.ErrInvalidParam for a rank
// out of range or this PE's own, and is otherwise that of GlobalExit.
func (m *Member) ReportLost(rank int, reason string) error {
	if rank < 0 || rank >= m.env.Size || rank == m.env.Rank {
		return fmt.Errorf("bootstrap: PE %d: report of lost PE %d: out of range [0, %d) or this PE: %w", m.env.Rank, rank, m.env.Size, ucs.ErrInvalidParam)
	}
	msg := &message{kind: kindLost, jobID: m.env.JobID, rank: m.env.Rank, addr: m.addr, failRank: rank, reason: clip(reason)}
	return m.tellSeed(msg, m.lostAck, "report of lost PE "+strconv.Itoa(rank))
}

// tellSeed sends msg to the seed and waits, finalizeTimeout at most, for ack
// to be closed (by the seed's acknowledgment).
func (m *Member) tellSeed(msg *message, ack chan struct{}, what string) error {
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if m.list == nil {
		return nil
	}
	if err := sendReliable(m.list, seedName, m.seedIP, m.seedPort, appendMessage(nil, msg)); err != nil {
		return fmt.Errorf("bootstrap: PE %d: %s: %w: %w", m.env.Rank, what, ucs.ErrUnreachable, err)
	}
	t := time.NewTimer(finalizeTimeout)
	defer t.Stop()
	select {
	case <-ack:
		return nil
	case <-t.C:
		return fmt.Errorf("bootstrap: PE %d: the seed did not acknowledge the %s: %w", m.env.Rank, what, ucs.ErrTimedOut)
	}
}

// handle processes a message from the seed.
func (m *Member) handle(b []byte) {
	msg, err := decodeMessage(bytes.Clone(b))
	if err != nil {
		m.logger.Printf("[WARN] goshmem: dropping message: %v", err)
		return
	}
	if msg.jobID != m.env.JobID || msg.rank != -1 {
		m.logger.Printf("[WARN] goshmem: dropping %v message from rank %d of job %q", msg.kind, msg.rank, msg.jobID)
		return
	}
	switch msg.kind {
	case kindTable, kindAbort:
		m.mu.Lock()
		if msg.seq == m.seq && m.reply != nil {
			m.reply <- msg // buffered, and m.reply is cleared below
			m.reply = nil
		} else {
			m.logger.Printf("[WARN] goshmem: dropping %v message for sequence %d (at %d)", msg.kind, msg.seq, m.seq)
		}
		m.mu.Unlock()
	case kindFinalizeAck, kindGlobalExitAck, kindLostAck:
		m.mu.Lock()
		ch := m.finAck
		switch msg.kind {
		case kindGlobalExitAck:
			ch = m.exitAck
		case kindLostAck:
			ch = m.lostAck
		}
		select {
		case <-ch:
		default:
			close(ch)
		}
		m.mu.Unlock()
	case kindFailure:
		if msg.failRank < -1 || msg.failRank >= m.env.Size {
			m.logger.Printf("[WARN] goshmem: dropping failure message for rank %d", msg.failRank)
			return
		}
		m.recordFailure(Failure{Rank: msg.failRank, Host: msg.host, Reason: msg.reason})
	default:
		m.logger.Printf("[WARN] goshmem: dropping unexpected %v message", msg.kind)
	}
}

// memberDelegate receives a PE's memberlist callbacks.
type memberDelegate struct{ m *Member }

func (d memberDelegate) NodeMeta(limit int) []byte                  { return hostMeta(limit) }
func (d memberDelegate) NotifyMsg(b []byte)                         { d.m.handle(b) }
func (d memberDelegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d memberDelegate) LocalState(join bool) []byte                { return nil }
func (d memberDelegate) MergeRemoteState(buf []byte, join bool)     {}
func (d memberDelegate) NotifyJoin(n *memberlist.Node)              {}
func (d memberDelegate) NotifyUpdate(n *memberlist.Node)            {}

// NotifyLeave reports the seed leaving or failing. Other PEs are the
// seed's business: it knows whether they finalized first.
func (d memberDelegate) NotifyLeave(n *memberlist.Node) {
	if n.Name != seedName {
		return
	}
	f := Failure{Rank: -1, Host: nodeHost(n), Reason: reasonSeedGone}
	d.m.recordFailure(f) // takes only the Member's lock: memberlist holds its own here
}
