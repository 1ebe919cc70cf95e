package rpc

import (
	"errors"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
)

// Barrier waits until every PE of the job called it, progressing this PE
// meanwhile (a shmem barrier would not send what Goroutine handlers
// handed over). Before that it flushes this PE's aggregators and makes
// sure every call without reply it made since its last Barrier (Go,
// aggregated calls) was served: Inline handlers ran, and Goroutine ones
// returned. It is a collective of the job's PEs, and a no-op when the
// package is not started. It returns the errors of the flushes and of the
// PEs that did not answer (joined), nil when all went well.
func Barrier() error {
	if !rt.started.Load() {
		return nil
	}
	var errs []error
	aggMu.Lock()
	fl := slices.Collect(maps.Keys(aggs))
	aggMu.Unlock()
	for _, g := range fl {
		if err := g.Flush(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := Quiet(); err != nil {
		errs = append(errs, err)
	}
	if _, err := barrierFn.Call(0, struct{}{}).Wait(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Quiet waits until every call without reply (Go, aggregated calls
// flushed) that this PE made since its last Barrier or Quiet was served at
// its target, progressing this PE meanwhile: it asks each PE it sent such
// calls to, behind them, to reply once they ran.
func Quiet() error {
	if !rt.started.Load() {
		return nil
	}
	var fs []Future[struct{}]
	for pe := range rt.touched {
		if rt.touched[pe].Swap(false) {
			fs = append(fs, quietFn.Call(pe, struct{}{}))
		}
	}
	_, err := WaitAll(fs)
	return err
}

// The package's own functions.
var (
	internalOnce sync.Once
	quietFn      *Func[struct{}, struct{}]
	barrierFn    *Func[struct{}, struct{}]

	// quietWait are the replies of quietFn that wait for Goroutine
	// handlers to return, nquiet their number (read without the lock).
	quietWait []*Reply[struct{}]
	nquiet    atomic.Int32
	// arrived are the replies of barrierFn, at PE 0, until every PE came.
	arrived []*Reply[struct{}]
)

func registerInternal() {
	internalOnce.Do(func() {
		// The messages of a PE to another are handled in order, so this
		// call's handler runs after those of the calls before it.
		quietFn = RegisterDeferred("rpc.quiet", func(_ int, _ struct{}, r *Reply[struct{}]) {
			lock(&rt.mu)
			quietWait = append(quietWait, r)
			nquiet.Store(int32(len(quietWait)))
			unlock(&rt.mu)
			releaseQuiet()
		})
		barrierFn = RegisterDeferred("rpc.barrier", func(_ int, _ struct{}, r *Reply[struct{}]) {
			lock(&rt.mu)
			arrived = append(arrived, r)
			var all []*Reply[struct{}]
			if len(arrived) == rt.n {
				all = slices.Clone(arrived)
				clear(arrived)
				arrived = arrived[:0]
			}
			unlock(&rt.mu)
			for _, a := range all {
				a.Send(struct{}{}, nil)
			}
		})
	})
}

// releaseQuiet sends the replies of quietFn that waited, once no Goroutine
// handler runs; from progress.
func releaseQuiet() int {
	if running.Load() != 0 {
		return 0
	}
	lock(&rt.mu)
	q := slices.Clone(quietWait)
	clear(quietWait)
	quietWait = quietWait[:0]
	nquiet.Store(0)
	unlock(&rt.mu)
	for _, r := range q {
		r.Send(struct{}{}, nil)
	}
	return len(q)
}
