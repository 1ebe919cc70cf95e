package symheap

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucs"
)

// Where checkBacking reads the limits (variables for the tests).
var (
	meminfoPath    = "/proc/meminfo"
	overcommitPath = "/proc/sys/vm/overcommit_memory"
	cgroupPath     = "/proc/self/cgroup"
	cgroupRoot     = "/sys/fs/cgroup"
	shmDir         = "/dev/shm" // where named segments (UCX_POSIX_USE_SHM_OPEN=y) live
)

// checkBacking fails, with an error that wraps ucs.ErrNoMemory, when a heap
// of size bytes is larger than the memory it can ever be backed by: it would
// map, and the PE die of SIGBUS (or the OOM killer) once its pages are
// touched. The memory is the host's RAM and swap, or less: the commit limit
// under strict overcommit (vm.overcommit_memory=2, /proc/meminfo
// CommitLimit), and the memory limit (with swap) of the process's cgroup (v2
// memory.max and memory.swap.max, the least along its path; v1
// hierarchical_memory_limit or hierarchical_memsw_limit); when named (the
// heap is a file in /dev/shm, UCX_POSIX_USE_SHM_OPEN=y), also the free space
// of /dev/shm.
//
// Each PE's heap is compared with the whole limit, not the sum of the heaps
// of the PEs that share it: a heap's pages cost nothing until touched, and
// programs rarely fill their heaps, so 64 PEs of 256M on a host of 24G
// start (16G of heaps that are mostly never touched), while a heap that not
// even one PE could fill is refused.
func checkBacking(size int, named bool) error {
	n := uint64(size)
	if named {
		var st unix.Statfs_t
		if err := unix.Statfs(shmDir, &st); err == nil {
			if free := st.Bavail * uint64(st.Bsize); n > free {
				return backingError(n, fmt.Sprintf("the %s free in %s, where its named segment lives (UCX_POSIX_USE_SHM_OPEN=y): make %s larger, or the heap smaller",
					sizeText(free), shmDir, shmDir))
			}
		}
	}
	if limit, what := memoryLimit(); n > limit {
		return backingError(n, fmt.Sprintf("%s of %s", what, sizeText(limit)))
	}
	return nil
}

func backingError(size uint64, what string) error {
	asked := "the heap of " + sizeText(size) + " (SHMEM_SYMMETRIC_SIZE, not set: the default)"
	if v := os.Getenv("SHMEM_SYMMETRIC_SIZE"); v != "" {
		asked = "SHMEM_SYMMETRIC_SIZE=" + v + " asks for a heap of " + sizeText(size) + ", which"
	}
	return fmt.Errorf("symheap: %s is larger than %s: %w", asked, what, ucs.ErrNoMemory)
}

// memoryLimit returns the most memory a heap can ever be backed by, and
// what that is (see checkBacking).
func memoryLimit() (uint64, string) {
	info := meminfo()
	limit, what := uint64(math.MaxUint64), ""
	if total, ok := info["MemTotal"]; ok {
		limit, what = total+info["SwapTotal"], "the memory of this host (RAM and swap)"
	}
	if b, err := os.ReadFile(overcommitPath); err == nil && strings.TrimSpace(string(b)) == "2" {
		if c, ok := info["CommitLimit"]; ok && c < limit {
			limit, what = c, "the commit limit (vm.overcommit_memory=2, CommitLimit in /proc/meminfo)"
		}
	}
	if c, file := cgroupMemoryLimit(info["SwapTotal"]); c < limit {
		limit, what = c, "the memory limit of this process's cgroup ("+file+")"
	}
	return limit, what
}

// meminfo returns the fields of /proc/meminfo, in bytes.
func meminfo() map[string]uint64 {
	m := make(map[string]uint64)
	b, err := os.ReadFile(meminfoPath)
	if err != nil {
		return m
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		f := strings.Fields(rest)
		if !ok || len(f) == 0 {
			continue
		}
		v, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			continue
		}
		if len(f) > 1 && f[1] == "kB" {
			v <<= 10
		}
		m[name] = v
	}
	return m
}

