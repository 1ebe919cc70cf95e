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

	"github.com/goshmem/goshmem/uct"
)

// The two-process tests re-execute the test binary as a peer process
// (TestPeerProcess with childEnv set). The peer registers a buffer and
// opens an iface, prints the packed key and the iface and device addresses
// on stdout, then answers commands read from stdin, one a line, until
// stdin is closed:
//
//	sum OFF N        -> the SHA-256 of buffer[OFF:OFF+N], in hex
//	fill OFF N SEED  -> fills buffer[OFF:OFF+N] with pattern(N, SEED); "ok"
//	connect IFACE    -> creates an EP to the hex iface address IFACE (of
//	                    this device) and prints "ok" or the error
//	put PID RADDR    -> puts 8 bytes at RADDR of process PID through an EP
//	                    made without checks; prints the status
const childEnv = "GOSHMEM_CMA_TEST_PEER"

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

func TestPeerProcess(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Skip("helper process of the two-process tests: runs only with " + childEnv + " set")
	}
	if err := runPeer(); err != nil {
		fmt.Fprintln(os.Stderr, "peer:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// runPeer is the peer process.
func runPeer() error {
	md, err := (&Component{}).OpenMD(MDName, nil)
	if err != nil {
		return err
	}
	peerBuf = make([]byte, childBufSize)
	memh, err := md.MemReg(unsafe.Pointer(&peerBuf[0]), len(peerBuf), uct.MemAccessDefault)
	if err != nil {
		return err
	}
	key, err := md.MkeyPack(memh)
	if err != nil {
		return err
	}
	iface, err := md.IfaceOpen(nil, nil, nil)
	if err != nil {
		return err
	}
	fmt.Printf("%x %x %x\n", key, iface.Address(), iface.DeviceAddress())
	in := bufio.NewScanner(os.Stdin)
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
			fmt.Printf("%x\n", sha256.Sum256(peerBuf[off:off+n]))
		case len(f) == 4 && f[0] == "fill":
			off, n := num(1), num(2)
			copy(peerBuf[off:off+n], pattern(n, num(3)))
			fmt.Println("ok")
		case len(f) == 2 && f[0] == "connect":
			addr, _ := hex.DecodeString(f[1])
			if ep, err := iface.EPCreate(&uct.EPParams{DeviceAddr: iface.DeviceAddress(), IfaceAddr: addr}); err != nil {
				fmt.Println(strings.ReplaceAll(err.Error(), "\n", " "))
			} else {
				ep.Destroy()
				fmt.Println("ok")
			}
		case len(f) == 3 && f[0] == "put":
			raddr, _ := strconv.ParseUint(f[2], 0, 64)
			ep := &EP{iface: iface.(*Iface), pid: num(1)}
			fmt.Println(ep.PutShort(make([]byte, 8), raddr, uint64(ep.pid)).Error())
		default:
			return fmt.Errorf("bad command %q", in.Text())
		}
	}
	return in.Err()
}

// peer is the parent's view of a peer process.
type peer struct {
	tb    testing.TB
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
	pid   int
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
	p := spawnPeer(tb, exec.Command(os.Args[0], "-test.run=^TestPeerProcess$"))
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

// spawnPeer starts cmd as a peer process and reads its addresses.
func spawnPeer(tb testing.TB, cmd *exec.Cmd) *peer {
	tb.Helper()
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	p := &peer{tb: tb, cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout), pid: cmd.Process.Pid}
	tb.Cleanup(p.stop)
	line, err := p.out.ReadString('\n')
	if err != nil {
		tb.Fatalf("reading the peer's addresses: %v", err)
	}
	var fields [3][]byte
	for k, f := range strings.Fields(line) {
		if k < 3 {
			fields[k], err = hex.DecodeString(f)
		}
		if err != nil {
			tb.Fatalf("peer line %q: %v", line, err)
		}
	}
	p.key, p.addr, p.dev = fields[0], fields[1], fields[2]
	k, err := decodeMkey(p.key)
	if err != nil {
		tb.Fatal(err)
	}
	p.base = k.addr
	return p
}

// stop ends the peer and releases what startPeer took.
func (p *peer) stop() {
	if p.stdin != nil {
		p.stdin.Close()
		p.stdin = nil
		if err := p.cmd.Wait(); err != nil {
			p.tb.Errorf("peer process: %v", err)
		}
	}
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
	p.stdin.Close()
	p.stdin = nil
	p.cmd.Process.Kill()
	p.cmd.Wait()
}

// call sends a command to the peer and returns its answer.
func (p *peer) call(format string, args ...any) string {
	p.tb.Helper()
	if _, err := fmt.Fprintf(p.stdin, format+"\n", args...); err != nil {
		p.tb.Fatalf("peer command: %v", err)
	}
	line, err := p.out.ReadString('\n')
	if err != nil {
		p.tb.Fatalf("peer answer: %v", err)
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
	md, err := (&Component{}).OpenMD(MDName, nil)
	if err != nil {
		tb.Fatal(err)
	}
	i, err := md.IfaceOpen(nil, params, nil)
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
