package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goshmem/goshmem/bootstrap"
	"github.com/goshmem/goshmem/internal/flood"
	"github.com/goshmem/goshmem/internal/petest"
	"github.com/goshmem/goshmem/launcher"
	"github.com/goshmem/goshmem/shmemtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	petest.RemovePrograms()
	os.Exit(code)
}

// ucpperfBinary is this command, built once for the tests that run it.
func ucpperfBinary(t *testing.T) string { return petest.Program(t, ".") }

var finalRe = regexp.MustCompile(`(?m)^(Final:)?\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+(\d+)$`)

// finalLine parses the last line of the table: iterations, then the seven
// figures, which must be numbers that are not negative.
func finalLine(t *testing.T, out string, final bool) (int64, []float64) {
	t.Helper()
	var m []string
	for _, mm := range finalRe.FindAllStringSubmatch(out, -1) {
		if (mm[1] != "") == final {
			m = mm
		}
	}
	if m == nil {
		t.Fatalf("no final line in the output:\n%s", out)
	}
	iters, _ := strconv.ParseInt(m[2], 10, 64)
	var v []float64
	for _, s := range m[3:] {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || f < 0 {
			t.Fatalf("final line %q: figure %q", m[0], s)
		}
		v = append(v, f)
	}
	return iters, v
}

func runJob(t *testing.T, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	before := map[string]bool{}
	for _, f := range shmemtest.Leftovers() {
		before[f] = true // left by something else running on this machine
	}
	var out bytes.Buffer
	code, err := launcher.Run(ctx, launcher.Options{NP: 2, Program: ucpperfBinary(t), Args: args, Env: env,
		Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out})
	if err != nil || code != 0 {
		t.Fatalf("ucpperf %v (env %v): exit %d, %v; output:\n%s", args, env, code, err, out.String())
	}
	for _, f := range shmemtest.Leftovers() {
		if !before[f] {
			t.Errorf("ucpperf left %s in /dev/shm", f)
		}
	}
	return out.String()
}

