package shmem

import (
	"fmt"
	"sync"
)

// Sessions (OpenSHMEM 1.6): hints that a context is about to issue a
// pattern of operations the library may handle better as a whole.
//
// goshmem acts on SessionBatch: while a batch session is open on a
// context, the small puts of the context (blocking or not, up to
// batchMaxPut bytes) to a PE reached through the network are not sent one
// by one but gathered per PE, a put that continues the previous one where
// it ended joining it, and sent when the batch of that PE is full
// (batchBytes), before any other operation of the context to that PE
// (gets, atomics, signals, larger puts), and at Fence, Quiet, PEQuiet and
// SessionStop. A loop of element-wise puts to consecutive addresses thus
// becomes one transfer. Puts to PEs whose heaps are mapped here are single
// stores already and are not gathered. Completion and ordering are those
// of the routines without a session: a blocking put has copied its source
// when it returns, and everything is complete at Quiet.

// SessionOptions are the options of (*Ctx).SessionStart, or-ed together
// (SHMEM_CTX_SESSION_*); 0 asks for none.
type SessionOptions int

// Session options.
const (
	// SessionBatch: the context will issue a batch, a series of
	// operations that may each take longer if the series as a whole ends
	// sooner (SHMEM_CTX_SESSION_BATCH). goshmem gathers small puts (see
	// the package documentation of sessions in session.go).
	SessionBatch SessionOptions = 1 << iota

	sessionAllOptions = SessionBatch
)

// SessionConfig is the configuration of a session
// (shmem_ctx_session_config_t), given with a SessionConfigMask naming the
// fields that count.
type SessionConfig struct {
	// TotalOps is the number of RMA calls the program expects in the
	// session (total_ops; default: unknown, SIZE_MAX). goshmem records it
	// and sizes its first batch buffers from it.
	TotalOps int
}

// SessionConfigMask names the fields of a SessionConfig that count.
type SessionConfigMask int

// The fields of SessionConfig.
const (
	// SessionTotalOps is SessionConfig.TotalOps
	// (SHMEM_CTX_SESSION_TOTAL_OPS).
	SessionTotalOps SessionConfigMask = 1 << iota

	sessionAllConfig = SessionTotalOps
)

const (
	batchMaxPut = 512     // the largest put a batch gathers, in bytes
	batchBytes  = 1 << 16 // the data a PE's batch holds before it is sent
)

// session is the state of a context's session.
type session struct {
	mu       sync.Mutex // for a context several goroutines share
	options  SessionOptions
	totalOps int
	batches  map[int]*batch // by PE of the context, while gathering
}

// batch is the puts gathered for one PE: runs of consecutive bytes.
type batch struct {
	runs []batchRun
	data []byte // the runs' bytes, one after the other
	// The buffers of the last batch sent, for the next one.
	spareRuns []batchRun
	spare     []byte
}

type batchRun struct {
	off uintptr // symmetric offset at the PE (region.go)
	n   int
}

// SessionStart starts a session on the context with the hints options
// (shmem_ctx_session_start, OpenSHMEM 1.6). A second SessionStart while a
// session is open adds options to it, and the fields config names
// (configMask) replace those of the session. Sessions change neither the
// completion nor the ordering of any routine. It does nothing for a nil
// context (SHMEM_CTX_INVALID), and panics for a destroyed one and for
// unknown options or mask bits.
func (c *Ctx) SessionStart(options SessionOptions, config SessionConfig, configMask SessionConfigMask) {
	if c == nil {
		return
	}
	c.check("(*Ctx).SessionStart")
	if options&^sessionAllOptions != 0 {
		panic(fmt.Sprintf("shmem.(*Ctx).SessionStart: unknown options %#x (valid: SessionBatch)", int(options)))
	}
	if configMask&^sessionAllConfig != 0 {
		panic(fmt.Sprintf("shmem.(*Ctx).SessionStart: unknown configuration mask bits %#x (valid: SessionTotalOps)", int(configMask)))
	}
	s := c.session.Load()
	if s == nil {
		// The session stopped last, with its buffers, or a new one.
		if s = c.spareSession; s == nil {
			s = &session{}
		}
		s.options, s.totalOps = 0, -1
	}
	s.mu.Lock()
	s.options |= options
	if configMask&SessionTotalOps != 0 {
		s.totalOps = config.TotalOps
	}
	if s.options&SessionBatch != 0 && s.batches == nil {
		s.batches = make(map[int]*batch)
	}
	s.mu.Unlock()
	c.session.Store(s)
}

// SessionStop ends the context's session (shmem_ctx_session_stop),
// sending what it gathered. Without a session it does nothing, and so it
// does for a nil context.
func (c *Ctx) SessionStop() {
	if c == nil {
		return
	}
	c.check("(*Ctx).SessionStop")
	if c.session.Load() == nil {
		return
	}
	c.flushBatches("(*Ctx).SessionStop")
	c.spareSession = c.session.Swap(nil)
}

// gather takes a put of b to the symmetric offset off of the context's PE pe into the
// batch, if a batch session is open and b is small, and reports whether
// it did. b is copied.
func (c *Ctx) gather(routine string, pe int, off uintptr, b []byte) bool {
	s := c.session.Load()
	if s == nil || s.batches == nil || len(b) > batchMaxPut {
		return false
	}
	s.mu.Lock()
	bt := s.batches[pe]
	if bt == nil {
		size := batchBytes
		if s.totalOps > 0 {
			size = min(size, s.totalOps*len(b))
		}
		bt = &batch{data: make([]byte, 0, size)}
		s.batches[pe] = bt
	}
	if k := len(bt.runs) - 1; k >= 0 && bt.runs[k].off+uintptr(bt.runs[k].n) == off {
		bt.runs[k].n += len(b)
	} else {
		bt.runs = append(bt.runs, batchRun{off: off, n: len(b)})
	}
	bt.data = append(bt.data, b...)
	full := len(bt.data) >= batchBytes
	s.mu.Unlock()
	if full {
		c.flushBatch(routine, pe)
	}
	return true
}

// flushBatch sends what the batch of PE pe gathered, if anything.
func (c *Ctx) flushBatch(routine string, pe int) {
	s := c.session.Load()
	if s == nil || s.batches == nil {
		return
	}
	s.mu.Lock()
	bt := s.batches[pe]
	if bt == nil || len(bt.runs) == 0 {
		s.mu.Unlock()
		return
	}
	runs, data := bt.runs, bt.data
	bt.runs, bt.data = bt.spareRuns[:0], bt.spare[:0]
	if bt.data == nil {
		bt.data = make([]byte, 0, cap(data))
	}
	s.mu.Unlock()
	rest := data
	for _, r := range runs {
		// Blocking: the data may be reused when it returns.
		c.sendPut(routine, pe, r.off, rest[:r.n], false)
		rest = rest[r.n:]
	}
	s.mu.Lock()
	bt.spareRuns, bt.spare = runs[:0], data[:0]
	s.mu.Unlock()
}

// flushBatches sends every PE's batch.
func (c *Ctx) flushBatches(routine string) {
	s := c.session.Load()
	if s == nil || s.batches == nil {
		return
	}
	s.mu.Lock()
	pes := make([]int, 0, len(s.batches))
	for pe, bt := range s.batches {
		if len(bt.runs) > 0 {
			pes = append(pes, pe)
		}
	}
	s.mu.Unlock()
	for _, pe := range pes {
		c.flushBatch(routine, pe)
	}
}
