package shmem

import (
	"cmp"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/goshmem/goshmem/shmem/profile"
	"github.com/goshmem/goshmem/ucs"
)

// Profiling (GOSHMEM_PROFILE=DIR, which goshmem-run -profile sets): from
// Init to the last Finalize a PE records a CPU profile and counts, per
// routine and target PE, the operations it initiates and their bytes, and
// the calls of the collective routines; the last Finalize writes both into
// DIR. The routines count with one call to profCtx, profTeam or profCall,
// which costs one predictable branch on profOn when profiling is off, and
// no allocation when it is on. Collectives count the data of their
// definition, not the transfers of their algorithms (see CommSummary), so
// a program's profile is the same on every transport.

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
// job), and its calls if it is a collective.
type profRoutine struct {
	cells []profCell
	calls atomic.Uint64
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

// profTeam counts a collective call of routine on team t that delivers n
// bytes of this PE's data to each PE of the team numbered lo or more, this
// PE excepted: one operation on each (none for n = 0).
func profTeam(routine string, t *Team, lo, n int) {
	if profOn && n > 0 {
		profAddTeam(routine, t, lo, n)
	}
}

// profCall counts a call of the collective routine.
func profCall(routine string) {
	if profOn {
		profRoutineOf(routine).calls.Add(1)
	}
}

// profAdd counts one operation.
//
//go:noinline
func profAdd(routine string, pe, n int) {
	profRoutineOf(routine).add(pe, n)
}

//go:noinline
func profAddTeam(routine string, t *Team, lo, n int) {
	r := profRoutineOf(routine)
	for j := lo; j < t.npes; j++ {
		if j != t.me {
			r.add(t.members[j], n)
		}
	}
}

// add counts an operation on the job's PE pe, moving n bytes.
func (r *profRoutine) add(pe, n int) {
	if uint(pe) < uint(len(r.cells)) {
		c := &r.cells[pe]
		c.ops.Add(1)
		c.bytes.Add(uint64(n))
	}
}

// profRoutineOf returns the counters of routine. The table of routines is
// copied on write: a routine's first count adds it under prof.mu, the
// others only read.
func profRoutineOf(routine string) *profRoutine {
	if r := (*prof.routines.Load())[routine]; r != nil {
		return r
	}
	return profAddRoutine(routine)
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
// profile directory (GOSHMEM_PROFILE), profile.CPUFile.
func CPUProfileFile(pe int) string { return profile.CPUFile(pe) }

// CommSummaryFile is the name of the communication summary of the PE pe
// in the profile directory (GOSHMEM_PROFILE), profile.SummaryFile.
func CommSummaryFile(pe int) string { return profile.SummaryFile(pe) }

// CommSummary is what one PE initiated from Init to the last Finalize,
// which writes it when GOSHMEM_PROFILE is set; the package profile
// defines it, so that goshmem-run reads it without linking shmem.
type CommSummary = profile.Summary

// RoutineComm is what one routine initiated (profile.RoutineComm).
type RoutineComm = profile.RoutineComm

// PEComm is the operations on one target PE and their bytes
// (profile.PEComm).
type PEComm = profile.PEComm

// profSummary returns the counts so far: routines by name, targets by PE,
// those without operations left out.
func profSummary() *CommSummary {
	s := &CommSummary{PE: st.me, NPEs: prof.npes, Routines: []RoutineComm{}}
	for name, r := range *prof.routines.Load() {
		rc := RoutineComm{Routine: name, Calls: r.calls.Load(), Targets: []PEComm{}}
		for pe := range r.cells {
			if ops := r.cells[pe].ops.Load(); ops > 0 {
				rc.Targets = append(rc.Targets, PEComm{PE: pe, Ops: ops, Bytes: r.cells[pe].bytes.Load()})
			}
		}
		if len(rc.Targets) > 0 || rc.Calls > 0 {
			s.Routines = append(s.Routines, rc)
		}
	}
	slices.SortFunc(s.Routines, func(a, b RoutineComm) int { return cmp.Compare(a.Routine, b.Routine) })
	return s
}
