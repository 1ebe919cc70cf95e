package ucp

import (
	"encoding/binary"
	"fmt"
	"io"
	"strings"

	"github.com/goshmem/goshmem/internal/jobkey"
	"github.com/goshmem/goshmem/ucs"
)

// The client-server handshake runs over the TCP connection a client makes to
// a listener. Every message starts with the header
//
//	0  magic   uint32  "GSLC"
//	4  version uint16  2
//	6  type    uint8   cs*
//	7  flags   uint8
//
// followed by, little endian:
//
//	csHello (client):     client id uint64, client nonce [32]byte;
//	                      flags csFlagClientID when the id was sent
//	csChallenge (server): server nonce [32]byte; flags csFlagKeyed when
//	                      the listener authenticates
//	csRequest (client):   MAC [32]byte, uint16 length, client worker address
//	csAccept (server):    MAC [32]byte, uint16 length, server worker address
//	csReject (server):    reason uint8 (csReason*); in place of csChallenge
//	                      or csAccept
//	csReady (client):     MAC [32]byte
//
// Each MAC is the job key's proof (internal/jobkey, label
// jobkey.LabelCM) over both nonces, the client id and the address (only
// in csRequest and csAccept), with the tag of its message:
// jobkey.ClientProof, ServerProof or ClientConfirm. (A rejection carries
// no MAC: a client that cannot verify it, having another key, must still
// learn why.) The key is the configured one (see listenerKey), or none:
// then the MACs only check integrity. Both nonces are fresh, so each
// side's first MAC proves that it holds the key without a recorded proof
// being replayable, and the key itself never travels.
const (
	csHello     uint8 = 1
	csChallenge uint8 = 2
	csRequest   uint8 = 3
	csAccept    uint8 = 4
	csReject    uint8 = 5
	csReady     uint8 = 6

	csReasonRefused uint8 = 1 // the application rejected the request
	csReasonAuth    uint8 = 2 // the client's MAC did not verify
	csReasonBusy    uint8 = 3 // too many connections at the listener

	csFlagClientID uint8 = 1 << 0 // csHello
	csFlagKeyed    uint8 = 1 << 0 // csChallenge

	csMagic     uint32 = 0x434c5347 // "GSLC"
	csVersion          = 2
	csHeaderLen        = 8
	csNonceLen         = jobkey.NonceLen
	csMACLen           = jobkey.MACLen
)

// csMsg is a decoded handshake message; the fields its type lacks are zero.
type csMsg struct {
	typ      uint8
	flags    uint8
	clientID uint64
	nonce    jobkey.Nonce
	mac      jobkey.MAC
	addr     []byte // csRequest, csAccept: a packed worker address
	reason   uint8  // csReject
}

// csFixedLen returns the length of a message of type typ after the header,
// without the address of csRequest and csAccept (whose length follows the
// MAC), or -1 for an unknown type.
func csFixedLen(typ uint8) int {
	switch typ {
	case csHello:
		return 8 + csNonceLen
	case csChallenge:
		return csNonceLen
	case csRequest, csAccept:
		return csMACLen + 2
	case csReject:
		return 1
	case csReady:
		return csMACLen
	}
	return -1
}

func (m *csMsg) encode() []byte {
	b := make([]byte, csHeaderLen, csHeaderLen+csFixedLen(m.typ)+len(m.addr))
	binary.LittleEndian.PutUint32(b, csMagic)
	binary.LittleEndian.PutUint16(b[4:], csVersion)
	b[6], b[7] = m.typ, m.flags
	switch m.typ {
	case csHello:
		b = binary.LittleEndian.AppendUint64(b, m.clientID)
		b = append(b, m.nonce[:]...)
	case csChallenge:
		b = append(b, m.nonce[:]...)
	case csRequest, csAccept:
		b = append(b, m.mac[:]...)
		b = appendBlob16(b, m.addr)
	case csReject:
		b = append(b, m.reason)
	case csReady:
		b = append(b, m.mac[:]...)
	}
	return b
}

// errHandshake is the cause of a malformed handshake message.
var errHandshake = fmt.Errorf("malformed client-server handshake: %w", ucs.ErrInvalidParam)

// decodeCSHeader checks a message header and returns the message's type
// and flags; the type must be one of want.
func decodeCSHeader(h []byte, want ...uint8) (typ, flags uint8, err error) {
	if len(h) != csHeaderLen {
		return 0, 0, fmt.Errorf("%d header bytes: %w", len(h), errHandshake)
	}
	if m := binary.LittleEndian.Uint32(h); m != csMagic {
		return 0, 0, fmt.Errorf("magic %#x: %w", m, errHandshake)
	}
	if v := binary.LittleEndian.Uint16(h[4:]); v != csVersion {
		return 0, 0, fmt.Errorf("version %d: %w", v, errHandshake)
	}
	typ, flags = h[6], h[7]
	for _, t := range want {
		if t == typ {
			allowed := uint8(0)
			if typ == csHello || typ == csChallenge {
				allowed = csFlagClientID // == csFlagKeyed
			}
			if flags&^allowed != 0 {
				return 0, 0, fmt.Errorf("type %d: flags %#x: %w", typ, flags, errHandshake)
			}
			return typ, flags, nil
		}
	}
	return 0, 0, fmt.Errorf("message type %d, want one of %v: %w", typ, want, errHandshake)
}

