// Command ucpperf measures the UCP layer of goshmem the way ucx_perftest
// measures UCX's, and prints the same table.
//
// It runs as two processes, in either of two ways, or as one:
//
//	goshmem-run -np 2 ucpperf -t ucp_put_lat -s 8 -n 100000   # a job: PE 0 measures
//	ucpperf -p 13337 &                                        # a server ...
//	ucpperf -p 13337 127.0.0.1 -t ucp_put_lat -s 8            # ... and a client
//	UCX_TLS=sm ucpperf -l -t tag_lat -s 8                     # loopback
//
// With -l (ucx_perftest's loopback connection) the process talks to
// itself: its endpoint leads to its own worker, over the transports
// UCX_TLS allows (without self, shared memory carries the messages, as
// with ucx_perftest -l), and each iteration of a ping-pong test (tag_lat,
// stream_lat, ucp_am_lat) sends one message and receives it. The path of
// a message, sender and receiver, runs on one goroutine without waiting
// for another process, so counting its instructions (valgrind) gives the
// same number on a quiet machine and on a loaded one.
//
// As a job, the PEs exchange their worker addresses and packed keys through
// the job's bootstrap; rank 0 is the client, which measures and prints, and
// rank 1 the server. As server and client, they exchange them over a TCP
// socket: the server listens on -a (127.0.0.1 by default) port -p and serves
// one client, which sends it the test parameters. With -listener the client's
// endpoint is not made from the server's worker address but through a
// ucp.Listener the server opens on the same address (client-server wireup:
// the listener's handshake, then lanes as for any endpoint); the socket
// then carries only the parameters, the remote key and the barriers.
//
// Both sides prove they have the same key (HMAC over random nonces) before
// anything else crosses the socket, and the tcp transport authenticates
// with it too: GOSHMEM_KEY, or else UCX_TCP_KEY. A server started without
// either makes one, sets it as its GOSHMEM_KEY and prints the line
// "GOSHMEM_KEY=..." to put in the client's environment; a client without
// a key does not connect. No key ever crosses the socket. The server
// authenticates every connection in a goroutine of its own (at most 32 at
// once, the oldest giving way to a newer one), closes and logs one that
// fails, sends garbage (a frame longer than 1 MiB) or stays silent for
// 10 s, and goes on waiting; the first client that passes is served. A
// client whose server ends fails, whatever it waits for.
//
// Transports come from UCX_TLS as for any goshmem program (UCX_TLS=tcp,self
// for loopback tcp). The tests, and what they measure, are listed in
// tests.go and by -h.
//
// Output: the test's description box (on the server, or rank 0 of a job),
// then the client's table: a progress line per second ("[thread 0]") and a
// "Final:" line with the iterations, the 50th percentile (-R), the average
// of the last period and the overall average latency in microseconds, the
// bandwidth (MB/s, 2^20 bytes) and the message rate (messages/s), both as
// the last period's and the overall average. -f prints the final line only.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/pprof"
	"strings"
	"unsafe"

	"github.com/goshmem/goshmem/bootstrap"
	"github.com/goshmem/goshmem/ucp"
	_ "github.com/goshmem/goshmem/uct/transports"
)

