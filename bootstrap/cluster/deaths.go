package cluster

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/memberlist"
)

// memberlist declares a member dead once it missed its probes and its
// suspicion timed out: timers of the declaring process. A process that is
// not scheduled for a while (starved of CPU, or in a stop-the-world pause)
// finds its timers expired when it runs again, before it reads the answers
// waiting in its sockets, and declares live members dead; a member starved
// for part of the failure timeout is declared dead although it answers
// soon after. Both happened to jobs of more PEs and agents than cores on a
// busy machine (bootstrap/cluster's tests beside a second `go test ./...`:
// "Marking agent-9 as failed, suspect timeout reached" right after the
// test process went 2.5 s without running a 10 ms timer).
//
// So a death memberlist declares is only a suspicion to the job: the seed
// and the agents act on it (deathWatch) once the member stayed unreachable
// for confirmWait more, counted in the time the watching process itself
// ran, while it tries to reach the member (a push/pull, memberlist.Join);
// a packet from the member starts the wait again.
// A member that answers refutes its death (memberlist takes it back, and
// says so with NotifyJoin); one whose port refuses connections is gone (its
// process ended, or it left and shut down): that is confirmed at once. memberlist is tuned to declare a silent member dead
// within half the failure timeout (tuneFailureDetection), and the
// confirmation takes the other half.

// confirmTick is the step in which a confirmation counts the time its
// process runs: each tick that fires counts its nominal length, however
// late (the lateness is this process not running; a tick missed while it
// did not run counts nothing). Fine, so that a process that runs a
// fraction of the time, its goroutines waiting their turn, counts about
// that fraction of the time; it ticks only while a death is being
// confirmed.
const confirmTick = 10 * time.Millisecond

// confirmWait is how long a member that memberlist declared dead must stay
// unreachable before the death stands, for a failure timeout of timeout.
func confirmWait(timeout time.Duration) time.Duration { return timeout / 2 }

// deathWatch confirms the deaths memberlist declares (see above).
type deathWatch struct {
	wait time.Duration
	// reach tries to reach the member at addr (a push/pull): nil when it
	// answered.
	reach func(name, addr string) error
	// alive reports whether memberlist counts the member as alive.
	alive func(name string) bool
	// heard returns when an authenticated packet last came from addr.
	heard func(addr string) time.Time

	mu        sync.Mutex
	list      *memberlist.Memberlist
	transport *guardedTransport
	pending   map[string]chan struct{} // by node name; closed when it came back
	closed    bool
	done      chan struct{} // closed by close
}

// newDeathWatch returns a watch that confirms a death after wait, once
// attached to its member list.
func newDeathWatch(wait time.Duration) *deathWatch {
	d := &deathWatch{
		wait:    wait,
		pending: make(map[string]chan struct{}),
		done:    make(chan struct{}),
	}
	d.reach = func(_, addr string) error {
		list, tr := d.node()
		if _, err := list.Join([]string{addr}); err != nil {
			if tr.dialRefused(addr) {
				return fmt.Errorf("%v: %w", err, syscall.ECONNREFUSED)
			}
			return err
		}
		return nil
	}
	d.alive = func(name string) bool {
		list, _ := d.node()
		return slices.ContainsFunc(list.Members(), func(n *memberlist.Node) bool { return n.Name == name })
	}
	d.heard = func(addr string) time.Time {
		_, tr := d.node()
		return tr.heardFrom(addr)
	}
	return d
}

// attach sets the member list and its transport, before any member joins
// it.
func (d *deathWatch) attach(list *memberlist.Memberlist, tr *guardedTransport) {
	d.mu.Lock()
	d.list, d.transport = list, tr
	d.mu.Unlock()
}

func (d *deathWatch) node() (*memberlist.Memberlist, *guardedTransport) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.list, d.transport
}

// left takes memberlist's notice that n left or was declared dead (its
// NotifyLeave, which runs under memberlist's lock: nothing here calls
// memberlist) and calls confirmed with it, in the background, once the
// death stands. A death already being confirmed is not confirmed twice.
func (d *deathWatch) left(n *memberlist.Node, confirmed func(*memberlist.Node)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || d.pending[n.Name] != nil {
		return
	}
	back := make(chan struct{})
	d.pending[n.Name] = back
	node := *n
	go func() {
		ok := d.confirm(node.Name, nodeAddr(&node), back)
		d.mu.Lock()
		if d.pending[node.Name] == back {
			delete(d.pending, node.Name)
		}
		d.mu.Unlock()
		if ok {
			confirmed(&node)
		}
	}()
}

// joined takes memberlist's notice that the member name joined, or came
// back: a death being confirmed is refuted.
func (d *deathWatch) joined(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if back := d.pending[name]; back != nil {
		close(back)
		delete(d.pending, name)
	}
}

// close ends the confirmations under way, confirming none.
func (d *deathWatch) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.closed {
		d.closed = true
		close(d.done)
	}
}

// confirm reports whether the member name at addr, declared dead, stays
// unreachable for d.wait of this process's running time (counted in
// confirmTick steps), starting again whenever the member is heard from
// (an authenticated packet from its address). It is false when the member
// came back (back is closed) or the watch closed.
func (d *deathWatch) confirm(name, addr string, back <-chan struct{}) bool {
	pause := d.wait / 8 // between tries to reach it
	tick := min(confirmTick, pause)
	tries := make(chan error, 1)
	try := func() { tries <- d.reach(name, addr) }
	go try()
	var retry <-chan time.Time
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	var ran time.Duration
	heard := d.heard(addr)
	for ran < d.wait {
		select {
		case <-back:
			return false
		case <-d.done:
			return false
		case err := <-tries:
			switch {
			case err == nil && d.alive(name):
				return false
			case errors.Is(err, syscall.ECONNREFUSED):
				return true // its process is gone
			}
			// It did not answer, or answered with the incarnation it was
			// declared dead in: it refutes its death as it merges ours,
			// after its answer, and the next try brings the refutation
			// (or finds its port closed, when it left).
			retry = time.After(pause)
		case <-retry:
			retry = nil
			go try()
		case <-ticker.C:
			ran += tick
			if h := d.heard(addr); h.After(heard) {
				heard, ran = h, 0
			}
		}
	}
	return true
}