// decodeCSMsg decodes a whole message whose type must be one of want.
// Anything malformed (bad header, wrong length, an empty or oversized
// address, trailing bytes) fails with an error wrapping
// ucs.ErrInvalidParam; the address is not parsed here.
func decodeCSMsg(b []byte, want ...uint8) (csMsg, error) {
	if len(b) < csHeaderLen {
		return csMsg{}, fmt.Errorf("%d bytes: %w", len(b), errHandshake)
	}
	typ, flags, err := decodeCSHeader(b[:csHeaderLen], want...)
	if err != nil {
		return csMsg{}, err
	}
	m := csMsg{typ: typ, flags: flags}
	d := decoder{b: b[csHeaderLen:]}
	switch typ {
	case csHello:
		m.clientID = d.u64()
		copy(m.nonce[:], d.take(csNonceLen))
	case csChallenge:
		copy(m.nonce[:], d.take(csNonceLen))
	case csRequest, csAccept:
		copy(m.mac[:], d.take(csMACLen))
		n := int(d.u16())
		if !d.err && (n == 0 || n > maxAddrBlob) {
			return csMsg{}, fmt.Errorf("address of %d bytes: %w", n, errHandshake)
		}
		m.addr = d.take(n)
	case csReject:
		m.reason = d.u8()
	case csReady:
		copy(m.mac[:], d.take(csMACLen))
	}
	if d.err {
		return csMsg{}, fmt.Errorf("type %d truncated: %w", typ, errHandshake)
	}
	if len(d.b) != 0 {
		return csMsg{}, fmt.Errorf("type %d: %d trailing bytes: %w", typ, len(d.b), errHandshake)
	}
	return m, nil
}

// readCSMsg reads one message of one of the types want from r. It reads
// no more than the header announces (at most maxAddrBlob address bytes),
// so a peer cannot make it allocate more.
func readCSMsg(r io.Reader, want ...uint8) (csMsg, error) {
	b := make([]byte, csHeaderLen, csHeaderLen+csMACLen+2+maxAddrBlob)
	if _, err := io.ReadFull(r, b); err != nil {
		return csMsg{}, err
	}
	typ, _, err := decodeCSHeader(b, want...)
	if err != nil {
		return csMsg{}, err
	}
	n := csFixedLen(typ)
	b = b[:csHeaderLen+n]
	if _, err := io.ReadFull(r, b[csHeaderLen:]); err != nil {
		return csMsg{}, err
	}
	if typ == csRequest || typ == csAccept {
		alen := int(binary.LittleEndian.Uint16(b[len(b)-2:]))
		if alen == 0 || alen > maxAddrBlob {
			return csMsg{}, fmt.Errorf("address of %d bytes: %w", alen, errHandshake)
		}
		b = b[:len(b)+alen]
		if _, err := io.ReadFull(r, b[len(b)-alen:]); err != nil {
			return csMsg{}, err
		}
	}
	return decodeCSMsg(b, typ)
}

// csMAC returns the MAC of a message with tag over the handshake's values.
func csMAC(key jobkey.HandshakeKey, tag jobkey.Tag, clientID uint64, cnonce, snonce *jobkey.Nonce, addr []byte) jobkey.MAC {
	return key.Prove(tag, cnonce, snonce, binary.LittleEndian.AppendUint64(nil, clientID), addr)
}

// csVerify checks the MAC of a message with tag over the handshake's
// values, in constant time; it fails with jobkey.ErrAuth.
func csVerify(key jobkey.HandshakeKey, mac *jobkey.MAC, tag jobkey.Tag, clientID uint64, cnonce, snonce *jobkey.Nonce, addr []byte) error {
	return key.Verify(mac[:], tag, cnonce, snonce, binary.LittleEndian.AppendUint64(nil, clientID), addr)
}

// deriveCSKey returns the handshake key of a job key (nil: no key).
func deriveCSKey(jobKey []byte) jobkey.HandshakeKey { return jobkey.Derive(jobKey, jobkey.LabelCM) }

// listenerKey returns the handshake key of the context's configured job
// key: UCX_TCP_KEY (under the context's prefix), or else GOSHMEM_KEY, the
// launcher's job key, the same key the tcp transport authenticates with.
// keyed is false when neither is set; the key is then derived from nothing
// and authenticates no one. A key that jobkey.Decode refuses fails with
// ucs.ErrInvalidParam (naming the variable, never the value).
func (c *Context) listenerKey() (key jobkey.HandshakeKey, keyed bool, err error) {
	name := c.componentPrefix("tcp") + "KEY"
	k, _, err := jobkey.Lookup(strings.TrimSpace(ucs.ReadConfig(c.componentPrefix("tcp"), []ucs.ConfigField{{Name: "KEY"}}).Get("KEY")), name)
	if err != nil {
		return nil, false, err
	}
	return deriveCSKey(k), k != nil, nil
}