// params are the parameters of a test, which a client sends its server.
type params struct {
	Test        string
	Size        int
	Iters       int
	Warmup      int
	Outstanding int
	FlushEvery  int
	Percentile  float64
	Memh        bool
	Wildcard    bool // tag tests: receive with the wildcard mask (-C)
	Unexpected  bool // tag tests: probe before each receive (-U)
	Listener    bool // server/client: connect through a ucp.Listener (-listener)
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// options are the command line.
type options struct {
	params
	port      int
	bind      string
	host      string
	finalOnly bool
	info      bool
	profile   string
	loopback  bool
}

func usage(fs *flag.FlagSet, out io.Writer) {
	fmt.Fprintf(out, "  Usage: ucpperf [ server-hostname ] [ options ]\n\n")
	fmt.Fprintf(out, "  Run as 2 PEs with goshmem-run, as a server (no hostname) and a client, or in loopback (-l).\n\n")
	fmt.Fprintf(out, "  Common options:\n     -t <test>      test to run:\n")
	for _, t := range tests {
		name := t.name
		if len(t.aliases) > 0 {
			name += " (" + strings.Join(t.aliases, ", ") + ")"
		}
		fmt.Fprintf(out, "       %36s - UCP %s\n", name, t.desc)
	}
	fs.SetOutput(out)
	fs.PrintDefaults()
}

// parse reads the command line; flags may come before and after the
// server's hostname, as with ucx_perftest.
func parse(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("ucpperf", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.Test, "t", "", "test to run (see above)")
	fs.IntVar(&o.Size, "s", 8, "message size in bytes")
	fs.IntVar(&o.Iters, "n", 1000000, "number of iterations to run")
	fs.IntVar(&o.Warmup, "w", 10000, "number of warm-up iterations (at most a tenth of -n are run)")
	fs.IntVar(&o.Outstanding, "O", 0, "maximal number of uncompleted outstanding operations in stream tests (0: the test's window, as in ucx_perftest: 32 for ucp_put_bw, ucp_am_bw, tag_bw, tag_sync_bw and stream_bw, 1 for the others)")
	fs.IntVar(&o.FlushEvery, "W", 0, "flush the worker every this many operations in stream tests (0: only at the end)")
	fs.Float64Var(&o.Percentile, "R", 50, "percentile rank of the percentile column")
	fs.IntVar(&o.port, "p", 13337, "TCP port of the server")
	fs.StringVar(&o.bind, "a", "127.0.0.1", "address the server listens on (only a client with the server's key may run a test)")
	fs.BoolVar(&o.finalOnly, "f", false, "print only the final numbers")
	fs.BoolVar(&o.info, "I", false, "print the lanes of the endpoint to the peer")
	fs.BoolVar(&o.loopback, "l", false, "use a loopback connection: the process communicates with itself, through an endpoint to its own worker (ping-pong tests only; no server hostname)")
	fs.StringVar(&o.profile, "cpuprofile", "", "write a CPU profile of the measured iterations to this file")
	fs.BoolVar(&o.Memh, "z", false, "pass the send buffer's memory handle to active-message and tag sends (a rendezvous receiver then gets from it without a registration)")
	fs.BoolVar(&o.Wildcard, "C", false, "use the wildcard tag mask for tag tests")
	fs.BoolVar(&o.Unexpected, "U", false, "force the unexpected flow of tag tests: probe for each message before receiving it")
	fs.BoolVar(&o.Listener, "listener", false, "server/client mode: the client connects its endpoint to a ucp.Listener of the server (client-server wireup over a socket address) instead of to the server's worker address")
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				usage(fs, stderr)
			}
			return nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		if o.host != "" {
			return nil, fmt.Errorf("more than one server hostname: %q and %q", o.host, fs.Arg(0))
		}
		o.host, args = fs.Arg(0), fs.Args()[1:]
	}
	return o, nil
}

