package petest

import (
	"sync"
	"testing"

	"github.com/goshmem/goshmem/launcher"
)

// programs are the commands Program built, by directory.
var programs sync.Map // string -> *program

type program struct {
	once    sync.Once
	path    string
	err     error
	cleanup func()
}

// Program builds the command in dir (launcher.BuildProgram) once per test
// process, for the tests that run it as processes of their own, and
// returns the binary's path; a build that fails fails t. RemovePrograms
// removes the binaries: call it from TestMain once m.Run returned.
func Program(t testing.TB, dir string) string {
	t.Helper()
	v, _ := programs.LoadOrStore(dir, new(program))
	p := v.(*program)
	p.once.Do(func() { p.path, p.cleanup, p.err = launcher.BuildProgram(dir) })
	if p.err != nil {
		t.Fatalf("build %s: %v", dir, p.err)
	}
	return p.path
}

// RemovePrograms removes the binaries that Program built.
func RemovePrograms() {
	programs.Range(func(_, v any) bool {
		if p := v.(*program); p.cleanup != nil {
			p.cleanup()
		}
		return true
	})
}
