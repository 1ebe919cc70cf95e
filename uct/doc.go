// Package uct is the transport layer of goshmem: the UCT API of the UCX
// documents in Go form.
//
// A Component (one per transport family: "self", "posix", ...) lists memory
// domain resources and opens MDs; an MD allocates or registers memory, packs
// memory keys, lists its transport resources and opens Ifaces on them; an
// Iface has an address and creates EPs to remote ifaces; an EP carries the
// one-sided and active-message operations. A Component that also has a
// connection manager (CMComponent: tcp's) sets up client-server
// connections on socket addresses: listeners, connection requests with
// private data, and CM EPs (cm.go).
//
// Non-blocking operations return a ucs.Status: OK when the operation is
// complete on return, InProgress when a Completion given with the call will
// be signalled later, and ErrNoResource when the transport cannot take the
// operation now (queue a PendingReq with PendingAdd and retry from its
// callback).
//
// Transports register themselves with Register from an init function; import
// a transport's package (for example for its side effect) to make it
// available, or uct/transports for all of them.
package uct
