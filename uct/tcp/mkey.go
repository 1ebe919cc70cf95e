package tcp

import (
	"encoding/binary"
	"fmt"

	"github.com/goshmem/goshmem/ucs"
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

const (
	mkeyMagic   uint32 = 0x4b545347 // "GSTK"
	mkeyVersion uint16 = 1
)

// mkey is a decoded tcp key.
type mkey struct {
	id     uint64
	addr   uint64
	length uint64
	token  uint64
}

// encode packs k.
func (k *mkey) encode() []byte {
	b := make([]byte, MkeyPackedSize)
	binary.LittleEndian.PutUint32(b[0:], mkeyMagic)
	binary.LittleEndian.PutUint16(b[4:], mkeyVersion)
	binary.LittleEndian.PutUint64(b[8:], k.id)
	binary.LittleEndian.PutUint64(b[16:], k.addr)
	binary.LittleEndian.PutUint64(b[24:], k.length)
	binary.LittleEndian.PutUint64(b[32:], k.token)
	return b
}

// decodeMkey decodes a packed key strictly: anything but a key of the exact
// size, magic and version, with zero reserved bits, non-zero id and token,
// and a non-empty range below 2^57 fails with ucs.ErrInvalidParam.
func decodeMkey(b []byte) (mkey, error) {
	bad := func(why string, args ...any) (mkey, error) {
		return mkey{}, fmt.Errorf("uct/tcp: packed key: %s: %w", fmt.Sprintf(why, args...), ucs.ErrInvalidParam)
	}
	if len(b) != MkeyPackedSize {
		return bad("%d bytes, want %d", len(b), MkeyPackedSize)
	}
	if m := binary.LittleEndian.Uint32(b); m != mkeyMagic {
		return bad("magic %#x", m)
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != mkeyVersion {
		return bad("version %d", v)
	}
	if r := binary.LittleEndian.Uint16(b[6:]); r != 0 {
		return bad("reserved bits %#x", r)
	}
	k := mkey{
		id:     binary.LittleEndian.Uint64(b[8:]),
		addr:   binary.LittleEndian.Uint64(b[16:]),
		length: binary.LittleEndian.Uint64(b[24:]),
		token:  binary.LittleEndian.Uint64(b[32:]),
	}
	switch {
	case k.id == 0:
		return bad("zero key id")
	case k.token == 0:
		return bad("zero token")
	case k.length == 0:
		return bad("zero length")
	case k.addr == 0 || k.addr >= maxAddr || k.length > maxAddr-k.addr:
		return bad("range %#x+%d", k.addr, k.length)
	}
	return k, nil
}

// contains reports whether [raddr, raddr+n) lies inside the key's range.
func (k *mkey) contains(raddr, n uint64) bool {
	return raddr >= k.addr && raddr-k.addr <= k.length && n <= k.length-(raddr-k.addr)
}
