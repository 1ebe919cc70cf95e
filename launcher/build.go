package launcher

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// BuildProgram builds the Go main package pkgDir (a directory, or a
// package path that the go command resolves from the current directory)
// into a temporary directory, once, with the go command found in PATH.
// It returns the binary and a function that removes it. The error carries
// the go command's output.
func BuildProgram(pkgDir string) (binary string, cleanup func(), err error) {
	gocmd, err := exec.LookPath("go")
	if err != nil {
		return "", nil, fmt.Errorf("launcher: building %s: %w", pkgDir, err)
	}
	dir, err := os.MkdirTemp("", "goshmem-run-")
	if err != nil {
		return "", nil, fmt.Errorf("launcher: building %s: %w", pkgDir, err)
	}
	cleanup = func() { os.RemoveAll(dir) }

	name := filepath.Base(pkgDir)
	if abs, err := filepath.Abs(pkgDir); err == nil && (name == "." || name == ".." || name == string(filepath.Separator)) {
		name = filepath.Base(abs)
	}
	binary = filepath.Join(dir, name)

	cmd := exec.Command(gocmd, "build", "-o", binary, pkgDir)
	if fi, err := os.Stat(pkgDir); err == nil && fi.IsDir() {
		// Build from inside the directory, so that it may belong to any
		// module, not only the one of the current directory.
		cmd = exec.Command(gocmd, "build", "-o", binary, ".")
		cmd.Dir = pkgDir
	}
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("launcher: go build %s: %w\n%s", pkgDir, err, bytes.TrimSpace(out.Bytes()))
	}
	return binary, cleanup, nil
}
