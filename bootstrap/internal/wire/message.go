package wire

import (
	"encoding/binary"
	"fmt"
	"net"
	"strconv"

	"github.com/goshmem/goshmem/internal/version"
	"github.com/goshmem/goshmem/ucs"
)

// Bootstrap messages travel between the seed and the agents as memberlist
// user messages over its reliable, encrypted stream transport, and between
// an agent and its PEs as frames on their local channel (see frame.go).
// Every message has the same header:
//
//	version  uint8  (Version)
//	kind     uint8  (Kind)
//	jobLen   uint8, job id (jobLen bytes)
//	rank     int32  sender: a PE's rank, an agent's id, -1 for the seed
//	                and for an agent talking to its PEs
//	seq      uint64 collective or report sequence number (0 where unused)
//
// followed by a body that depends on the kind (all integers big endian;
// strings are a uint16 length and the bytes):
//
//	Between an agent and its PEs:
//	KindHello (PE → agent, first frame): build string (the goshmem the
//	    sender was built from, Build)
//	KindWelcome (agent → PE, the answer): build string
//	KindGather (PE → agent): flags uint8 (FlagBarrier), payLen uint32, payload
//	KindResult (agent → PE; the table's memory file travels with the frame,
//	    except for a barrier): flags uint8, size uint64 (of the file)
//	KindFinalize, KindFinalizeAck, KindPing, KindPong: nothing
//	KindGlobalExit (PE → agent): code int32, host string
//	KindLost (PE → agent): rank int32 (the PE it lost), reason string
//	KindGlobalExitAck, KindLostAck (agent → PE): nothing
//	KindFailure (seed → agent, agent → PE): rank int32 (the PE that failed,
//	    -1 for the seed), host string, cause (see below)
//
//	Between agents (the tree of the collectives) and with the seed:
//	KindDirectory (seed → agent 0, agent → child): addr string (the
//	    sender's node: the receiver's parent; empty from the seed), count
//	    uint32, then count times: id uint32, node uint32, addr string, host
//	    string (the agents of the receiver's subtree, itself first)
//	KindUp (agent → parent): flags uint8, count uint32 (PEs gathered in the
//	    subtree), then unless FlagBarrier the entries (see below)
//	KindDown (agent → child): flags uint8, then unless FlagBarrier the
//	    entries of every PE
//	KindAbort (agent → child, agent → PE): reason string
//	KindAgentReport (agent → seed; seq numbers the agent's reports from 1):
//	    addr string (the agent's node), count uint16, then count events:
//	    kind uint8 (EvJoined, EvExit, EvLost, EvGlobalExit, EvAbandoned), rank int32 (the
//	    PE), code int32, flags uint8 (EvExit: FlagEndedByAgent, FlagJoined,
//	    FlagFinalized), other int32 (EvLost: the PE it lost), host string,
//	    cause (EvExit: how the PE ended; EvAbandoned: EndAbandoned; kind
//	    EndNone for the others), why string (EvExit: why the agent ended the PE; EvLost:
//	    how the PE lost the other)
//	KindAgentAck (seed → agent; seq is that of the report): nothing
//	KindTerminate (seed → agent): reason string
//	KindStallReport (seed → agent; have PEs report where they wait):
//	    count uint32, then count times: rank int32 (a PE to ask)
//	KindLeft (seed → agent; the first PE that left after it finalized):
//	    rank int32, host string
//
// Entries: count uint32, then count times: rank int32, node uint32, len
// uint32, blob.
//
// Cause (an EndCause): kind uint8 (EndKind), status int32, signal uint8,
// for int64 and limit int64 (nanoseconds), detail string.
//
// The encoding is canonical: a message that decodes re-encodes to the same
// bytes, and trailing bytes are an error.
//
// A PE and its agent (goshmem-run) are two programs, which may be built
// from different goshmem versions. From version 4 on, two things never
// change, so that each side can read the other's first frame whatever
// else changed, and both can say which versions met: the header's layout
// above, and the bodies of KindHello (1) and KindWelcome (2). A message of
// another version decodes as a *VersionError. (The header of versions 3
// and earlier is the same, and their hello and welcome have no body.)

// Version 5 made how a PE ended a typed cause (EndCause) in agent reports
// and failure notices, where it was a sentence;
// version 4 made the hello and the welcome say which goshmem sent them;
// version 3 made the agents the only members of the job (PEs talk to their
// agent, agents gather in a tree).
const Version = 5

