package bootstrap

import (
	"encoding/binary"
	"fmt"
	"net"
	"strconv"

	"github.com/goshmem/goshmem/ucs"
)

// Bootstrap messages travel between the seed and the agents as memberlist
// user messages over its reliable, encrypted stream transport, and between
// an agent and its PEs as frames on their local channel (see frame.go).
// Every message has the same header:
//
//	version  uint8  (wireVersion)
//	kind     uint8  (msgKind)
//	jobLen   uint8, job id (jobLen bytes)
//	rank     int32  sender: a PE's rank, an agent's id, -1 for the seed
//	                and for an agent talking to its PEs
//	seq      uint64 collective or report sequence number (0 where unused)
//
// followed by a body that depends on the kind (all integers big endian;
// strings are a uint16 length and the bytes):
//
//	Between an agent and its PEs:
//	kindHello (PE → agent, first frame): nothing
//	kindWelcome (agent → PE, the answer): nothing
//	kindGather (PE → agent): flags uint8 (flagBarrier), payLen uint32, payload
//	kindResult (agent → PE; the table's memory file travels with the frame,
//	    except for a barrier): flags uint8, size uint64 (of the file)
//	kindFinalize, kindFinalizeAck, kindPing, kindPong: nothing
//	kindGlobalExit (PE → agent): code int32, host string
//	kindLost (PE → agent): rank int32 (the PE it lost), reason string
//	kindGlobalExitAck, kindLostAck (agent → PE): nothing
//	kindFailure (seed → agent, agent → PE): rank int32 (the PE that failed,
//	    -1 for the seed), host string, reason string
//
//	Between agents (the tree of the collectives) and with the seed:
//	kindDirectory (seed → agent 0, agent → child): addr string (the
//	    sender's node: the receiver's parent; empty from the seed), count
//	    uint32, then count times: id uint32, node uint32, addr string, host
//	    string (the agents of the receiver's subtree, itself first)
//	kindUp (agent → parent): flags uint8, count uint32 (PEs gathered in the
//	    subtree), then unless flagBarrier the entries (see below)
//	kindDown (agent → child): flags uint8, then unless flagBarrier the
//	    entries of every PE
//	kindAbort (agent → child, agent → PE): reason string
//	kindAgentReport (agent → seed; seq numbers the agent's reports from 1):
//	    addr string (the agent's node), count uint16, then count events:
//	    kind uint8 (evJoined, evExit, evLost, evGlobalExit), rank int32 (the
//	    PE), code int32, flags uint8 (evExit: flagEndedByAgent, flagJoined,
//	    flagFinalized), other int32 (evLost: the PE it lost), host string,
//	    how string, why string
//	kindAgentAck (seed → agent; seq is that of the report): nothing
//	kindTerminate (seed → agent): reason string
//	kindStallReport (seed → agent; have PEs report where they wait):
//	    count uint32, then count times: rank int32 (a PE to ask)
//
// Entries: count uint32, then count times: rank int32, node uint32, len
// uint32, blob.
//
// The encoding is canonical: a message that decodes re-encodes to the same
// bytes, and trailing bytes are an error.

// wireVersion 3 made the agents the only members of the job: PEs talk to
// their agent, agents gather in a tree.
const wireVersion = 3

type msgKind uint8

const (
	kindHello msgKind = 1 + iota
	kindWelcome
	kindGather
	kindResult
	kindFinalize
	kindFinalizeAck
	kindPing
	kindPong
	kindGlobalExit
	kindGlobalExitAck
	kindLost
	kindLostAck
	kindFailure
	kindDirectory
	kindUp
	kindDown
	kindAbort
	kindAgentReport
	kindAgentAck
	kindTerminate
	kindStallReport
	kindLast = kindStallReport
)

var kindNames = [...]string{
	kindHello: "hello", kindWelcome: "welcome", kindGather: "gather", kindResult: "result",
	kindFinalize: "finalize", kindFinalizeAck: "finalize-ack", kindPing: "ping", kindPong: "pong",
	kindGlobalExit: "global-exit", kindGlobalExitAck: "global-exit-ack", kindLost: "lost", kindLostAck: "lost-ack",
	kindFailure: "failure", kindDirectory: "directory", kindUp: "up", kindDown: "down", kindAbort: "abort",
	kindAgentReport: "agent-report", kindAgentAck: "agent-ack", kindTerminate: "terminate", kindStallReport: "stall-report",
}

