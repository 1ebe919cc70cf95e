// Package testpeer runs the second process of two-process tests: a peer,
// which is the test binary itself, re-executed to play a role the test
// package defines (serve its memory, answer commands, crash on demand).
//
// A test package lists its roles in TestMain, before m.Run:
//
//	func TestMain(m *testing.M) {
//		testpeer.Serve(testpeer.Role{Name: "echo", Run: runEcho})
//		os.Exit(m.Run())
//	}
//
// In the test process Serve returns at once. In a peer, started by Start,
// it runs the role the environment names with the arguments Start was
// given, its standard input and its standard output, and exits: 0 when the
// role's Run returns nil, 1 (with the error on standard error) otherwise.
//
// The test talks to its peer in lines: Next reads the next line the peer
// wrote, Call writes a command line and reads the answer. A peer that
// ends, or stays silent for HangLimit, fails the read rather than hanging
// the test. What the peer writes on its standard error is kept and shown
// with the errors that mention the peer, and logged at the end of the test.
package testpeer

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// roleEnv makes a test binary a peer; its value is the JSON of a spec.
const roleEnv = "GOSHMEM_TESTPEER"

// HangLimit bounds every wait for a peer (an answer, an exit): a guard
// against hangs, not a timed assertion; a working peer answers at once.
const HangLimit = 60 * time.Second

// spec is what a peer is told to do.
type spec struct {
	Role string
	Args []string
}

// Role is a part a peer can play.
type Role struct {
	// Name names the role for Start.
	Name string
	// Run is the peer's body: it gets the arguments Start was given and
	// the process's standard input and output. The peer exits when it
	// returns.
	Run func(args []string, in io.Reader, out io.Writer) error
}

// Serve makes the process the peer Start asked for when the environment
// says it is one: it runs the named role among roles and exits, never
// returning. In any other process it returns at once. Call it first thing
// in TestMain.
func Serve(roles ...Role) {
	v, ok := os.LookupEnv(roleEnv)
	if !ok {
		return
	}
	var s spec
	err := json.Unmarshal([]byte(v), &s)
	if err == nil {
		err = fmt.Errorf("no role %q in this test binary", s.Role)
		for _, r := range roles {
			if r.Name == s.Role {
				err = r.Run(s.Args, os.Stdin, os.Stdout)
				break
			}
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "test peer %s: %v\n", s.Role, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Options tune Start.
type Options struct {
	// Args are given to the role's Run.
	Args []string
	// Env is added to the peer's environment (after the test process's
	// own).
	Env []string
	// Command, if set, makes the command that runs the peer from the
	// test binary's path and arguments, as exec.Command does: to run it
	// in another namespace, as another user, or from a copy of the binary.
	// Its Env, if set, is added to the peer's environment.
	Command func(name string, arg ...string) *exec.Cmd
}

// Peer is a running peer process.
type Peer struct {
	cmd    *exec.Cmd
	role   string
	stdin  io.WriteCloser
	lines  chan string   // the peer's output lines; closed at its end
	eof    chan struct{} // closed when its output ended
	stderr bytes.Buffer  // read only once the process was waited for
	waited bool
	err    error // its exit status, once waited
	killed bool
	closed bool
}

// Start starts a peer playing role, or fails tb. At the end of the test
// the peer is closed (see Close), and its standard error logged; a peer
// that failed fails the test.
func Start(tb testing.TB, role string, o Options) *Peer {
	tb.Helper()
	p, err := start(role, o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := p.Close(); err != nil {
			tb.Error(err)
		} else if s := p.Stderr(); s != "" {
			tb.Logf("peer %s (%d) stderr:\n%s", role, p.Pid(), s)
		}
	})
	return p
}

func start(role string, o Options) (*Peer, error) {
	b, err := json.Marshal(spec{Role: role, Args: o.Args})
	if err != nil {
		return nil, err
	}
	command := o.Command
	if command == nil {
		command = exec.Command
	}
	cmd := command(os.Args[0], "-test.run=^$")
	env := append(os.Environ(), cmd.Env...)
	if _, ok := os.LookupEnv("GORACE"); !ok {
		// A race-enabled peer would wait a second at exit for reports
		// still being written.
		env = append(env, "GORACE=atexit_sleep_ms=0")
	}
	cmd.Env = append(append(env, o.Env...), roleEnv+"="+string(b))
	p := &Peer{cmd: cmd, role: role, lines: make(chan string, 16), eof: make(chan struct{})}
	cmd.Stderr = &p.stderr
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if cmd.SysProcAttr.Pdeathsig == 0 {
		// A test binary killed by go test's timeout takes its peers
		// along instead of leaving them spinning.
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start peer %s: %w", role, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 64<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		close(p.eof)
	}()
	return p, nil
}

// Pid returns the peer's process id.
func (p *Peer) Pid() int { return p.cmd.Process.Pid }

// Next returns the next line the peer wrote, without its newline; it
// fails when the peer ends first or writes nothing for HangLimit.
func (p *Peer) Next() (string, error) {
	select {
	case line, ok := <-p.lines:
		if !ok {
			err := p.wait()
			return "", fmt.Errorf("peer %s (%d) ended before writing a line: %v; its stderr: %q", p.role, p.Pid(), err, p.Stderr())
		}
		return line, nil
	case <-time.After(HangLimit):
		return "", fmt.Errorf("peer %s (%d) wrote nothing in %v", p.role, p.Pid(), HangLimit)
	}
}

// NextHex reads the next line the peer wrote as n fields of hex bytes (an
// address, a packed key), as Next does.
func (p *Peer) NextHex(n int) ([][]byte, error) {
	line, err := p.Next()
	if err != nil {
		return nil, err
	}
	f := strings.Fields(line)
	if len(f) != n {
		return nil, fmt.Errorf("peer %s (%d) line %q: %d fields, want %d", p.role, p.Pid(), line, len(f), n)
	}
	b := make([][]byte, n)
	for i := range f {
		if b[i], err = hex.DecodeString(f[i]); err != nil {
			return nil, fmt.Errorf("peer %s (%d) line %q: %w", p.role, p.Pid(), line, err)
		}
	}
	return b, nil
}

// Rest reads the lines the peer writes until its output ends, waits for
// it to exit (at most HangLimit for both), and returns those lines and
// what Wait returns.
func (p *Peer) Rest() ([]string, error) {
	var lines []string
	timeout := time.After(HangLimit)
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				return lines, p.Wait()
			}
			lines = append(lines, line)
		case <-timeout:
			return lines, fmt.Errorf("peer %s (%d) still writes after %v", p.role, p.Pid(), HangLimit)
		}
	}
}

