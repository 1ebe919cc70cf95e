package shmem

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync/atomic"

	"github.com/goshmem/goshmem/internal/version"
	"github.com/goshmem/goshmem/ucp"
	"github.com/goshmem/goshmem/ucs"
)

// The version of the OpenSHMEM specification this package implements
// (SHMEM_MAJOR_VERSION, SHMEM_MINOR_VERSION).
const (
	MajorVersion = version.SpecMajor
	MinorVersion = version.SpecMinor
)

// MaxNameLen is the longest name InfoGetName returns, in bytes
// (SHMEM_MAX_NAME_LEN).
const MaxNameLen = 256

// VendorString is the name of this implementation (SHMEM_VENDOR_STRING),
// which InfoGetName returns.
const VendorString = version.Vendor

// InfoGetVersion returns the major and minor version of the OpenSHMEM
// specification this package implements (shmem_info_get_version): 1, 6.
// It may be called before Init.
func InfoGetVersion() (major, minor int) { return MajorVersion, MinorVersion }

// InfoGetName returns the name of this implementation, VendorString, which
// is at most MaxNameLen bytes long (shmem_info_get_name). It may be called
// before Init.
func InfoGetName() string { return VendorString }

// pcontrolLevel is the level Pcontrol set last.
var pcontrolLevel atomic.Int64

func init() { pcontrolLevel.Store(1) }

// Pcontrol sets the profiling level (shmem_pcontrol): 0 disables
// profiling, 1 enables it at the default detail (the level at start), and
// higher levels are for profiling libraries to define. goshmem has no
// profiling interface of its own, so the call only records the level; it
// may be called at any time, before Init too.
func Pcontrol(level int) { pcontrolLevel.Store(int64(level)) }

// envSettings are the environment variables of the specification that
// goshmem reads at Init.
type envSettings struct {
	debug, info, version bool
	barrier              string // GOSHMEM_BARRIER: barrierAuto or barrierNodeAware
}

// The environment variables of the specification, with what they do.
var envVars = []struct{ name, help string }{
	{"SHMEM_SYMMETRIC_SIZE", "size of the symmetric heap of each PE, a number with an optional K, M, G or T suffix (default 256M)"},
	{"SHMEM_DEBUG", "when set, check that every PE makes the same allocation calls in the same order, and make extra argument checks (default off)"},
	{"SHMEM_INFO", "when set, PE 0 prints the library's settings and these variables at Init (default off)"},
	{"SHMEM_VERSION", "when set, PE 0 prints the library's version at Init (default off)"},
}

// envOn reports whether a boolean variable is on: set to anything but
// the empty string, 0, n, no, false or off.
func envOn(name string) bool {
	switch strings.ToLower(strings.TrimSpace(os.Getenv(name))) {
	case "", "0", "n", "no", "false", "off":
		return false
	}
	return true
}

func readEnv() envSettings {
	return envSettings{debug: envOn("SHMEM_DEBUG"), info: envOn("SHMEM_INFO"), version: envOn("SHMEM_VERSION"),
		barrier: cmp.Or(strings.ToLower(strings.TrimSpace(os.Getenv(envBarrier))), barrierAuto)}
}

// check fails for a setting Init cannot take.
func (e envSettings) check() error {
	if e.barrier != barrierAuto && e.barrier != barrierNodeAware {
		return fmt.Errorf("%s=%q: want %s or %s: %w", envBarrier, os.Getenv(envBarrier), barrierAuto, barrierNodeAware, ErrInvalidArgument)
	}
	return nil
}

// printStartup prints what SHMEM_VERSION and SHMEM_INFO ask for (PE 0 only).
func printStartup(w io.Writer) {
	if st.env.version || st.env.info {
		fmt.Fprintf(w, "goshmem: OpenSHMEM version %d.%d, %s\n", MajorVersion, MinorVersion, VendorString)
	}
	if st.env.info {
		printInfo(w)
	}
}

// printInfo prints the settings of the library, as PE 0 sees them.
func printInfo(w io.Writer) {
	fmt.Fprintf(w, "goshmem: SHMEM_INFO\n")
	fmt.Fprintf(w, "  version:         %d.%d\n", MajorVersion, MinorVersion)
	fmt.Fprintf(w, "  name:            %s\n", VendorString)
	fmt.Fprintf(w, "  ucp version:     %s\n", ucp.VersionString())
	fmt.Fprintf(w, "  PEs:             %d (TeamShared of PE %d: %d PEs)\n", st.npes, st.me, teamShared.npes)
	fmt.Fprintf(w, "  symmetric heap:  %d bytes per PE\n", st.heapSize)
	fmt.Fprintf(w, "  thread level:    %v\n", threadLevel)
	fmt.Fprintf(w, "  debug checks:    %v\n", onOff(st.env.debug))
	fmt.Fprintf(w, "  barrier:         %s\n", st.barrier.scheme())
	fmt.Fprintf(w, "  GOMAXPROCS:      %d%s\n", runtime.GOMAXPROCS(0), map[bool]string{false: "", true: " (its share of an oversubscribed node's cores)"}[st.oldProcs != 0 || st.spin == spinOversubscribed])
	fmt.Fprintf(w, "  transports from PE %d:\n", st.me)
	for pe := range st.peers {
		fmt.Fprintf(w, "    PE %d: %s\n", pe, transportsTo(pe))
	}
	fmt.Fprintf(w, "  environment variables:\n")
	for _, v := range envVars {
		val, ok := os.LookupEnv(v.name)
		if !ok {
			val = "(not set)"
		}
		fmt.Fprintf(w, "    %s=%s\n      %s\n", v.name, val, v.help)
	}
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// transportsTo describes how this PE reaches pe: a direct mapping of its
// heap, and the lanes of the default context's endpoint to it, which for
// a PE of another host is made on first use.
func transportsTo(pe int) string {
	q := &st.peers[pe]
	var parts []string
	if q.heap() != nil {
		parts = append(parts, "heap mapped (loads, stores and CPU atomics)")
	} else if q.mapped {
		parts = append(parts, "heap mapped on first use")
	}
	if !q.connected() {
		parts = append(parts, "not connected yet (connected on first use)")
	} else {
		for _, l := range q.ep.Query().Lanes {
			parts = append(parts, fmt.Sprintf("%s/%s for %s", l.Transport, l.Device, l.Usage))
		}
	}
	if len(parts) == 0 {
		return "(unreachable)"
	}
	return strings.Join(parts, "; ")
}

// GlobalExit ends the whole job with exit status code (shmem_global_exit):
// it asks the launcher to end every PE, waiting a few seconds at most for
// the launcher's acknowledgment, and exits this PE with code; goshmem-run
// then exits with code. Outstanding operations are not completed and no
// collective is waited for. In a job of one PE started without the
// launcher it only exits. It does not return.
func GlobalExit(code int) {
	GlobalExitNotify(code)
	os.Exit(code)
}

// GlobalExitNotify is GlobalExit without the exit: it asks the launcher to
// end every PE with exit status code and returns, for a caller that ends
// its process its own way (the C library exits through C's exit, which
// runs the program's atexit handlers and flushes its streams, as
// shmem_global_exit must). A failure to reach the launcher is logged.
func GlobalExitNotify(code int) {
	if m := st.member; m != nil {
		if err := m.GlobalExit(code); err != nil {
			lg().Logf(ucs.LogError, "shmem.GlobalExit(%d): the launcher could not be told: %v", code, err)
		}
	}
}
