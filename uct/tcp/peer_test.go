package tcp

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// The two-process tests re-execute the test binary as a peer process
// (TestPeerProcess with childEnv set to the job key), which registers a
// region and opens an iface (on the loopback, or the device childDevEnv
// names, configured with the NAME=value settings, separated by spaces, of
// childConfigEnv), installs a synchronous handler for active message 1
// (which nothing progresses: its receive queue fills), prints the packed
// key and its addresses on stdout, and then answers commands on stdin
// until stdin is closed, when it closes its iface and exits:
//
//	read OFFSET LENGTH  the hex bytes of its region
//	spin MILLISECONDS   keeps every processor busy that long, then "done"
//	progress            calls Progress in a loop from now on, yielding
//	                    when it finds nothing (as a process that waits
//	                    does), then "done"
const (
	childEnv       = "GOSHMEM_TCP_TEST_PEER"
	childDevEnv    = "GOSHMEM_TCP_TEST_PEER_DEV"
	childConfigEnv = "GOSHMEM_TCP_TEST_PEER_CONFIG"
)

// childRegionSize is the size of the peer's region.
const childRegionSize = 1 << 20

func TestPeerProcess(t *testing.T) {
	key := os.Getenv(childEnv)
	if key == "" {
		t.Skip("helper process of the two-process tests: runs only with " + childEnv + " set")
	}
	if err := runPeer(key); err != nil {
		fmt.Fprintln(os.Stderr, "peer:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// runPeer is the peer process.
func runPeer(key string) error {
	md, err := (&Component{}).OpenMD(MDName, nil)
	if err != nil {
		return err
	}
	mem := make([]byte, childRegionSize)
	h, err := md.MemReg(unsafe.Pointer(&mem[0]), len(mem), uct.MemAccessDefault)
	if err != nil {
		return err
	}
	packed, err := md.MkeyPack(h)
	if err != nil {
		return err
	}
	cfg := ucs.ReadConfig("GOSHMEM_TCP_TEST_UNSET_", ifaceConfigTable)
	cfg.Modify("KEY", key)
	for _, kv := range strings.Fields(os.Getenv(childConfigEnv)) {
		name, value, _ := strings.Cut(kv, "=")
		if err := cfg.Modify(name, value); err != nil {
			return err
		}
	}
	dev := os.Getenv(childDevEnv)
	if dev == "" {
		dev = "lo"
	}
	iface, err := md.IfaceOpen(nil, &uct.IfaceParams{DevName: dev}, cfg)
	if err != nil {
		return err
	}
	defer iface.Close()
	iface.SetAMHandler(1, func(any, []byte, uint32) ucs.Status { return ucs.OK }, nil, uct.CBFlagSync)
	fmt.Printf("%x %x %x\n", packed, iface.Address(), iface.DeviceAddress())
	r := h.(*Memh).r
	var stop atomic.Bool
	var polling sync.WaitGroup
	defer polling.Wait()
	defer stop.Store(true)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var off, n int
		switch {
		case in.Text() == "progress":
			polling.Add(1)
			go func() {
				defer polling.Done()
				for !stop.Load() {
					if iface.Progress() == 0 {
						runtime.Gosched()
					}
				}
			}()
			fmt.Println("done")
			continue
		case strings.HasPrefix(in.Text(), "spin "):
			if _, err := fmt.Sscanf(in.Text(), "spin %d", &n); err != nil {
				return fmt.Errorf("command %q: %w", in.Text(), err)
			}
			spin(time.Duration(n) * time.Millisecond)
			fmt.Println("done")
			continue
		}
		if _, err := fmt.Sscanf(in.Text(), "read %d %d", &off, &n); err != nil {
			return fmt.Errorf("command %q: %w", in.Text(), err)
		}
		r.mu.Lock() // orders the read after the puts applied so far
		fmt.Printf("%x\n", mem[off:off+n])
		r.mu.Unlock()
	}
	return in.Err()
}

// spin keeps every processor of the process busy for d, calling nothing:
// a program that computes.
func spin(d time.Duration) {
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for x := 0; time.Now().Before(end); x++ {
				for range 1000 {
					x = x*31 + 7
				}
			}
		}()
	}
	wg.Wait()
}

// peer is the parent's view of a peer process.
type peer struct {
	tb     testing.TB
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	key    []byte
	addr   []byte
	dev    []byte
	base   uint64
	rkey   uct.RkeyBundle
}

// startPeer starts a peer process with the job key; it is stopped at the
// end of the test.
func startPeer(tb testing.TB, key string) *peer {
	tb.Helper()
	loopbackDev(tb)
	return startPeerCmd(tb, exec.Command(os.Args[0], "-test.run=^TestPeerProcess$"), key)
}

// startPeerCmd starts cmd, which runs TestPeerProcess of this binary (in a
// namespace, say), as a peer process with the job key, and the iface
// settings (NAME=value) when given; cmd.Env is added to this process's
// environment.
func startPeerCmd(tb testing.TB, cmd *exec.Cmd, key string, settings ...string) *peer {
	tb.Helper()
	cmd.Env = append(append(os.Environ(), cmd.Env...), childEnv+"="+key, childConfigEnv+"="+strings.Join(settings, " "))
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
	p := &peer{tb: tb, cmd: cmd, stdin: stdin, stdout: bufio.NewReader(stdout)}
	tb.Cleanup(p.stop)
	line, err := p.stdout.ReadString('\n')
	if err != nil {
		tb.Fatalf("reading the peer's addresses: %v", err)
	}
	f := strings.Fields(line)
	if len(f) != 3 {
		tb.Fatalf("peer line %q", line)
	}
	for k, dst := range []*[]byte{&p.key, &p.addr, &p.dev} {
		if *dst, err = hex.DecodeString(f[k]); err != nil {
			tb.Fatalf("peer line %q: %v", line, err)
		}
	}
	k, err := decodeMkey(p.key)
	if err != nil {
		tb.Fatal(err)
	}
	p.base = k.addr
	if p.rkey, err = (&Component{}).RkeyUnpack(p.key); err != nil {
		tb.Fatal(err)
	}
	return p
}

