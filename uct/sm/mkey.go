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
//	4  version uint16  1: a memfd segment; 2: a named /dev/shm segment
//	6  (zero)  uint16
//	8  pid     uint32  process that allocated the segment
//	12 fd      int32   version 1: its memfd descriptor number there;
//	                   version 2: zero
//	16 id      uint64  random segment id (in the memfd name, or in the
//	                   file name /dev/shm/goshmem-<pid>-<id, 16 hex digits>)
//	24 length  uint64  bytes of the segment
//	32 address uint64  base address of the segment in that process
//
// A version 2 key names its file by the pid and the id: the path is not
// carried, so no key can make a peer open anything but such a file.
const MkeyPackedSize = 40

const (
	mkeyMagic   uint32 = 0x58505347 // "GSPX"
	mkeyVersion uint16 = 1          // memfd segment
	// mkeyVersionNamed is the version of keys of named /dev/shm segments
	// (USE_SHM_OPEN).
	mkeyVersionNamed uint16 = 2
	maxPid                  = 1 << 22 // PID_MAX_LIMIT
	maxAddr                 = 1 << 57 // above any user address (5-level paging)
)

// mkey is a decoded posix key.
type mkey struct {
	pid    uint32
	fd     int32
	id     uint64
	length uint64
	addr   uint64
	named  bool // a named /dev/shm segment (version 2); fd is then 0
}

// encode packs k.
func (k *mkey) encode() []byte {
	b := make([]byte, MkeyPackedSize)
	binary.LittleEndian.PutUint32(b[0:], mkeyMagic)
	v, fd := mkeyVersion, k.fd
	if k.named {
		v, fd = mkeyVersionNamed, 0
	}
	binary.LittleEndian.PutUint16(b[4:], v)
	binary.LittleEndian.PutUint32(b[8:], k.pid)
	binary.LittleEndian.PutUint32(b[12:], uint32(fd))
	binary.LittleEndian.PutUint64(b[16:], k.id)
	binary.LittleEndian.PutUint64(b[24:], k.length)
	binary.LittleEndian.PutUint64(b[32:], k.addr)
	return b
}

// decodeMkey decodes a packed key strictly: anything but a key of the exact
// size, magic and a known version, with a valid pid and descriptor (zero for
// a named segment), a non-zero segment id, and a non-empty range that lies
// below 2^57 (above any user address) fails with ucs.ErrInvalidParam.
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
	v := binary.LittleEndian.Uint16(b[4:])
	if v != mkeyVersion && v != mkeyVersionNamed {
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
		named:  v == mkeyVersionNamed,
	}
	switch {
	case k.pid == 0 || k.pid >= maxPid:
		return bad("pid %d", k.pid)
	case k.fd < 0 || (k.named && k.fd != 0):
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
