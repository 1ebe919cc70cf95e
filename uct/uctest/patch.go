package uctest

import (
	"encoding/binary"
	"fmt"
)

// Patched returns a copy of b with v written little endian in size bytes
// (1, 2, 4 or 8) at off: a forged packed key or address, for the tests of
// a transport's decoders. It panics for another size.
func Patched(b []byte, off, size int, v uint64) []byte {
	b = append([]byte(nil), b...)
	switch size {
	case 1:
		b[off] = byte(v)
	case 2:
		binary.LittleEndian.PutUint16(b[off:], uint16(v))
	case 4:
		binary.LittleEndian.PutUint32(b[off:], uint32(v))
	case 8:
		binary.LittleEndian.PutUint64(b[off:], v)
	default:
		panic(fmt.Sprintf("uctest.Patched: size %d", size))
	}
	return b
}
