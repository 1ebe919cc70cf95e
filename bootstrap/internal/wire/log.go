package wire

import (
	"bytes"
	"io"
	"log"
	"os"
	"strings"

	"github.com/goshmem/goshmem/ucs"
)

// EnvDebug is bootstrap.EnvDebug: when set to a non-empty value other than
// "0", the log of a PE's or an agent's membership shows at ucs.LogPrint.
const EnvDebug = "GOSHMEM_DEBUG"

// DebugLogger returns the logger of a member or an agent, for memberlist
// and the bootstrap's own diagnostics: its lines, prefixed with prefix and
// the time, go to l (nil: ucs.DefaultLogger()) at LogDebug or their own
// level if less important, so that they show at UCX_LOG_LEVEL=debug; when
// GOSHMEM_DEBUG is set, at LogPrint, so that they all show.
func DebugLogger(l ucs.Logger, prefix string) *log.Logger {
	w := LevelWriter{Logger: ucs.LoggerOrDefault(l), Floor: ucs.LogDebug}
	if v := os.Getenv(EnvDebug); v != "" && v != "0" {
		w.Force = true
	}
	return log.New(w, prefix, log.LstdFlags|log.Lmicroseconds)
}

// LevelWriter passes the lines of a *log.Logger (memberlist writes to
// one) to a ucs.Logger, at the level their memberlist tag names ([ERR],
// [WARN], [INFO], [DEBUG]; LogInfo without one), made no more important
// than Floor; or, when Force is set, at LogPrint.
type LevelWriter struct {
	Logger ucs.Logger
	Floor  ucs.LogLevel
	Force  bool
}

// Write passes the line p on, at its level.
func (w LevelWriter) Write(p []byte) (int, error) {
	level := ucs.LogPrint
	if !w.Force {
		level = max(lineLevel(p), w.Floor)
	}
	if w.Logger.Enabled(level) {
		w.Logger.Logf(level, "%s", strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

// lineLevel returns the level that memberlist's tag in line names.
func lineLevel(line []byte) ucs.LogLevel {
	for _, t := range []struct {
		tag   string
		level ucs.LogLevel
	}{{"[ERR]", ucs.LogError}, {"[WARN]", ucs.LogWarn}, {"[INFO]", ucs.LogInfo}, {"[DEBUG]", ucs.LogDebug}} {
		if bytes.Contains(line, []byte(t.tag)) {
			return t.level
		}
	}
	return ucs.LogInfo
}

// DiscardLogger returns a logger that writes nowhere.
func DiscardLogger() *log.Logger { return log.New(io.Discard, "", 0) }

// HostName returns this host's name, cut to limit.
func HostName(limit int) string {
	h, _ := os.Hostname()
	if len(h) > limit {
		h = h[:limit]
	}
	return h
}
