package e2e_test

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// TestMemberlistFlood floods the memberlist port of the agent of a host (a
// PE has none: agents are the job's members), as someone who knows the job
// id (in clear on the wire between hosts) but not the key can: 20 streams
// announcing encrypted messages of 19 MB each. The agent must not buffer
// them all (unbounded, a node's memory went from 13 MB to 713 MB), must not
// be declared dead, and its job must end well.
func TestMemberlistFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: sends 380 MB over the loopback")
	}
	await := filepath.Join(t.TempDir(), "go")
	cmd, pids, stderr := startBlocked(t, []string{"AWAIT_FILE=" + await}, "-np", "2", "-failure-timeout", "5s", peProgram, "await")
	victim := parentOf(t, pids[1])
	port, err := memberlistPort(victim)
	if err != nil {
		t.Fatal(err)
	}
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pids[1]))
	if err != nil {
		t.Fatal(err)
	}
	var jobID string
	for _, kv := range strings.Split(string(env), "\x00") {
		if v, ok := strings.CutPrefix(kv, "GOSHMEM_JOBID="); ok {
			jobID = v
		}
	}
	before := procStatus(t, victim, "VmRSS")
	const streams, size = 20, 19 << 20
	var wg sync.WaitGroup
	chunk := make([]byte, 1<<20)
	for range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
			if err != nil {
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(hangGuard))
			if memberlist.AddLabelHeaderToStream(c, "goshmem/"+jobID) != nil {
				return
			}
			const encryptMsg = 10 // memberlist's message type
			if _, err := c.Write(binary.BigEndian.AppendUint32([]byte{encryptMsg}, size)); err != nil {
				return
			}
			for sent := 0; sent < size; sent += len(chunk) {
				if _, err := c.Write(chunk); err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	peak := procStatus(t, victim, "VmHWM")
	t.Logf("the agent: %d MiB resident before the flood, %d MiB at its peak", before>>10, peak>>10)
	if peak-before > 200<<10 {
		t.Errorf("the agent grew by %d MiB under the flood, more than 200 MiB", (peak-before)>>10)
	}
	if err := os.WriteFile(await, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := waitTimeout(cmd, hangGuard); err != nil {
		t.Fatal(err)
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("the flooded job exited with %d, want 0; stderr:\n%s", code, stderr())
	}
}

// memberlistPort returns the port of the memberlist node of process pid:
// the one it listens on with TCP and is bound to with UDP.
func memberlistPort(pid int) (int, error) {
	inodes := map[string]bool{}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, err
	}
	for _, fd := range fds {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	ports := func(proto string, listening bool) map[int]bool {
		out := map[int]bool{}
		f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, proto))
		if err != nil {
			return out
		}
		defer f.Close()
		s := bufio.NewScanner(f)
		s.Scan() // the header
		for s.Scan() {
			fields := strings.Fields(s.Text())
			if len(fields) < 10 || !inodes[fields[9]] || (listening && fields[3] != "0A") {
				continue
			}
			_, hexPort, _ := strings.Cut(fields[1], ":")
			if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil {
				out[int(p)] = true
			}
		}
		return out
	}
	udp := ports("udp", false)
	for p := range ports("tcp", true) {
		if udp[p] {
			return p, nil
		}
	}
	return 0, fmt.Errorf("process %d has no port it listens on with TCP and is bound to with UDP", pid)
}

// procStatus returns a field of /proc/PID/status in KiB.
func procStatus(t *testing.T, pid int, field string) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return kb
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