// check validates the parameters a client runs (or a server received).
func (p *params) check() (*testDef, error) {
	t := findTest(p.Test)
	switch {
	case p.Test == "":
		return nil, errors.New("no test given (-t)")
	case t == nil:
		return nil, fmt.Errorf("unknown test %q (see -h)", p.Test)
	case p.Size < 1 || p.Size > 1<<30:
		return nil, fmt.Errorf("message size %d: want 1 to 1G", p.Size)
	case (strings.Contains(t.name, "add") || strings.Contains(t.name, "swap")) && p.Size != 8:
		return nil, fmt.Errorf("%s works on 8-byte words: -s 8", t.name)
	case p.Iters < 1 || p.Warmup < 0:
		return nil, fmt.Errorf("iterations %d, warm-up %d", p.Iters, p.Warmup)
	case p.Outstanding < 0 || p.FlushEvery < 0:
		return nil, fmt.Errorf("outstanding %d, flush every %d: want at least 0 and 0", p.Outstanding, p.FlushEvery)
	case p.Percentile <= 0 || p.Percentile > 100:
		return nil, fmt.Errorf("percentile rank %g: want (0, 100]", p.Percentile)
	}
	if p.Outstanding == 0 {
		p.Outstanding = t.window
	}
	return t, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "ucpperf: %v\n", err)
		return 2
	}
	logf := func(format string, a ...any) { fmt.Fprintf(stdout, format+"\n", a...) }
	var r rte
	// A job has the launcher's variables; GOSHMEM_KEY alone only keys the
	// socket of the server/client mode.
	inJob := false
	if os.Getenv(bootstrap.EnvRank) != "" || os.Getenv(bootstrap.EnvSize) != "" || os.Getenv(bootstrap.EnvSeed) != "" {
		if _, inJob, err = bootstrap.EnvFromOS(); err != nil {
			fmt.Fprintf(stderr, "ucpperf: %v\n", err)
			return 1
		}
	}
	p := o.params
	switch {
	case o.loopback:
		if o.host != "" || inJob || p.Listener {
			fmt.Fprintf(stderr, "ucpperf: -l runs in one process: no server hostname, goshmem-run job or -listener\n")
			return 2
		}
		t, err := p.check()
		if err == nil && !t.loopback {
			err = fmt.Errorf("%s has no loopback form (-l): it needs a peer that answers", t.name)
		}
		if err != nil {
			fmt.Fprintf(stderr, "ucpperf: %v\n", err)
			return 2
		}
		r = loopRTE{}
	case inJob:
		if o.host != "" {
			fmt.Fprintf(stderr, "ucpperf: a server hostname makes no sense in a goshmem-run job\n")
			return 2
		}
		if _, err := p.check(); err != nil {
			fmt.Fprintf(stderr, "ucpperf: %v\n", err)
			return 2
		}
		if r, err = newJobRTE(); err != nil {
			fmt.Fprintf(stderr, "ucpperf: %v\n", err)
			return 1
		}
	case o.host != "":
		if _, err := p.check(); err != nil {
			fmt.Fprintf(stderr, "ucpperf: %v\n", err)
			return 2
		}
		key, _, err := socketKey()
		if err == nil && key == nil {
			err = fmt.Errorf("no %s is set: the server authenticates with a key, which it printed when it made one; set the same here", bootstrap.EnvKey)
		}
		if err != nil {
			fmt.Fprintf(stderr, "ucpperf: %v\n", err)
			return 1
		}
		s, err := dial(o.host, o.port, key)
		if err != nil {
			fmt.Fprintf(stderr, "ucpperf: connect to %s port %d: %v\n", o.host, o.port, err)
			return 1
		}
		b, _ := json.Marshal(p)
		if err := s.send(b); err != nil {
			fmt.Fprintf(stderr, "ucpperf: %v\n", err)
			return 1
		}
		r = s
	default:
		key, err := serverKey(logf)
		if err != nil {
			fmt.Fprintf(stderr, "ucpperf: %v\n", err)
			return 1
		}
		s, sp, err := serve(o.bind, o.port, key, logf)
		if err != nil {
			fmt.Fprintf(stderr, "ucpperf: serve on %s port %d: %v\n", o.bind, o.port, err)
			return 1
		}
		p, r = sp, s
	}
	defer r.close()
	if p.Listener && inJob {
		fmt.Fprintf(stderr, "ucpperf: -listener is for the server/client mode, not a goshmem-run job\n")
		return 2
	}
	if err := runTest(r, p, o, inJob, stdout); err != nil {
		fmt.Fprintf(stderr, "ucpperf: %s: %v\n", p.Test, err)
		return 1
	}
	return 0
}

