package launcher

import (
	"bufio"
	"bytes"
	"debug/buildinfo"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// threadMarkers start the line with which the Go runtime says on standard
// error that it cannot create a thread (the process or thread limit was
// reached), before it dies with a crash dump of hundreds of lines.
var threadMarkers = [][]byte{
	[]byte("runtime/cgo: pthread_create failed"),      // runtime/cgo
	[]byte("runtime: failed to create new OS thread"), // the runtime without cgo
}

// threadWatch watches the standard error of a process goshmem started (a PE,
// or an agent) for threadMarkers: from the marker on, the output is the
// runtime's crash dump, which is not forwarded; one line naming the limits
// to raise stands for it. It is used by the goroutine that copies that
// output, and read once the copy ended.
type threadWatch struct {
	who  string        // "PE 3", "the agent for host h2"
	hint func() string // the limits to raise (threadLimitHint, remoteThreadLimitHint)
	hit  bool          // a marker was seen: the rest is the dump
}

// line looks at one line of output (or the first piece of an overlong
// one) and returns what to forward instead: the line itself, the line
// that stands for the crash dump, or nil for a line of the dump.
func (w *threadWatch) line(b []byte) []byte {
	if w.hit {
		return nil
	}
	if !hasAnyPrefix(b, threadMarkers) {
		return b
	}
	w.hit = true
	return []byte("goshmem-run: " + w.who + " could not create a thread, " + w.hint() +
		" (its runtime's crash dump is not shown)\n")
}

// threadLimitHint says what limits of this host a process that cannot
// create a thread or a process may have reached, and what to do.
func threadLimitHint() string {
	limits := []string{"the processes and threads of the user (ulimit -u: " + rlimitText(unix.RLIMIT_NPROC) + ")"}
	if max, _ := cgroupPids(); max >= 0 {
		limits = append(limits, "those of the cgroup (pids.max: "+strconv.FormatInt(max, 10)+")")
	}
	if b, err := os.ReadFile("/proc/sys/kernel/threads-max"); err == nil {
		limits = append(limits, "those of the system (kernel.threads-max: "+strings.TrimSpace(string(b))+")")
	}
	return "a limit on processes and threads was reached: " + strings.Join(limits, ", ") +
		"; raise it, or start fewer PEs per host"
}

// remoteThreadLimitHint is threadLimitHint for a process on another host,
// whose limits cannot be read from here.
func remoteThreadLimitHint(host string) func() string {
	return func() string {
		return "a limit on processes and threads of host " + host +
			" was reached (ulimit -u, the cgroup's pids.max or kernel.threads-max there); raise it, or start fewer PEs per host"
	}
}

// rlimitText writes the soft limit on resource res of this process as
// ulimit does, or "?" when it cannot be read.
func rlimitText(res int) string {
	var rl unix.Rlimit
	switch {
	case unix.Getrlimit(res, &rl) != nil:
		return "?"
	case rl.Cur == unix.RLIM_INFINITY:
		return "unlimited"
	}
	return strconv.FormatUint(rl.Cur, 10)
}

// cgroupPids returns the pids.max and pids.current of this process's
// cgroup (v2, or the v1 pids controller); max is -1 when there is none or
// it is "max".
func cgroupPids() (max, current int64) {
	max, current = -1, 0
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return
	}
	defer f.Close()
	for s := bufio.NewScanner(f); s.Scan(); {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(s.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		var dir string
		switch {
		case parts[1] == "pids":
			dir = filepath.Join("/sys/fs/cgroup/pids", parts[2])
		case parts[0] == "0" && parts[1] == "":
			dir = filepath.Join("/sys/fs/cgroup", parts[2])
		default:
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, "pids.max"))
		if err != nil {
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil { // "max"
			continue
		}
		max = v
		if b, err := os.ReadFile(filepath.Join(dir, "pids.current")); err == nil {
			current, _ = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		}
		return
	}
	return
}

// exitNoResources is the exit status of a job whose PEs (or agents) could
// not be started for lack of resources: a limit on processes, threads or
// open files, or memory (EX_OSERR of sysexits.h, "can't fork"). A program
// that cannot be started for another reason (not found) gives 127.
const exitNoResources = 71

// startStatus is the exit status that stands for err, an error starting a
// process: exitNoResources for a lack of resources, else 127.
func startStatus(err error) int {
	for _, e := range []error{syscall.EAGAIN, syscall.EMFILE, syscall.ENFILE, syscall.ENOMEM} {
		if errors.Is(err, e) {
			return exitNoResources
		}
	}
	return 127
}

// startError explains an error starting a process (fork, exec, or a pipe
// or socket for it) that a limit caused: it names the limit to raise.
func startError(err error) error {
	switch {
	case errors.Is(err, syscall.EAGAIN):
		return fmt.Errorf("%w (%s)", err, threadLimitHint())
	case errors.Is(err, syscall.EMFILE):
		return fmt.Errorf("%w (a limit on open files was reached: those of a process (ulimit -n: %s); raise it, or start fewer PEs per host)",
			err, rlimitText(unix.RLIMIT_NOFILE))
	case errors.Is(err, syscall.ENFILE):
		v := "?"
		if b, err := os.ReadFile("/proc/sys/fs/file-max"); err == nil {
			v = strings.TrimSpace(string(b))
		}
		return fmt.Errorf("%w (a limit on open files was reached: those of the system (fs.file-max: %s); raise it, or start fewer PEs per host)", err, v)
	case errors.Is(err, syscall.ENOMEM):
		return fmt.Errorf("%w (out of memory: the address space of a process (ulimit -v: %s) or the memory of the host; raise it, or start fewer PEs per host)",
			err, rlimitText(unix.RLIMIT_AS))
	}
	return err
}

// Threads that a process takes at least, which checkProcessRoom counts: a
// Go runtime has its main thread and sysmon, and another thread takes its
// processor while one blocks in a system call, which every PE does as it
// joins the job (a PE of examples/hello has 7 or 8 threads once it runs);
// any other program is one process at least. An agent, and the launcher
// starting PEs itself, have a thread waiting for each PE (os/exec's Wait
// blocks in waitid).
const (
	goThreadsMin    = 3
	otherThreadsMin = 1
	waitThreads     = 1
)

// checkProcessRoom fails when starting pes PEs of program on this host,
// and agents agent processes for them, would take more processes and
// threads than the user's limit (RLIMIT_NPROC, ulimit -u) or this
// process's cgroup (pids.max) has left: they would die as their runtimes
// fail to create threads, as would this process. It counts what they take
// at least (goThreadsMin and the like), so that it refuses only jobs
// that cannot start; one that passes may still reach the limit later.
// RLIMIT_NPROC is not checked for a user the kernel exempts from it (root,
// CAP_SYS_RESOURCE, CAP_SYS_ADMIN). The error wraps syscall.EAGAIN, the
// error fork returns at the limit (startStatus gives exitNoResources).
func checkProcessRoom(pes int, program string, agents int) error {
	var rl unix.Rlimit
	nproc := unix.Getrlimit(unix.RLIMIT_NPROC, &rl) == nil && rl.Cur != unix.RLIM_INFINITY && !nprocExempt()
	max, current := cgroupPids()
	if pes <= 0 || (!nproc && max < 0) {
		return nil // the usual case: nothing to count
	}
	per := otherThreadsMin
	if isGoProgram(program) {
		per = goThreadsMin
	}
	need := int64(pes*(per+waitThreads) + agents*goThreadsMin)
	what := fmt.Sprintf("%d PE(s) of %s", pes, program)
	if agents > 0 {
		what += " and their agent"
	}
	if nproc {
		uid := os.Getuid()
		if used := userTasks(uid); used+need > int64(rl.Cur) {
			return fmt.Errorf("%s take at least %d processes and threads, and user %d has %d of the %d that ulimit -u allows: raise it, or start fewer PEs per host (%w)",
				what, need, uid, used, rl.Cur, syscall.EAGAIN)
		}
	}
	if max >= 0 && current+need > max {
		return fmt.Errorf("%s take at least %d processes and threads, and the cgroup has %d of the %d that its pids.max allows: raise it, or start fewer PEs per host (%w)",
			what, need, current, max, syscall.EAGAIN)
	}
	return nil
}

// isGoProgram reports whether program (a path, or a name in PATH) is a
// binary that the Go toolchain built.
func isGoProgram(program string) bool {
	path, err := exec.LookPath(program)
	if err != nil {
		return false
	}
	_, err = buildinfo.ReadFile(path)
	return err == nil
}

// nprocExempt reports whether the kernel lets this process create
// processes and threads past RLIMIT_NPROC: its real user is root, or it has
// CAP_SYS_RESOURCE or CAP_SYS_ADMIN.
func nprocExempt() bool {
	if os.Getuid() == 0 {
		return true
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if unix.Capget(&hdr, &data[0]) != nil {
		return false
	}
	has := func(c uint) bool { return data[c/32].Effective&(1<<(c%32)) != 0 }
	return has(unix.CAP_SYS_RESOURCE) || has(unix.CAP_SYS_ADMIN)
}

// userTasks counts the threads of the processes whose real user is uid,
// which RLIMIT_NPROC limits (those this process can see in /proc).
func userTasks(uid int) int64 {
	dir, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	want := []byte("Uid:\t" + strconv.Itoa(uid) + "\t")
	var n int64
	for _, e := range dir {
		if c := e.Name()[0]; c < '0' || c > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil || !bytes.Contains(b, want) {
			continue
		}
		if i := bytes.Index(b, []byte("\nThreads:\t")); i >= 0 {
			rest := b[i+len("\nThreads:\t"):]
			if j := bytes.IndexByte(rest, '\n'); j >= 0 {
				v, _ := strconv.ParseInt(string(rest[:j]), 10, 64)
				n += v
			}
		}
	}
	return n
}
