package tcp

import "sync"

// The buffer pool of the package.
//
// The buffers of active messages and bcopy frames come from free lists by
// size class (plain stacks: a sync.Pool of slices would allocate on every
// Put); larger ones are allocated.
var (
	bufClasses = [...]int{512, 16 << 10, 128 << 10}
	bufKeep    = [...]int{4096, 256, 64} // buffers a list keeps at most
	bufLists   [len(bufClasses)]struct {
		sync.Mutex
		free [][]byte
	}
)

// getBuf returns a buffer of n bytes.
func getBuf(n int) []byte {
	for k, c := range bufClasses {
		if n <= c {
			l := &bufLists[k]
			l.Lock()
			if m := len(l.free); m > 0 {
				b := l.free[m-1]
				l.free[m-1] = nil
				l.free = l.free[:m-1]
				l.Unlock()
				return b[:n]
			}
			l.Unlock()
			return make([]byte, n, c)
		}
	}
	return make([]byte, n)
}

// putBuf gives back a buffer from getBuf; others are left to the garbage
// collector.
func putBuf(b []byte) {
	for k, c := range bufClasses {
		if cap(b) == c {
			l := &bufLists[k]
			l.Lock()
			if len(l.free) < bufKeep[k] {
				l.free = append(l.free, b[:c])
			}
			l.Unlock()
			return
		}
	}
}
