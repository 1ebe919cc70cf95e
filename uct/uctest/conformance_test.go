package uctest

import (
	"os"
	"testing"

	// The transports under test: importing one registers it.
	_ "github.com/goshmem/goshmem/uct/cma"
	_ "github.com/goshmem/goshmem/uct/self"
	_ "github.com/goshmem/goshmem/uct/sm"
	_ "github.com/goshmem/goshmem/uct/tcp"
)

func TestMain(m *testing.M) {
	RunPeerIfChild()
	os.Exit(m.Run())
}

// TestConformance runs the suite on every registered transport resource.
func TestConformance(t *testing.T) { Run(t) }
