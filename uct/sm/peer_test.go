package sm

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/goshmem/goshmem/internal/testpeer"
	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// The two-process tests run a peer process (testpeer role "sm", its
// argument the MD of the peer's segment: "posix" or "sysv"), which
// allocates a segment and opens an iface, prints its packed key and
// addresses, reads the parent's iface address, connects back and prints
// "ready", and then serves the active messages below until its input is
// closed.
func TestMain(m *testing.M) {
	testpeer.Serve(
		testpeer.Role{Name: "sm", Run: runPeer},
		testpeer.Role{Name: "sm-named-segment", Run: runNamedSegmentChild},
	)
	os.Exit(m.Run())
}

// testMD is an MD under test: its name and component, and how the base
// address is read from one of its packed keys.
type testMD struct {
	name string
	comp uct.Component
	base func(key []byte) (uint64, error)
}

var (
	posixTest = testMD{PosixMDName, &PosixComponent{}, func(key []byte) (uint64, error) {
		k, err := decodeMkey(key)
		return k.addr, err
	}}
	sysvTest = testMD{SysvMDName, &SysvComponent{}, func(key []byte) (uint64, error) {
		k, err := decodeSysvMkey(key)
		return k.addr, err
	}}
)

// childSegSize is the size of the peer's segment.
const childSegSize = 4 << 20

// Active message ids of the peer protocol.
const (
	amEcho      = 1 // peer sends the message back with amEchoReply
	amEchoReply = 2
	amRead      = 3 // header: offset; payload: length (uint32). Reply: the bytes.
	amReadReply = 4
	amAdd       = 5 // header: offset; payload: count (uint64). Peer adds 1 count times.
	amDone      = 6
	amZEcho     = 7 // like amEcho, but the peer replies with AMZcopy
	amLateEcho  = 8 // header: delay in ms; the peer sleeps, then echoes the payload
)

type reply struct {
	id   uint8
	data []byte
}

// runPeer is the peer process.
func runPeer(args []string, stdin io.Reader, stdout io.Writer) error {
	tm := posixTest
	if len(args) == 1 && args[0] == SysvMDName {
		tm = sysvTest
	}
	md, err := tm.comp.OpenMD(tm.name, nil)
	if err != nil {
		return err
	}
	a, err := md.MemAlloc(childSegSize, uct.MemAccessDefault, "peer")
	if err != nil {
		return err
	}
	key, err := md.MkeyPack(nil, a.Memh)
	if err != nil {
		return err
	}
	iface, err := md.IfaceOpen(nil, nil, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%x %x %x\n", key, iface.Address(), iface.DeviceAddress())

	in := bufio.NewReader(stdin)
	line, err := in.ReadString('\n')
	if err != nil {
		return err
	}
	parent, err := hex.DecodeString(strings.TrimSpace(line))
	if err != nil {
		return err
	}
	ep, err := iface.EPCreate(&uct.EPParams{DeviceAddr: iface.DeviceAddress(), IfaceAddr: parent})
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "ready")
	var done atomic.Bool
	go func() {
		io.Copy(io.Discard, in)
		done.Store(true)
	}()

	seg := unsafe.Slice((*byte)(a.Address), a.Length)
	var out []reply
	handle := func(arg any, data []byte, flags uint32) ucs.Status {
		id := arg.(uint8)
		switch id {
		case amEcho, amZEcho:
			out = append(out, reply{id, append([]byte(nil), data...)})
		case amLateEcho:
			time.Sleep(time.Duration(binary.LittleEndian.Uint64(data)) * time.Millisecond)
			out = append(out, reply{amEcho, append([]byte(nil), data[8:]...)})
		case amRead:
			off := binary.LittleEndian.Uint64(data)
			n := binary.LittleEndian.Uint32(data[8:])
			out = append(out, reply{amReadReply, append([]byte(nil), seg[off:off+uint64(n)]...)})
		case amAdd:
			off := binary.LittleEndian.Uint64(data)
			count := binary.LittleEndian.Uint64(data[8:])
			w := (*uint64)(unsafe.Pointer(&seg[off]))
			for range count {
				atomic.AddUint64(w, 1)
			}
			out = append(out, reply{amDone, nil})
		}
		return ucs.OK
	}
	for _, id := range []uint8{amEcho, amRead, amAdd, amZEcho, amLateEcho} {
		if err := iface.SetAMHandler(id, handle, id, uct.CBFlagSync); err != nil {
			return err
		}
	}
	for idle := 0; !done.Load(); {
		if iface.Progress() == 0 && len(out) == 0 {
			if idle++; idle > 1000 {
				runtime.Gosched()
			}
			continue
		}
		idle = 0
		for len(out) > 0 {
			r := out[0]
			var s ucs.Status
			switch r.id {
			case amEcho:
				_, s = ep.AMBcopy(amEchoReply, func(dst []byte) int { return copy(dst, r.data) }, 0)
			case amZEcho:
				h := min(len(r.data), 3)
				s = ep.AMZcopy(amEchoReply, r.data[:h], []uct.IOV{{Buffer: r.data[h:]}}, 0, nil)
			default:
				_, s = ep.AMBcopy(r.id, func(dst []byte) int { return copy(dst, r.data) }, 0)
			}
			if s == ucs.ErrNoResource {
				break
			}
			if s != ucs.OK {
				return fmt.Errorf("reply %d: %v", r.id, s)
			}
			out = out[1:]
		}
	}
	return nil
}

