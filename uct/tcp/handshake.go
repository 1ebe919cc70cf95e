package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/goshmem/goshmem/internal/jobkey"
	"github.com/goshmem/goshmem/ucs"
)

// The handshake has three messages, all little-endian with the header
//
//	0  magic   uint32  "GSTH"
//	4  version uint16  3
//	6  type    uint8   hsHello, hsHelloEP, hsChallenge or hsProof
//	7  (zero)  uint8
//
// followed by
//
//	hsHello, hsHelloEP (client):
//	  0  iface id  uint64    the iface the client means to reach (not 0)
//	  8  ep id     uint64    hsHelloEP: the unconnected EP of that iface the
//	                         client means to bind to (not 0, see epconn.go);
//	                         hsHello: 0
//	  16 client id uint64    the id of the client's own iface (not 0)
//	  24 conn id   uint64    a random id of the connection, the client's (not 0)
//	  32 flags     uint8     hsFlagOneWay; the other bits zero
//	  33 (zero)    7 bytes
//	  40 nonce     [32]byte  the client nonce
//	hsChallenge (server):
//	  0  nonce     [32]byte  the server nonce
//	  32 verdict   uint8     hsAccept or hsUseMine
//	  33 (zero)    7 bytes
//	  40 conn id   uint64    hsUseMine: the conn id of a connection that the
//	                         server's iface dialed to the client's iface, which
//	                         the client is to use instead (not 0); hsAccept: 0
//	  48 MAC       [32]byte  the server MAC
//	hsProof (client):
//	  0  MAC       [32]byte  the client MAC
//
// The server MAC is the job key's proof (internal/jobkey, label
// jobkey.LabelTCP) with tag jobkey.ServerProof over both nonces, the whole
// hello message and the challenge message up to its MAC; the client MAC
// the same with tag jobkey.ClientProof. Each side checks the other's MAC,
// so both prove they know the job key, everything either side sent is
// covered (the client's iface id and flags included), and the server's
// fresh nonce keeps a recorded proof from being replayed. A client answered hsUseMine sends no
// proof: both sides close that connection.
const (
	hsHello     uint8 = 1
	hsChallenge uint8 = 2
	hsProof     uint8 = 3
	hsHelloEP   uint8 = 4

	hsHeaderLen = 8
	nonceLen    = jobkey.NonceLen
	macLen      = jobkey.MACLen
	hsVersion   = 3
	// hsHelloLen is the length of both hellos, hsChallengeLen that of a
	// challenge.
	hsHelloLen     = hsHeaderLen + 40 + nonceLen
	hsChallengeLen = hsHeaderLen + nonceLen + 16 + macLen
)

// Hello flags.
const (
	// hsFlagOneWay: the connection carries the client's frames and the
	// answers to them only (a connection to an EP, see epconn.go).
	hsFlagOneWay uint8 = 1 << 0
)

// Challenge verdicts.
const (
	hsAccept  uint8 = 0 // the handshake goes on: the client proves itself
	hsUseMine uint8 = 1 // the client is to use the server's connection connID instead
)

const hsMagic uint32 = 0x48545347 // "GSTH"

// hsLen returns the length of a handshake message of type typ.
func hsLen(typ uint8) int {
	switch typ {
	case hsHello, hsHelloEP:
		return hsHelloLen
	case hsChallenge:
		return hsChallengeLen
	case hsProof:
		return hsHeaderLen + macLen
	}
	return 0
}

// handshake is a decoded handshake message; the fields a type lacks are
// zero.
type handshake struct {
	typ      uint8
	ifaceID  uint64 // hellos: the server's iface
	epID     uint64 // hsHelloEP
	clientID uint64 // hellos: the client's iface
	connID   uint64 // hellos: the client's id of the connection; hsUseMine: the server's
	flags    uint8  // hellos
	verdict  uint8  // hsChallenge
	nonce    jobkey.Nonce
	mac      jobkey.MAC
}

