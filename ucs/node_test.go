package ucs

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// TestRemoveShmSegments checks that RemoveShmSegments removes exactly the
// segment files of one pid, and refuses pids that no process has.
func TestRemoveShmSegments(t *testing.T) {
	if _, err := os.Stat(ShmDir); err != nil {
		t.Skipf("no %s: %v", ShmDir, err)
	}
	const fake = MaxPid - 1 // no process of ours has this pid
	mine := []string{ShmSegmentPath(fake, 1), ShmSegmentPath(fake, 0xfedcba9876543210)}
	keep := []string{
		ShmSegmentPath(fake-1, 1),                                 // another pid
		filepath.Join(ShmDir, "goshmem-"+strconv.Itoa(fake)+"-x"), // not a segment's name
	}
	for _, f := range append(mine, keep...) {
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(f) })
	}
	if err := RemoveShmSegments(fake); err != nil {
		t.Fatal(err)
	}
	for _, f := range mine {
		if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left: %v", f, err)
		}
	}
	for _, f := range keep {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s removed: %v", f, err)
		}
	}
	if err := RemoveShmSegments(fake); err != nil {
		t.Errorf("nothing to remove: %v", err)
	}
	for _, p := range []int{0, -1, MaxPid} {
		if err := RemoveShmSegments(p); !errors.Is(err, ErrInvalidParam) {
			t.Errorf("RemoveShmSegments(%d) = %v, want ErrInvalidParam", p, err)
		}
	}
}

// TestShmDomain checks the shape of the node's names: fixed length, stable
// within a process, and a non-zero loopback id.
func TestShmDomain(t *testing.T) {
	if d := ShmDomain(); len(d) != ShmDomainLen || string(d) != string(ShmDomain()) {
		t.Errorf("ShmDomain() = %x, want %d stable bytes", d, ShmDomainLen)
	}
	if LoopbackHostID() == 0 {
		t.Error("LoopbackHostID() = 0")
	}
}

// TestMachineID: this machine's id is known on Linux (it has a boot id).
func TestMachineID(t *testing.T) {
	if _, err := os.Stat("/proc/sys/kernel/random/boot_id"); err != nil {
		t.Skipf("no boot id here: %v", err)
	}
	if MachineID() == 0 {
		t.Fatal("MachineID() = 0 with a boot id")
	}
	if bootID() == "" {
		t.Error("no boot id read, though the file is there")
	}
}