// TestJob runs every test as a job of 2 PEs, over shared memory and over
// tcp, and checks the table's final line.
func TestJob(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the jobs take a few seconds each")
	}
	type tc struct {
		test string
		size int
		tls  string
	}
	var cases []tc
	for _, tt := range tests {
		cases = append(cases, tc{tt.name, 8, ""})
	}
	// Over tcp and at zero-copy sizes, a quick run takes one test of each
	// kind; the full matrix (GOSHMEM_TEST_FULL=1, as .ci/run sets it) all.
	quick := []string{"ucp_put_lat", "ucp_put_bw", "ucp_get", "ucp_am_bw", "tag_lat", "tag_bw", "stream_bw"}
	for _, name := range []string{"ucp_put_lat", "ucp_get", "ucp_atomic_fadd", "ucp_am_lat", "ucp_am_bw", "tag_lat", "tag_sync_bw", "stream_lat", "stream_bw"} {
		if petest.Full() || slices.Contains(quick, name) {
			cases = append(cases, tc{name, 8, "tcp,self"})
		}
	}
	for _, name := range []string{"ucp_put_bw", "ucp_get", "ucp_am_lat", "ucp_am_bw", "tag_lat", "tag_bw", "tag_sync_lat", "stream_lat", "stream_bw"} {
		if petest.Full() || slices.Contains(quick, name) {
			cases = append(cases, tc{name, 100000, ""}) // zero-copy sizes; rendezvous for active messages
		}
	}
	cases = append(cases, tc{"ucp_am_lat", 100000, "tcp,self"}, tc{"tag_bw", 1 << 20, "tcp,self"}, tc{"tag_lat", 1 << 20, ""}, tc{"stream_bw", 1 << 20, "tcp,self"})
	for _, c := range cases {
		name := fmt.Sprintf("%s/%d", c.test, c.size)
		var env []string
		if c.tls != "" {
			name += "/tls=" + c.tls
			env = []string{"UCX_TLS=" + c.tls}
		}
		t.Run(name, func(t *testing.T) {
			const n = 300
			out := runJob(t, env, "-t", c.test, "-s", fmt.Sprint(c.size), "-n", fmt.Sprint(n), "-w", "20")
			iters, v := finalLine(t, out, true)
			if iters != n {
				t.Errorf("final line: %d iterations, want %d", iters, n)
			}
			// The bandwidth is printed in MB/s with two decimals: that of
			// small messages at a low rate (a loaded machine) shows as 0.
			shown := float64(c.size)*v[6] >= 0.01*(1<<20)
			if v[2] <= 0 || v[6] <= 0 || (v[4] <= 0 && shown) {
				t.Errorf("final line: overall latency %g, bandwidth %g, rate %g: want positive", v[2], v[4], v[6])
			}
			if !strings.Contains(out, "| Test:         "+findTest(c.test).desc) {
				t.Errorf("no test description in the output:\n%s", out)
			}
			if strings.Contains(out, "ucpperf:") {
				t.Errorf("errors in the output:\n%s", out)
			}
		})
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startServer starts a server and returns once it waits for a client;
// output returns what it printed so far.
func startServer(t *testing.T, env []string, port int) (output func() string, done chan error) {
	t.Helper()
	cmd := exec.Command(ucpperfBinary(t), "-p", fmt.Sprint(port))
	cmd.Env = append(cleanEnv(), env...)
	f, err := os.Create(t.TempDir() + "/server.out")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done = make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	servers.Store(port, cmd.Process)
	t.Cleanup(func() { cmd.Process.Kill(); f.Close(); servers.Delete(port) })
	output = func() string {
		b, _ := os.ReadFile(f.Name())
		return string(b)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(output(), "Waiting for connection...") {
		select {
		case err := <-done:
			t.Fatalf("the server ended (%v):\n%s", err, output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server did not start:\n%s", output())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return output, done
}

// servers are the server processes startServer started, by port.
var servers sync.Map

// serverProcess returns the process of the server startServer started on
// port.
func serverProcess(t *testing.T, port int) *os.Process {
	p, ok := servers.Load(port)
	if !ok {
		t.Fatalf("no server on port %d", port)
	}
	return p.(*os.Process)
}

// cleanEnv is this process's environment without the launcher contract
// and the keys, so that the server and client run on their own.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOSHMEM_") && !strings.HasPrefix(kv, "UCX_TCP_KEY=") {
			env = append(env, kv)
		}
	}
	return env
}

func runClient(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, ucpperfBinary(t), args...)
	cmd.Env = append(cleanEnv(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// keyEnv returns a fresh key as a GOSHMEM_KEY setting.
func keyEnv(t *testing.T) string {
	k, err := bootstrap.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	return bootstrap.EnvKey + "=" + bootstrap.EncodeKey(k)
}

// TestServerClient runs the server/client mode with a key both sides
// have, over tcp; through a ucp.Listener over shared memory and tcp; and
// with a client that has another key, which is refused while the server
// goes on waiting for one that has it.
func TestServerClient(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs processes")
	}
	t.Run("tcp", func(t *testing.T) {
		env := []string{"UCX_TLS=tcp,self", keyEnv(t)}
		port := freePort(t)
		sout, done := startServer(t, env, port)
		out, err := runClient(t, env, "-p", fmt.Sprint(port), "127.0.0.1", "-t", "ucp_am_lat", "-n", "200", "-f")
		if err != nil {
			t.Fatalf("client: %v\n%s", err, out)
		}
		if iters, _ := finalLine(t, out, false); iters != 200 {
			t.Errorf("%d iterations", iters)
		}
		if err := <-done; err != nil {
			t.Errorf("server: %v\n%s", err, sout())
		}
		if !strings.Contains(sout(), "Accepted connection from 127.0.0.1") || !strings.Contains(sout(), "am latency") {
			t.Errorf("server output:\n%s", sout())
		}
	})
	// -listener: the endpoint comes from a ucp.Listener's handshake, on
	// shared memory when both sides may use it, and every kind of test
	// (two-sided, streams, RMA with the key sent out of band) runs on it.
	for _, tc := range []struct{ tls, lane, test string }{
		{"sm,self", "posix/memory", "tag_lat"},
		{"sm,self", "posix/memory", "ucp_put_lat"},
		{"tcp,self", "tcp/lo", "tag_bw"},
		{"tcp,self", "tcp/lo", "stream_lat"},
		{"tcp,self", "tcp/lo", "ucp_get"},
	} {
		t.Run("listener/"+tc.tls+"/"+tc.test, func(t *testing.T) {
			env := []string{"UCX_TLS=" + tc.tls, keyEnv(t)}
			port := freePort(t)
			sout, done := startServer(t, env, port)
			out, err := runClient(t, env, "-p", fmt.Sprint(port), "127.0.0.1", "-listener", "-I", "-t", tc.test, "-n", "300", "-f")
			if err != nil {
				t.Fatalf("client: %v\n%s", err, out)
			}
			if iters, _ := finalLine(t, out, false); iters != 300 {
				t.Errorf("%d iterations", iters)
			}
			if !strings.Contains(out, tc.lane) {
				t.Errorf("no lane on %s:\n%s", tc.lane, out)
			}
			if err := <-done; err != nil {
				t.Errorf("server: %v\n%s", err, sout())
			}
		})
	}
	t.Run("key", func(t *testing.T) {
		key := keyEnv(t)
		port := freePort(t)
		sout, done := startServer(t, []string{key}, port)
		out, err := runClient(t, []string{keyEnv(t)}, "127.0.0.1", "-p", fmt.Sprint(port), "-t", "ucp_put_lat", "-n", "100")
		if err == nil || !strings.Contains(out, "authentication") {
			t.Errorf("client with another key: %v\n%s", err, out)
		}
		out, err = runClient(t, []string{key}, "127.0.0.1", "-p", fmt.Sprint(port), "-t", "ucp_put_lat", "-n", "100")
		if err != nil {
			t.Fatalf("client with the key: %v\n%s", err, out)
		}
		if iters, _ := finalLine(t, out, true); iters != 100 {
			t.Errorf("%d iterations", iters)
		}
		if err := <-done; err != nil {
			t.Errorf("server: %v\n%s", err, sout())
		}
		if !strings.Contains(sout(), "Rejected connection") {
			t.Errorf("the server did not report the rejected client:\n%s", sout())
		}
	})
}

// keyLineRe is the line a server without a key prints for its client.
var keyLineRe = regexp.MustCompile(`(?m)^GOSHMEM_KEY=(\S+)$`)

// TestServerStrangers starts a server without a key over tcp: it makes one
// and prints it for the client. Strangers connect first: one reads what
// the server sends unasked (a nonce, never a key), one sends a frame
// longer than the protocol allows, and hundreds hold idle connections or
// send garbage. The server logs and closes them and keeps waiting; a
// client without the key fails at once with a clear error; the client
// given the printed line runs its test.
func TestServerStrangers(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs processes")
	}
	env := []string{"UCX_TLS=tcp,self"}
	port := freePort(t)
	sout, done := startServer(t, env, port)
	m := keyLineRe.FindStringSubmatch(sout())
	if m == nil {
		t.Fatalf("the server printed no key for its client:\n%s", sout())
	}
	key, err := bootstrap.DecodeKey(m[1])
	if err != nil {
		t.Fatalf("the printed key: %v", err)
	}
	addr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port))
	// What a stranger gets unasked: one frame, a nonce, and no key.
	c, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(time.Second))
	got, _ := io.ReadAll(c)
	if len(got) != 4+nonceLen || binary.LittleEndian.Uint32(got) != nonceLen {
		t.Errorf("a stranger got %d bytes unasked (%x), want a frame of a %d-byte nonce", len(got), got, nonceLen)
	}
	if bytes.Contains(got, key) || bytes.Contains(got, []byte(m[1])) {
		t.Errorf("a stranger got the key")
	}
	// A frame longer than the protocol allows.
	g, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	huge := []byte{0xb7, 0xf8, 0x10, 0xa9, 1, 2, 3}
	g.Write(huge)
	logged := fmt.Sprintf("frame of %d bytes", binary.LittleEndian.Uint32(huge))
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(sout(), logged); time.Sleep(10 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("the server ended (%v) on a %s:\n%s", err, logged, sout())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server did not log the oversized frame:\n%s", sout())
		}
	}
	if err := flood.RaiseFDLimit(2*600 + 1024); err != nil {
		t.Skipf("not enough file descriptors for the flood: %v", err)
	}
	f, err := flood.Start(addr, flood.Spec{Kind: flood.Idle, N: 300}, flood.Spec{Kind: flood.Garbage, N: 300})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	out, err := runClient(t, env, "-p", fmt.Sprint(port), "127.0.0.1", "-t", "tag_lat", "-n", "100")
	if err == nil || !strings.Contains(out, "no GOSHMEM_KEY is set") {
		t.Errorf("client without the key: %v\n%s", err, out)
	}
	out, err = runClient(t, append(env, m[0]), "-p", fmt.Sprint(port), "127.0.0.1", "-t", "tag_lat", "-n", "100")
	if err != nil {
		t.Fatalf("client with the printed key: %v\n%s\nserver:\n%s", err, out, sout())
	}
	if iters, _ := finalLine(t, out, true); iters != 100 {
		t.Errorf("%d iterations", iters)
	}
	if err := <-done; err != nil {
		t.Errorf("server: %v\n%s", err, sout())
	}
	t.Logf("flood: %+v", f.Stats())
}

