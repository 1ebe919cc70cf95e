package launcher

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/goshmem/goshmem/ucs"
)

// Host is a host of a job and the number of PEs it takes.
type Host struct {
	Name  string // host name or address, as the remote shell takes it
	Slots int    // PEs it takes (at least 1)
}

// String returns "name:slots".
func (h Host) String() string { return h.Name + ":" + strconv.Itoa(h.Slots) }

// ParseHosts parses a host list such as "h1:4,h2:4" (the --hosts flag): a
// comma-separated list of hosts, each with an optional ":slots" (default 1;
// an IPv6 address with slots goes in brackets, "[fe80::1]:2"). A host named
// twice adds its slots. Names that a remote shell could take for an option
// or a shell for syntax are refused. The error wraps ucs.ErrInvalidParam.
func ParseHosts(list string) ([]Host, error) {
	var hosts []Host
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, fmt.Errorf("launcher: host list %q: empty entry: %w", list, ucs.ErrInvalidParam)
		}
		name, slotText := item, ""
		switch {
		case strings.HasPrefix(item, "["): // [IPv6 address] or [IPv6 address]:N
			end := strings.IndexByte(item, ']')
			if end < 0 || (end+1 < len(item) && item[end+1] != ':') {
				return nil, fmt.Errorf("launcher: host list %q: %q: want [ADDRESS] or [ADDRESS]:SLOTS: %w", list, item, ucs.ErrInvalidParam)
			}
			name = item[1:end]
			if end+1 < len(item) {
				slotText = item[end+2:]
			}
		case strings.Count(item, ":") == 1:
			name, slotText, _ = strings.Cut(item, ":")
		}
		slots := 1
		if slotText != "" || strings.HasSuffix(item, ":") {
			n, err := strconv.Atoi(slotText)
			if err != nil || n < 1 {
				return nil, fmt.Errorf("launcher: host list %q: %q: slots must be a positive integer: %w", list, item, ucs.ErrInvalidParam)
			}
			slots = n
		}
		if err := checkHostName(name); err != nil {
			return nil, fmt.Errorf("launcher: host list %q: %w", list, err)
		}
		hosts = addHost(hosts, Host{name, slots})
	}
	return hosts, nil
}

// ReadHostfile reads a host file (the --hostfile flag): one host per line,
// as "name", "name slots=N" (Open MPI's form) or "name:N"; blank lines and
// text after '#' are ignored. A host named twice adds its slots. The error
// names the line and wraps ucs.ErrInvalidParam for malformed content.
func ReadHostfile(path string) ([]Host, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("launcher: host file: %w", err)
	}
	defer f.Close()
	hosts, err := parseHostfile(f)
	if err != nil {
		return nil, fmt.Errorf("launcher: host file %s: %w", path, err)
	}
	return hosts, nil
}

func parseHostfile(r io.Reader) ([]Host, error) {
	var hosts []Host
	s := bufio.NewScanner(r)
	for line := 1; s.Scan(); line++ {
		text, _, _ := strings.Cut(s.Text(), "#")
		fields := strings.Fields(text)
		if len(fields) == 0 {
			continue
		}
		bad := func(why string) error {
			return fmt.Errorf("line %d: %q: %s: %w", line, strings.TrimSpace(text), why, ucs.ErrInvalidParam)
		}
		var h Host
		switch {
		case len(fields) == 1:
			hs, err := ParseHosts(fields[0])
			if err != nil || len(hs) != 1 {
				return nil, bad("want NAME, NAME:SLOTS or NAME slots=N")
			}
			h = hs[0]
		case len(fields) == 2 && strings.HasPrefix(fields[1], "slots="):
			n, err := strconv.Atoi(strings.TrimPrefix(fields[1], "slots="))
			if err != nil || n < 1 {
				return nil, bad("slots must be a positive integer")
			}
			if err := checkHostName(fields[0]); err != nil {
				return nil, bad(err.Error())
			}
			h = Host{fields[0], n}
		default:
			return nil, bad("want NAME, NAME:SLOTS or NAME slots=N")
		}
		hosts = addHost(hosts, h)
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("no hosts: %w", ucs.ErrInvalidParam)
	}
	return hosts, nil
}

// checkHostName refuses names that a remote shell would take for options
// or that a shell would interpret.
func checkHostName(name string) error {
	if name == "" || name[0] == '-' {
		return fmt.Errorf("host name %q: %w", name, ucs.ErrInvalidParam)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._-:@%", c)) {
			return fmt.Errorf("host name %q: character %q: %w", name, c, ucs.ErrInvalidParam)
		}
	}
	return nil
}

func addHost(hosts []Host, h Host) []Host {
	for i := range hosts {
		if hosts[i].Name == h.Name {
			hosts[i].Slots += h.Slots
			return hosts
		}
	}
	return append(hosts, h)
}

// placement is the PEs of one host.
type placement struct {
	host  Host
	ranks []int
	local bool // the host is this one: no remote shell
}

// place fills the hosts' slots in order with np PEs (np 0: one per slot).
// It returns the hosts that got PEs, this host (under any of its names)
// once, and the number of PEs. The error wraps ucs.ErrInvalidParam when np
// exceeds the slots.
func place(hosts []Host, np int) ([]placement, int, error) {
	total := 0
	for _, h := range hosts {
		total += h.Slots
	}
	if np == 0 {
		np = total
	}
	if np > total {
		return nil, 0, fmt.Errorf("launcher: %d PEs do not fit in the %d slots of the hosts %v: %w", np, total, hosts, ucs.ErrInvalidParam)
	}
	var ps []placement
	here := -1 // this host's placement
	next := 0
	for _, h := range hosts {
		if next == np {
			break
		}
		n := min(h.Slots, np-next)
		var ranks []int
		for r := next; r < next+n; r++ {
			ranks = append(ranks, r)
		}
		next += n
		if local := isLocalHost(h.Name); local && here >= 0 {
			ps[here].ranks = append(ps[here].ranks, ranks...)
			ps[here].host.Slots += h.Slots
		} else {
			if local {
				here = len(ps)
			}
			ps = append(ps, placement{host: h, ranks: ranks, local: local})
		}
	}
	return ps, np, nil
}

// isLocalHost reports whether name is this host: "localhost", a loopback
// address, or this host's name (or its first label).
func isLocalHost(name string) bool {
	if name == "localhost" {
		return true
	}
	if ip := net.ParseIP(name); ip != nil && ip.IsLoopback() {
		return true
	}
	h, err := os.Hostname()
	if err != nil || h == "" {
		return false
	}
	short, _, _ := strings.Cut(h, ".")
	return name == h || name == short
}
