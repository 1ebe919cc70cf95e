package cluster

import (
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
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

// floodMain holds the connections c describes for c.For, then prints
// "opened N closed M" (connections opened in all, and closed by the victim)
// and returns. It prints "ready" once the first connections are open.
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
	var opened, closed atomic.Int64
	var wg, first sync.WaitGroup
	hold := func(addr string, kind int) {
		defer wg.Done()
		firstDone := false
		for time.Now().Before(end) {
			conn, err := net.DialTimeout("tcp", addr, time.Until(end))
			if !firstDone {
				first.Done()
				firstDone = true
			}
			if err != nil {
				time.Sleep(c.Reopen)
				continue
			}
			opened.Add(1)
			conn.SetDeadline(end)
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
			conn.Close()
			if time.Now().Before(end) {
				closed.Add(1)
				time.Sleep(c.Reopen)
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
				for t := time.NewTicker(time.Second / time.Duration(c.Packets)); time.Now().Before(end); <-t.C {
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
