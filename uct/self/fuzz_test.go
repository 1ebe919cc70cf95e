package self

import (
	"errors"
	"testing"

	"github.com/goshmem/goshmem/ucs"
)

// FuzzMkeyDecode checks that the self key decoder accepts exactly the keys
// of MkeyPackedSize bytes with the magic and non-zero pid and id, and fails
// every other input with ucs.ErrInvalidParam.
func FuzzMkeyDecode(f *testing.F) {
	good := encodeMkey()
	f.Add(good)
	f.Add([]byte{})
	f.Add(good[:8])
	f.Add(append(append([]byte(nil), good...), 1))
	f.Add(make([]byte, MkeyPackedSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		pid, id, err := decodeMkey(b)
		if err != nil {
			if !errors.Is(err, ucs.ErrInvalidParam) {
				t.Fatalf("decode error %v is not ErrInvalidParam", err)
			}
			return
		}
		if len(b) != MkeyPackedSize || pid == 0 || id == 0 {
			t.Fatalf("accepted %x", b)
		}
		if _, err := (&Component{}).RkeyUnpack(b); err != nil && !errors.Is(err, ucs.ErrUnreachable) {
			t.Fatalf("RkeyUnpack of a well-formed key: %v", err)
		}
	})
}

// FuzzEPAddrDecode checks that the EP address decoder accepts exactly the
// EPAddrLen-byte addresses with non-zero pid, iface id and EP id, and fails
// every other input with ucs.ErrInvalidAddr.
func FuzzEPAddrDecode(f *testing.F) {
	good := make([]byte, EPAddrLen)
	for k := range good {
		good[k] = byte(k + 1)
	}
	f.Add(good)
	f.Add([]byte{})
	f.Add(good[:IfaceAddrLen])
	f.Add(append(append([]byte(nil), good...), 1))
	f.Add(make([]byte, EPAddrLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		ifAddr, id, err := decodeEPAddr(b)
		if err != nil {
			if !errors.Is(err, ucs.ErrInvalidAddr) {
				t.Fatalf("decode error %v is not ErrInvalidAddr", err)
			}
			return
		}
		if len(b) != EPAddrLen || id == 0 || len(ifAddr) != IfaceAddrLen {
			t.Fatalf("accepted %x", b)
		}
	})
}
