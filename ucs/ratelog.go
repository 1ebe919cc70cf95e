package ucs

import (
	"sync"
	"sync/atomic"
	"time"
)

// LogLimiter keeps one kind of warning from flooding a log: of the lines
// offered to it, the first burst of each interval are written and the rest
// only counted; when an interval that held back lines ends, one summary line
// says how many. A peer that sends a stream of bad messages, or a stranger
// that opens connection after connection, thus costs a few lines per
// interval whatever its rate, and the count is still reported. It is safe
// for concurrent use.
type LogLimiter struct {
	what     string // what the lines report, for the summary ("refused connections")
	burst    int
	interval time.Duration
	logf     func(format string, args ...any)

	total atomic.Uint64 // lines offered since the limiter was made

	mu         sync.Mutex
	start      time.Time   // of the current interval; zero when none runs
	written    int         // lines written in it
	suppressed uint64      // lines held back in it
	timer      *time.Timer // writes the summary at the end of the interval
}

// NewLogLimiter returns a limiter that writes through logf at most burst
// lines (at least 1) of the kind what per interval (at least a
// millisecond), and a summary of the rest.
func NewLogLimiter(what string, burst int, interval time.Duration, logf func(format string, args ...any)) *LogLimiter {
	return &LogLimiter{what: what, burst: max(burst, 1), interval: max(interval, time.Millisecond), logf: logf}
}

// Logf writes the line, unless the current interval wrote its burst
// already: then it only counts it, for the interval's summary.
func (l *LogLimiter) Logf(format string, args ...any) {
	l.total.Add(1)
	l.mu.Lock()
	now := time.Now()
	if l.start.IsZero() || now.Sub(l.start) >= l.interval {
		if l.suppressed > 0 {
			l.summaryLocked() // the timer has not run yet
		}
		l.start, l.written = now, 0
	}
	if l.written < l.burst {
		l.written++
		l.mu.Unlock()
		l.logf(format, args...)
		return
	}
	l.suppressed++
	if l.timer == nil {
		l.timer = time.AfterFunc(l.interval-now.Sub(l.start), l.Flush)
	}
	l.mu.Unlock()
}

// Flush writes the summary of the lines held back so far, if any, now.
func (l *LogLimiter) Flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.suppressed > 0 {
		l.summaryLocked()
	}
}

// summaryLocked writes the summary and starts counting afresh; l.mu is
// held.
func (l *LogLimiter) summaryLocked() {
	l.logf("%d more %s not logged in the last %v (%d in all)", l.suppressed, l.what, time.Since(l.start).Round(time.Millisecond), l.total.Load())
	l.suppressed = 0
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
}

// Count returns the number of lines offered to the limiter, written or not.
func (l *LogLimiter) Count() uint64 { return l.total.Load() }
