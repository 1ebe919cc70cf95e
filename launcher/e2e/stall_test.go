package e2e_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStallReportOnSIGQUIT sends SIGQUIT to goshmem-run while two PEs of
// three wait in BarrierAll for the third, which waits outside the library:
// each PE in the barrier says, tagged with its number, that it waits in
// shmem.BarrierAll, called from the program's main.go, on TeamWorld for
// PE 1, and PE 1 that it waits in nothing; then PE 1 comes and the job
// ends well.
func TestStallReportOnSIGQUIT(t *testing.T) {
	const np, late = 3, 1
	await := filepath.Join(t.TempDir(), "go")
	cmd, _, stderr := startBlocked(t, []string{"AWAIT_FILE=" + await, fmt.Sprintf("FAIL_PE=%d", late)},
		"-np", fmt.Sprint(np), peProgram, "late")
	var wants []*regexp.Regexp
	for pe := range np {
		w := fmt.Sprintf(`(?m)^\[pe %d\] goshmem: PE %d: stall report: waiting \S+ in shmem\.BarrierAll at main\.go:\d+ \(main\.main\), collective #\d+ of TeamWorld; waits for PE %d \(at its #\d+`, pe, pe, late)
		if pe == late {
			w = fmt.Sprintf(`(?m)^\[pe %d\] goshmem: PE %d: stall report: not waiting in the library$`, pe, pe)
		}
		wants = append(wants, regexp.MustCompile(w))
	}
	ended := make(chan error, 1)
	go func() { ended <- cmd.Wait() }()
	// A PE registers a wait once it lasts past its spin: ask again until
	// every PE has answered as it should.
	deadline := time.After(hangGuard)
	for {
		missing := 0
		for _, w := range wants {
			if !w.MatchString(stderr()) {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-ended:
			t.Fatalf("goshmem-run ended (%v) before %d PEs reported where they wait; stderr:\n%s", cmd.ProcessState, missing, stderr())
		case <-deadline:
			t.Fatalf("%d PEs did not report where they wait within %v; stderr:\n%s", missing, hangGuard, stderr())
		case <-time.After(200 * time.Millisecond):
		}
	}
	if err := os.WriteFile(await, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ended:
	case <-deadline:
		t.Fatalf("goshmem-run did not end within %v of its start once PE %d came; stderr:\n%s", hangGuard, late, stderr())
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("goshmem-run = %d after the stall reports, want 0; stderr:\n%s", code, stderr())
	}
	if want := "goshmem-run: stall report requested; PEs report where they wait:\n"; !strings.HasPrefix(stderr(), want) {
		t.Errorf("stderr does not start with %q:\n%s", want, stderr())
	}
	noLeftovers(t)
}
