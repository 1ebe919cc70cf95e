package bootstrap

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucs"

	"github.com/goshmem/goshmem/bootstrap/internal/wire"
)

// Table is the result of an Exchange: the blob of every PE of the job and
// the node each PE runs on. The agent of a host writes it once into a
// sealed memory file that every PE of the host maps read-only, so a PE
// neither receives nor copies the N entries: it reads those it needs, when
// it needs them. A Table is valid until Close, and safe for concurrent
// reads.
//
// Layout of the file (little endian): "GSHT", version uint32 (1), count
// uint32, nodes uint32, then count entries of offset uint32, length uint32
// and node uint32, then the blobs (each entry's offset counts from the end
// of the entries).
type Table struct {
	data  []byte // the mapping (or, for a singleton, a slice)
	n     int
	nodes int
	start int  // where the blobs begin
	mmap  bool // data is a mapping to unmap at Close
}

// parseTable checks that data is a table of n entries and returns it. It
// reads every entry once (no blob), so that the accessors need no check.
func parseTable(data []byte, n int) (*Table, error) {
	bad := func(what string) (*Table, error) {
		return nil, fmt.Errorf("bootstrap: malformed table of %d bytes: %s: %w", len(data), what, ucs.ErrInvalidParam)
	}
	if len(data) < wire.TableHeaderSize || string(data[:4]) != wire.TableMagic {
		return bad("no header")
	}
	if v := binary.LittleEndian.Uint32(data[4:]); v != wire.TableVersion {
		return bad(fmt.Sprintf("version %d", v))
	}
	if c := binary.LittleEndian.Uint32(data[8:]); uint64(c) != uint64(n) {
		return bad(fmt.Sprintf("%d entries for a job of %d PEs", c, n))
	}
	nodes := binary.LittleEndian.Uint32(data[12:])
	start := uint64(wire.TableHeaderSize) + wire.TableEntrySize*uint64(n)
	if start > uint64(len(data)) || nodes > uint32(n) {
		return bad("entries truncated")
	}
	blobs := uint64(len(data)) - start
	for i := range n {
		p := data[wire.TableHeaderSize+wire.TableEntrySize*i:]
		off, l := uint64(binary.LittleEndian.Uint32(p)), uint64(binary.LittleEndian.Uint32(p[4:]))
		if off+l > blobs || binary.LittleEndian.Uint32(p[8:]) >= nodes {
			return bad(fmt.Sprintf("entry %d out of bounds", i))
		}
	}
	return &Table{data: data, n: n, nodes: int(nodes), start: int(start)}, nil
}

// mapTable maps the table file fd of size bytes, read-only, checks it for
// a job of n PEs, and closes fd.
func mapTable(fd int, size uint64, n int) (*Table, error) {
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("bootstrap: the table file: %w", err)
	}
	if uint64(st.Size) != size || size == 0 {
		return nil, fmt.Errorf("bootstrap: the table file has %d bytes, the agent said %d: %w", st.Size, size, ucs.ErrInvalidParam)
	}
	data, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: mapping the table: %w", err)
	}
	t, err := parseTable(data, n)
	if err != nil {
		unix.Munmap(data)
		return nil, err
	}
	t.mmap = true
	return t, nil
}

// Len returns the number of PEs of the table.
func (t *Table) Len() int { return t.n }

// Nodes returns the number of nodes the PEs run on (their Node numbers are
// 0 to Nodes()-1).
func (t *Table) Nodes() int { return t.nodes }

// Blob returns the blob of the PE rank, which aliases the table: valid
// until Close, and not to be written. It panics for a rank out of range.
func (t *Table) Blob(rank int) []byte {
	p := t.entry(rank)
	off := t.start + int(binary.LittleEndian.Uint32(p))
	end := off + int(binary.LittleEndian.Uint32(p[4:]))
	return t.data[off:end:end]
}

// entry returns the entry of rank.
func (t *Table) entry(rank int) []byte {
	if uint(rank) >= uint(t.n) {
		panic(fmt.Sprintf("bootstrap: rank %d out of range [0, %d) of the table", rank, t.n))
	}
	return t.data[wire.TableHeaderSize+wire.TableEntrySize*rank:]
}

// Node returns the node the PE rank runs on: PEs of one node share its
// memory (the same boot of the same kernel, IPC namespace and /dev/shm, as
// the launcher's agents see it). It panics for a rank out of range.
func (t *Table) Node(rank int) int {
	return int(binary.LittleEndian.Uint32(t.entry(rank)[8:]))
}

// Size returns the bytes the table takes (shared by the PEs of a host).
func (t *Table) Size() int { return len(t.data) }

// Close releases the table; its blobs must not be used after. It is
// idempotent.
func (t *Table) Close() error {
	data := t.data
	t.data = nil
	if t.mmap && data != nil {
		if err := unix.Munmap(data); err != nil {
			return fmt.Errorf("bootstrap: unmapping the table: %w", err)
		}
	}
	return nil
}
