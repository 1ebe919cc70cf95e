// Package hooks holds the functions a library lets others register, to
// call them later (shmem.OnPeerFailure, rpc.OnStop).
package hooks

import (
	"maps"
	"slices"
	"sync"
)

// Set is a set of registered functions of type F; its zero value is
// empty and ready. It is safe for concurrent use.
type Set[F any] struct {
	mu   sync.Mutex
	next int
	fns  map[int]F
}

// Add registers fn and returns the function that removes it (a second
// call of which does nothing).
func (s *Set[F]) Add(fn F) (remove func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fns == nil {
		s.fns = map[int]F{}
	}
	id := s.next
	s.next++
	s.fns[id] = fn
	return func() {
		s.mu.Lock()
		delete(s.fns, id)
		s.mu.Unlock()
	}
}

// All returns the functions registered now, to be called without the
// set's lock (they may register or remove others).
func (s *Set[F]) All() []F {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Values(s.fns))
}
