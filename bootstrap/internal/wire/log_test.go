package wire

import (
	"strings"
	"testing"

	"github.com/goshmem/goshmem/ucs"
)

// TestDebugLogger: memberlist's lines reach the member's logger at
// LogDebug or below, and at LogPrint with GOSHMEM_DEBUG set; a seed's
// logger gets them at their own level.
func TestDebugLogger(t *testing.T) {
	var b strings.Builder
	l := ucs.NewLogger(&b, "", ucs.LogWarn)
	t.Setenv(EnvDebug, "")
	DebugLogger(l, "pe-0: ").Printf("[WARN] memberlist: hidden at warn")
	if b.Len() != 0 {
		t.Errorf("a member's memberlist warning shows at warn: %q", b.String())
	}
	t.Setenv(EnvDebug, "1")
	DebugLogger(l, "pe-0: ").Printf("[DEBUG] memberlist: shown")
	if !strings.Contains(b.String(), "pe-0: ") || !strings.HasSuffix(b.String(), "[DEBUG] memberlist: shown\n") {
		t.Errorf("with %s set, the member's line is %q", EnvDebug, b.String())
	}
	for _, tt := range []struct {
		line string
		want ucs.LogLevel
	}{{"[ERR] x", ucs.LogError}, {"2026/01/01 [WARN] x", ucs.LogWarn}, {"[INFO] x", ucs.LogInfo}, {"[DEBUG] x", ucs.LogDebug}, {"x", ucs.LogInfo}} {
		if got := lineLevel([]byte(tt.line)); got != tt.want {
			t.Errorf("lineLevel(%q) = %v, want %v", tt.line, got, tt.want)
		}
	}
}
