package wire

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// The table file that an agent writes for its PEs (bootstrap.Table reads
// it). Layout (little endian): TableMagic, version uint32 (TableVersion),
// count uint32, nodes uint32, then count entries of offset uint32, length
// uint32 and node uint32, then the blobs (each entry's offset counts from
// the end of the entries).
const (
	TableMagic      = "GSHT"
	TableVersion    = 1
	TableHeaderSize = 16
	TableEntrySize  = 12
)

// EncodeTable returns the table of es, which hold one entry per rank in
// rank order.
func EncodeTable(es []Entry) []byte {
	total, nodes := 0, 0
	for _, e := range es {
		total += len(e.Blob)
		nodes = max(nodes, e.Node+1)
	}
	start := TableHeaderSize + TableEntrySize*len(es)
	b := make([]byte, start, start+total)
	copy(b, TableMagic)
	binary.LittleEndian.PutUint32(b[4:], TableVersion)
	binary.LittleEndian.PutUint32(b[8:], uint32(len(es)))
	binary.LittleEndian.PutUint32(b[12:], uint32(nodes))
	off := 0
	for i, e := range es {
		p := b[TableHeaderSize+TableEntrySize*i:]
		binary.LittleEndian.PutUint32(p, uint32(off))
		binary.LittleEndian.PutUint32(p[4:], uint32(len(e.Blob)))
		binary.LittleEndian.PutUint32(p[8:], uint32(e.Node))
		b = append(b, e.Blob...)
		off += len(e.Blob)
	}
	return b
}

// WriteTableFile writes the table b into a new sealed memory file and
// returns its descriptor.
func WriteTableFile(b []byte) (int, error) {
	fd, err := unix.MemfdCreate("goshmem-table", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, fmt.Errorf("bootstrap: memfd_create: %w", err)
	}
	for off := 0; off < len(b); {
		n, err := unix.Pwrite(fd, b[off:], int64(off))
		if err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("bootstrap: writing the table: %w", err)
		}
		off += n
	}
	seals := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE | unix.F_SEAL_SEAL
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("bootstrap: sealing the table: %w", err)
	}
	return fd, nil
}
