package launcher

import (
	"os"
	"strings"

	"github.com/goshmem/goshmem/bootstrap"
)

// contract says whether an environment entry is a variable of the launcher
// contract (or the agents' configuration), which the launcher sets itself.
func contract(kv string) bool {
	name, _, _ := strings.Cut(kv, "=")
	switch name {
	case bootstrap.EnvJobID, bootstrap.EnvRank, bootstrap.EnvSize, bootstrap.EnvSeed, bootstrap.EnvKey,
		bootstrap.EnvLocalRank, bootstrap.EnvLocalSize, bootstrap.EnvFailureTimeout, EnvAgentConfig:
		return true
	}
	return false
}

// baseEnv returns the environment PEs and agents start from: the launcher's
// and opts.Env without contract variables, and, for a job on this host
// alone, UCX_NET_DEVICES=lo (unless set) so that the PEs' tcp transport
// listens on the loopback only.
func (j *job) baseEnv() []string {
	var env []string
	for _, kv := range append(os.Environ(), j.opts.Env...) {
		if !contract(kv) {
			env = append(env, kv)
		}
	}
	if j.single && !hasVar(env, "UCX_NET_DEVICES") {
		env = append(env, "UCX_NET_DEVICES=lo")
	}
	return env
}

// forwardedEnv returns what agents add to their PEs' environment: opts.Env,
// and the launcher's UCX_*, SHMEM_* and GOSHMEM_* variables (PEs on other
// hosts do not inherit the launcher's environment).
func (j *job) forwardedEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !contract(kv) && (strings.HasPrefix(kv, "UCX_") || strings.HasPrefix(kv, "SHMEM_") || strings.HasPrefix(kv, "GOSHMEM_")) {
			env = append(env, kv)
		}
	}
	for _, kv := range j.opts.Env {
		if !contract(kv) {
			env = append(env, kv)
		}
	}
	if j.single && !hasVar(env, "UCX_NET_DEVICES") && !hasVar(os.Environ(), "UCX_NET_DEVICES") {
		env = append(env, "UCX_NET_DEVICES=lo")
	}
	return env
}

func hasVar(env []string, name string) bool {
	for _, kv := range env {
		if n, _, _ := strings.Cut(kv, "="); n == name {
			return true
		}
	}
	return false
}
