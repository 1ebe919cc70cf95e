// Package tcp is the TCP transport of goshmem (UCX's uct/tcp): active
// messages, one-sided puts and gets, and 32- and 64-bit atomics between
// processes on any hosts that can reach each other over TCP.
//
// Importing the package registers the component "tcp" with uct.Register. Its
// one memory domain, "tcp", registers memory (MemReg) but cannot allocate
// it; its transport resources are the usable network interfaces of the host
// (up, with an IPv4 address or a global IPv6 address; the loopback "lo"
// included), one uct.TLResource{TLName: "tcp", DevName: <interface>,
// DevType: uct.DeviceTypeNet} each. Selecting devices (UCX_NET_DEVICES) is
// left to ucp. The component also has a connection manager
// (uct.CMComponent, cm.go): listeners on socket addresses and the
// authenticated handshake that carries the layer above's private data
// (cm_wire.go), which ucp's listeners and socket-address endpoints use.
//
// # Memory keys
//
// MemReg records the range in a registry of the MD under a random 64-bit key
// id and a random 64-bit token; MkeyPack packs {key id, base, length, token}
// (MkeyPackedSize bytes). An unpacked rkey is a handle of this process that
// names the key; every put frame carries the key id, the token and the
// remote address, and the target applies the write only when the key id is
// registered in the MD of the iface that received it, the token matches and
// the whole range lies inside the registered region. Writes that fail the
// check are dropped (and logged); they still count as processed for flush.
// Get frames are checked the same way; the target answers them on the same
// connection, with the data written from the registered memory, or with
// ucs.ErrInvalidAddr for a get that fails the check (see get.go).
// RkeyPtr is unsupported: remote memory is reached only through the wire.
//
// # Connections and authentication
//
// An Iface listens on the address of its device only (127.0.0.1 for "lo"),
// on a port the kernel picks; its address is that IP and port plus a random
// iface id. EPCreate connects eagerly (UCX_TCP_CONN_TIMEOUT bounds the dial and
// the handshake).
//
// A pair of ifaces shares one connection both ways, as UCX's tcp transport
// matches its connections (see connmatch.go): an EP to a peer iface takes
// the connection that the peer iface dialed to this one, when no EP of this
// iface sends on it yet, and dials otherwise; when both ifaces dial at once
// (every process creates its EPs at start) the dial of the iface with the
// lower id wins, and the other's client is told to use it (hsUseMine). Such
// a connection carries this side's EP frames and this iface's answers to
// the peer's EP (acknowledgements, get and atomic replies, heartbeats)
// one way, and the peer's the other: a round trip of messages between two
// processes uses one socket, whose reads carry the acknowledgements of
// the kernel's TCP with the data. Each side has both roles on it from the
// handshake on, before an EP of it takes it. Only one EP of an iface per
// peer iface shares a connection: a further EP to the same peer iface
// (and a connection to an EP, below) dials a one-way connection
// (hsFlagOneWay), which carries that EP's frames to the peer and the
// answers back, and nothing the other way; so does an EP whose promised
// connection does not come in time.
//
// Ifaces also have uct.IfaceFlagConnectToEP: EPCreate with
// EPParams.Unconnected creates an EP with a random 64-bit id and no
// connection, whose EPAddress is the iface address and the id
// (EPAddrLen bytes). ConnectToEP dials the iface of the peer EP and names
// the peer's EP id in the handshake; the peer refuses an id that names no
// live unconnected EP of its iface, or one a connection was bound to
// already. After that the connection is a one-way connection, carrying
// this EP's frames one way; the peer EP's own ConnectToEP opens the other.
// See epconn.go.
//
// Every connection starts with a mutual handshake: the client sends a nonce,
// the id of the iface it means to reach, the id of its own iface and a
// random id of the connection; the server answers with its own nonce, a
// verdict and an HMAC-SHA256 over everything both sent, and the client
// answers with its own HMAC over the same: the job key's proofs of
// internal/jobkey, under uct/tcp's own label (see handshake.go); the hello also carries the client's
// iface id, a random id of the connection and the one-way flag, for
// connection matching. The server keeps the client's iface id with the
// connection (its log lines name it). A connection that fails the handshake (wrong
// key, wrong iface id, malformed message, timeout) is closed and logged, and
// nothing it sent reaches a handler or memory. An accepted connection has
// UCX_TCP_HANDSHAKE_TIMEOUT (3s) to authenticate, and at most
// UCX_TCP_MAX_HANDSHAKES (256) authenticate at once, half of them from one
// source address (UCX_TCP_MAX_HANDSHAKES_PER_SOURCE): a newer one closes
// the oldest of its source, or of the source with the most (see
// accept.go). The job key is the iface
// configuration variable KEY (UCX_TCP_KEY as ucp reads it) or else the
// environment variable GOSHMEM_KEY that the launcher sets, both read by
// the one rule of internal/jobkey: standard base64 of 16, 24 or 32 bytes. With neither, the process uses a random key of its own: its ifaces
// then reach each other but no other process.
//
// # Wire format
//
// After the handshake a connection carries frames: an 8-byte header (type,
// active message id, reserved zero, body length; see frameHeaderLen) and a
// body. From an EP to the peer's target role: active messages (the
// message bytes), puts (key id, token, remote address, data), gets,
// atomics (applied by the target with the CPU's atomic instructions; see
// atomic.go), acknowledgement requests (empty) and the EP's goodbye
// (empty). From the target role to the peer's EP: acknowledgements, the
// number of frames processed so far, sent once the frames before a
// request were processed; get and atomic replies; heartbeats (empty); and
// the iface's goodbye with the number of frames processed. A one-way
// connection carries the first kind from client to server and the second
// back; a shared one both kinds both ways. Everything read from the wire
// is validated; a frame of a kind the connection does not carry that way
// (or an operation after the peer EP's goodbye, a reply to no request, an
// acknowledgement of frames never sent) and any malformed frame close the
// connection, and the EP fails with ucs.ErrConnectionReset.
//
// # Closing and failures
//
// A destroyed EP and a closing iface say goodbye on their connections, one
// goodbye per role, so that a peer's normal teardown is no failure: a
// destroyed EP says "no more operations from me" (its connection, if
// shared, goes on carrying the peer EP's operations and this iface's
// answers to them), a closing iface "no more of anything from me" with
// the number of the peer's frames it processed. A connection closes once
// both roles of both sides said goodbye (or have none). An EP whose peer
// iface closed after processing every operation it sent ends quietly (no
// error handler, no log; later operations fail with
// ucs.ErrConnectionReset, a flush of what was sent succeeds); so does
// nothing change for an EP whose peer EP was destroyed. A connection that
// ends without the goodbyes due (the peer was killed or exited without
// closing), or a goodbye after operations were lost, fails the EP with
// ucs.ErrConnectionReset: its error handler is called and the failure
// logged. See close.go.
//
// A peer that is stopped, hung or cut off by the network says nothing: the
// target role of every connection sends a heartbeat when its side sent
// nothing else for a fifth of UCX_TCP_PEER_TIMEOUT (by default the job's
// GOSHMEM_FAILURE_TIMEOUT, else 10s), from the iface's poller goroutine,
// so that a peer that computes without calling the library still beats;
// an EP that heard nothing for that long fails with ucs.ErrEndpointTimeout.
// The kernel's keepalive (UCX_TCP_KEEPIDLE, KEEPINTVL, KEEPCNT) backs it
// up for idle connections. See alive.go.
//
// What a peer or a stranger can cause at any rate (refused connections,
// rejected puts and gets, bad frames, messages without a handler) is
// logged through limiters: the first ten of a minute of each kind, then a
// count (ucs.LogLimiter).
//
// # Sends, flush and pending requests
//
// EP operations never block. When nothing else is being written on the
// EP's connection, an operation writes its frame itself with one
// non-blocking writev (the header and the caller's buffers: zcopy
// operations copy nothing); what the socket does not take at once is
// queued, and written (one writev for the queue) by the next operation,
// or by Progress or the poller once the socket has room. The EP is the
// one writer of its socket: on a shared connection the iface's answers to
// the peer's EP go into the same queue, at frame boundaries, behind the
// frame being written and ahead of the operations not started yet (a
// partly written 1 GiB put delays them, nothing else does); they are
// copied when they cannot be written at once, and count against no
// queue: they are bounded by what was received (an acknowledgement
// waiting last takes the count of a newer one). Small frames that
// operations post back to back, with no Progress call between them (a loop
// of puts), are gathered instead, up to UCX_TCP_TX_BATCH bytes, and written
// together at the next Progress call, flush, larger frame or reply, or by
// the poller after UCX_TCP_PASSIVE_DELAY (see batch.go).
// Short and bcopy operations copy their data and return ucs.OK. Zcopy
// operations return ucs.OK when the socket took everything at once, and
// otherwise ucs.InProgress, and their Completion is signalled from
// Iface.Progress once the data was written to the socket. When the bytes
// queued exceed UCX_TCP_TX_QUEUE_LEN, operations fail with ucs.ErrNoResource
// (an operation on an empty queue is always taken, whatever its size);
// PendingAdd queues a request, which Progress calls when the queue drained.
//
// Flush sends an acknowledgement request (unless one follows the last
// frame already) and completes when the peer acknowledged every frame
// issued before it: for puts this means the data is in the target's memory
// (remote completion, as OpenSHMEM quiet needs), for active messages that
// the target received them. Fence returns ucs.OK: the frames of an EP are
// applied in the order they were issued.
//
// # Threading and progress
//
// As UCX's tcp transport does, the worker's progress reads the sockets
// itself; no goroutine waits for a connection, and no goroutine is woken
// for a frame that Progress can read.
//
//   - One goroutine per listener accepts connections; one per accepted
//     connection runs the handshake, and ends.
//   - After its handshake a connection's socket leaves Go's network poller
//     (a non-blocking descriptor of the transport's own, in the iface's
//     epoll set). Iface.Progress asks the set without waiting which
//     sockets are ready and reads those itself (see rx.go): it applies
//     puts and atomics, answers gets and atomics with one reply frame
//     written at once from the reading goroutine (or queued: a reader
//     never stops reading because an answer cannot be written, so that
//     two sides that both write large frames both read on), acknowledges
//     flushes,
//     and completes the gets and fetching atomics of this side's EPs in
//     the goroutine that polls.
//   - Passive progress: each iface has one poller goroutine, which steps
//     in only when Progress has not run for UCX_TCP_PASSIVE_DELAY
//     (default 1ms; at most 10s). Then it waits on the epoll set itself
//     and serves what comes as Progress would, until Progress runs again:
//     a process that computes without calling the library still has its
//     puts applied, its gets and atomics answered and its flushes
//     acknowledged, each within about the delay (those that follow at
//     once). A smaller delay answers such a process sooner and costs a
//     wake-up of the poller every delay while Progress runs; 0 has the
//     poller wait on the set beside Progress, woken by every frame. The
//     poller also sends the heartbeats, checks liveness, and ends the
//     connections that linger after a goodbye (see poller.go).
//   - Active messages for handlers installed with uct.CBFlagAsync are
//     delivered by their reader, at once; those for uct.CBFlagSync
//     handlers are queued and delivered by Iface.Progress. The queue holds
//     at most UCX_TCP_RX_QUEUE_LEN bytes: beyond that the connection is
//     not read (it leaves the epoll set) until Progress made room, and TCP
//     flow control pushes back on the sender; its queue is still written.
//     (The peer's answers wait behind the message that does not fit, for
//     this side's Progress, which delivers the queue whatever the peer
//     does: no cycle between the two sides.) Handlers get
//     uct.CBParamFlagDesc and may keep data by returning ucs.InProgress
//     until Iface.ReleaseDesc. Each message is read into a buffer of its
//     own, with the IfaceParams.RxHeadroom bytes in front of the data
//     (Iface.RxHeadroom).
//   - Completions, flush completions, EP error handlers and pending requests
//     are called only from Iface.Progress.
//
// A goroutine that waits for a tcp event should spin on Progress,
// yielding the thread every few calls and the goroutine (runtime.Gosched)
// only every few hundred (each Gosched wakes a thread for an idle P, two
// futex calls and a thread that takes a core from the polling processes),
// and sleep only after a while without events, as ucp's Worker.Idle does,
// in poll(2) on Iface.InputFD (uct.InputPoller), the epoll set: the next
// frame then wakes it. A timed sleep would not be ended by a frame: while
// Progress runs, no goroutine of the iface reads the sockets.
//
// WakeupFD is unsupported: ifaces are polled.
package tcp

// Names of the component, its memory domain and its transport.
const (
	ComponentName = "tcp"
	MDName        = "tcp"
	TLName        = "tcp"
)
