package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/jobkey"
	"github.com/goshmem/goshmem/ucs"
)

// relay copies what a writes to b, and what b writes to a, letting edit
// change each handshake message in flight (by its type); it returns the
// two ends the client and the server use.
func relay(t *testing.T, edit func(typ uint8, msg []byte)) (client, server net.Conn) {
	t.Helper()
	client, c2 := net.Pipe()
	s2, server := net.Pipe()
	t.Cleanup(func() { client.Close(); c2.Close(); s2.Close(); server.Close() })
	pump := func(from, to net.Conn) {
		defer to.Close()
		for {
			hdr := make([]byte, hsHeaderLen)
			if _, err := io.ReadFull(from, hdr); err != nil {
				return
			}
			msg := append(hdr, make([]byte, hsLen(hdr[6])-hsHeaderLen)...)
			if _, err := io.ReadFull(from, msg[hsHeaderLen:]); err != nil {
				return
			}
			edit(hdr[6], msg)
			if _, err := to.Write(msg); err != nil {
				return
			}
		}
	}
	go pump(c2, s2)
	go pump(s2, c2)
	return client, server
}

// TestHandshake runs the handshake between a client and a server: the
// server learns the client's iface id, conn id and flags; its verdict
// reaches the client; and the MACs cover every field either side sent, so
// that a change in flight, or another key, fails it.
func TestHandshake(t *testing.T) {
	key := deriveKey([]byte("the job key, the job key, the job key"))
	otherKey := deriveKey([]byte("not the job key, not the job key"))
	const server = 0x5e4e4
	hello := handshake{ifaceID: server, clientID: 0xc11e47, connID: 0xc044, flags: hsFlagOneWay}
	flip := func(typ uint8, off int) func(uint8, []byte) {
		return func(t uint8, msg []byte) {
			if t == typ {
				msg[off] ^= 1
			}
		}
	}
	tests := []struct {
		name       string
		clientKey  []byte
		verdict    uint8
		edit       func(uint8, []byte)
		clientErr  error // errors.Is; nil: success
		useMine    bool  // the client ends with the server's conn id
		serverFail bool
	}{
		{name: "accept", clientKey: key},
		{name: "use mine", clientKey: key, verdict: hsUseMine, useMine: true, clientErr: ucs.ErrRejected, serverFail: true},
		{name: "other key", clientKey: otherKey, clientErr: ucs.ErrRejected, serverFail: true},
		{name: "client id changed", clientKey: key, edit: flip(hsHello, hsHeaderLen+16), clientErr: ucs.ErrRejected, serverFail: true},
		{name: "flags changed", clientKey: key, edit: flip(hsHello, hsHeaderLen+32), clientErr: ucs.ErrRejected, serverFail: true},
		{name: "conn id changed", clientKey: key, edit: flip(hsHello, hsHeaderLen+24), clientErr: ucs.ErrRejected, serverFail: true},
		{name: "verdict changed", clientKey: key, verdict: hsUseMine, edit: func(typ uint8, msg []byte) {
			if typ == hsChallenge {
				msg[hsHeaderLen+32] = hsAccept
				binary.LittleEndian.PutUint64(msg[hsHeaderLen+40:], 0)
			}
		}, clientErr: ucs.ErrRejected, serverFail: true},
		{name: "proof changed", clientKey: key, edit: flip(hsProof, hsHeaderLen), serverFail: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			edit := tt.edit
			if edit == nil {
				edit = func(uint8, []byte) {}
			}
			c, s := relay(t, edit)
			deadline := time.Now().Add(time.Minute)
			type result struct {
				hello handshake
				err   error
			}
			done := make(chan result, 1)
			go func() {
				h, err := serverHandshake(s, key, server, deadline, func(h *handshake) (uint8, uint64, error) {
					if tt.verdict == hsUseMine {
						return hsUseMine, 0xbeef, nil
					}
					return hsAccept, 0, nil
				})
				s.Close()
				done <- result{h, err}
			}()
			err := clientHandshake(c, tt.clientKey, hello, deadline)
			if tt.clientErr == nil && err != nil || tt.clientErr != nil && !errors.Is(err, tt.clientErr) {
				t.Errorf("client: %v, want %v", err, tt.clientErr)
			}
			var u *useMineError
			if got := errors.As(err, &u); got != tt.useMine || got && u.connID != 0xbeef {
				t.Errorf("client: %v, want use-mine %v of conn 0xbeef", err, tt.useMine)
			}
			c.Close()
			r := <-done
			if (r.err != nil) != tt.serverFail {
				t.Errorf("server: %v, want failure %v", r.err, tt.serverFail)
			}
			if r.err == nil && (r.hello.clientID != hello.clientID || r.hello.connID != hello.connID || r.hello.flags != hello.flags || r.hello.typ != hsHello) {
				t.Errorf("server saw hello %+v, sent %+v", r.hello, hello)
			}
		})
	}
}

