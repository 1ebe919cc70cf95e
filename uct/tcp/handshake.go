package tcp

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/goshmem/goshmem/ucs"
)

// The handshake has three messages, all little-endian with the header
//
//	0  magic   uint32  "GSTH"
//	4  version uint16  1
//	6  type    uint8   hsHello, hsChallenge or hsProof
//	7  (zero)  uint8
//
// followed by
//
//	hsHello (client):     iface id uint64 (of the iface the client means to
//	                      reach), client nonce [32]byte
//	hsChallenge (server): server nonce [32]byte, server MAC [32]byte
//	hsProof (client):     client MAC [32]byte
//	hsHelloEP (client):   iface id uint64, ep id uint64 (of the unconnected
//	                      EP the client means to bind to, see epconn.go),
//	                      client nonce [32]byte; in place of hsHello
//
// where the server MAC is HMAC-SHA256(k, "S" || iface id || client nonce ||
// server nonce) (with the ep id after the iface id when the client sent
// hsHelloEP), the client MAC the same with "C", and k the handshake key
// derived from the job key (see deriveKey). Each side checks the other's
// MAC, so both prove they know the job key, and the server's fresh nonce
// keeps a recorded proof from being replayed.
const (
	hsHello     uint8 = 1
	hsChallenge uint8 = 2
	hsProof     uint8 = 3
	hsHelloEP   uint8 = 4

	hsHeaderLen = 8
	nonceLen    = 32
	macLen      = sha256.Size
	hsVersion   = 1
)

const hsMagic uint32 = 0x48545347 // "GSTH"

// hsLen returns the length of a handshake message of type typ.
func hsLen(typ uint8) int {
	switch typ {
	case hsHello:
		return hsHeaderLen + 8 + nonceLen
	case hsChallenge:
		return hsHeaderLen + nonceLen + macLen
	case hsProof:
		return hsHeaderLen + macLen
	case hsHelloEP:
		return hsHeaderLen + 16 + nonceLen
	}
	return 0
}

// handshake is a decoded handshake message; the fields a type lacks are
// zero.
type handshake struct {
	typ     uint8
	ifaceID uint64
	epID    uint64 // hsHelloEP only
	nonce   [nonceLen]byte
	mac     [macLen]byte
}

func (m *handshake) encode() []byte {
	b := make([]byte, hsLen(m.typ))
	binary.LittleEndian.PutUint32(b, hsMagic)
	binary.LittleEndian.PutUint16(b[4:], hsVersion)
	b[6] = m.typ
	p := b[hsHeaderLen:]
	switch m.typ {
	case hsHello:
		binary.LittleEndian.PutUint64(p, m.ifaceID)
		copy(p[8:], m.nonce[:])
	case hsChallenge:
		copy(p, m.nonce[:])
		copy(p[nonceLen:], m.mac[:])
	case hsProof:
		copy(p, m.mac[:])
	case hsHelloEP:
		binary.LittleEndian.PutUint64(p, m.ifaceID)
		binary.LittleEndian.PutUint64(p[8:], m.epID)
		copy(p[16:], m.nonce[:])
	}
	return b
}