// peer is the parent's view of a peer process.
type peer struct {
	*testpeer.Peer
	tb      testing.TB
	md      testMD // the MD of the peer's segment
	key     []byte // packed key of the peer's segment
	addr    []byte // the peer's iface address
	dev     []byte
	base    uint64 // remote base address of the segment
	rkey    uct.RkeyBundle
	iface   *Iface
	ep      *EP
	replies []reply
}

// startPeer starts a peer process whose segment is a posix one, connects an
// EP to it and unpacks its key; everything is released at the end of the
// test.
func startPeer(tb testing.TB) *peer { return startPeerMD(tb, posixTest) }

// startPeerMD is startPeer with the peer's segment allocated by md.
func startPeerMD(tb testing.TB, md testMD) *peer {
	tb.Helper()
	p := &peer{Peer: testpeer.Start(tb, "sm", testpeer.Options{Args: []string{md.name}}), tb: tb, md: md}
	tb.Cleanup(p.release)
	fields, err := p.NextHex(3)
	if err != nil {
		tb.Fatalf("reading the peer's addresses: %v", err)
	}
	p.key, p.addr, p.dev = fields[0], fields[1], fields[2]
	if p.base, err = md.base(p.key); err != nil {
		tb.Fatal(err)
	}

	p.iface = openTestIface(tb)
	for _, id := range []uint8{amEchoReply, amReadReply, amDone} {
		p.iface.SetAMHandler(id, func(arg any, data []byte, flags uint32) ucs.Status {
			p.replies = append(p.replies, reply{arg.(uint8), append([]byte(nil), data...)})
			return ucs.OK
		}, id, uct.CBFlagSync)
	}
	// The peer connects back before the test may close the iface.
	if ans, err := p.Call(hex.EncodeToString(p.iface.Address())); err != nil || ans != "ready" {
		tb.Fatalf("peer answered %q, %v to the parent's address; want ready", ans, err)
	}
	ep, err := p.iface.EPCreate(&uct.EPParams{DeviceAddr: p.dev, IfaceAddr: p.addr})
	if err != nil {
		tb.Fatal(err)
	}
	p.ep = ep.(*EP)
	if p.rkey, err = md.comp.RkeyUnpack(p.key); err != nil {
		tb.Fatal(err)
	}
	return p
}

// stop ends the peer, failing the test if it failed, and releases what
// startPeer took.
func (p *peer) stop() {
	if err := p.Close(); err != nil {
		p.tb.Error(err)
	}
	p.release()
}

// release releases the rkey and the EP of startPeer.
func (p *peer) release() {
	if p.rkey.Handle != nil {
		p.md.comp.RkeyRelease(p.rkey)
		p.rkey = uct.RkeyBundle{}
	}
	if p.ep != nil {
		p.ep.Destroy()
		p.ep = nil
	}
}

