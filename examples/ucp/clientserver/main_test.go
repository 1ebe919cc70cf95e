package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/flood"
	"github.com/goshmem/goshmem/internal/nstest"
	"github.com/goshmem/goshmem/internal/petest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	petest.RemovePrograms()
	os.Exit(code)
}

// program is this command, built once.
func program(t *testing.T) string { return petest.Program(t, ".") }

// testKey is a key the server and its clients share.
func testKey() string {
	k := make([]byte, 32)
	rand.Read(k)
	return "GOSHMEM_KEY=" + base64.StdEncoding.EncodeToString(k)
}

// testServer is a server process that serves a number of clients and
// exits.
type testServer struct {
	cmd  *exec.Cmd
	addr string
	serr bytes.Buffer
	sout strings.Builder
	done chan struct{}
}

// startServer starts cmd, a server, and returns once it says where it
// listens.
func startServer(t *testing.T, cmd *exec.Cmd) *testServer {
	t.Helper()
	s := &testServer{cmd: cmd, done: make(chan struct{})}
	cmd.Stderr = &s.serr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	if sc.Scan() {
		s.addr, _ = strings.CutPrefix(sc.Text(), "listening on ")
	}
	if s.addr == "" {
		cmd.Wait()
		t.Fatalf("the server did not say where it listens: %s", s.serr.String())
	}
	go func() {
		for sc.Scan() {
			s.sout.WriteString(sc.Text() + "\n")
		}
		close(s.done)
	}()
	return s
}

// wait waits for the server to exit, and checks that it served n clients.
func (s *testServer) wait(t *testing.T, n int) {
	t.Helper()
	<-s.done
	if err := s.cmd.Wait(); err != nil {
		t.Fatalf("server: %v\n%s%s", err, s.sout.String(), s.serr.String())
	}
	if !strings.Contains(s.sout.String(), fmt.Sprintf("served %d clients", n)) {
		t.Errorf("server output:\n%s", s.sout.String())
	}
}

// TestClientServer runs a server and four clients at once over loopback,
// over shared memory and over tcp (with a key they share), and with the
// server on another host (namespaces, see nstest) over tcp: every client
// runs its tag, am and stream rounds on lanes of that transport, the
// server serves all of them and exits, and nothing stays in /dev/shm.
func TestClientServer(t *testing.T) {
	for _, tt := range []struct {
		name, tls, lane string
		otherHost       bool
	}{
		{"sm", "sm", "posix", false},
		{"tcp", "tcp", "tcp", false},
		{"other host", "sm,tcp", "tcp", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			runClientServer(t, tt.tls, tt.lane, tt.otherHost, 20, nil)
		})
	}
}

