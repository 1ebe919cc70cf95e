package main

import (
	"fmt"
	"math"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"

	"github.com/Mellanox/rdmamap"

	"github.com/goshmem/goshmem/bootstrap"
	goversion "github.com/goshmem/goshmem/internal/version"
	"github.com/goshmem/goshmem/shmem"
	"github.com/goshmem/goshmem/ucp"
	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"

	// The transports goshmem-info describes: importing one registers it.
	_ "github.com/goshmem/goshmem/uct/cma"
	_ "github.com/goshmem/goshmem/uct/self"
	_ "github.com/goshmem/goshmem/uct/sm"
	_ "github.com/goshmem/goshmem/uct/tcp"
)

// printVersion prints the -v section.
func printVersion(p *printer) {
	version, revision := goversion.Module()
	p.fact("UCP library version", "%s", ucp.VersionString())
	p.fact("Go version", "%s", runtime.Version())
	p.fact("Module", "%s %s", goversion.ModulePath, version)
	p.fact("VCS revision", "%s", revision)
}

// printBuild prints the -b section.
func printBuild(p *printer) {
	s := map[string]string{}
	if bi, ok := debug.ReadBuildInfo(); ok {
		s = goversion.Settings(bi)
	}
	get := func(k, def string) string {
		if v, ok := s[k]; ok {
			return v
		}
		return def
	}
	p.fact("Go version", "%s", runtime.Version())
	p.f("# GOOS/GOARCH: %s/%s", runtime.GOOS, runtime.GOARCH)
	p.f("# CGO_ENABLED: %s", get("CGO_ENABLED", "(not recorded)"))
	race := "no"
	if raceEnabled {
		race = "yes"
	}
	p.f("# Race detector (-race): %s", race)
	p.f("# Build tags (-tags): %s", get("-tags", "(none)"))
	p.f("# Compiler: %s", runtime.Compiler)
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	p.f("# Build settings:")
	if len(keys) == 0 {
		p.f("#   (none recorded)")
	}
	for _, k := range keys {
		p.f("#   %s=%s", k, s[k])
	}
}

