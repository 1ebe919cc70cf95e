// Package version says which goshmem a command was built from, for the
// version output of goshmem-run and goshmem-info.
package version

import (
	"runtime/debug"
)

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
