package jobkey

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"github.com/goshmem/goshmem/ucs"
)

// The handshakes that prove the job key all work alike: the client sends a
// fresh nonce, the server answers with its own, and each side sends a MAC
// (Prove) over both nonces and everything either side sent, which the
// other checks (Verify) before it trusts anything: a recorded proof is
// worthless against the other side's fresh nonce, both sides prove they
// hold the key, and the key itself never travels. Each protocol proves
// under its own label (Label*), from which its key is derived, and each
// message kind under its own tag, so that no proof made for one protocol
// or one side verifies for another.

// Labels of the protocols that prove the job key; each is distinct, and
// changes when its protocol's MAC input does.
const (
	// LabelTCP is uct/tcp's connection handshake.
	LabelTCP = "goshmem uct/tcp connection handshake v3"
	// LabelCM is uct/tcp's connection manager (ucp's listeners and
	// socket-address endpoints).
	LabelCM = "goshmem uct/tcp connection manager v2"
	// LabelUCPPerf is benchmarks/ucpperf's server socket.
	LabelUCPPerf = "goshmem ucpperf socket v2"
)

// Tag names the message a MAC is sent in.
type Tag byte

// Tags of the MACs of a handshake.
const (
	// ClientProof is the client's proof.
	ClientProof Tag = 'C'
	// ServerProof is the server's proof.
	ServerProof Tag = 'S'
	// ClientConfirm is a client's last word after the server's proof,
	// where a protocol has one (the connection manager's notification).
	ClientConfirm Tag = 'D'
)

// NonceLen and MACLen are the sizes of a nonce and of a MAC.
const (
	NonceLen = 32
	MACLen   = sha256.Size
)

// Nonce is a handshake nonce: random, drawn for one handshake.
type Nonce [NonceLen]byte

// NewNonce returns a fresh random nonce.
func NewNonce() (n Nonce) {
	rand.Read(n[:]) // never fails (it aborts the program first)
	return n
}

// MAC is a proof.
type MAC [MACLen]byte

// ErrAuth is the cause of a proof that does not verify: the peer holds
// another key (or none), or what it proved is not what this side saw.
var ErrAuth = fmt.Errorf("authentication failed (not the same job key): %w", ucs.ErrRejected)

// HandshakeKey is the key of one protocol's proofs, derived from the job
// key and the protocol's label.
type HandshakeKey []byte

// Derive returns the handshake key of the protocol label for jobKey. A nil
// job key gives the key of a side that has none: its MACs then check only
// the integrity of what they cover, and prove nothing.
func Derive(jobKey []byte, label string) HandshakeKey {
	h := hmac.New(sha256.New, jobKey)
	h.Write([]byte("goshmem job key proof\x00"))
	h.Write([]byte(label))
	return h.Sum(nil)
}

// Prove returns the MAC of message tag over the client's and the server's
// nonces and the parts, in order: what the protocol's messages carried
// besides the nonces, as sent. Each part is framed by its length, so that
// bytes cannot move from one to the next.
func (k HandshakeKey) Prove(tag Tag, client, server *Nonce, parts ...[]byte) MAC {
	h := hmac.New(sha256.New, k)
	h.Write([]byte{byte(tag)})
	h.Write(client[:])
	h.Write(server[:])
	var n [4]byte
	for _, p := range parts {
		binary.LittleEndian.PutUint32(n[:], uint32(len(p)))
		h.Write(n[:])
		h.Write(p)
	}
	var m MAC
	h.Sum(m[:0])
	return m
}

// Verify checks mac, as received, against the MAC that Prove gives for the
// same arguments, in constant time; a MAC that differs, or has another
// length, fails with ErrAuth.
func (k HandshakeKey) Verify(mac []byte, tag Tag, client, server *Nonce, parts ...[]byte) error {
	want := k.Prove(tag, client, server, parts...)
	if !hmac.Equal(want[:], mac) {
		return ErrAuth
	}
	return nil
}
