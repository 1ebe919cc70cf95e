package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/bootstrap"
	"github.com/goshmem/goshmem/internal/admit"
	"github.com/goshmem/goshmem/internal/jobkey"
	"github.com/goshmem/goshmem/ucs"
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
	// peerGone reports whether the peer is known to have ended; a wait
	// for it then fails.
	peerGone() bool
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

// peerGone is false: the launcher ends a job one of whose PEs ended.
func (j *jobRTE) peerGone() bool { return false }
func (j *jobRTE) close()         { j.m.Close() }

// loopRTE is the loopback mode (-l): one process, whose endpoint leads to
// its own worker, is the client and its own peer.
type loopRTE struct{}

func (loopRTE) client() bool                         { return true }
func (loopRTE) exchange(blob []byte) ([]byte, error) { return blob, nil }
func (loopRTE) barrier() error                       { return nil }
func (loopRTE) peerGone() bool                       { return false }
func (loopRTE) close()                               {}

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
		return nil, fmt.Errorf("the peer sent a frame of %d bytes, more than %d", l, maxFrame)
	}
	b := make([]byte, l)
	if _, err := io.ReadFull(s.conn, b); err != nil {
		return nil, fmt.Errorf("receive from the peer: %w", err)
	}
	return b, nil
}

// waitReadable blocks its goroutine's thread in poll(2) until the socket
// has bytes, or ended or failed: not in the runtime's network poller, and
// without a deadline (barrier waits with it). A
// side pinned to one CPU (GOMAXPROCS 1) keeps serving its worker while it
// waits at a barrier (serveWhile: poll, yield, poll), and the runtime looks
// at its network poller only when no goroutine is runnable: the barrier's
// message was seen when sysmon looked, up to 10 ms late, a stall at the
// start of every measured phase (tag_bw of 10,000 messages took 15 ms on
// the sending side, 2 ms on the receiving one). A thread back from a
// system call runs at the next yield.
func (s *sockRTE) waitReadable() error {
	rc, err := s.conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		return err
	}
	var perr error
	if err := rc.Read(func(fd uintptr) bool {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			_, perr = unix.Poll(fds, -1)
			if perr != unix.EINTR {
				return true
			}
		}
	}); err != nil {
		return err
	}
	return perr
}

func (s *sockRTE) exchange(blob []byte) ([]byte, error) {
	if err := s.send(blob); err != nil {
		return nil, err
	}
	return s.recv()
}

func (s *sockRTE) barrier() error {
	if err := s.send([]byte{'b'}); err != nil {
		return err
	}
	// After the handshake, so past its deadlines, which poll(2) does not
	// honour.
	if err := s.waitReadable(); err != nil {
		return fmt.Errorf("barrier: %w", err)
	}
	b, err := s.recv()
	if err == nil && (len(b) != 1 || b[0] != 'b') {
		err = errors.New("the peer is out of step (barrier)")
	}
	return err
}

func (s *sockRTE) close() { s.conn.Close() }

// The socket's authentication: the server sends its nonce; the client
// answers with its own and its proof, and the server with its proof, each
// the job key's proof (internal/jobkey, label jobkey.LabelUCPPerf) over
// both nonces; nothing secret crosses the socket.
const nonceLen = jobkey.NonceLen

// authenticate runs the handshake on a new connection.
func (s *sockRTE) authenticate(jobKey []byte) error {
	key := jobkey.Derive(jobKey, jobkey.LabelUCPPerf)
	if s.isClient {
		m, err := s.recv()
		if err != nil {
			return fmt.Errorf("authentication: server nonce: %w", err)
		}
		if len(m) != nonceLen {
			return fmt.Errorf("authentication: a server nonce of %d bytes", len(m))
		}
		ns, nc := jobkey.Nonce(m), jobkey.NewNonce()
		proof := key.Prove(jobkey.ClientProof, &nc, &ns)
		if err := s.send(append(nc[:], proof[:]...)); err != nil {
			return err
		}
		p, err := s.recv()
		if errors.Is(err, io.EOF) {
			return errors.New("authentication: the server closed the connection (it has another key?)")
		}
		if err != nil {
			return fmt.Errorf("authentication: %w", err)
		}
		if err := key.Verify(p, jobkey.ServerProof, &nc, &ns); err != nil {
			return fmt.Errorf("authentication: the server does not have this key: %w", err)
		}
		return nil
	}
	ns := jobkey.NewNonce()
	if err := s.send(ns[:]); err != nil {
		return err
	}
	m, err := s.recv()
	if err != nil {
		return fmt.Errorf("authentication: client proof: %w", err)
	}
	if len(m) != nonceLen+jobkey.MACLen {
		return fmt.Errorf("authentication: a client proof of %d bytes", len(m))
	}
	nc := jobkey.Nonce(m[:nonceLen])
	if err := key.Verify(m[nonceLen:], jobkey.ClientProof, &nc, &ns); err != nil {
		return fmt.Errorf("authentication: the client does not have the key: %w", err)
	}
	proof := key.Prove(jobkey.ServerProof, &nc, &ns)
	return s.send(proof[:])
}

