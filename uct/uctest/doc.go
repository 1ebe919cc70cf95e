// Package uctest is the conformance suite of the uct transports: one table of
// cases that runs against every transport resource registered with
// uct.Register (every component, memory domain and TL resource that
// uct.Components reports).
//
// A test package runs the suite by importing the transports it wants to
// check and calling Run from a test, with RunPeerIfChild in its TestMain:
//
//	import (
//		_ "github.com/goshmem/goshmem/uct/self"
//		_ "github.com/goshmem/goshmem/uct/sm"
//	)
//
//	func TestMain(m *testing.M) {
//		uctest.RunPeerIfChild()
//		os.Exit(m.Run())
//	}
//
//	func TestConformance(t *testing.T) { uctest.Run(t) }
//
// Adding a transport to the suite is adding its import.
//
// # Peers
//
// Every case talks to a target: the process that owns the remote memory and
// the remote iface. For a loopback resource (uct.DeviceTypeSelf) the target
// lives in the test process itself, on the very iface the test uses. For
// every other resource it is a second process: Run re-executes the test
// binary with an environment variable naming the resource, and
// RunPeerIfChild, seeing it, becomes the peer. The peer opens the same
// component, memory domain and resource, allocates its target memory
// (MD.MemAlloc where the MD has uct.MDFlagAlloc, otherwise an anonymous
// mapping registered with MD.MemReg), opens an iface, prints the packed key,
// the memory's address and the iface's device and iface addresses on its
// standard output, and then serves active messages (an echo handler, a
// counting sink) until its standard input closes.
//
// The test process and its peers form a job: when GOSHMEM_KEY (the job key
// the launcher gives every PE) is not set, Run sets a random one for the
// test and its peers, so that authenticating transports (tcp) connect.
// Run uses t.Setenv for it, so it must not run in a parallel test.
//
// The test drives the peer through a line protocol on the peer's standard
// input and output (read, write, fill and checksum its memory, pause and
// resume its progress, count messages, watch two words), so that what the
// transport wrote is checked by the target itself and not through the
// transport.
//
// # What the cases check
//
// RMA: put short/bcopy/zcopy and get bcopy/zcopy of several sizes, each put
// surrounded by guard bytes that must stay untouched; a put is checked
// after a flush (a put that returned OK is only complete locally). AM:
// short/bcopy/zcopy echo round trips, compared byte for byte. Atomics: every
// posted and fetching operation of 32 and 64 bits against a model, with
// wrap-around and all-ones operands. Boundaries: the largest short, bcopy
// and zcopy operation of each kind (ending at the last byte of the target
// memory), zero lengths, odd offsets, lengths and local addresses. Flush:
// every operation issued before it has completed (its completion fired)
// and is visible at the target. Fence: the target never sees a write issued
// after a fence without the one before it. Pending: with the target not
// progressing, operations that find no resources are queued with
// PendingAdd and progress posts them all. An AM handler keeps its data
// where the transport passes uct.CBParamFlagDesc. Receive headroom
// (uct.IfaceParams.RxHeadroom, on a second iface that sends to itself):
// out-of-range sizes refused, the size reported, the bytes in front of the
// data writable, apart from it and intact while it is kept, and no
// allocation per message with or without one. Errors: forged
// (unreachable) and malformed addresses, operations on a destroyed EP and
// on an EP whose peer was killed with SIGKILL must return in bounded time
// without crashing; what each returns is logged.
//
// # Capabilities
//
// A case uses only what the resource claims in its uct.IfaceAttr: an
// operation that is not claimed is not called, and the case is skipped with
// the reason ("skipped: transport does not claim put zcopy"); an operation
// that is claimed must work. Limits (largest short and bcopy message,
// largest iov) are taken from the same attributes and tested at their
// boundaries, capped at 1 MiB where a transport claims more.
package uctest
