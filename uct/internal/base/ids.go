package base

import (
	"crypto/rand"
	"encoding/binary"
	"os"

	"github.com/goshmem/goshmem/ucs"
)

// Bounds of the values that keys and addresses carry.
const (
	// MaxPid bounds process ids: PID_MAX_LIMIT.
	MaxPid = ucs.MaxPid
	// MaxAddr bounds addresses: above any user address (5-level paging).
	MaxAddr = 1 << 57
)

// Pid is this process's id as it appears in keys and addresses.
var Pid = uint32(os.Getpid())

// RandomID returns a random non-zero 64-bit value. It panics, naming pkg,
// when the system has no randomness to give.
func RandomID(pkg string) uint64 {
	var b [8]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			panic(pkg + ": no randomness: " + err.Error())
		}
		if v := binary.LittleEndian.Uint64(b[:]); v != 0 {
			return v
		}
	}
}

// ValidPid reports whether pid may be the id of a process: not zero and
// below MaxPid.
func ValidPid(pid uint32) bool { return pid != 0 && pid < MaxPid }

// ValidRange reports whether the length bytes at addr are a non-empty range
// that starts above zero and ends at or below MaxAddr.
func ValidRange(addr, length uint64) bool {
	return length != 0 && addr != 0 && addr < MaxAddr && length <= MaxAddr-addr
}
