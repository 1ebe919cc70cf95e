package uctest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
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

// BadKey is a malformed packed key, named for its subtest.
type BadKey struct {
	Name string
	Key  []byte
}

// CheckBadKeys checks that decode (a transport's key decoder) and
// comp.RkeyUnpack reject with ucs.ErrInvalidParam the empty key, the
// well-formed key good one byte short and one byte long, and each of bad,
// each in a subtest named after it.
func CheckBadKeys(t *testing.T, comp uct.Component, good []byte, decode func(key []byte) error, bad ...BadKey) {
	t.Helper()
	keys := append([]BadKey{
		{"empty", nil},
		{"short", good[:len(good)-1]},
		{"long", append(append([]byte(nil), good...), 0)},
	}, bad...)
	for _, k := range keys {
		t.Run(k.Name, func(t *testing.T) {
			if err := decode(k.Key); !errors.Is(err, ucs.ErrInvalidParam) {
				t.Errorf("decode err = %v, want ErrInvalidParam", err)
			}
			if rk, err := comp.RkeyUnpack(k.Key); !errors.Is(err, ucs.ErrInvalidParam) {
				t.Errorf("RkeyUnpack err = %v, want ErrInvalidParam", err)
				if err == nil {
					comp.RkeyRelease(rk)
				}
			}
		})
	}
}
