package ucs

import (
	"bytes"
	"fmt"
	"testing"
)

func TestMemcpy(t *testing.T) {
	rep := useRepMovsb
	defer func() { useRepMovsb = rep }()
	for _, useRep := range []bool{rep, false} {
		useRepMovsb = useRep
		for _, tt := range []struct{ dst, src int }{
			{0, 0}, {10, 5}, {5, 10}, {memcpyRepMin - 1, memcpyRepMin - 1}, {memcpyRepMin, memcpyRepMin + 3},
			{memcpyRepMin + 13, memcpyRepMin + 13}, {memcpyChunk, memcpyChunk}, {memcpyChunk + 1, memcpyChunk + 1},
			{3*memcpyChunk + 7, 3*memcpyChunk + 7}, {2 * memcpyChunk, 3 * memcpyChunk},
		} {
			t.Run(fmt.Sprintf("rep=%v/%d<-%d", useRep, tt.dst, tt.src), func(t *testing.T) {
				checkCopy(t, "Memcpy", Memcpy, tt.dst, tt.src)
			})
		}
	}
}

// TestMemcpyOverlap copies within one buffer, forwards and backwards, as
// copy does.
func TestMemcpyOverlap(t *testing.T) {
	const n = 3 * memcpyRepMin
	for _, shift := range []int{-4097, -1, 1, 64, 4097} {
		t.Run(fmt.Sprint(shift), func(t *testing.T) {
			buf := make([]byte, n+4*4096)
			for i := range buf {
				buf[i] = byte(i * 7)
			}
			want := append([]byte(nil), buf...)
			src, dst := 8192, 8192+shift
			copy(want[dst:dst+n], want[src:src+n])
			Memcpy(buf[dst:dst+n], buf[src:src+n])
			if !bytes.Equal(buf, want) {
				t.Errorf("overlapping Memcpy by %d differs from copy", shift)
			}
		})
	}
}

func BenchmarkMemcpy(b *testing.B) {
	for _, n := range []int{16 << 10, 64 << 10, 1 << 20} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			src, dst := make([]byte, n), make([]byte, n)
			b.SetBytes(int64(n))
			for b.Loop() {
				Memcpy(dst, src)
			}
		})
	}
}
