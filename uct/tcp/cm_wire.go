package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"

	"github.com/goshmem/goshmem/internal/jobkey"
	"github.com/goshmem/goshmem/ucs"
)

// The CM's handshake runs over the TCP connection a client makes to a
// listener. Every message starts with the header
//
//	0  magic   uint32  "GSLC"
//	4  version uint16  3
//	6  type    uint8   cm*
//	7  flags   uint8
//
// followed by, little endian:
//
//	cmHello (client):     client nonce [32]byte
//	cmChallenge (server): server nonce [32]byte; flags cmFlagKeyed when
//	                      the listener authenticates
//	cmRequest (client):   MAC [32]byte, uint16 length, client private data
//	cmAccept (server):    MAC [32]byte, uint16 length, server private data
//	cmReject (server):    reason uint8 (cmReason*); in place of cmChallenge
//	                      or cmAccept
//	cmReady (client):     MAC [32]byte
//
// Each MAC is the job key's proof (internal/jobkey, label jobkey.LabelCM)
// over both nonces and the private data (only in cmRequest and cmAccept),
// with the tag of its message: jobkey.ClientProof, ServerProof or
// ClientConfirm. (A rejection carries no MAC: a client that cannot verify
// it, having another key, must still learn why.) The key is the
// configured one (see cmKey), or none: then the MACs only check
// integrity. Both nonces are fresh, so each side's first MAC proves that it
// holds the key without a recorded proof being replayable, and the key
// itself never travels. The private data is the layer above's (ucp's
// worker address, and its client id); the CM only bounds its length.
const (
	cmHello     uint8 = 1
	cmChallenge uint8 = 2
	cmRequest   uint8 = 3
	cmAccept    uint8 = 4
	cmReject    uint8 = 5
	cmReady     uint8 = 6

	cmReasonRefused uint8 = 1 // the application rejected the request
	cmReasonAuth    uint8 = 2 // the client's MAC did not verify
	cmReasonBusy    uint8 = 3 // too many connections at the listener

	cmFlagKeyed uint8 = 1 << 0 // cmChallenge
)

const (
	cmMagic     uint32 = 0x434c5347 // "GSLC"
	cmVersion   uint16 = 3
	cmHeaderLen        = 8

	// MaxConnPriv is the largest private data either side of a CM
	// connection sends (uct.CMAttr.MaxConnPriv): a worker address with
	// every transport fits it many times.
	MaxConnPriv = 4096
)

// cmMsg is a decoded handshake message; the fields its type lacks are zero.
type cmMsg struct {
	typ    uint8
	flags  uint8
	nonce  jobkey.Nonce
	mac    jobkey.MAC
	priv   []byte // cmRequest, cmAccept: the private data
	reason uint8  // cmReject
}

// cmFixedLen returns the length of a message of type typ after the header,
// without the private data of cmRequest and cmAccept (whose length follows
// the MAC), or -1 for an unknown type.
func cmFixedLen(typ uint8) int {
	switch typ {
	case cmHello, cmChallenge:
		return jobkey.NonceLen
	case cmRequest, cmAccept:
		return jobkey.MACLen + 2
	case cmReject:
		return 1
	case cmReady:
		return jobkey.MACLen
	}
	return -1
}

func (m *cmMsg) encode() []byte {
	b := make([]byte, cmHeaderLen, cmHeaderLen+max(cmFixedLen(m.typ), 0)+len(m.priv))
	binary.LittleEndian.PutUint32(b, cmMagic)
	binary.LittleEndian.PutUint16(b[4:], cmVersion)
	b[6], b[7] = m.typ, m.flags
	switch m.typ {
	case cmHello, cmChallenge:
		b = append(b, m.nonce[:]...)
	case cmRequest, cmAccept:
		b = append(b, m.mac[:]...)
		b = binary.LittleEndian.AppendUint16(b, uint16(len(m.priv)))
		b = append(b, m.priv...)
	case cmReject:
		b = append(b, m.reason)
	case cmReady:
		b = append(b, m.mac[:]...)
	}
	return b
}

// errCMWire is the cause of a malformed handshake message.
var errCMWire = fmt.Errorf("malformed client-server handshake: %w", ucs.ErrInvalidParam)

// decodeCMHeader checks a message header and returns the message's type
// and flags; the type must be one of want.
func decodeCMHeader(h []byte, want ...uint8) (typ, flags uint8, err error) {
	if len(h) != cmHeaderLen {
		return 0, 0, fmt.Errorf("%d header bytes: %w", len(h), errCMWire)
	}
	if m := binary.LittleEndian.Uint32(h); m != cmMagic {
		return 0, 0, fmt.Errorf("magic %#x: %w", m, errCMWire)
	}
	if v := binary.LittleEndian.Uint16(h[4:]); v != cmVersion {
		return 0, 0, fmt.Errorf("version %d: %w", v, errCMWire)
	}
	typ, flags = h[6], h[7]
	for _, t := range want {
		if t == typ {
			allowed := uint8(0)
			if typ == cmChallenge {
				allowed = cmFlagKeyed
			}
			if flags&^allowed != 0 {
				return 0, 0, fmt.Errorf("type %d: flags %#x: %w", typ, flags, errCMWire)
			}
			return typ, flags, nil
		}
	}
	return 0, 0, fmt.Errorf("message type %d, want one of %v: %w", typ, want, errCMWire)
}

