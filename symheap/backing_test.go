package symheap

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucs"
)

// TestCheckBacking: a heap larger than the memory that can ever back it (the
// host's RAM and swap, the commit limit under strict overcommit, the
// cgroup's limit, the free space of /dev/shm for a named segment) is
// refused, naming SHMEM_SYMMETRIC_SIZE and the limit; one PE's heap is
// compared with the whole limit, so that 64 PEs of 256M start on 24G.
func TestCheckBacking(t *testing.T) {
	const (
		k = 1 << 10
		m = 1 << 20
		g = 1 << 30
	)
	dir := t.TempDir()
	var shmFree uint64
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	shmFree = st.Bavail * uint64(st.Bsize)
	tests := []struct {
		name       string
		meminfo    string
		overcommit string
		cgroup     string            // /proc/self/cgroup
		files      map[string]string // under the cgroup root
		size       int
		named      bool
		refused    string // "" for accepted
	}{
		{name: "one of 64 PEs of 256M on 24G", meminfo: "MemTotal: 25165824 kB\nSwapTotal: 0 kB\n", size: 256 * m},
		{name: "more than RAM and swap", meminfo: "MemTotal: 1048576 kB\nSwapTotal: 1048576 kB\n", size: 3 * g,
			refused: "is larger than the memory of this host (RAM and swap) of 2147483648 bytes (2.0G)"},
		{name: "RAM and swap", meminfo: "MemTotal: 1048576 kB\nSwapTotal: 1048576 kB\n", size: 2 * g},
		{name: "heuristic overcommit ignores the commit limit", meminfo: "MemTotal: 4194304 kB\nCommitLimit: 262144 kB\n", overcommit: "0", size: g},
		{name: "strict overcommit", meminfo: "MemTotal: 4194304 kB\nCommitLimit: 262144 kB\n", overcommit: "2", size: g,
			refused: "is larger than the commit limit (vm.overcommit_memory=2, CommitLimit in /proc/meminfo) of 268435456 bytes (256.0M)"},
		{name: "cgroup v2, a parent's limit", meminfo: "MemTotal: 4194304 kB\n", cgroup: "0::/a/b\n",
			files: map[string]string{"a/memory.max": "134217728\n", "a/b/memory.max": "max\n", "a/memory.swap.max": "0\n"}, size: 256 * m,
			refused: "/a/memory.max) of 134217728 bytes (128.0M)"},
		{name: "cgroup v2, no limit", meminfo: "MemTotal: 4194304 kB\n", cgroup: "0::/a\n",
			files: map[string]string{"a/memory.max": "max\n"}, size: 256 * m},
		{name: "cgroup v2, swap counts", meminfo: "MemTotal: 4194304 kB\nSwapTotal: 1048576 kB\n", cgroup: "0::/a\n",
			files: map[string]string{"a/memory.max": "134217728\n"}, size: 256 * m},
		{name: "cgroup v1", meminfo: "MemTotal: 4194304 kB\n", cgroup: "4:memory:/job\n3:cpu:/\n",
			files: map[string]string{"memory/job/memory.stat": "cache 0\nhierarchical_memory_limit 67108864\n"}, size: 100 * m,
			refused: "memory.stat hierarchical_memory_limit) of 67108864 bytes (64.0M)"},
		{name: "cgroup v1, unlimited", meminfo: "MemTotal: 4194304 kB\n", cgroup: "4:memory:/job\n",
			files: map[string]string{"memory/job/memory.stat": "hierarchical_memory_limit 9223372036854771712\n"}, size: 100 * m},
		{name: "named, more than /dev/shm has free", meminfo: "MemTotal: 1125899906842624 kB\n", size: int(2 * shmFree), named: true,
			refused: " free in " + dir + ", where its named segment lives (UCX_POSIX_USE_SHM_OPEN=y)"},
		{name: "not named, /dev/shm does not count", meminfo: "MemTotal: 1125899906842624 kB\n", size: int(2 * shmFree)},
		{name: "small", meminfo: "MemTotal: 4 kB\n", size: 8 * k, refused: "of 4096 bytes (4.0K)"},
	}
	saved := []*string{&meminfoPath, &overcommitPath, &cgroupPath, &cgroupRoot, &shmDir}
	old := make([]string, len(saved))
	for i, p := range saved {
		old[i] = *p
	}
	t.Cleanup(func() {
		for i, p := range saved {
			*p = old[i]
		}
	})
	t.Setenv("SHMEM_SYMMETRIC_SIZE", "")
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := filepath.Join(dir, strings.Repeat("x", i+1))
			write := func(name, body string) string {
				path := filepath.Join(root, name)
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
				return path
			}
			meminfoPath = write("meminfo", tt.meminfo)
			overcommitPath = write("overcommit_memory", tt.overcommit+"\n")
			cgroupPath = write("cgroup", tt.cgroup)
			cgroupRoot = filepath.Join(root, "sys")
			for name, body := range tt.files {
				write(filepath.Join("sys", name), body)
			}
			shmDir = dir
			err := checkBacking(tt.size, tt.named)
			switch {
			case tt.refused == "" && err != nil:
				t.Errorf("checkBacking(%d, %v) = %v, want nil", tt.size, tt.named, err)
			case tt.refused != "" && (err == nil || !errors.Is(err, ucs.ErrNoMemory) || !strings.Contains(err.Error(), tt.refused)):
				t.Errorf("checkBacking(%d, %v) = %v, want ucs.ErrNoMemory saying %q", tt.size, tt.named, err, tt.refused)
			}
		})
	}
	// The error names the variable and the size it asks for.
	t.Setenv("SHMEM_SYMMETRIC_SIZE", "3G")
	meminfoPath = filepath.Join(dir, "meminfo")
	if err := os.WriteFile(meminfoPath, []byte("MemTotal: 1048576 kB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cgroupPath = filepath.Join(dir, "none")
	err := checkBacking(3*g, false)
	if want := "symheap: SHMEM_SYMMETRIC_SIZE=3G asks for a heap of 3221225472 bytes (3.0G), which is larger than the memory of this host"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("checkBacking = %v, want %q...", err, want)
	}
	t.Setenv("SHMEM_SYMMETRIC_SIZE", "")
	err = checkBacking(3*g, false)
	if want := "symheap: the heap of 3221225472 bytes (3.0G) (SHMEM_SYMMETRIC_SIZE, not set: the default) is larger than"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("checkBacking = %v, want %q...", err, want)
	}
}
