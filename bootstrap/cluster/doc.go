// Package cluster is the launcher's side of the bootstrap of a goshmem job:
// the Seed, a memberlist node that the launcher (goshmem-run) runs, and
// the Agent, the memberlist member that stands for the PEs of one host
// (one per host, or one per PE under a cluster manager's spawner), starts
// them and carries their collectives, finalize, global exits and failure
// notices. It holds the memberlist configuration and transport, the tree in
// which the agents gather their PEs' collectives, and the stall reports.
//
// PEs never import this package: a PE is package bootstrap's Member, which
// talks to its agent over a local channel (the messages and the channel
// are bootstrap/internal/wire), so that a PE binary links neither
// memberlist nor what it brings (net/http, go-metrics, encoding/gob, ...).
// See package bootstrap for the design.
//
// memberlist reads only what authenticated with the job key (transport.go,
// strangers.go): an inbound stream is a stranger until its first message
// decrypts, and strangers are bounded per remote address and in all (the
// newest displacing the oldest silent one), must name the job quickly,
// and share a budget of bytes in flight; packets that do not decrypt are
// dropped. A death memberlist declares stands only once the member stays
// unreachable for half the failure timeout of the watcher's own running
// time (deaths.go).
package cluster
