package cluster

import (
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/goshmem/goshmem/bootstrap"
)

// floodConfig is what a flood helper (floodMain) does.
type floodConfig struct {
	// Addrs are the TCP addresses (loopback only) to flood, and the UDP
	// ports of the same numbers.
	Addrs []string
	// Idle, Garbage and Slow are the connections held to each address:
	// idle ones send nothing, garbage ones 64 random bytes at once, slow
	// ones a plausible label header (a wrong job id), a byte every 200 ms.
	// A connection the victim closes is opened again after Reopen.
	Idle, Garbage, Slow int
	Reopen              time.Duration
	// Packets is how many garbage UDP packets a second go to each address.
	Packets int
	// For is how long the flood lasts.
	For time.Duration
	// UID, when not zero, is the user (and group) the helper runs as: it
	// drops root's privileges to it first.
	UID int
}

// floodMain holds the connections c describes for c.For, or until its
// standard input closes, then prints "opened N closed M" (connections
// opened in all, and closed by the victim) and returns. It prints "ready"
// once the first connections are open.
func floodMain(c floodConfig) int {
	if c.UID != 0 {
		if err := dropTo(c.UID); err != nil {
			fmt.Fprintf(os.Stderr, "flood: %v\n", err)
			return 1
		}
	}
	for _, a := range c.Addrs {
		if ap, err := net.ResolveTCPAddr("tcp", a); err != nil || !ap.IP.IsLoopback() {
			fmt.Fprintf(os.Stderr, "flood: %s is not a loopback address\n", a)
			return 2
		}
	}
	// Two descriptors a connection at most, and the victim's; the soft
	// limit is raised to the hard one (Go does it at start, but not
	// after the privileges drop on every system).
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) == nil && rl.Cur < rl.Max {
		rl.Cur = rl.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
	}
	end := time.Now().Add(c.For)
	stop := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(stop)
	}()
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return !time.Now().Before(end)
		}
	}
	var opened, closed atomic.Int64
	var wg, first sync.WaitGroup
	hold := func(addr string, kind int) {
		defer wg.Done()
		firstDone := false
		for !stopped() {
			conn, err := net.DialTimeout("tcp", addr, time.Until(end))
			if !firstDone {
				first.Done()
				firstDone = true
			}
			if err != nil {
				pause(stop, c.Reopen)
				continue
			}
			opened.Add(1)
			conn.SetDeadline(end)
			done := make(chan struct{})
			go func() {
				select {
				case <-stop:
					conn.SetDeadline(time.Now())
				case <-done:
				}
			}()
			switch kind {
			case 1:
				var junk [64]byte
				rand.Read(junk[:])
				conn.Write(junk[:])
			case 2:
				go func() {
					head := append([]byte{mlHasLabelMsg, byte(len("goshmem/") + 16)}, "goshmem/0123456789abcdef"...)
					for _, b := range head {
						if _, err := conn.Write([]byte{b}); err != nil {
							return
						}
						time.Sleep(200 * time.Millisecond)
					}
				}()
			}
			var b [512]byte
			for {
				if _, err := conn.Read(b[:]); err != nil {
					break
				}
			}
			close(done)
			conn.Close()
			if !stopped() {
				closed.Add(1)
				pause(stop, c.Reopen)
			}
		}
		if !firstDone {
			first.Done()
		}
	}
	for _, a := range c.Addrs {
		for kind, n := range []int{c.Idle, c.Garbage, c.Slow} {
			for range n {
				wg.Add(1)
				first.Add(1)
				go hold(a, kind)
			}
		}
		if c.Packets > 0 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				u, err := net.Dial("udp", a)
				if err != nil {
					return
				}
				defer u.Close()
				var junk [512]byte
				for t := time.NewTicker(time.Second / time.Duration(c.Packets)); !stopped(); <-t.C {
					rand.Read(junk[:])
					u.Write(junk[:64+int(junk[0])])
				}
			}()
		}
	}
	first.Wait()
	fmt.Println("ready")
	wg.Wait()
	fmt.Printf("opened %d closed %d\n", opened.Load(), closed.Load())
	return 0
}

// pause waits for d, or until stop is closed.
func pause(stop <-chan struct{}, d time.Duration) {
	select {
	case <-stop:
	case <-time.After(d):
	}
}

