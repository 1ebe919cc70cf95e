package shmem

import (
	"github.com/goshmem/goshmem/bootstrap"
	"github.com/goshmem/goshmem/ucs"
)

// EnvVar is an environment variable that goshmem reads.
type EnvVar struct {
	Name string
	// Doc says what the variable does, the values it takes and its
	// default.
	Doc string
}

// goshmemEnvVars are goshmem's own variables: the launcher contract, which
// goshmem-run sets for every PE, the tools, and the log level (UCX's
// variable, which no configuration table holds).
var goshmemEnvVars = []EnvVar{
	{bootstrap.EnvJobID, "the job id, 1 to 64 of [A-Za-z0-9._-] (set by goshmem-run; without the contract's variables a program is a job of one PE)"},
	{bootstrap.EnvRank, "this PE's number, 0 to GOSHMEM_SIZE-1 (set by goshmem-run, or taken from Open MPI's, MPICH's or Slurm's variables)"},
	{bootstrap.EnvSize, "the number of PEs (set by goshmem-run)"},
	{bootstrap.EnvSeed, "host:port of the bootstrap seed, goshmem-run's memberlist node (set by goshmem-run)"},
	{bootstrap.EnvKey, "the job key, standard base64 of 16, 24 or 32 bytes: it encrypts the bootstrap's traffic and authenticates tcp connections (set by goshmem-run)"},
	{bootstrap.EnvLocalRank, "this PE's number among the PEs of its host (set by goshmem-run)"},
	{bootstrap.EnvLocalSize, "the number of PEs on this PE's host (set by goshmem-run)"},
	{bootstrap.EnvFailureTimeout, "how long the job may take to notice a PE or launcher that stopped answering, a Go duration (default " + bootstrap.DefaultFailureTimeout.String() + "; goshmem-run -failure-timeout)"},
	{envStallReport, "when set, a Go duration: a PE reports where it waits when one of its waits lasts longer (default off; goshmem-run -stall-report)"},
	{envBarrier, "the job's barrier: auto (the default: a dissemination over every PE, or a central one on a node with more PEs than cores) or node-aware (where the job spans nodes, the PEs of each node gather at a leader through shared memory and only the leaders cross the network; every PE must ask for it)"},
	{envProfile, "when set, a directory: each PE writes its CPU profile and a summary of its communication there at the last Finalize (default off; goshmem-run -profile)"},
	{bootstrap.EnvDebug, "when set to anything but 0, the bootstrap's diagnostics (memberlist's log) are logged whatever UCX_LOG_LEVEL says (default off: they are at level debug)"},
	{ucs.LogLevelEnv, "the level of the library's log on standard error: fatal, error, warn, diag, info, debug, trace, req, data, async, func or poll (default warn; shmem.SetLogger replaces the logger)"},
}

// envStallReport is the variable of the stall reports (goshmem-run
// -stall-report).
const envStallReport = "GOSHMEM_STALL_REPORT"

// EnvVars returns the environment variables that goshmem reads: the
// SHMEM_* variables of the OpenSHMEM specification, then goshmem's own
// GOSHMEM_* ones and UCX_LOG_LEVEL. The UCX_* variables are configuration tables (see
// ucp.ConfigTable and the transports' tables), which goshmem-info -c lists
// with these. It may be called before Init.
func EnvVars() []EnvVar {
	vars := make([]EnvVar, 0, len(envVars)+len(goshmemEnvVars))
	for _, v := range envVars {
		vars = append(vars, EnvVar{v.name, v.help})
	}
	return append(vars, goshmemEnvVars...)
}
