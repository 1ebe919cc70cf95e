package main

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/goshmem/goshmem/ucp"
	"github.com/goshmem/goshmem/ucs"
)

// testDef is one test of ucpperf. Ping-pong tests run loop on both sides;
// the others run loop on the client while the server only progresses.
type testDef struct {
	name     string
	aliases  []string
	desc     string // as ucx_perftest's server prints it
	pingpong bool
	am       bool // needs the active-message handler
	window   int  // the default of -O, ucx_perftest's window size
	// loopback: the client's loop alone completes the test when its
	// endpoint leads to its own worker (-l): it receives what it sent.
	loopback bool
	loop     func(b *bench, n int, p *perf) error
	// serve, if set, is what the server of a stream test runs instead of
	// only progressing (the receives of tag_bw).
	serve func(b *bench, n int, p *perf) error
}

// The tests and their semantics (those of ucx_perftest's UCP tests):
//
//   - ucp_put_lat: ping-pong. Each side puts the message into the other's
//     buffer, its last byte a sequence number, and waits until the peer's
//     put changes the last byte of its own buffer. Latency is half the
//     round trip.
//   - The others are streams (see bench.stream): the client posts
//     operations with at most -O requests outstanding (by default the
//     test's window, as in ucx_perftest: 32 for the bandwidth tests, 1 for
//     the others), and flushes the worker at the end (and every -W
//     operations when -W is set; ucx_perftest flushes only at the end).
//   - ucp_put_bw: puts; those that complete at once (short and bcopy ones)
//     leave no request, so small puts stream.
//   - ucp_get: gets; with -O 1 each waits for its data (blocking, one at a
//     time).
//   - ucp_add: posted atomic adds (no result), which stream.
//   - ucp_fadd, ucp_swap, ucp_cswap: fetching atomics on a 64-bit word; with
//     -O 1 each waits for the old value.
//   - ucp_am_lat: ping-pong of active messages: each side sends, and waits
//     for the peer's message to reach its handler (rendezvous messages, from
//     UCX_RNDV_THRESH on, are received into a buffer before they count).
//   - ucp_am_bw: active messages in a stream (rendezvous ones leave a
//     request until the receiver took them).
//   - tag_lat, tag_sync_lat: ping-pong of tagged messages (tag 0x1337a880,
//     received with the full mask, or none with -C): the client sends and
//     then receives, the server receives and then sends, each waiting for
//     its request (a sync send completes once the peer's receive took its
//     message). With -U each receive first probes until the message is
//     there (the unexpected path).
//   - tag_bw, tag_sync_bw: the client sends, with at most -O sends
//     outstanding, while the server receives with at most -O receives
//     posted; at the end the server sends a one-byte message that the
//     client waits for, so the client's time covers the receiver's.
//   - stream_lat: ping-pong on the endpoints' streams: the client sends
//     the message and then receives as many bytes (a receive with
//     StreamRecvFlagWaitAll), the server receives and then sends, as
//     ucx_perftest's does.
//   - stream_bw: the client sends, with at most -O sends outstanding,
//     while the server receives the messages' bytes with at most -O
//     wait-all receives of one message each posted; at the end the server
//     sends one byte that the client waits for, as in tag_bw.
var tests = []*testDef{
	{name: "ucp_put_lat", window: 1, desc: "put latency", pingpong: true, loop: putLat},
	{name: "ucp_put_bw", window: 32, desc: "put bandwidth", loop: putBW},
	{name: "ucp_get", window: 1, desc: "get latency / bandwidth / message rate", loop: getLat},
	{name: "ucp_add", window: 1, aliases: []string{"ucp_atomic_add"}, desc: "atomic add bandwidth / message rate", loop: atomicAdd},
	{name: "ucp_fadd", window: 1, aliases: []string{"ucp_atomic_fadd"}, desc: "atomic fetch-and-add latency / bandwidth / rate", loop: fetchAtomic(ucp.AtomicOpAdd)},
	{name: "ucp_swap", window: 1, aliases: []string{"ucp_atomic_swap"}, desc: "atomic swap latency / bandwidth / rate", loop: fetchAtomic(ucp.AtomicOpSwap)},
	{name: "ucp_cswap", window: 1, aliases: []string{"ucp_atomic_cswap"}, desc: "atomic compare-and-swap latency / bandwidth / rate", loop: fetchAtomic(ucp.AtomicOpCSwap)},
	{name: "ucp_am_lat", window: 1, loopback: true, desc: "am latency", pingpong: true, am: true, loop: amLat},
	{name: "ucp_am_bw", window: 32, desc: "am bandwidth / message rate", am: true, loop: amBW},
	{name: "tag_lat", window: 1, loopback: true, desc: "tag match latency", pingpong: true, loop: tagLat(false)},
	{name: "tag_bw", window: 32, desc: "tag match bandwidth", loop: tagBW(false), serve: tagServe},
	{name: "tag_sync_lat", window: 1, desc: "tag sync match latency", pingpong: true, loop: tagLat(true)},
	{name: "tag_sync_bw", window: 32, desc: "tag sync match bandwidth", loop: tagBW(true), serve: tagServe},
	{name: "stream_lat", window: 1, loopback: true, desc: "stream latency", pingpong: true, loop: streamLat},
	{name: "stream_bw", window: 32, desc: "stream bandwidth", loop: streamBW, serve: streamServe},
}

