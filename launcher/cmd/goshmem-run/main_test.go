package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/goshmem/goshmem/bootstrap"
	"github.com/goshmem/goshmem/launcher"
)

// The test binary is goshmem-run's agent too: run uses its own
// executable. (SIGQUIT's stall reports are tested in launcher/e2e, with
// shmem's PEs.)
func TestMain(m *testing.M) {
	if code, ok := launcher.AgentMain(); ok {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// TestRunRefusesLibraryPackage gives goshmem-run a package that is not a
// main package: a usage error that names it.
func TestRunRefusesLibraryPackage(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("skipping: no go command in PATH to build with")
	}
	if testing.Short() {
		t.Skip("skipping: building a package is slow in -short mode")
	}
	var stdout, stderr bytes.Buffer
	code := run([]string{"-np", "2", "../../../internal/version"}, &stdout, &stderr)
	want := "goshmem-run: ../../../internal/version is package version, not a main package: nothing to run\n"
	if code != 2 || !strings.HasPrefix(stderr.String(), want) || stdout.Len() > 0 {
		t.Errorf("goshmem-run of a library package = %d, stdout %q, stderr %q; want 2 and %q", code, stdout.String(), stderr.String(), want)
	}
}

func TestRun(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		msg  string // in stderr, which must be empty for a code 0 without msg
		out  string // in stdout
	}{
		{"no flags", nil, 2, "usage:", ""},
		{"help", []string{"-help"}, 0, "", "usage: goshmem-run -np N"},
		{"help long", []string{"--help"}, 0, "", "-np int"},
		{"h", []string{"-h", "-np", "2", "true"}, 0, "", "usage: goshmem-run"},
		{"version", []string{"--version"}, 0, "", "goshmem-run: goshmem "},
		{"version and more", []string{"-version", "-np", "2", "true"}, 0, "", "OpenSHMEM 1."},
		{"n alias", []string{"-n", "2", "sh", "-c", "test $GOSHMEM_SIZE = 2"}, 0, "", ""},
		{"n alias double dash", []string{"--n", "3", "sh", "-c", "test $GOSHMEM_SIZE = 3"}, 0, "", ""},
		{"go file", []string{"-np", "2", "../../testdata/hello/main.go"}, 2,
			"../../testdata/hello/main.go is a Go source file, not a program: give the directory of its main package (../../testdata/hello)", ""},
		{"stall report", []string{"-np", "2", "-stall-report", "1500ms", "sh", "-c", "test $GOSHMEM_STALL_REPORT = 1.5s"}, 0, "", ""},
		{"no stall report", []string{"-np", "1", "sh", "-c", "test -z \"$GOSHMEM_STALL_REPORT\""}, 0, "", ""},
		{"negative stall report", []string{"-np", "2", "-stall-report", "-1s", "true"}, 2, "-stall-report -1s: want a positive duration", ""},
		{"stall report without unit", []string{"-np", "2", "--stall-report", "30", "true"}, 2,
			`invalid value "30" for flag -stall-report: a duration needs a unit: 30s for seconds, 30m for minutes`, ""},
		{"failure timeout without unit", []string{"-np", "2", "--failure-timeout", "2.5", "true"}, 2,
			`invalid value "2.5" for flag -failure-timeout: a duration needs a unit: 2.5s for seconds`, ""},
		{"kill grace not a duration", []string{"-np", "2", "--kill-grace", "soon", "true"}, 2,
			`invalid value "soon" for flag -kill-grace: want a duration such as 30s, 1m or 1m30s`, ""},
		{"usage names the duration form", []string{"-help"}, 0, "", "-kill-grace duration\n"},
		{"bad flag", []string{"-bogus", "true"}, 2, "usage:", ""},
		{"np zero", []string{"-np", "0", "true"}, 2, "-np must be at least 1", ""},
		{"no program", []string{"-np", "2"}, 2, "no PROGRAM", ""},
		{"missing command", []string{"-np", "2", "no-such-command-goshmem"}, 127, "not a file", ""},
		{"missing path", []string{"-np", "2", "./no/such/program"}, 127, "./no/such/program: no such file or directory", ""},
		{"missing absolute path", []string{"-np", "2", "/no/such/program"}, 127, "/no/such/program: no such file or directory", ""},
		{"missing package path", []string{"-np", "2", "no.such.host/x/cmd"}, 127, "no.such.host/x/cmd: no such file or directory, nor a Go package", ""},
		{"true", []string{"-np", "2", "true"}, 0, "", ""},
		{"exit status", []string{"--np", "2", "sh", "-c", "exit 7"}, 7, "exited with status 7", ""},
		{"program args are not flags", []string{"-np", "1", "sh", "-c", "test \"$1\" = -np", "sh", "-np"}, 0, "", ""},
		{"hosts and hostfile", []string{"-hosts", "a:1", "-hostfile", "f", "true"}, 2, "not both", ""},
		{"bad hosts", []string{"-hosts", "a:0", "true"}, 2, "slots must be a positive integer", ""},
		{"missing hostfile", []string{"-hostfile", "/nonexistent/hosts", "true"}, 2, "no such file", ""},
		{"spawner and hosts", []string{"-spawner", "srun", "-hosts", "a:1", "true"}, 2, "no -hosts", ""},
		{"unterminated rsh", []string{"-rsh", "ssh -o 'x", "-hosts", "a:1", "true"}, 2, "unterminated quote", ""},
		{"too many PEs for the hosts", []string{"-np", "3", "-hosts", "localhost:2", "true"}, 2, "do not fit", ""},
		{"local hosts", []string{"-hosts", "localhost:2", "sh", "-c", "test $GOSHMEM_SIZE = 2"}, 0, "", ""},
		{"x flag", []string{"-np", "2", "-x", "GOSHMEM_TEST_X=yes", "sh", "-c", "test $GOSHMEM_TEST_X = yes"}, 0, "", ""},
		{"N alone", []string{"-N", "3", "sh", "-c", "test $GOSHMEM_SIZE = 3"}, 0, "", ""},
		{"N per host", []string{"-N", "2", "-hosts", "localhost:5", "sh", "-c", "test $GOSHMEM_SIZE = 2"}, 0, "", ""},
		{"N per host overrides slots", []string{"-N", "1", "-np", "2", "-hosts", "localhost:5", "true"}, 2, "do not fit", ""},
		{"N and np", []string{"-N", "3", "-np", "2", "sh", "-c", "test $GOSHMEM_SIZE = 2"}, 0, "", ""},
		{"N below np", []string{"-N", "2", "-np", "3", "true"}, 2, "-np 3 PEs do not fit -N 2 on this host alone", ""},
		{"N negative", []string{"-N", "-1", "true"}, 2, "-N must be at least 1", ""},
		{"N with spawner", []string{"-N", "2", "-spawner", "srun", "true"}, 2, "-N: the spawner places the PEs", ""},
		{"oversubscribe", []string{"--oversubscribe", "-np", "2", "sh", "-c", "test $GOSHMEM_SIZE = 2"}, 0, "", ""},
		{"allow-run-as-root", []string{"--allow-run-as-root", "-np", "1", "true"}, 0, "", ""},
		{"single host tcp on loopback", []string{"-np", "1", "sh", "-c", "test $UCX_NET_DEVICES = lo"}, 0, "", ""},
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
			var stdout, stderr bytes.Buffer
			code := run(tt.args, &stdout, &stderr)
			if code != tt.code || !strings.Contains(stderr.String(), tt.msg) || !strings.Contains(stdout.String(), tt.out) {
				t.Errorf("goshmem-run %q = %d, stdout %q, stderr %q; want %d, %q in stdout and %q in stderr",
					tt.args, code, stdout.String(), stderr.String(), tt.code, tt.out, tt.msg)
			}
			if code == 0 && tt.msg == "" && stderr.Len() > 0 {
				t.Errorf("goshmem-run %q: stderr %q, want none", tt.args, stderr.String())
			}
			if code == 2 && stdout.Len() > 0 {
				t.Errorf("goshmem-run %q: a usage error wrote %q on stdout", tt.args, stdout.String())
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

func TestSplitWords(t *testing.T) {
	tests := []struct {
		in   string
		want []string
		ok   bool
	}{
		{"ssh", []string{"ssh"}, true},
		{"  ip netns  exec ", []string{"ip", "netns", "exec"}, true},
		{`ssh -o "ProxyCommand ssh gw" -x`, []string{"ssh", "-o", "ProxyCommand ssh gw", "-x"}, true},
		{`srun '' a`, []string{"srun", "", "a"}, true},
		{`a'b c'd`, []string{"ab cd"}, true},
		{`ssh "x`, nil, false},
		{"", nil, true},
	}
	for _, tt := range tests {
		got, err := splitWords(tt.in)
		if (err == nil) != tt.ok || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("splitWords(%q) = %q, %v; want %q (ok %v)", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestHostfileFlag(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("skipping: sh not in PATH")
	}
	f := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(f, []byte("# this host twice\nlocalhost slots=2\nlocalhost:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := run([]string{"-hostfile", f, "-tag-output", "sh", "-c", "echo $GOSHMEM_RANK/$GOSHMEM_SIZE"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("goshmem-run -hostfile = %d, stderr %q", code, stderr.String())
	}
	for _, want := range []string{"[pe 0] 0/3\n", "[pe 1] 1/3\n", "[pe 2] 2/3\n"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout %q lacks %q", stdout.String(), want)
		}
	}
}

// TestDocumentedDefaults: the README and this command's documentation
// state the defaults of the duration flags as the values the flags take,
// which the launcher owns.
func TestDocumentedDefaults(t *testing.T) {
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	failure, grace := bootstrap.DefaultFailureTimeout.String(), launcher.DefaultKillGrace.String()
	for _, c := range []struct {
		where string
		text  []byte
		re    string // its first group is the default stated
		want  string
	}{
		{"README, goshmem-run's flags", readme, "`--failure-timeout` \\(default ([^)]+)\\)", failure},
		{"README, goshmem-run's flags", readme, "`--kill-grace` \\([^)]*default ([^)]+)\\)", grace},
		{"README, the PE's environment", readme, "\\| `GOSHMEM_FAILURE_TIMEOUT` \\|[^|\\n]*default `([^`]+)`", failure},
		{"goshmem-run's doc", doc, "-failure-timeout D [^(]*\\(default ([^;)]+)", failure},
		{"goshmem-run's doc", doc, "-kill-grace D [^(]*\\(default ([^;)]+)", grace},
	} {
		m := regexp.MustCompile(c.re).FindSubmatch(c.text)
		if m == nil {
			t.Errorf("%s: nothing matches %q: does it still state the default?", c.where, c.re)
		} else if string(m[1]) != c.want {
			t.Errorf("%s: %q states the default as %s; the flag's is %s", c.where, m[0], m[1], c.want)
		}
	}
}
