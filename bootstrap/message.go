package bootstrap

import (
	"encoding/binary"
	"fmt"
	"net"
	"strconv"

	"github.com/goshmem/goshmem/ucs"
)

// Bootstrap messages travel as memberlist user messages over its reliable,
// encrypted stream transport. Every message has the same header:
//
//	version  uint8  (wireVersion)
//	kind     uint8  (msgKind)
//	jobLen   uint8, job id (jobLen bytes)
//	rank     int32  sender's rank (-1 for the seed)
//	seq      uint64 collective sequence number (0 where unused)
//
// followed by a body that depends on the kind (all integers big endian):
//
//	kindGather, kindFinalize (PE → seed):
//	    addrLen uint16, addr (host:port of the PE's memberlist node)
//	    payLen  uint32, payload
//	kindTable (seed → PE):
//	    count uint32, then count times: len uint32, blob
//	kindFinalizeAck (seed → PE): nothing
//	kindFailure (seed → PE):
//	    rank int32 (the failed PE, -1 for the seed),
//	    hostLen uint16, host, reasonLen uint16, reason
//	kindAbort (seed → PE): reasonLen uint16, reason
//	kindGlobalExit (PE → seed):
//	    addrLen uint16, addr (host:port of the PE's memberlist node),
//	    code int32 (the exit status for the whole job),
//	    hostLen uint16, host (the name of the PE's host)
//	kindGlobalExitAck (seed → PE): nothing
//	kindAgentReport (agent → seed; the header's rank is the agent id, seq
//	numbers the agent's reports from 1):
//	    addrLen uint16, addr (host:port of the agent's memberlist node),
//	    rank int32 (the PE that ended), code int32 (the exit code that
//	    stands for how it ended), hostLen uint16, host, howLen uint16, how,
//	    flags uint8 (flagEndedByAgent: the agent had told the PE to end),
//	    whyLen uint16, why (why the agent ended it; empty without the flag)
//	kindAgentAck (seed → agent; seq is that of the report): nothing
//	kindTerminate (seed → agent): reasonLen uint16, reason
//	kindLost (PE → seed; the PE is about to end because it lost a peer):
//	    addrLen uint16, addr (host:port of the PE's memberlist node),
//	    rank int32 (the PE it lost), reasonLen uint16, reason
//	kindLostAck (seed → PE): nothing
//	kindStallReport (seed → agent; have PEs report where they wait):
//	    count uint32, then count times: rank int32 (a PE to ask)
//
// The encoding is canonical: a message that decodes re-encodes to the same
// bytes, and trailing bytes are an error.

// wireVersion 2 added the host of a global exit, the agent's flags and
// reason in its reports, and kindLost.
const wireVersion = 2

type msgKind uint8

const (
	kindGather msgKind = 1 + iota
	kindTable
	kindFinalize
	kindFinalizeAck
	kindFailure
	kindAbort
	kindGlobalExit
	kindGlobalExitAck
	kindAgentReport
	kindAgentAck
	kindTerminate
	kindLost
	kindLostAck
	kindStallReport
)

// flagEndedByAgent, in an agent report, says that the agent had told the PE
// to end (SIGTERM, then SIGKILL) while it still ran: its end is a
// consequence of the job being ended, not a failure of its own.
const flagEndedByAgent = 1

