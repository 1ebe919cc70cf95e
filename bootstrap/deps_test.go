package bootstrap

import (
	"os/exec"
	"strings"
	"testing"
)

// peForbidden are packages that no PE binary may link: the agent's side
// (package cluster) and memberlist, with what memberlist brings and what
// costs a PE its start-up (package initialisation of net/http, go-metrics,
// encoding/gob, net/rpc, html/template, ...).
var peForbidden = []string{
	"github.com/goshmem/goshmem/bootstrap/cluster",
	"github.com/hashicorp/memberlist",
	"github.com/hashicorp/go-metrics",
	"net/http",
	"net/rpc",
	"encoding/gob",
	"html/template",
}

// TestPEDeps checks, with go list, that package bootstrap and a PE binary
// (examples/hello) do not import the agent's side: every PE would pay for
// memberlist's dependencies at each start.
func TestPEDeps(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("skipping: no go tool on PATH to list the dependencies with: %v", err)
	}
	pkgs := []string{"github.com/goshmem/goshmem/bootstrap", "github.com/goshmem/goshmem/examples/hello"}
	cmd := exec.Command(goTool, append([]string{"list", "-deps", "-f", "{{.ImportPath}}"}, pkgs...)...)
	out, err := cmd.Output()
	if err != nil {
		msg := err.Error()
		if ee, ok := err.(*exec.ExitError); ok {
			msg += ": " + string(ee.Stderr)
		}
		t.Fatalf("go list -deps %s: %s", strings.Join(pkgs, " "), msg)
	}
	deps := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		deps[p] = true
	}
	if !deps["github.com/goshmem/goshmem/bootstrap"] {
		t.Fatalf("go list -deps %s does not list package bootstrap:\n%s", strings.Join(pkgs, " "), out)
	}
	for _, p := range peForbidden {
		if deps[p] {
			t.Errorf("a PE (%s) depends on %s: only the launcher's side (package bootstrap/cluster) may", strings.Join(pkgs, ", "), p)
		}
	}
}
