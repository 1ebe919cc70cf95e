package sm

import (
	"encoding/binary"
	"fmt"

	"github.com/goshmem/goshmem/ucs"
)

// MkeyPackedSize is the length of a key packed by the posix MD.
//
// Layout, little-endian:
//
//	0  magic   uint32  "GSPX"
//	4  version uint16  1
//	6  (zero)  uint16
//	8  pid     uint32  process that allocated the segment
//	12 fd      int32   its memfd descriptor number there
//	16 id      uint64  random segment id (in the memfd name)
//	24 length  uint64  bytes of the segment
//	32 address uint64  base address of the segment in that process
const MkeyPackedSize = 40

const (
	mkeyMagic   uint32 = 0x58505347 // "GSPX"
	mkeyVersion uint16 = 1
	maxPid             = 1 << 22 // PID_MAX_LIMIT
	maxAddr            = 1 << 57 // above any user address (5-level paging)
)

// mkey is a decoded posix key.
type mkey struct {
	pid    uint32
	fd     int32
	id     uint64
	length uint64
	addr   uint64
}

// encode packs k.
func (k *mkey) encode() []byte {
	b := make([]byte, MkeyPackedSize)
	binary.LittleEndian.PutUint32(b[0:], mkeyMagic)
	binary.LittleEndian.PutUint16(b[4:], mkeyVersion)
	binary.LittleEndian.PutUint32(b[8:], k.pid)
	binary.LittleEndian.PutUint32(b[12:], uint32(k.fd))
	binary.LittleEndian.PutUint64(b[16:], k.id)
	binary.LittleEndian.PutUint64(b[24:], k.length)
	binary.LittleEndian.PutUint64(b[32:], k.addr)
	return b
}

// decodeMkey decodes a packed key strictly: anything but a key of the exact
// size, magic and version, with a valid pid and descriptor, a non-zero
// segment id, and a non-empty range that lies below 2^57 (above any user
// address) fails with ucs.ErrInvalidParam.
func decodeMkey(b []byte) (mkey, error) {
	bad := func(why string, args ...any) (mkey, error) {
		return mkey{}, fmt.Errorf("uct/sm: packed key: %s: %w", fmt.Sprintf(why, args...), ucs.ErrInvalidParam)
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
		pid:    binary.LittleEndian.Uint32(b[8:]),
		fd:     int32(binary.LittleEndian.Uint32(b[12:])),
		id:     binary.LittleEndian.Uint64(b[16:]),
		length: binary.LittleEndian.Uint64(b[24:]),
		addr:   binary.LittleEndian.Uint64(b[32:]),
	}
	switch {
	case k.pid == 0 || k.pid >= maxPid:
		return bad("pid %d", k.pid)
	case k.fd < 0:
		return bad("descriptor %d", k.fd)
	case k.id == 0:
		return bad("zero segment id")
	case k.length == 0:
		return bad("zero length")
	case k.addr == 0 || k.addr >= maxAddr || k.length > maxAddr-k.addr:
		return bad("range %#x+%d", k.addr, k.length)
	}
	return k, nil
}