// TestHandshakeOldVersion checks that a hello of another version of the
// handshake is refused as soon as its header is read, not after the
// handshake timeout: a job mixing versions fails at once.
func TestHandshakeOldVersion(t *testing.T) {
	logs := captureLog(t)
	b := openIface(t, testMD(t), nil)
	c, err := net.Dial("tcp", b.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	old := make([]byte, hsHeaderLen+8+nonceLen) // a version 1 hsHello
	binary.LittleEndian.PutUint32(old, hsMagic)
	binary.LittleEndian.PutUint16(old[4:], 1)
	old[6] = hsHello
	binary.LittleEndian.PutUint64(old[hsHeaderLen:], b.id)
	c.Write(old)
	start := time.Now()
	c.SetReadDeadline(start.Add(time.Minute))
	if n, err := c.Read(make([]byte, 64)); err == nil {
		t.Fatalf("the iface answered %d bytes to an old hello", n)
	}
	if d := time.Since(start); d >= b.cfg.hsTimeout {
		t.Errorf("refused after %v, the handshake timeout", d)
	}
	// The refusal is counted before it is logged: wait for its line.
	progressUntil(t, func() bool {
		return b.warn.refused.Count() == 1 && strings.Contains(logs.String(), "refused a connection")
	}, b)
	if !strings.Contains(logs.String(), "version 1") {
		t.Errorf("the refusal does not name the version:\n%s", logs)
	}
}

// TestHandshakeTruncated cuts each message of the handshake short and
// closes the connection: the side that waits for it fails at once, with
// no deadline reached, and a server never accepts the client.
func TestHandshakeTruncated(t *testing.T) {
	key := deriveKey([]byte("the job key, the job key, the job key"))
	const server = 0x5e4e4
	hello := handshake{typ: hsHello, ifaceID: server, clientID: 0xc11e47, connID: 0xc044, nonce: jobkey.NewNonce()}
	deadline := time.Now().Add(time.Minute)
	for _, tt := range []struct {
		name string
		typ  uint8 // the message cut short
	}{{"hello", hsHello}, {"challenge", hsChallenge}, {"proof", hsProof}} {
		for _, n := range []int{1, hsHeaderLen, hsLen(tt.typ) - 1} {
			t.Run(fmt.Sprintf("%s/%d bytes", tt.name, n), func(t *testing.T) {
				c, s := net.Pipe()
				defer c.Close()
				defer s.Close()
				done := make(chan error, 1)
				if tt.typ == hsChallenge {
					// A server that sends part of its challenge.
					go func() {
						h, err := readHello(s)
						ch := handshake{typ: hsChallenge, nonce: jobkey.NewNonce()}
						ch.mac = newTranscript(&h, &ch).mac(key, jobkey.ServerProof)
						s.Write(ch.encode()[:n])
						s.Close()
						done <- err
					}()
					err := clientHandshake(c, key, hello, deadline)
					if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
						t.Errorf("client: %v, want a failure before the deadline", err)
					}
					if err := <-done; err != nil {
						t.Fatalf("the server's side: %v", err)
					}
					return
				}
				go func() {
					_, err := serverHandshake(s, key, server, deadline, nil)
					done <- err
				}()
				if tt.typ == hsHello {
					c.Write(hello.encode()[:n])
				} else {
					c.Write(hello.encode())
					ch, err := readHandshake(c, hsChallenge)
					if err != nil {
						t.Fatalf("challenge: %v", err)
					}
					proof := handshake{typ: hsProof, mac: newTranscript(&hello, &ch).mac(key, jobkey.ClientProof)}
					c.Write(proof.encode()[:n])
				}
				c.Close()
				if err := <-done; err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
					t.Errorf("server: %v, want a failure before the deadline", err)
				}
			})
		}
	}
}