// runClientServer runs a server and four clients of iters rounds of each
// service at once, over tls (on another host: a namespace, over tcp), and
// checks that each client used a lane of transport lane; flood, when not
// nil, runs once the server listens on addr and returns a function that
// ends what it started, called once the clients ended. It returns the
// time from the clients' start to the server's exit.
func runClientServer(t *testing.T, tls, lane string, otherHost bool, iters int, flood func(addr netip.AddrPort) func()) time.Duration {
	bin := program(t)
	key := testKey()
	const clients = 4
	before := map[string]bool{}
	for _, f := range petest.ShmLeftovers() {
		before[f] = true // left by something else running on this machine
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env := append(os.Environ(), "UCX_TLS="+tls, key)
	args := []string{"-listen", "127.0.0.1:0", "-clients", fmt.Sprint(clients)}
	cmd := exec.CommandContext(ctx, bin, args...)
	if otherHost {
		h := nstest.New(t)
		args[1] = netip.AddrPortFrom(h.IP, 0).String()
		cmd = h.CommandContext(ctx, bin, args...)
	}
	cmd.Env = env
	server := startServer(t, cmd)
	stop := func() {}
	if flood != nil {
		stop = flood(netip.MustParseAddrPort(server.addr))
		defer stop()
	}
	type run struct {
		out []byte
		err error
	}
	start := time.Now()
	runs := make(chan run, clients)
	for id := 1; id <= clients; id++ {
		go func() {
			c := exec.CommandContext(ctx, bin, "-connect", server.addr, "-id", fmt.Sprint(id), "-iters", fmt.Sprint(iters))
			c.Env = env
			out, err := c.CombinedOutput()
			runs <- run{out, err}
		}()
	}
	for range clients {
		r := <-runs
		if r.err != nil {
			t.Errorf("client: %v\n%s", r.err, r.out)
			continue
		}
		o := string(r.out)
		for _, want := range []string{"tag", "am", "stream"} {
			if want = fmt.Sprintf("%d %s rounds of 1024 bytes ok", iters, want); !strings.Contains(o, want) {
				t.Errorf("client output lacks %q:\n%s", want, o)
			}
		}
		if want := "lanes am:" + lane + "/"; !strings.Contains(o, want) {
			t.Errorf("client output lacks %q:\n%s", want, o)
		}
	}
	stop()
	server.wait(t, clients)
	took := time.Since(start)
	for _, f := range petest.ShmLeftovers() {
		if !before[f] {
			t.Errorf("left %s in /dev/shm", f)
		}
	}
	return took
}

// TestClientServerFlood runs the server and clients of TestClientServer
// (500 rounds each) over tcp twice: alone, and with a thousand idle connections and a
// thousand that sent garbage held open on the server's port from before
// the clients start to the server's exit (internal/flood). Every client
// connects and completes its rounds both times; the times of both runs
// are logged (speed is for benchmarks: nothing is asserted on them).
func TestClientServerFlood(t *testing.T) {
	const n = 1000
	// The flood's ends and, for a while, the server's.
	if err := flood.RaiseFDLimit(2*n + 1024); err != nil {
		t.Skipf("not enough file descriptors for the flood: %v", err)
	}
	const iters = 500
	alone := runClientServer(t, "tcp", "tcp", false, iters, nil)
	var st flood.Stats
	flooded := runClientServer(t, "tcp", "tcp", false, iters, func(addr netip.AddrPort) func() {
		f, err := flood.Start(addr, flood.Spec{Kind: flood.Idle, N: n}, flood.Spec{Kind: flood.Garbage, N: n})
		if err != nil {
			t.Fatal(err)
		}
		return func() { st = f.Stop() }
	})
	t.Logf("4 clients of %d rounds alone: %v; with %d idle and %d garbage connections held: %v (flood %+v)",
		iters, alone.Round(time.Millisecond), n, n, flooded.Round(time.Millisecond), st)
}

// TestClientServerSizes runs a client of each service at every size from
// 1 byte to 1 MiB (eager, fragmented and rendezvous protocols alike)
// against one server, with its default -size, over shared memory and over
// tcp: each exchange checks out, and the server serves every client and
// exits.
func TestClientServerSizes(t *testing.T) {
	bin := program(t)
	key := testKey()
	sizes := []int{1, 2048, 4096, 8192, 65536, maxSize}
	names := serviceNames()
	for _, tls := range []string{"sm", "tcp"} {
		t.Run(tls, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			env := append(os.Environ(), "UCX_TLS="+tls, key)
			n := len(sizes) * len(names)
			cmd := exec.CommandContext(ctx, bin, "-listen", "127.0.0.1:0", "-clients", fmt.Sprint(n))
			cmd.Env = env
			server := startServer(t, cmd)
			go func() {
				// A server that ends early leaves its clients nothing
				// to wait for.
				<-server.done
				time.Sleep(10 * time.Second)
				cancel()
			}()
			id := 0
			for _, size := range sizes {
				var wg sync.WaitGroup
				for _, name := range names {
					id++
					id := id
					wg.Add(1)
					go func() {
						defer wg.Done()
						c := exec.CommandContext(ctx, bin, "-connect", server.addr, "-id", fmt.Sprint(id),
							"-iters", "3", "-size", fmt.Sprint(size), "-services", name)
						c.Env = env
						out, err := c.CombinedOutput()
						if want := fmt.Sprintf("3 %s rounds of %d bytes ok", name, size); err != nil || !bytes.Contains(out, []byte(want)) {
							t.Errorf("%s of %d bytes: %v\n%s", name, size, err, out)
						}
					}()
				}
				wg.Wait()
			}
			if t.Failed() {
				cmd.Process.Kill()
			}
			server.wait(t, n)
		})
	}
}

// TestClientServerDies kills the server while a client runs its rounds of
// each service, over shared memory and over tcp: the client fails with an
// error naming the lost connection instead of waiting for an answer that
// cannot come.
func TestClientServerDies(t *testing.T) {
	bin := program(t)
	key := testKey()
	for _, tls := range []string{"sm", "tcp"} {
		for _, name := range serviceNames() {
			t.Run(tls+"/"+name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				// Shared memory notices a dead peer at the keepalive.
				env := append(os.Environ(), "UCX_TLS="+tls, key, "UCX_KEEPALIVE_INTERVAL=100ms")
				cmd := exec.CommandContext(ctx, bin, "-listen", "127.0.0.1:0")
				cmd.Env = env
				server := startServer(t, cmd)
				c := exec.CommandContext(ctx, bin, "-connect", server.addr, "-id", "1", "-iters", "1000000000", "-services", name)
				c.Env = env
				out, err := c.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				var cerr bytes.Buffer
				c.Stderr = &cerr
				if err := c.Start(); err != nil {
					t.Fatal(err)
				}
				sc := bufio.NewScanner(out)
				if !sc.Scan() || !strings.Contains(sc.Text(), "connected") {
					c.Wait()
					t.Fatalf("the client did not connect: %q %s", sc.Text(), cerr.String())
				}
				time.Sleep(100 * time.Millisecond) // well into its rounds
				cmd.Process.Kill()
				<-server.done
				cmd.Wait()
				for sc.Scan() {
				}
				err = c.Wait()
				if ctx.Err() != nil {
					t.Fatalf("the client still waited %v after its server died: %s", 2*time.Minute, cerr.String())
				}
				if err == nil || !strings.Contains(cerr.String(), name+" round") {
					t.Errorf("client: %v, want it to fail in a %s round:\n%s", err, name, cerr.String())
				}
			})
		}
	}
}