func (k msgKind) String() string {
	switch k {
	case kindGather:
		return "gather"
	case kindTable:
		return "table"
	case kindFinalize:
		return "finalize"
	case kindFinalizeAck:
		return "finalize-ack"
	case kindFailure:
		return "failure"
	case kindAbort:
		return "abort"
	case kindGlobalExit:
		return "global-exit"
	case kindGlobalExitAck:
		return "global-exit-ack"
	case kindAgentReport:
		return "agent-report"
	case kindAgentAck:
		return "agent-ack"
	case kindTerminate:
		return "terminate"
	case kindLost:
		return "lost"
	case kindLostAck:
		return "lost-ack"
	case kindStallReport:
		return "stall-report"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

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
)

// message is a decoded bootstrap message. Which fields are meaningful
// depends on kind; the others are zero.
type message struct {
	kind  msgKind
	jobID string
	rank  int // sender
	seq   uint64

	addr    string // gather, finalize
	payload []byte // gather, finalize

	table [][]byte // table

	failRank int    // failure, lost; agent report: the PE that ended
	host     string // failure, agent report, global exit
	reason   string // failure, abort, terminate, lost; agent report: how the PE ended
	code     int    // global exit, agent report
	flags    uint8  // agent report
	why      string // agent report: why the agent ended the PE
	ranks    []int  // stall report: the PEs to ask
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
	b = binary.BigEndian.AppendUint32(b, uint32(int32(m.rank)))
	b = binary.BigEndian.AppendUint64(b, m.seq)
	switch m.kind {
	case kindGather, kindFinalize:
		b = appendString16(b, m.addr)
		b = binary.BigEndian.AppendUint32(b, uint32(len(m.payload)))
		b = append(b, m.payload...)
	case kindTable:
		b = binary.BigEndian.AppendUint32(b, uint32(len(m.table)))
		for _, blob := range m.table {
			b = binary.BigEndian.AppendUint32(b, uint32(len(blob)))
			b = append(b, blob...)
		}
	case kindFailure:
		b = binary.BigEndian.AppendUint32(b, uint32(int32(m.failRank)))
		b = appendString16(b, m.host)
		b = appendString16(b, m.reason)
	case kindAbort, kindTerminate:
		b = appendString16(b, m.reason)
	case kindGlobalExit:
		b = appendString16(b, m.addr)
		b = binary.BigEndian.AppendUint32(b, uint32(int32(m.code)))
		b = appendString16(b, m.host)
	case kindAgentReport:
		b = appendString16(b, m.addr)
		b = binary.BigEndian.AppendUint32(b, uint32(int32(m.failRank)))
		b = binary.BigEndian.AppendUint32(b, uint32(int32(m.code)))
		b = appendString16(b, m.host)
		b = appendString16(b, m.reason)
		b = append(b, m.flags)
		b = appendString16(b, m.why)
	case kindLost:
		b = appendString16(b, m.addr)
		b = binary.BigEndian.AppendUint32(b, uint32(int32(m.failRank)))
		b = appendString16(b, m.reason)
	case kindStallReport:
		b = binary.BigEndian.AppendUint32(b, uint32(len(m.ranks)))
		for _, r := range m.ranks {
			b = binary.BigEndian.AppendUint32(b, uint32(int32(r)))
		}
	}
	return b
}

func appendString16(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
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

func (d *decoder) rank(what string) int {
	r := int32(d.u32(what))
	if d.err == nil && (r < -1 || r >= maxRanks) {
		d.fail(what + " out of range")
	}
	return int(r)
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

// decodeMessage decodes b. Byte slices in the result (payload, table
// entries) alias b. Any malformed input gives an error wrapping
// ucs.ErrInvalidParam; decodeMessage never panics.
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
	case kindGather, kindFinalize:
		m.addr = d.string16("address")
		m.payload = d.blob("payload")
	case kindTable:
		n := d.u32("count")
		// Every entry takes at least 4 bytes: do not trust n further.
		if d.err == nil && (n > maxRanks || int(n) > len(d.b)/4) {
			d.fail("table count too large")
		}
		if d.err == nil {
			m.table = make([][]byte, n)
		}
		total := 0
		for i := range m.table {
			m.table[i] = d.blob("table entry")
			total += len(m.table[i])
			if d.err == nil && total > MaxAllgather {
				d.fail("table too large")
			}
			if d.err != nil {
				break
			}
		}
	case kindFinalizeAck, kindGlobalExitAck, kindAgentAck, kindLostAck:
	case kindStallReport:
		n := d.u32("count")
		if d.err == nil && (n > maxRanks || int(n) > len(d.b)/4) {
			d.fail("rank count too large")
		}
		if d.err == nil {
			m.ranks = make([]int, n)
		}
		for i := range m.ranks {
			m.ranks[i] = d.rank("rank to ask")
		}
	case kindFailure:
		m.failRank = d.rank("failed rank")
		m.host = d.string16("host")
		m.reason = d.string16("reason")
	case kindAbort, kindTerminate:
		m.reason = d.string16("reason")
	case kindGlobalExit:
		m.addr = d.string16("address")
		m.code = int(int32(d.u32("code")))
		m.host = d.string16("host")
	case kindAgentReport:
		m.addr = d.string16("address")
		m.failRank = d.rank("ended rank")
		m.code = int(int32(d.u32("code")))
		m.host = d.string16("host")
		m.reason = d.string16("how")
		m.flags = d.u8("flags")
		if d.err == nil && m.flags&^flagEndedByAgent != 0 {
			d.fail("unknown flags")
		}
		m.why = d.string16("why")
	case kindLost:
		m.addr = d.string16("address")
		m.failRank = d.rank("lost rank")
		m.reason = d.string16("reason")
	default:
		return nil, malformed("unknown kind " + m.kind.String())
	}
	if d.err != nil {
		return nil, d.err
	}
	if len(d.b) != 0 {
		return nil, malformed(strconv.Itoa(len(d.b)) + " trailing bytes")
	}
	return m, nil
}

// parseNodeAddr parses the host:port a PE reports for its memberlist node.
// The host must be an IP address literal.
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
