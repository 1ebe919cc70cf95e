package uct

import (
	"sync"
	"sync/atomic"

	"github.com/goshmem/goshmem/ucs"
)

// PendingQueue holds the pending requests of an iface's EPs, as UCX's
// arbiter does: each EP has a PendingGroup whose requests run in the order
// they were added, and the groups are served in the order they first had a
// request. Transports use it to implement EP.PendingAdd and PendingPurge and
// to dispatch from Progress. It is safe for concurrent use.
type PendingQueue struct {
	mu     sync.Mutex
	groups []*PendingGroup // groups with requests, in arrival order
	n      atomic.Int32
}

// PendingGroup is one EP's requests in a PendingQueue. Room, if set, tells
// whether the EP can take an operation now; Dispatch skips the group while
// it reports false.
type PendingGroup struct {
	reqs []*PendingReq
	Room func() bool
}

// Add queues r at the end of g.
func (q *PendingQueue) Add(g *PendingGroup, r *PendingReq) {
	q.mu.Lock()
	if len(g.reqs) == 0 {
		q.groups = append(q.groups, g)
	}
	g.reqs = append(g.reqs, r)
	q.n.Add(1)
	q.mu.Unlock()
}

// Purge removes every request of g and returns them in order.
func (q *PendingQueue) Purge(g *PendingGroup) []*PendingReq {
	q.mu.Lock()
	purged := g.reqs
	g.reqs = nil
	q.n.Add(-int32(len(purged)))
	q.mu.Unlock()
	return purged
}

// PurgeEach removes every request of g and calls cb (when not nil) on each,
// in order: the body of an EP's PendingPurge.
func (q *PendingQueue) PurgeEach(g *PendingGroup, cb func(r *PendingReq)) {
	purged := q.Purge(g)
	if cb != nil {
		for _, r := range purged {
			cb(r)
		}
	}
}

// Len returns the number of queued requests; one atomic load.
func (q *PendingQueue) Len() int { return int(q.n.Load()) }

// Dispatch calls the requests of each group in order, while the group has
// room, until one returns ucs.ErrNoResource (it stays first), and returns
// how many posted. A request's Func may purge or add requests.
func (q *PendingQueue) Dispatch() int {
	if q.Len() == 0 {
		return 0
	}
	n := 0
	q.mu.Lock()
	groups := append([]*PendingGroup(nil), q.groups...)
	q.mu.Unlock()
	for _, g := range groups {
		for g.Room == nil || g.Room() {
			q.mu.Lock()
			if len(g.reqs) == 0 {
				q.mu.Unlock()
				break
			}
			r := g.reqs[0]
			q.mu.Unlock()
			if r.Func(r) == ucs.ErrNoResource {
				break
			}
			n++
			q.mu.Lock()
			// The callback may have purged the group: remove r only if first.
			if len(g.reqs) > 0 && g.reqs[0] == r {
				g.reqs[0] = nil
				g.reqs = g.reqs[1:]
				q.n.Add(-1)
			}
			q.mu.Unlock()
		}
	}
	q.mu.Lock()
	kept := q.groups[:0]
	for _, g := range q.groups {
		if len(g.reqs) > 0 {
			kept = append(kept, g)
		}
	}
	clear(q.groups[len(kept):])
	q.groups = kept
	q.mu.Unlock()
	return n
}
