package ucp

import (
	"encoding/binary"
	"fmt"

	"github.com/goshmem/goshmem/ucs"
)

// The wire messages of tag matching; the rendezvous ones (amTagRTS to
// amTagRevoke) serve tag messages, active messages (am_wire.go) and
// streams (stream_wire.go) alike. Each has its own uct active-message id,
// so that the common message, an eager one, carries nothing but the tag in
// front of its data (as an AMShort header where the lane has it). Headers
// are little endian; what follows the header is the message's data.
//
//	amTagEager      tag u64                                        | data
//	amTagEagerSync  tag u64, src u64, sreq u64                     | data
//	amTagFirst      arg u64, src u64, msg u64, total u64, sreq u64, flags u64 | user header | data
//	amTagMiddle     src u64, msg u64, off u64                      | data
//	amTagAck        src u64, sreq u64
//	amTagRTS        arg u64, src u64, sreq u64, length u64, raddr u64, flags u64 | user header | packed key
//	amTagATS        src u64, sreq u64, status i64
//	amTagRTR        src u64, sreq u64, rreq u64, raddr u64         | packed key
//	amTagData       src u64, rreq u64, off u64                     | data
//	amTagATP        src u64, rreq u64, status i64
//	amTagRevoke     src u64, sreq u64
//
// src is always the uid of the sending worker; sreq the sender's number of
// a send that waits for the receiver (a sync send, a rendezvous), 0 for none
// in amTagFirst; rreq the receiver's number of a rendezvous receive; msg the
// sender's number of a fragmented eager message. The fragments of an
// eager message (amTagFirst, amTagMiddle) and an RTS serve every family
// that has them (a stream's data needs no reassembly: stream_wire.go):
// the first fragment and the RTS say in their flags which family sends
// (hdrFamShift): their arg is a tag message's tag, an active message's
// id, a stream's receiving connection number, and only an active
// message's have a user header (its length in the flags, hdrHlenShift)
// and may ask for a reply endpoint (hdrReply); only a tag message's may be
// a sync send (tagRTSSync in an RTS, a send number in a first fragment). An RTS whose key is empty
// has raddr 0: the receiver cannot take the data and asks for it (RTR).
// An RTR with a key (and the address of the receive's buffer) asks the
// sender to put the data there and then say so (ATP); one without asks it
// to push the data (amTagData). An amTagRevoke, sent behind the RTS on
// the same lane, takes the announcement back (the sender's endpoint
// closes); the receiver answers it with an ATS when it had not taken the
// data (see tag_rndv.go).
const (
	amTagEager uint8 = amUCP - 1 - iota
	amTagEagerSync
	amTagFirst
	amTagMiddle
	amTagAck
	amTagRTS
	amTagATS
	amTagRTR
	amTagData
	amTagATP
	amTagRevoke
)

// Header lengths.
const (
	tagEagerHdrLen  = 8
	tagSyncHdrLen   = 24
	tagFirstHdrLen  = 48
	tagMiddleHdrLen = 24
	tagAckLen       = 16
	tagRTSHdrLen    = 48
	tagATSLen       = 24
	tagRTRLen       = 32
	tagDataHdrLen   = 24
	tagATPLen       = 24
	tagRevokeLen    = 16
	// tagMaxHeader is the longest header in front of data, but for an
	// active message's user header.
	tagMaxHeader = tagFirstHdrLen
)

// The flags of an RTS and of a first fragment.
const (
	// tagRTSSync: the send is a sync send (a tag message's RTS).
	tagRTSSync = 1 << 0
	// hdrReply: the sender asked for a reply endpoint (AMSendFlagReply,
	// active messages).
	hdrReply = 1 << 1
	// hdrFamShift: bits 8 to 15 hold the family that sends (famTag,
	// famAM, famStream).
	hdrFamShift = 8
	// hdrHlenShift: bits 32 to 63 hold the length of an active message's
	// user header, which follows the header.
	hdrHlenShift = 32
	hdrKnown     = tagRTSSync | hdrReply | 0xff<<hdrFamShift | 0xffffffff<<hdrHlenShift
)

