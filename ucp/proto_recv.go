package ucp

import (
	"fmt"

	"github.com/goshmem/goshmem/ucs"
)

// The receive side that the two-sided protocols (tag matching and active
// messages) share: the reassembly of a message that arrives in fragments.
// What a family does with the data (a tag receive unpacks it or an
// unexpected message keeps it; an active message gathers it for its
// handler) is the fragment table's destination, its hook.

// fragKey names a sender's fragmented message or send: the sender and the
// message's or send's number.
type fragKey struct{ src, msg uint64 }

// inOrder counts data that arrives in order, in pieces: got of total bytes
// came.
type inOrder struct{ got, total int }

// take accounts for n bytes at off: ok when they are the next ones and fit
// in the rest, done when they were the last.
func (f *inOrder) take(off uint64, n int) (ok, done bool) {
	if off != uint64(f.got) || n > f.total-f.got {
		return false, false
	}
	f.got += n
	return true, f.got == f.total
}

// fragIn is a message arriving in fragments: its progress, and where its
// data goes.
type fragIn[D any] struct {
	inOrder
	dest D
}

// fragTable holds the messages arriving in fragments by sender and
// message number; its owner's lock guards it.
type fragTable[D any] map[fragKey]fragIn[D]

// begin records message k of total bytes, whose first fragment of n bytes
// goes to dest; done reports that this fragment was all of it (nothing is
// recorded). A message already in progress fails with ucs.ErrInvalidParam.
func (t fragTable[D]) begin(k fragKey, n, total int, dest D) (done bool, err error) {
	if _, dup := t[k]; dup {
		return false, fmt.Errorf("first fragment of message %d from %#x already in progress: %w", k.msg, k.src, ucs.ErrInvalidParam)
	}
	if n >= total {
		return true, nil
	}
	t[k] = fragIn[D]{inOrder{n, total}, dest}
	return false, nil
}

// route sends the next fragments of message k, in progress, to dest.
func (t fragTable[D]) route(k fragKey, dest D) {
	f := t[k]
	f.dest = dest
	t[k] = f
}

// next accounts for the fragment of n bytes at off of message k and
// returns the message: its destination, and its progress with this
// fragment (the last when got reaches total; the message is then
// forgotten). A fragment of no message, or not the next one, fails with
// ucs.ErrInvalidParam; lost then reports a message that was in progress:
// it is forgotten, and the caller ends its destination.
func (t fragTable[D]) next(k fragKey, off uint64, n int) (f fragIn[D], lost bool, err error) {
	f, found := t[k]
	if !found {
		return f, false, fmt.Errorf("fragment of %d bytes at %d of unknown message %d from %#x: %w", n, off, k.msg, k.src, ucs.ErrInvalidParam)
	}
	ok, done := f.take(off, n)
	if !ok {
		delete(t, k)
		return f, true, fmt.Errorf("fragment of %d bytes at %d of message %d from %#x, expected at %d of %d: %w", n, off, k.msg, k.src, f.got, f.total, ucs.ErrInvalidParam)
	}
	if done {
		delete(t, k)
	} else {
		t[k] = f
	}
	return f, false, nil
}
