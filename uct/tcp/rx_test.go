package tcp

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// recorder is a frameHandler that records what an inStream hands it.
type recorder struct {
	frames  []string // "type:fixed:body" of each frame ended
	aborted int
	caught  int
	cur     string
	fixed   []byte
	body    []byte
	drop    bool // begin asks to drop bodies
}

func (r *recorder) begin(h frameHeader, fixed []byte) ([][]byte, error) {
	r.cur = string(rune('0' + h.typ))
	r.fixed = append([]byte(nil), fixed...)
	n := int(h.len) - len(fixed)
	if r.drop {
		r.body = nil
		return nil, nil
	}
	r.body = make([]byte, n)
	// Two buffers, to check that the body is split across them in order.
	return [][]byte{r.body[:n/2], r.body[n/2:]}, nil
}

func (r *recorder) end(bool) error {
	r.frames = append(r.frames, r.cur+":"+string(r.fixed)+":"+string(r.body))
	return nil
}

func (r *recorder) abort(error)         { r.aborted++ }
func (r *recorder) caughtUp(bool) error { r.caught++; return nil }
func (r *recorder) tick(uint64) error   { return nil }
func (r *recorder) ended(error)         {}

func frameBytes(typ uint8, fixed, body string) []byte {
	b := make([]byte, frameHeaderLen, frameHeaderLen+len(fixed)+len(body))
	putFrameHeader(b, typ, 0, len(fixed)+len(body))
	return append(append(b, fixed...), body...)
}

// socketPair returns a connected pair of non-blocking stream sockets,
// closed at the end of the test.
func socketPair(t *testing.T) [2]int {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		unix.Close(fds[0])
		unix.Close(fds[1])
	})
	return fds
}

// TestInStreamFragments feeds frames to an inStream through a socket in
// pieces of every size, and checks that every frame ends whole and once,
// whatever the cut: inside a header, a fixed part or a body, with bodies
// read through the buffer and straight into their buffers.
func TestInStreamFragments(t *testing.T) {
	big := string(bytes.Repeat([]byte("0123456789abcdef"), 3*directRead/16+1))
	put := func(body string) []byte {
		return frameBytes(framePut, string(bytes.Repeat([]byte{'k'}, putHeaderLen)), body)
	}
	var wire []byte
	wire = append(wire, put("hello")...)
	wire = append(wire, frameBytes(frameFlush, "", "")...)
	wire = append(wire, put(big)...)
	wire = append(wire, put("")...)
	wire = append(wire, frameBytes(frameAM, "", "am")...)
	want := []string{
		"2:" + string(bytes.Repeat([]byte{'k'}, putHeaderLen)) + ":hello",
		"4::",
		"2:" + string(bytes.Repeat([]byte{'k'}, putHeaderLen)) + ":" + big,
		"2:" + string(bytes.Repeat([]byte{'k'}, putHeaderLen)) + ":",
		"1::am",
	}
	type cut struct {
		name  string
		chunk int
		buf   int
	}
	var cases []cut
	for _, c := range []cut{
		{"bytes", 1, 64},
		{"odd", 7, 64},
		{"headers", frameHeaderLen, 128},
		{"direct", 4096 + 5, 256},
		{"whole", len(wire), 64 << 10},
	} {
		cases = append(cases, c, cut{c.name + "/progress", c.chunk, c.buf})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fds := socketPair(t)
			unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_SNDBUF, 1<<20)
			rec := &recorder{}
			// Read as Progress reads or as the poller does.
			progress := strings.HasSuffix(tc.name, "/progress")
			s := &inStream{iface: &Iface{}, h: rec, allowed: 1<<frameAM | 1<<framePut | 1<<frameFlush, maxAM: 1 << 20, buf: make([]byte, tc.buf), fd: fds[1]}
			s.iface.cfg.rxQueueLen = 1 << 20
			for off := 0; off < len(wire); off += tc.chunk {
				b := wire[off:min(off+tc.chunk, len(wire))]
				if n, err := unix.Write(fds[0], b); err != nil || n != len(b) {
					t.Fatalf("write: %d, %v", n, err)
				}
				s.pump(progress)
				if s.err != nil {
					t.Fatalf("after %d bytes: %v", off+len(b), s.err)
				}
			}
			if diff := cmp.Diff(want, rec.frames); diff != "" {
				t.Errorf("frames (-want +got):\n%s", diff)
			}
			if rec.caught == 0 {
				t.Error("the handler was never told it caught up")
			}
			unix.Shutdown(fds[0], unix.SHUT_WR)
			s.pump(false)
			if s.err != io.EOF {
				t.Errorf("at the end of the stream: %v, want EOF", s.err)
			}
		})
	}
}

