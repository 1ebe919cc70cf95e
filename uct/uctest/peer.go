package uctest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/testpeer"
	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// resourceID names one transport resource.
type resourceID struct {
	Component, MD, TL, Dev string
}

func (r resourceID) String() string {
	return r.Component + "/" + r.MD + "/" + r.TL + "/" + r.Dev
}

// RunPeerIfChild makes the process a peer of Run when Run started it (the
// environment says so): it then serves the resource until its standard
// input closes and exits, never returning. Otherwise it returns at once.
// Call it first thing in TestMain of every package that calls Run.
func RunPeerIfChild() { testpeer.Serve(peerRole) }

// openResource opens the component, memory domain and an iface of r, with
// the configuration of the UCX_* environment variables, as ucp does.
func openResource(r resourceID, errHandler func(any, uct.EP, ucs.Status)) (uct.Component, uct.MD, uct.Iface, error) {
	comp, err := uct.LookupComponent(r.Component)
	if err != nil {
		return nil, nil, nil, err
	}
	md, err := comp.OpenMD(r.MD, ucs.ReadConfig("", comp.MDConfigTable()))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("open MD %s: %w", r.MD, err)
	}
	iface, err := openIface(md, r, &uct.IfaceParams{ErrHandler: errHandler})
	if err != nil {
		md.Close()
		return nil, nil, nil, err
	}
	return comp, md, iface, nil
}

// openIface opens an iface of md on the resource r with params (whose
// resource names it sets) and the configuration of the UCX_* environment
// variables.
func openIface(md uct.MD, r resourceID, params *uct.IfaceParams) (uct.Iface, error) {
	params.TLName, params.DevName = r.TL, r.Dev
	iface, err := md.IfaceOpen(uct.NewWorker(ucs.ThreadModeSingle), params, ucs.ReadConfig("", md.IfaceConfigTable()))
	if err != nil {
		return nil, fmt.Errorf("open iface %s/%s: %w", r.TL, r.Dev, err)
	}
	return iface, nil
}

// runPeer is the peer process: it prints its hello line, then runs the
// commands of its input while a goroutine progresses the iface.
func runPeer(spec string, in io.Reader, out io.Writer) error {
	var r resourceID
	if err := json.Unmarshal([]byte(spec), &r); err != nil {
		return fmt.Errorf("resource %q: %w", spec, err)
	}
	_, md, iface, err := openResource(r, nil)
	if err != nil {
		return err
	}
	defer md.Close()
	defer iface.Close()
	s, err := newServer(md, iface)
	if err != nil {
		return err
	}
	defer s.free()
	w := bufio.NewWriter(out)
	fmt.Fprintln(w, s.hello())
	if err := w.Flush(); err != nil {
		return err
	}

	var stop atomic.Bool
	var wg sync.WaitGroup
	started := false
	lines := bufio.NewScanner(in)
	lines.Buffer(make([]byte, 64<<10), 64<<20)
	for lines.Scan() {
		line := lines.Text()
		if line == "exit" {
			break
		}
		ans := s.exec(line)
		if !started && strings.HasPrefix(line, "connect ") && ans == "ok" {
			// Progress starts once the reply EP exists; from then on only
			// the progress goroutine uses the iface and the EP.
			started = true
			wg.Add(1)
			go func() {
				defer wg.Done()
				serve(s, &stop)
			}()
		}
		fmt.Fprintln(w, ans)
		if err := w.Flush(); err != nil {
			break
		}
	}
	stop.Store(true)
	wg.Wait()
	return lines.Err()
}

// serve progresses the server's iface and sends its replies until stop is
// set, yielding and then sleeping briefly when idle so that a peer that has
// nothing to do leaves the CPU to the test.
func serve(s *server, stop *atomic.Bool) {
	for idle := 0; !stop.Load(); {
		if s.paused.Load() {
			time.Sleep(50 * time.Microsecond)
			continue
		}
		n := s.iface.Progress()
		s.poll()
		if n > 0 || len(s.outbox) > 0 {
			idle = 0
			continue
		}
		switch idle++; {
		case idle > 20000:
			time.Sleep(20 * time.Microsecond)
		case idle%64 == 0:
			runtime.Gosched()
		}
	}
}

