package e2e_test

import (
	"bufio"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/nstest"
	"github.com/goshmem/goshmem/internal/petest"
)

// nsHost is a "host" made of namespaces: its own network (joined to the
// others by a bridge), IPC, UTS (host name) and mount namespace with a
// private tmpfs on /dev/shm, held by a sleeping process.
type nsHost struct {
	name   string
	ip     string
	holder *exec.Cmd
}

// nsCluster is a set of such hosts and the bridge between them and this
// host (which runs goshmem-run).
type nsCluster struct {
	t      *testing.T
	bridge string
	seedIP string // this host's address on the bridge
	hosts  []*nsHost
	rsh    string // the remote shell: rsh HOST COMMAND... runs in HOST's namespaces
	// rshDetached is a remote shell whose command outlives it.
	rshDetached string
}

func sh(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%q: %v: %s", args, err, out)
	}
}

// newNSCluster makes n hosts named <prefix>1 to <prefix>n; they go away
// when the test ends. It skips the test, saying why, where namespaces
// cannot be made.
func newNSCluster(t *testing.T, n int) *nsCluster {
	skipUnless(t, "netns", nstest.WhyNot())
	var rnd [2]byte
	rand.Read(rnd[:])
	id := fmt.Sprintf("%02x%02x", rnd[0], rnd[1])
	subnet := fmt.Sprintf("10.%d.%d", 100+int(rnd[0])%100, rnd[1])
	c := &nsCluster{t: t, bridge: "gsb" + id, seedIP: subnet + ".1"}
	t.Cleanup(c.close)
	if out, err := exec.Command("ip", "link", "add", c.bridge, "type", "bridge").CombinedOutput(); err != nil {
		skipUnless(t, "netns", fmt.Sprintf("cannot make a bridge (%v: %s)", err, strings.TrimSpace(string(out))))
	}
	sh(t, "ip", "addr", "add", c.seedIP+"/24", "dev", c.bridge)
	sh(t, "ip", "link", "set", c.bridge, "up")
	dir := t.TempDir()
	for i := 1; i <= n; i++ {
		h := &nsHost{name: fmt.Sprintf("gsm%s-h%d", id, i), ip: fmt.Sprintf("%s.%d", subnet, 10+i)}
		// unshare execs the shell in the new namespaces: the holder's pid
		// names them.
		h.holder = exec.Command("unshare", "--net", "--ipc", "--uts", "--mount", "--propagation", "private", "--",
			"sh", "-c", "mount -t tmpfs -o mode=1777 tmpfs /dev/shm && hostname "+h.name+
				" && ip link set lo up && echo ready && exec sleep 100000")
		out, err := h.holder.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		h.holder.Stderr = os.Stderr
		if err := h.holder.Start(); err != nil {
			skipUnless(t, "netns", fmt.Sprintf("unshare: %v", err))
		}
		c.hosts = append(c.hosts, h)
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil || line != "ready\n" {
			skipUnless(t, "netns", fmt.Sprintf("namespaces with their own network, IPC, UTS and /dev/shm cannot be made here (unshare said %q, %v)", line, err))
		}
		pid := strconv.Itoa(h.holder.Process.Pid)
		veth := fmt.Sprintf("gsv%s%d", id, i)
		sh(t, "ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", pid)
		sh(t, "ip", "link", "set", veth, "master", c.bridge, "up")
		sh(t, "nsenter", "-t", pid, "-n", "ip", "addr", "add", h.ip+"/24", "dev", "eth0")
		sh(t, "nsenter", "-t", pid, "-n", "ip", "link", "set", "eth0", "up")
		if err := os.WriteFile(filepath.Join(dir, h.name+".pid"), []byte(pid), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The remote shell enters every namespace of the host; exec keeps the
	// agent a child of goshmem-run.
	c.rsh = writeScript(t, dir, "nsrsh", `host=$1; shift
exec nsenter -t "$(cat "`+dir+`/$host.pid")" -n -i -u -m -- "$@"
`)
	// Like ssh, this one does not pass signals on: when goshmem-run dies,
	// the agent lives on and must notice that the seed is gone.
	c.rshDetached = writeScript(t, dir, "nsrsh-detached", `host=$1; shift
exec 3<&0 # background commands read /dev/null, unless told otherwise
nsenter -t "$(cat "`+dir+`/$host.pid")" -n -i -u -m -- "$@" <&3 3<&- &
wait
`)
	return c
}

func (c *nsCluster) close() {
	for _, h := range c.hosts {
		if h.holder.Process != nil {
			h.holder.Process.Kill()
			h.holder.Wait()
		}
	}
	exec.Command("ip", "link", "del", c.bridge).Run()
}

// hostList returns the -hosts flag for slots PEs per host.
func (c *nsCluster) hostList(slots ...int) string {
	var parts []string
	for i, n := range slots {
		parts = append(parts, c.hosts[i].name+":"+strconv.Itoa(n))
	}
	return strings.Join(parts, ",")
}

// shmOf lists the goshmem files in the /dev/shm of host h.
func (c *nsCluster) shmOf(h *nsHost) []string {
	out, err := exec.Command("nsenter", "-t", strconv.Itoa(h.holder.Process.Pid), "-m", "ls", "/dev/shm").Output()
	if err != nil {
		c.t.Errorf("listing /dev/shm of %s: %v", h.name, err)
	}
	var files []string
	for _, f := range strings.Fields(string(out)) {
		if strings.Contains(f, "goshmem") {
			files = append(files, f)
		}
	}
	return files
}

// noLeftoversOn waits (up to hangGuard) for the /dev/shm of every host to
// hold no goshmem file.
func (c *nsCluster) noLeftoversOn() {
	deadline := time.Now().Add(hangGuard)
	for _, h := range c.hosts {
		for {
			left := c.shmOf(h)
			if len(left) == 0 {
				break
			}
			if time.Now().After(deadline) {
				c.t.Errorf("left in /dev/shm of %s: %v", h.name, left)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// TestMultiHost runs jobs across three hosts made of namespaces, started
// through a remote shell: PEs on different hosts reach each other over
// tcp, those on one host over shared memory.
func TestMultiHost(t *testing.T) {
	t.Parallel()
	needBinaries(t)
	c := newNSCluster(t, 3)
	slots := []int{2, 2, 1}
	hostOf := func(rank int) string {
		for i, n := range slots {
			if rank < n {
				return c.hosts[i].name
			}
			rank -= n
		}
		return "?"
	}
	// The default failure timeout: nothing here waits for it but the
	// detached agents, which have their own.
	flags := []string{"-hosts", c.hostList(slots...), "-rsh", c.rsh, "-bind", c.seedIP}
	t.Run("hello", func(t *testing.T) {
		r := run(t, namedSegments, append(flags, peProgram, "hello")...)
		checkHello(t, r, 5, hostOf)
		c.noLeftoversOn()
	})
	t.Run("ring", func(t *testing.T) {
		fullMatrixOnly(t)
		r := run(t, namedSegments, append(flags, peProgram, "ring")...)
		if r.code != 0 || !strings.Contains(r.stdout, "token back at PE 0 after 5 hops") {
			t.Errorf("ring across hosts: %v", r)
		}
	})
	for _, tt := range []struct{ barrier, scheme string }{
		{"auto", "dissemination"},
		{"node-aware", "node-aware (a leader for each of 3 nodes)"},
	} {
		t.Run("barrier "+tt.barrier, func(t *testing.T) {
			// node-aware: a leader per host gathers its host's PEs through
			// shared memory, and only the leaders cross the network.
			r := run(t, []string{"SHMEM_INFO=1", "GOSHMEM_BARRIER=" + tt.barrier}, append(flags, peProgram, "barriers")...)
			if r.code != 0 || strings.Count(r.stdout, "passed 200 rounds") != 5 {
				t.Fatalf("barriers across hosts: %v", r)
			}
			if !strings.Contains(r.stdout, "barrier:         "+tt.scheme+"\n") {
				t.Errorf("SHMEM_INFO does not name the barrier %q: %v", tt.scheme, r)
			}
		})
	}
	t.Run("shared memory on a host, tcp between hosts", func(t *testing.T) {
		// Each PE maps the heaps of the PEs of its host, and only those.
		r := run(t, nil, append(flags, peProgram, "reach")...)
		if r.code != 0 {
			t.Fatalf("%v", r)
		}
		seen := 0
		for _, l := range strings.Split(r.stdout, "\n") {
			f := strings.Fields(l)
			if len(f) != 4 || f[0] != "reach" {
				continue
			}
			seen++
			me, _ := strconv.Atoi(f[1])
			pe, _ := strconv.Atoi(f[2])
			want := "remote"
			if hostOf(me) == hostOf(pe) {
				want = "direct"
			}
			if f[3] != want {
				t.Errorf("PE %d on %s reaches PE %d on %s %s, want %s", me, hostOf(me), pe, hostOf(pe), f[3], want)
			}
		}
		if seen != 25 {
			t.Errorf("%d reach lines, want 25; %v", seen, r)
		}
	})
	t.Run("endpoints on first use", func(t *testing.T) {
		// At the end of Init (SHMEM_INFO prints then) PE 0 is connected to
		// itself alone; it maps the heaps of its host's PEs on first use.
		r := run(t, []string{"SHMEM_INFO=1"}, append(flags, peProgram, "hello")...)
		if r.code != 0 {
			t.Fatalf("%v", r)
		}
		line := regexp.MustCompile(`(?m)^    PE (\d+): (.*)$`)
		seen := 0
		for _, m := range line.FindAllStringSubmatch(r.stdout, -1) {
			pe, _ := strconv.Atoi(m[1])
			seen++
			local := hostOf(pe) == hostOf(0)
			if mapped := strings.Contains(m[2], "heap mapped"); mapped != local {
				t.Errorf("PE 0 reaches PE %d (%s) as %q", pe, hostOf(pe), m[2])
			}
			if lazy := strings.Contains(m[2], "not connected yet"); lazy == (pe == 0) {
				t.Errorf("PE 0 reaches PE %d (%s) as %q", pe, hostOf(pe), m[2])
			}
		}
		if seen != 5 {
			t.Errorf("%d transport lines, want 5; %v", seen, r)
		}
	})
	t.Run("tcp between hosts", func(t *testing.T) {
		// Every PE listens on its host's address; none on this host's.
		r := run(t, nil, append(flags, "-tag-output", peProgram, "listeners")...)
		if r.code != 0 {
			t.Fatalf("%v", r)
		}
		onHost := map[string]bool{}
		for _, l := range strings.Split(r.stdout, "\n") {
			if f := strings.Fields(l); len(f) == 6 && f[2] == "listener" && f[4] == "tcp" {
				rank, _ := strconv.Atoi(f[3])
				for i, h := range c.hosts {
					if strings.HasPrefix(f[5], h.ip+":") {
						if hostOf(rank) != h.name {
							t.Errorf("PE %d of %s listens on %s, the address of %s", rank, hostOf(rank), f[5], h.name)
						}
						onHost[strconv.Itoa(i)+"/"+f[3]] = true
					}
				}
			}
		}
		if len(onHost) != 5 {
			t.Errorf("%d PEs listen on their host's address, want 5; %v", len(onHost), r)
		}
	})
	t.Run("stdin", func(t *testing.T) {
		fullMatrixOnly(t)
		// PE 0 is on the first host, behind the remote shell.
		checkStdin(t, runIn(t, "a\nb\n", nil, append(flags, stdinArgs...)...))
	})
	t.Run("output dir", func(t *testing.T) {
		fullMatrixOnly(t)
		dir := t.TempDir()
		r := run(t, nil, append(flags, "-output-dir", dir, peProgram, "hello")...)
		if r.code != 0 {
			t.Fatalf("%v", r)
		}
		for rank := range 5 {
			b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("pe-%d.out", rank)))
			if want := fmt.Sprintf("hello %d of 5 on %s\n", rank, hostOf(rank)); err != nil || !strings.Contains(string(b), want) {
				t.Errorf("output file of PE %d: %q, %v; want %q", rank, b, err, want)
			}
		}
	})
	t.Run("launcher killed", func(t *testing.T) {
		fullMatrixOnly(t)
		killLauncher(t, namedSegments, append(flags, "-np", "5", peProgram, "block")...)
		c.noLeftoversOn()
	})
	t.Run("launcher killed, agents not told", func(t *testing.T) {
		// The agents and PEs notice that the seed is gone.
		detached := []string{"-hosts", c.hostList(slots...), "-rsh", c.rshDetached, "-bind", c.seedIP, "-failure-timeout", "2s"}
		killLauncher(t, namedSegments, append(detached, "-np", "5", peProgram, "block")...)
		c.noLeftoversOn()
	})
	for _, f := range faults {
		t.Run(f.mode, func(t *testing.T) {
			if f.mode != "kill9" {
				fullMatrixOnly(t)
			}
			// PE 3 is on the second host.
			env := append([]string{"FAIL_PE=3"}, namedSegments...)
			r := run(t, env, append(flags, peProgram, f.mode)...)
			checkFault(t, r, f.code, 3, c.hosts[1].name, f.how)
			t.Logf("ended after %v", r.took.Round(time.Millisecond))
			c.noLeftoversOn()
		})
	}
}

// fullMatrixOnly skips t unless the full matrix is asked for
// (GOSHMEM_TEST_FULL=1, as .ci/run sets it): a job across the namespaced
// hosts takes a second or two of CPU, and a quick run keeps one of each
// kind.
func fullMatrixOnly(t *testing.T) {
	t.Helper()
	if !petest.Full() {
		t.Skipf("in the full matrix only (%s=1 runs it; .ci/run does)", petest.FullEnv)
	}
}
