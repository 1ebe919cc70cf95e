package main

// The tests of the C library: they build it (once per run) with cgo,
// compile the C programs of testdata with goshcc, and run them with
// goshmem-run over shared memory and over tcp. They need a C compiler
// (.ci/run installs gcc) and skip, saying so, without one.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/nstest"
	"github.com/goshmem/goshmem/shmem"
)

var (
	buildOnce sync.Once
	prefix    string // the installation the tests built
	buildErr  string // why there is none
)

func TestMain(m *testing.M) {
	if os.Getenv("GOSHMEM_CAPI_GO_PE") != "" {
		os.Exit(goPE())
	}
	code := m.Run()
	if prefix != "" {
		os.RemoveAll(prefix)
	}
	os.Exit(code)
}

// install builds the libraries (shared and static), goshcc and
// goshmem-run into a temporary prefix, once, and returns it; it skips the test where no C compiler or
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
		cmd := exec.Command("sh", "install.sh", dir)
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

// run runs exe with the arguments progArgs on np PEs with goshmem-run
// and the environment env (NAME=VALUE each).
func run(t *testing.T, exe string, np string, env []string, progArgs ...string) (string, error) {
	t.Helper()
	args := []string{"-np", np}
	for _, e := range env {
		args = append(args, "-x", e)
	}
	return launch(t, append(append(args, exe), progArgs...)...)
}

// launch runs goshmem-run with args and returns its output.
func launch(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(prefix, "bin", "goshmem-run"), args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// TestCPrograms runs the C test programs, each on PEs over shared memory
// and over tcp (where the heap and the static data are reached through the
// transport), with the arguments args. static, whose globals are the targets, also runs with its
// static data left in place (GOSHMEM_STATIC_DATA=0): over shared memory
// the PEs then reach each other's through cma and tcp, not mapped.
// staticwait has PEs wait in C for atomics on their static data: left in
// place and without tcp, those are shared-memory messages that only the
// waiting PE applies, inside the library (the C waiting loops used to
// spin without serving them, and every PE waited forever).
func TestCPrograms(t *testing.T) {
	for _, tc := range []struct {
		prog, np string
		env      []string
		args     []string
	}{
		{"smoke", "2", nil, nil},
		{"barrier", "2", nil, nil},
		{"barrier", "5", nil, nil},
		{"barrier", "3", []string{"UCX_TLS=tcp,self"}, nil},
		{"smoke", "3", []string{"UCX_TLS=tcp,self"}, nil},
		{"colls", "3", nil, nil},
		{"colls", "4", []string{"UCX_TLS=tcp,self"}, nil},
		{"generic", "2", nil, nil},
		{"generic", "3", []string{"UCX_TLS=tcp,self"}, nil},
		{"ztypes", "2", nil, nil},
		{"ztypes", "3", []string{"UCX_TLS=tcp,self"}, nil},
		{"threads", "2", nil, nil},
		{"threads", "3", []string{"UCX_TLS=tcp,self"}, nil},
		{"static", "3", nil, nil},
		{"static", "4", []string{"UCX_TLS=tcp,self"}, nil},
		{"static", "3", []string{"GOSHMEM_STATIC_DATA=0"}, nil},
		{"statcoll", "3", nil, nil},
		{"statcoll", "4", []string{"UCX_TLS=tcp,self"}, nil},
		{"statcoll", "3", []string{"GOSHMEM_STATIC_DATA=0"}, nil},
		{"nofinalize", "2", nil, nil},
		{"nofinalize", "3", []string{"UCX_TLS=tcp,self"}, nil},
		{"nofinalize", "3", nil, []string{"exit"}},
		{"nofinalize", "2", []string{"UCX_TLS=tcp,self"}, []string{"exit"}},
		{"netwait", "3", []string{"UCX_TLS=tcp,self", "UCX_TCP_PASSIVE_DELAY=10s"}, nil},
		{"staticwait", "3", nil, nil},
		{"staticwait", "3", []string{"GOSHMEM_STATIC_DATA=0", "UCX_TLS=sm,self"}, nil},
	} {
		t.Run(strings.Join(append([]string{tc.prog, tc.np, strings.Join(tc.env, ",")}, tc.args...), "/"), func(t *testing.T) {
			exe := compile(t, tc.prog)
			out, err := run(t, exe, tc.np, tc.env, tc.args...)
			if err != nil || !strings.Contains(out, "PASS") {
				t.Fatalf("%s on %s PEs: %v\n%s", tc.prog, tc.np, err, out)
			}
		})
	}
}

// TestCAlign runs testdata/alloc.c, shmem_align and shmemalign with every
// power of two from 64 MiB down to a page in a heap of 128 MiB, over
// shared memory and tcp: each block aligned and at the same offset on
// every PE; an alignment the heap cannot honour gives NULL and is reported
// as the other allocation failures are. (Alignments above 2 MiB, such as
// tests-sos's shmemalign's 8 MiB, were refused.)
func TestCAlign(t *testing.T) {
	const refused = "shmem_align: shmem.Align: alignment 268435456 (the heap of 134217728 bytes aligns to powers of two up to 134217728)"
	for _, env := range [][]string{{"SHMEM_SYMMETRIC_SIZE=128M"}, {"SHMEM_SYMMETRIC_SIZE=128M", "UCX_TLS=tcp,self"}} {
		t.Run(strings.Join(env, ","), func(t *testing.T) {
			exe := compile(t, "alloc")
			out, err := run(t, exe, "3", env)
			if err != nil || !strings.Contains(out, "alloc: PASS on 3 PEs") || !strings.Contains(out, "goshmem: PE 2: "+refused) {
				t.Fatalf("alloc on 3 PEs: %v; want PASS and %q:\n%s", err, refused, out)
			}
		})
	}
}

// TestCErrors makes PE 0 pass each kind of bad argument: the job must end
// non-zero with one line naming the routine the program called (the
// default form, not the context form it is built on) and the argument,
// and no Go traceback, whether C or package shmem rejects it.
func TestCErrors(t *testing.T) {
	for _, tc := range []struct{ what, want string }{
		{"pe", "PE 0: shmem_long_p: PE 7 is not a PE of the job (valid: 0..1)"},
		{"ctx-pe", "PE 0: shmem_ctx_long_atomic_add: PE 2 is not a PE of the job (valid: 0..1)"},
		{"destroyed", "PE 0: shmem_ctx_long_atomic_add: the context is destroyed"},
		{"stride", "PE 0: shmem_long_iput: dst stride 0 (valid: 1 or more)"},
		{"cmp", "PE 0: shmem_long_test: invalid comparison 42"},
		{"align", "PE 0: shmem_long_atomic_add: the atomic's address"},
		{"symmetric", "PE 0: shmem_long_put: 8 bytes at"},
		{"putmem", "PE 0: shmem_putmem: 8 bytes at"},
		{"signal-cmp", "PE 0: shmem_signal_wait_until: invalid comparison 42"},
		{"free", "PE 0: shmem_free: shmem.Free: "},
		{"session", "PE 0: shmem_ctx_session_start: shmem.(*Ctx).SessionStart: unknown options 0x40"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			exe := compile(t, "errors")
			out, err := run(t, exe, "2", nil, tc.what)
			if err == nil {
				t.Fatalf("errors %s exited 0:\n%s", tc.what, out)
			}
			if !strings.Contains(out, "goshmem: "+tc.want) || strings.Contains(out, "goroutine ") {
				t.Fatalf("errors %s: want one line with %q and no traceback, got:\n%s", tc.what, tc.want, out)
			}
		})
	}
}

