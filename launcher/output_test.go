package launcher

import (
	"bytes"
	"strings"
	"sync"
	"testing"
)

func TestLineWriter(t *testing.T) {
	long := strings.Repeat("x", maxLine+10)
	tests := []struct {
		name   string
		prefix string
		writes []string
		want   string
	}{
		{"whole lines", "", []string{"a\nb\n"}, "a\nb\n"},
		{"split line", "", []string{"a", "b\nc", "d\n"}, "ab\ncd\n"},
		{"partial at end", "", []string{"a\nb"}, "a\nb"},
		{"tagged", "[pe 1] ", []string{"a\nb", "c\n"}, "[pe 1] a\n[pe 1] bc\n"},
		{"tagged partial at end", "[pe 1] ", []string{"a\nb"}, "[pe 1] a\n[pe 1] b\n"},
		{"tagged long line", "[pe 1] ", []string{long + "\nz\n"}, "[pe 1] " + long + "\n[pe 1] z\n"},
		{"tagged long partial", "[pe 1] ", []string{long}, "[pe 1] " + long + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			w := &lineWriter{mu: new(sync.Mutex), dst: &out, prefix: []byte(tt.prefix)}
			for _, s := range tt.writes {
				if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			w.flush()
			if got := out.String(); got != tt.want {
				t.Errorf("got %q, want %q", trunc(got), trunc(tt.want))
			}
		})
	}
}

func trunc(s string) string {
	if len(s) > 80 {
		return s[:40] + "..." + s[len(s)-40:]
	}
	return s
}