// printSummary prints the -s section, the default: what oshmem_info
// prints first, for goshmem.
func printSummary(p *printer) {
	version, revision := goversion.Module()
	major, minor := shmem.InfoGetVersion()
	p.f("# Package: %s %s", goversion.ModulePath, version)
	p.fact("VCS revision", "%s", revision)
	p.f("# OpenSHMEM version: %d.%d", major, minor)
	p.f("# OpenSHMEM name: %s", shmem.InfoGetName())
	p.fact("UCP library version", "%s", ucp.VersionString())
	p.fact("Go version", "%s %s/%s", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	p.f("# Thread support: %s", listOrNone([]string{
		shmem.ThreadSingle.String(), shmem.ThreadFunneled.String(), shmem.ThreadSerialized.String(), shmem.ThreadMultiple.String()}))
	var tls []string
	for _, comp := range uct.Components() {
		mds, err := comp.MDResources()
		if err != nil {
			tls = append(tls, fmt.Sprintf("%s (unavailable: %v)", comp.Name(), err))
			continue
		}
		for _, mdr := range mds {
			tls = append(tls, transportSummary(comp, mdr.Name)...)
		}
	}
	p.f("# Transports: %s", listOrNone(tls))
	heap := os.Getenv(envSymmetricSize)
	if heap == "" {
		heap = "default (" + envSymmetricSize + " not set)"
	}
	p.f("# Symmetric heap per PE: %s", heap)
	p.f("# Launcher: goshmem-run -np N PROGRAM (oshrun's conventions: -n, -x, -hostfile)")
	p.f("# More: goshmem-info -v (version), -d (devices), -c (variables), -b (build)")
}

// envSymmetricSize is the variable of the symmetric heap size.
const envSymmetricSize = "SHMEM_SYMMETRIC_SIZE"

// transportSummary lists the transports of a memory domain as
// "tcp/eth0", one per device.
func transportSummary(comp uct.Component, name string) []string {
	md, err := comp.OpenMD(name, ucs.ReadConfig(ucp.ComponentEnvPrefix(ucs.DefaultEnvPrefix, name), comp.MDConfigTable()))
	if err != nil {
		return []string{fmt.Sprintf("%s (cannot open: %v)", name, err)}
	}
	defer md.Close()
	tls, err := md.TLResources()
	if err != nil {
		return []string{fmt.Sprintf("%s (cannot list: %v)", name, err)}
	}
	var out []string
	for _, tl := range tls {
		out = append(out, tl.TLName+"/"+tl.DevName)
	}
	return out
}

// printConfig prints the -c section: the OpenSHMEM and goshmem variables
// (shmem.EnvVars), then every UCX variable, as ucp reads it: the
// context's under UCX_, each memory domain's under UCX_<MD>_ and each
// transport's under UCX_<TL>_ (ucp.ComponentEnvPrefix).
func printConfig(p *printer) {
	p.f("#")
	p.f("# OpenSHMEM and goshmem")
	for _, v := range shmem.EnvVars() {
		p.f("#")
		p.f("# %s", v.Doc)
		switch val, ok := os.LookupEnv(v.Name); {
		case !ok:
			p.f("# %s is not set", v.Name)
		case v.Name == bootstrap.EnvKey:
			p.f("# %s is set (not shown: it is the job's secret)", v.Name)
		default:
			p.f("%s=%s", v.Name, val)
		}
	}
	table := func(title, prefix string, fields []ucs.ConfigField) {
		p.f("#")
		p.f("# %s", title)
		if len(fields) == 0 {
			p.f("#   (no variables)")
			return
		}
		cfg := ucs.ReadConfig(prefix, fields)
		for _, f := range cfg.Fields() {
			p.f("#")
			p.f("# %s", f.Doc)
			p.f("# default: %s", f.Default)
			p.f("%s%s=%s", cfg.Prefix(), f.Name, cfg.Get(f.Name))
		}
	}
	table("UCP context", ucs.DefaultEnvPrefix, ucp.ConfigTable())
	for _, comp := range uct.Components() {
		mds, err := comp.MDResources()
		if err != nil {
			p.f("#")
			p.f("# Component %s: memory domains unavailable: %v", comp.Name(), err)
			continue
		}
		for _, mdr := range mds {
			mdPrefix := ucp.ComponentEnvPrefix(ucs.DefaultEnvPrefix, mdr.Name)
			table(fmt.Sprintf("Memory domain %s", mdr.Name), mdPrefix, comp.MDConfigTable())
			md, err := comp.OpenMD(mdr.Name, ucs.ReadConfig(mdPrefix, comp.MDConfigTable()))
			if err != nil {
				p.f("#")
				p.f("# Memory domain %s: cannot open: %v", mdr.Name, err)
				continue
			}
			tls, _ := md.TLResources()
			seen := map[string]bool{}
			for _, tl := range tls {
				if seen[tl.TLName] {
					continue
				}
				seen[tl.TLName] = true
				table(fmt.Sprintf("Transport %s", tl.TLName), ucp.ComponentEnvPrefix(ucs.DefaultEnvPrefix, tl.TLName), md.IfaceConfigTable())
			}
			md.Close()
		}
	}
}

// printDevices prints the -d section: the transports, then the RDMA
// devices rdma lists.
func printDevices(p *printer, rdma []rdmaDevice) {
	for _, comp := range uct.Components() {
		mds, err := comp.MDResources()
		if err != nil {
			p.f("#")
			p.f("# Component: %s: memory domains unavailable: %v", comp.Name(), err)
			continue
		}
		for _, mdr := range mds {
			printMD(p, comp, mdr.Name)
		}
	}
	p.f("#")
	if len(rdma) == 0 {
		p.f("# RDMA devices: none")
		return
	}
	p.f("# RDMA devices: %d", len(rdma))
	for _, d := range rdma {
		p.f("#")
		p.f("#   RDMA device: %s", d.name)
		p.f("#         ports: %s", listOrNone(d.ports))
		p.f("#   net devices: %s", listOrNone(d.netdevs))
		p.f("#  char devices: %s", listOrNone(d.charDevs))
	}
}

// printMD prints one memory domain and its transport resources.
func printMD(p *printer, comp uct.Component, name string) {
	p.f("#")
	p.f("# Memory domain: %s", name)
	p.f("#     Component: %s", comp.Name())
	md, err := comp.OpenMD(name, ucs.ReadConfig(ucp.ComponentEnvPrefix(ucs.DefaultEnvPrefix, name), comp.MDConfigTable()))
	if err != nil {
		p.f("#   < failed to open memory domain: %v >", err)
		return
	}
	defer md.Close()
	attr, err := md.Query()
	if err != nil {
		p.f("#   < failed to query memory domain: %v >", err)
		return
	}
	if attr.Flags&uct.MDFlagAlloc != 0 {
		p.f("#             allocate: %s", limit(attr.MaxAlloc))
	} else {
		p.f("#             allocate: unsupported")
	}
	if attr.Flags&uct.MDFlagReg != 0 {
		p.f("#             register: %s, cost: %s", limit(attr.MaxReg), cost(attr.RegCost))
	} else {
		p.f("#             register: unsupported")
	}
	p.f("#           remote key: %d bytes", attr.RkeyPackedSize)
	if attr.Flags&uct.MDFlagRkeyPtr != 0 {
		p.f("#           rkey_ptr is supported")
	}
	p.f("#         memory flags: %s", flagNames(attr.Flags, mdFlagNames))
	tls, err := md.TLResources()
	if err != nil {
		p.f("#   < failed to query transport resources: %v >", err)
		return
	}
	if len(tls) == 0 {
		p.f("#   < no supported devices found >")
	}
	for _, tl := range tls {
		printTL(p, md, tl)
	}
}

// printTL opens an iface on tl and prints what it claims.
func printTL(p *printer, md uct.MD, tl uct.TLResource) {
	p.f("#")
	p.f("#      Transport: %s", tl.TLName)
	p.f("#         Device: %s", tl.DevName)
	p.f("#           Type: %s", tl.DevType)
	iface, err := md.IfaceOpen(uct.NewWorker(ucs.ThreadModeSingle), &uct.IfaceParams{TLName: tl.TLName, DevName: tl.DevName},
		ucs.ReadConfig(ucp.ComponentEnvPrefix(ucs.DefaultEnvPrefix, tl.TLName), md.IfaceConfigTable()))
	if err != nil {
		p.f("#   < failed to open interface: %v >", err)
		return
	}
	defer iface.Close()
	a, err := iface.Query()
	if err != nil {
		p.f("#   < failed to query interface: %v >", err)
		return
	}
	p.f("#")
	p.f("#      capabilities:")
	p.f("#            bandwidth: %.2f/ppn + %.2f MB/sec", a.Bandwidth.Shared/mbyte, a.Bandwidth.Dedicated/mbyte)
	p.f("#              latency: %s", latency(a.Latency))
	p.f("#             overhead: %.0f nsec", a.Overhead*1e9)
	op := func(name string, flag uct.IfaceFlags, caps uct.OpCaps) {
		if a.Flags&flag == 0 {
			return
		}
		switch {
		case strings.HasSuffix(name, "_short"):
			p.f("#%21s: <= %s", name, size(caps.MaxShort))
		case strings.HasSuffix(name, "_bcopy"):
			p.f("#%21s: <= %s", name, size(caps.MaxBcopy))
		default:
			p.f("#%21s: %s..%s, up to %s iov", name, size(caps.MinZcopy), size(caps.MaxZcopy), size(caps.MaxIOV))
			prefix := name[:strings.IndexByte(name, '_')]
			p.f("#%21s: <= %s", prefix+"_opt_zcopy_align", size(caps.OptZcopyAlign))
			p.f("#%21s: <= %s", prefix+"_align_mtu", size(caps.AlignMTU))
		}
	}
	op("put_short", uct.IfaceFlagPutShort, a.Put)
	op("put_bcopy", uct.IfaceFlagPutBcopy, a.Put)
	op("put_zcopy", uct.IfaceFlagPutZcopy, a.Put)
	op("get_short", uct.IfaceFlagGetShort, a.Get)
	op("get_bcopy", uct.IfaceFlagGetBcopy, a.Get)
	op("get_zcopy", uct.IfaceFlagGetZcopy, a.Get)
	op("am_short", uct.IfaceFlagAMShort, a.AM)
	op("am_bcopy", uct.IfaceFlagAMBcopy, a.AM)
	op("am_zcopy", uct.IfaceFlagAMZcopy, a.AM)
	if a.Flags&(uct.IfaceFlagAMShort|uct.IfaceFlagAMBcopy|uct.IfaceFlagAMZcopy) != 0 {
		p.f("#            am header: <= %s", size(a.AM.MaxHdr))
	}
	p.f("#   atomic_op (32 bit): %s", flagNames(a.Atomic32.OpFlags, atomicNames))
	p.f("#  atomic_fop (32 bit): %s", flagNames(a.Atomic32.FopFlags, atomicNames))
	p.f("#   atomic_op (64 bit): %s", flagNames(a.Atomic64.OpFlags, atomicNames))
	p.f("#  atomic_fop (64 bit): %s", flagNames(a.Atomic64.FopFlags, atomicNames))
	var conn []string
	if a.Flags&uct.IfaceFlagConnectToIface != 0 {
		conn = append(conn, "to iface")
	}
	if a.Flags&uct.IfaceFlagConnectToEP != 0 {
		conn = append(conn, "to ep")
	}
	p.f("#           connection: %s", listOrNone(conn))
	p.f("#      device priority: %d", a.Priority)
	p.f("#              max eps: %s", size(a.MaxNumEPs))
	p.f("#       device address: %d bytes", a.DeviceAddrLen)
	p.f("#        iface address: %d bytes", a.IfaceAddrLen)
	if a.EPAddrLen > 0 {
		p.f("#           ep address: %d bytes", a.EPAddrLen)
	}
	p.f("#       error handling: %s", flagNames(a.Flags&errhandleFlags, ifaceFlagNames))
	p.f("#                flags: %s", flagNames(a.Flags, ifaceFlagNames))
}

// mbyte is the unit of bandwidths, as ucx_info prints them.
const mbyte = 1 << 20

// latency formats a latency model in nanoseconds.
func latency(l uct.LinearModel) string {
	s := fmt.Sprintf("%.0f nsec", l.C*1e9)
	if l.M != 0 {
		s += fmt.Sprintf(" + %.0f * N", l.M*1e9)
	}
	return s
}

// cost formats a registration cost model.
func cost(l uct.LinearModel) string {
	return fmt.Sprintf("%.0f + %.3f * N nsec", l.C*1e9, l.M*1e9)
}

// limit formats a memory size limit, "unlimited" for the largest values.
func limit(n uint64) string {
	if n >= math.MaxInt64 {
		return "unlimited"
	}
	return size(int(n))
}

// size formats a size or count the way ucx_info does: with a K, M, G or T
// suffix when it is an exact multiple, "unlimited" for the largest values.
func size(n int) string {
	if n >= math.MaxInt32 {
		return "unlimited"
	}
	for _, u := range []struct {
		shift  uint
		suffix string
	}{{40, "T"}, {30, "G"}, {20, "M"}, {10, "K"}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d%s", n>>u.shift, u.suffix)
		}
	}
	return fmt.Sprint(n)
}