func findTest(name string) *testDef {
	for _, t := range tests {
		if t.name == name {
			return t
		}
		for _, a := range t.aliases {
			if a == name {
				return t
			}
		}
	}
	return nil
}

// bench is one side of a test: its worker, its buffer (mapped, so that the
// peer can put, get and apply atomics there), a local send buffer, and the
// endpoint and key to the peer's buffer.
type bench struct {
	p        params
	test     *testDef
	client   bool
	ctx      *ucp.Context
	w        *ucp.Worker
	mem      *ucp.MemHandle
	buf      []byte // the mapped buffer
	sbuf     []byte // what this side sends
	ep       *ucp.Endpoint
	rkey     *ucp.Rkey
	raddr    uint64
	netPoll  bool  // the peer is reached through the network
	sn       uint8 // ping-pong sequence number
	amRecvd  int   // active messages received (by the handler)
	amExpect int   // active messages a ping-pong has waited for
	// sendParam passes the send buffer's memory handle (-z), or is nil.
	sendParam *ucp.RequestParam
	smem      *ucp.MemHandle
	tagMask   uint64 // of the tag tests' receives (0 with -C)
	loopback  bool   // the endpoint leads to this worker (-l)
	rte       rte    // how the peer is reached out of band
}

// spinTime is how long waitFor polls without events before it parks, where
// data comes through Go's network poller. Measured on a loaded 2-core
// machine (tcp ucp_am_lat, 8 B): parking after a few tens of microseconds
// gives a median of about 150 us, after 10 ms about 13 us: a parked
// process waits for the scheduler on every message.
const spinTime = 10 * time.Millisecond

// waitFor progresses the worker until cond holds. Like ucx_perftest it
// polls without pause; where data comes through Go's network poller (tcp)
// it parks in Worker.Idle after polling spinTime without events, so that a
// goroutine that only polls cannot starve the poller when the processors
// are busy (tcp wakes a parked worker when data arrives).
func (b *bench) waitFor(cond func() bool) error {
	var s spin
	for !cond() {
		if err := b.poll(&s); err != nil {
			return err
		}
	}
	return nil
}

// waitReq is waitFor of a request's completion, which it tests with a
// direct call: the latency tests wait for a request per message, and the
// harness should cost as little as ucx_perftest's.
func (b *bench) waitReq(r *ucp.Request) error {
	var s spin
	for !r.IsCompleted() {
		if err := b.poll(&s); err != nil {
			return err
		}
	}
	return nil
}

// spin is the state of a wait: fruitless polls in a row, and when they
// started to last (see waitFor).
type spin struct {
	n        int
	deadline time.Time
}

// poll is a step of a wait: it progresses the worker once, and every
// 128th fruitless poll in a row looks at the peer and the time (pollSlow).
func (b *bench) poll(s *spin) error {
	if b.w.Progress() != 0 {
		if s.n != 0 {
			*s = spin{}
		}
		return nil
	}
	if s.n++; s.n%128 != 0 {
		return nil
	}
	return b.pollSlow(s)
}

// pollSlow checks whether the peer ended, every peerCheckEvery fruitless
// polls, and parks where data comes through the network once the polls
// lasted spinTime.
func (b *bench) pollSlow(s *spin) error {
	if s.n%peerCheckEvery == 0 && b.rte.peerGone() {
		return errPeerGone
	}
	if !b.netPoll {
		return nil
	}
	now := time.Now()
	switch {
	case s.deadline.IsZero():
		s.deadline = now.Add(spinTime)
	case now.After(s.deadline):
		b.w.Idle()
	}
	return nil
}

