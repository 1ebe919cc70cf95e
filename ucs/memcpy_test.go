package ucs

import (
	"bytes"
	"testing"
)

func TestMemcpy(t *testing.T) {
	for _, tt := range []struct{ dst, src int }{
		{0, 0}, {10, 5}, {5, 10}, {memcpyChunk, memcpyChunk}, {memcpyChunk + 1, memcpyChunk + 1},
		{3*memcpyChunk + 7, 3*memcpyChunk + 7}, {2 * memcpyChunk, 3 * memcpyChunk},
	} {
		src := make([]byte, tt.src)
		for i := range src {
			src[i] = byte(i * 13)
		}
		dst := make([]byte, tt.dst)
		n := Memcpy(dst, src)
		if want := min(tt.dst, tt.src); n != want || !bytes.Equal(dst[:n], src[:n]) {
			t.Errorf("Memcpy(%d, %d) = %d or data differs", tt.dst, tt.src, n)
		}
	}
}

func BenchmarkMemcpy1MiB(b *testing.B) {
	src, dst := make([]byte, 1<<20), make([]byte, 1<<20)
	b.SetBytes(1 << 20)
	for b.Loop() {
		Memcpy(dst, src)
	}
}
