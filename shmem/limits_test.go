package shmem_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/shmem"
	"github.com/goshmem/goshmem/shmemtest"
	"github.com/goshmem/goshmem/symheap"
	"github.com/goshmem/goshmem/ucs"
)

// TestInitRefusesHeapItCannotBack: a heap larger than the memory of the host
// (RAM and swap) fails Init, naming SHMEM_SYMMETRIC_SIZE, instead of
// mapping and dying of SIGBUS when its pages are touched.
func TestInitRefusesHeapItCannotBack(t *testing.T) {
	if shmemtest.IsPE() {
		t.Skip("runs in the test process only")
	}
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		t.Fatal(err)
	}
	total := (uint64(si.Totalram) + uint64(si.Totalswap)) * uint64(si.Unit)
	v := strconv.FormatUint(2*total>>30+1, 10) + "G"
	t.Setenv("SHMEM_SYMMETRIC_SIZE", v)
	err := shmem.Init()
	if err == nil {
		shmem.Finalize()
		t.Fatalf("Init with SHMEM_SYMMETRIC_SIZE=%s, twice the memory of the host, succeeded", v)
	}
	if !errors.Is(err, ucs.ErrNoMemory) || !strings.Contains(err.Error(), "SHMEM_SYMMETRIC_SIZE="+v+" asks for a heap of ") ||
		!strings.Contains(err.Error(), "which is larger than ") {
		t.Errorf("Init with SHMEM_SYMMETRIC_SIZE=%s: %v; want ucs.ErrNoMemory naming the variable and the limit", v, err)
	}
}

// envSmallShm marks the run of this test binary inside a mount namespace
// whose /dev/shm is a tmpfs of 1M (TestInitRefusesHeapBeyondShm).
const envSmallShm = "GOSHMEM_TEST_SMALL_SHM"

// TestInitRefusesHeapBeyondShm: with named segments (UCX_POSIX_USE_SHM_OPEN=y)
// in a /dev/shm of 1M, a heap of 2M fails Init, naming SHMEM_SYMMETRIC_SIZE
// and the free space of /dev/shm, instead of mapping and dying of SIGBUS
// when the pages beyond 1M are touched. The test binary runs again in a
// mount namespace of its own, with a tmpfs of 1M on /dev/shm.
func TestInitRefusesHeapBeyondShm(t *testing.T) {
	if shmemtest.IsPE() {
		t.Skip("runs in the test process only")
	}
	if os.Getenv(envSmallShm) == "" {
		if os.Getuid() != 0 {
			t.Skip("skipping: mounting a small /dev/shm in a mount namespace of its own needs root")
		}
		if _, err := exec.LookPath("unshare"); err != nil {
			t.Skip("skipping: no unshare command to make a mount namespace with a small /dev/shm")
		}
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c",
			`mount -t tmpfs -o size=1m goshmem-test /dev/shm || exit 99; exec "$0" "$@"`, self,
			"-test.run=^TestInitRefusesHeapBeyondShm$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), envSmallShm+"=1")
		out, err := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code == 99 || (err != nil && cmd.ProcessState == nil) {
			t.Skipf("skipping: cannot mount a tmpfs on /dev/shm in a mount namespace (%v):\n%s", err, out)
		}
		if err != nil || !strings.Contains(string(out), "--- PASS: TestInitRefusesHeapBeyondShm") {
			t.Errorf("in a mount namespace with a /dev/shm of 1M: %v\n%s", err, out)
		}
		return
	}
	t.Setenv("UCX_POSIX_USE_SHM_OPEN", "y")
	t.Setenv("UCX_ALLOC_PRIO", "md:posix")
	t.Setenv("SHMEM_SYMMETRIC_SIZE", "2M")
	err := shmem.Init()
	if err == nil {
		shmem.Finalize()
		t.Fatal("Init of a heap of 2M in named segments, with 1M free in /dev/shm, succeeded")
	}
	if !errors.Is(err, ucs.ErrNoMemory) || !strings.Contains(err.Error(), "SHMEM_SYMMETRIC_SIZE=2M asks for a heap of 2097152 bytes") ||
		!strings.Contains(err.Error(), "free in /dev/shm") {
		t.Errorf("Init: %v; want ucs.ErrNoMemory naming SHMEM_SYMMETRIC_SIZE and the free space of /dev/shm", err)
	}
	if leftovers, _ := os.ReadDir("/dev/shm"); len(leftovers) > 0 {
		t.Errorf("/dev/shm holds %d files after the failed Init", len(leftovers))
	}
}

// TestInitMinimumHeapBeforePeers: a PE whose heap is too small for the
// library's own state fails Init with that cause before it reaches any
// peer, even one whose heap differs (with peers reached first, it named
// the mismatch; over tcp, a peer that got further saw it go as a
// connection refused and reported that). PE 0 then exits with status 3, as
// a program whose Init fails does: the peer that waits for it in Init
// learns that it failed.
func TestInitMinimumHeapBeforePeers(t *testing.T) {
	setup := func(t *testing.T) {
		if os.Getenv("GOSHMEM_RANK") == "0" {
			os.Setenv("SHMEM_SYMMETRIC_SIZE", "4K")
		}
	}
	check := func(t *testing.T, out string) {
		if !strings.Contains(out, "[pe 0] PE 0: Init: ") || !strings.Contains(out, "is below the minimum") {
			t.Errorf("PE 0 did not fail Init for its heap of 4K:\n%s", out)
		}
	}
	shmemtest.RunWith(t, shmemtest.Options{NPs: []int{2}, Transports: []shmemtest.Transport{shmemtest.TCP},
		Env: []string{"SHMEM_SYMMETRIC_SIZE=32M"}, NoInit: true, Setup: setup, WantExit: 3, Check: check}, func(t *testing.T) {
		err := shmem.Init()
		if err == nil {
			shmem.Finalize()
			t.Fatal("Init succeeded with a heap of 4K on PE 0")
		}
		if os.Getenv("GOSHMEM_RANK") != "0" {
			return
		}
		if !errors.Is(err, symheap.ErrNoSpace) || !strings.Contains(err.Error(), "is below the minimum") {
			t.Fatalf("Init with a heap of 4K: %v; want the minimum SHMEM_SYMMETRIC_SIZE, wrapping symheap.ErrNoSpace", err)
		}
		fmt.Printf("PE 0: Init: %v\n", err)
		os.Exit(3)
	})
}
