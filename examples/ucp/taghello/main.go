// Command taghello is two processes that ping-pong tagged messages of
// growing size over UCP, as UCX's hello-world example does with tag
// matching: they meet over a TCP connection of their own (out of band),
// exchange their worker addresses on it, connect endpoints to each other,
// and then talk through ucp alone.
//
//	taghello                          # the server: waits on 127.0.0.1:13338
//	taghello -connect 127.0.0.1:13338 # the client
//
// The client sends a message of 1 byte, then 2, 4, ... up to -max bytes
// (1 MiB by default), each with its size as tag; the server receives each
// with a receive of that tag and sends it back with the top bit of the tag
// set; the client checks the echo and prints a line per size: the round
// trip and the protocol ucp chose to receive it (eager, or rendezvous
// through mapped memory, a get, or active messages). Transports come from
// UCX_TLS as in any goshmem program. Over tcp the two processes must share
// a key: the server hands the client its UCX_TCP_KEY (a fresh one unless
// UCX_TCP_KEY or GOSHMEM_KEY is set in both) on the out-of-band
// connection, so keep that connection on the loopback or a trusted
// network.
package main

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"time"

	"github.com/goshmem/goshmem/ucp"

	// ucp links no transport: all of them.
	_ "github.com/goshmem/goshmem/uct/transports"
)

// echoBit marks the server's answers.
const echoBit = 1 << 63

func main() {
	listen := flag.String("listen", "127.0.0.1:13338", "address the server waits on")
	connect := flag.String("connect", "", "address of the server: run as the client")
	maxSize := flag.Int("max", 1<<20, "largest message, in bytes (the client's counts)")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("taghello: ")
	if err := run(*listen, *connect, *maxSize); err != nil {
		log.Fatal(err)
	}
}

func run(listen, connect string, maxSize int) error {
	conn, err := meet(listen, connect)
	if err != nil {
		return err
	}
	defer conn.Close()
	client := connect != ""
	ctx, err := ucp.Init(new(ucp.Params).SetFeatures(ucp.FeatureTag).SetName("taghello"), nil)
	if err != nil {
		return err
	}
	defer ctx.Cleanup()
	w, err := ctx.NewWorker(nil)
	if err != nil {
		return err
	}
	defer w.Destroy()
	addr, err := w.Address()
	if err != nil {
		return err
	}
	// The address, then the largest size the client will send.
	blob := binary.LittleEndian.AppendUint64(append([]byte(nil), addr...), uint64(maxSize))
	peer, err := exchange(conn, blob)
	if err != nil || len(peer) < 8 {
		return fmt.Errorf("exchanging worker addresses: %v", err)
	}
	if !client {
		maxSize = int(min(binary.LittleEndian.Uint64(peer[len(peer)-8:]), 1<<30))
	}
	peer = peer[:len(peer)-8]
	ep, err := w.NewEndpoint(new(ucp.EPParams).SetAddress(peer).SetErrMode(ucp.ErrHandlingModePeer))
	if err != nil {
		return fmt.Errorf("connecting to the peer: %w", err)
	}
	defer ep.Close(ucp.CloseModeFlush)
	for _, l := range ep.Query().Lanes {
		fmt.Printf("lane %-4s %s/%s\n", l.Usage, l.Transport, l.Device)
	}
	if client {
		err = ping(w, ep, maxSize)
	} else {
		err = pong(w, ep, maxSize)
	}
	if err != nil {
		return err
	}
	// Both are done: say so out of band, so that neither closes its
	// endpoint while the other still needs it.
	_, err = exchange(conn, []byte("bye"))
	return err
}

