package ucp

import (
	"encoding/binary"
	"fmt"

	"github.com/goshmem/goshmem/ucs"
)

// amUCP is the uct active-message id that carries every ucp active message:
// the first id below those of the software protocols (proto_sw.go), whose
// lowest is amSwWireup.
const amUCP uint8 = amSwWireup - 1

// Types of ucp active-message wire messages (amHeader.typ). A message in
// fragments and a rendezvous go as the messages of tag matching
// (tag_wire.go), which every family shares: the fragments as amTagFirst,
// of family famAM, with the user header after its header, then
// amTagMiddle; a rendezvous as an amTagRTS of family famAM (the user
// header after it), which the receiver answers with amTagRTR and amTagATS,
// and the sender pushes the data with amTagData and revokes the message
// with amTagRevoke. They replaced types of their own here (this header
// has no version: ucp's wire is between peers of one job, of one
// version).
const (
	amSingle uint8 = iota + 1 // a whole eager message: user header, then data
	amHello                   // the sender's worker address, for a reply endpoint (older senders: it now goes in the software protocols' wireup message, Endpoint.wireBack)
	amTypeEnd
)

// amHdrReply in amHeader.flags: the sender asked for a reply endpoint
// (AMSendFlagReply; hdrReply in a first fragment or an RTS).
const amHdrReply uint8 = 1 << 0

// amHdrLen is the length of the wire header of every ucp active message.
const amHdrLen = 40

// Limits a receiver enforces on what a peer announces.
const (
	// amMaxEager bounds the data of a fragmented eager message, which the
	// receiver allocates when its first fragment arrives.
	amMaxEager = 1 << 30
	// amMaxRndv bounds the data a rendezvous message announces.
	amMaxRndv = 1 << 40
)

// amHeader starts every ucp active message (little endian, amHdrLen
// bytes); the payload follows it:
//
//	0  typ   u8   amSingle ... amHello
//	1  flags u8   amHdrReply (Single); 0 otherwise
//	2  id    u16  user AM id (Single); 0 otherwise
//	4  hlen  u32  user header length (Single); 0 otherwise
//	8  src   u64  uid of the sending worker
//	16 msg   u64  0 (the message id of the fragments they had)
//	24 total u64  0
//	32 off   u64  0
type amHeader struct {
	typ   uint8
	flags uint8
	id    uint16
	hlen  uint32
	src   uint64
	msg   uint64
	total uint64
	off   uint64
}

func (h *amHeader) put(b []byte) {
	b[0], b[1] = h.typ, h.flags
	binary.LittleEndian.PutUint16(b[2:], h.id)
	binary.LittleEndian.PutUint32(b[4:], h.hlen)
	binary.LittleEndian.PutUint64(b[8:], h.src)
	binary.LittleEndian.PutUint64(b[16:], h.msg)
	binary.LittleEndian.PutUint64(b[24:], h.total)
	binary.LittleEndian.PutUint64(b[32:], h.off)
}

// decodeAMHeader parses and checks the header of a ucp active message and
// returns it with the payload that follows. Everything a field may not hold
// for the message's type fails with ucs.ErrInvalidParam; so does a payload
// that contradicts the header. What it cannot check alone (that a fragment
// belongs to a message in progress) the receiver checks.
func decodeAMHeader(data []byte) (amHeader, []byte, error) {
	var h amHeader
	bad := func(format string, args ...any) (amHeader, []byte, error) {
		return h, nil, fmt.Errorf("ucp: active message header: "+format+": %w", append(args, ucs.ErrInvalidParam)...)
	}
	if len(data) < amHdrLen {
		return bad("message of %d bytes, shorter than a header", len(data))
	}
	h.typ, h.flags = data[0], data[1]
	h.id = binary.LittleEndian.Uint16(data[2:])
	h.hlen = binary.LittleEndian.Uint32(data[4:])
	h.src = binary.LittleEndian.Uint64(data[8:])
	h.msg = binary.LittleEndian.Uint64(data[16:])
	h.total = binary.LittleEndian.Uint64(data[24:])
	h.off = binary.LittleEndian.Uint64(data[32:])
	p := data[amHdrLen:]
	n := uint64(len(p))
	if h.typ == 0 || h.typ >= amTypeEnd {
		return bad("type %d", h.typ)
	}
	if h.flags&^amHdrReply != 0 {
		return bad("flags %#x", h.flags)
	}
	if h.msg != 0 || h.total != 0 || h.off != 0 {
		return bad("type %d with msg %d, total %d, offset %d", h.typ, h.msg, h.total, h.off)
	}
	switch h.typ {
	case amSingle:
		if uint64(h.hlen) > n {
			return bad("single message: header %d of %d bytes", h.hlen, n)
		}
	case amHello:
		if h.flags != 0 || h.id != 0 || h.hlen != 0 || n == 0 || n > maxAddrBlob {
			return bad("hello of %d bytes with user id, flags or header", n)
		}
	}
	return h, p, nil
}
