package launcher

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/goshmem/goshmem/ucs"
)

// plan checks the options and places the PEs.
func (j *job) plan() error {
	o := &j.opts
	if !filepath.IsAbs(o.Program) && strings.ContainsRune(o.Program, filepath.Separator) {
		if abs, err := filepath.Abs(o.Program); err == nil {
			o.Program = abs
		}
	}
	if o.OutputDir != "" {
		abs, err := filepath.Abs(o.OutputDir)
		if err != nil {
			return fmt.Errorf("launcher: output directory: %w", err)
		}
		o.OutputDir = abs
	}
	if len(o.Spawner) > 0 {
		if o.NP < 1 {
			return fmt.Errorf("launcher: %d PEs: %w", o.NP, ucs.ErrInvalidParam)
		}
		j.np = o.NP
		return nil
	}
	hosts := o.Hosts
	if len(hosts) == 0 {
		hosts = []Host{{Name: "localhost", Slots: o.NP}}
	}
	places, np, err := place(hosts, o.NP)
	if err != nil {
		return err
	}
	j.places, j.np = places, np
	j.single = true
	for _, p := range places {
		j.single = j.single && p.local
	}
	if !j.single && o.AgentPath == "" {
		return fmt.Errorf("launcher: PEs on other hosts need an agent binary (AgentPath): %w", ucs.ErrInvalidParam)
	}
	if j.single && o.AgentPath == "" {
		// One agent, in this process, for every PE.
		ranks := make([]int, np)
		for r := range ranks {
			ranks[r] = r
		}
		j.places = []placement{{host: Host{Name: "localhost", Slots: np}, ranks: ranks, local: true}}
	}
	return nil
}

// chooseBindAddr returns the address of this host that routes to the first
// remote host that resolves, or else to the default route.
func (j *job) chooseBindAddr() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for _, p := range j.places {
		if p.local {
			continue
		}
		addrs, err := net.DefaultResolver.LookupHost(ctx, p.host.Name)
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if ip, err := localIPFor(net.JoinHostPort(a, "9")); err == nil && !ip.IsLoopback() {
				return ip.String(), nil
			}
		}
	}
	// The default route: no packet is sent to this documentation address.
	if ip, err := localIPFor("192.0.2.1:9"); err == nil && !ip.IsLoopback() {
		return ip.String(), nil
	}
	return "", fmt.Errorf("launcher: cannot choose the address of the bootstrap seed for PEs on other hosts: give one (--bind): %w", ucs.ErrInvalidParam)
}

// localIPFor returns the local address the kernel would use to reach addr.
func localIPFor(addr string) (net.IP, error) {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP, nil
}
