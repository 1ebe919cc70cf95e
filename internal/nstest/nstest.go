// Package nstest makes another host, for tests that cross a network, out
// of Linux namespaces: a network, IPC, UTS (host name) and mount namespace
// with its own tmpfs on /dev/shm, held by a sleeping process and joined to
// this host by a veth pair. goshmem sees it as another host: its shared
// memory and loopback do not reach this one, and tcp does, over the pair.
// Making one needs root and the ip, unshare, nsenter, mount and hostname
// commands; New skips the test, saying why, where it cannot.
package nstest

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Host is a namespace host.
type Host struct {
	// Name is its host name.
	Name string
	// IP is its address on the veth pair, PeerIP this host's.
	IP, PeerIP netip.Addr
	// Dev is its end of the veth pair (a network device in its
	// namespace), PeerDev this host's end: for UCX_NET_DEVICES.
	Dev, PeerDev string
	pid          int
}

// WhyNot says why namespace hosts cannot be made here, or "".
func WhyNot() string {
	if os.Geteuid() != 0 {
		return "not root: making namespaces and veth pairs needs root"
	}
	for _, c := range []string{"ip", "unshare", "nsenter", "mount", "hostname"} {
		if _, err := exec.LookPath(c); err != nil {
			return c + " is not installed (iproute2, util-linux)"
		}
	}
	return ""
}

// New makes a host, or skips the test saying why it cannot; the host and
// its veth pair go away when the test ends.
func New(t testing.TB) *Host {
	t.Helper()
	if why := WhyNot(); why != "" {
		t.Skip(why)
	}
	var rnd [2]byte
	rand.Read(rnd[:])
	id := fmt.Sprintf("%02x%02x", rnd[0], rnd[1])
	h := &Host{Name: "gsns" + id}
	holder := exec.Command("unshare", "--net", "--ipc", "--uts", "--mount", "--propagation", "private", "--",
		"sh", "-c", "mount -t tmpfs -o mode=1777 tmpfs /dev/shm && hostname "+h.Name+
			" && ip link set lo up && echo ready && exec sleep 100000")
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Skipf("cannot make namespaces: %v", err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); strings.TrimSpace(line) != "ready" {
		t.Skipf("cannot make namespaces (unshare said %q)", line)
	}
	h.pid = holder.Process.Pid
	subnet := fmt.Sprintf("10.%d.%d", 100+int(rnd[0])%100, rnd[1])
	h.PeerIP, h.IP = netip.MustParseAddr(subnet+".1"), netip.MustParseAddr(subnet+".2")
	outer, inner := h.Name+"a", h.Name+"b"
	h.Dev, h.PeerDev = inner, outer
	if out, err := exec.Command("ip", "link", "add", outer, "type", "veth", "peer", "name", inner).CombinedOutput(); err != nil {
		t.Skipf("cannot make a veth pair (%v: %s)", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() { exec.Command("ip", "link", "del", outer).Run() })
	ns := []string{"nsenter", "-t", fmt.Sprint(h.pid), "-n"}
	for _, cmd := range [][]string{
		{"ip", "link", "set", inner, "netns", fmt.Sprint(h.pid)},
		{"ip", "addr", "add", h.PeerIP.String() + "/24", "dev", outer},
		{"ip", "link", "set", outer, "up"},
		append(ns, "ip", "addr", "add", h.IP.String()+"/24", "dev", inner),
		append(ns, "ip", "link", "set", inner, "up"),
	} {
		if out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%q: %v: %s", cmd, err, out)
		}
	}
	return h
}

// Command returns a command that runs name with args in the host's
// namespaces.
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	return h.CommandContext(context.Background(), name, args...)
}

// CommandContext is Command with a context that kills the command when
// done, as exec.CommandContext.
func (h *Host) CommandContext(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "nsenter", append([]string{"-t", fmt.Sprint(h.pid), "-n", "-i", "-u", "-m", "--", name}, args...)...)
}
