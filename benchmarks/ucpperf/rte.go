package main

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/goshmem/goshmem/bootstrap"
)

// rte is how the two processes of a test find each other and synchronize:
// the job's bootstrap under goshmem-run, or a TCP socket between a server
// and a client (ucx_perftest's mode).
type rte interface {
	// client reports whether this process measures and prints (rank 0).
	client() bool
	// exchange sends blob to the peer and returns the peer's.
	exchange(blob []byte) ([]byte, error)
	// barrier returns once both processes called it.
	barrier() error
	close()
}

// jobRTE is a job of two PEs started by goshmem-run.
type jobRTE struct{ m *bootstrap.Member }

func newJobRTE() (*jobRTE, error) {
	m, err := bootstrap.JoinFromOS()
	if err != nil {
		return nil, fmt.Errorf("join the job: %w", err)
	}
	if m.Size() != 2 {
		m.Close()
		return nil, fmt.Errorf("a job of %d PEs: ucpperf runs as 2 PEs (rank 0 measures, rank 1 answers)", m.Size())
	}
	return &jobRTE{m: m}, nil
}

func (j *jobRTE) client() bool { return j.m.Rank() == 0 }

func (j *jobRTE) exchange(blob []byte) ([]byte, error) {
	all, err := j.m.Allgather(blob)
	if err != nil {
		return nil, err
	}
	return all[1-j.m.Rank()], nil
}

func (j *jobRTE) barrier() error { return j.m.Barrier() }
func (j *jobRTE) close()         { j.m.Close() }

// sockRTE is a server and a client connected by one TCP socket. Messages
// are frames: a 4-byte little-endian length, then the bytes.
type sockRTE struct {
	conn     net.Conn
	isClient bool
}

// maxFrame bounds what a peer may announce on the socket.
const maxFrame = 1 << 20

func (s *sockRTE) client() bool { return s.isClient }

func (s *sockRTE) send(b []byte) error {
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(len(b)))
	if _, err := s.conn.Write(append(n[:], b...)); err != nil {
		return fmt.Errorf("send to the peer: %w", err)
	}
	return nil
}

func (s *sockRTE) recv() ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(s.conn, n[:]); err != nil {
		return nil, fmt.Errorf("receive from the peer: %w", err)
	}
	l := binary.LittleEndian.Uint32(n[:])
	if l > maxFrame {
		return nil, fmt.Errorf("the peer sent a frame of %d bytes", l)
	}
	b := make([]byte, l)
	if _, err := io.ReadFull(s.conn, b); err != nil {
		return nil, fmt.Errorf("receive from the peer: %w", err)
	}
	return b, nil
}

func (s *sockRTE) exchange(blob []byte) ([]byte, error) {
	if err := s.send(blob); err != nil {
		return nil, err
	}
	return s.recv()
}

func (s *sockRTE) barrier() error {
	b, err := s.exchange([]byte{'b'})
	if err == nil && (len(b) != 1 || b[0] != 'b') {
		err = errors.New("the peer is out of step (barrier)")
	}
	return err
}

func (s *sockRTE) close() { s.conn.Close() }

// The socket's authentication, when GOSHMEM_KEY is set: each side proves it
// has the key with an HMAC-SHA256 over both sides' random nonces.
const nonceLen = 32

func proof(key []byte, who string, a, b []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("ucpperf " + who))
	m.Write(a)
	m.Write(b)
	return m.Sum(nil)
}

func nonce() ([]byte, error) {
	b := make([]byte, nonceLen)
	_, err := rand.Read(b)
	return b, err
}

// authenticate runs the handshake on a new connection.
func (s *sockRTE) authenticate(key []byte) error {
	if s.isClient {
		ns, err := s.recv()
		if err != nil || len(ns) != nonceLen {
			return fmt.Errorf("authentication: server nonce: %v", err)
		}
		nc, err := nonce()
		if err != nil {
			return err
		}
		if err := s.send(append(nc, proof(key, "client", ns, nc)...)); err != nil {
			return err
		}
		p, err := s.recv()
		if err != nil {
			return fmt.Errorf("authentication: %w", err)
		}
		if !hmac.Equal(p, proof(key, "server", nc, ns)) {
			return errors.New("authentication: the server does not have GOSHMEM_KEY")
		}
		return nil
	}
	ns, err := nonce()
	if err != nil {
		return err
	}
	if err := s.send(ns); err != nil {
		return err
	}
	m, err := s.recv()
	if err != nil || len(m) != nonceLen+sha256.Size {
		return fmt.Errorf("authentication: client proof: %v", err)
	}
	nc := m[:nonceLen]
	if !hmac.Equal(m[nonceLen:], proof(key, "client", ns, nc)) {
		return errors.New("authentication: the client does not have GOSHMEM_KEY")
	}
	return s.send(proof(key, "server", nc, ns))
}

// socketKey returns the key that authenticates the socket: GOSHMEM_KEY's,
// or nil when it is not set.
func socketKey() ([]byte, error) {
	v := os.Getenv(bootstrap.EnvKey)
	if v == "" {
		return nil, nil
	}
	k, err := bootstrap.DecodeKey(v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", bootstrap.EnvKey, err)
	}
	return k, nil
}

// serve waits on addr:port for one client, authenticates it when GOSHMEM_KEY
// is set, and, when it is not, hands it a fresh key for the tcp transport
// (UCX_TCP_KEY), which both sides must share.
func serve(addr string, port int, key []byte, logf func(string, ...any)) (*sockRTE, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, fmt.Sprint(port)))
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	logf("Waiting for connection...")
	for {
		c, err := ln.Accept()
		if err != nil {
			return nil, err
		}
		s := &sockRTE{conn: c}
		if key != nil {
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if err := s.authenticate(key); err != nil {
				logf("Rejected connection from %s: %v", c.RemoteAddr(), err)
				c.Close()
				continue
			}
			c.SetDeadline(time.Time{})
		}
		logf("Accepted connection from %s", c.RemoteAddr())
		tcpKey := []byte{}
		if key == nil && os.Getenv("UCX_TCP_KEY") == "" {
			k := make([]byte, 32)
			if _, err := rand.Read(k); err != nil {
				c.Close()
				return nil, err
			}
			tcpKey = []byte(base64.StdEncoding.EncodeToString(k))
			os.Setenv("UCX_TCP_KEY", string(tcpKey))
		}
		if err := s.send(tcpKey); err != nil {
			c.Close()
			return nil, err
		}
		return s, nil
	}
}

// dialRetry is how long a client retries a refused connection (a loaded
// machine may take seconds to start the server).
const dialRetry = 30 * time.Second

// dial connects to the server at host:port, authenticates when GOSHMEM_KEY
// is set, and takes the tcp transport's key the server hands over.
func dial(host string, port int, key []byte) (*sockRTE, error) {
	// A server started just before may not listen yet: retry for a while.
	addr := net.JoinHostPort(host, fmt.Sprint(port))
	deadline := time.Now().Add(dialRetry)
	var c net.Conn
	var err error
	for {
		c, err = net.DialTimeout("tcp", addr, 10*time.Second)
		if err == nil || !errors.Is(err, syscall.ECONNREFUSED) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		return nil, err
	}
	s := &sockRTE{conn: c, isClient: true}
	if key != nil {
		if err := s.authenticate(key); err != nil {
			c.Close()
			return nil, err
		}
	}
	tcpKey, err := s.recv()
	if err != nil {
		c.Close()
		return nil, err
	}
	if len(tcpKey) > 0 {
		os.Setenv("UCX_TCP_KEY", string(tcpKey))
	}
	return s, nil
}