func (m *handshake) encode() []byte {
	b := make([]byte, hsLen(m.typ))
	binary.LittleEndian.PutUint32(b, hsMagic)
	binary.LittleEndian.PutUint16(b[4:], hsVersion)
	b[6] = m.typ
	p := b[hsHeaderLen:]
	switch m.typ {
	case hsHello, hsHelloEP:
		binary.LittleEndian.PutUint64(p, m.ifaceID)
		binary.LittleEndian.PutUint64(p[8:], m.epID)
		binary.LittleEndian.PutUint64(p[16:], m.clientID)
		binary.LittleEndian.PutUint64(p[24:], m.connID)
		p[32] = m.flags
		copy(p[40:], m.nonce[:])
	case hsChallenge:
		copy(p, m.nonce[:])
		p[32] = m.verdict
		binary.LittleEndian.PutUint64(p[40:], m.connID)
		copy(p[48:], m.mac[:])
	case hsProof:
		copy(p, m.mac[:])
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
	case hsHello, hsHelloEP:
		m.ifaceID = binary.LittleEndian.Uint64(p)
		m.epID = binary.LittleEndian.Uint64(p[8:])
		m.clientID = binary.LittleEndian.Uint64(p[16:])
		m.connID = binary.LittleEndian.Uint64(p[24:])
		m.flags = p[32]
		copy(m.nonce[:], p[40:])
		switch {
		case m.ifaceID == 0 || m.clientID == 0 || m.connID == 0:
			return bad("zero iface, client or conn id")
		case (typ == hsHelloEP) != (m.epID != 0):
			return bad("ep id %#x in a hello of type %d", m.epID, typ)
		case m.flags&^hsFlagOneWay != 0 || binary.LittleEndian.Uint64(p[32:])>>8 != 0:
			return bad("reserved flags set")
		}
	case hsChallenge:
		copy(m.nonce[:], p)
		m.verdict = p[32]
		m.connID = binary.LittleEndian.Uint64(p[40:])
		copy(m.mac[:], p[48:])
		switch {
		case binary.LittleEndian.Uint64(p[32:])>>8 != 0:
			return bad("reserved bits set")
		case m.verdict > hsUseMine:
			return bad("verdict %d", m.verdict)
		case (m.verdict == hsUseMine) != (m.connID != 0):
			return bad("conn id %#x with verdict %d", m.connID, m.verdict)
		}
	case hsProof:
		copy(m.mac[:], p)
	}
	return m, nil
}

// deriveKey returns the handshake key of a job key.
func deriveKey(jobKey []byte) jobkey.HandshakeKey { return jobkey.Derive(jobKey, jobkey.LabelTCP) }

// transcript is what the MACs cover: the hello message and the challenge
// up to its MAC, as sent, and their nonces.
type transcript struct {
	hello, challenge []byte
	cn, sn           *jobkey.Nonce
}

// newTranscript encodes the hello and the challenge (whose MAC is left
// out).
func newTranscript(hello, ch *handshake) transcript {
	c := ch.encode()
	return transcript{hello: hello.encode(), challenge: c[:len(c)-macLen], cn: &hello.nonce, sn: &ch.nonce}
}

// mac is the MAC of message tag over the transcript.
func (t transcript) mac(key jobkey.HandshakeKey, tag jobkey.Tag) jobkey.MAC {
	return key.Prove(tag, t.cn, t.sn, t.hello, t.challenge)
}

// verify checks the MAC of message tag over the transcript.
func (t transcript) verify(key jobkey.HandshakeKey, tag jobkey.Tag, mac *jobkey.MAC) error {
	return key.Verify(mac[:], tag, t.cn, t.sn, t.hello, t.challenge)
}

// readHandshake reads and decodes one message of type typ.
func readHandshake(r io.Reader, typ uint8) (handshake, error) {
	b := make([]byte, hsLen(typ))
	if _, err := io.ReadFull(r, b); err != nil {
		return handshake{}, err
	}
	return decodeHandshake(b, typ)
}

// errNoChallenge marks a client handshake that the server ended before it
// answered the hello: it refused it, or it was too busy (its handshake
// timeout ran out, or newer connections evicted this one; see accept.go).
// The client cannot tell which, so it tries again a few times (dial).
var errNoChallenge = errors.New("no challenge")

// useMineError is how a client handshake ends that the server answered
// with hsUseMine: the client is to use the server's connection connID to
// it instead.
type useMineError struct{ connID uint64 }

func (e *useMineError) Error() string {
	return fmt.Sprintf("the peer iface asks to use its connection %#x instead", e.connID)
}

// Unwrap makes a useMineError a refusal to a caller that does not act on it.
func (e *useMineError) Unwrap() error { return ucs.ErrRejected }