// ping is the client: it sends each size and checks the echo.
func ping(w *ucp.Worker, ep *ucp.Endpoint, maxSize int) error {
	for size := 1; size <= maxSize; size *= 2 {
		msg := make([]byte, size)
		for i := range msg {
			msg[i] = byte(i*7 + size)
		}
		got := make([]byte, size)
		start := time.Now()
		rr, err := w.TagRecvNBX(got, uint64(size)|echoBit, ^uint64(0), new(ucp.RequestParam).SetOpAttrFlags(ucp.OpAttrFlagNoImmCmpl))
		if err != nil {
			return err
		}
		sr, err := ep.TagSendNBX(msg, uint64(size), nil)
		if err := wait(w, sr, err); err != nil {
			return fmt.Errorf("send of %d bytes: %w", size, err)
		}
		if err := wait(w, rr, nil); err != nil {
			return fmt.Errorf("echo of %d bytes: %w", size, err)
		}
		rtt := time.Since(start)
		if !bytes.Equal(got, msg) {
			return fmt.Errorf("the echo of %d bytes differs", size)
		}
		proto := rr.Query().DebugString
		rr.Free()
		fmt.Printf("%8d bytes: round trip %9.1f us, echo received by %s\n", size, float64(rtt.Nanoseconds())/1e3, proto)
	}
	return nil
}

// pong is the server: it receives each size and sends it back.
func pong(w *ucp.Worker, ep *ucp.Endpoint, maxSize int) error {
	buf := make([]byte, maxSize)
	for size := 1; size <= maxSize; size *= 2 {
		var info ucp.TagRecvInfo
		r, err := w.TagRecvNBX(buf[:size], uint64(size), ^uint64(0), new(ucp.RequestParam).SetRecvInfo(&info))
		if r != nil {
			err = wait(w, r, nil)
			info.Length = size
		}
		if err != nil {
			return fmt.Errorf("receive of %d bytes: %w", size, err)
		}
		sr, err := ep.TagSendNBX(buf[:info.Length], uint64(size)|echoBit, nil)
		if err := wait(w, sr, err); err != nil {
			return fmt.Errorf("echo of %d bytes: %w", size, err)
		}
	}
	fmt.Printf("echoed %d messages\n", bitsUpTo(maxSize))
	return nil
}

func bitsUpTo(n int) int {
	k := 0
	for s := 1; s <= n; s *= 2 {
		k++
	}
	return k
}

// wait progresses w until r (if any) completes and returns its status (or
// err); r stays the caller's.
func wait(w *ucp.Worker, r *ucp.Request, err error) error {
	if err != nil || r == nil {
		return err
	}
	for !r.IsCompleted() {
		if w.Progress() == 0 {
			w.Idle()
		}
	}
	return r.Status()
}

// meet sets up the out-of-band connection: the server waits for the
// client and hands it the tcp transport's key, which the client takes.
// Both set UCX_TCP_KEY before they create their worker.
func meet(listen, connect string) (net.Conn, error) {
	if connect != "" {
		var c net.Conn
		var err error
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if c, err = net.Dial("tcp", connect); err == nil || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			return nil, err
		}
		key, err := recvFrame(c)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("the server's key: %w", err)
		}
		if len(key) > 0 {
			os.Setenv("UCX_TCP_KEY", string(key))
		}
		return c, nil
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	fmt.Printf("waiting on %s\n", ln.Addr())
	c, err := ln.Accept()
	if err != nil {
		return nil, err
	}
	var key []byte
	if os.Getenv("UCX_TCP_KEY") == "" && os.Getenv("GOSHMEM_KEY") == "" {
		k := make([]byte, 32)
		if _, err := rand.Read(k); err != nil {
			c.Close()
			return nil, err
		}
		key = []byte(base64.StdEncoding.EncodeToString(k))
		os.Setenv("UCX_TCP_KEY", string(key))
	}
	if err := sendFrame(c, key); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// exchange sends b to the peer and returns what the peer sent.
func exchange(c net.Conn, b []byte) ([]byte, error) {
	errc := make(chan error, 1)
	go func() { errc <- sendFrame(c, b) }()
	got, err := recvFrame(c)
	if err2 := <-errc; err == nil {
		err = err2
	}
	return got, err
}

func sendFrame(c net.Conn, b []byte) error {
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(len(b)))
	_, err := c.Write(append(n[:], b...))
	return err
}

func recvFrame(c net.Conn) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return nil, err
	}
	l := binary.LittleEndian.Uint32(n[:])
	if l > 1<<20 {
		return nil, fmt.Errorf("frame of %d bytes: too long", l)
	}
	b := make([]byte, l)
	_, err := io.ReadFull(c, b)
	return b, err
}