// read returns n bytes at offset off of the peer's region, read by the peer.
func (p *peer) read(off, n int) []byte {
	p.tb.Helper()
	if _, err := fmt.Fprintf(p.stdin, "read %d %d\n", off, n); err != nil {
		p.tb.Fatal(err)
	}
	line, err := p.stdout.ReadString('\n')
	if err != nil {
		p.tb.Fatal(err)
	}
	b, err := hex.DecodeString(strings.TrimSpace(line))
	if err != nil {
		p.tb.Fatal(err)
	}
	return b
}

// progress has the peer call Progress in a loop from now on.
func (p *peer) progress() {
	p.tb.Helper()
	if _, err := fmt.Fprintln(p.stdin, "progress"); err != nil {
		p.tb.Fatal(err)
	}
	if line, err := p.stdout.ReadString('\n'); err != nil || line != "done\n" {
		p.tb.Fatalf("peer answered %q, %v to progress", line, err)
	}
}

// spin has the peer compute for d, calling nothing, and waits for it.
func (p *peer) spin(d time.Duration) {
	p.tb.Helper()
	if _, err := fmt.Fprintf(p.stdin, "spin %d\n", d.Milliseconds()); err != nil {
		p.tb.Fatal(err)
	}
	if line, err := p.stdout.ReadString('\n'); err != nil || line != "done\n" {
		p.tb.Fatalf("peer answered %q, %v to spin", line, err)
	}
}

// kill ends the peer with SIGKILL.
func (p *peer) kill() {
	p.cmd.Process.Kill()
	p.cmd.Wait()
	p.stdin = nil
}

// stop ends the peer (if it still runs) and releases its rkey.
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
}

// TestPeerPut puts into another process's region and reads it back there.
func TestPeerPut(t *testing.T) {
	p := startPeer(t, testKey)
	i := openIface(t, testMD(t), nil)
	ep, err := i.EPCreate(&uct.EPParams{DeviceAddr: p.dev, IfaceAddr: p.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Destroy()
	src := pattern(childRegionSize-200, 3)
	if st := ep.(*EP).PutZcopy([]uct.IOV{{Buffer: src}}, p.base+100, p.rkey.Rkey, nil); st.IsErr() {
		t.Fatal(st)
	}
	if st := ep.PutShort([]byte("hello"), p.base+1, p.rkey.Rkey); st != ucs.OK {
		t.Fatal(st)
	}
	if st := flush(t, ep.(*EP)); st != ucs.OK {
		t.Fatal(st)
	}
	if got := p.read(1, 5); string(got) != "hello" {
		t.Errorf("peer has %q after PutShort", got)
	}
	if got := p.read(100, len(src)); !bytes.Equal(got, src) {
		t.Error("peer's region differs after PutZcopy")
	}
}

// TestPeerWrongKey checks that a process with another job key cannot
// connect.
func TestPeerWrongKey(t *testing.T) {
	p := startPeer(t, "b3RoZXIgam9iIGtleSAwMTIzNDU2Nzg5MDEyMw==")
	i := openIface(t, testMD(t), nil)
	_, err := i.EPCreate(&uct.EPParams{DeviceAddr: p.dev, IfaceAddr: p.addr})
	if !errors.Is(err, ucs.ErrRejected) || !errors.Is(err, ucs.ErrUnreachable) {
		t.Errorf("EPCreate to a process with another job key err = %v, want ErrRejected and ErrUnreachable", err)
	}
}

// TestPeerKilled kills the peer process and checks that the EP fails: its
// error handler is called, operations and flush return an error.
func TestPeerKilled(t *testing.T) {
	captureLog(t)
	p := startPeer(t, testKey)
	var failed atomic.Int32
	i := openIface(t, testMD(t), &uct.IfaceParams{ErrHandler: func(_ any, _ uct.EP, st ucs.Status) {
		failed.Store(int32(st))
	}})
	uep, err := i.EPCreate(&uct.EPParams{DeviceAddr: p.dev, IfaceAddr: p.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer uep.Destroy()
	ep := uep.(*EP)
	if st := ep.PutShort([]byte{1}, p.base, p.rkey.Rkey); st != ucs.OK {
		t.Fatal(st)
	}
	if st := flush(t, ep); st != ucs.OK {
		t.Fatal(st)
	}
	p.kill()
	var st ucs.Status
	progressUntil(t, func() bool {
		if st = ep.PutShort([]byte{2}, p.base, p.rkey.Rkey); st == ucs.OK {
			st = flush(t, ep)
		}
		return st.IsErr() && failed.Load() != 0
	}, i)
	if st != ucs.ErrConnectionReset || ucs.Status(failed.Load()) != ucs.ErrConnectionReset {
		t.Errorf("after the peer died: operation %v, error handler %v; want ErrConnectionReset", st, ucs.Status(failed.Load()))
	}
	if st := ep.Flush(0, nil); st != ucs.ErrConnectionReset {
		t.Errorf("Flush = %v", st)
	}
}