// A binary speaks version speaks, and says it was built from goshmem
// build: Version and this binary's goshmem, unless the binary was built
// with -ldflags "-X github.com/goshmem/goshmem/bootstrap/internal/wire.otherVersion=N
// -X github.com/goshmem/goshmem/bootstrap/internal/wire.otherBuild=B":
// the tests of the version handshake build a goshmem-run of another
// version so.
var (
	otherVersion, otherBuild string
	speaks                   = uint8(Version)
	build                    = version.Build()
)

func init() {
	if otherVersion != "" {
		v, err := strconv.ParseUint(otherVersion, 10, 8)
		if err != nil {
			panic("bootstrap: wire.otherVersion " + strconv.Quote(otherVersion) + " is no version number")
		}
		speaks = uint8(v)
	}
	if otherBuild != "" {
		build = otherBuild
	}
}

// Speaks returns the version of the messages this binary writes and reads
// (Version), and the goshmem it was built from, as its hello or welcome
// says it.
func Speaks() (int, string) { return int(speaks), build }

// VersionError is the error of a message of another version than this
// binary's: the other side was built from another goshmem. It wraps the
// malformed-message error (and ucs.ErrInvalidParam).
type VersionError struct {
	// Version is the message's; Build the goshmem the other side was
	// built from, when its message said (a hello or a welcome of version
	// 4 or later), or "".
	Version int
	Build   string
}

// Error says both sides' versions.
func (e *VersionError) Error() string {
	return fmt.Sprintf("bootstrap: a message of version %d (%s), where this side speaks version %d (goshmem %s)",
		e.Version, e.Other(), speaks, build)
}

// Other names the other side's goshmem: "goshmem v0.3.0", or what its
// version says of it when its message did not.
func (e *VersionError) Other() string {
	switch {
	case e.Build != "":
		return "goshmem " + e.Build
	case e.Version < 4:
		return "a goshmem from before version 4 of the bootstrap messages"
	}
	return "a goshmem that did not say which"
}

// Unwrap returns the malformed-message error.
func (e *VersionError) Unwrap() error { return errMalformed }

// Advice names, for the user, the versions of a PE's program and of
// goshmem-run, built from different goshmems, and says what to do about
// it. byPE says which side got the message of the other version: the PE
// (e is then goshmem-run's version) or the agent (the program's).
func (e *VersionError) Advice(byPE bool) string {
	mine, theirs := fmt.Sprintf("%d (goshmem %s)", speaks, build), fmt.Sprintf("%d (%s)", e.Version, e.Other())
	prog, run := mine, theirs
	if !byPE {
		prog, run = theirs, mine
	}
	return "the program speaks version " + prog + " of the bootstrap's messages, goshmem-run version " + run + ": " + AdviceRebuild
}

// AdviceRebuild says what to do when a PE's program and goshmem-run were
// built from different goshmems.
const AdviceRebuild = "rebuild the program with goshmem-run's goshmem, or install the goshmem-run of the program's goshmem (go install " +
	version.ModulePath + "/launcher/cmd/goshmem-run@VERSION, with the VERSION of goshmem in the program's go.mod)"

// Kind is the kind of a message.
type Kind uint8

// The kinds of message (see the layout above).
const (
	KindHello Kind = 1 + iota
	KindWelcome
	KindGather
	KindResult
	KindFinalize
	KindFinalizeAck
	KindPing
	KindPong
	KindGlobalExit
	KindGlobalExitAck
	KindLost
	KindLostAck
	KindFailure
	KindDirectory
	KindUp
	KindDown
	KindAbort
	KindAgentReport
	KindAgentAck
	KindTerminate
	KindStallReport
	KindLeft
	kindLast = KindLeft
)

var kindNames = [...]string{
	KindHello: "hello", KindWelcome: "welcome", KindGather: "gather", KindResult: "result",
	KindFinalize: "finalize", KindFinalizeAck: "finalize-ack", KindPing: "ping", KindPong: "pong",
	KindGlobalExit: "global-exit", KindGlobalExitAck: "global-exit-ack", KindLost: "lost", KindLostAck: "lost-ack",
	KindFailure: "failure", KindDirectory: "directory", KindUp: "up", KindDown: "down", KindAbort: "abort",
	KindAgentReport: "agent-report", KindAgentAck: "agent-ack", KindTerminate: "terminate", KindStallReport: "stall-report", KindLeft: "left",
}

