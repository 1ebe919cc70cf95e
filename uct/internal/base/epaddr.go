package base

import (
	"encoding/binary"

	"github.com/goshmem/goshmem/ucs"
)

// The EP address of a transport whose EPs connect to EPs (uct.EPConnector)
// is the address of the EP's iface followed by the EP's random 64-bit id,
// little-endian and non-zero.

// EncodeEPAddr returns the EP address of EP id on the iface whose address
// is ifaceAddr.
func EncodeEPAddr(ifaceAddr []byte, id uint64) []byte {
	return binary.LittleEndian.AppendUint64(append(make([]byte, 0, len(ifaceAddr)+8), ifaceAddr...), id)
}

// SplitEPAddr splits the EP address b into the address of its iface, which
// must be ifaceAddrLen bytes, and the EP id. A length that is not
// ifaceAddrLen+8, or a zero id, fails with ucs.ErrInvalidAddr in a
// *FormatError that pkg begins; the caller decodes the iface address.
func SplitEPAddr(pkg string, b []byte, ifaceAddrLen int) (ifaceAddr []byte, id uint64, err error) {
	if len(b) != ifaceAddrLen+8 {
		return nil, 0, &FormatError{Name: pkg + ": ep address", Err: ucs.ErrInvalidAddr, format: "%d bytes, want %d", args: []any{len(b), ifaceAddrLen + 8}}
	}
	id = binary.LittleEndian.Uint64(b[ifaceAddrLen:])
	if id == 0 {
		return nil, 0, &FormatError{Name: pkg + ": ep address", Err: ucs.ErrInvalidAddr, format: "zero ep id"}
	}
	return b[:ifaceAddrLen], id, nil
}