// named is a flag bit of a flag family F and its name.
type named[F ~uint64] struct {
	bit  F
	name string
}

// The names of the flags, as ucx_info prints them.
var (
	mdFlagNames = []named[uct.MDFlags]{
		{uct.MDFlagAlloc, "alloc"},
		{uct.MDFlagReg, "reg"},
		{uct.MDFlagNeedMemh, "need_memh"},
		{uct.MDFlagNeedRkey, "need_rkey"},
		{uct.MDFlagAdvise, "advise"},
		{uct.MDFlagFixed, "fixed"},
		{uct.MDFlagRkeyPtr, "rkey_ptr"},
	}
	ifaceFlagNames = []named[uct.IfaceFlags]{
		{uct.IfaceFlagAMShort, "am_short"},
		{uct.IfaceFlagAMBcopy, "am_bcopy"},
		{uct.IfaceFlagAMZcopy, "am_zcopy"},
		{uct.IfaceFlagPending, "pending"},
		{uct.IfaceFlagPutShort, "put_short"},
		{uct.IfaceFlagPutBcopy, "put_bcopy"},
		{uct.IfaceFlagPutZcopy, "put_zcopy"},
		{uct.IfaceFlagGetShort, "get_short"},
		{uct.IfaceFlagGetBcopy, "get_bcopy"},
		{uct.IfaceFlagGetZcopy, "get_zcopy"},
		{uct.IfaceFlagAtomicCPU, "atomic_cpu"},
		{uct.IfaceFlagAtomicDevice, "atomic_device"},
		{uct.IfaceFlagErrhandleShort, "errhandle_short_buf"},
		{uct.IfaceFlagErrhandleBcopy, "errhandle_bcopy_buf"},
		{uct.IfaceFlagErrhandleZcopy, "errhandle_zcopy_buf"},
		{uct.IfaceFlagErrhandleAMID, "errhandle_am_id"},
		{uct.IfaceFlagErrhandleRemoteMem, "errhandle_remote_mem"},
		{uct.IfaceFlagErrhandleBcopyLn, "errhandle_bcopy_len"},
		{uct.IfaceFlagErrhandlePeerDown, "errhandle_peer_failure"},
		{uct.IfaceFlagConnectToIface, "connect_to_iface"},
		{uct.IfaceFlagConnectToEP, "connect_to_ep"},
		{uct.IfaceFlagAMDup, "am_dup"},
		{uct.IfaceFlagCBSync, "cb_sync"},
		{uct.IfaceFlagCBAsync, "cb_async"},
		{uct.IfaceFlagFlushAfterAM, "flush_after_am"},
		{uct.IfaceFlagAMAsyncDelivery, "am_async_delivery"},
	}
	atomicNames = []named[uct.AtomicOpMask]{
		{uct.AtomicOpAdd.OpMask(), "add"},
		{uct.AtomicOpAnd.OpMask(), "and"},
		{uct.AtomicOpOr.OpMask(), "or"},
		{uct.AtomicOpXor.OpMask(), "xor"},
		{uct.AtomicOpSwap.OpMask(), "swap"},
		{uct.AtomicOpCSwap.OpMask(), "cswap"},
	}
)