// dropTo makes this process run as user and group uid, without
// supplementary groups.
func dropTo(uid int) error {
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("dropping the groups: %w", err)
	}
	if err := syscall.Setgid(uid); err != nil {
		return fmt.Errorf("setgid %d: %w", uid, err)
	}
	if err := syscall.Setuid(uid); err != nil {
		return fmt.Errorf("setuid %d: %w", uid, err)
	}
	return nil
}

// floodUser is the user the flood helpers run as when the tests run as
// root: nobody.
const floodUser = 65534

// TestFloodedInit starts jobs while another user holds 1,000 idle or
// garbage connections (and slow ones, and garbage packets) to the seed's
// and an agent's memberlist ports, opening again within a second those the
// node closes: every job starts (its PEs join, exchange blobs and meet in a
// barrier, as shmem.Init does), nobody is declared dead, and the nodes
// dropped the flood (counted). With memberlist's own limits, idle
// connections filled the slots of the seed's streams and kept the agents'
// messages out. The time each start took is logged, to compare.
func TestFloodedInit(t *testing.T) {
	t.Parallel() // none of these touches configHook; they run after the tests that do
	if testing.Short() {
		t.Skip("skipping: floods the loopback with thousands of connections")
	}
	uid := 0
	if os.Getuid() == 0 {
		uid = floodUser
	}
	const n, agents = 32, 4
	tests := []struct {
		name  string
		flood floodConfig
	}{
		{"none", floodConfig{}},
		{"idle", floodConfig{Idle: 1000}},
		{"garbage", floodConfig{Garbage: 1000}},
		{"mixed", floodConfig{Idle: 1000, Garbage: 1000, Slow: 100, Packets: 1000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := startAgents(t, n, agents, nil)
			flooded := []*guardedTransport{j.seed.transport, j.agents[0].transport}
			if tt.name != "none" {
				f := tt.flood
				f.Addrs = []string{j.seed.Addr(), j.agents[0].addr}
				f.Reopen, f.For, f.UID = time.Second, waitLimit, uid
				h := startHelper(t, helperConfig{Role: "flood", Flood: f}, nil)
				defer func() {
					h.stdin.Close()
					for l := range h.lines {
						t.Logf("the flood helper (uid %d): %s", uid, l)
					}
				}()
			}
			start := time.Now()
			j.joinAll(t)
			j.each(t, "exchange", func(m *bootstrap.Member) error {
				tab, err := m.Exchange([]byte(fmt.Sprintf("blob of %d", m.Rank())))
				if err == nil {
					err = tab.Close()
				}
				return err
			})
			j.each(t, "barrier", func(m *bootstrap.Member) error { return m.Barrier() })
			took := time.Since(start)
			noReport(t, j.seed)
			for i, tr := range flooded {
				s := tr.strangersSeen()
				t.Logf("node %d: %v", i, s)
				if tt.name != "none" && (s.Streams == 0 || tt.flood.Packets > 0 && s.Packets == 0) {
					t.Errorf("node %d dropped no stream or packet (%v): the flood did not reach it", i, s)
				}
			}
			t.Logf("%d PEs of %d agents started in %v", n, agents, took.Round(time.Millisecond))
		})
	}
}

// TestSocketOwner asks the kernel whose the streams to a listener are: this
// user's own, and another user's (a helper running as nobody, when the
// test runs as root).
func TestSocketOwner(t *testing.T) {
	t.Parallel()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	d := newSockDiag()
	defer d.close()
	accept := func() *net.TCPConn {
		t.Helper()
		ln.SetDeadline(time.Now().Add(waitLimit))
		c, err := ln.AcceptTCP()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	out, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if got := d.who(accept()); got != ownerSame {
		t.Errorf("a stream of this user's: %d, want ownerSame (%d)", got, ownerSame)
	}
	if os.Getuid() != 0 {
		t.Skip("skipping another user's stream: it takes root to run a helper as another user")
	}
	startHelper(t, helperConfig{Role: "flood", Flood: floodConfig{Addrs: []string{ln.Addr().String()}, Idle: 1, Reopen: time.Second, For: waitLimit, UID: floodUser}}, nil)
	if got := d.who(accept()); got != ownerOther {
		t.Errorf("a stream of user %d's: %d, want ownerOther (%d)", floodUser, got, ownerOther)
	}
}