// cgroupMemoryLimit returns the memory (with the swap it may use, of the
// swap the host has) that this process's cgroup allows, and the file that
// says so; math.MaxUint64 when none limits it.
func cgroupMemoryLimit(swap uint64) (uint64, string) {
	f, err := os.Open(cgroupPath)
	if err != nil {
		return math.MaxUint64, ""
	}
	defer f.Close()
	for s := bufio.NewScanner(f); s.Scan(); {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(s.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			if limit, file := cgroup2MemoryLimit(parts[2], swap); file != "" {
				return limit, file
			}
		case slices.Contains(strings.Split(parts[1], ","), "memory"):
			if limit, file := cgroup1MemoryLimit(parts[2], swap); file != "" {
				return limit, file
			}
		}
	}
	return math.MaxUint64, ""
}

// cgroup2MemoryLimit returns the least memory.max along the cgroup v2 path
// from the process's cgroup to the root, plus the least memory.swap.max
// (at most swap), and the memory.max file that set it; "" when no
// memory.max limits it.
func cgroup2MemoryLimit(path string, swap uint64) (uint64, string) {
	mem, memFile, swapMax := uint64(math.MaxUint64), "", swap
	for dir := filepath.Join(cgroupRoot, path); strings.HasPrefix(dir, cgroupRoot); dir = filepath.Dir(dir) {
		if v, ok := readLimit(filepath.Join(dir, "memory.max")); ok && v < mem {
			mem, memFile = v, filepath.Join(dir, "memory.max")
		}
		if v, ok := readLimit(filepath.Join(dir, "memory.swap.max")); ok && v < swapMax {
			swapMax = v
		}
		if dir == cgroupRoot {
			break
		}
	}
	if memFile == "" {
		return math.MaxUint64, ""
	}
	return mem + swapMax, memFile
}

// cgroup1MemoryLimit returns the limit that memory.stat of the process's
// cgroup v1 memory controller gives for its whole hierarchy: memory and
// swap together when the kernel accounts swap, else the memory limit plus
// swap; "" when there is none. A cgroup namespace mounts the process's own
// cgroup at the root: the path is tried, then the root.
func cgroup1MemoryLimit(path string, swap uint64) (uint64, string) {
	for _, dir := range []string{filepath.Join(cgroupRoot, "memory", path), filepath.Join(cgroupRoot, "memory")} {
		file := filepath.Join(dir, "memory.stat")
		b, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		stat := make(map[string]uint64)
		for _, line := range bytes.Split(b, []byte("\n")) {
			if name, v, ok := bytes.Cut(line, []byte(" ")); ok {
				if n, err := strconv.ParseUint(string(v), 10, 64); err == nil {
					stat[string(name)] = n
				}
			}
		}
		const unlimited = math.MaxInt64 &^ 4095 // PAGE_COUNTER_MAX pages, as v1 shows no limit
		if v, ok := stat["hierarchical_memsw_limit"]; ok && v < unlimited {
			return v, file + " hierarchical_memsw_limit"
		}
		if v, ok := stat["hierarchical_memory_limit"]; ok && v < unlimited {
			return v + swap, file + " hierarchical_memory_limit"
		}
		return math.MaxUint64, ""
	}
	return math.MaxUint64, ""
}

// readLimit reads a cgroup v2 limit file: a number, or "max" (no limit,
// ok false).
func readLimit(file string) (uint64, bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return v, err == nil
}

// sizeText writes n bytes as a number of bytes and, from 1K, its value in
// the largest binary unit that is at most n, with one decimal: "1048576
// bytes (1.0M)".
func sizeText(n uint64) string {
	s := strconv.FormatUint(n, 10) + " bytes"
	units := "KMGTPE"
	for i := len(units); i > 0; i-- {
		if u := uint64(1) << (10 * i); n >= u {
			return fmt.Sprintf("%s (%.1f%c)", s, float64(n)/float64(u), units[i-1])
		}
	}
	return s
}
