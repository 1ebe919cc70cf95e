package tcp

import (
	"bufio"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// testPeerTimeout is the peer timeout of the tests of dead peers: short,
// so that they take a second.
const testPeerTimeout = time.Second

// busyPeerTimeout is the peer timeout of the tests of busy peers, which
// must not be taken for dead: long enough that a loaded machine (the
// suite running beside another) does not starve a live peer's goroutines
// that long, as it did for a second.
const busyPeerTimeout = 2500 * time.Millisecond

// connectPeer creates an EP from i to the peer process p, checks with a
// put that it works, and returns it; it is destroyed at the end of the
// test.
func connectPeer(t *testing.T, i *Iface, p *peer) *EP {
	t.Helper()
	uep, err := i.EPCreate(&uct.EPParams{DeviceAddr: p.dev, IfaceAddr: p.addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(uep.Destroy)
	ep := uep.(*EP)
	if st := ep.PutShort([]byte("alive"), p.base, p.rkey.Rkey); st != ucs.OK {
		t.Fatal(st)
	}
	if st := flush(t, ep, i); st != ucs.OK {
		t.Fatal(st)
	}
	if got := p.read(0, 5); string(got) != "alive" {
		t.Fatalf("peer has %q", got)
	}
	return ep
}

// TestPeerExitsInOrder checks that a peer process that closes its iface
// and exits, as every process does at the end of a job, is no failure:
// the EP to it ends without its error handler or a log line (TestPeerKilled
// checks that a killed one is reported).
func TestPeerExitsInOrder(t *testing.T) {
	logs := captureLog(t)
	p := startPeer(t, testKey)
	var errs errCounter
	i := openIface(t, testMD(t), errs.params())
	ep := connectPeer(t, i, p)
	p.stop() // closes its standard input: it closes its iface and exits
	progressUntil(t, func() bool { return ep.status().IsErr() }, i)
	for range 100 {
		i.Progress()
	}
	if n := errs.calls.Load(); n != 0 {
		t.Errorf("error handler called %d times (%v) for a peer that exited in order", n, ucs.Status(errs.last.Load()))
	}
	if st := ep.Flush(0, nil); st != ucs.OK {
		t.Errorf("flush of what the peer processed = %v, want OK", st)
	}
	i.Close()
	if s := logs.String(); s != "" {
		t.Errorf("logged:\n%s", s)
	}
}

// TestSilentPeer checks that an EP to a peer process that is stopped
// (SIGSTOP: its kernel still acknowledges what is sent to it) fails with
// ucs.ErrEndpointTimeout, its error handler called, and the log naming
// the peer.
func TestSilentPeer(t *testing.T) {
	logs := captureLog(t)
	timeout := "PEER_TIMEOUT=" + testPeerTimeout.String()
	p := startPeer(t, testKey, timeout)
	var errs errCounter
	i := openIface(t, testMD(t), errs.params(), timeout)
	ep := connectPeer(t, i, p)
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer p.Signal(syscall.SIGCONT)
	progressUntil(t, func() bool { return errs.calls.Load() != 0 }, i)
	if st := ucs.Status(errs.last.Load()); st != ucs.ErrEndpointTimeout {
		t.Errorf("error handler status %v, want ErrEndpointTimeout", st)
	}
	if st := ep.PutShort([]byte{1}, p.base, p.rkey.Rkey); st != ucs.ErrEndpointTimeout {
		t.Errorf("put to the stopped peer = %v, want ErrEndpointTimeout", st)
	}
	if s := logs.String(); !strings.Contains(s, ep.peer) || !strings.Contains(s, "nothing from the peer") {
		t.Errorf("log does not name the silent peer %s:\n%s", ep.peer, s)
	}
}

// TestBusyPeerAlive checks that a peer that computes without calling
// anything, or whose receive queue is full because nothing progresses it,
// is not taken for dead, however long that lasts: its goroutines answer.
func TestBusyPeerAlive(t *testing.T) {
	captureLog(t)
	timeout := "PEER_TIMEOUT=" + busyPeerTimeout.String()
	tests := []struct {
		name string
		busy func(t *testing.T, p *peer, ep *EP)
	}{
		{"computing", func(t *testing.T, p *peer, ep *EP) { p.spin(2 * busyPeerTimeout) }},
		{"receive queue full", func(t *testing.T, p *peer, ep *EP) {
			// The peer's handler of message 1 is synchronous and nothing
			// progresses it: after the first message its reader waits, its
			// socket fills and keeps its window closed, and so does this
			// side's, until the EP's queue is full.
			for k := 0; ; k++ {
				st := ep.AMShort(1, 0, make([]byte, 200))
				if st == ucs.ErrNoResource {
					break
				}
				if st != ucs.OK || k > 1<<20 {
					t.Fatalf("message %d: %v", k, st)
				}
			}
			time.Sleep(2 * busyPeerTimeout)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel() // each waits for several timeouts
			p := startPeer(t, testKey, timeout, "RX_QUEUE_LEN=1")
			var errs errCounter
			i := openIface(t, testMD(t), errs.params(), timeout)
			ep := connectPeer(t, i, p)
			tt.busy(t, p, ep)
			for range 100 {
				i.Progress()
			}
			if n := errs.calls.Load(); n != 0 || ep.status().IsErr() {
				t.Errorf("the busy peer was taken for dead: %d error handler calls (%v), EP status %v",
					n, ucs.Status(errs.last.Load()), ep.status())
			}
		})
	}
}

// TestCutLink runs the peer process in a network namespace joined to this
// one by a veth pair, cuts the link, and checks that the EP to the peer
// fails with ucs.ErrEndpointTimeout: both processes run on, and nothing
// but silence tells. It needs root and ip(8); it skips, saying why,
// without them, unless GOSHMEM_E2E_REQUIRE names netns.
func TestCutLink(t *testing.T) {
	skipUnlessNetns(t)
	var rnd [2]byte
	rand.Read(rnd[:])
	id := fmt.Sprintf("%02x%02x", rnd[0], rnd[1])
	subnet := fmt.Sprintf("10.%d.%d", 200+int(rnd[0])%50, rnd[1])
	holder := exec.Command("unshare", "--net", "--", "sh", "-c", "ip link set lo up && echo ready && exec sleep 100000")
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		skipUnlessNetnsBecause(t, fmt.Sprintf("unshare --net: %v", err))
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		skipUnlessNetnsBecause(t, fmt.Sprintf("a network namespace cannot be made here (unshare said %q, %v)", line, err))
	}
	pid := strconv.Itoa(holder.Process.Pid)
	veth := "gtv" + id
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %q: %v: %s", args, err, out)
		}
	}
	ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", pid)
	t.Cleanup(func() { exec.Command("ip", "link", "del", veth).Run() })
	ip("addr", "add", subnet+".1/24", "dev", veth)
	ip("link", "set", veth, "up")
	for _, args := range [][]string{{"addr", "add", subnet + ".2/24", "dev", "eth0"}, {"link", "set", "eth0", "up"}} {
		if out, err := exec.Command("nsenter", append([]string{"-t", pid, "-n", "ip"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("nsenter ip %q: %v: %s", args, err, out)
		}
	}
	timeout := "PEER_TIMEOUT=" + testPeerTimeout.String()
	inNetns := func(name string, arg ...string) *exec.Cmd {
		return exec.Command("nsenter", append([]string{"-t", pid, "-n", "--", name}, arg...)...)
	}
	p := startPeerOn(t, inNetns, "eth0", testKey, timeout)
	logs := captureLog(t)
	var errs errCounter
	params := errs.params()
	params.TLName, params.DevName = TLName, veth
	params.Logger = capturedLog
	ui, err := testMD(t).IfaceOpen(nil, params, testConfig(t, timeout))
	if err != nil {
		t.Fatal(err)
	}
	i := ui.(*Iface)
	t.Cleanup(i.Close)
	ep := connectPeer(t, i, p)
	ip("link", "set", veth, "down")
	progressUntil(t, func() bool { return errs.calls.Load() != 0 }, i)
	if st := ucs.Status(errs.last.Load()); st != ucs.ErrEndpointTimeout {
		t.Errorf("error handler status %v, want ErrEndpointTimeout", st)
	}
	if s := logs.String(); !strings.Contains(s, ep.peer) {
		t.Errorf("log does not name the peer %s:\n%s", ep.peer, s)
	}
}

// skipUnlessNetns skips the test, saying why, where network namespaces
// cannot be made (not root, no ip, unshare or nsenter), unless
// GOSHMEM_E2E_REQUIRE names netns: then it fails.
func skipUnlessNetns(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		skipUnlessNetnsBecause(t, "not root: making a network namespace and a veth pair needs root")
	}
	for _, c := range []string{"ip", "unshare", "nsenter"} {
		if _, err := exec.LookPath(c); err != nil {
			skipUnlessNetnsBecause(t, c+" is not installed (iproute2, util-linux)")
		}
	}
}

func skipUnlessNetnsBecause(t *testing.T, why string) {
	t.Helper()
	for _, r := range strings.Split(os.Getenv("GOSHMEM_E2E_REQUIRE"), ",") {
		if strings.TrimSpace(r) == "netns" {
			t.Fatalf("netns is required (GOSHMEM_E2E_REQUIRE=%s) but: %s", os.Getenv("GOSHMEM_E2E_REQUIRE"), why)
		}
	}
	t.Skipf("skipping: %s", why)
}
