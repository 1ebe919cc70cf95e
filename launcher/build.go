package launcher

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/goshmem/goshmem/ucs"
)

// BuildProgram builds the Go main package pkgDir (a directory, or a
// package path that the go command resolves from the current directory)
// into a temporary directory, once, with the go command found in PATH.
// It returns the binary and a function that removes it. The error carries
// the go command's output; for a package that is not a main package, it
// names the package and wraps ucs.ErrInvalidParam.
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
	// For a package that is not main, go build -o writes the package's
	// archive: nothing to run.
	if head, err := readHead(binary, len(archiveMagic)); err == nil && string(head) == archiveMagic {
		cleanup()
		name := "a library package"
		list := exec.Command(gocmd, "list", "-f", "{{.Name}}", cmd.Args[len(cmd.Args)-1])
		list.Dir = cmd.Dir
		if b, err := list.Output(); err == nil {
			name = "package " + string(bytes.TrimSpace(b))
		}
		return "", nil, fmt.Errorf("launcher: %s is %s, not a main package: nothing to run: %w", pkgDir, name, ucs.ErrInvalidParam)
	}
	return binary, cleanup, nil
}

// archiveMagic starts the archive go build writes for a package that is
// not main.
const archiveMagic = "!<arch>\n"

// readHead returns the first n bytes of a file (fewer if it is shorter).
func readHead(path string, n int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, n)
	m, err := io.ReadFull(f, b)
	if err == io.ErrUnexpectedEOF {
		err = nil
	}
	return b[:m], err
}