// hdrFlags returns the flags of an RTS or a first fragment of family fam
// with a user header of hlen bytes and the flags more (tagRTSSync,
// hdrReply).
func hdrFlags(fam uint8, hlen int, more uint64) uint64 {
	return uint64(fam)<<hdrFamShift | uint64(hlen)<<hdrHlenShift | more
}

// famWrong reads the family and the user header's length from h.flags
// and reports what a family may not send in an RTS or a first fragment: a
// user header or a reply of another family's (p, the payload, holds the
// user header), a sync send of another family's, an AM id out of range,
// an unknown family.
func (h *tagHeader) famWrong(p []byte) bool {
	h.fam, h.hlen = uint8(h.flags>>hdrFamShift), int(h.flags>>hdrHlenShift)
	return h.flags&^hdrKnown != 0 || h.hlen > len(p) ||
		(h.fam != famAM && (h.hlen != 0 || h.flags&hdrReply != 0)) ||
		(h.fam != famTag && h.flags&tagRTSSync != 0) ||
		(h.fam == famAM && h.tag > MaxAMID) || h.fam > famStream
}

// tagMaxEager bounds the length a first fragment announces: the receiver
// allocates it when the message is unexpected.
const tagMaxEager = 1 << 30

// tagHeader is the decoded header of a tag message; which fields count
// depends on the message's id.
type tagHeader struct {
	tag, src, sreq, rreq, msg uint64
	total, off, raddr, flags  uint64
	status                    ucs.Status
	// An RTS: the family that announces, and the length of the user
	// header at the start of the payload (from flags).
	fam  uint8
	hlen int
}

// tagHdrLen returns the header length of tag messages of uct id id, 0 for
// an id that is not one.
func tagHdrLen(id uint8) int {
	switch id {
	case amTagEager:
		return tagEagerHdrLen
	case amTagEagerSync:
		return tagSyncHdrLen
	case amTagFirst:
		return tagFirstHdrLen
	case amTagMiddle:
		return tagMiddleHdrLen
	case amTagAck:
		return tagAckLen
	case amTagRTS:
		return tagRTSHdrLen
	case amTagATS:
		return tagATSLen
	case amTagRTR:
		return tagRTRLen
	case amTagData:
		return tagDataHdrLen
	case amTagATP:
		return tagATPLen
	case amTagRevoke:
		return tagRevokeLen
	}
	return 0
}

func put64(b []byte, vs ...uint64) {
	for i, v := range vs {
		binary.LittleEndian.PutUint64(b[8*i:], v)
	}
}

func get64(b []byte, i int) uint64 { return binary.LittleEndian.Uint64(b[8*i:]) }

// getStatus reads word i of b as a status; ok is false unless it is OK or
// an error code.
func getStatus(b []byte, i int) (st ucs.Status, ok bool) {
	v := int64(get64(b, i))
	return ucs.Status(v), v <= 0 && v >= int64(ucs.ErrLast)
}

