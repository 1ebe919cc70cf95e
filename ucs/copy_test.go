package ucs

import (
	"bytes"
	"fmt"
	"testing"
)

// TestCopy checks Copy against copy for every way it takes: the 8-byte
// word (into a destination of 8 bytes, a longer one, and a shorter one,
// which copy cuts), other small lengths, and Memcpy's sizes.
func TestCopy(t *testing.T) {
	for _, tt := range []struct{ dst, src int }{
		{0, 0}, {8, 0}, {1, 1}, {7, 7}, {8, 8}, {16, 8}, {5, 8}, {0, 8}, {9, 9}, {8, 9}, {100, 64},
		{MemcpyMin, MemcpyMin}, {MemcpyMin + 5, MemcpyMin + 3},
	} {
		t.Run(fmt.Sprintf("%d<-%d", tt.dst, tt.src), func(t *testing.T) { checkCopy(t, "Copy", Copy, tt.dst, tt.src) })
	}
}

// checkCopy checks that fn, named name, copies a source of srcLen bytes
// into a destination of dstLen as copy does, and writes nothing past it.
func checkCopy(t *testing.T, name string, fn func(dst, src []byte) int, dstLen, srcLen int) {
	t.Helper()
	src := make([]byte, srcLen)
	for i := range src {
		src[i] = byte(i * 13)
	}
	// A guard byte past dst's end that fn must not touch.
	buf := make([]byte, dstLen+1)
	buf[dstLen] = 0xA5
	n := fn(buf[:dstLen], src)
	if want := min(dstLen, srcLen); n != want || !bytes.Equal(buf[:n], src[:n]) {
		t.Errorf("%s = %d (want %d) or the data differs", name, n, want)
	}
	if buf[dstLen] != 0xA5 {
		t.Errorf("%s wrote past dst", name)
	}
}
