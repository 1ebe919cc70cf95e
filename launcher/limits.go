package launcher

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// threadMarkers are what the Go runtime writes on standard error when it
// cannot create a thread: the process or thread limit was reached.
var threadMarkers = [][]byte{
	[]byte("pthread_create failed"),          // runtime/cgo
	[]byte("failed to create new OS thread"), // the runtime without cgo
}

// crashLines is how many lines of a PE's crash dump are forwarded after the
// runtime said it could not create a thread: the hundreds of goroutine
// stacks that follow would bury what happened.
const crashLines = 20

// threadWatch watches the standard error of a PE for threadMarkers. It is
// used by the goroutine that copies that output, and read once the copy
// ended.
type threadWatch struct {
	hit     bool // a marker was seen
	after   int  // lines forwarded since
	dropped int  // lines not forwarded
}

// line looks at one line of output and says whether to forward it.
func (w *threadWatch) line(b []byte) bool {
	if !w.hit {
		for _, m := range threadMarkers {
			w.hit = w.hit || bytes.Contains(b, m)
		}
		return true
	}
	if w.after < crashLines {
		w.after++
		return true
	}
	w.dropped++
	return false
}

// threadLimitHint says what limits a process that cannot create a thread
// or a process may have reached, and what to do.
func threadLimitHint() string {
	var limits []string
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NPROC, &rl) == nil {
		v := "unlimited"
		if rl.Cur != unix.RLIM_INFINITY {
			v = strconv.FormatUint(rl.Cur, 10)
		}
		limits = append(limits, "the processes and threads of the user (ulimit -u: "+v+")")
	}
	if max := cgroupPidsMax(); max != "" {
		limits = append(limits, "those of the cgroup (pids.max: "+max+")")
	}
	if b, err := os.ReadFile("/proc/sys/kernel/threads-max"); err == nil {
		limits = append(limits, "those of the system (kernel.threads-max: "+strings.TrimSpace(string(b))+")")
	}
	return "a limit on processes and threads was reached: " + strings.Join(limits, ", ") +
		"; raise it, or start fewer PEs per host"
}

// cgroupPidsMax returns the pids.max of this process's cgroup (v2, or the
// v1 pids controller), or "" when there is none or it is "max".
func cgroupPidsMax() string {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	defer f.Close()
	for s := bufio.NewScanner(f); s.Scan(); {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(s.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		var file string
		switch {
		case parts[1] == "pids":
			file = filepath.Join("/sys/fs/cgroup/pids", parts[2], "pids.max")
		case parts[0] == "0" && parts[1] == "":
			file = filepath.Join("/sys/fs/cgroup", parts[2], "pids.max")
		default:
			continue
		}
		if b, err := os.ReadFile(file); err == nil {
			if v := strings.TrimSpace(string(b)); v != "max" {
				return v
			}
		}
	}
	return ""
}

// startError explains an error starting a process: EAGAIN from fork means
// that a limit on processes was reached.
func startError(err error) error {
	if errors.Is(err, syscall.EAGAIN) {
		return fmt.Errorf("%w (%s)", err, threadLimitHint())
	}
	return err
}
