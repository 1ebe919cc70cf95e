package ucs

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
)

// LogLevel is the importance of a log line (ucs_log_level_t). A logger set
// to a level writes the lines of that level and of the more important ones
// (the lower values); LogPrint lines are written at every level.
type LogLevel int

// Log levels, in UCX's order.
const (
	LogFatal      LogLevel = iota // the process cannot go on
	LogError                      // an error the caller is also told of
	LogWarn                       // something is wrong, but the library goes on (the default)
	LogDiag                       // diagnostics: silent adjustments, errors handled inside
	LogInfo                       // information
	LogDebug                      // low-volume debugging
	LogTrace                      // high-volume debugging
	LogTraceReq                   // every send and receive request
	LogTraceData                  // the data of every request
	LogTraceAsync                 // asynchronous events
	LogTraceFunc                  // every function call
	LogTracePoll                  // every poll
	LogPrint      LogLevel = 13   // output the user asked for, written at every level
)

// DefaultLogLevel is the level of the default logger when UCX_LOG_LEVEL is
// not set.
const DefaultLogLevel = LogWarn

// logLevelNames are the names of the levels as UCX_LOG_LEVEL takes them
// (ucs_log_level_names), indexed by level.
var logLevelNames = [...]string{
	LogFatal:      "fatal",
	LogError:      "error",
	LogWarn:       "warn",
	LogDiag:       "diag",
	LogInfo:       "info",
	LogDebug:      "debug",
	LogTrace:      "trace",
	LogTraceReq:   "req",
	LogTraceData:  "data",
	LogTraceAsync: "async",
	LogTraceFunc:  "func",
	LogTracePoll:  "poll",
	LogPrint:      "print",
}

// String returns the level's UCX name ("warn", "req", ...).
func (l LogLevel) String() string {
	if l >= 0 && int(l) < len(logLevelNames) && logLevelNames[l] != "" {
		return logLevelNames[l]
	}
	return fmt.Sprintf("LogLevel(%d)", int(l))
}

// ParseLogLevel parses a level name as UCX_LOG_LEVEL takes it, in any
// case: fatal, error, warn, diag, info, debug, trace, req, data, async,
// func, poll (the trace levels also as trace_req ... trace_poll), and
// print. It fails with ErrInvalidParam for anything else.
func ParseLogLevel(s string) (LogLevel, error) {
	name := strings.ToLower(strings.TrimSpace(s))
	name = strings.TrimPrefix(name, "trace_")
	for l, n := range logLevelNames {
		if n != "" && n == name {
			return LogLevel(l), nil
		}
	}
	return DefaultLogLevel, fmt.Errorf("log level %q: want one of fatal, error, warn, diag, info, debug, trace, req, data, async, func, poll: %w", s, ErrInvalidParam)
}

// Logger receives the log lines of the library. Every layer (ucp, the uct
// transports, bootstrap, shmem) writes through the Logger it was given, and
// none writes to standard error by itself. Implementations must be safe for
// concurrent use.
type Logger interface {
	// Enabled reports whether lines of level are written. Code on a hot
	// path tests it before it formats anything, so that a line that is
	// not written costs nothing.
	Enabled(level LogLevel) bool
	// Logf formats a line as fmt.Sprintf does and writes it if level is
	// enabled. A line needs no trailing newline.
	Logf(level LogLevel, format string, args ...any)
}

// NewLogger returns a Logger that writes the lines of level and of the
// more important levels (and LogPrint lines) to w, each as prefix followed
// by the line and a newline, in one Write. It is safe for concurrent use.
func NewLogger(w io.Writer, prefix string, level LogLevel) Logger {
	return &writerLogger{w: w, prefix: prefix, level: level}
}

type writerLogger struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
	level  LogLevel
	buf    []byte
}

func (l *writerLogger) Enabled(level LogLevel) bool { return level <= l.level || level == LogPrint }

func (l *writerLogger) Logf(level LogLevel, format string, args ...any) {
	if !l.Enabled(level) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf[:0], l.prefix...)
	l.buf = fmt.Appendf(l.buf, format, args...)
	if len(l.buf) == 0 || l.buf[len(l.buf)-1] != '\n' {
		l.buf = append(l.buf, '\n')
	}
	l.w.Write(l.buf) // a log line that cannot be written has nowhere else to go
}

// DiscardLogger returns a Logger that writes nothing (Enabled is false for
// every level).
func DiscardLogger() Logger { return discardLogger{} }

type discardLogger struct{}

func (discardLogger) Enabled(LogLevel) bool         { return false }
func (discardLogger) Logf(LogLevel, string, ...any) {}

// LogLevelEnv is the environment variable that sets the default logger's
// level.
const LogLevelEnv = "UCX_LOG_LEVEL"

// defaultLogger is made at the first DefaultLogger call.
var defaultLogger = sync.OnceValue(func() Logger {
	level, err := LogLevelFromEnv()
	l := NewLogger(os.Stderr, "", level)
	if err != nil {
		l.Logf(LogWarn, "ucs: %v; the level is %v", err, level)
	}
	return l
})

// DefaultLogger returns the process's default logger, which the layers
// use when they are given none: it writes to standard error, without a
// prefix of its own (each layer begins its lines with its name), the lines
// of the level that UCX_LOG_LEVEL names (DefaultLogLevel when it is unset;
// an invalid value is reported once and taken as DefaultLogLevel). The
// variable is read once, at the first call.
func DefaultLogger() Logger { return defaultLogger() }

// LogLevelFromEnv returns the level that UCX_LOG_LEVEL names, and
// DefaultLogLevel when it is unset or empty. An invalid value yields
// DefaultLogLevel and ParseLogLevel's error.
func LogLevelFromEnv() (LogLevel, error) {
	v := os.Getenv(LogLevelEnv)
	if v == "" {
		return DefaultLogLevel, nil
	}
	level, err := ParseLogLevel(v)
	if err != nil {
		return DefaultLogLevel, fmt.Errorf("%s: %w", LogLevelEnv, err)
	}
	return level, nil
}

// LogfAt returns a function that writes its lines to l at level: the form
// a LogLimiter takes (NewLogLimiter's logf). A nil l means
// DefaultLogger().
func LogfAt(l Logger, level LogLevel) func(format string, args ...any) {
	if l == nil {
		l = DefaultLogger()
	}
	return func(format string, args ...any) { l.Logf(level, format, args...) }
}

// LoggerOrDefault returns l, or DefaultLogger() when l is nil.
func LoggerOrDefault(l Logger) Logger {
	if l == nil {
		return DefaultLogger()
	}
	return l
}
