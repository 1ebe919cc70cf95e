package ucs

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// BindThread binds the calling goroutine to cpus, for a goroutine that a
// worker or an iface owns and that runs until it ends (UCX's cpu_mask): it
// locks the goroutine to its OS thread, never to unlock it, so that the
// thread exits with the goroutine and the binding reaches no other
// goroutine, and sets the thread's affinity (sched_setaffinity). It
// returns the affinity the thread has afterwards. With no cpus it does
// nothing. CPU numbers of 1024 and more, or negative, are ignored; a mask
// the system refuses (no allowed CPU in it) leaves the thread locked with
// its affinity unchanged, and the error wraps ucs.ErrInvalidParam.
func BindThread(cpus []int) (unix.CPUSet, error) {
	var got unix.CPUSet
	if len(cpus) == 0 {
		return got, nil
	}
	runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
	var set unix.CPUSet
	for _, cpu := range cpus {
		set.Set(cpu)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return got, fmt.Errorf("bind thread to CPUs %v: %v: %w", cpus, err, ErrInvalidParam)
	}
	if err := unix.SchedGetaffinity(0, &got); err != nil {
		return got, fmt.Errorf("bind thread to CPUs %v: %v: %w", cpus, err, ErrIOError)
	}
	return got, nil
}