// decodeHandshake decodes a handshake message that must be of type typ;
// anything else fails with ucs.ErrInvalidParam.
func decodeHandshake(b []byte, typ uint8) (handshake, error) {
	bad := func(why string, args ...any) (handshake, error) {
		return handshake{}, fmt.Errorf("uct/tcp: handshake: %s: %w", fmt.Sprintf(why, args...), ucs.ErrInvalidParam)
	}
	n := hsLen(typ)
	if n == 0 {
		return bad("type %d", typ)
	}
	if len(b) != n {
		return bad("%d bytes, want %d", len(b), n)
	}
	if m := binary.LittleEndian.Uint32(b); m != hsMagic {
		return bad("magic %#x", m)
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != hsVersion {
		return bad("version %d", v)
	}
	if b[6] != typ {
		return bad("type %d, want %d", b[6], typ)
	}
	if b[7] != 0 {
		return bad("reserved bits set")
	}
	m := handshake{typ: typ}
	p := b[hsHeaderLen:]
	switch typ {
	case hsHello:
		m.ifaceID = binary.LittleEndian.Uint64(p)
		copy(m.nonce[:], p[8:])
		if m.ifaceID == 0 {
			return bad("zero iface id")
		}
	case hsChallenge:
		copy(m.nonce[:], p)
		copy(m.mac[:], p[nonceLen:])
	case hsProof:
		copy(m.mac[:], p)
	case hsHelloEP:
		m.ifaceID = binary.LittleEndian.Uint64(p)
		m.epID = binary.LittleEndian.Uint64(p[8:])
		copy(m.nonce[:], p[16:])
		if m.ifaceID == 0 || m.epID == 0 {
			return bad("zero iface or ep id")
		}
	}
	return m, nil
}

// deriveKey returns the handshake key of a job key.
func deriveKey(jobKey []byte) []byte {
	h := hmac.New(sha256.New, jobKey)
	h.Write([]byte("goshmem uct/tcp handshake v1"))
	return h.Sum(nil)
}

// handshakeMACEP is the MAC of side ('C' or 'S') over the handshake values
// and the ep id of an hsHelloEP (0 for hsHello, which leaves it out).
func handshakeMACEP(key []byte, side byte, ifaceID, epID uint64, cnonce, snonce *[nonceLen]byte) [macLen]byte {
	h := hmac.New(sha256.New, key)
	var b [17]byte
	b[0] = side
	binary.LittleEndian.PutUint64(b[1:], ifaceID)
	if epID != 0 {
		binary.LittleEndian.PutUint64(b[9:], epID)
		h.Write(b[:])
	} else {
		h.Write(b[:9])
	}
	h.Write(cnonce[:])
	h.Write(snonce[:])
	var mac [macLen]byte
	h.Sum(mac[:0])
	return mac
}

// readHandshake reads and decodes one message of type typ.
func readHandshake(r io.Reader, typ uint8) (handshake, error) {
	b := make([]byte, hsLen(typ))
	if _, err := io.ReadFull(r, b); err != nil {
		return handshake{}, err
	}
	return decodeHandshake(b, typ)
}

// errAuth is the cause of a handshake whose MAC does not verify.
var errAuth = fmt.Errorf("authentication failed (not the same job key): %w", ucs.ErrRejected)

// clientHandshake runs the client side on c, which must reach the iface
// with id ifaceID, before deadline.
func clientHandshake(c net.Conn, key []byte, ifaceID uint64, deadline time.Time) error {
	return clientHandshakeEP(c, key, ifaceID, 0, deadline)
}

// clientHandshakeEP is clientHandshake naming, when epID is not 0, the
// unconnected EP with that id on the peer iface (hsHelloEP).
func clientHandshakeEP(c net.Conn, key []byte, ifaceID, epID uint64, deadline time.Time) error {
	c.SetDeadline(deadline)
	defer c.SetDeadline(time.Time{})
	hello := handshake{typ: hsHello, ifaceID: ifaceID}
	if epID != 0 {
		hello.typ, hello.epID = hsHelloEP, epID
	}
	rand.Read(hello.nonce[:])
	if _, err := c.Write(hello.encode()); err != nil {
		return err
	}
	ch, err := readHandshake(c, hsChallenge)
	if err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return fmt.Errorf("the peer closed the connection (another iface, an unknown ep, or another job key): %w", ucs.ErrRejected)
		}
		return err
	}
	want := handshakeMACEP(key, 'S', ifaceID, epID, &hello.nonce, &ch.nonce)
	if !hmac.Equal(want[:], ch.mac[:]) {
		return errAuth
	}
	proof := handshake{typ: hsProof, mac: handshakeMACEP(key, 'C', ifaceID, epID, &hello.nonce, &ch.nonce)}
	_, err = c.Write(proof.encode())
	return err
}

// serverHandshake runs the server side on c for the iface with id ifaceID,
// before deadline. A client naming an EP (hsHelloEP) is refused.
func serverHandshake(c net.Conn, key []byte, ifaceID uint64, deadline time.Time) error {
	_, err := serverHandshakeEP(c, key, ifaceID, deadline, nil)
	return err
}

// readHello reads a client's first message, hsHello or hsHelloEP.
func readHello(r io.Reader) (handshake, error) {
	b := make([]byte, hsLen(hsHelloEP))
	if _, err := io.ReadFull(r, b[:hsHeaderLen]); err != nil {
		return handshake{}, err
	}
	typ := b[6]
	if typ != hsHello && typ != hsHelloEP {
		typ = hsHello // decodeHandshake reports the wrong type
	}
	b = b[:hsLen(typ)]
	if _, err := io.ReadFull(r, b[hsHeaderLen:]); err != nil {
		return handshake{}, err
	}
	return decodeHandshake(b, typ)
}

// serverHandshakeEP runs the server side on c for the iface with id
// ifaceID, before deadline, and returns the ep id the client named (0 for
// a plain hsHello). A client naming an ep id is refused, before the
// challenge, unless checkEP (when not nil) accepts the id.
func serverHandshakeEP(c net.Conn, key []byte, ifaceID uint64, deadline time.Time, checkEP func(epID uint64) error) (uint64, error) {
	c.SetDeadline(deadline)
	defer c.SetDeadline(time.Time{})
	hello, err := readHello(c)
	if err != nil {
		return 0, err
	}
	if hello.ifaceID != ifaceID {
		return 0, fmt.Errorf("hello for iface %#x, this is %#x: %w", hello.ifaceID, ifaceID, ucs.ErrRejected)
	}
	if hello.typ == hsHelloEP {
		if checkEP == nil {
			return 0, fmt.Errorf("hello for ep %#x: %w", hello.epID, ucs.ErrRejected)
		}
		if err := checkEP(hello.epID); err != nil {
			return 0, err
		}
	}
	ch := handshake{typ: hsChallenge}
	rand.Read(ch.nonce[:])
	ch.mac = handshakeMACEP(key, 'S', ifaceID, hello.epID, &hello.nonce, &ch.nonce)
	if _, err := c.Write(ch.encode()); err != nil {
		return 0, err
	}
	proof, err := readHandshake(c, hsProof)
	if err != nil {
		return 0, err
	}
	want := handshakeMACEP(key, 'C', ifaceID, hello.epID, &hello.nonce, &ch.nonce)
	if !hmac.Equal(want[:], proof.mac[:]) {
		return 0, errAuth
	}
	return hello.epID, nil
}