// String returns the name of k ("hello", "gather", ...).
func (k Kind) String() string {
	if k >= 1 && k <= kindLast {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// FlagBarrier, in a gather, a result, an up or a down message, says that
// the collective is a barrier: it gathers no blobs.
const FlagBarrier = 1

// EventKind is the kind of an event of an agent report.
type EventKind uint8

const (
	// EvJoined: the PE rank connected to its agent (the first PE of the
	// agent that did; the others say so when they end).
	EvJoined EventKind = 1 + iota
	// EvExit: the PE rank ended; how says how, code is the exit code that
	// stands for it, flags say what the agent knew of it.
	EvExit
	// EvLost: the PE rank is about to end because it lost the PE other.
	EvLost
	// EvGlobalExit: the PE rank asked to end the job with status code.
	EvGlobalExit
	// EvAbandoned: the PE rank finalized and left (the seed said so,
	// KindLeft) while a collective that needs it is pending on the
	// reporting agent: the job cannot go on. End (EndAbandoned) names the
	// PEs that wait.
	EvAbandoned
	evLast = EvAbandoned
)

// Flags of an EvExit event.
const (
	// FlagEndedByAgent: the agent had told the PE to end (SIGTERM, then
	// SIGKILL) while it still ran: its end is a consequence (of the job
	// being ended, or of what why says), not a failure of its own.
	FlagEndedByAgent = 1 << iota
	// FlagJoined: the PE had connected to its agent (it called Join).
	FlagJoined
	// FlagFinalized: the PE had finalized and not gathered since.
	FlagFinalized
	exitFlags = FlagEndedByAgent | FlagJoined | FlagFinalized
)

const (
	// MaxJobID is the longest job id (it must fit the uint8 length).
	MaxJobID = 64
	// MaxString bounds addresses, host names and reasons.
	MaxString = 1024
	// MaxAllgather is the largest total size, in bytes, of the blobs of
	// one Allgather (the sum over all PEs). memberlist refuses stream
	// messages above 20 MiB; this leaves room for framing and encryption.
	MaxAllgather = 16 << 20
	// MaxRanks bounds the size of a job.
	MaxRanks = 1 << 20
	// MaxEvents bounds the events of one agent report.
	MaxEvents = 1 << 12
)

// Entry is a PE's contribution to an allgather: its blob, and the node
// (shared-memory domain) of its agent.
type Entry struct {
	Rank, Node int
	Blob       []byte
}

// AgentEntry is an agent of the directory.
type AgentEntry struct {
	ID, Node   int
	Addr, Host string
}

// Event is one event of an agent report.
type Event struct {
	Kind  EventKind
	Rank  int
	Code  int
	Flags uint8
	Other int
	Host  string
	End   EndCause
	Why   string
}

// Message is a decoded bootstrap message. Which fields are meaningful
// depends on kind; the others are zero.
type Message struct {
	Kind  Kind
	JobID string
	Rank  int // sender
	Seq   uint64

	Flags   uint8   // gather, result, up, down
	Payload []byte  // gather
	Size    uint64  // result
	Count   int     // up: PEs gathered
	Entries []Entry // up, down (not barriers)
	Addr    string  // directory, agent report
	Agents  []AgentEntry
	Events  []Event

	FailRank int      // failure, lost, left
	Host     string   // failure, global exit, left
	Cause    EndCause // failure
	Reason   string   // abort, terminate, lost
	Ranks    []int    // stall report: the PEs to ask
	Code     int      // global exit
	Build    string   // hello, welcome: the sender's goshmem (Build)
}

// errMalformed is wrapped by every decoding error.
var errMalformed = fmt.Errorf("bootstrap: malformed message: %w", ucs.ErrInvalidParam)

func malformed(what string) error {
	return fmt.Errorf("%w: %s", errMalformed, what)
}

// AppendMessage appends the encoding of m to b. It does not validate m
// beyond what the encoding needs; callers build valid messages.
func AppendMessage(b []byte, m *Message) []byte {
	b = append(b, speaks, byte(m.Kind), byte(len(m.JobID)))
	b = append(b, m.JobID...)
	b = appendI32(b, m.Rank)
	b = binary.BigEndian.AppendUint64(b, m.Seq)
	switch m.Kind {
	case KindHello, KindWelcome:
		b = appendString16(b, m.Build)
	case KindGather:
		b = append(b, m.Flags)
		b = binary.BigEndian.AppendUint32(b, uint32(len(m.Payload)))
		b = append(b, m.Payload...)
	case KindResult:
		b = append(b, m.Flags)
		b = binary.BigEndian.AppendUint64(b, m.Size)
	case KindGlobalExit:
		b = appendI32(b, m.Code)
		b = appendString16(b, m.Host)
	case KindLost:
		b = appendI32(b, m.FailRank)
		b = appendString16(b, m.Reason)
	case KindFailure:
		b = appendI32(b, m.FailRank)
		b = appendString16(b, m.Host)
		b = appendCause(b, m.Cause)
	case KindLeft:
		b = appendI32(b, m.FailRank)
		b = appendString16(b, m.Host)
	case KindDirectory:
		b = appendString16(b, m.Addr)
		b = binary.BigEndian.AppendUint32(b, uint32(len(m.Agents)))
		for _, a := range m.Agents {
			b = binary.BigEndian.AppendUint32(b, uint32(a.ID))
			b = binary.BigEndian.AppendUint32(b, uint32(a.Node))
			b = appendString16(b, a.Addr)
			b = appendString16(b, a.Host)
		}
	case KindUp:
		b = append(b, m.Flags)
		b = binary.BigEndian.AppendUint32(b, uint32(m.Count))
		if m.Flags&FlagBarrier == 0 {
			b = appendEntries(b, m.Entries)
		}
	case KindDown:
		b = append(b, m.Flags)
		if m.Flags&FlagBarrier == 0 {
			b = appendEntries(b, m.Entries)
		}
	case KindAbort, KindTerminate:
		b = appendString16(b, m.Reason)
	case KindStallReport:
		b = binary.BigEndian.AppendUint32(b, uint32(len(m.Ranks)))
		for _, r := range m.Ranks {
			b = binary.BigEndian.AppendUint32(b, uint32(int32(r)))
		}
	case KindAgentReport:
		b = appendString16(b, m.Addr)
		b = binary.BigEndian.AppendUint16(b, uint16(len(m.Events)))
		for _, e := range m.Events {
			b = append(b, byte(e.Kind))
			b = appendI32(b, e.Rank)
			b = appendI32(b, e.Code)
			b = append(b, e.Flags)
			b = appendI32(b, e.Other)
			b = appendString16(b, e.Host)
			b = appendCause(b, e.End)
			b = appendString16(b, e.Why)
		}
	}
	return b
}

func appendI32(b []byte, v int) []byte { return binary.BigEndian.AppendUint32(b, uint32(int32(v))) }

func appendString16(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

func appendEntries(b []byte, es []Entry) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(es)))
	for _, e := range es {
		b = appendI32(b, e.Rank)
		b = binary.BigEndian.AppendUint32(b, uint32(e.Node))
		b = binary.BigEndian.AppendUint32(b, uint32(len(e.Blob)))
		b = append(b, e.Blob...)
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

// rank reads a rank: -1 (the seed, or none) or one in [0, MaxRanks).
func (d *decoder) rank(what string) int {
	r := d.i32(what)
	if d.err == nil && (r < -1 || r >= MaxRanks) {
		d.fail(what + " out of range")
	}
	return r
}

// index reads a non-negative number below MaxRanks (an agent id, a node).
func (d *decoder) index(what string) int {
	v := d.u32(what)
	if d.err == nil && v >= MaxRanks {
		d.fail(what + " out of range")
	}
	return int(v)
}

func (d *decoder) string16(what string) string {
	n := int(d.u16(what + " length"))
	if d.err == nil && n > MaxString {
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

func (d *decoder) entries() []Entry {
	n := d.count("entry count", 12, MaxRanks)
	if d.err != nil {
		return nil
	}
	es := make([]Entry, n)
	total := 0
	for i := range es {
		es[i].Rank = d.rank("entry rank")
		if d.err == nil && es[i].Rank < 0 {
			d.fail("entry rank out of range")
		}
		es[i].Node = d.index("entry node")
		es[i].Blob = d.blob("entry")
		total += len(es[i].Blob)
		if d.err == nil && total > MaxAllgather {
			d.fail("entries too large")
		}
		if d.err != nil {
			return nil
		}
	}
	return es
}

// eventMinSize is the size of an event with empty strings.
const eventMinSize = 1 + 4 + 4 + 1 + 4 + 2 + causeMinSize + 2

// DecodeMessage decodes b. Byte slices in the result (payload, entries)
// alias b. Any malformed input gives an error wrapping ucs.ErrInvalidParam;
// DecodeMessage never panics.
func DecodeMessage(b []byte) (*Message, error) {
	d := &decoder{b: b}
	v := d.u8("version")
	if d.err == nil && v != speaks {
		return nil, otherVersionError(v, d)
	}
	m := d.header()
	if d.err != nil {
		return nil, d.err
	}
	switch m.Kind {
	case KindHello, KindWelcome:
		m.Build = d.string16("build")
	case KindFinalize, KindFinalizeAck, KindPing, KindPong,
		KindGlobalExitAck, KindLostAck, KindAgentAck:
	case KindGather:
		m.Flags = d.u8("flags")
		m.Payload = d.blob("payload")
	case KindResult:
		m.Flags = d.u8("flags")
		m.Size = d.u64("size")
		if d.err == nil && m.Size > 2*MaxAllgather {
			d.fail("table too large")
		}
	case KindGlobalExit:
		m.Code = d.i32("code")
		m.Host = d.string16("host")
	case KindLost:
		m.FailRank = d.rank("lost rank")
		m.Reason = d.string16("reason")
	case KindFailure:
		m.FailRank = d.rank("failed rank")
		m.Host = d.string16("host")
		m.Cause = d.cause("cause")
	case KindLeft:
		m.FailRank = d.rank("left rank")
		m.Host = d.string16("host")
		if d.err == nil && m.FailRank < 0 {
			d.fail("left rank out of range")
		}
	case KindDirectory:
		m.Addr = d.string16("address")
		n := d.count("agent count", 12, MaxRanks)
		if d.err == nil {
			m.Agents = make([]AgentEntry, n)
		}
		for i := range m.Agents {
			a := &m.Agents[i]
			a.ID = d.index("agent id")
			a.Node = d.index("agent node")
			a.Addr = d.string16("agent address")
			a.Host = d.string16("agent host")
			if d.err != nil {
				break
			}
		}
	case KindUp:
		m.Flags = d.u8("flags")
		m.Count = d.index("count")
		if m.Flags&FlagBarrier == 0 {
			m.Entries = d.entries()
		}
	case KindDown:
		m.Flags = d.u8("flags")
		if m.Flags&FlagBarrier == 0 {
			m.Entries = d.entries()
		}
	case KindAbort, KindTerminate:
		m.Reason = d.string16("reason")
	case KindStallReport:
		n := d.count("rank count", 4, MaxRanks)
		if d.err == nil {
			m.Ranks = make([]int, n)
		}
		for i := range m.Ranks {
			m.Ranks[i] = d.rank("rank to ask")
		}
	case KindAgentReport:
		m.Addr = d.string16("address")
		n := int(d.u16("event count"))
		if d.err == nil && (n > MaxEvents || n > len(d.b)/eventMinSize) {
			d.fail("event count too large")
		}
		if d.err == nil {
			m.Events = make([]Event, n)
		}
		for i := range m.Events {
			e := &m.Events[i]
			e.Kind = EventKind(d.u8("event kind"))
			if d.err == nil && (e.Kind < 1 || e.Kind > evLast) {
				d.fail("unknown event kind")
			}
			e.Rank = d.rank("event rank")
			e.Code = d.i32("event code")
			e.Flags = d.u8("event flags")
			if d.err == nil && e.Flags&^exitFlags != 0 {
				d.fail("unknown event flags")
			}
			e.Other = d.rank("event peer")
			e.Host = d.string16("event host")
			e.End = d.cause("event cause")
			e.Why = d.string16("event why")
			if d.err != nil {
				break
			}
		}
	default:
		return nil, malformed("unknown kind " + m.Kind.String())
	}
	if d.err == nil && m.Flags&^FlagBarrier != 0 {
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

// header reads the header after the version (the layout every version
// keeps).
func (d *decoder) header() *Message {
	m := &Message{Kind: Kind(d.u8("kind"))}
	jobLen := int(d.u8("job id length"))
	if d.err == nil && jobLen > MaxJobID {
		d.fail("job id too long")
	}
	m.JobID = string(d.bytes(jobLen, "job id"))
	m.Rank = d.rank("rank")
	m.Seq = d.u64("sequence")
	return m
}

// otherVersionError is the error of a message of version v, which d reads
// after its version: what every version keeps, the header and the body of
// a hello or a welcome, says which goshmem sent it (when it is of version
// 4 or later).
func otherVersionError(v uint8, d *decoder) *VersionError {
	e := &VersionError{Version: int(v)}
	m := d.header()
	if d.err == nil && (m.Kind == KindHello || m.Kind == KindWelcome) && len(d.b) >= 2 {
		if s := d.string16("build"); d.err == nil {
			e.Build = s
		}
	}
	return e
}

// ParseNodeAddr parses the host:port of a memberlist node. The host must be
// an IP address literal.
func ParseNodeAddr(s string) (net.IP, uint16, error) {
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