// target is the test's handle on a server: in a peer process or in the
// test process.
type target interface {
	// call runs one command (see server.exec) and returns the words of an
	// "ok" answer after "ok", or an error.
	call(cmd string) ([]string, error)
	// poll sends the replies of an in-process server; a no-op for peers.
	poll()
	// info returns the hello line's fields.
	info() helloInfo
	// kill kills a peer process with SIGKILL and waits for it; in-process
	// targets fail with ucs.ErrUnsupported.
	kill() error
	// close ends the target.
	close() error
}

// helloInfo is what a target publishes.
type helloInfo struct {
	key               []byte
	base              uint64
	length            int
	devAddr, ifaceAdr []byte
}

// parseHello decodes a hello line.
func parseHello(line string) (helloInfo, error) {
	f := strings.Fields(line)
	if len(f) != 6 || f[0] != "hello" {
		return helloInfo{}, fmt.Errorf("malformed hello line %q", line)
	}
	var h helloInfo
	var errs [5]error
	h.key, errs[0] = unhexOrDash(f[1])
	h.base, errs[1] = strconv.ParseUint(f[2], 0, 64)
	h.length, errs[2] = strconv.Atoi(f[3])
	h.devAddr, errs[3] = unhexOrDash(f[4])
	h.ifaceAdr, errs[4] = unhexOrDash(f[5])
	if err := errors.Join(errs[:]...); err != nil {
		return helloInfo{}, fmt.Errorf("hello line %q: %w", line, err)
	}
	return h, nil
}

// answer turns a server answer into words or an error.
func answer(cmd, ans string) ([]string, error) {
	f := strings.Fields(ans)
	if len(f) == 0 || f[0] != "ok" {
		return nil, fmt.Errorf("target command %.40q: %s", cmd, ans)
	}
	return f[1:], nil
}

// localTarget is a server in the test process.
type localTarget struct {
	s *server
}

func (l *localTarget) call(cmd string) ([]string, error) { return answer(cmd, l.s.exec(cmd)) }
func (l *localTarget) poll()                             { l.s.poll() }
func (l *localTarget) kill() error {
	return fmt.Errorf("kill an in-process target: %w", ucs.ErrUnsupported)
}
func (l *localTarget) close() error { l.s.free(); return nil }
func (l *localTarget) info() helloInfo {
	s := l.s
	return helloInfo{key: s.key, base: s.base(), length: len(s.mem), devAddr: s.iface.DeviceAddress(), ifaceAdr: s.iface.Address()}
}

// peerTarget is a server in a peer process.
type peerTarget struct {
	*testpeer.Peer
	hello helloInfo
}

// peerRole is the role of a peer: it serves the resource whose JSON is
// its argument.
var peerRole = testpeer.Role{Name: "uctest", Run: func(args []string, in io.Reader, out io.Writer) error {
	if len(args) != 1 {
		return fmt.Errorf("arguments %q, want a resource", args)
	}
	return runPeer(args[0], in, out)
}}

// startPeer starts a peer process serving r and reads its hello line; the
// peer ends with the test.
func startPeer(t testing.TB, r resourceID) (*peerTarget, error) {
	spec, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	p := &peerTarget{Peer: testpeer.Start(t, peerRole.Name, testpeer.Options{Args: []string{string(spec)}})}
	line, err := p.Next()
	if err != nil {
		return nil, fmt.Errorf("%w (does TestMain call uctest.RunPeerIfChild?)", err)
	}
	if p.hello, err = parseHello(line); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *peerTarget) call(cmd string) ([]string, error) {
	line, err := p.Call(cmd)
	if err != nil {
		return nil, err
	}
	return answer(cmd, line)
}

func (p *peerTarget) poll()           {}
func (p *peerTarget) info() helloInfo { return p.hello }

func (p *peerTarget) kill() error {
	if err := p.Kill(); err != nil {
		return err
	}
	return p.Wait()
}

func (p *peerTarget) close() error { return p.Close() }