// Send writes line and a newline to the peer's standard input.
func (p *Peer) Send(line string) error {
	if p.stdin == nil {
		return fmt.Errorf("peer %s (%d): input closed", p.role, p.Pid())
	}
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		return fmt.Errorf("peer %s (%d): command %.40q: %w", p.role, p.Pid(), line, err)
	}
	return nil
}

// Call sends the command line cmd and returns the next line the peer
// writes: its answer.
func (p *Peer) Call(cmd string) (string, error) {
	if err := p.Send(cmd); err != nil {
		return "", err
	}
	return p.Next()
}

// Buffered reports whether the peer wrote a line that Next has not read.
func (p *Peer) Buffered() bool { return len(p.lines) > 0 }

// CloseInput closes the peer's standard input: a peer that reads its
// commands until the end of its input then ends.
func (p *Peer) CloseInput() {
	if p.stdin != nil {
		p.stdin.Close()
		p.stdin = nil
	}
}

// Signal sends sig to the peer.
func (p *Peer) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Kill kills the peer with SIGKILL without waiting for it: until Wait (or
// the end of the test) reaps it, it stays a zombie. Its exit status is no
// failure. Its input is closed after the signal, never before: a peer that
// saw the end of its input would end in order, not killed.
func (p *Peer) Kill() error {
	p.killed = true
	err := p.cmd.Process.Kill()
	p.CloseInput()
	return err
}

// Wait waits for the peer to exit, at most HangLimit, and returns its exit
// status (with its standard error); a peer that was killed or ended
// without error returns nil.
func (p *Peer) Wait() error {
	select {
	case <-p.eof:
	case <-time.After(HangLimit):
		return fmt.Errorf("peer %s (%d) still runs after %v", p.role, p.Pid(), HangLimit)
	}
	return p.exitErr()
}

// wait reaps the peer, whose output has ended, once.
func (p *Peer) wait() error {
	if !p.waited {
		<-p.eof
		p.err = p.cmd.Wait()
		p.waited = true
	}
	return p.err
}

// Close closes the peer's input, so that it ends, and waits for it,
// killing it if it has not ended after HangLimit; it returns an error for
// a peer that failed, or that had to be killed. Close is done at the end
// of the test of Start; calling it before is allowed, and a second Close
// returns nil.
func (p *Peer) Close() error {
	if p.closed {
		return nil
	}
	p.closed = true
	p.CloseInput()
	go func() {
		for range p.lines {
		}
	}()
	select {
	case <-p.eof:
	case <-time.After(HangLimit):
		p.Kill()
		p.wait()
		return fmt.Errorf("peer %s (%d) did not exit in %v; killed", p.role, p.Pid(), HangLimit)
	}
	return p.exitErr()
}

// exitErr reaps the peer, whose output has ended, and returns its failure:
// nil for a peer that exited with 0 or was killed.
func (p *Peer) exitErr() error {
	if err := p.wait(); err != nil && !p.killed {
		return fmt.Errorf("peer %s (%d): %w; its stderr: %q", p.role, p.Pid(), err, p.Stderr())
	}
	return nil
}

// Stderr returns what the peer wrote on its standard error, once it was
// waited for (Wait, Close, a failed Next); "" before.
func (p *Peer) Stderr() string {
	if !p.waited {
		return ""
	}
	return strings.TrimRight(p.stderr.String(), "\n")
}

// Stopped reports whether the peer is stopped (SIGSTOP), as the kernel
// says in /proc.
func (p *Peer) Stopped() bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Pid()))
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && (f[0] == "T" || f[0] == "t")
}

// Stop stops the peer with SIGSTOP and waits (at most HangLimit) until the
// kernel reports it stopped, so that it answers nothing any more.
func (p *Peer) Stop() error {
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	for deadline := time.Now().Add(HangLimit); !p.Stopped(); time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			return errors.New("peer not stopped after " + HangLimit.String())
		}
	}
	return nil
}
