package shmem

import (
	"cmp"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/goshmem/goshmem/ucs"
)

// Profiling (GOSHMEM_PROFILE=DIR, which goshmem-run -profile sets): from
// Init to the last Finalize a PE records a CPU profile and counts, per
// routine and target PE, the operations it initiates and their bytes; the
// last Finalize writes both into DIR. The routines count with one call to
// profCtx or profJob, which costs one predictable branch on profOn when
// profiling is off, and no allocation when it is on.

// envProfile is the variable that turns profiling on: the directory that
// receives the files.
const envProfile = "GOSHMEM_PROFILE"

// profOn is set while the PE profiles: from the end of Init to the last
// Finalize, which the routines never race with.
var profOn bool

// prof is the state of profiling.
var prof struct {
	mu       sync.Mutex // serializes the additions of routines
	routines atomic.Pointer[map[string]*profRoutine]
	npes     int
	dir      string
	cpu      *os.File // the CPU profile being written, if any
}

// profRoutine counts the operations of one routine, per target PE (of the
// job).
type profRoutine struct {
	cells []profCell
}

type profCell struct {
	ops, bytes atomic.Uint64
}

// profCtx counts an operation of routine on the PE pe of context c's team,
// moving n bytes.
func profCtx(c *Ctx, routine string, pe, n int) {
	if profOn {
		profAdd(routine, c.team.members[pe], n)
	}
}

// profJob counts an operation of routine on the job's PE pe, moving n
// bytes.
func profJob(routine string, pe, n int) {
	if profOn {
		profAdd(routine, pe, n)
	}
}

// profAdd counts one operation. The table of routines is copied on write:
// a routine's first operation adds it under prof.mu, the others only read.
//
//go:noinline
func profAdd(routine string, pe, n int) {
	r := (*prof.routines.Load())[routine]
	if r == nil {
		r = profAddRoutine(routine)
	}
	if uint(pe) < uint(len(r.cells)) {
		c := &r.cells[pe]
		c.ops.Add(1)
		c.bytes.Add(uint64(n))
	}
}

// profAddRoutine returns the counters of routine, adding them to the table.
func profAddRoutine(routine string) *profRoutine {
	prof.mu.Lock()
	defer prof.mu.Unlock()
	old := *prof.routines.Load()
	if r := old[routine]; r != nil {
		return r
	}
	m := make(map[string]*profRoutine, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	r := &profRoutine{cells: make([]profCell, prof.npes)}
	m[routine] = r
	prof.routines.Store(&m)
	return r
}

// profStart starts profiling at the end of Init when GOSHMEM_PROFILE names
// a directory (created if needed): the CPU profile, and counting. A PE
// that cannot profile says why on standard error and runs on. The counts
// of an earlier Init of the same process carry on.
func profStart() {
	dir := os.Getenv(envProfile)
	if dir == "" {
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		lg().Logf(ucs.LogWarn, "goshmem: PE %d: %s: %v", st.me, envProfile, err)
		return
	}
	prof.dir = dir
	if prof.npes != st.npes {
		prof.npes = st.npes
		empty := map[string]*profRoutine{}
		prof.routines.Store(&empty)
	}
	f, err := os.Create(filepath.Join(dir, CPUProfileFile(st.me)))
	if err == nil {
		if err = pprof.StartCPUProfile(f); err != nil {
			f.Close()
		}
	}
	if err != nil {
		lg().Logf(ucs.LogWarn, "goshmem: PE %d: %s: no CPU profile: %v", st.me, envProfile, err)
	} else {
		prof.cpu = f
	}
	profOn = true
}

// profStop ends profiling at the last Finalize, and writes the CPU profile
// and the communication summary. It reports errors on standard error.
func profStop() {
	if !profOn {
		return
	}
	profOn = false
	if prof.cpu != nil {
		pprof.StopCPUProfile()
		if err := prof.cpu.Close(); err != nil {
			lg().Logf(ucs.LogWarn, "goshmem: PE %d: %s: %v", st.me, envProfile, err)
		}
		prof.cpu = nil
	}
	b, err := json.MarshalIndent(profSummary(), "", "  ")
	if err == nil {
		err = writeFileAtomic(filepath.Join(prof.dir, CommSummaryFile(st.me)), append(b, '\n'))
	}
	if err != nil {
		lg().Logf(ucs.LogWarn, "goshmem: PE %d: %s: communication summary: %v", st.me, envProfile, err)
	}
}

// writeFileAtomic writes a file whole or not at all: a reader of the
// directory never sees half of it.
func writeFileAtomic(name string, b []byte) error {
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}

// CPUProfileFile is the name of the CPU profile of the PE pe in the
// profile directory (GOSHMEM_PROFILE): "pe-N.cpu.pprof", for go tool
// pprof.
func CPUProfileFile(pe int) string { return "pe-" + strconv.Itoa(pe) + ".cpu.pprof" }

// CommSummaryFile is the name of the communication summary of the PE pe in
// the profile directory (GOSHMEM_PROFILE): "pe-N.comm.json", a CommSummary
// in JSON.
func CommSummaryFile(pe int) string { return "pe-" + strconv.Itoa(pe) + ".comm.json" }

// CommSummary is what one PE initiated from Init to the last Finalize,
// which writes it when GOSHMEM_PROFILE is set: per routine, the operations
// on each target PE and their bytes. Puts, put-with-signal and atomics
// count the bytes they send or update at the target (a signal or atomic
// operand counts its size), gets and fetches the bytes they read from it;
// collectives count the transfers they make to each member (in the job's
// numbering), under their own name, and not the loads of a peer's heap
// that the PE maps. Operations on this PE itself count too.
type CommSummary struct {
	PE       int           `json:"pe"`
	NPEs     int           `json:"npes"`
	Routines []RoutineComm `json:"routines"`
}

// RoutineComm is what one routine ("Put", "CtxGetNBI", "AtomicFetchAdd",
// "Broadcast", ...) initiated, per target PE.
type RoutineComm struct {
	Routine string   `json:"routine"`
	Targets []PEComm `json:"targets"`
}

// PEComm is the operations on one target PE and their bytes.
type PEComm struct {
	PE    int    `json:"pe"`
	Ops   uint64 `json:"ops"`
	Bytes uint64 `json:"bytes"`
}

// profSummary returns the counts so far: routines by name, targets by PE,
// those without operations left out.
func profSummary() *CommSummary {
	s := &CommSummary{PE: st.me, NPEs: prof.npes, Routines: []RoutineComm{}}
	for name, r := range *prof.routines.Load() {
		rc := RoutineComm{Routine: name}
		for pe := range r.cells {
			if ops := r.cells[pe].ops.Load(); ops > 0 {
				rc.Targets = append(rc.Targets, PEComm{PE: pe, Ops: ops, Bytes: r.cells[pe].bytes.Load()})
			}
		}
		if len(rc.Targets) > 0 {
			s.Routines = append(s.Routines, rc)
		}
	}
	slices.SortFunc(s.Routines, func(a, b RoutineComm) int { return cmp.Compare(a.Routine, b.Routine) })
	return s
}