// TestCBarrierMismatch makes PE 0 call shmem_barrier_all where the others
// call shmem_sync_all, in the barrier that runs in C over shared memory and
// in Go over tcp: the job must end non-zero with the report of a
// collective mismatch naming both calls.
func TestCBarrierMismatch(t *testing.T) {
	exe := compile(t, "barrier")
	for _, env := range [][]string{nil, {"UCX_TLS=tcp,self"}} {
		out, err := run(t, exe, "3", env, "mismatch")
		if err == nil || strings.Contains(out, "passed a mismatched barrier") {
			t.Fatalf("%v: the job went on past a mismatched barrier: %v\n%s", env, err, out)
		}
		if !strings.Contains(out, "collective mismatch on TeamWorld") || !strings.Contains(out, "BarrierAll") || !strings.Contains(out, "SyncAll") {
			t.Fatalf("%v: no mismatch report naming BarrierAll and SyncAll:\n%s", env, out)
		}
	}
}

// TestCStaticTwoHosts runs testdata/static.c on two hosts, this one and
// one made of namespaces (internal/nstest): the PEs of one host reach the
// other's static data over tcp, while those of a host map each other's.
func TestCStaticTwoHosts(t *testing.T) {
	exe := compile(t, "static")
	h := nstest.New(t)
	// The remote shell: rsh HOST COMMAND... runs COMMAND in h's namespaces.
	enter := h.Command("sh").Args
	rsh := filepath.Join(t.TempDir(), "nsrsh")
	body := fmt.Sprintf("#!/bin/sh\nshift\nexec %s \"$@\"\n", strings.Join(enter[:len(enter)-1], " "))
	if err := os.WriteFile(rsh, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	// Each host's PEs take tcp on its end of the veth pair only.
	out, err := launch(t, "-hosts", "localhost:2,"+h.Name+":2", "-rsh", rsh, "-bind", h.PeerIP.String(),
		"-x", "UCX_NET_DEVICES="+h.PeerDev+","+h.Dev, exe)
	if err != nil || !strings.Contains(out, "static: PASS on 4 PEs") {
		t.Fatalf("static on two hosts: %v\n%s", err, out)
	}
}

// TestCGlobalExit checks that shmem_global_exit ends the whole job (the
// other PEs wait forever) with its status, its caller's buffered output
// written.
func TestCGlobalExit(t *testing.T) {
	exe := compile(t, "globalexit")
	out, err := run(t, exe, "3", nil)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 7 {
		t.Fatalf("globalexit: want exit status 7, got %v:\n%s", err, out)
	}
	if !strings.Contains(out, "PE 1 ends the job") {
		t.Fatalf("globalexit: PE 1's buffered line is lost:\n%s", out)
	}
}

// TestCXX compiles a C++ program with shmem.h under -pedantic -Werror
// (no generics there; C linkage) with goshc++, and runs it.
func TestCXX(t *testing.T) {
	if _, err := exec.LookPath("c++"); err != nil {
		t.Skip("no C++ compiler (c++) on PATH")
	}
	exe := compileWith(t, "cxx", "cxx.cc", "goshc++", append([]string{"-std=c++11"}, strict...)...)
	out, err := run(t, exe, "2", nil)
	if err != nil || !strings.Contains(out, "cxx: PASS") {
		t.Fatalf("cxx on 2 PEs: %v\n%s", err, out)
	}
}

// TestCStatic links a C program with libgoshmem.a, not the shared
// library, and runs it.
func TestCStatic(t *testing.T) {
	exe := compileStatic(t, "smoke")
	out, err := run(t, exe, "2", nil)
	if err != nil || !strings.Contains(out, "smoke: PASS") {
		t.Fatalf("smoke-static on 2 PEs: %v\n%s", err, out)
	}
}

// compileStatic builds testdata/name.c against libgoshmem.a, not the
// shared library, once per run, and returns the program (name-static).
func compileStatic(t *testing.T, name string) string {
	t.Helper()
	p := install(t)
	exe := filepath.Join(p, name+"-static")
	if _, err := os.Stat(exe); err == nil {
		return exe
	}
	out, err := exec.Command("cc", "-std=c11", "-O2", "-I"+filepath.Join(p, "include"), "-o", exe,
		filepath.Join("testdata", name+".c"), filepath.Join(p, "lib", "libgoshmem.a"), "-lpthread").CombinedOutput()
	if err != nil {
		os.Remove(exe)
		t.Fatalf("cc %s.c libgoshmem.a: %v\n%s", name, err, out)
	}
	if deps, err := exec.Command("ldd", exe).CombinedOutput(); err == nil && strings.Contains(string(deps), "libgoshmem") {
		t.Fatalf("%s links the shared library:\n%s", exe, deps)
	}
	return exe
}

// TestCProfiling runs testdata/pshmem.c, whose own shmem_ routines count
// their calls and call the library's pshmem_ ones, linked with the shared
// library (ELF interposition) and with the static one (the library's
// shmem_ names are weak): the wrappers must see the program's calls, not
// the library's own, and the data must arrive.
func TestCProfiling(t *testing.T) {
	for _, tc := range []struct {
		link string
		env  []string
	}{
		{"shared", nil},
		{"shared", []string{"UCX_TLS=tcp,self"}},
		{"shared", []string{"GOSHMEM_STATIC_DATA=0"}},
		{"static", nil},
	} {
		t.Run(tc.link+"/"+strings.Join(tc.env, ","), func(t *testing.T) {
			exe := compile(t, "pshmem")
			if tc.link == "static" {
				exe = compileStatic(t, "pshmem")
			}
			out, err := run(t, exe, "3", tc.env)
			if err != nil || !strings.Contains(out, "pshmem: PASS on 3 PEs") {
				t.Fatalf("pshmem (%s) on 3 PEs: %v\n%s", tc.link, err, out)
			}
		})
	}
}

// TestCProfilingSymbols checks the libraries' symbols against pshmem.h:
// every routine the header declares is a strong pshmem_ definition whose
// shmem_ name (p dropped) is weak, in libgoshmem.so and libgoshmem.a, and
// every shmem_ routine either library defines has its pshmem_ twin.
func TestCProfilingSymbols(t *testing.T) {
	p := install(t)
	hdr, err := os.ReadFile(filepath.Join(p, "include", "pshmem.h"))
	if err != nil {
		t.Fatal(err)
	}
	var declared []string
	for _, l := range strings.Split(string(hdr), "\n") {
		if i := strings.IndexByte(l, '('); i > 0 && strings.HasSuffix(l, ");") {
			declared = append(declared, l[strings.LastIndexAny(l[:i], " *")+1:i])
		}
	}
	if len(declared) < 1000 {
		t.Fatalf("pshmem.h declares %d routines; want every routine of shmem.h", len(declared))
	}
	for _, lib := range []struct{ file, nmFlag string }{{"libgoshmem.so", "-D"}, {"libgoshmem.a", "-g"}} {
		t.Run(lib.file, func(t *testing.T) {
			out, err := exec.Command("nm", lib.nmFlag, "--defined-only", filepath.Join(p, "lib", lib.file)).Output()
			if err != nil {
				t.Skipf("nm %s: %v (binutils' nm is needed to read the symbols)", lib.file, err)
			}
			kind := map[string]string{} // a defined symbol's nm type
			for _, l := range strings.Split(string(out), "\n") {
				if f := strings.Fields(l); len(f) == 3 {
					kind[f[2]] = f[1]
				}
			}
			for _, pn := range declared {
				if k := kind[pn]; k != "T" {
					t.Errorf("%s: %s is %q, want a strong definition (T)", lib.file, pn, k)
				}
				if k := kind[pn[1:]]; k != "W" {
					t.Errorf("%s: %s is %q, want a weak definition (W) that a program's replaces", lib.file, pn[1:], k)
				}
			}
			for name := range kind {
				if strings.HasPrefix(name, "shmem_") && kind["p"+name] == "" {
					t.Errorf("%s: %s has no pshmem_ twin", lib.file, name)
				}
			}
		})
	}
}

// TestCMixedGo runs a job of C and Go PEs: goshmem-run starts one program
// on every PE, so that program is a script that runs testdata/mixed.c on
// the even PEs and this test binary, as goPE, on the odd ones.
func TestCMixedGo(t *testing.T) {
	exe := compile(t, "mixed")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(t.TempDir(), "mixed.sh")
	body := fmt.Sprintf("#!/bin/sh\nif [ $((GOSHMEM_RANK %% 2)) = 0 ]; then exec %q; fi\nexec %q -test.run='^$'\n", exe, self)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, env := range [][]string{nil, {"UCX_TLS=tcp,self"}} {
		out, err := run(t, script, "4", append(env, "GOSHMEM_CAPI_GO_PE=1"))
		if err != nil || !strings.Contains(out, "mixed: PASS on 4 PEs") {
			t.Fatalf("mixed job (%v): %v\n%s", env, err, out)
		}
	}
}

// goPE is the Go side of TestCMixedGo, the steps of testdata/mixed.c with
// package shmem; it returns the exit status.
func goPE() int {
	if err := shmem.Init(); err != nil {
		fmt.Fprintln(os.Stderr, "goPE:", err)
		return 1
	}
	defer shmem.Finalize()
	me, n := shmem.MyPE(), shmem.NPEs()
	x, err1 := shmem.Calloc[int64](8)
	s, err2 := shmem.Malloc[int64](1)
	d, err3 := shmem.Malloc[int64](1)
	if err := errors.Join(err1, err2, err3); err != nil {
		fmt.Fprintln(os.Stderr, "goPE:", err)
		return 1
	}
	for p := 0; p < n; p++ {
		shmem.P(&x[me], int64(me+1), p)
	}
	shmem.AtomicAdd(&x[7], int64(me), 0)
	shmem.BarrierAll()
	fail := func(what string) int {
		fmt.Fprintf(os.Stderr, "goPE %d: %s\n", me, what)
		shmem.GlobalExit(1)
		return 1
	}
	for p := 0; p < n; p++ {
		if x[p] != int64(p+1) {
			return fail(fmt.Sprintf("x[%d] = %d, want %d", p, x[p], p+1))
		}
	}
	r := (me + 1) % n
	if g := shmem.G(&x[r], r); g != int64(r+1) {
		return fail(fmt.Sprintf("G(&x[%d], %d) = %d", r, r, g))
	}
	s[0] = int64(me)
	if err := shmem.SumReduce(shmem.TeamWorld, d, s); err != nil || d[0] != int64(n*(n-1)/2) {
		return fail(fmt.Sprintf("SumReduce: %v, %d", err, d[0]))
	}
	shmem.BarrierAll()
	return 0
}