// TestInStreamErrors checks that a stream ends with an error, and aborts
// the frame it was in, for a malformed header and for an end in the
// middle of a frame; and that dropped bodies are read past.
func TestInStreamErrors(t *testing.T) {
	bad := frameBytes(frameAM, "", "x")
	bad[2] = 2 // reserved bits (1 is amSignaled)
	cut := frameBytes(frameAM, "", "truncated")
	cut = cut[:len(cut)-3]
	dropped := append(frameBytes(frameAM, "", "dropped body"), frameBytes(frameFlush, "", "")...)
	for _, tc := range []struct {
		name    string
		wire    []byte
		drop    bool
		want    error
		frames  int
		aborted int
	}{
		{"reserved bits", bad, false, ucs.ErrInvalidParam, 0, 0},
		{"unknown type", frameBytes(frameAck, "12345678", ""), false, ucs.ErrInvalidParam, 0, 0},
		{"cut short", cut, false, io.ErrUnexpectedEOF, 0, 1},
		{"dropped", dropped, true, io.EOF, 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fds := socketPair(t)
			rec := &recorder{drop: tc.drop}
			s := &inStream{h: rec, allowed: 1<<frameAM | 1<<frameFlush, maxAM: 64, buf: make([]byte, 64), fd: fds[1]}
			unix.Write(fds[0], tc.wire)
			unix.Shutdown(fds[0], unix.SHUT_WR)
			// A reader may stop after a short read (the poll set reports
			// the end next): read on as the set would have it.
			for k := 0; k < 3 && s.err == nil; k++ {
				s.pump(false)
			}
			if s.inFrame {
				s.inFrame = false
				rec.abort(s.err)
			}
			if !errors.Is(s.err, tc.want) {
				t.Errorf("stream error %v, want %v", s.err, tc.want)
			}
			if len(rec.frames) != tc.frames || rec.aborted != tc.aborted {
				t.Errorf("%d frames ended, %d aborted; want %d and %d", len(rec.frames), rec.aborted, tc.frames, tc.aborted)
			}
		})
	}
}

// TestPollSet checks that the connections of an EP join the poll sets of
// both ifaces (the EP's side and the accepted side), that Progress reads
// a get reply through them, and that they leave the sets when the EP is
// destroyed.
func TestPollSet(t *testing.T) {
	md := testMD(t)
	x, y := openIface(t, md, nil), openIface(t, md, nil)
	ep, err := x.EPCreate(&uct.EPParams{DeviceAddr: y.DeviceAddress(), IfaceAddr: y.Address()})
	if err != nil {
		t.Fatal(err)
	}
	members := func(i *Iface) int { return int(i.poll.n.Load()) }
	progressUntil(t, func() bool { return members(x) == 1 && members(y) == 1 }, x, y)
	src := register(t, md, 64)
	src.memh.r.mu.Lock() // orders the write before the peer's read, for the race detector
	copy(src.mem, "through the poll set")
	src.memh.r.mu.Unlock()
	got := make([]byte, 20)
	done := false
	comp := &uct.Completion{Count: 1, Func: func(*uct.Completion) { done = true }}
	if st := ep.GetZcopy([]uct.IOV{{Buffer: got}}, src.base(), src.rkey.Rkey, comp); st != ucs.InProgress {
		t.Fatalf("get: %v", st)
	}
	progressUntil(t, func() bool { return done }, x, y)
	if comp.Status() != ucs.OK || string(got) != "through the poll set" {
		t.Fatalf("get: %v, %q", comp.Status(), got)
	}
	ep.Destroy()
	progressUntil(t, func() bool { return members(x) == 0 && members(y) == 0 }, x, y)
}
