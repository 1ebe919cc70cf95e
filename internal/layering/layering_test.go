package layering

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/goshmem/goshmem/ucp"
	"github.com/goshmem/goshmem/ucs"
)

// transports are the packages that implement uct transports.
var transports = []string{"uct/cma", "uct/self", "uct/sm", "uct/tcp", "uct/transports"}

func TestImports(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH to list imports:", err)
	}
	tests := []struct {
		pkg     string
		mayLink []string // transports the package may link
	}{
		{pkg: "github.com/goshmem/goshmem/ucp"},
		{pkg: "github.com/goshmem/goshmem/launcher/cmd/goshmem-run"},
		{pkg: "github.com/goshmem/goshmem/launcher"},
		{pkg: "github.com/goshmem/goshmem/bootstrap/..."},
		{pkg: "github.com/goshmem/goshmem/launcher/cmd/goshmem-info", mayLink: transports},
	}
	for _, tt := range tests {
		out, err := exec.Command("go", "list", "-deps", tt.pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", tt.pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, tr := range transports {
				if dep == "github.com/goshmem/goshmem/"+tr && !contains(tt.mayLink, tr) {
					t.Errorf("%s links %s", tt.pkg, dep)
				}
			}
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// A program that links ucp and no transport learns what to import.
func TestNoTransportLinked(t *testing.T) {
	ctx, err := ucp.Init(&ucp.Params{FieldMask: ucp.ParamFieldFeatures, Features: ucp.FeatureRMA}, nil)
	if err == nil {
		ctx.Cleanup()
		t.Fatal("Init without transports succeeded")
	}
	if !errors.Is(err, ucs.ErrNoDevice) || !strings.Contains(err.Error(), "uct/transports") {
		t.Errorf("Init without transports: %v; want ErrNoDevice naming uct/transports", err)
	}
}
