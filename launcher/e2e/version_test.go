package e2e_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestOtherVersion runs a program with a goshmem-run built from another
// goshmem (one that speaks version 9 of the bootstrap's messages and says
// it is goshmem v9.9.9-e2e). The job fails at once, and both the PEs and
// goshmem-run name both versions and say what to do, instead of a PE
// saying that goshmem-run is gone.
func TestOtherVersion(t *testing.T) {
	needBinaries(t)
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("skipping: no go command to build goshmem-run of another version with: %v", err)
	}
	const wire = "github.com/goshmem/goshmem/bootstrap/internal/wire"
	other := filepath.Join(t.TempDir(), "goshmem-run")
	build := exec.Command(gocmd, "build", "-o", other, "-ldflags", "-X "+wire+".otherVersion=9 -X "+wire+".otherBuild=v9.9.9-e2e", "../cmd/goshmem-run")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building goshmem-run of another version: %v\n%s", err, out)
	}
	defer func(saved string) { goshmemRun = saved }(goshmemRun)
	goshmemRun = other // a sequential test: no other test runs meanwhile
	r := run(t, nil, "-np", "2", peProgram, "hello")
	if r.code == 0 {
		t.Fatalf("the job passed; %v", r)
	}
	both := "speaks version 5 (goshmem "
	for _, want := range []string{
		// A PE's error, and goshmem-run's line on the PE's end.
		"the launcher (goshmem-run) on host " + hostname(t) + ": is built from another goshmem version than the program: the program " + both,
		"goshmem-run: PE ", "exited with status 1: the program is built from another goshmem version than goshmem-run: the program " + both,
		") of the bootstrap's messages, goshmem-run version 9 (goshmem v9.9.9-e2e): rebuild the program with goshmem-run's goshmem, or install the goshmem-run of the program's goshmem",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q; %v", want, r)
		}
	}
	if strings.Contains(r.stderr, "is gone") {
		t.Errorf("a PE says goshmem-run is gone; %v", r)
	}
	noLeftovers(t)
}
