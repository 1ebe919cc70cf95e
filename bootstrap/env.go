package bootstrap

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/goshmem/goshmem/internal/jobkey"
	"github.com/goshmem/goshmem/ucs"

	"github.com/goshmem/goshmem/bootstrap/internal/wire"
)

// The environment variables of the launcher contract. goshmem-run sets all
// of them for every PE it starts. A PE may instead take its rank, local rank
// and local size from the variables of the spawner that started it (see
// EnvFromOS); GOSHMEM_JOBID, GOSHMEM_SIZE, GOSHMEM_SEED and GOSHMEM_KEY
// always come from the launcher.
const (
	EnvJobID     = "GOSHMEM_JOBID"      // job id: 1 to 64 bytes of [A-Za-z0-9._-]
	EnvRank      = "GOSHMEM_RANK"       // this PE's rank, 0 <= rank < size
	EnvSize      = "GOSHMEM_SIZE"       // number of PEs in the job
	EnvSeed      = "GOSHMEM_SEED"       // host:port of the seed memberlist node
	EnvKey       = jobkey.Env           // job key, standard base64 of 16, 24 or 32 bytes (jobkey.Decode)
	EnvLocalRank = "GOSHMEM_LOCAL_RANK" // rank among the PEs of this host
	EnvLocalSize = "GOSHMEM_LOCAL_SIZE" // number of PEs on this host
	// EnvFailureTimeout is optional: how long the job may take to notice
	// that a PE or the launcher stopped answering, as a Go duration
	// ("3s"). Unset or empty means DefaultFailureTimeout.
	EnvFailureTimeout = "GOSHMEM_FAILURE_TIMEOUT"
	// EnvAgentFD is the number of the inherited file descriptor of the
	// PE's local channel to its agent (see cluster.Agent.Attach). A PE of a job of
	// more than one PE needs it: the agent that starts the PE sets it.
	EnvAgentFD = "GOSHMEM_AGENT_FD"
)

// EnvDebug, when set to a non-empty value other than "0", writes the log
// of a PE's or an agent's membership (memberlist's, and the messages it
// drops) to its logger at ucs.LogPrint, whatever the logger's level;
// otherwise those lines are ucs.LogDebug.
const EnvDebug = wire.EnvDebug

// DefaultFailureTimeout is the failure timeout of a job whose launcher sets
// none: within about this time after a PE or the launcher stops answering
// (it was stopped, its host died, the network between them broke), every
// other member of the job learns it. A PE that exits or is killed is
// noticed at once by the process that started it; this timeout is for the
// silent failures.
//
// PEs are not members of memberlist (their agents are, one per host), so a
// host with many more PEs than cores (64 on 2) still has one member to
// keep answering, and its PEs answer their agent's pings over a local
// channel: measured with 64 PEs computing on 2 cores, nothing comes near
// this timeout.
const DefaultFailureTimeout = 5 * time.Second

// contractVars are the variables whose presence says that the launcher
// started this process.
var contractVars = []string{EnvJobID, EnvRank, EnvSize, EnvSeed, EnvKey, EnvLocalRank, EnvLocalSize, EnvAgentFD}

// Env describes a PE's place in its job, as the launcher hands it over in
// the environment.
type Env struct {
	JobID     string
	Rank      int
	Size      int
	LocalRank int
	LocalSize int
	Seed      string // host:port of the seed; empty only for a singleton
	Key       []byte // memberlist encryption key: 16, 24 or 32 bytes
	// FailureTimeout is how long the job may take to notice a member that
	// stopped answering; zero means DefaultFailureTimeout.
	FailureTimeout time.Duration
	// AgentFD is the descriptor of the PE's channel to its agent
	// (GOSHMEM_AGENT_FD), which Join takes over; 0 for none (a
	// singleton).
	AgentFD int
	// Logger receives the member's log (see EnvDebug); nil means
	// ucs.DefaultLogger(). It is no part of the launcher contract:
	// EnvFromOS leaves it nil.
	Logger ucs.Logger
}

// singletonEnv is the job of a program started without the launcher.
var singletonEnv = Env{JobID: "singleton", Size: 1, LocalSize: 1}

