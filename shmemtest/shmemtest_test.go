package shmemtest_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/goshmem/goshmem/shmem"
	"github.com/goshmem/goshmem/shmemtest"
)

// TestRun runs the package's example: a ring of puts, over shared memory
// and TCP, at several job sizes.
func TestRun(t *testing.T) {
	shmemtest.Run(t, []int{1, 3}, func(t *testing.T) {
		me, n := shmem.MyPE(), shmem.NPEs()
		x, err := shmem.Calloc[int64](1)
		if err != nil {
			t.Fatal(err)
		}
		shmem.P(&x[0], int64(me), (me+1)%n)
		shmem.BarrierAll()
		if want := int64((me + n - 1) % n); x[0] != want {
			t.Errorf("got %d, want %d", x[0], want)
		}
		shmem.Free(x)
	})
}

// TestRunOptions: the options reach every PE (environment, Setup, thread
// level), and Check sees the job's output tagged by PE.
func TestRunOptions(t *testing.T) {
	shmemtest.RunWith(t, shmemtest.Options{
		NPs:         []int{2},
		Transports:  []shmemtest.Transport{shmemtest.SharedMemory},
		Env:         []string{"SHMEMTEST_OPTION=yes"},
		ThreadLevel: shmem.ThreadMultiple,
		Setup:       func(t *testing.T) { os.Setenv("SHMEMTEST_SETUP", "done") },
		Check: func(t *testing.T, out string) {
			if !strings.Contains(out, "[pe 1] PE 1 ran") {
				t.Errorf("no line of PE 1 in the output:\n%s", out)
			}
		},
	}, func(t *testing.T) {
		if os.Getenv("SHMEMTEST_OPTION") != "yes" || os.Getenv("SHMEMTEST_SETUP") != "done" {
			t.Errorf("environment: option %q, setup %q", os.Getenv("SHMEMTEST_OPTION"), os.Getenv("SHMEMTEST_SETUP"))
		}
		if shmem.QueryThread() != shmem.ThreadMultiple {
			t.Errorf("thread level %v", shmem.QueryThread())
		}
		os.Stdout.WriteString("PE " + string(rune('0'+shmem.MyPE())) + " ran\n")
	})
}

// TestFromAnotherModule uses the harness as a user does: a module of its
// own (testdata/usermod) takes goshmem from this checkout as the README
// says (its "A local checkout" commands: a replace directive, go mod
// tidy, and the checkout's goshmem-run running the module's program),
// and runs its tests: one that passes, then three that share their job,
// of which the middle one fails on PE 1. That run must exit non-zero,
// name PE 1 with its message and line, pass the two others, and leave
// nothing in /dev/shm.
func TestFromAnotherModule(t *testing.T) {
	if shmemtest.IsPE() {
		t.Skip("runs in the test process only")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, name := range []string{"ring_test.go.txt", "main.go.txt"} {
		b, err := os.ReadFile(filepath.Join("testdata", "usermod", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, strings.TrimSuffix(name, ".txt")), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) (string, error) {
		cmd := exec.Command(goBin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run("mod", "init", "example.com/usermod"); err != nil {
		t.Fatalf("go mod init: %v\n%s", err, out)
	}
	for _, args := range readmeLocalCheckout(t, root) {
		out, err := run(args[1:]...)
		if err != nil {
			t.Fatalf("the README's %q in the user's module: %v\n%s", args, err, out)
		}
		if args[1] == "run" && !strings.Contains(out, "Hello from PE 1 of 2\n") {
			t.Errorf("the README's %q: no hello of PE 1 of 2:\n%s", args, out)
		}
	}
	// One test binary (go test -c) serves both runs: linking is most of
	// a build whose packages are cached.
	if out, err := run("test", "-c", "-o", "usermod.test", "."); err != nil {
		t.Fatalf("go test -c in the user's module: %v\n%s", err, out)
	}
	test := func(pattern string) (string, error) {
		cmd := exec.Command("./usermod.test", "-test.count=1", "-test.v", "-test.run", pattern)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := test("TestRingPasses")
	if err != nil || !strings.Contains(out, "\nPASS") {
		t.Fatalf("a passing test in the user's module: %v\n%s", err, out)
	}
	out, err = test("TestRingShared|TestRingFailsOnPE1")
	if err == nil {
		t.Fatalf("a failing test in the user's module passed:\n%s", out)
	}
	if !strings.Contains(out, "PE 1: ring_test.go:") || !strings.Contains(out, "PE 1 disagrees") {
		t.Errorf("the failure does not name PE 1 with its message and line:\n%s", out)
	}
	for _, want := range []string{"--- PASS: TestRingSharedPasses ", "--- PASS: TestRingSharedPassesAfter ", "--- FAIL: TestRingFailsOnPE1 "} {
		if !strings.Contains(out, "\n"+want) {
			t.Errorf("no %q in the output:\n%s", want, out)
		}
	}
	if !strings.Contains(out, "shared job of 3 PEs and 3 tests") {
		t.Errorf("the tests did not share a job:\n%s", out)
	}
	if left := shmemtest.Leftovers(); len(left) > 0 {
		t.Errorf("left in /dev/shm: %v", left)
	}
}

// readmeLocalCheckout returns the commands of the README's "A local
// checkout" block (go commands, each as its words), with the checkout's
// path, root, in place of /path/to/goshmem.
func readmeLocalCheckout(t *testing.T, root string) [][]string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), "**A local checkout**")
	_, block, ok2 := strings.Cut(after, "```sh\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("the README has no \"A local checkout\" paragraph followed by a sh block")
	}
	var cmds [][]string
	for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
		line, _, _ = strings.Cut(line, " #")
		words := strings.Fields(strings.ReplaceAll(line, "/path/to/goshmem", root))
		if len(words) < 2 || words[0] != "go" {
			t.Fatalf("the README's local checkout block has %q, not a go command", line)
		}
		cmds = append(cmds, words)
	}
	return cmds
}