// errhandleFlags are the error handling flags of an iface.
const errhandleFlags = uct.IfaceFlagErrhandleShort | uct.IfaceFlagErrhandleBcopy | uct.IfaceFlagErrhandleZcopy |
	uct.IfaceFlagErrhandleAMID | uct.IfaceFlagErrhandleRemoteMem | uct.IfaceFlagErrhandleBcopyLn | uct.IfaceFlagErrhandlePeerDown

// flagNames names the bits of flags, in the order of names, and gives the
// bits that have no name in hex; "none" when flags is 0.
func flagNames[F ~uint64](flags F, names []named[F]) string {
	var out []string
	for _, n := range names {
		if flags&n.bit != 0 {
			out = append(out, n.name)
			flags &^= n.bit
		}
	}
	if flags != 0 {
		out = append(out, fmt.Sprintf("%#x", flags))
	}
	return listOrNone(out)
}

// listOrNone joins l with commas, or says "none".
func listOrNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}

// rdmaDevice is an RDMA device of the host.
type rdmaDevice struct {
	name     string
	ports    []string
	netdevs  []string // network devices whose RDMA device it is
	charDevs []string
}

// rdmaDevices lists the RDMA devices of the host; a variable so that tests
// can give devices on hosts that have none.
var rdmaDevices = func() []rdmaDevice {
	names := rdmamap.GetRdmaDeviceList()
	if len(names) == 0 {
		return nil
	}
	// rdmamap maps a network device to its RDMA device; invert that.
	netdevs := map[string][]string{}
	if ifs, err := net.Interfaces(); err == nil {
		for _, ifi := range ifs {
			if r, err := rdmamap.GetRdmaDeviceForNetdevice(ifi.Name); err == nil && r != "" {
				netdevs[r] = append(netdevs[r], ifi.Name)
			}
		}
	}
	var devs []rdmaDevice
	for _, n := range names {
		devs = append(devs, rdmaDevice{name: n, ports: rdmamap.GetPorts(n), netdevs: netdevs[n], charDevs: rdmamap.GetRdmaCharDevices(n)})
	}
	sort.Slice(devs, func(i, j int) bool { return devs[i].name < devs[j].name })
	return devs
}
