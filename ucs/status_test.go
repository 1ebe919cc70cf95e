package ucs

import (
	"errors"
	"fmt"
	"testing"
)

func TestStatusIsError(t *testing.T) {
	tests := []struct {
		s     Status
		isErr bool
		text  string
	}{
		{OK, false, "Success"},
		{InProgress, false, "Operation in progress"},
		{ErrNoMemory, true, "Out of memory"},
		{ErrNoResource, true, "No resources are available to initiate the operation"},
		{ErrConnectionReset, true, "Connection reset by remote peer"},
		{ErrFirstLinkFailure - 3, true, "Link failure"},
		{ErrFirstEndpointFailure - 1, true, "Endpoint failure"},
		{Status(-99), true, "Unknown error -99"},
	}
	for _, tt := range tests {
		if got := tt.s.IsErr(); got != tt.isErr {
			t.Errorf("%d.IsErr() = %v, want %v", tt.s, got, tt.isErr)
		}
		if got := tt.s.Error(); got != tt.text {
			t.Errorf("%d.Error() = %q, want %q", tt.s, got, tt.text)
		}
	}
	wrapped := fmt.Errorf("mem map: %w", ErrNoMemory)
	if !errors.Is(wrapped, ErrNoMemory) {
		t.Error("errors.Is does not see a wrapped status")
	}
	if errors.Is(wrapped, ErrIOError) {
		t.Error("errors.Is matches a different status")
	}
	var s Status
	if !errors.As(wrapped, &s) || s != ErrNoMemory {
		t.Errorf("errors.As gave %v", s)
	}
	if OK.Err() != nil || ErrBusy.Err() != ErrBusy {
		t.Error("Err() mapping wrong")
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
		err  bool
	}{
		{"0", 0, false},
		{"4096", 4096, false},
		{"1k", 1 << 10, false},
		{"8K", 8 << 10, false},
		{"512m", 512 << 20, false},
		{"1G", 1 << 30, false},
		{"2gb", 2 << 30, false},
		{"1t", 1 << 40, false},
		{"inf", 1<<64 - 1, false},
		{"", 0, true},
		{"G", 0, true},
		{"-1", 0, true},
		{"1x", 0, true},
		{"99999999999999999999G", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, err=%v", tt.in, got, err, tt.want, tt.err)
		}
		if err != nil && !errors.Is(err, ErrInvalidParam) {
			t.Errorf("ParseSize(%q) error %v is not ErrInvalidParam", tt.in, err)
		}
	}
}

func TestParseAllowList(t *testing.T) {
	tests := []struct {
		in     string
		names  []string
		negate bool
		err    bool
	}{
		{"all", []string{"all"}, false, false},
		{"sm,self", []string{"sm", "self"}, false, false},
		{"^tcp", []string{"tcp"}, true, false},
		{" tcp , ,self ", []string{"tcp", "self"}, false, false},
		{"^", nil, true, true},
	}
	for _, tt := range tests {
		l, err := ParseAllowList(tt.in)
		if (err != nil) != tt.err {
			t.Errorf("ParseAllowList(%q) err = %v", tt.in, err)
			continue
		}
		if tt.err {
			continue
		}
		if fmt.Sprint(l.Names) != fmt.Sprint(tt.names) || l.Negate != tt.negate {
			t.Errorf("ParseAllowList(%q) = %+v", tt.in, l)
		}
	}
	l, _ := ParseAllowList("^tcp")
	if l.Allows(func(n string) bool { return n == "tcp" }) {
		t.Error("^tcp allows tcp")
	}
	if !l.Allows(func(n string) bool { return n == "sm" }) {
		t.Error("^tcp rejects sm")
	}
}

func TestConfig(t *testing.T) {
	t.Setenv("GSTEST_B", "from-env")
	c := ReadConfig("GSTEST_", []ConfigField{{"A", "1", "a"}, {"B", "2", "b"}})
	if c.Get("A") != "1" || c.Get("B") != "from-env" {
		t.Fatalf("values %q %q", c.Get("A"), c.Get("B"))
	}
	if err := c.Modify("A", "9"); err != nil || c.Get("A") != "9" {
		t.Fatalf("Modify: %v", err)
	}
	if err := c.Modify("Z", "1"); !errors.Is(err, ErrNoElem) {
		t.Fatalf("Modify unknown: %v", err)
	}
	for _, tt := range []struct {
		in   string
		want bool
		err  bool
	}{{"yes", true, false}, {"n", false, false}, {"maybe", false, true}} {
		got, err := ParseBool(tt.in)
		if got != tt.want || (err != nil) != tt.err {
			t.Errorf("ParseBool(%q) = %v, %v", tt.in, got, err)
		}
	}
	if d, err := ParseDuration("10ms"); err != nil || d.Milliseconds() != 10 {
		t.Errorf("ParseDuration: %v %v", d, err)
	}
	if d, err := ParseDuration("2"); err != nil || d.Seconds() != 2 {
		t.Errorf("ParseDuration(2): %v %v", d, err)
	}
}

func TestConfigSizeIn(t *testing.T) {
	c := ReadConfig("GSTEST_", []ConfigField{{"N", "", "n"}, {"M", "64k", "m"}, {"B", "x", "b"}})
	for _, tt := range []struct {
		name    string
		want    int
		wantErr bool
	}{{"N", 7, false}, {"M", 64 << 10, false}, {"B", 0, true}} {
		got, err := c.SizeIn(tt.name, 7, 1, 1<<20)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("SizeIn(%s) = %d, %v", tt.name, got, err)
		}
	}
	if _, err := c.SizeIn("M", 7, 1, 1024); !errors.Is(err, ErrInvalidParam) {
		t.Errorf("out of range: %v", err)
	}
	var nilc *Config
	if v, err := nilc.SizeIn("M", 3, 1, 9); v != 3 || err != nil {
		t.Errorf("nil config: %d %v", v, err)
	}
}
