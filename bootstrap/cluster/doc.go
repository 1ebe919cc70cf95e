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
// Inbound memberlist streams are bounded before they are authenticated
// (transport.go): how many are read at once, and how many bytes they may
// bring, per node and per remote address.
package cluster
