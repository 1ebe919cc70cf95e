package tcp

import (
	"encoding/binary"
	"fmt"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// Frame types.
const (
	frameAM  uint8 = 1 // client to server: an active message; body = the message
	framePut uint8 = 2 // client to server: a put; body = putHeader + data
	frameAck uint8 = 3 // server to client: body = uint64 count of frames processed
	// frameFlush, client to server, empty: asks for an acknowledgement once
	// every frame before it was processed.
	frameFlush uint8 = 4
	// frameGet, client to server: a get; body = getHeader. The server
	// answers with a frameGetRep on the same connection.
	frameGet uint8 = 5
	// frameGetRep, server to client: body = getRepHeader + the data (none
	// when the status is an error).
	frameGetRep uint8 = 6
	// frameEPClose, client to server, empty: the EP closes in order;
	// nothing follows (see close.go).
	frameEPClose uint8 = 7
	// frameIfaceClose, server to client: the iface closes in order;
	// body = uint64 count of frames processed; nothing follows.
	frameIfaceClose uint8 = 8
	// frameAlive, server to client, empty: the server is alive, sent when
	// it had nothing else to send for a while (see alive.go).
	frameAlive uint8 = 9
	// frameAtomic, client to server: an atomic; body = atomicHeader. A
	// fetching one is answered with a frameAtomicRep on the same
	// connection.
	frameAtomic uint8 = 10
	// frameAtomicRep, server to client: body = atomicRep.
	frameAtomicRep uint8 = 11
)

// The frame types each side of a connection reads, as masks of 1<<type.
const (
	clientToServer uint32 = 1<<frameAM | 1<<framePut | 1<<frameFlush | 1<<frameGet | 1<<frameEPClose | 1<<frameAtomic
	serverToClient uint32 = 1<<frameAck | 1<<frameGetRep | 1<<frameIfaceClose | 1<<frameAlive | 1<<frameAtomicRep
)

// frameHeaderLen is the length of a frame header.
//
// Layout, little-endian:
//
//	0  type   uint8   frameAM ... frameAtomicRep
//	1  id     uint8   active message id (< uct.AMMaxID) for frameAM, else 0
//	2  flags  uint8   frameAM: amSignaled or 0; others: 0
//	3  (zero) uint8
//	4  length uint32  bytes of the body that follows
const frameHeaderLen = 8

// amSignaled, in the flags of a frameAM header: the message was sent with
// uct.SendFlagSignaled.
const amSignaled uint8 = 1 << 0

// putHeaderLen is the length of the header of a put body.
//
// Layout, little-endian:
//
//	0  key    uint64  key id of the target region
//	8  token  uint64  token of the key
//	16 raddr  uint64  address of the first byte to write
const putHeaderLen = 24

// getHeaderLen is the length of a get body.
//
// Layout, little-endian:
//
//	0  key    uint64  key id of the source region
//	8  token  uint64  token of the key
//	16 raddr  uint64  address of the first byte to read
//	24 length uint64  bytes to read, at most maxPutLen
//	32 id     uint64  the client's number of the get, echoed in the reply
const getHeaderLen = 40

// getRepHeaderLen is the length of the header of a get reply body.
//
// Layout, little-endian:
//
//	0  id     uint64  the get's id
//	8  status int64   ucs.Status: 0, then the data follows; an error, then nothing
const getRepHeaderLen = 16

// atomicHeaderLen is the length of an atomic body.
//
// Layout, little-endian:
//
//	0  key     uint64  key id of the target region
//	8  token   uint64  token of the key
//	16 raddr   uint64  address of the word, aligned to its size
//	24 value   uint64  the operand (its low 32 bits for a 4-byte word)
//	32 compare uint64  AtomicOpCSwap: the value compared
//	40 id      uint64  a fetching atomic: the client's number, echoed in the
//	                   reply (not 0); a posted one: 0
//	48 op      uint8   uct.AtomicOp; posted: Add, And, Or or Xor
//	49 size    uint8   4 or 8
//	50 (zero)  6 bytes
const atomicHeaderLen = 56

// atomicRepLen is the length of an atomic reply body.
//
// Layout, little-endian:
//
//	0  id      uint64  the atomic's id
//	8  status  int64   ucs.Status: 0, or an error (ucs.ErrInvalidAddr)
//	16 value   uint64  the word's old value (0 for an error)
const atomicRepLen = 24

// ackBodyLen is the length of an acknowledgement body, and of that of a
// frameIfaceClose.
const ackBodyLen = 8

// maxPutLen is the largest put, in data bytes: Put.MaxZcopy.
const maxPutLen = 1 << 30

// frameHeader is a decoded frame header.
type frameHeader struct {
	typ   uint8
	id    uint8
	flags uint8 // frameAM: amSignaled or 0
	len   uint32
}

// putAMFlags sets the flags of the frameAM header in b from the send
// flags of the message.
func putAMFlags(b []byte, sendFlags uint32) {
	if sendFlags&uct.SendFlagSignaled != 0 {
		b[2] = amSignaled
	}
}

func putFrameHeader(b []byte, typ, id uint8, n int) {
	b[0], b[1], b[2], b[3] = typ, id, 0, 0
	binary.LittleEndian.PutUint32(b[4:], uint32(n))
}

// decodeFrameHeader decodes a frame header strictly. allowed is a bit mask
// of the frame types (1<<type) the reader accepts; maxAM bounds the body of
// an active message. Malformed headers fail with ucs.ErrInvalidParam.
func decodeFrameHeader(b []byte, allowed uint32, maxAM int) (frameHeader, error) {
	bad := func(why string, args ...any) (frameHeader, error) {
		return frameHeader{}, fmt.Errorf("uct/tcp: frame header: %s: %w", fmt.Sprintf(why, args...), ucs.ErrInvalidParam)
	}
	if len(b) != frameHeaderLen {
		return bad("%d bytes, want %d", len(b), frameHeaderLen)
	}
	h := frameHeader{typ: b[0], id: b[1], flags: b[2], len: binary.LittleEndian.Uint32(b[4:])}
	if h.typ >= 32 || allowed&(1<<h.typ) == 0 {
		return bad("unexpected type %d", h.typ)
	}
	if b[3] != 0 || (h.flags != 0 && (h.typ != frameAM || h.flags&^amSignaled != 0)) {
		return bad("reserved bits set")
	}
	if h.typ != frameAM && h.id != 0 {
		return bad("id %d in a frame of type %d", h.id, h.typ)
	}
	switch h.typ {
	case frameAM:
		if h.id >= uct.AMMaxID {
			return bad("active message id %d", h.id)
		}
		if int64(h.len) > int64(maxAM) {
			return bad("active message of %d bytes, more than %d", h.len, maxAM)
		}
	case framePut:
		if h.len < putHeaderLen || h.len-putHeaderLen > maxPutLen {
			return bad("put body of %d bytes", h.len)
		}
	case frameAck:
		if h.len != ackBodyLen {
			return bad("acknowledgement of %d bytes", h.len)
		}
	case frameFlush, frameEPClose, frameAlive:
		if h.len != 0 {
			return bad("frame of type %d with %d bytes", h.typ, h.len)
		}
	case frameIfaceClose:
		if h.len != ackBodyLen {
			return bad("close of %d bytes", h.len)
		}
	case frameGet:
		if h.len != getHeaderLen {
			return bad("get body of %d bytes", h.len)
		}
	case frameGetRep:
		if h.len < getRepHeaderLen || h.len-getRepHeaderLen > maxPutLen {
			return bad("get reply body of %d bytes", h.len)
		}
	case frameAtomic:
		if h.len != atomicHeaderLen {
			return bad("atomic body of %d bytes", h.len)
		}
	case frameAtomicRep:
		if h.len != atomicRepLen {
			return bad("atomic reply body of %d bytes", h.len)
		}
	default:
		return bad("unknown type %d", h.typ)
	}
	return h, nil
}

// putHeader is a decoded put header.
type putHeader struct {
	key, token, raddr uint64
}

func (p *putHeader) encode(b []byte) {
	binary.LittleEndian.PutUint64(b[0:], p.key)
	binary.LittleEndian.PutUint64(b[8:], p.token)
	binary.LittleEndian.PutUint64(b[16:], p.raddr)
}

func decodePutHeader(b []byte) putHeader {
	return putHeader{
		key:   binary.LittleEndian.Uint64(b[0:]),
		token: binary.LittleEndian.Uint64(b[8:]),
		raddr: binary.LittleEndian.Uint64(b[16:]),
	}
}

// getHeader is a decoded get header.
type getHeader struct {
	key, token, raddr, length, id uint64
}

func (g *getHeader) encode(b []byte) {
	for k, v := range [...]uint64{g.key, g.token, g.raddr, g.length, g.id} {
		binary.LittleEndian.PutUint64(b[8*k:], v)
	}
}

// decodeGetHeader decodes a get body; a length over maxPutLen fails with
// ucs.ErrInvalidParam.
func decodeGetHeader(b []byte) (getHeader, error) {
	var v [5]uint64
	for k := range v {
		v[k] = binary.LittleEndian.Uint64(b[8*k:])
	}
	g := getHeader{key: v[0], token: v[1], raddr: v[2], length: v[3], id: v[4]}
	if g.length > maxPutLen {
		return g, fmt.Errorf("uct/tcp: get of %d bytes: %w", g.length, ucs.ErrInvalidParam)
	}
	return g, nil
}

// atomicHeader is a decoded atomic header.
type atomicHeader struct {
	key, token, raddr, value, compare, id uint64
	op                                    uct.AtomicOp
	size                                  uint8
}

func (a *atomicHeader) encode(b []byte) {
	for k, v := range [...]uint64{a.key, a.token, a.raddr, a.value, a.compare, a.id} {
		binary.LittleEndian.PutUint64(b[8*k:], v)
	}
	b[48], b[49] = uint8(a.op), a.size
	clear(b[50:atomicHeaderLen])
}

// decodeAtomicHeader decodes an atomic body strictly: an unknown op or
// size, a posted op that fetches by nature (Swap, CSwap), or reserved
// bytes set fail with ucs.ErrInvalidParam.
func decodeAtomicHeader(b []byte) (atomicHeader, error) {
	var v [6]uint64
	for k := range v {
		v[k] = binary.LittleEndian.Uint64(b[8*k:])
	}
	a := atomicHeader{key: v[0], token: v[1], raddr: v[2], value: v[3], compare: v[4], id: v[5], op: uct.AtomicOp(b[48]), size: b[49]}
	bad := a.op > uct.AtomicOpCSwap || (a.size != 4 && a.size != 8) ||
		a.id == 0 && a.op > uct.AtomicOpXor || binary.LittleEndian.Uint64(b[48:])>>16 != 0
	if bad {
		return a, fmt.Errorf("uct/tcp: atomic op %d of %d bytes, id %d: %w", a.op, a.size, a.id, ucs.ErrInvalidParam)
	}
	return a, nil
}
