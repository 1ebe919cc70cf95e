package launcher

import (
	"fmt"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

// Binding is how PEs are pinned to CPUs, as oshrun's and mpirun's
// --bind-to say it.
type Binding int

const (
	// BindNone leaves the placement of PEs to the kernel (the default).
	BindNone Binding = iota
	// BindCore pins the PE of local rank i on a host to one CPU: the
	// i-th, modulo their number, of the CPUs its agent may run on (so
	// that `taskset -c 2,3 goshmem-run ...` places the PEs of this host on
	// CPUs 2 and 3). With more PEs than CPUs, PEs share CPUs in turn.
	BindCore
)

// ParseBinding reads a --bind-to value: "none" or "core".
func ParseBinding(s string) (Binding, error) {
	switch s {
	case "none", "":
		return BindNone, nil
	case "core":
		return BindCore, nil
	}
	return BindNone, fmt.Errorf("bind-to %q: want none or core", s)
}

// String returns the --bind-to value of b.
func (b Binding) String() string {
	if b == BindCore {
		return "core"
	}
	return "none"
}

// allowedCPUs returns the CPUs this process may run on, in order.
func allowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("the CPUs this process may use: %w", err)
	}
	var cpus []int
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	if len(cpus) == 0 {
		return nil, fmt.Errorf("the CPUs this process may use: none")
	}
	return cpus, nil
}

// startOnCPU starts cmd pinned to cpu. A child inherits the CPU mask of
// the thread that forks it, so the forking thread is pinned for the fork
// and restored after: every thread of the PE, from its runtime's first,
// runs on cpu, which pinning the child after it starts could not promise.
func startOnCPU(cmd *exec.Cmd, cpu int) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return fmt.Errorf("bind to CPU %d: %w", cpu, err)
	}
	one.Set(cpu)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		return fmt.Errorf("bind to CPU %d: %w", cpu, err)
	}
	err := cmd.Start()
	if rerr := unix.SchedSetaffinity(0, &old); rerr != nil {
		// The thread keeps the one CPU: it must not run other goroutines.
		runtime.LockOSThread() // never unlocked: the thread ends with its goroutine
		if err == nil {
			err = fmt.Errorf("restore the CPU mask after binding to CPU %d: %w", cpu, rerr)
		}
	}
	return err
}
