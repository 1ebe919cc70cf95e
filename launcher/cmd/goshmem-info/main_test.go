package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/Mellanox/rdmamap"

	"github.com/goshmem/goshmem/bootstrap"
	goversion "github.com/goshmem/goshmem/internal/version"
	"github.com/goshmem/goshmem/shmem"
	"github.com/goshmem/goshmem/ucp"
	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// info runs goshmem-info with args and returns its status and outputs.
func info(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// mustInfo runs goshmem-info with args, which must succeed, and returns
// its output.
func mustInfo(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errs := info(t, args...)
	if code != 0 || errs != "" {
		t.Fatalf("goshmem-info %q = %d, stderr %q", args, code, errs)
	}
	return out
}

// contains fails t for every one of wants that out lacks.
func contains(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q; output:\n%s", w, out)
		}
	}
}

func TestVersion(t *testing.T) {
	out := mustInfo(t, "-v")
	contains(t, out, "# UCP library version: "+ucp.VersionString()+"\n", "# Go version: "+runtime.Version()+"\n",
		"# Module: "+goversion.ModulePath+" ", "# VCS revision: ")
}

func TestDevices(t *testing.T) {
	out := mustInfo(t, "-d")
	// Every registered resource, with its MD, named flags and limits.
	for _, comp := range uct.Components() {
		mds, err := comp.MDResources()
		if err != nil {
			t.Fatal(err)
		}
		for _, mdr := range mds {
			contains(t, out, "# Memory domain: "+mdr.Name+"\n#     Component: "+comp.Name()+"\n")
			md, err := comp.OpenMD(mdr.Name, nil)
			if err != nil {
				t.Fatal(err)
			}
			tls, err := md.TLResources()
			md.Close()
			if err != nil {
				t.Fatal(err)
			}
			for _, tl := range tls {
				contains(t, out, "#      Transport: "+tl.TLName+"\n#         Device: "+tl.DevName+"\n#           Type: "+tl.DevType.String()+"\n")
			}
		}
	}
	// self and posix are always there (ucp imports them).
	contains(t, out,
		"# Memory domain: self\n", "#      Transport: self\n#         Device: memory0\n#           Type: loopback\n",
		"# Memory domain: posix\n", "#      Transport: posix\n#         Device: memory\n#           Type: intra-node\n",
		"#         memory flags: alloc, need_rkey, fixed, rkey_ptr\n",
		"#            put_short: <= 8K\n", "#  atomic_fop (64 bit): add, and, or, xor, swap, cswap\n",
		"connect_to_iface", "#       device address: 8 bytes\n", "#        iface address: 32 bytes\n",
		"#            bandwidth: ", "#              latency: ", "#             overhead: ", "#      device priority: ")
	// The RDMA devices of this host, or the line that says there are none.
	if devs := rdmamap.GetRdmaDeviceList(); len(devs) == 0 {
		contains(t, out, "# RDMA devices: none\n")
	} else {
		for _, d := range devs {
			contains(t, out, "#   RDMA device: "+d+"\n")
		}
	}
}

func TestDevicesRDMA(t *testing.T) {
	saved := rdmaDevices
	t.Cleanup(func() { rdmaDevices = saved })
	rdmaDevices = func() []rdmaDevice {
		return []rdmaDevice{{name: "mlx5_0", ports: []string{"1"}, netdevs: []string{"ens1f0"}, charDevs: []string{"/dev/infiniband/uverbs0"}}, {name: "mlx5_1"}}
	}
	out := mustInfo(t, "-d")
	contains(t, out, "# RDMA devices: 2\n", "#   RDMA device: mlx5_0\n", "#         ports: 1\n",
		"#   net devices: ens1f0\n", "#  char devices: /dev/infiniband/uverbs0\n",
		"#   RDMA device: mlx5_1\n", "#   net devices: none\n")
	if strings.Contains(out, "RDMA devices: none") {
		t.Errorf("output says there are no RDMA devices:\n%s", out)
	}
}

