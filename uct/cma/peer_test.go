package cma

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/goshmem/goshmem/internal/testpeer"
	"github.com/goshmem/goshmem/uct"
)

// The two-process tests run a peer process (testpeer role "cma"). The peer
// registers a buffer and opens an iface, prints the packed key and the
// iface and device addresses, then answers commands read from its input,
// one a line, until the input is closed:
//
//	sum OFF N        -> the SHA-256 of buffer[OFF:OFF+N], in hex
//	fill OFF N SEED  -> fills buffer[OFF:OFF+N] with pattern(N, SEED); "ok"
//	connect IFACE    -> creates an EP to the hex iface address IFACE (of
//	                    this device) and prints "ok" or the error
//	put PID RADDR    -> puts 8 bytes at RADDR of process PID through an EP
//	                    made without checks; prints the status
func TestMain(m *testing.M) {
	testpeer.Serve(testpeer.Role{Name: "cma", Run: runPeer})
	os.Exit(m.Run())
}

// childBufSize is the size of the peer's registered buffer.
const childBufSize = 9 << 20

// peerBuf is the peer's buffer; a global, so that it stays where it is.
var peerBuf []byte

func pattern(n, seed int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*13 + seed*7 + 1 + i>>12)
	}
	return b
}

// runPeer is the peer process.
func runPeer(_ []string, stdin io.Reader, stdout io.Writer) error {
	md, err := (&Component{}).OpenMD(MDName, nil)
	if err != nil {
		return err
	}
	peerBuf = make([]byte, childBufSize)
	memh, err := md.MemReg(unsafe.Pointer(&peerBuf[0]), len(peerBuf), uct.MemAccessDefault)
	if err != nil {
		return err
	}
	key, err := md.MkeyPack(nil, memh)
	if err != nil {
		return err
	}
	iface, err := md.IfaceOpen(nil, nil, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%x %x %x\n", key, iface.Address(), iface.DeviceAddress())
	in := bufio.NewScanner(stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		num := func(k int) int {
			if k >= len(f) {
				return -1
			}
			v, _ := strconv.Atoi(f[k])
			return v
		}
		switch {
		case len(f) == 3 && f[0] == "sum":
			off, n := num(1), num(2)
			fmt.Fprintf(stdout, "%x\n", sha256.Sum256(peerBuf[off:off+n]))
		case len(f) == 4 && f[0] == "fill":
			off, n := num(1), num(2)
			copy(peerBuf[off:off+n], pattern(n, num(3)))
			fmt.Fprintln(stdout, "ok")
		case len(f) == 2 && f[0] == "connect":
			addr, _ := hex.DecodeString(f[1])
			if ep, err := iface.EPCreate(&uct.EPParams{DeviceAddr: iface.DeviceAddress(), IfaceAddr: addr}); err != nil {
				fmt.Fprintln(stdout, strings.ReplaceAll(err.Error(), "\n", " "))
			} else {
				ep.Destroy()
				fmt.Fprintln(stdout, "ok")
			}
		case len(f) == 3 && f[0] == "put":
			raddr, _ := strconv.ParseUint(f[2], 0, 64)
			ep := &EP{iface: iface.(*Iface), pid: num(1)}
			fmt.Fprintln(stdout, ep.PutShort(make([]byte, 8), raddr, uint64(ep.pid)).Error())
		default:
			return fmt.Errorf("bad command %q", in.Text())
		}
	}
	return in.Err()
}

// peer is the parent's view of a peer process.
type peer struct {
	*testpeer.Peer
	tb    testing.TB
	key   []byte // packed key of the peer's buffer
	addr  []byte // the peer's iface address
	dev   []byte
	base  uint64 // remote address of the buffer
	rkey  uct.RkeyBundle
	iface *Iface
	ep    *EP
}

// startPeer starts a peer process, connects an EP to it and unpacks its
// key; everything is released at the end of the test.
func startPeer(tb testing.TB) *peer {
	tb.Helper()
	p := spawnPeer(tb, nil)
	p.iface = openTestIface(tb, nil)
	ep, err := p.iface.EPCreate(&uct.EPParams{DeviceAddr: p.dev, IfaceAddr: p.addr})
	if err != nil {
		tb.Fatal(err)
	}
	p.ep = ep.(*EP)
	if p.rkey, err = (&Component{}).RkeyUnpack(p.key); err != nil {
		tb.Fatal(err)
	}
	return p
}

// spawnPeer starts a peer process, through command (testpeer.Options) when
// it is not nil, and reads its addresses.
func spawnPeer(tb testing.TB, command func(string, ...string) *exec.Cmd) *peer {
	tb.Helper()
	p := &peer{Peer: testpeer.Start(tb, "cma", testpeer.Options{Command: command}), tb: tb}
	tb.Cleanup(p.release)
	fields, err := p.NextHex(3)
	if err != nil {
		tb.Fatalf("reading the peer's addresses: %v", err)
	}
	p.key, p.addr, p.dev = fields[0], fields[1], fields[2]
	k, err := decodeMkey(p.key)
	if err != nil {
		tb.Fatal(err)
	}
	p.base = k.addr
	return p
}

// release releases the rkey and the EP of startPeer.
func (p *peer) release() {
	if p.rkey.Handle != nil {
		(&Component{}).RkeyRelease(p.rkey)
		p.rkey = uct.RkeyBundle{}
	}
	if p.ep != nil {
		p.ep.Destroy()
		p.ep = nil
	}
}

// kill kills the peer and waits for its end.
func (p *peer) kill() {
	p.Kill()
	if err := p.Wait(); err != nil {
		p.tb.Error(err)
	}
}

// call sends a command to the peer and returns its answer.
func (p *peer) call(format string, args ...any) string {
	p.tb.Helper()
	line, err := p.Call(fmt.Sprintf(format, args...))
	if err != nil {
		p.tb.Fatalf("peer command: %v", err)
	}
	return strings.TrimSpace(line)
}

// sum returns the SHA-256 of n bytes at offset off of the peer's buffer,
// computed by the peer.
func (p *peer) sum(off, n int) string { return p.call("sum %d %d", off, n) }

// fill makes the peer fill n bytes at offset off with pattern(n, seed).
func (p *peer) fill(off, n, seed int) {
	p.tb.Helper()
	if r := p.call("fill %d %d %d", off, n, seed); r != "ok" {
		p.tb.Fatalf("fill: %s", r)
	}
}

// openTestIface opens a cma iface that is closed at the end of the test.
func openTestIface(tb testing.TB, params *uct.IfaceParams) *Iface {
	tb.Helper()
	return openTestIfaceOn(tb, nil, params)
}

// openTestIfaceOn is openTestIface with the iface on worker.
func openTestIfaceOn(tb testing.TB, worker *uct.Worker, params *uct.IfaceParams) *Iface {
	tb.Helper()
	md, err := (&Component{}).OpenMD(MDName, nil)
	if err != nil {
		tb.Fatal(err)
	}
	i, err := md.IfaceOpen(worker, params, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(i.Close)
	return i.(*Iface)
}

// hexSum is the SHA-256 of b in hex, as the peer prints it.
func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