// TestServerDies kills the server while the client measures, over shared
// memory and over tcp, in tests that wait on memory, on an active message
// and on a tagged message: the client fails with an error instead of
// waiting for a peer that is gone.
func TestServerDies(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs processes")
	}
	for _, tls := range []string{"sm,self", "tcp,self"} {
		for _, test := range []string{"ucp_put_lat", "ucp_am_lat", "tag_lat"} {
			t.Run(tls+"/"+test, func(t *testing.T) {
				env := []string{"UCX_TLS=" + tls, keyEnv(t)}
				port := freePort(t)
				sout, done := startServer(t, env, port)
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				cmd := exec.CommandContext(ctx, ucpperfBinary(t), "-p", fmt.Sprint(port), "127.0.0.1", "-t", test, "-n", "1000000000", "-w", "0")
				cmd.Env = append(cleanEnv(), env...)
				var out bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &out
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				for deadline := time.Now().Add(30 * time.Second); !strings.Contains(sout(), "Accepted connection"); time.Sleep(10 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("the client did not connect:\n%s", sout())
					}
				}
				time.Sleep(500 * time.Millisecond) // into the measurement
				serverProcess(t, port).Kill()
				<-done
				err := cmd.Wait()
				if ctx.Err() != nil {
					t.Fatalf("the client still waited a minute after its server died:\n%s", out.String())
				}
				if err == nil {
					t.Errorf("the client did not fail when its server died:\n%s", out.String())
				}
			})
		}
	}
}

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		args []string
		host string
		test string
		size int
		bad  bool
	}{
		{args: []string{"-p", "13337"}, size: 8},
		{args: []string{"-p", "1", "10.0.0.1", "-t", "ucp_get", "-s", "64"}, host: "10.0.0.1", test: "ucp_get", size: 64},
		{args: []string{"h", "-t", "ucp_am_bw"}, host: "h", test: "ucp_am_bw", size: 8},
		{args: []string{"h1", "h2"}, bad: true},
		{args: []string{"-s", "x"}, bad: true},
		{args: []string{"-bogus"}, bad: true},
	} {
		o, err := parse(tt.args, io.Discard)
		if (err != nil) != tt.bad {
			t.Errorf("%v: error %v", tt.args, err)
			continue
		}
		if err == nil && (o.host != tt.host || o.Test != tt.test || o.Size != tt.size) {
			t.Errorf("%v: %+v", tt.args, o)
		}
	}
	if _, err := parse([]string{"-h"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
	var help bytes.Buffer
	parse([]string{"-h"}, &help)
	for _, tt := range tests {
		if !strings.Contains(help.String(), tt.name) {
			t.Errorf("help does not list %s", tt.name)
		}
	}
}

func TestCheckParams(t *testing.T) {
	ok := params{Test: "ucp_put_lat", Size: 8, Iters: 10, Warmup: 1, Outstanding: 4, Percentile: 50}
	for _, tt := range []struct {
		name string
		edit func(p *params)
		good bool
	}{
		{"valid", func(*params) {}, true},
		{"alias", func(p *params) { p.Test = "ucp_atomic_cswap" }, true},
		{"no test", func(p *params) { p.Test = "" }, false},
		{"unknown test", func(p *params) { p.Test = "tag_nope" }, false},
		{"atomic of 4 bytes", func(p *params) { p.Test, p.Size = "ucp_fadd", 4 }, false},
		{"size 0", func(p *params) { p.Size = 0 }, false},
		{"no iterations", func(p *params) { p.Iters = 0 }, false},
		{"outstanding 0: the test's window", func(p *params) { p.Outstanding = 0 }, true},
		{"outstanding -1", func(p *params) { p.Outstanding = -1 }, false},
		{"flush every -1", func(p *params) { p.FlushEvery = -1 }, false},
		{"percentile 0", func(p *params) { p.Percentile = 0 }, false},
	} {
		p := ok
		tt.edit(&p)
		if _, err := p.check(); (err == nil) != tt.good {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
}

func TestBlob(t *testing.T) {
	b := encodeBlob([]byte("addr"), []byte("rkey!"), 0x1122334455667788)
	a, k, base, err := decodeBlob(b)
	if err != nil || string(a) != "addr" || string(k) != "rkey!" || base != 0x1122334455667788 {
		t.Fatalf("round trip: %q %q %#x %v", a, k, base, err)
	}
	for i := 0; i < len(b); i++ {
		if _, _, _, err := decodeBlob(b[:i]); err == nil {
			t.Errorf("blob truncated to %d bytes accepted", i)
		}
	}
	if _, _, _, err := decodeBlob(append(b, 0)); err == nil {
		t.Error("trailing byte accepted")
	}
}

// TestTableFormat checks the widths of the table against ucx_perftest's.
func TestTableFormat(t *testing.T) {
	var out bytes.Buffer
	printHeader(&out, 50, false)
	p := newPerf(&out, 2, 50, false)
	for i := 0; i < 10; i++ {
		p.update(1, 8)
	}
	p.final(false)
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if len(lines) != 6 {
		t.Fatalf("%d lines:\n%s", len(lines), out.String())
	}
	for _, l := range lines[:5] {
		if len(l) != 108 {
			t.Errorf("header line of %d characters: %q", len(l), l)
		}
	}
	if !strings.HasPrefix(lines[5], "Final:                    10 ") || len(lines[5]) != 10+18+11+10+10+12+11+12+12 {
		t.Errorf("final line %q (%d characters)", lines[5], len(lines[5]))
	}
	if !strings.Contains(lines[3], "| 50.0%ile |") {
		t.Errorf("percentile column: %q", lines[3])
	}
	var box bytes.Buffer
	printTestBox(&box, findTest("ucp_am_lat"), 8)
	for _, l := range strings.Split(strings.TrimRight(box.String(), "\n"), "\n") {
		if len(l) != 108 {
			t.Errorf("box line of %d characters: %q", len(l), l)
		}
	}
}

// TestSizes runs every test at every size it takes from 1 byte to 1 MiB
// (the atomics at 8), over shared memory and over tcp, with the server
// and the client in this process (run, as main calls it): each run
// completes its iterations. The sizes cross the eager, fragmented and
// rendezvous protocols of every operation.
func TestSizes(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: many runs")
	}
	t.Setenv(bootstrap.EnvKey, "")
	t.Setenv(tcpKeyVar, "")
	t.Setenv(bootstrap.EnvKey, strings.TrimPrefix(keyEnv(t), bootstrap.EnvKey+"="))
	sizes := []int{1, 2048, 4096, 8192, 65536, 1 << 20}
	for _, tls := range []string{"sm,self", "tcp,self"} {
		t.Run(tls, func(t *testing.T) {
			t.Setenv("UCX_TLS", tls)
			for _, tt := range tests {
				for _, size := range sizes {
					if tt.name == "ucp_add" || strings.Contains(tt.name, "swap") || strings.Contains(tt.name, "fadd") {
						if size != 1 {
							continue
						}
						size = 8
					}
					t.Run(fmt.Sprintf("%s/%d", tt.name, size), func(t *testing.T) {
						port := fmt.Sprint(freePort(t))
						var sout, serr bytes.Buffer
						scode := make(chan int, 1)
						go func() { scode <- run([]string{"-p", port}, &sout, &serr) }()
						var out, cerr bytes.Buffer
						const n = 20
						if code := run([]string{"-p", port, "127.0.0.1", "-t", tt.name, "-s", fmt.Sprint(size), "-n", fmt.Sprint(n), "-w", "2", "-f"}, &out, &cerr); code != 0 {
							t.Errorf("client: exit %d\n%s%s", code, out.String(), cerr.String())
						}
						select {
						case code := <-scode:
							if code != 0 {
								t.Errorf("server: exit %d\n%s%s", code, sout.String(), serr.String())
							}
						case <-time.After(time.Minute):
							t.Fatalf("the server still runs a minute after its client ended:\n%s%s", sout.String(), serr.String())
						}
						if t.Failed() {
							return
						}
						if iters, _ := finalLine(t, out.String(), false); iters != n {
							t.Errorf("%d iterations, want %d", iters, n)
						}
					})
				}
			}
		})
	}
}

// TestLoopback runs the tests that have a loopback form (-l) in this
// process, over shared memory alone (the endpoint to the own worker then
// sends through the posix FIFO, as ucx_perftest -l with UCX_TLS=sm) and
// with self and tcp, at sizes of each protocol, and checks that -l is
// refused where it cannot run: a test that needs a peer's answers, a
// server hostname, -listener.
func TestLoopback(t *testing.T) {
	for _, tls := range []string{"sm", "self", "tcp,self"} {
		t.Run(tls, func(t *testing.T) {
			t.Setenv("UCX_TLS", tls)
			for _, tt := range tests {
				if !tt.loopback {
					continue
				}
				for _, size := range []int{8, 8192, 1 << 20} {
					t.Run(fmt.Sprintf("%s/%d", tt.name, size), func(t *testing.T) {
						var out, serr bytes.Buffer
						const n = 50
						if code := run([]string{"-l", "-I", "-t", tt.name, "-s", fmt.Sprint(size), "-n", fmt.Sprint(n), "-w", "2", "-f"}, &out, &serr); code != 0 {
							t.Fatalf("exit %d\n%s%s", code, out.String(), serr.String())
						}
						if iters, _ := finalLine(t, out.String(), false); iters != n {
							t.Errorf("%d iterations, want %d", iters, n)
						}
						if tls == "sm" && !strings.Contains(out.String(), "posix/") {
							t.Errorf("over sm alone the lanes are not posix:\n%s", out.String())
						}
					})
				}
			}
		})
	}
	for _, args := range [][]string{
		{"-l", "-t", "tag_bw"},
		{"-l", "-t", "ucp_put_lat"},
		{"-l", "-t", "tag_sync_lat"},
		{"-l", "127.0.0.1", "-t", "tag_lat"},
		{"-l", "-listener", "-t", "tag_lat"},
	} {
		var out, serr bytes.Buffer
		if code := run(args, &out, &serr); code != 2 || !strings.Contains(serr.String(), "ucpperf:") {
			t.Errorf("%v: exit %d, want 2 and a reason\n%s%s", args, code, out.String(), serr.String())
		}
	}
}
