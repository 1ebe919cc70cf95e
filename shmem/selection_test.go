package shmem_test

import (
	"strings"
	"testing"

	"github.com/goshmem/goshmem/shmem"
	"github.com/goshmem/goshmem/shmemtest"
)

// TestSelectionWarning: a UCX_TLS that leaves a PE's own operations, or
// those between the PEs of a node, off memory gets one warning for the
// job, from PE 0 at Init, naming the selection that keeps them in memory;
// a selection that loses nothing, or UCX_LOG_LEVEL=error, gets none.
func TestSelectionWarning(t *testing.T) {
	const silence = " (UCX_LOG_LEVEL=error silences this warning)"
	tests := []struct {
		name string
		env  []string
		np   int
		want string // the warning; "" for none
	}{
		{"tcp", []string{"UCX_TLS=tcp"}, 1,
			"[pe 0] goshmem: UCX_TLS=tcp: each PE's operations on its own heap go through tcp, not memory; UCX_TLS=tcp,self keeps them in memory" + silence},
		{"tcp-2", []string{"UCX_TLS=tcp"}, 2,
			"[pe 0] goshmem: UCX_TLS=tcp: each PE's operations on its own heap and those between the PEs of a node go through tcp, not memory; UCX_TLS=tcp,self,sm keeps them in memory" + silence},
		{"tcp,self", []string{"UCX_TLS=tcp,self"}, 2,
			"[pe 0] goshmem: UCX_TLS=tcp,self: those between the PEs of a node go through tcp, not memory; UCX_TLS=tcp,self,sm keeps them in memory" + silence},
		{"tcp,self alone on its node", []string{"UCX_TLS=tcp,self"}, 1, ""},
		{"silenced", []string{"UCX_TLS=tcp", "UCX_LOG_LEVEL=error"}, 2, ""},
		{"default", nil, 2, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check := func(t *testing.T, out string) {
				n := strings.Count(out, "goshmem: UCX_TLS=")
				switch {
				case tt.want == "" && n > 0:
					t.Errorf("a warning about UCX_TLS; want none:\n%s", out)
				case tt.want != "" && (n != 1 || !strings.Contains(out, tt.want+"\n")):
					t.Errorf("want the warning once:\n%s\noutput:\n%s", tt.want, out)
				}
			}
			shmemtest.RunWith(t, shmemtest.Options{NPs: []int{tt.np}, Transports: []shmemtest.Transport{{Name: "job", Env: tt.env}}, Check: check},
				func(t *testing.T) {
					// Init again after the last Finalize: the process
					// was told already.
					shmem.Finalize()
					if err := shmem.Init(); err != nil {
						t.Fatal(err)
					}
				})
		})
	}
}