// EnvFromOS reads the launcher contract from the process environment.
//
// When none of the contract variables is set, the process was not started
// by the launcher: EnvFromOS returns false and no error, and the program is
// a job of one PE. When some are set, GOSHMEM_JOBID, GOSHMEM_SIZE,
// GOSHMEM_SEED, GOSHMEM_KEY and GOSHMEM_AGENT_FD must be present and well
// formed, and so must the PE's place: GOSHMEM_RANK, GOSHMEM_LOCAL_RANK and
// GOSHMEM_LOCAL_SIZE, or, where GOSHMEM_RANK is not set, the variables of
// the spawner that started the process (see PlaceFromOS). Otherwise the
// error names the offending variable and wraps ucs.ErrInvalidParam.
func EnvFromOS() (Env, bool, error) {
	return envFromLookup(os.LookupEnv)
}

// Place is a process's place in a job as a spawner (goshmem-run, Slurm's
// srun, Open MPI's mpirun, MPICH's mpiexec) describes it.
type Place struct {
	Rank, Size           int
	LocalRank, LocalSize int
	// Source names the variable the rank came from ("GOSHMEM_RANK",
	// "SLURM_PROCID", ...).
	Source string
}

// spawnerVars are the variables each spawner sets for every process it
// starts, by preference: a spawner started inside another (mpirun in a
// Slurm allocation, whose batch script has SLURM_PROCID=0) sets its own
// more specific ones.
var spawnerVars = []struct {
	rank, size, localRank, localSize string
}{
	{EnvRank, EnvSize, EnvLocalRank, EnvLocalSize},
	{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
	{"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
	// Slurm has no local size variable: it comes from
	// SLURM_STEP_TASKS_PER_NODE and SLURM_NODEID (see slurmLocalSize).
	{"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", ""},
}

// PlaceFromOS returns the place of this process as its spawner describes
// it: from GOSHMEM_RANK, GOSHMEM_SIZE, GOSHMEM_LOCAL_RANK and
// GOSHMEM_LOCAL_SIZE when GOSHMEM_RANK is set; else from Open MPI's
// OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK and _LOCAL_SIZE; else from
// MPICH's PMI_RANK, PMI_SIZE, MPI_LOCALRANKID and MPI_LOCALNRANKS; else from
// Slurm's SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and the local size that
// SLURM_STEP_TASKS_PER_NODE (or SLURM_TASKS_PER_NODE) gives for
// SLURM_NODEID. It returns false when none of the rank variables is set, and
// an error wrapping ucs.ErrInvalidParam, naming the variable, when one of the
// chosen spawner's variables is missing or malformed.
func PlaceFromOS() (Place, bool, error) {
	return placeFromLookup(os.LookupEnv)
}

func placeFromLookup(lookup func(string) (string, bool)) (Place, bool, error) {
	for _, sv := range spawnerVars {
		if _, ok := lookup(sv.rank); !ok {
			continue
		}
		var p Place
		p.Source = sv.rank
		var err error
		num := func(name string) int {
			if err != nil {
				return 0
			}
			s, ok := lookup(name)
			if !ok {
				err = fmt.Errorf("bootstrap: %s is not set (%s is): %w", name, sv.rank, ucs.ErrInvalidParam)
				return 0
			}
			n, perr := strconv.Atoi(s)
			if perr != nil {
				err = fmt.Errorf("bootstrap: %s=%q: not an integer: %w", name, s, ucs.ErrInvalidParam)
			}
			return n
		}
		p.Size = num(sv.size)
		if err == nil && (p.Size < 1 || p.Size > wire.MaxRanks) {
			err = fmt.Errorf("bootstrap: %s=%d: out of range [1, %d]: %w", sv.size, p.Size, wire.MaxRanks, ucs.ErrInvalidParam)
		}
		p.Rank = num(sv.rank)
		if err == nil && (p.Rank < 0 || p.Rank >= p.Size) {
			err = fmt.Errorf("bootstrap: %s=%d: out of range [0, %s=%d): %w", sv.rank, p.Rank, sv.size, p.Size, ucs.ErrInvalidParam)
		}
		p.LocalRank = num(sv.localRank)
		localSizeName := sv.localSize
		if sv.localSize != "" {
			p.LocalSize = num(sv.localSize)
		} else if err == nil {
			localSizeName = "SLURM_STEP_TASKS_PER_NODE"
			p.LocalSize, err = slurmLocalSize(lookup)
		}
		if err == nil && (p.LocalSize < 1 || p.LocalSize > p.Size) {
			err = fmt.Errorf("bootstrap: %s gives a local size of %d: out of range [1, %s=%d]: %w", localSizeName, p.LocalSize, sv.size, p.Size, ucs.ErrInvalidParam)
		}
		if err == nil && (p.LocalRank < 0 || p.LocalRank >= p.LocalSize) {
			err = fmt.Errorf("bootstrap: %s=%d: out of range [0, %d): %w", sv.localRank, p.LocalRank, p.LocalSize, ucs.ErrInvalidParam)
		}
		if err != nil {
			return Place{}, false, err
		}
		return p, true, nil
	}
	return Place{}, false, nil
}

// slurmLocalSize returns the number of tasks of this Slurm step on this
// node: the entry for SLURM_NODEID in SLURM_STEP_TASKS_PER_NODE (or, outside
// a step, SLURM_TASKS_PER_NODE), a list such as "2(x3),1" (three nodes with
// two tasks, then one with one).
func slurmLocalSize(lookup func(string) (string, bool)) (int, error) {
	name := "SLURM_STEP_TASKS_PER_NODE"
	list, ok := lookup(name)
	if !ok {
		name = "SLURM_TASKS_PER_NODE"
		if list, ok = lookup(name); !ok {
			return 0, fmt.Errorf("bootstrap: SLURM_STEP_TASKS_PER_NODE is not set (SLURM_PROCID is): %w", ucs.ErrInvalidParam)
		}
	}
	node := 0
	if s, ok := lookup("SLURM_NODEID"); ok {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("bootstrap: SLURM_NODEID=%q: not a node number: %w", s, ucs.ErrInvalidParam)
		}
		node = n
	}
	n, err := tasksOnNode(list, node)
	if err != nil {
		return 0, fmt.Errorf("bootstrap: %s=%q: %w", name, list, err)
	}
	return n, nil
}

// tasksOnNode returns the count for node in a Slurm tasks-per-node list.
func tasksOnNode(list string, node int) (int, error) {
	for _, item := range strings.Split(list, ",") {
		count, reps := item, "1"
		if i := strings.IndexByte(item, '('); i >= 0 {
			if !strings.HasPrefix(item[i:], "(x") || !strings.HasSuffix(item, ")") {
				return 0, fmt.Errorf("malformed item %q: %w", item, ucs.ErrInvalidParam)
			}
			count, reps = item[:i], item[i+2:len(item)-1]
		}
		c, err1 := strconv.Atoi(count)
		r, err2 := strconv.Atoi(reps)
		if err1 != nil || err2 != nil || c < 0 || r < 1 {
			return 0, fmt.Errorf("malformed item %q: %w", item, ucs.ErrInvalidParam)
		}
		if node < r {
			return c, nil
		}
		node -= r
	}
	return 0, fmt.Errorf("no entry for this node: %w", ucs.ErrInvalidParam)
}

func envFromLookup(lookup func(string) (string, bool)) (Env, bool, error) {
	found := false
	for _, v := range contractVars {
		if _, ok := lookup(v); ok {
			found = true
			break
		}
	}
	if !found {
		return Env{}, false, nil
	}
	var e Env
	var err error
	get := func(name string) string {
		if err != nil {
			return ""
		}
		s, ok := lookup(name)
		if !ok {
			err = fmt.Errorf("bootstrap: %s is not set (the other launcher variables are): %w", name, ucs.ErrInvalidParam)
		}
		return s
	}
	bad := func(name, val, why string) {
		if err == nil {
			err = fmt.Errorf("bootstrap: %s=%q: %s: %w", name, val, why, ucs.ErrInvalidParam)
		}
	}

	e.JobID = get(EnvJobID)
	if err == nil && !wire.ValidJobID(e.JobID) {
		bad(EnvJobID, e.JobID, "want 1 to 64 characters of [A-Za-z0-9._-]")
	}
	size := get(EnvSize)
	if err == nil {
		n, perr := strconv.Atoi(size)
		switch {
		case perr != nil:
			bad(EnvSize, size, "not an integer")
		case n < 1 || n > wire.MaxRanks:
			bad(EnvSize, size, "out of range [1, "+strconv.Itoa(wire.MaxRanks)+"]")
		}
		e.Size = n
	}
	if err == nil {
		if _, ok := lookup(EnvRank); !ok && !anySpawnerRank(lookup) {
			err = fmt.Errorf("bootstrap: %s is not set (the other launcher variables are), nor the rank of a known spawner: %w", EnvRank, ucs.ErrInvalidParam)
		}
	}
	if err == nil {
		// The contract's own variables come first; GOSHMEM_SIZE stands in
		// for a spawner's size variable it does not set.
		p, _, perr := placeFromLookup(func(name string) (string, bool) {
			if name == EnvSize {
				return size, true
			}
			return lookup(name)
		})
		switch {
		case perr != nil:
			err = perr
		case p.Size != e.Size:
			err = fmt.Errorf("bootstrap: the spawner started %d processes (%s's size), but %s=%d: %w", p.Size, p.Source, EnvSize, e.Size, ucs.ErrInvalidParam)
		}
		e.Rank, e.LocalRank, e.LocalSize = p.Rank, p.LocalRank, p.LocalSize
	}
	e.Seed = get(EnvSeed)
	if err == nil {
		if _, _, serr := net.SplitHostPort(e.Seed); serr != nil {
			bad(EnvSeed, e.Seed, "want host:port")
		}
	}
	key := get(EnvKey)
	if err == nil {
		e.Key, err = DecodeKey(key)
		if err != nil {
			err = fmt.Errorf("bootstrap: %s: %w", EnvKey, err)
		}
	}
	if s, ok := lookup(EnvAgentFD); ok && err == nil {
		fd, perr := strconv.Atoi(s)
		if perr != nil || fd < 3 {
			bad(EnvAgentFD, s, "not a descriptor number above 2")
		}
		e.AgentFD = fd
	} else if err == nil {
		err = fmt.Errorf("bootstrap: %s is not set (the other launcher variables are): a PE is started by its agent (goshmem-run): %w", EnvAgentFD, ucs.ErrInvalidParam)
	}
	if s, ok := lookup(EnvFailureTimeout); ok && s != "" && err == nil {
		d, perr := time.ParseDuration(s)
		switch {
		case perr != nil:
			bad(EnvFailureTimeout, s, "not a duration")
		case d < wire.MinFailureTimeout:
			bad(EnvFailureTimeout, s, "below the minimum of "+wire.MinFailureTimeout.String())
		}
		e.FailureTimeout = d
	}
	if err != nil {
		return Env{}, false, err
	}
	return e, true, nil
}

// anySpawnerRank reports whether the rank variable of any known spawner is
// set.
func anySpawnerRank(lookup func(string) (string, bool)) bool {
	for _, sv := range spawnerVars {
		if _, ok := lookup(sv.rank); ok {
			return true
		}
	}
	return false
}

// Environ returns the launcher contract for e as "NAME=value" strings,
// suitable for exec.Cmd.Env. EnvFromOS in a process started with them
// returns e.
func (e Env) Environ() []string {
	vars := []string{
		EnvJobID + "=" + e.JobID,
		EnvRank + "=" + strconv.Itoa(e.Rank),
		EnvSize + "=" + strconv.Itoa(e.Size),
		EnvSeed + "=" + e.Seed,
		EnvKey + "=" + EncodeKey(e.Key),
		EnvLocalRank + "=" + strconv.Itoa(e.LocalRank),
		EnvLocalSize + "=" + strconv.Itoa(e.LocalSize),
	}
	if e.FailureTimeout != 0 {
		vars = append(vars, EnvFailureTimeout+"="+e.FailureTimeout.String())
	}
	if e.AgentFD != 0 {
		vars = append(vars, EnvAgentFD+"="+strconv.Itoa(e.AgentFD))
	}
	return vars
}

// KeySize is the size in bytes of the keys NewKey makes (AES-256).
const KeySize = jobkey.Size

// NewKey returns a fresh random job key of KeySize bytes.
func NewKey() ([]byte, error) { return jobkey.New() }

// EncodeKey returns the form of key used in GOSHMEM_KEY: standard base64.
func EncodeKey(key []byte) string { return jobkey.Encode(key) }

// DecodeKey decodes a key in the form EncodeKey gives, by the rule of every
// job key variable (jobkey.Decode): standard base64 of 16, 24 or 32 bytes
// (AES-128, -192 or -256), space around it ignored; otherwise the error
// wraps ucs.ErrInvalidParam.
func DecodeKey(s string) ([]byte, error) {
	k, err := jobkey.Decode(s)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	return k, nil
}