// clientHandshake runs the client side on c, which must reach the iface
// with id hello.ifaceID, before deadline. hello gives the iface ids, the
// ep id of an hsHelloEP, the conn id and the flags; its type, when 0, is
// hsHello, or hsHelloEP for a non-zero ep id, and its nonce is drawn here.
// A server that answers hsUseMine ends it with a *useMineError, once its
// MAC verified.
func clientHandshake(c net.Conn, key jobkey.HandshakeKey, hello handshake, deadline time.Time) error {
	c.SetDeadline(deadline)
	defer c.SetDeadline(time.Time{})
	hello.typ = hsHello
	if hello.epID != 0 {
		hello.typ = hsHelloEP
	}
	hello.nonce = jobkey.NewNonce()
	if _, err := c.Write(hello.encode()); err != nil {
		return err
	}
	ch, err := readHandshake(c, hsChallenge)
	if err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return fmt.Errorf("the peer closed the connection (another iface, an unknown ep, or another job key): %w: %w", ucs.ErrRejected, errNoChallenge)
		}
		if errors.Is(err, syscall.ECONNRESET) {
			return fmt.Errorf("%w: %w", err, errNoChallenge)
		}
		return err
	}
	t := newTranscript(&hello, &ch)
	if err := t.verify(key, jobkey.ServerProof, &ch.mac); err != nil {
		return err
	}
	if ch.verdict == hsUseMine {
		return &useMineError{connID: ch.connID}
	}
	proof := handshake{typ: hsProof, mac: t.mac(key, jobkey.ClientProof)}
	_, err = c.Write(proof.encode())
	return err
}

// readHello reads a client's first message, hsHello or hsHelloEP. A header
// that is not one fails before the rest is read: a stranger that sends
// something else is refused at once.
func readHello(r io.Reader) (handshake, error) {
	b := make([]byte, hsHelloLen)
	if _, err := io.ReadFull(r, b[:hsHeaderLen]); err != nil {
		return handshake{}, err
	}
	typ := b[6]
	if typ != hsHello && typ != hsHelloEP {
		typ = hsHello // decodeHandshake reports the wrong type
	}
	if binary.LittleEndian.Uint32(b) != hsMagic || binary.LittleEndian.Uint16(b[4:]) != hsVersion || b[6] != typ {
		return decodeHandshake(b, typ) // fails on the header
	}
	if _, err := io.ReadFull(r, b[hsHeaderLen:]); err != nil {
		return handshake{}, err
	}
	return decodeHandshake(b, typ)
}

// serverHandshake runs the server side on c for the iface with id ifaceID,
// before deadline, and returns the client's hello. Once the hello is read
// and names this iface, decide (when not nil) says how to answer it: an
// error refuses the client before the challenge; hsUseMine with a conn id
// sends it the challenge with that verdict, and the handshake ends with a
// *useMineError; hsAccept goes on. Without decide, a client naming an EP
// (hsHelloEP) is refused and the rest accepted.
func serverHandshake(c net.Conn, key jobkey.HandshakeKey, ifaceID uint64, deadline time.Time, decide func(hello *handshake) (verdict uint8, connID uint64, err error)) (handshake, error) {
	c.SetDeadline(deadline)
	defer c.SetDeadline(time.Time{})
	hello, err := readHello(c)
	if err != nil {
		return hello, err
	}
	if hello.ifaceID != ifaceID {
		return hello, fmt.Errorf("hello for iface %#x, this is %#x: %w", hello.ifaceID, ifaceID, ucs.ErrRejected)
	}
	ch := handshake{typ: hsChallenge, verdict: hsAccept}
	switch {
	case decide != nil:
		if ch.verdict, ch.connID, err = decide(&hello); err != nil {
			return hello, err
		}
	case hello.typ == hsHelloEP:
		return hello, fmt.Errorf("hello for ep %#x: %w", hello.epID, ucs.ErrRejected)
	}
	ch.nonce = jobkey.NewNonce()
	t := newTranscript(&hello, &ch)
	ch.mac = t.mac(key, jobkey.ServerProof)
	if _, err := c.Write(ch.encode()); err != nil {
		return hello, err
	}
	if ch.verdict == hsUseMine {
		return hello, &useMineError{connID: ch.connID}
	}
	proof, err := readHandshake(c, hsProof)
	if err != nil {
		return hello, err
	}
	return hello, t.verify(key, jobkey.ClientProof, &proof.mac)
}