func TestConfig(t *testing.T) {
	t.Setenv("UCX_TLS", "posix,self")
	t.Setenv("UCX_POSIX_SEG_SIZE", "4k")
	out := mustInfo(t, "-c")
	for _, f := range ucp.ConfigTable() {
		contains(t, out, "# default: "+f.Default+"\nUCX_"+f.Name+"=")
	}
	contains(t, out, "# UCP context\n", "# default: all\nUCX_TLS=posix,self\n", "UCX_NET_DEVICES=all\n")
	// The iface variables of self and posix, read as ucp reads them.
	for _, name := range []string{"self", "posix"} {
		comp, err := uct.LookupComponent(name)
		if err != nil {
			t.Fatal(err)
		}
		md, err := comp.OpenMD(name, nil)
		if err != nil {
			t.Fatal(err)
		}
		contains(t, out, "# Transport "+name+"\n")
		prefix := ucp.ComponentEnvPrefix("", name)
		cfg := ucs.ReadConfig(prefix, md.IfaceConfigTable())
		for _, f := range cfg.Fields() {
			contains(t, out, "# "+f.Doc+"\n# default: "+f.Default+"\n"+prefix+f.Name+"="+cfg.Get(f.Name)+"\n")
		}
		md.Close()
	}
	// Each transport's settings under its own prefix, as ucp reads them.
	contains(t, out, "UCX_POSIX_SEG_SIZE=4k\n", "UCX_SELF_SEG_SIZE=", "UCX_SELF_AM_QUEUE_LEN=", "UCX_POSIX_FIFO_SIZE=")
	if strings.Contains(out, "UCX_SELF_SEG_SIZE=4k") {
		t.Error("UCX_POSIX_SEG_SIZE reached self's settings")
	}
}

func TestBuild(t *testing.T) {
	out := mustInfo(t, "-b")
	race := "no"
	if raceEnabled {
		race = "yes"
	}
	contains(t, out, "# GOOS/GOARCH: "+runtime.GOOS+"/"+runtime.GOARCH+"\n", "# CGO_ENABLED: ",
		"# Race detector (-race): "+race+"\n", "# Build tags (-tags): ", "# Go version: "+runtime.Version()+"\n")
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{{"-x"}, {"-v", "extra"}, {"-d=maybe"}, {"--c", "-bogus"}} {
		code, out, errs := info(t, args...)
		if code != 2 || out != "" || !strings.Contains(errs, "usage: goshmem-info") {
			t.Errorf("goshmem-info %q = %d, stdout %q, stderr %q; want 2, no output and the usage", args, code, out, errs)
		}
	}
}

// TestEveryFlagCombination runs every non-empty combination of the flags:
// each exits 0 and prints the sections asked for, in the documented order,
// and the facts that several sections give once.
func TestEveryFlagCombination(t *testing.T) {
	flags := []struct{ flag, marker string }{
		{"-s", "# OpenSHMEM version: "},
		{"-v", "# Module: "},
		{"-d", "# Memory domain: "},
		{"-c", "UCX_TLS="},
		{"-b", "# GOOS/GOARCH: "},
	}
	for mask := 1; mask < 1<<len(flags); mask++ {
		var args []string
		for i, f := range flags {
			if mask&(1<<i) != 0 {
				args = append(args, f.flag)
			}
		}
		// Reverse the order given: the sections keep theirs.
		for i, j := 0, len(args)-1; i < j; i, j = i+1, j-1 {
			args[i], args[j] = args[j], args[i]
		}
		out := mustInfo(t, args...)
		last := -1
		for i, f := range flags {
			at := strings.Index(out, f.marker)
			if (mask&(1<<i) != 0) != (at >= 0) {
				t.Errorf("goshmem-info %q: section %s present=%v", args, f.flag, at >= 0)
				continue
			}
			if at >= 0 {
				if at < last {
					t.Errorf("goshmem-info %q: section %s out of order", args, f.flag)
				}
				last = at
			}
		}
		for _, fact := range []string{"# Go version: ", "# VCS revision: ", "# UCP library version: "} {
			if n := strings.Count(out, "\n"+fact); n > 1 {
				t.Errorf("goshmem-info %q prints %q %d times:\n%s", args, fact, n, out)
			}
		}
	}
}

// failWriter fails every write.
type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriteError(t *testing.T) {
	var errb bytes.Buffer
	if code := run([]string{"-v"}, failWriter{}, &errb); code != 1 || !strings.Contains(errb.String(), "disk full") {
		t.Errorf("goshmem-info -v to a failing writer = %d, stderr %q; want 1 and the error", code, errb.String())
	}
}