// socketKey returns the key that authenticates the socket, and the name of
// the variable it came from: the job key as the tcp transport takes it
// (jobkey.Lookup: UCX_TCP_KEY, or else GOSHMEM_KEY); nil when neither is
// set.
func socketKey() (key []byte, from string, err error) {
	return jobkey.Lookup(os.Getenv(tcpKeyVar), tcpKeyVar)
}

// tcpKeyVar is the tcp transport's own key variable.
const tcpKeyVar = "UCX_TCP_KEY"

// serverKey returns the key of a server: socketKey's, or, when none is
// set, a fresh one that it sets as GOSHMEM_KEY (which the tcp transport
// then takes too) and prints, for the client: no secret ever goes over the
// socket.
func serverKey(logf func(string, ...any)) ([]byte, error) {
	key, _, err := socketKey()
	if err != nil || key != nil {
		return key, err
	}
	if key, err = bootstrap.NewKey(); err != nil {
		return nil, err
	}
	enc := bootstrap.EncodeKey(key)
	if err := os.Setenv(bootstrap.EnvKey, enc); err != nil {
		return nil, err
	}
	logf("No %s is set: this server made one. Start the client with it in its environment:", bootstrap.EnvKey)
	logf("%s=%s", bootstrap.EnvKey, enc)
	return key, nil
}

// authTimeout bounds the time a connection to the server has to
// authenticate and send its test parameters, and a client's wait for the
// server's part.
const authTimeout = 10 * time.Second

// Bounds of the connections a server authenticates at once
// (internal/admit): a newer one displaces the oldest, so that strangers'
// idle connections cannot keep the client out.
const (
	maxAuthPerSource = 8
	maxAuth          = 32
)

// serve waits on addr:port for a client that proves it has key and sends
// valid test parameters, and returns its connection and its parameters.
// Every connection authenticates in a goroutine of its own, at most
// maxAuth at once; one that fails (another key, garbage, a frame longer
// than maxFrame, silence past authTimeout, bad parameters) is closed and
// logged, a few lines a minute, and the server goes on waiting.
func serve(addr string, port int, key []byte, logf func(string, ...any)) (*sockRTE, params, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, fmt.Sprint(port)))
	if err != nil {
		return nil, params{}, err
	}
	refused := ucs.NewLogLimiter("rejected connections", 10, time.Minute, logf)
	defer refused.Flush()
	logf("Waiting for connection...")
	type winner struct {
		s *sockRTE
		p params
	}
	won := make(chan winner, 1)
	gate := admit.New[net.Conn](admit.Limits{PerSource: maxAuthPerSource, Total: maxAuth})
	var wg sync.WaitGroup
	var served atomic.Bool // a client won: the others are closed unlogged
	handle := func(c net.Conn, tk *admit.Ticket[net.Conn]) {
		defer wg.Done()
		s := &sockRTE{conn: c}
		c.SetDeadline(time.Now().Add(authTimeout))
		err := s.authenticate(key)
		var p params
		if err == nil {
			p, err = s.recvParams()
		}
		if tk.Done() {
			return // displaced by newer connections, and closed
		}
		if err != nil {
			if !served.Load() {
				refused.Logf("Rejected connection from %s: %v", c.RemoteAddr(), err)
			}
			c.Close()
			return
		}
		c.SetDeadline(time.Time{})
		select {
		case won <- winner{s, p}:
		default:
			c.Close() // another client was first
		}
	}
	acceptErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				acceptErr <- err
				return
			}
			tk, old, ousted := gate.Admit(c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr(), c)
			if ousted {
				old.Close()
				refused.Logf("Rejected connection from %s: not authenticated when newer ones came", old.RemoteAddr())
			}
			wg.Add(1)
			go handle(c, tk)
		}
	}()
	var w winner
	select {
	case w = <-won:
	case err = <-acceptErr:
	}
	served.Store(true)
	ln.Close()
	for _, c := range gate.Values() {
		c.Close() // the others still authenticating
	}
	wg.Wait()
	if err != nil {
		return nil, params{}, err
	}
	logf("Accepted connection from %s", w.s.conn.RemoteAddr())
	return w.s, w.p, nil
}

// recvParams receives the client's test parameters and checks them.
func (s *sockRTE) recvParams() (params, error) {
	var p params
	b, err := s.recv()
	if err == nil {
		err = json.Unmarshal(b, &p)
	}
	if err == nil {
		_, err = p.check()
	}
	if err != nil {
		return params{}, fmt.Errorf("test parameters: %w", err)
	}
	return p, nil
}

// dialRetry is how long a client retries a refused connection (a loaded
// machine may take seconds to start the server).
const dialRetry = 30 * time.Second

// dial connects to the server at host:port and authenticates with key,
// which the server must have too; authTimeout bounds the wait for the
// server's part.
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
	c.SetDeadline(time.Now().Add(authTimeout))
	if err := s.authenticate(key); err != nil {
		c.Close()
		return nil, err
	}
	c.SetDeadline(time.Time{})
	return s, nil
}

// peerGone reports whether the server or client at the other end of the
// socket closed it (it exited, or was killed): a test's wait for the peer
// then fails instead of spinning forever. It does not consume anything.
func (s *sockRTE) peerGone() bool {
	rc, err := s.conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		return true
	}
	gone := false
	rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		gone = n == 0 && err == nil || err != nil && err != syscall.EAGAIN && err != syscall.EINTR
		return true // never wait
	})
	return gone
}
