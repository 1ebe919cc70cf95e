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

	"github.com/goshmem/goshmem/internal/testpeer"
	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// The two-process tests run a peer process (testpeer role "tcp", its
// arguments the job key, the device — "lo" if empty — and NAME=value iface
// settings), which registers a region and opens an iface on that device,
// installs a synchronous handler for active message 1 (which nothing
// progresses: its receive queue fills), prints the packed key and its
// addresses, and then answers commands on its input until the input is
// closed, when it closes its iface and exits:
//
//	read OFFSET LENGTH  the hex bytes of its region
//	spin MILLISECONDS   keeps every processor busy that long, then "done"
//	ep IFACE DEVICE     creates an EP to the iface with those (hex)
//	                    addresses, sends it active message 2, then "done"
//	                    and whether it took the iface's connection
//	progress            calls Progress in a loop from now on, yielding
//	                    as a process that waits does (idle) when it
//	                    finds nothing, then "done"
//	pause               stops that loop (the poller serves), then "done"
func TestMain(m *testing.M) {
	testpeer.Serve(
		testpeer.Role{Name: "tcp", Run: runPeer},
		testpeer.Role{Name: "tcp-echo", Run: runEcho},
	)
	os.Exit(m.Run())
}

// childRegionSize is the size of the peer's region.
const childRegionSize = 1 << 20

// runPeer is the peer process.
func runPeer(args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) < 2 {
		return fmt.Errorf("arguments %q, want a key, a device and settings", args)
	}
	key, dev, settings := args[0], args[1], args[2:]
	md, err := (&Component{}).OpenMD(MDName, nil)
	if err != nil {
		return err
	}
	mem := make([]byte, childRegionSize)
	h, err := md.MemReg(unsafe.Pointer(&mem[0]), len(mem), uct.MemAccessDefault)
	if err != nil {
		return err
	}
	packed, err := md.MkeyPack(nil, h)
	if err != nil {
		return err
	}
	cfg := ucs.ReadConfig("GOSHMEM_TCP_TEST_UNSET_", ifaceConfigTable)
	cfg.Modify("KEY", key)
	for _, kv := range settings {
		name, value, _ := strings.Cut(kv, "=")
		if err := cfg.Modify(name, value); err != nil {
			return err
		}
	}
	if dev == "" {
		dev = "lo"
	}
	iface, err := md.IfaceOpen(nil, &uct.IfaceParams{DevName: dev}, cfg)
	if err != nil {
		return err
	}
	defer iface.Close()
	iface.SetAMHandler(1, func(any, []byte, uint32) ucs.Status { return ucs.OK }, nil, uct.CBFlagSync)
	fmt.Fprintf(stdout, "%x %x %x\n", packed, iface.Address(), iface.DeviceAddress())
	r := h.(*Memh).r
	var stop atomic.Bool
	var polling sync.WaitGroup
	defer polling.Wait()
	defer stop.Store(true)
	in := bufio.NewScanner(stdin)
	for in.Scan() {
		var off, n int
		switch {
		case in.Text() == "progress":
			polling.Add(1)
			go func() {
				defer polling.Done()
				for spins := 0; !stop.Load(); spins++ {
					if iface.Progress() != 0 {
						spins = -1
					} else {
						idle(spins)
					}
				}
			}()
			fmt.Fprintln(stdout, "done")
			continue
		case in.Text() == "pause":
			// Progress stops until the next "progress" (the poller
			// serves meanwhile): the peer leaves the processors to
			// another process that a benchmark measures in between.
			stop.Store(true)
			polling.Wait()
			stop.Store(false)
			fmt.Fprintln(stdout, "done")
			continue
		case strings.HasPrefix(in.Text(), "ep "):
			var ia, da []byte
			if _, err := fmt.Sscanf(in.Text(), "ep %x %x", &ia, &da); err != nil {
				return fmt.Errorf("command %q: %w", in.Text(), err)
			}
			uep, err := iface.EPCreate(&uct.EPParams{DeviceAddr: da, IfaceAddr: ia})
			if err != nil {
				return err
			}
			ep := uep.(*EP)
			if st := ep.AMShort(2, 0, nil); st != ucs.OK {
				return fmt.Errorf("AMShort: %v", st)
			}
			shared := ep.rx != nil && ep.match != nil && !ep.match.dialed
			fmt.Fprintln(stdout, "done", shared)
			continue
		case strings.HasPrefix(in.Text(), "spin "):
			if _, err := fmt.Sscanf(in.Text(), "spin %d", &n); err != nil {
				return fmt.Errorf("command %q: %w", in.Text(), err)
			}
			spin(time.Duration(n) * time.Millisecond)
			fmt.Fprintln(stdout, "done")
			continue
		}
		if _, err := fmt.Sscanf(in.Text(), "read %d %d", &off, &n); err != nil {
			return fmt.Errorf("command %q: %w", in.Text(), err)
		}
		r.mu.Lock() // orders the read after the puts applied so far
		fmt.Fprintf(stdout, "%x\n", mem[off:off+n])
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
	*testpeer.Peer
	tb   testing.TB
	key  []byte
	addr []byte
	dev  []byte
	base uint64
	rkey uct.RkeyBundle
}

// startPeer starts a peer process on the loopback with the job key and the
// iface settings (NAME=value); it is stopped at the end of the test.
func startPeer(tb testing.TB, key string, settings ...string) *peer {
	tb.Helper()
	loopbackDev(tb)
	return startPeerOn(tb, nil, "", key, settings...)
}

