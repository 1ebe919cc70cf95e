package e2e_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// srunReady says why srun cannot run a step here, or "" when it can.
func srunReady() string {
	if _, err := exec.LookPath("srun"); err != nil {
		return "srun is not installed (CI starts a one-node cluster with shared/slurm/start-local-slurm)"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "srun", "-n", "1", "true").CombinedOutput()
	if err != nil {
		return "srun -n 1 true fails (is the cluster up? shared/slurm/start-local-slurm starts one): " + err.Error() + ": " + strings.TrimSpace(string(out))
	}
	return ""
}

// spawners are the cluster managers' spawners goshmem-run wraps.
var spawners = []struct {
	name    string
	spawner string // the -spawner flag
	ready   func() string
}{
	{"srun", "srun --overcommit", srunReady},
	{"mpirun", "mpirun --allow-run-as-root --oversubscribe", func() string {
		if _, err := exec.LookPath("mpirun"); err != nil {
			return "mpirun is not installed (Debian's openmpi-bin has it)"
		}
		return ""
	}},
}

// TestSpawners runs jobs whose PEs srun or mpirun place: hello, stdin to
// PE 0, a PE killed, and the launcher's global exit.
func TestSpawners(t *testing.T) {
	t.Parallel() // its jobs mostly wait for processes to start
	h := hostname(t)
	for _, sp := range spawners {
		t.Run(sp.name, func(t *testing.T) {
			t.Parallel()
			skipUnless(t, sp.name, sp.ready())
			t.Run("hello", func(t *testing.T) {
				r := run(t, nil, "-spawner", sp.spawner, "-np", "4", "-tag-output", peProgram, "hello")
				checkHello(t, r, 4, func(int) string { return h })
				if !strings.Contains(r.stdout, "[pe 3] hello 3 of 4") {
					t.Errorf("output not tagged; %v", r)
				}
				noLeftovers(t)
			})
			t.Run("stdin", func(t *testing.T) {
				checkStdin(t, runIn(t, "a\nb\n", nil, append([]string{"-spawner", sp.spawner}, stdinArgs...)...))
			})
			t.Run("ring", func(t *testing.T) {
				r := run(t, nil, "-spawner", sp.spawner, "-np", "3", peProgram, "ring")
				if r.code != 0 || !strings.Contains(r.stdout, "token back at PE 0 after 3 hops") {
					t.Errorf("ring: %v", r)
				}
			})
			t.Run("kill9", func(t *testing.T) {
				env := append([]string{"FAIL_PE=1"}, namedSegments...)
				r := run(t, env, "-spawner", sp.spawner, "-np", "3", peProgram, "kill9")
				checkFault(t, r, 137, 1, h, "was killed by signal 9 (killed)")
				t.Logf("ended after %v", r.took.Round(time.Millisecond))
				noLeftovers(t)
			})
			t.Run("globalexit", func(t *testing.T) {
				r := run(t, []string{"FAIL_PE=2"}, "-spawner", sp.spawner, "-np", "3", peProgram, "globalexit")
				checkFault(t, r, 7, 2, h, "called global exit with status 7")
			})
		})
	}
}