// checkPrivLen checks the length of private data announced on the wire.
func checkPrivLen(n int) error {
	if n == 0 || n > MaxConnPriv {
		return fmt.Errorf("private data of %d bytes, want 1 to %d: %w", n, MaxConnPriv, errCMWire)
	}
	return nil
}

// decodeCMMsg decodes a whole message whose type must be one of want.
// Anything malformed (bad header, wrong length, empty or oversized private
// data, trailing bytes) fails with an error wrapping ucs.ErrInvalidParam.
func decodeCMMsg(b []byte, want ...uint8) (cmMsg, error) {
	if len(b) < cmHeaderLen {
		return cmMsg{}, fmt.Errorf("%d bytes: %w", len(b), errCMWire)
	}
	typ, flags, err := decodeCMHeader(b[:cmHeaderLen], want...)
	if err != nil {
		return cmMsg{}, err
	}
	m := cmMsg{typ: typ, flags: flags}
	body := b[cmHeaderLen:]
	n := cmFixedLen(typ)
	if len(body) < n {
		return cmMsg{}, fmt.Errorf("type %d truncated: %w", typ, errCMWire)
	}
	switch typ {
	case cmHello, cmChallenge:
		copy(m.nonce[:], body)
	case cmRequest, cmAccept:
		copy(m.mac[:], body)
		plen := int(binary.LittleEndian.Uint16(body[jobkey.MACLen:]))
		if err := checkPrivLen(plen); err != nil {
			return cmMsg{}, err
		}
		if len(body) < n+plen {
			return cmMsg{}, fmt.Errorf("type %d truncated: %w", typ, errCMWire)
		}
		m.priv = body[n : n+plen]
		n += plen
	case cmReject:
		m.reason = body[0]
	case cmReady:
		copy(m.mac[:], body)
	}
	if len(body) != n {
		return cmMsg{}, fmt.Errorf("type %d: %d trailing bytes: %w", typ, len(body)-n, errCMWire)
	}
	return m, nil
}

// readCMMsg reads one message of one of the types want from r. It reads
// no more than the header announces (at most MaxConnPriv bytes of private
// data), so a peer cannot make it allocate more.
func readCMMsg(r io.Reader, want ...uint8) (cmMsg, error) {
	b := make([]byte, cmHeaderLen, cmHeaderLen+jobkey.MACLen+2+MaxConnPriv)
	if _, err := io.ReadFull(r, b); err != nil {
		return cmMsg{}, err
	}
	typ, _, err := decodeCMHeader(b, want...)
	if err != nil {
		return cmMsg{}, err
	}
	b = b[:cmHeaderLen+cmFixedLen(typ)]
	if _, err := io.ReadFull(r, b[cmHeaderLen:]); err != nil {
		return cmMsg{}, err
	}
	if typ == cmRequest || typ == cmAccept {
		plen := int(binary.LittleEndian.Uint16(b[len(b)-2:]))
		if err := checkPrivLen(plen); err != nil {
			return cmMsg{}, err
		}
		b = b[:len(b)+plen]
		if _, err := io.ReadFull(r, b[len(b)-plen:]); err != nil {
			return cmMsg{}, err
		}
	}
	return decodeCMMsg(b, typ)
}

// cmMAC returns the MAC of a message with tag over the handshake's values.
func cmMAC(key jobkey.HandshakeKey, tag jobkey.Tag, cnonce, snonce *jobkey.Nonce, priv []byte) jobkey.MAC {
	return key.Prove(tag, cnonce, snonce, priv)
}

// cmVerify checks the MAC of a message with tag over the handshake's
// values, in constant time; it fails with jobkey.ErrAuth.
func cmVerify(key jobkey.HandshakeKey, mac *jobkey.MAC, tag jobkey.Tag, cnonce, snonce *jobkey.Nonce, priv []byte) error {
	return key.Verify(mac[:], tag, cnonce, snonce, priv)
}

// cmRejectErr is the error of a client the server refused for reason.
func cmRejectErr(reason uint8) error {
	switch reason {
	case cmReasonAuth:
		return fmt.Errorf("the server refused the connection: authentication failed (not the same key): %w", ucs.ErrRejected)
	case cmReasonBusy:
		return fmt.Errorf("the server refused the connection: too many connections: %w", ucs.ErrBusy)
	}
	return fmt.Errorf("the server rejected the connection: %w", ucs.ErrRejected)
}

// cmIOErr names what a handshake's read or write failed doing, with a
// status: ucs.ErrTimedOut past a deadline, ucs.ErrConnectionReset when the
// peer closed the connection.
func cmIOErr(doing string, err error) error {
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%s: the peer did not answer in time: %w", doing, ucs.ErrTimedOut)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, net.ErrClosed):
		return fmt.Errorf("%s: the peer closed the connection: %w", doing, ucs.ErrConnectionReset)
	case errors.Is(err, ucs.ErrInvalidParam), errors.Is(err, ucs.ErrRejected), errors.Is(err, ucs.ErrInvalidAddr):
		return fmt.Errorf("%s: %w", doing, err)
	}
	return fmt.Errorf("%s: %w: %w", doing, err, ucs.ErrIOError)
}