// decodeTag parses and checks a tag message of uct id id and returns its
// header and what follows it (data, or a packed key). Anything a field may
// not hold fails with ucs.ErrInvalidParam; what it cannot check alone (that
// a fragment belongs to a message in progress) the receiver checks.
func decodeTag(id uint8, b []byte) (tagHeader, []byte, error) {
	var h tagHeader
	bad := func(format string, args ...any) (tagHeader, []byte, error) {
		return tagHeader{}, nil, fmt.Errorf("ucp: tag message %d: "+format+": %w", append(append([]any{id}, args...), ucs.ErrInvalidParam)...)
	}
	need := tagHdrLen(id)
	if need == 0 {
		return bad("unknown")
	}
	if len(b) < need {
		return bad("%d bytes, shorter than its header", len(b))
	}
	p := b[need:]
	switch id {
	case amTagEager:
		h.tag = get64(b, 0)
	case amTagEagerSync:
		h.tag, h.src, h.sreq = get64(b, 0), get64(b, 1), get64(b, 2)
		if h.sreq == 0 {
			return bad("sync message without send number")
		}
	case amTagFirst:
		h.tag, h.src, h.msg, h.total, h.sreq, h.flags = get64(b, 0), get64(b, 1), get64(b, 2), get64(b, 3), get64(b, 4), get64(b, 5)
		// A tag message's never all of the message; an active message's
		// may be, when zero-copy carries more than one copied message
		// would; a stream's data has no fragments.
		wrong := h.famWrong(p) || h.fam == famStream || h.flags&tagRTSSync != 0 || (h.fam != famTag && h.sreq != 0)
		if wrong || h.msg == 0 || h.total > tagMaxEager || h.total < uint64(len(p)-h.hlen) || (h.fam == famTag && h.total == uint64(len(p))) {
			return bad("first fragment of %d bytes, message %d of %d bytes, flags %#x", len(p), h.msg, h.total, h.flags)
		}
	case amTagMiddle:
		h.src, h.msg, h.off = get64(b, 0), get64(b, 1), get64(b, 2)
		// (At 0 after an active message's first fragment that carried its
		// user header alone.)
		if h.msg == 0 || len(p) == 0 || h.off >= tagMaxEager {
			return bad("fragment of %d bytes at %d of message %d", len(p), h.off, h.msg)
		}
	case amTagAck, amTagRevoke:
		h.src, h.sreq = get64(b, 0), get64(b, 1)
		if h.sreq == 0 || len(p) != 0 {
			return bad("acknowledgement or revoke of send %d with %d bytes", h.sreq, len(p))
		}
	case amTagRTS:
		h.tag, h.src, h.sreq, h.total, h.raddr, h.flags = get64(b, 0), get64(b, 1), get64(b, 2), get64(b, 3), get64(b, 4), get64(b, 5)
		wrong := h.famWrong(p)
		key := len(p) - min(h.hlen, len(p))
		if wrong || h.sreq == 0 || h.total > amMaxRndv || key > maxRkeyBlob ||
			(key == 0) != (h.raddr == 0) || (key > 0 && h.total == 0) {
			return bad("rendezvous request %d: %d bytes at %#x, flags %#x, key of %d bytes", h.sreq, h.total, h.raddr, h.flags, key)
		}
	case amTagATS, amTagATP:
		// The sender's number (ATS) or the receiver's (ATP), and the status
		// of the transfer.
		num := get64(b, 1)
		st, ok := getStatus(b, 2)
		if num == 0 || len(p) != 0 || !ok {
			return bad("end of rendezvous request %d, status %d, %d bytes", num, int64(get64(b, 2)), len(p))
		}
		h.src, h.status = get64(b, 0), st
		if id == amTagATS {
			h.sreq = num
		} else {
			h.rreq = num
		}
	case amTagRTR:
		h.src, h.sreq, h.rreq, h.raddr = get64(b, 0), get64(b, 1), get64(b, 2), get64(b, 3)
		if h.sreq == 0 || h.rreq == 0 || len(p) > maxRkeyBlob || (len(p) == 0) != (h.raddr == 0) {
			return bad("rendezvous reply to send %d for receive %d at %#x with a key of %d bytes", h.sreq, h.rreq, h.raddr, len(p))
		}
	case amTagData:
		h.src, h.rreq, h.off = get64(b, 0), get64(b, 1), get64(b, 2)
		if h.rreq == 0 || len(p) == 0 || h.off >= amMaxRndv {
			return bad("rendezvous data of %d bytes at %d for receive %d", len(p), h.off, h.rreq)
		}
	}
	return h, p, nil
}
