package shmem_test

import (
	"strings"
	"testing"

	"github.com/goshmem/goshmem/shmem"
	"github.com/goshmem/goshmem/shmemtest"
)

func TestInfoVersionAndName(t *testing.T) {
	if major, minor := shmem.InfoGetVersion(); major != 1 || minor != 6 {
		t.Errorf("InfoGetVersion = %d.%d, want 1.6", major, minor)
	}
	if shmem.MajorVersion != 1 || shmem.MinorVersion != 6 {
		t.Errorf("MajorVersion.MinorVersion = %d.%d, want 1.6", shmem.MajorVersion, shmem.MinorVersion)
	}
	name := shmem.InfoGetName()
	if name == "" || len(name) > shmem.MaxNameLen || name != shmem.VendorString {
		t.Errorf("InfoGetName = %q (%d bytes), want VendorString, 1..%d bytes", name, len(name), shmem.MaxNameLen)
	}
	for _, level := range []int{0, 1, 2, 7} {
		shmem.Pcontrol(level) // records the level; nothing else to see
	}
	shmem.Pcontrol(1)
}

// TestSHMEMInfo: with SHMEM_INFO set, PE 0 (and only PE 0) prints the
// version, name, heap size, thread level, how it reaches each PE, and the
// environment variables, at Init.
func TestSHMEMInfo(t *testing.T) {
	for _, tr := range []struct{ name, env, lane string }{
		{"sm", "", "heap mapped"},
		{"tcp", "UCX_TLS=tcp,self", "tcp/"},
	} {
		env := []string{"SHMEM_INFO=1", "SHMEM_SYMMETRIC_SIZE=64M"}
		if tr.env != "" {
			env = append(env, tr.env)
		}
		shmemtest.RunWith(t, shmemtest.Options{Shared: true, NPs: []int{3}, Transports: []shmemtest.Transport{{Name: tr.name, Env: env}}, NoInit: true,
			Check: func(t *testing.T, out string) {
				for _, want := range []string{
					"[pe 0] goshmem: OpenSHMEM version 1.6, " + shmem.VendorString,
					"[pe 0] goshmem: SHMEM_INFO",
					"[pe 0]   version:         1.6",
					"[pe 0]   PEs:             3",
					"[pe 0]   symmetric heap:  67108864 bytes per PE",
					"[pe 0]   thread level:    ThreadSingle",
					"[pe 0]     PE 2: ",
					tr.lane,
					"[pe 0]     SHMEM_INFO=1",
					"[pe 0]     SHMEM_DEBUG=(not set)",
					"[pe 0]     SHMEM_SYMMETRIC_SIZE=64M",
					"[pe 0]     SHMEM_VERSION=",
				} {
					if !strings.Contains(out, want) {
						t.Errorf("output does not have %q:\n%s", want, out)
					}
				}
				if strings.Contains(out, "[pe 1] goshmem: SHMEM_INFO") || strings.Count(out, "goshmem: SHMEM_INFO") != 1 {
					t.Errorf("SHMEM_INFO printed other than once by PE 0:\n%s", out)
				}
			}}, func(t *testing.T) {
			if err := shmem.Init(); err != nil {
				t.Fatal(err)
			}
			shmem.Finalize()
		})
	}
}

// TestSHMEMVersion: with SHMEM_VERSION set, PE 0 prints the version once,
// and nothing of SHMEM_INFO.
func TestSHMEMVersion(t *testing.T) {
	shmemtest.RunWith(t, shmemtest.Options{Shared: true, NPs: []int{2}, Transports: []shmemtest.Transport{shmemtest.SharedMemory}, NoInit: true, Env: []string{"SHMEM_VERSION=yes"},
		Check: func(t *testing.T, out string) {
			want := "[pe 0] goshmem: OpenSHMEM version 1.6, " + shmem.VendorString
			if strings.Count(out, "OpenSHMEM version") != 1 || !strings.Contains(out, want) {
				t.Errorf("want %q once; output:\n%s", want, out)
			}
			if strings.Contains(out, "SHMEM_INFO") {
				t.Errorf("SHMEM_VERSION printed the SHMEM_INFO report:\n%s", out)
			}
		}}, func(t *testing.T) {
		if err := shmem.Init(); err != nil {
			t.Fatal(err)
		}
		shmem.Finalize()
	})
}

// TestSHMEMVersionOff: SHMEM_VERSION=0 prints nothing.
func TestSHMEMVersionOff(t *testing.T) {
	shmemtest.RunWith(t, shmemtest.Options{Shared: true, NPs: []int{1}, Transports: []shmemtest.Transport{shmemtest.SharedMemory}, NoInit: true, Env: []string{"SHMEM_VERSION=0", "SHMEM_INFO=no"},
		Check: func(t *testing.T, out string) {
			if strings.Contains(out, "OpenSHMEM version") {
				t.Errorf("SHMEM_VERSION=0 printed the version:\n%s", out)
			}
		}}, func(t *testing.T) {
		if err := shmem.Init(); err != nil {
			t.Fatal(err)
		}
		shmem.Finalize()
	})
}
