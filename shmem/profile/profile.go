// Package profile defines the files a PE writes in its profile directory
// when GOSHMEM_PROFILE is set (shmem writes them at Finalize; goshmem-run
// reads them after the job): their names, and the communication summary's
// JSON form. It is its own package so that a reader links no transport.
package profile

import "strconv"

// CPUFile is the name of the CPU profile of the PE pe in the
// profile directory (GOSHMEM_PROFILE): "pe-N.cpu.pprof", for go tool
// pprof.
func CPUFile(pe int) string { return "pe-" + strconv.Itoa(pe) + ".cpu.pprof" }

// SummaryFile is the name of the communication summary of the PE pe in
// the profile directory (GOSHMEM_PROFILE): "pe-N.comm.json", a Summary in
// JSON.
func SummaryFile(pe int) string { return "pe-" + strconv.Itoa(pe) + ".comm.json" }

// Summary is what one PE initiated from Init to the last Finalize,
// which writes it when GOSHMEM_PROFILE is set: per routine, the operations
// on each target PE and their bytes, and the calls of collective routines.
// Puts, put-with-signal and atomics count the bytes they send or update at
// the target (a signal or atomic operand counts its size), gets and
// fetches the bytes they read from it; operations on this PE itself count
// too.
//
// A collective call counts one call, and one operation on each other
// member of its team (in the job's numbering) that its definition has this
// PE's data delivered to, with the bytes of that data: the root of a
// broadcast its source to every member; collect and fcollect this PE's
// block to every member; alltoall and alltoalls the block for each member
// to it; a reduction this PE's source to every member, and a scan to every
// member after this PE in the team. That is whatever algorithm and
// transport carry the data (a tree relays a broadcast, a reduction across
// nodes halves its vector, and on one node the members load what they
// need straight from this PE's heap), so a program's profile is the same on
// every transport, and its collectives' bytes are those the program asked
// to move. The library's own traffic (the syncs and signals inside
// collectives, barriers and allocations, and the checks of their
// arguments) is not counted: barriers, syncs, allocations, Free, the
// splits and Destroy count their calls only. A call that fails its checks
// counts its call and no data.
type Summary struct {
	PE       int           `json:"pe"`
	NPEs     int           `json:"npes"`
	Routines []RoutineComm `json:"routines"`
}

// RoutineComm is what one routine ("Put", "CtxGetNBI", "AtomicFetchAdd",
// "Broadcast", ...) initiated, per target PE, and for a collective routine
// its calls.
type RoutineComm struct {
	Routine string   `json:"routine"`
	Calls   uint64   `json:"calls,omitempty"`
	Targets []PEComm `json:"targets"`
}

// PEComm is the operations on one target PE and their bytes.
type PEComm struct {
	PE    int    `json:"pe"`
	Ops   uint64 `json:"ops"`
	Bytes uint64 `json:"bytes"`
}