// setup creates the context, worker and buffers, exchanges addresses and
// keys with the peer and connects to it.
func setup(r rte, p params, t *testDef) (*bench, error) {
	b := &bench{p: p, test: t, client: r.client(), rte: r}
	_, b.loopback = r.(loopRTE)
	ctx, err := ucp.Init(new(ucp.Params).SetFeatures(ucp.FeatureRMA|ucp.FeatureAMO64|ucp.FeatureAM|ucp.FeatureTag|ucp.FeatureStream).
		SetEstimatedNumEPs(1).SetName("ucpperf"), nil)
	if err != nil {
		return nil, err
	}
	b.ctx = ctx
	if b.w, err = ctx.NewWorker(nil); err != nil {
		return b, err
	}
	n := (max(p.Size, 8) + 7) &^ 7
	if b.mem, err = ctx.MemMap(new(ucp.MemMapParams).SetLength(n).SetFlags(ucp.MemMapAllocate)); err != nil {
		return b, err
	}
	b.buf = unsafe.Slice((*byte)(b.mem.Address()), n)[:p.Size]
	clear(b.buf)
	// The send buffer is mapped memory too, as ucx_perftest's.
	if b.smem, err = ctx.MemMap(new(ucp.MemMapParams).SetLength(n).SetFlags(ucp.MemMapAllocate)); err != nil {
		return b, err
	}
	b.sbuf = unsafe.Slice((*byte)(b.smem.Address()), n)[:p.Size]
	if p.Memh {
		b.sendParam = &ucp.RequestParam{OpAttrMask: ucp.OpAttrFieldMemh, Memh: b.smem}
	}
	for i := range b.sbuf {
		b.sbuf[i] = byte(i)
	}
	addr, err := b.w.Address()
	if err != nil {
		return b, err
	}
	rkey, err := ctx.RkeyPack(b.mem)
	if err != nil {
		return b, err
	}
	if p.Listener {
		// The endpoint comes from the listener's handshake; only the
		// key and the buffer's address travel out of band.
		s, ok := r.(*sockRTE)
		if !ok {
			return b, errors.New("-listener needs the server/client mode")
		}
		if b.ep, err = connectListener(s, b.w); err != nil {
			return b, fmt.Errorf("connect through a listener: %w", err)
		}
		addr = nil
	}
	peer, err := r.exchange(encodeBlob(addr, rkey, uint64(uintptr(b.mem.Address()))))
	if err != nil {
		return b, fmt.Errorf("exchange addresses: %w", err)
	}
	paddr, prkey, praddr, err := decodeBlob(peer)
	if err != nil {
		return b, fmt.Errorf("the peer's address and key: %w", err)
	}
	if b.ep == nil {
		if b.ep, err = b.w.NewEndpoint(new(ucp.EPParams).SetAddress(paddr)); err != nil {
			return b, fmt.Errorf("connect to the peer: %w", err)
		}
	}
	if b.rkey, err = b.ep.RkeyUnpack(prkey); err != nil {
		return b, fmt.Errorf("the peer's key: %w", err)
	}
	b.raddr = praddr
	if !p.Wildcard {
		b.tagMask = ^uint64(0)
	}
	for _, l := range b.ep.Query().Lanes {
		b.netPoll = b.netPoll || l.Transport == "tcp"
	}
	if t.am {
		if err := b.w.SetAMRecvHandler(new(ucp.AMHandlerParam).SetID(amID).SetCB(b.amHandler)); err != nil {
			return b, err
		}
	}
	return b, nil
}

func (b *bench) destroy() {
	if b.rkey != nil {
		b.rkey.Destroy()
	}
	if b.ep != nil {
		b.ep.Close(ucp.CloseModeForce)
	}
	if b.mem != nil {
		b.ctx.MemUnmap(b.mem)
	}
	if b.smem != nil {
		b.ctx.MemUnmap(b.smem)
	}
	if b.w != nil {
		b.w.Destroy()
	}
	if b.ctx != nil {
		b.ctx.Cleanup()
	}
}

