package main

import (
	"bytes"
	"io"
	"os/exec"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		msg  string // in stderr
	}{
		{"no flags", nil, 2, "usage:"},
		{"bad flag", []string{"-bogus", "true"}, 2, "usage:"},
		{"np zero", []string{"-np", "0", "true"}, 2, "-np must be at least 1"},
		{"no program", []string{"-np", "2"}, 2, "no PROGRAM"},
		{"missing command", []string{"-np", "2", "no-such-command-goshmem"}, 127, "not a file"},
		{"true", []string{"-np", "2", "true"}, 0, ""},
		{"exit status", []string{"--np", "2", "sh", "-c", "exit 7"}, 7, "exited with status 7"},
		{"program args are not flags", []string{"-np", "1", "sh", "-c", "test \"$1\" = -np", "sh", "-np"}, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, a := range tt.args {
				if a == "true" || a == "sh" {
					if _, err := exec.LookPath(a); err != nil {
						t.Skipf("skipping: %s not in PATH", a)
					}
				}
			}
			var stderr bytes.Buffer
			code := run(tt.args, io.Discard, &stderr)
			if code != tt.code || !strings.Contains(stderr.String(), tt.msg) {
				t.Errorf("goshmem-run %q = %d, stderr %q; want %d and %q", tt.args, code, stderr.String(), tt.code, tt.msg)
			}
		})
	}
}

func TestRunBuildsPackage(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("skipping: no go command in PATH to build with")
	}
	if testing.Short() {
		t.Skip("skipping: building a program is slow in -short mode")
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-np", "2", "-tag-output", "../../testdata/hello", "x"}, &stdout, &stderr); code != 0 {
		t.Errorf("goshmem-run of a package directory = %d, stderr %q", code, stderr.String())
	}
	if want := "[pe 1] hello x from 1 of 2\n"; !strings.Contains(stdout.String(), want) {
		t.Errorf("stdout %q lacks %q", stdout.String(), want)
	}
}