// startPeerOn starts a peer process on the device dev with the job key and
// the iface settings (NAME=value), through command (testpeer.Options) when
// it is not nil: in a namespace, say.
func startPeerOn(tb testing.TB, command func(string, ...string) *exec.Cmd, dev, key string, settings ...string) *peer {
	tb.Helper()
	args := append([]string{key, dev}, settings...)
	p := &peer{Peer: testpeer.Start(tb, "tcp", testpeer.Options{Args: args, Command: command}), tb: tb}
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
	if p.rkey, err = (&Component{}).RkeyUnpack(p.key); err != nil {
		tb.Fatal(err)
	}
	return p
}

// command sends the peer a command and returns its answer, or fails the
// test.
func (p *peer) command(cmd string) string {
	p.tb.Helper()
	line, err := p.Call(cmd)
	if err != nil {
		p.tb.Fatal(err)
	}
	return line
}

// read returns n bytes at offset off of the peer's region, read by the peer.
func (p *peer) read(off, n int) []byte {
	p.tb.Helper()
	b, err := hex.DecodeString(p.command(fmt.Sprintf("read %d %d", off, n)))
	if err != nil {
		p.tb.Fatal(err)
	}
	return b
}

// progress has the peer call Progress in a loop from now on.
func (p *peer) progress() {
	p.tb.Helper()
	if line := p.command("progress"); line != "done" {
		p.tb.Fatalf("peer answered %q to progress", line)
	}
}

// pause has the peer stop calling Progress until the next progress.
func (p *peer) pause() {
	p.tb.Helper()
	if line := p.command("pause"); line != "done" {
		p.tb.Fatalf("peer answered %q to pause", line)
	}
}

// spin has the peer compute for d, calling nothing, and waits for it.
func (p *peer) spin(d time.Duration) {
	p.tb.Helper()
	if line := p.command(fmt.Sprintf("spin %d", d.Milliseconds())); line != "done" {
		p.tb.Fatalf("peer answered %q to spin", line)
	}
}

// startSpin has the peer compute for d, calling nothing, and does not wait:
// the peer is killed at the end of the test (closing it would wait for the
// computing).
func (p *peer) startSpin(d time.Duration) {
	p.tb.Helper()
	p.tb.Cleanup(p.kill)
	if err := p.Send(fmt.Sprintf("spin %d", d.Milliseconds())); err != nil {
		p.tb.Fatal(err)
	}
}

// kill ends the peer with SIGKILL and waits for it.
func (p *peer) kill() {
	p.Kill()
	if err := p.Wait(); err != nil {
		p.tb.Error(err)
	}
}

// stop ends the peer, failing the test if it failed, and releases its rkey.
func (p *peer) stop() {
	if err := p.Close(); err != nil {
		p.tb.Error(err)
	}
	p.release()
}

// release releases the peer's rkey.
func (p *peer) release() {
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
	p := startPeer(t, "b3RoZXIgam9iIGtleSAwMTIzNDU2Nzg5MDEyMzQ1Njc=")
	i := openIface(t, testMD(t), nil)
	_, err := i.EPCreate(&uct.EPParams{DeviceAddr: p.dev, IfaceAddr: p.addr})
	if !errors.Is(err, ucs.ErrRejected) || !errors.Is(err, ucs.ErrUnreachable) {
		t.Errorf("EPCreate to a process with another job key err = %v, want ErrRejected and ErrUnreachable", err)
	}
}

// TestPeerKilled kills the peer process and checks that the EP fails: its
// error handler is called (once), operations and flush return an error.
// The peer's EP to this iface shares the EP's connection, both ways. The
// failure is logged at LogDiag, not as a warning: the peer's end is
// reported where it ran (goshmem-run names the PE), and each survivor of a
// failed job repeating it buried the cause.
func TestPeerKilled(t *testing.T) {
	for _, level := range []ucs.LogLevel{ucs.LogWarn, ucs.LogDiag} {
		t.Run(level.String(), func(t *testing.T) {
			log := captureLogAt(t, level)
			peerKilled(t)
			switch got := log.String(); {
			case level == ucs.LogWarn && got != "":
				t.Errorf("the peer's end was logged as a warning:\n%s", got)
			case level == ucs.LogDiag && !strings.Contains(got, "uct/tcp: ep to "):
				t.Errorf("the EP's failure was not logged at diag:\n%s", got)
			case strings.Contains(got, "read: read: "):
				t.Errorf("a read error says read twice:\n%s", got)
			}
		})
	}
}

func peerKilled(t *testing.T) {
	p := startPeer(t, testKey)
	var failed, calls atomic.Int32
	i := openIface(t, testMD(t), &uct.IfaceParams{ErrHandler: func(_ any, _ uct.EP, st ucs.Status) {
		failed.Store(int32(st))
		calls.Add(1)
	}})
	var heard atomic.Bool
	i.SetAMHandler(2, func(any, []byte, uint32) ucs.Status { heard.Store(true); return ucs.OK }, nil, uct.CBFlagAsync)
	uep, err := i.EPCreate(&uct.EPParams{DeviceAddr: p.dev, IfaceAddr: p.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer uep.Destroy()
	ep := uep.(*EP)
	if got := p.command(fmt.Sprintf("ep %x %x", i.Address(), i.DeviceAddress())); got != "done true" {
		t.Fatalf("the peer's EP: %q, want it on this EP's connection", got)
	}
	progressUntil(t, heard.Load, i)
	if n, _ := connCount(i); n != 1 {
		t.Fatalf("%d connections, want 1", n)
	}
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
	i.Progress()
	if n := calls.Load(); n != 1 {
		t.Errorf("error handler called %d times", n)
	}
}
