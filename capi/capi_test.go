package main

// The tests of the C library: they build it (once per run) with cgo,
// compile the C programs of testdata with goshcc, and run them with
// goshmem-run over shared memory and over tcp. They need a C compiler
// (.ci/run installs gcc) and skip, saying so, without one.

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	prefix    string // the installation the tests built
	buildErr  string // why there is none
)

func TestMain(m *testing.M) {
	code := m.Run()
	if prefix != "" {
		os.RemoveAll(prefix)
	}
	os.Exit(code)
}

// install builds the library, goshcc and goshmem-run into a temporary
// prefix, once, and returns it; it skips the test where no C compiler or
// cgo is available.
func install(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if _, err := exec.LookPath("cc"); err != nil {
			buildErr = "no C compiler (cc) on PATH: the C library needs cgo (.ci/run installs gcc)"
			return
		}
		if out, err := exec.Command("go", "env", "CGO_ENABLED").Output(); err != nil || strings.TrimSpace(string(out)) != "1" {
			buildErr = "cgo is disabled (go env CGO_ENABLED is not 1): the C library needs it"
			return
		}
		dir, err := os.MkdirTemp("", "goshmem-capi-")
		if err != nil {
			buildErr = err.Error()
			return
		}
		cmd := exec.Command("sh", "install.sh", "--shared-only", dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			os.RemoveAll(dir)
			buildErr = "install.sh: " + err.Error() + "\n" + string(out)
			return
		}
		prefix = dir
	})
	if prefix == "" {
		if strings.HasPrefix(buildErr, "install.sh") {
			t.Fatal(buildErr)
		}
		t.Skip(buildErr)
	}
	return prefix
}

// strict are the compiler flags of the test programs: a warning of the
// header is an error.
var strict = []string{"-Wall", "-Wextra", "-Werror", "-pedantic", "-O2"}

// compile builds testdata/name.c with goshcc (-std=c11 and strict) and
// returns the program.
func compile(t *testing.T, name string) string {
	t.Helper()
	return compileWith(t, name, name+".c", "goshcc", append([]string{"-std=c11"}, strict...)...)
}

// compileWith builds testdata/src into the program exe with the driver
// (goshcc or goshc++) and flags, once per run, and returns its path.
func compileWith(t *testing.T, exe, src, driver string, flags ...string) string {
	t.Helper()
	p := install(t)
	exe = filepath.Join(p, exe)
	if _, err := os.Stat(exe); err == nil {
		return exe
	}
	args := append(append([]string{}, flags...), "-o", exe, filepath.Join("testdata", src))
	out, err := exec.Command(filepath.Join(p, "bin", driver), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", driver, src, err, out)
	}
	return exe
}

// run runs exe on np PEs with goshmem-run and the environment env.
func run(t *testing.T, exe string, np string, env ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := []string{"-np", np}
	for _, e := range env {
		args = append(args, "-x", e)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(prefix, "bin", "goshmem-run"), append(args, exe)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// TestCPrograms runs the C test programs, each on PEs over shared memory
// and over tcp (where static data is still mapped between the PEs of the
// host, and the heap is reached through the transport).
func TestCPrograms(t *testing.T) {
	for _, tc := range []struct {
		prog, np string
		env      []string
	}{
		{"smoke", "2", nil},
		{"smoke", "3", []string{"UCX_TLS=tcp,self"}},
		{"colls", "3", nil},
		{"colls", "4", []string{"UCX_TLS=tcp,self"}},
		{"generic", "2", nil},
		{"generic", "3", []string{"UCX_TLS=tcp,self"}},
	} {
		t.Run(tc.prog+"/"+tc.np+"/"+strings.Join(tc.env, ","), func(t *testing.T) {
			exe := compile(t, tc.prog)
			out, err := run(t, exe, tc.np, tc.env...)
			if err != nil || !strings.Contains(out, "PASS") {
				t.Fatalf("%s on %s PEs: %v\n%s", tc.prog, tc.np, err, out)
			}
		})
	}
}

// TestCBadPE checks that a put to a PE outside the job ends the job with a
// message that names the PE.
func TestCBadPE(t *testing.T) {
	exe := compile(t, "badpe")
	out, err := run(t, exe, "2")
	if err == nil {
		t.Fatalf("badpe exited 0:\n%s", out)
	}
	if !strings.Contains(out, "PE 7 is not a PE of the job (valid: 0..1)") {
		t.Fatalf("badpe's output does not name PE 7:\n%s", out)
	}
}

// TestCXX compiles a C++ program with shmem.h under -pedantic -Werror
// (no generics there; C linkage) with goshc++, and runs it.
func TestCXX(t *testing.T) {
	if _, err := exec.LookPath("c++"); err != nil {
		t.Skip("no C++ compiler (c++) on PATH")
	}
	exe := compileWith(t, "cxx", "cxx.cc", "goshc++", append([]string{"-std=c++11"}, strict...)...)
	out, err := run(t, exe, "2")
	if err != nil || !strings.Contains(out, "cxx: PASS") {
		t.Fatalf("cxx on 2 PEs: %v\n%s", err, out)
	}
}
