package launcher

import (
	"bytes"
	"fmt"
	"io"
	"sync"
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
	buf    []byte // the partial line not forwarded yet
	// midLine is true when a piece of an overlong line was forwarded, so
	// that its continuation gets no prefix.
	midLine bool
	// threads, when set, watches the lines for the runtime's report that
	// it could not create a thread, and cuts the crash dump that follows.
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

// emit writes one line (or a piece of one) under the shared lock.
func (w *lineWriter) emit(line []byte, complete bool) {
	if w.threads != nil && !w.midLine && !w.threads.line(line) {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.midLine && len(w.prefix) > 0 {
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
	defer w.flushNote()
	if len(w.buf) == 0 {
		if w.midLine && len(w.prefix) > 0 {
			w.emit([]byte("\n"), true)
		}
		return
	}
	if len(w.prefix) > 0 {
		w.buf = append(w.buf, '\n')
	}
	w.emit(w.buf, true)
	w.buf = nil
}

// flushNote says how many lines of a crash dump were not forwarded.
func (w *lineWriter) flushNote() {
	if w.threads == nil || w.threads.dropped == 0 {
		return
	}
	note := fmt.Sprintf("goshmem-run: %d more lines of this crash dump not shown: the runtime could not create a thread\n", w.threads.dropped)
	w.threads.dropped = 0
	w.mu.Lock()
	defer w.mu.Unlock()
	w.dst.Write(append(append([]byte{}, w.prefix...), note...))
}