// runTest runs the warm-up (at most a tenth of the iterations, as
// ucx_perftest does) and the measurement, with barriers around them.
func runTest(r rte, p params, o *options, inJob bool, out io.Writer) error {
	finalOnly := o.finalOnly
	t, err := p.check()
	if err != nil {
		return err
	}
	b, err := setup(r, p, t)
	if b != nil {
		defer b.destroy()
	}
	if err != nil {
		return err
	}
	if (b.client && inJob) || (!b.client && !inJob) {
		printTestBox(out, t, p.Size)
	}
	if o.info {
		for _, l := range b.ep.Query().Lanes {
			fmt.Fprintf(out, "lane %-12s %s/%s\n", l.Usage, l.Transport, l.Device)
		}
	}
	factor := 1.0
	if t.pingpong {
		factor = 2
	}
	phase := func(n int, pf *perf) error {
		if err := b.side(n, pf); err != nil {
			return err
		}
		return b.serveWhile(r.barrier)
	}
	if err := b.serveWhile(r.barrier); err != nil {
		return fmt.Errorf("barrier: %w", err)
	}
	warm := min(p.Warmup, int(math.Ceil(float64(p.Iters)/10)))
	if warm > 0 {
		if err := phase(warm, newPerf(io.Discard, factor, p.Percentile, false)); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	pf := newPerf(out, factor, p.Percentile, b.client && !finalOnly)
	if b.client {
		printHeader(out, p.Percentile, finalOnly)
	}
	if o.profile != "" {
		f, err := os.Create(o.profile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	pf.reset()
	err = b.side(p.Iters, pf)
	if o.profile != "" {
		pprof.StopCPUProfile()
	}
	if err != nil {
		return err
	}
	if b.client {
		pf.final(finalOnly)
	}
	if err := b.serveWhile(r.barrier); err != nil {
		return fmt.Errorf("final barrier: %w", err)
	}
	return nil
}

// side runs this process's part of n iterations of the test: the loop on
// the client and on both sides of a ping-pong, the server's part of a
// stream test that has one.
func (b *bench) side(n int, pf *perf) error {
	switch t := b.test; {
	case b.client || t.pingpong:
		return t.loop(b, n, pf)
	case t.serve != nil:
		return t.serve(b, n, pf)
	}
	return nil
}

// Blob layout (little endian): u32 length + worker address, u32 length +
// packed key, u64 address of the buffer.
func encodeBlob(addr, rkey []byte, base uint64) []byte {
	b := make([]byte, 0, 16+len(addr)+len(rkey))
	b = appendU32(b, uint32(len(addr)))
	b = append(b, addr...)
	b = appendU32(b, uint32(len(rkey)))
	b = append(b, rkey...)
	for i := 0; i < 8; i++ {
		b = append(b, byte(base>>(8*i)))
	}
	return b
}

func appendU32(b []byte, v uint32) []byte {
	return append(b, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
}

func decodeBlob(b []byte) (addr, rkey []byte, base uint64, err error) {
	take := func() []byte {
		if len(b) < 4 {
			err = errors.New("truncated")
			return nil
		}
		n := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
		if uint64(n) > uint64(len(b)-4) {
			err = errors.New("truncated")
			return nil
		}
		v := b[4 : 4+n]
		b = b[4+n:]
		return v
	}
	addr = take()
	rkey = take()
	if err != nil {
		return nil, nil, 0, err
	}
	if len(b) != 8 {
		return nil, nil, 0, fmt.Errorf("%d bytes left for the buffer address", len(b))
	}
	for i := 0; i < 8; i++ {
		base |= uint64(b[i]) << (8 * i)
	}
	return addr, rkey, base, nil
}
