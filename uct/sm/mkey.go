package sm

import (
	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct/internal/base"
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

// Versions of posix keys.
const (
	mkeyVersion      uint16 = 1 // memfd segment
	mkeyVersionNamed uint16 = 2 // named /dev/shm segment (USE_SHM_OPEN)
)

// mkeyFormat is the layout of a packed posix key (see MkeyPackedSize).
var mkeyFormat = base.Format{Name: "uct/sm: packed key", Size: MkeyPackedSize, Magic: 0x58505347,
	Versions: []uint16{mkeyVersion, mkeyVersionNamed}, Err: ucs.ErrInvalidParam}

// Bounds of pids and addresses in keys and addresses.
const (
	maxPid  = base.MaxPid
	maxAddr = base.MaxAddr
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
func (k *mkey) encode() []byte { return k.appendTo(nil) }

// appendTo appends the packing of k to dst.
func (k *mkey) appendTo(dst []byte) []byte {
	v, fd := mkeyVersion, k.fd
	if k.named {
		v, fd = mkeyVersionNamed, 0
	}
	return mkeyFormat.Append(dst, v, k.pid, fd, k.id, k.length, k.addr)
}

// decodeMkey decodes a packed key strictly: anything but a key of the exact
// size, magic and a known version, with a valid pid and descriptor (zero for
// a named segment), a non-zero segment id, and a non-empty range that lies
// below 2^57 (above any user address) fails with ucs.ErrInvalidParam.
func decodeMkey(b []byte) (k mkey, err error) {
	v, err := mkeyFormat.Decode(b, &k.pid, &k.fd, &k.id, &k.length, &k.addr,
		base.CheckPid(&k.pid), base.CheckNonZero("segment id", &k.id), base.CheckRange(&k.addr, &k.length))
	k.named = v == mkeyVersionNamed
	if err == nil && (k.fd < 0 || (k.named && k.fd != 0)) {
		err = mkeyFormat.Errorf("descriptor %d", k.fd)
	}
	return k, err
}
