package tcp

import (
	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct/internal/base"
)

// MkeyPackedSize is the length of a key packed by the tcp MD.
//
// Layout, little-endian:
//
//	0  magic   uint32  "GSTK"
//	4  version uint16  1
//	6  (zero)  uint16
//	8  id      uint64  random key id, the name of the registration
//	16 address uint64  base address of the registered range
//	24 length  uint64  its length in bytes
//	32 token   uint64  random token that every put must carry
const MkeyPackedSize = 40

// mkeyFormat is the layout of a packed tcp key (see MkeyPackedSize).
var mkeyFormat = base.Format{Name: "uct/tcp: packed key", Size: MkeyPackedSize, Magic: 0x4b545347, Versions: []uint16{1}, Err: ucs.ErrInvalidParam}

// mkey is a decoded tcp key.
type mkey struct {
	id     uint64
	addr   uint64
	length uint64
	token  uint64
}

// fields are the fields of the packed key, in order.
func (k *mkey) fields() []any { return []any{&k.id, &k.addr, &k.length, &k.token} }

// encode packs k.
func (k *mkey) encode() []byte { return k.appendTo(nil) }

// appendTo appends the packing of k to dst.
func (k *mkey) appendTo(dst []byte) []byte {
	return mkeyFormat.Append(dst, 1, k.fields()...)
}

// decodeMkey decodes a packed key strictly: anything but a key of the exact
// size, magic and version, with zero reserved bits, non-zero id and token,
// and a non-empty range below 2^57 fails with ucs.ErrInvalidParam.
func decodeMkey(b []byte) (k mkey, err error) {
	// The fields listed, not appended to k.fields(): the list, k and the
	// checks then stay on the stack (a sender unpacks a key per put).
	_, err = mkeyFormat.Decode(b, &k.id, &k.addr, &k.length, &k.token,
		base.CheckNonZero("key id", &k.id), base.CheckNonZero("token", &k.token), base.CheckRange(&k.addr, &k.length))
	return k, err
}

// contains reports whether [raddr, raddr+n) lies inside the key's range.
func (k *mkey) contains(raddr, n uint64) bool {
	return raddr >= k.addr && raddr-k.addr <= k.length && n <= k.length-(raddr-k.addr)
}
