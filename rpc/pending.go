package rpc

import "sync"

// The calls waiting for their reply, by call id: a slot of a table, found
// again by its index, without a map and, below shmem.ThreadMultiple,
// without a lock (one goroutine at a time makes calls and progresses
// then). A call id is the slot's index and its generation, which a reply
// must match: a slot freed and taken again (a call that failed, the
// package stopped and started again) does not take an older call's reply.

// pendSlot is one slot of the table.
type pendSlot struct {
	gen uint32    // of the call that has the slot, or had it last
	c   completer // nil when free
}

// pendTable is the table, in rt.
type pendTable struct {
	mu    sync.Mutex // at ThreadMultiple only: see lock
	slots []pendSlot
	free  []uint32 // indices of free slots
}

// lock takes the mutex of the package's shared state at
// shmem.ThreadMultiple, where any goroutine calls and progresses. Below
// it, one goroutine at a time does, and nothing is locked.
func lock(mu *sync.Mutex) {
	if rt.multi {
		mu.Lock()
	}
}

func unlock(mu *sync.Mutex) {
	if rt.multi {
		mu.Unlock()
	}
}

// add gives c a slot and returns its call id (never 0: generations start
// at 1).
func (p *pendTable) add(c completer) uint64 {
	lock(&p.mu)
	var i uint32
	if n := len(p.free); n > 0 {
		i = p.free[n-1]
		p.free = p.free[:n-1]
	} else {
		i = uint32(len(p.slots))
		p.slots = append(p.slots, pendSlot{})
	}
	s := &p.slots[i]
	s.gen++
	if s.gen == 0 {
		s.gen = 1
	}
	s.c = c
	gen := s.gen // read under the lock: another add may grow the slots
	unlock(&p.mu)
	return uint64(gen)<<32 | uint64(i)
}

// take frees the slot of call id and returns its call, or nil when no
// call has that id (any more).
func (p *pendTable) take(id uint64) completer {
	lock(&p.mu)
	var c completer
	if i := uint32(id); int(i) < len(p.slots) {
		if s := &p.slots[i]; s.c != nil && s.gen == uint32(id>>32) {
			c, s.c = s.c, nil
			p.free = append(p.free, i)
		}
	}
	unlock(&p.mu)
	return c
}

// takeIf frees the slots of the calls drop accepts and returns those
// calls.
func (p *pendTable) takeIf(drop func(completer) bool) []completer {
	lock(&p.mu)
	defer unlock(&p.mu)
	var out []completer
	for i := range p.slots {
		s := &p.slots[i]
		if s.c != nil && drop(s.c) {
			out = append(out, s.c)
			s.c = nil
			p.free = append(p.free, uint32(i))
		}
	}
	return out
}
