package shmem

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestBlobRoundTrip checks that the init blob carries the heap's key, the
// regions' keys and SetInitExtra's bytes (to PeerExtra) as they were
// given, and that every truncated blob fails to decode (but the one
// without the extra bytes, which are optional).
func TestBlobRoundTrip(t *testing.T) {
	regions := []blobRegion{{rkey: []byte("region0"), base: 0x7f0000, size: 0x3000}, {rkey: []byte("r1"), base: 0x10, size: 8}}
	for _, tc := range []struct {
		name    string
		regions []blobRegion
		extra   []byte
	}{
		{"bare", nil, nil},
		{"extra", nil, []byte{1}},
		{"long extra", nil, bytes.Repeat([]byte{7}, 300)},
		{"regions", regions, nil},
		{"regions and extra", regions[:1], []byte("gshdata1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := initBlob{addr: []byte("addr"), rkey: []byte("rkey!"), base: 0x1000, size: 0x2000, regions: tc.regions, extra: tc.extra}
			b := encodeBlob(in)
			got, err := decodeBlob(b)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(in, got, cmp.AllowUnexported(initBlob{}, blobRegion{})); d != "" {
				t.Errorf("decodeBlob(encodeBlob(x)) differs (-x +got):\n%s", d)
			}
			if x := blobExtra(b); !bytes.Equal(x, tc.extra) {
				t.Errorf("blobExtra = %v, want %v", x, tc.extra)
			}
			bare := len(b) // the blob without the extra bytes, which decodes
			if len(tc.extra) > 0 {
				bare -= 4 + len(tc.extra)
			}
			for i := range b {
				if _, err := decodeBlob(b[:i]); err == nil && i != bare {
					t.Errorf("a blob truncated to %d of %d bytes decoded", i, len(b))
				}
			}
		})
	}
}