// peerCheckEvery is how many fruitless polls waitFor makes between two
// looks at whether the peer ended (a system call for a socket: rare
// enough to cost nothing measurable, often enough to end a wait for a dead
// peer within moments); a multiple of 128 (poll).
const peerCheckEvery = 1 << 12

// errPeerGone ends a wait for a peer that ended.
var errPeerGone = errors.New("the peer closed its connection (it ended, or was killed)")

func (b *bench) wait(r *ucp.Request, err error) error {
	if err != nil {
		return err
	}
	if r == nil {
		return nil
	}
	if err := b.waitReq(r); err != nil {
		r.Cancel()
		r.Free()
		return err
	}
	err = r.Status()
	r.Free()
	return err
}

// lastByte loads the last byte of the mapped buffer atomically (through the
// aligned 32-bit word that holds it).
func (b *bench) lastByte() uint8 {
	i := len(b.buf) - 1
	p := unsafe.Pointer(&b.buf[i&^3])
	return uint8(atomic.LoadUint32((*uint32)(p)) >> (8 * (i & 3)))
}

func (b *bench) put() error {
	b.sbuf[len(b.sbuf)-1] = b.sn
	return b.wait(b.ep.PutNBX(b.sbuf, b.raddr, b.rkey, nil))
}

func putLat(b *bench, n int, p *perf) error {
	for i := 0; i < n; i++ {
		b.sn++
		if b.client {
			if err := b.put(); err != nil {
				return err
			}
		}
		sn := b.sn
		if err := b.waitFor(func() bool { return b.lastByte() == sn }); err != nil {
			return err
		}
		if !b.client {
			if err := b.put(); err != nil {
				return err
			}
		}
		p.update(1, int64(b.p.Size))
	}
	return nil
}

// stream posts n operations with post, as ucx_perftest's stream tests do:
// before each, it waits until fewer than -O requests are outstanding (an
// operation that does not complete at once, such as a get or a fetching
// atomic, is then waited for before the next one is posted with -O 1);
// every -W operations (when set) and at the end it waits for all of them
// and flushes the worker.
func (b *bench) stream(n int, p *perf, bytes int64, post func() (*ucp.Request, error)) error {
	return b.windowed(n, p, bytes, post, b.w.Flush)
}

// windowed posts n operations with post, at most -O of them outstanding;
// every -W operations (when set) and at the end it waits for all of them
// and calls drained (if not nil).
func (b *bench) windowed(n int, p *perf, bytes int64, post func() (*ucp.Request, error), drained func() error) error {
	reqs := make([]*ucp.Request, 0, b.p.Outstanding)
	drain := func() error {
		for _, r := range reqs {
			if err := b.wait(r, nil); err != nil {
				return err
			}
		}
		reqs = reqs[:0]
		if drained == nil {
			return nil
		}
		return drained()
	}
	for i := 0; i < n; i++ {
		for len(reqs) >= b.p.Outstanding {
			if err := b.wait(reqs[0], nil); err != nil {
				return err
			}
			reqs = append(reqs[:0], reqs[1:]...)
		}
		r, err := post()
		if err != nil {
			return err
		}
		if r != nil {
			reqs = append(reqs, r)
		}
		p.update(1, bytes)
		if b.p.FlushEvery > 0 && (i+1)%b.p.FlushEvery == 0 {
			if err := drain(); err != nil {
				return err
			}
		}
	}
	return drain()
}

func putBW(b *bench, n int, p *perf) error {
	return b.stream(n, p, int64(b.p.Size), func() (*ucp.Request, error) {
		return b.ep.PutNBX(b.sbuf, b.raddr, b.rkey, nil)
	})
}

func getLat(b *bench, n int, p *perf) error {
	return b.stream(n, p, int64(b.p.Size), func() (*ucp.Request, error) {
		return b.ep.GetNBX(b.sbuf, b.raddr, b.rkey, nil)
	})
}

func atomicAdd(b *bench, n int, p *perf) error {
	return b.stream(n, p, 8, func() (*ucp.Request, error) {
		return b.ep.AtomicOpNBX(ucp.AtomicOpAdd, 1, b.raddr, b.rkey, nil)
	})
}

