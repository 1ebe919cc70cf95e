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
	// Onto itself, and onto itself shifted by one (overlapping, as copy).
	for _, n := range []int{8, 100, MemcpyMin + 3} {
		b := make([]byte, n+1)
		for i := range b {
			b[i] = byte(i)
		}
		if got := Copy(b[:n], b[:n]); got != n || b[n-1] != byte(n-1) {
			t.Errorf("Copy of %d bytes onto itself = %d, b[%d] = %d", n, got, n-1, b[n-1])
		}
		if got := Copy(b[1:], b[:n]); got != n || b[1] != 0 || b[n] != byte(n-1) {
			t.Errorf("Copy of %d bytes one byte on = %d, b[1] = %d, b[%d] = %d", n, got, b[1], n, b[n])
		}
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
