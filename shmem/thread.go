package shmem

import (
	"fmt"

	"github.com/goshmem/goshmem/ucs"
)

// ThreadLevel is how the goroutines of a PE may call the routines of this
// package (the thread levels of shmem_init_thread). The levels are ordered:
// each allows what the ones below it allow.
type ThreadLevel int

// Thread levels (SHMEM_THREAD_*).
const (
	// ThreadSingle: one goroutine calls the routines (SHMEM_THREAD_SINGLE).
	ThreadSingle ThreadLevel = iota
	// ThreadFunneled: only the goroutine that called InitThread calls the
	// routines, while other goroutines may exist (SHMEM_THREAD_FUNNELED).
	ThreadFunneled
	// ThreadSerialized: any goroutine calls the routines, but never two at
	// once; the program orders the calls, for example with a mutex
	// (SHMEM_THREAD_SERIALIZED).
	ThreadSerialized
	// ThreadMultiple: any goroutines call the routines, at once, whatever OS
	// threads run them (SHMEM_THREAD_MULTIPLE). The default context's
	// worker then locks its operations. Collective routines of one team
	// must still be called by one goroutine of a PE at a time.
	ThreadMultiple
)

func (l ThreadLevel) String() string {
	switch l {
	case ThreadSingle:
		return "ThreadSingle"
	case ThreadFunneled:
		return "ThreadFunneled"
	case ThreadSerialized:
		return "ThreadSerialized"
	case ThreadMultiple:
		return "ThreadMultiple"
	}
	return fmt.Sprintf("ThreadLevel(%d)", int(l))
}

// threadLevel is the level Init provided.
var threadLevel = ThreadSingle

// InitThread starts the library as Init does, with the thread level
// requested (shmem_init_thread), and returns the level provided: goshmem
// provides every level, so it is the one requested. ThreadSingle,
// ThreadFunneled and ThreadSerialized give the default context a worker
// that takes no lock; ThreadMultiple gives it one that locks, so that
// goroutines on several OS threads may use it at once.
//
// After a successful Init or InitThread it only counts the call, which a
// Finalize must match (see Init), and returns the level provided then. It returns an error for a level outside
// ThreadSingle..ThreadMultiple, and every error of Init.
func InitThread(requested ThreadLevel) (ThreadLevel, error) {
	if st.phase == initialized {
		st.inits++
		return threadLevel, nil
	}
	if requested < ThreadSingle || requested > ThreadMultiple {
		return 0, fmt.Errorf("shmem.InitThread: thread level %d (valid: ThreadSingle, ThreadFunneled, ThreadSerialized, ThreadMultiple)", int(requested))
	}
	if err := initThread(requested); err != nil {
		return 0, err
	}
	return threadLevel, nil
}

// QueryThread returns the thread level the library provides
// (shmem_query_thread): ThreadSingle after Init, the level provided after
// InitThread. Before Init it returns ThreadSingle.
func QueryThread() ThreadLevel { return threadLevel }

// workerMode is the ucp thread mode of the default context's worker at
// level l.
func (l ThreadLevel) workerMode() ucs.ThreadMode {
	switch l {
	case ThreadMultiple:
		return ucs.ThreadModeMulti
	case ThreadSerialized:
		return ucs.ThreadModeSerialized
	}
	return ucs.ThreadModeSingle
}
