package launcher

import (
	"bytes"
	"io"
	"sync"
	"sync/atomic"
)

// maxLine is the longest line forwarded in one piece. Longer lines are
// forwarded in pieces of this size, which other PEs' lines may separate.
const maxLine = 64 << 10

// lineWriter forwards what a PE writes to dst one whole line at a time,
// each line preceded by prefix. The lock mu is shared by all the
// lineWriters of a job, so that lines of different PEs, and of the stdout
// and stderr of one PE, never mix within a line.
type lineWriter struct {
	mu     *sync.Mutex
	dst    io.Writer
	prefix []byte
	// tagOn, when set, says whether prefix is used yet: the output of a job
	// that was not asked to be tagged is tagged from the moment the job
	// fails (see group.tagFromNow), or a PE's crash report starts: the
	// report is then shown once, tagged as it comes.
	tagOn *atomic.Bool
	// last, when set, keeps the last lines written (under mu), to be shown
	// again, tagged, when the PE fails (see group.replay).
	last *lastLines
	buf  []byte // the partial line not forwarded yet
	// midLine is true when a piece of an overlong line was forwarded, so
	// that its continuation gets no prefix.
	midLine bool
	// threads, when set, watches the lines for the runtime's report that
	// it could not create a thread, and puts one line naming the limits in
	// place of the crash dump that follows.
	threads *threadWatch
}

// Write implements io.Writer. It never fails: a PE must not die because
// the launcher's output is gone.
func (w *lineWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			w.buf = append(w.buf, p...)
			if len(w.buf) >= maxLine {
				w.emit(w.buf, false)
				w.buf = w.buf[:0]
			}
			break
		}
		if len(w.buf) > 0 {
			w.buf = append(w.buf, p[:i+1]...)
			w.emit(w.buf, true)
			w.buf = w.buf[:0]
		} else {
			w.emit(p[:i+1], true)
		}
		p = p[i+1:]
	}
	return n, nil
}

// tagged reports whether the lines get the prefix.
func (w *lineWriter) tagged() bool {
	return len(w.prefix) > 0 && (w.tagOn == nil || w.tagOn.Load())
}

// emit writes one line (or a piece of one) under the shared lock.
func (w *lineWriter) emit(line []byte, complete bool) {
	if w.threads != nil && !w.midLine {
		// Once the dump started, midLine stays false: every piece comes
		// here and is dropped.
		if line = w.threads.line(line); line == nil {
			return
		}
		complete = complete || w.threads.hit
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.last != nil && w.last.add(line, w.midLine) && w.tagOn != nil {
		w.tagOn.Store(true)
	}
	if !w.midLine && w.tagged() {
		// One Write per line: dst may be unbuffered and shared.
		out := make([]byte, 0, len(w.prefix)+len(line))
		out = append(append(out, w.prefix...), line...)
		w.dst.Write(out)
	} else {
		w.dst.Write(line)
	}
	w.midLine = !complete
}

// flush forwards the last partial line, if any. With a prefix (tagged
// output) it ends the line with a newline so that the next tagged line
// starts on its own.
func (w *lineWriter) flush() {
	if len(w.buf) == 0 {
		if w.midLine && w.tagged() {
			w.emit([]byte("\n"), true)
		}
		return
	}
	if w.tagged() {
		w.buf = append(w.buf, '\n')
	}
	w.emit(w.buf, true)
	w.buf = nil
}

// The lines of a PE that lastLines keeps: the last replayLines of them, each
// cut to replayLineMax bytes, or, when the PE's runtime crashed, the first
// replayLines of its crash report, which say why, where the goroutine
// stacks that follow do not.
const (
	replayLines   = 20
	replayLineMax = 512
)

// crashStarts begin the lines with which the Go runtime starts a crash
// report.
var crashStarts = [][]byte{[]byte("panic: "), []byte("fatal error: ")}

// lastLines keeps the last lines a PE wrote, on both streams in the order
// written, for a replay when it fails (the crash report, tagged as it
// comes, needs none). Its lineWriters call add under their shared lock;
// lines reads it once they are flushed.
type lastLines struct {
	ring  [replayLines][]byte // reused buffers
	next  int                 // slot of the next line
	n     int                 // lines kept, up to replayLines
	crash [][]byte            // from the first line of a crash report on
}

// add keeps one line (or a piece of an overlong one: cont says it
// continues the previous piece, which then stands for both). It reports
// whether the line starts the PE's crash report.
func (l *lastLines) add(line []byte, cont bool) (crashStart bool) {
	if cont {
		return false
	}
	line = bytes.TrimSuffix(line, []byte("\n"))
	if len(line) > replayLineMax {
		line = line[:replayLineMax]
	}
	switch {
	case l.crash != nil:
		if len(l.crash) < replayLines {
			l.crash = append(l.crash, bytes.Clone(line))
		}
	case hasAnyPrefix(line, crashStarts):
		l.crash = [][]byte{bytes.Clone(line)}
		crashStart = true
	}
	l.ring[l.next] = append(l.ring[l.next][:0], line...)
	l.next = (l.next + 1) % replayLines
	l.n = min(l.n+1, replayLines)
	return crashStart
}

// lines returns the lines to show: the start of the crash report, or else
// the last lines, oldest first.
func (l *lastLines) lines() [][]byte {
	if l.crash != nil {
		return l.crash
	}
	out := make([][]byte, 0, l.n)
	for i := range l.n {
		out = append(out, l.ring[(l.next-l.n+i+replayLines)%replayLines])
	}
	return out
}

func hasAnyPrefix(b []byte, prefixes [][]byte) bool {
	for _, p := range prefixes {
		if bytes.HasPrefix(b, p) {
			return true
		}
	}
	return false
}
