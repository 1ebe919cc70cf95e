package shmem

import (
	"bytes"
	"testing"
)

// TestBlobExtra checks that the init blob carries SetInitExtra's bytes to
// PeerExtra, and that a blob without them decodes as before.
func TestBlobExtra(t *testing.T) {
	defer func(x []byte) { initExtra = x }(initExtra)
	for _, extra := range [][]byte{nil, {1}, bytes.Repeat([]byte{7}, 300)} {
		initExtra = extra
		b := encodeBlob([]byte("addr"), []byte("rkey!"), 0x1000, 0x2000)
		addr, rkey, base, size, err := decodeBlob(b)
		if err != nil || string(addr) != "addr" || string(rkey) != "rkey!" || base != 0x1000 || size != 0x2000 {
			t.Fatalf("extra %d bytes: decodeBlob = %q %q %#x %#x %v", len(extra), addr, rkey, base, size, err)
		}
		if got := blobExtra(b); !bytes.Equal(got, extra) {
			t.Errorf("blobExtra = %v, want %v", got, extra)
		}
		if len(extra) > 0 {
			if _, _, _, _, err := decodeBlob(b[:len(b)-1]); err == nil {
				t.Errorf("extra %d bytes: a truncated blob decoded", len(extra))
			}
		}
	}
}
