package ucs

import (
	"encoding/binary"
	"unsafe"
)

// Copy copies src into dst like copy and returns the number of bytes
// copied, for the data of messages, whatever their size: an 8-byte word
// (the usual payload of a latency-bound message) moves in one load and one
// store, inline, where copy calls the runtime's memmove (about 30
// instructions for it); from MemcpyMin on it is Memcpy; between, copy. A
// copy of a slice onto itself (a PE's collective into its own buffer)
// returns at once. Overlapping slices are copied correctly, as by copy.
func Copy(dst, src []byte) int {
	if len(src) == 8 && len(dst) >= 8 {
		binary.LittleEndian.PutUint64(dst, binary.LittleEndian.Uint64(src))
		return 8
	}
	return copyAny(dst, src)
}

// copyAny is Copy for other lengths, kept out of it so that Copy is
// inlined.
//
//go:noinline
func copyAny(dst, src []byte) int {
	if unsafe.SliceData(dst) == unsafe.SliceData(src) {
		return min(len(dst), len(src))
	}
	if len(src) >= MemcpyMin {
		return Memcpy(dst, src)
	}
	return copy(dst, src)
}
