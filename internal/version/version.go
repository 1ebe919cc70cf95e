// Package version says which goshmem a command was built from, for the
// version output of goshmem-run and goshmem-info, and for the bootstrap's
// version handshake between a PE and goshmem-run.
package version

import (
	"runtime/debug"
	"strings"
)

// The version of the OpenSHMEM specification goshmem implements
// (SHMEM_MAJOR_VERSION, SHMEM_MINOR_VERSION).
const (
	SpecMajor = 1
	SpecMinor = 6
)

// Vendor is the name of this implementation (SHMEM_VENDOR_STRING).
const Vendor = "goshmem 0.1.0 (OpenSHMEM 1.6 for Go over UCX semantics)"

// ModulePath is the path of the goshmem module.
const ModulePath = "github.com/goshmem/goshmem"

// Module returns the version of the goshmem module in this binary
// ("(devel)" when the binary was built in the module's own tree), and the
// VCS revision it was built from, with its time and " (modified)" when the
// tree had changes; "(unknown)" for what the binary does not record.
func Module() (version, revision string) {
	version, revision = "(unknown)", "(unknown)"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return version, revision
	}
	if bi.Main.Path == ModulePath {
		version = bi.Main.Version
	} else {
		for _, d := range bi.Deps {
			if d.Path == ModulePath {
				version = d.Version
			}
		}
	}
	s := Settings(bi)
	if r, ok := s["vcs.revision"]; ok {
		revision = r
		if t, ok := s["vcs.time"]; ok {
			revision += " " + t
		}
		if s["vcs.modified"] == "true" {
			revision += " (modified)"
		}
	}
	return version, revision
}

// Settings returns the build settings of bi as a map.
func Settings(bi *debug.BuildInfo) map[string]string {
	m := make(map[string]string, len(bi.Settings))
	for _, s := range bi.Settings {
		m[s.Key] = s.Value
	}
	return m
}

// Build describes the goshmem this binary was built from, in a few words
// that tell two builds apart: the module's version ("v0.3.0"), with the
// directory that replaced it, if any, and, for a binary of the goshmem
// module itself (goshmem-run, goshmem-info, the module's tests), the VCS
// revision it was built from ("(devel) revision 99c3ea0d12ab (modified)").
// It reads the binary's build information: "(unknown)" without it.
func Build() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	if bi.Main.Path != ModulePath {
		for _, d := range bi.Deps {
			if d.Path == ModulePath {
				if r := d.Replace; r != nil {
					return strings.TrimSpace(d.Version + " replaced by " + r.Path + " " + r.Version)
				}
				return d.Version
			}
		}
		return "(unknown)"
	}
	s := Settings(bi)
	b := bi.Main.Version
	if r := s["vcs.revision"]; r != "" {
		b += " revision " + r[:min(len(r), 12)]
		if s["vcs.modified"] == "true" {
			b += " (modified)"
		}
	}
	return b
}