// openTestIface opens a posix iface that is closed at the end of the test.
func openTestIface(tb testing.TB) *Iface {
	tb.Helper()
	md, err := (&PosixComponent{}).OpenMD(PosixMDName, nil)
	if err != nil {
		tb.Fatal(err)
	}
	i, err := md.IfaceOpen(nil, &uct.IfaceParams{TLName: PosixTLName, DevName: DevName}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(i.Close)
	return i.(*Iface)
}

// send retries an active message until the peer's FIFO takes it.
func (p *peer) send(f func() ucs.Status) {
	p.tb.Helper()
	for {
		switch s := f(); s {
		case ucs.OK:
			return
		case ucs.ErrNoResource:
			p.iface.Progress()
			runtime.Gosched()
		default:
			p.tb.Fatalf("send: %v", s)
		}
	}
}

// wait progresses until a reply arrives and returns it. It gives up after a
// minute, so that a broken peer fails the test instead of hanging it.
func (p *peer) wait() reply {
	p.tb.Helper()
	deadline := time.Now().Add(time.Minute)
	for spins := 0; len(p.replies) == 0; spins++ {
		if p.iface.Progress() == 0 && spins%1024 == 0 {
			if time.Now().After(deadline) {
				p.tb.Fatal("no reply from the peer process")
			}
			runtime.Gosched()
		}
	}
	r := p.replies[0]
	p.replies = p.replies[1:]
	return r
}

// read returns n bytes at offset off of the peer's segment, read by the peer
// itself.
func (p *peer) read(off uint64, n int) []byte {
	p.tb.Helper()
	var out []byte
	for n > 0 {
		c := min(n, 4096)
		var pl [4]byte
		binary.LittleEndian.PutUint32(pl[:], uint32(c))
		p.send(func() ucs.Status { return p.ep.AMShort(amRead, off, pl[:]) })
		r := p.wait()
		if r.id != amReadReply || len(r.data) != c {
			p.tb.Fatalf("read reply: id %d, %d bytes; want id %d, %d bytes", r.id, len(r.data), amReadReply, c)
		}
		out = append(out, r.data...)
		off += uint64(c)
		n -= c
	}
	return out
}

// TestPeerCheck checks EP.Check (uct_ep_check) against a peer process: OK
// while it runs, ucs.ErrEndpointTimeout once it was killed, both before and
// after the parent reaps it (a zombie has no descriptors); and the argument
// errors.
func TestPeerCheck(t *testing.T) {
	p := startPeer(t)
	if st := p.ep.Check(0, nil); st != ucs.OK {
		t.Fatalf("Check of a live peer = %v, want OK", st)
	}
	if st := p.ep.Check(1, nil); st != ucs.ErrInvalidParam {
		t.Errorf("Check with flags 1 = %v, want ErrInvalidParam", st)
	}
	if st := p.ep.Check(0, new(uct.Completion)); st != ucs.ErrInvalidParam {
		t.Errorf("Check with a completion = %v, want ErrInvalidParam", st)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	// Not reaped yet: the peer is a zombie until Wait.
	for st := p.ep.Check(0, nil); st != ucs.ErrEndpointTimeout; st = p.ep.Check(0, nil) {
		if st != ucs.OK {
			t.Fatalf("Check of a killed peer = %v, want ErrEndpointTimeout", st)
		}
		runtime.Gosched() // SIGKILL is delivered asynchronously
	}
	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	if st := p.ep.Check(0, nil); st != ucs.ErrEndpointTimeout {
		t.Errorf("Check of a reaped peer = %v, want ErrEndpointTimeout", st)
	}
	// An EP to an iface of this process: alive (the process is).
	i := openTestIface(t)
	ep, err := p.iface.EPCreate(&uct.EPParams{DeviceAddr: i.DeviceAddress(), IfaceAddr: i.Address()})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Destroy()
	if st := ep.(*EP).Check(0, nil); st != ucs.OK {
		t.Errorf("Check of an open iface of this process = %v, want OK", st)
	}
}