func (k msgKind) String() string {
	if k >= 1 && k <= kindLast {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// flagBarrier, in a gather, a result, an up or a down message, says that
// the collective is a barrier: it gathers no blobs.
const flagBarrier = 1

// The events of an agent report.
type eventKind uint8

const (
	// evJoined: the PE rank connected to its agent (the first PE of the
	// agent that did; the others say so when they end).
	evJoined eventKind = 1 + iota
	// evExit: the PE rank ended; how says how, code is the exit code that
	// stands for it, flags say what the agent knew of it.
	evExit
	// evLost: the PE rank is about to end because it lost the PE other.
	evLost
	// evGlobalExit: the PE rank asked to end the job with status code.
	evGlobalExit
	evLast = evGlobalExit
)

// Flags of an evExit event.
const (
	// flagEndedByAgent: the agent had told the PE to end (SIGTERM, then
	// SIGKILL) while it still ran: its end is a consequence (of the job
	// being ended, or of what why says), not a failure of its own.
	flagEndedByAgent = 1 << iota
	// flagJoined: the PE had connected to its agent (it called Join).
	flagJoined
	// flagFinalized: the PE had finalized and not gathered since.
	flagFinalized
	exitFlags = flagEndedByAgent | flagJoined | flagFinalized
)

const (
	// maxJobID is the longest job id (it must fit the uint8 length).
	maxJobID = 64
	// maxString bounds addresses, host names and reasons.
	maxString = 1024
	// MaxAllgather is the largest total size, in bytes, of the blobs of
	// one Allgather (the sum over all PEs). memberlist refuses stream
	// messages above 20 MiB; this leaves room for framing and encryption.
	MaxAllgather = 16 << 20
	// maxRanks bounds the size of a job.
	maxRanks = 1 << 20
	// maxEvents bounds the events of one agent report.
	maxEvents = 1 << 12
)

// entry is a PE's contribution to an allgather: its blob, and the node
// (shared-memory domain) of its agent.
type entry struct {
	rank, node int
	blob       []byte
}

// agentEntry is an agent of the directory.
type agentEntry struct {
	id, node   int
	addr, host string
}

// event is one event of an agent report.
type event struct {
	kind      eventKind
	rank      int
	code      int
	flags     uint8
	other     int
	host, how string
	why       string
}

// message is a decoded bootstrap message. Which fields are meaningful
// depends on kind; the others are zero.
type message struct {
	kind  msgKind
	jobID string
	rank  int // sender
	seq   uint64

	flags   uint8   // gather, result, up, down
	payload []byte  // gather
	size    uint64  // result
	count   int     // up: PEs gathered
	entries []entry // up, down (not barriers)
	addr    string  // directory, agent report
	agents  []agentEntry
	events  []event

	failRank int    // failure, lost
	host     string // failure, global exit
	reason   string // failure, abort, terminate, lost
	ranks    []int  // stall report: the PEs to ask
	code     int    // global exit
}

// errMalformed is wrapped by every decoding error.
var errMalformed = fmt.Errorf("bootstrap: malformed message: %w", ucs.ErrInvalidParam)

func malformed(what string) error {
	return fmt.Errorf("%w: %s", errMalformed, what)
}

// appendMessage appends the encoding of m to b. It does not validate m
// beyond what the encoding needs; callers build valid messages.
func appendMessage(b []byte, m *message) []byte {
	b = append(b, wireVersion, byte(m.kind), byte(len(m.jobID)))
	b = append(b, m.jobID...)
	b = appendI32(b, m.rank)
	b = binary.BigEndian.AppendUint64(b, m.seq)
	switch m.kind {
	case kindGather:
		b = append(b, m.flags)
		b = binary.BigEndian.AppendUint32(b, uint32(len(m.payload)))
		b = append(b, m.payload...)
	case kindResult:
		b = append(b, m.flags)
		b = binary.BigEndian.AppendUint64(b, m.size)
	case kindGlobalExit:
		b = appendI32(b, m.code)
		b = appendString16(b, m.host)
	case kindLost:
		b = appendI32(b, m.failRank)
		b = appendString16(b, m.reason)
	case kindFailure:
		b = appendI32(b, m.failRank)
		b = appendString16(b, m.host)
		b = appendString16(b, m.reason)
	case kindDirectory:
		b = appendString16(b, m.addr)
		b = binary.BigEndian.AppendUint32(b, uint32(len(m.agents)))
		for _, a := range m.agents {
			b = binary.BigEndian.AppendUint32(b, uint32(a.id))
			b = binary.BigEndian.AppendUint32(b, uint32(a.node))
			b = appendString16(b, a.addr)
			b = appendString16(b, a.host)
		}
	case kindUp:
		b = append(b, m.flags)
		b = binary.BigEndian.AppendUint32(b, uint32(m.count))
		if m.flags&flagBarrier == 0 {
			b = appendEntries(b, m.entries)
		}
	case kindDown:
		b = append(b, m.flags)
		if m.flags&flagBarrier == 0 {
			b = appendEntries(b, m.entries)
		}
	case kindAbort, kindTerminate:
		b = appendString16(b, m.reason)
	case kindStallReport:
		b = binary.BigEndian.AppendUint32(b, uint32(len(m.ranks)))
		for _, r := range m.ranks {
			b = binary.BigEndian.AppendUint32(b, uint32(int32(r)))
		}
	case kindAgentReport:
		b = appendString16(b, m.addr)
		b = binary.BigEndian.AppendUint16(b, uint16(len(m.events)))
		for _, e := range m.events {
			b = append(b, byte(e.kind))
			b = appendI32(b, e.rank)
			b = appendI32(b, e.code)
			b = append(b, e.flags)
			b = appendI32(b, e.other)
			b = appendString16(b, e.host)
			b = appendString16(b, e.how)
			b = appendString16(b, e.why)
		}
	}
	return b
}

func appendI32(b []byte, v int) []byte { return binary.BigEndian.AppendUint32(b, uint32(int32(v))) }

func appendString16(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

func appendEntries(b []byte, es []entry) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(es)))
	for _, e := range es {
		b = appendI32(b, e.rank)
		b = binary.BigEndian.AppendUint32(b, uint32(e.node))
		b = binary.BigEndian.AppendUint32(b, uint32(len(e.blob)))
		b = append(b, e.blob...)
	}
	return b
}

