package launcher

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/goshmem/goshmem/ucs"
)

func TestParseHosts(t *testing.T) {
	tests := []struct {
		in   string
		want []Host // nil: an error
	}{
		{"h1:4,h2:4", []Host{{"h1", 4}, {"h2", 4}}},
		{"h1", []Host{{"h1", 1}}},
		{"h1:2, h2 ,h1:3", []Host{{"h1", 5}, {"h2", 1}}},
		{"10.0.0.1:2", []Host{{"10.0.0.1", 2}}},
		{"[fe80::1]:2", []Host{{"fe80::1", 2}}},
		{"user@n1:8", []Host{{"user@n1", 8}}},
		{"h1:0", nil},
		{"h1:x", nil},
		{"h1,,h2", nil},
		{"", nil},
		{"-oProxyCommand=x:1", nil},
		{"h1;reboot:1", nil},
		{"h 1:1", nil},
	}
	for _, tt := range tests {
		got, err := ParseHosts(tt.in)
		if tt.want == nil {
			if err == nil || !errors.Is(err, ucs.ErrInvalidParam) {
				t.Errorf("ParseHosts(%q) = %v, %v; want an error wrapping ucs.ErrInvalidParam", tt.in, got, err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseHosts(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestReadHostfile(t *testing.T) {
	tests := []struct {
		name, content string
		want          []Host // nil: an error
		line          string // named in the error
	}{
		{"forms", "# cluster\nn1 slots=4\nn2:2\n\nn3   # one slot\nn1\n", []Host{{"n1", 5}, {"n2", 2}, {"n3", 1}}, ""},
		{"bad slots", "n1\nn2 slots=zero\n", nil, "line 2"},
		{"extra words", "n1 slots=2 max_slots=4\n", nil, "line 1"},
		{"empty", "# nothing\n", nil, ""},
		{"bad name", "n1\n-x\n", nil, "line 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "hosts")
			if err := os.WriteFile(f, []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := ReadHostfile(f)
			if tt.want == nil {
				if err == nil || !errors.Is(err, ucs.ErrInvalidParam) || !strings.Contains(err.Error(), tt.line) {
					t.Errorf("got %v, %v; want an error wrapping ucs.ErrInvalidParam naming %q", got, err, tt.line)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
	if _, err := ReadHostfile(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing host file: got %v, want os.ErrNotExist", err)
	}
}

func TestPlace(t *testing.T) {
	self, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	type pl struct {
		host  string
		ranks []int
		local bool
	}
	tests := []struct {
		name  string
		hosts []Host
		np    int
		want  []pl // nil: an error
		wantN int
	}{
		{"fill in order", []Host{{"h1", 2}, {"h2", 2}}, 3, []pl{{"h1", []int{0, 1}, false}, {"h2", []int{2}, false}}, 3},
		{"one per slot", []Host{{"h1", 2}, {"h2", 1}}, 0, []pl{{"h1", []int{0, 1}, false}, {"h2", []int{2}, false}}, 3},
		{"unused host", []Host{{"h1", 4}, {"h2", 4}}, 2, []pl{{"h1", []int{0, 1}, false}}, 2},
		{"too many", []Host{{"h1", 1}}, 2, nil, 0},
		{"this host under two names", []Host{{"localhost", 1}, {"h2", 1}, {self, 1}},
			0, []pl{{"localhost", []int{0, 2}, true}, {"h2", []int{1}, false}}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ps, n, err := place(tt.hosts, tt.np)
			if tt.want == nil {
				if !errors.Is(err, ucs.ErrInvalidParam) {
					t.Errorf("got %v, %v; want ucs.ErrInvalidParam", ps, err)
				}
				return
			}
			var got []pl
			for _, p := range ps {
				got = append(got, pl{p.host.Name, p.ranks, p.local})
			}
			if err != nil || n != tt.wantN || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, %d, %v; want %v, %d", got, n, err, tt.want, tt.wantN)
			}
		})
	}
}

func TestShellWord(t *testing.T) {
	tests := []struct{ in, want string }{
		{"/usr/bin/goshmem-run", "/usr/bin/goshmem-run"},
		{"/opt/my dir/goshmem-run", "'/opt/my dir/goshmem-run'"},
		{"/a/it's", `'/a/it'\''s'`},
		{"", "''"},
	}
	for _, tt := range tests {
		if got := shellWord(tt.in); got != tt.want {
			t.Errorf("shellWord(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
