package cluster

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goshmem/goshmem/bootstrap"
)

// envHelper makes this test binary a helper process (see TestMain): its
// value is the JSON of a helperConfig.
const envHelper = "GOSHMEM_CLUSTER_TEST_HELPER"

// helperConfig says what a helper process does.
type helperConfig struct {
	// Role: "seed" (a seed of Size PEs and Agents agents with Key and
	// JobID), "agent" (agent ID of Agents, of the seed at Seed, with the
	// PEs Ranks), or "flood" (see floodMain).
	Role           string
	Size, Agents   int
	ID             int
	Ranks          []int
	Seed, JobID    string
	Key            []byte
	FailureTimeout time.Duration
	Flood          floodConfig
}

func TestMain(m *testing.M) {
	if s := os.Getenv(envHelper); s != "" {
		os.Exit(helperMain(s))
	}
	os.Exit(m.Run())
}

// helperMain runs a helper process: it prints "ready ADDR" once its node
// runs (ADDR: the seed's), each report of a seed as "report KIND AGENT", and
// ends when its standard input closes.
func helperMain(config string) int {
	var c helperConfig
	if err := json.Unmarshal([]byte(config), &c); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	switch c.Role {
	case "seed":
		s, err := NewSeed(SeedConfig{Size: c.Size, Agents: c.Agents, Key: c.Key, JobID: c.JobID, FailureTimeout: c.FailureTimeout})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Printf("ready %s\n", s.Addr())
		go func() {
			for r := range s.Reports() {
				fmt.Printf("report %d %d\n", r.Kind, r.Agent)
			}
		}()
		io.Copy(io.Discard, os.Stdin)
		s.Close()
	case "agent":
		a, err := JoinAgent(bootstrap.Env{JobID: c.JobID, Size: c.Size, Seed: c.Seed, Key: c.Key, FailureTimeout: c.FailureTimeout},
			AgentConfig{ID: c.ID, Agents: c.Agents, Ranks: c.Ranks})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Printf("ready %s\n", c.Seed)
		go func() {
			<-a.Terminated()
			fmt.Printf("terminated %s\n", a.Why())
		}()
		io.Copy(io.Discard, os.Stdin)
		a.Close()
	case "flood":
		return floodMain(c.Flood)
	default:
		fmt.Fprintf(os.Stderr, "unknown helper role %q\n", c.Role)
		return 2
	}
	return 0
}

// helper is a helper process the test started.
type helper struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // its standard output, line by line
	ready string      // what followed "ready"
}

// startHelper starts a helper process for c, with attr (nil: none), and
// waits until it is ready; the test's end ends it.
func startHelper(t *testing.T, c helperConfig, attr *syscall.SysProcAttr) *helper {
	t.Helper()
	js, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envHelper+"="+string(js))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = attr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting a %s helper: %v", c.Role, err)
	}
	h := &helper{cmd: cmd, stdin: stdin, lines: make(chan string, 100)}
	t.Cleanup(func() {
		syscall.Kill(cmd.Process.Pid, syscall.SIGCONT)
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(waitLimit):
			cmd.Process.Kill()
			<-done
		}
	})
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			h.lines <- s.Text()
		}
		close(h.lines)
	}()
	select {
	case l, ok := <-h.lines:
		if !ok || !strings.HasPrefix(l, "ready") {
			t.Fatalf("the %s helper did not start (it said %q)", c.Role, l)
		}
		h.ready = strings.TrimSpace(strings.TrimPrefix(l, "ready"))
	case <-time.After(waitLimit):
		t.Fatalf("the %s helper is not ready after %v", c.Role, waitLimit)
	}
	return h
}

// said returns what the helper printed since it was ready, without
// waiting.
func (h *helper) said() []string {
	var out []string
	for {
		select {
		case l, ok := <-h.lines:
			if !ok {
				return out
			}
			out = append(out, l)
		default:
			return out
		}
	}
}

// exited is the cause of a PE that exited with status code.
func exited(code int) bootstrap.EndCause {
	return bootstrap.EndCause{Kind: bootstrap.EndExited, Status: code}
}
