package ucs

import (
	"errors"
	"strings"
	"testing"
)

func TestParseLogLevel(t *testing.T) {
	tests := []struct {
		in   string
		want LogLevel
		ok   bool
	}{
		{"fatal", LogFatal, true},
		{"error", LogError, true},
		{"warn", LogWarn, true},
		{"WARN", LogWarn, true},
		{" diag ", LogDiag, true},
		{"info", LogInfo, true},
		{"debug", LogDebug, true},
		{"trace", LogTrace, true},
		{"req", LogTraceReq, true},
		{"trace_req", LogTraceReq, true},
		{"data", LogTraceData, true},
		{"async", LogTraceAsync, true},
		{"func", LogTraceFunc, true},
		{"TRACE_POLL", LogTracePoll, true},
		{"print", LogPrint, true},
		{"", DefaultLogLevel, false},
		{"warning", DefaultLogLevel, false},
		{"3", DefaultLogLevel, false},
		{"trace_", DefaultLogLevel, false},
	}
	for _, tt := range tests {
		got, err := ParseLogLevel(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseLogLevel(%q) = %v, %v; want %v, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidParam) {
			t.Errorf("ParseLogLevel(%q) error %v is not ErrInvalidParam", tt.in, err)
		}
		if tt.ok {
			if back, err := ParseLogLevel(got.String()); err != nil || back != got {
				t.Errorf("ParseLogLevel(%v.String()) = %v, %v", got, back, err)
			}
		}
	}
}

func TestLogLevelFromEnv(t *testing.T) {
	for _, tt := range []struct {
		v    string
		want LogLevel
		ok   bool
	}{{"", LogWarn, true}, {"debug", LogDebug, true}, {"loud", LogWarn, false}} {
		t.Setenv(LogLevelEnv, tt.v)
		got, err := LogLevelFromEnv()
		if got != tt.want || (err == nil) != tt.ok {
			t.Errorf("UCX_LOG_LEVEL=%q: %v, %v; want %v, ok %v", tt.v, got, err, tt.want, tt.ok)
		}
	}
}

func TestLoggerFilters(t *testing.T) {
	var b strings.Builder
	l := NewLogger(&b, "p: ", LogWarn)
	l.Logf(LogFatal, "fatal %d", 1)
	l.Logf(LogError, "error")
	l.Logf(LogWarn, "warn\n")
	l.Logf(LogDiag, "diag")
	l.Logf(LogDebug, "debug")
	l.Logf(LogTracePoll, "poll")
	l.Logf(LogPrint, "report\nof two lines")
	want := "p: fatal 1\np: error\np: warn\np: report\nof two lines\n"
	if b.String() != want {
		t.Errorf("logger at warn wrote %q, want %q", b.String(), want)
	}
	for level, want := range map[LogLevel]bool{LogFatal: true, LogWarn: true, LogDiag: false, LogTrace: false, LogPrint: true} {
		if got := l.Enabled(level); got != want {
			t.Errorf("Enabled(%v) = %v at warn, want %v", level, got, want)
		}
	}
	d := DiscardLogger()
	if d.Enabled(LogFatal) || d.Enabled(LogPrint) {
		t.Error("DiscardLogger enables a level")
	}
	d.Logf(LogFatal, "nothing")
}

func TestLogfAtFeedsALimiter(t *testing.T) {
	var b strings.Builder
	l := NewLogger(&b, "", LogWarn)
	lim := NewLogLimiter("warnings", 2, 1<<40, LogfAt(l, LogWarn))
	for range 5 {
		lim.Logf("bad message")
	}
	lim.Flush()
	if got := strings.Count(b.String(), "bad message"); got != 2 {
		t.Errorf("%d lines written through the limiter, want 2:\n%s", got, b.String())
	}
	if !strings.Contains(b.String(), "3 more warnings not logged") {
		t.Errorf("no summary in %q", b.String())
	}
	b.Reset()
	LogfAt(l, LogDebug)("hidden")
	if b.Len() != 0 {
		t.Errorf("a debug line at warn wrote %q", b.String())
	}
}

// TestLoggerOffCostsNothing: a line of a level that is off, tested with
// Enabled as hot paths do, allocates nothing.
func TestLoggerOffCostsNothing(t *testing.T) {
	l := NewLogger(nil, "", LogWarn)
	x := 42
	if n := testing.AllocsPerRun(100, func() {
		if l.Enabled(LogDebug) {
			l.Logf(LogDebug, "x=%d", x)
		}
	}); n != 0 {
		t.Errorf("%v allocations per disabled line, want 0", n)
	}
}