// TestSummary: with no flag, or -s, goshmem-info prints the summary, as
// oshmem_info does.
func TestSummary(t *testing.T) {
	t.Setenv("SHMEM_SYMMETRIC_SIZE", "64M")
	for _, args := range [][]string{nil, {"-s"}} {
		out := mustInfo(t, args...)
		major, minor := shmem.InfoGetVersion()
		contains(t, out, "# Package: "+goversion.ModulePath+" ", fmt.Sprintf("# OpenSHMEM version: %d.%d\n", major, minor),
			"# OpenSHMEM name: "+shmem.InfoGetName()+"\n", "# UCP library version: "+ucp.VersionString()+"\n",
			"# Go version: "+runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH+"\n",
			"# Thread support: ThreadSingle, ThreadFunneled, ThreadSerialized, ThreadMultiple\n",
			"self/memory0", "posix/memory", "# Symmetric heap per PE: 64M\n", "# Launcher: goshmem-run")
		if strings.Contains(out, "# Memory domain: ") || strings.Contains(out, "UCX_") {
			t.Errorf("goshmem-info %q prints more than the summary:\n%s", args, out)
		}
	}
}

// TestHelp: -help and --help print the usage on stdout and exit 0.
func TestHelp(t *testing.T) {
	for _, arg := range []string{"-help", "--help", "-h"} {
		code, out, errs := info(t, arg)
		if code != 0 || !strings.HasPrefix(out, "usage: goshmem-info") || errs != "" {
			t.Errorf("goshmem-info %s = %d, stdout %q, stderr %q; want 0 and the usage on stdout", arg, code, out, errs)
		}
	}
}

// TestConfigShmemVariables: -c lists the SHMEM_* and GOSHMEM_* variables
// before the UCX_* ones, with their values, and does not show the job key.
func TestConfigShmemVariables(t *testing.T) {
	t.Setenv("SHMEM_DEBUG", "1")
	t.Setenv("GOSHMEM_STALL_REPORT", "30s")
	t.Setenv("GOSHMEM_KEY", "c2VjcmV0c2VjcmV0c2VjcmV0")
	os.Unsetenv("SHMEM_INFO") // t.Setenv above restores the environment
	out := mustInfo(t, "-c")
	for _, v := range shmem.EnvVars() {
		contains(t, out, "# "+v.Doc+"\n")
	}
	contains(t, out, "# OpenSHMEM and goshmem\n", "SHMEM_DEBUG=1\n", "GOSHMEM_STALL_REPORT=30s\n", "# SHMEM_INFO is not set\n",
		"# GOSHMEM_KEY is set (not shown: it is the job's secret)\n", "# GOSHMEM_PROFILE", "# SHMEM_SYMMETRIC_SIZE")
	if strings.Contains(out, "c2VjcmV0") {
		t.Error("goshmem-info -c shows the job key")
	}
	if shm, ucx := strings.Index(out, "SHMEM_DEBUG=1"), strings.Index(out, "UCX_TLS="); shm < 0 || ucx < shm {
		t.Errorf("the SHMEM_* variables do not come before the UCX_* ones:\n%s", out)
	}
}

// TestDevicesFlagNames: every flag of every memory domain and transport
// prints by name, none in hex.
func TestDevicesFlagNames(t *testing.T) {
	out := mustInfo(t, "-d")
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "0x") {
			t.Errorf("a flag without a name: %q", line)
		}
	}
}

// TestConfigFailureTimeoutDefault: -c states the failure timeout's default
// as the one goshmem-run and the launcher use, bootstrap's.
func TestConfigFailureTimeoutDefault(t *testing.T) {
	t.Setenv(bootstrap.EnvFailureTimeout, "")
	os.Unsetenv(bootstrap.EnvFailureTimeout) // t.Setenv restores it
	out := mustInfo(t, "-c")
	i := strings.Index(out, "\n# "+bootstrap.EnvFailureTimeout+" is not set\n")
	if i < 0 {
		t.Fatalf("-c has no line for %s:\n%s", bootstrap.EnvFailureTimeout, out)
	}
	doc := out[strings.LastIndex(out[:i], "\n")+1 : i]
	if want := "(default " + bootstrap.DefaultFailureTimeout.String() + ";"; !strings.Contains(doc, want) {
		t.Errorf("-c documents %s as %q; want it to say %q", bootstrap.EnvFailureTimeout, doc, want)
	}
}