// decoder reads a message, remembering the first error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = malformed(what)
	}
	d.b = nil
}

func (d *decoder) bytes(n int, what string) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b) {
		d.fail("truncated " + what)
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) u8(what string) uint8 {
	if v := d.bytes(1, what); v != nil {
		return v[0]
	}
	return 0
}

func (d *decoder) u16(what string) uint16 {
	if v := d.bytes(2, what); v != nil {
		return binary.BigEndian.Uint16(v)
	}
	return 0
}

func (d *decoder) u32(what string) uint32 {
	if v := d.bytes(4, what); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (d *decoder) u64(what string) uint64 {
	if v := d.bytes(8, what); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func (d *decoder) i32(what string) int { return int(int32(d.u32(what))) }

// rank reads a rank: -1 (the seed, or none) or one in [0, maxRanks).
func (d *decoder) rank(what string) int {
	r := d.i32(what)
	if d.err == nil && (r < -1 || r >= maxRanks) {
		d.fail(what + " out of range")
	}
	return r
}

// index reads a non-negative number below maxRanks (an agent id, a node).
func (d *decoder) index(what string) int {
	v := d.u32(what)
	if d.err == nil && v >= maxRanks {
		d.fail(what + " out of range")
	}
	return int(v)
}

func (d *decoder) string16(what string) string {
	n := int(d.u16(what + " length"))
	if d.err == nil && n > maxString {
		d.fail(what + " too long")
		return ""
	}
	return string(d.bytes(n, what))
}

func (d *decoder) blob(what string) []byte {
	n := d.u32(what + " length")
	if d.err == nil && n > MaxAllgather {
		d.fail(what + " too large")
		return nil
	}
	return d.bytes(int(n), what)
}

// count reads a count of items that take at least minSize bytes each, and
// at most limit of them.
func (d *decoder) count(what string, minSize, limit int) int {
	n := d.u32(what)
	if d.err == nil && (n > uint32(limit) || int(n) > len(d.b)/minSize) {
		d.fail(what + " too large")
	}
	return int(n)
}

func (d *decoder) entries() []entry {
	n := d.count("entry count", 12, maxRanks)
	if d.err != nil {
		return nil
	}
	es := make([]entry, n)
	total := 0
	for i := range es {
		es[i].rank = d.rank("entry rank")
		if d.err == nil && es[i].rank < 0 {
			d.fail("entry rank out of range")
		}
		es[i].node = d.index("entry node")
		es[i].blob = d.blob("entry")
		total += len(es[i].blob)
		if d.err == nil && total > MaxAllgather {
			d.fail("entries too large")
		}
		if d.err != nil {
			return nil
		}
	}
	return es
}

// decodeMessage decodes b. Byte slices in the result (payload, entries)
// alias b. Any malformed input gives an error wrapping ucs.ErrInvalidParam;
// decodeMessage never panics.
func decodeMessage(b []byte) (*message, error) {
	d := &decoder{b: b}
	if v := d.u8("version"); d.err == nil && v != wireVersion {
		return nil, malformed("unknown version " + strconv.Itoa(int(v)))
	}
	m := &message{kind: msgKind(d.u8("kind"))}
	jobLen := int(d.u8("job id length"))
	if d.err == nil && jobLen > maxJobID {
		d.fail("job id too long")
	}
	m.jobID = string(d.bytes(jobLen, "job id"))
	m.rank = d.rank("rank")
	m.seq = d.u64("sequence")
	if d.err != nil {
		return nil, d.err
	}
	switch m.kind {
	case kindHello, kindWelcome, kindFinalize, kindFinalizeAck, kindPing, kindPong,
		kindGlobalExitAck, kindLostAck, kindAgentAck:
	case kindGather:
		m.flags = d.u8("flags")
		m.payload = d.blob("payload")
	case kindResult:
		m.flags = d.u8("flags")
		m.size = d.u64("size")
		if d.err == nil && m.size > 2*MaxAllgather {
			d.fail("table too large")
		}
	case kindGlobalExit:
		m.code = d.i32("code")
		m.host = d.string16("host")
	case kindLost:
		m.failRank = d.rank("lost rank")
		m.reason = d.string16("reason")
	case kindFailure:
		m.failRank = d.rank("failed rank")
		m.host = d.string16("host")
		m.reason = d.string16("reason")
	case kindDirectory:
		m.addr = d.string16("address")
		n := d.count("agent count", 12, maxRanks)
		if d.err == nil {
			m.agents = make([]agentEntry, n)
		}
		for i := range m.agents {
			a := &m.agents[i]
			a.id = d.index("agent id")
			a.node = d.index("agent node")
			a.addr = d.string16("agent address")
			a.host = d.string16("agent host")
			if d.err != nil {
				break
			}
		}
	case kindUp:
		m.flags = d.u8("flags")
		m.count = d.index("count")
		if m.flags&flagBarrier == 0 {
			m.entries = d.entries()
		}
	case kindDown:
		m.flags = d.u8("flags")
		if m.flags&flagBarrier == 0 {
			m.entries = d.entries()
		}
	case kindAbort, kindTerminate:
		m.reason = d.string16("reason")
	case kindStallReport:
		n := d.count("rank count", 4, maxRanks)
		if d.err == nil {
			m.ranks = make([]int, n)
		}
		for i := range m.ranks {
			m.ranks[i] = d.rank("rank to ask")
		}
	case kindAgentReport:
		m.addr = d.string16("address")
		n := int(d.u16("event count"))
		if d.err == nil && (n > maxEvents || n > len(d.b)/20) {
			d.fail("event count too large")
		}
		if d.err == nil {
			m.events = make([]event, n)
		}
		for i := range m.events {
			e := &m.events[i]
			e.kind = eventKind(d.u8("event kind"))
			if d.err == nil && (e.kind < 1 || e.kind > evLast) {
				d.fail("unknown event kind")
			}
			e.rank = d.rank("event rank")
			e.code = d.i32("event code")
			e.flags = d.u8("event flags")
			if d.err == nil && e.flags&^exitFlags != 0 {
				d.fail("unknown event flags")
			}
			e.other = d.rank("event peer")
			e.host = d.string16("event host")
			e.how = d.string16("event how")
			e.why = d.string16("event why")
			if d.err != nil {
				break
			}
		}
	default:
		return nil, malformed("unknown kind " + m.kind.String())
	}
	if d.err == nil && m.flags&^flagBarrier != 0 {
		d.fail("unknown flags")
	}
	if d.err != nil {
		return nil, d.err
	}
	if len(d.b) != 0 {
		return nil, malformed(strconv.Itoa(len(d.b)) + " trailing bytes")
	}
	return m, nil
}

// parseNodeAddr parses the host:port of a memberlist node. The host must be
// an IP address literal.
func parseNodeAddr(s string) (net.IP, uint16, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return nil, 0, malformed("address: " + err.Error())
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return nil, 0, malformed("address: host " + strconv.Quote(host) + " is not an IP address")
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return nil, 0, malformed("address: bad port " + strconv.Quote(port))
	}
	return ip, uint16(p), nil
}