// TestPanicInBody: a body that panics on one PE while the others wait in
// a collective ends the job with the panic, said once: the panicking PE
// does not finalize, which the others would see, and report, as a
// collective mismatch.
func TestPanicInBody(t *testing.T) {
	shmemtest.RunWith(t, shmemtest.Options{
		NPs:        []int{3},
		Transports: []shmemtest.Transport{shmemtest.SharedMemory},
		WantExit:   2, // a test binary's panic
		Check: func(t *testing.T, out string) {
			if !strings.Contains(out, "[pe 1] panic: PE 1 gives up") {
				t.Errorf("no panic of PE 1 in the output:\n%s", out)
			}
			if strings.Contains(out, "collective mismatch") {
				t.Errorf("the panic was reported as a collective mismatch:\n%s", out)
			}
		},
	}, func(t *testing.T) {
		if shmem.MyPE() == 1 {
			panic("PE 1 gives up")
		}
		shmem.BarrierAll()
	})
}

// hangEnv makes TestHang run: TestTimeoutSaysWhere runs it in a test
// process of its own, since it fails.
const hangEnv = "SHMEMTEST_HANG"

// TestHang is a job that hangs: PE 0 waits for a store that never comes,
// PE 1 in a barrier for PE 0.
func TestHang(t *testing.T) {
	if os.Getenv(hangEnv) == "" {
		t.Skipf("a test that fails, for TestTimeoutSaysWhere: %s=1 runs it", hangEnv)
	}
	shmemtest.RunWith(t, shmemtest.Options{NPs: []int{2}, Transports: []shmemtest.Transport{shmemtest.SharedMemory}, Timeout: 20 * time.Second},
		func(t *testing.T) {
			x, err := shmem.Calloc[int64](1)
			if err != nil {
				t.Fatal(err)
			}
			if shmem.MyPE() == 0 {
				shmem.WaitUntil(&x[0], shmem.CmpEQ, 1)
			}
			shmem.BarrierAll()
		})
}

// TestTimeoutSaysWhere: a job that runs past its timeout fails its test
// with the stall report of each PE (the routine, the line of the test
// that called it, what or whom it waits for), and the failure names the
// test's file, not the harness's.
func TestTimeoutSaysWhere(t *testing.T) {
	if shmemtest.IsPE() {
		t.Skip("runs in the test process only")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHang$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), hangEnv+"=1")
	b, err := cmd.CombinedOutput()
	out := string(b)
	if err == nil {
		t.Fatalf("TestHang passed:\n%s", out)
	}
	for _, want := range []string{
		`(?m)^\s+shmemtest_test\.go:\d+: PE 0: goshmem: PE 0: stall report: waiting \S+ in shmem\.WaitUntil at shmemtest_test\.go:\d+ \(shmemtest_test\.TestHang\.func1\) until \*0x[0-9a-f]+ \(heap offset 0x[0-9a-f]+\) CmpEQ 1 \(it holds 0;`,
		`(?m)^\s+shmemtest_test\.go:\d+: PE 1: goshmem: PE 1: stall report: waiting \S+ in shmem\.BarrierAll at shmemtest_test\.go:\d+ \(shmemtest_test\.TestHang\.func1\), collective #\d+ of TeamWorld; waits for PE 0 `,
		`(?m)^\s+shmemtest_test\.go:\d+: job of 2 PEs did not end within 20s`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("no line matching %q in the output:\n%s", want, out)
		}
	}
	if strings.Contains(out, "petest.go:") {
		t.Errorf("a failure names the harness's file, not the test's:\n%s", out)
	}
}