func fetchAtomic(op ucp.AtomicOp) func(b *bench, n int, p *perf) error {
	return func(b *bench, n int, p *perf) error {
		// One reply word per outstanding request.
		replies := make([]uint64, b.p.Outstanding+1)
		params := make([]*ucp.RequestParam, len(replies))
		for i := range params {
			params[i] = new(ucp.RequestParam).SetReply(&replies[i])
		}
		i := 0
		return b.stream(n, p, 8, func() (*ucp.Request, error) {
			k := i % len(replies)
			i++
			replies[k] = 0 // the compare value of cswap
			return b.ep.AtomicOpNBX(op, uint64(i), b.raddr, b.rkey, params[k])
		})
	}
}

// amID is the active-message id of the tests.
const amID = 0

// amHandler counts the messages that reach it; rendezvous ones count once
// their data is in the buffer.
func (b *bench) amHandler(_ any, _, _ []byte, param *ucp.AMRecvParam) ucs.Status {
	if param.RecvAttr&ucp.AMRecvAttrFlagRNDV == 0 {
		b.amRecvd++
		return ucs.OK
	}
	rp := new(ucp.RequestParam).SetCallback(func(r *ucp.Request, st error, _ any) {
		if st != nil {
			fmt.Printf("ucpperf: receiving an active message: %v\n", st)
		}
		b.amRecvd++
		r.Free()
	})
	r, err := b.w.AMRecvDataNBX(param.Desc, b.buf[:param.Length], rp)
	switch {
	case err != nil:
		fmt.Printf("ucpperf: receiving an active message: %v\n", err)
		b.amRecvd++
	case r == nil:
		b.amRecvd++
	}
	return ucs.OK
}

func (b *bench) amSend() (*ucp.Request, error) {
	return b.ep.AMSendNBX(amID, nil, b.sbuf, b.sendParam)
}

func amLat(b *bench, n int, p *perf) error {
	for i := 0; i < n; i++ {
		// Count from the start of the test, not from now: the peer's next
		// message may have arrived while this side waited in a barrier.
		b.amExpect++
		want := b.amExpect
		var r *ucp.Request
		var err error
		if b.client {
			if r, err = b.amSend(); err != nil {
				return err
			}
		}
		if err := b.waitFor(func() bool { return b.amRecvd >= want }); err != nil {
			return err
		}
		if !b.client {
			if r, err = b.amSend(); err != nil {
				return err
			}
		}
		if err := b.wait(r, nil); err != nil {
			return err
		}
		p.update(1, int64(b.p.Size))
	}
	return nil
}

func amBW(b *bench, n int, p *perf) error {
	return b.stream(n, p, int64(b.p.Size), b.amSend)
}

// serveWhile progresses the worker until fn returns, for the passive side
// of one-sided and streaming tests (software RMA, atomics and active
// messages need its progress).
func (b *bench) serveWhile(fn func() error) error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	for {
		select {
		case err := <-done:
			return err
		default:
		}
		if b.w.Progress() == 0 {
			if b.netPoll {
				b.w.Idle()
			} else {
				runtime.Gosched()
			}
		}
	}
}

// perfTag is the tag of the tag tests' messages, as in ucx_perftest.
const perfTag = 0x1337a880

// tagSend sends the send buffer as a tagged message (sync or not).
func (b *bench) tagSend(sync bool) (*ucp.Request, error) {
	if sync {
		return b.ep.TagSendSyncNBX(b.sbuf, perfTag, b.sendParam)
	}
	return b.ep.TagSendNBX(b.sbuf, perfTag, b.sendParam)
}

// tagRecv posts a receive of a tagged message into buf; with -U it first
// probes until the message has arrived.
func (b *bench) tagRecv(buf []byte) (*ucp.Request, error) {
	if b.p.Unexpected {
		if err := b.waitFor(func() bool { return b.w.TagProbeNB(perfTag, b.tagMask, false, nil) != nil }); err != nil {
			return nil, err
		}
	}
	return b.w.TagRecvNBX(buf, perfTag, b.tagMask, nil)
}

func tagLat(sync bool) func(b *bench, n int, p *perf) error {
	return func(b *bench, n int, p *perf) error {
		for i := 0; i < n; i++ {
			if b.loopback {
				rr, err := b.tagRecv(b.buf)
				if err != nil {
					return err
				}
				sr, err := b.tagSend(sync)
				if err := b.loopbackPingPong(rr, sr, err); err != nil {
					return err
				}
				p.update(1, int64(b.p.Size))
				continue
			}
			if b.client {
				if err := b.wait(b.tagSend(sync)); err != nil {
					return err
				}
			}
			if err := b.wait(b.tagRecv(b.buf)); err != nil {
				return err
			}
			if !b.client {
				if err := b.wait(b.tagSend(sync)); err != nil {
					return err
				}
			}
			p.update(1, int64(b.p.Size))
		}
		return nil
	}
}

// tagBW is the sender of tag_bw: a stream of sends, then the receiver's
// one-byte acknowledgement.
func tagBW(sync bool) func(b *bench, n int, p *perf) error {
	return func(b *bench, n int, p *perf) error {
		if err := b.windowed(n, p, int64(b.p.Size), func() (*ucp.Request, error) { return b.tagSend(sync) }, nil); err != nil {
			return err
		}
		var ack [1]byte
		return b.wait(b.w.TagRecvNBX(ack[:], perfTag, b.tagMask, nil))
	}
}

// tagServe is the receiver of tag_bw: n receives, at most -O posted at
// once, then the one-byte acknowledgement.
func tagServe(b *bench, n int, p *perf) error {
	if err := b.windowed(n, p, int64(b.p.Size), func() (*ucp.Request, error) { return b.tagRecv(b.buf) }, nil); err != nil {
		return err
	}
	return b.wait(b.ep.TagSendNBX(b.sbuf[:1], perfTag, nil))
}

// loopbackPingPong ends an iteration of a ping-pong test in loopback
// (-l): the receive rr was posted first, then the message sent (a
// rendezvous or sync send completes only once a receive took its message,
// which here only this goroutine can post); it waits for the send (sr,
// err), then for rr. Small messages take the paths of the two-process
// test: the receive is expected when the message arrives.
func (b *bench) loopbackPingPong(rr, sr *ucp.Request, err error) error {
	if err := b.wait(sr, err); err != nil {
		if rr != nil {
			rr.Cancel()
			rr.Free()
		}
		return err
	}
	return b.wait(rr, nil)
}

// streamSend sends the send buffer on the endpoint's stream.
func (b *bench) streamSend() (*ucp.Request, error) {
	return b.ep.StreamSendNBX(b.sbuf, b.sendParam)
}

// streamWaitAll is the parameter of the stream tests' receives: each
// completes once its buffer is full.
var streamWaitAll = new(ucp.RequestParam).SetStreamRecvFlags(ucp.StreamRecvFlagWaitAll)

// streamRecv posts a receive of len(buf) stream bytes into buf.
func (b *bench) streamRecv(buf []byte) (*ucp.Request, error) {
	r, _, err := b.ep.StreamRecvNBX(buf, streamWaitAll)
	return r, err
}

func streamLat(b *bench, n int, p *perf) error {
	for i := 0; i < n; i++ {
		if b.loopback {
			rr, err := b.streamRecv(b.buf[:b.p.Size])
			if err != nil {
				return err
			}
			sr, err := b.streamSend()
			if err := b.loopbackPingPong(rr, sr, err); err != nil {
				return err
			}
			p.update(1, int64(b.p.Size))
			continue
		}
		if b.client {
			if err := b.wait(b.streamSend()); err != nil {
				return err
			}
		}
		if err := b.wait(b.streamRecv(b.buf[:b.p.Size])); err != nil {
			return err
		}
		if !b.client {
			if err := b.wait(b.streamSend()); err != nil {
				return err
			}
		}
		p.update(1, int64(b.p.Size))
	}
	return nil
}

// streamBW is the sender of stream_bw: a stream of sends, then the
// receiver's one-byte acknowledgement.
func streamBW(b *bench, n int, p *perf) error {
	if err := b.windowed(n, p, int64(b.p.Size), b.streamSend, nil); err != nil {
		return err
	}
	var ack [1]byte
	return b.wait(b.streamRecv(ack[:]))
}

// streamServe is the receiver of stream_bw: n receives of one message's
// bytes, at most -O posted at once, then the one-byte acknowledgement.
func streamServe(b *bench, n int, p *perf) error {
	buf := b.buf[:b.p.Size]
	if err := b.windowed(n, p, int64(b.p.Size), func() (*ucp.Request, error) { return b.streamRecv(buf) }, nil); err != nil {
		return err
	}
	return b.wait(b.ep.StreamSendNBX(b.sbuf[:1], nil))
}
