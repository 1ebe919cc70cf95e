package symheap

import (
	"fmt"
	"math"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucp"
	"github.com/goshmem/goshmem/ucs"
)

// DefaultSize is the heap size when SHMEM_SYMMETRIC_SIZE is not set. The
// segment's pages cost nothing until they are touched.
const DefaultSize = 256 << 20

// SizeFromEnv returns the heap size that SHMEM_SYMMETRIC_SIZE asks for (a
// number with an optional K, M, G or T suffix), or DefaultSize.
func SizeFromEnv() (int, error) {
	v, ok := os.LookupEnv("SHMEM_SYMMETRIC_SIZE")
	if !ok || v == "" {
		return DefaultSize, nil
	}
	n, err := ucs.ParseSize(v)
	if err != nil || n == 0 || n > math.MaxInt/2 {
		return 0, fmt.Errorf("SHMEM_SYMMETRIC_SIZE=%q: want a positive size such as 512M or 2G: %w", v, ucs.ErrInvalidParam)
	}
	return int(n), nil
}

// Heap is a PE's symmetric heap: a segment mapped with ucp (allocated on the
// shared-memory domain when UCX_ALLOC_PRIO allows, so same-node peers map it
// directly) and an Allocator over it.
//
// The heap starts at an address aligned to MaxAlignOf(its size), the same
// on every PE, so that a block whose offset the Allocator aligned lies at
// an address aligned alike on every PE, for every alignment the Allocator
// takes. Neither ucp nor the kernel places a mapping on more than a page,
// so New first reserves address space for the heap and the alignment,
// takes the aligned address inside, gives the reservation back and maps
// the segment there (ucp.MemMapFixed, which never replaces a mapping): the
// segment is exactly the heap, peers map no more than it, and the process
// keeps no more address space than it either. The alignment holds for the
// addresses the PE uses in its own heap; a peer maps the segment wherever
// its kernel puts it, so a pointer into another PE's heap (shmem.Ptr) is
// aligned to the page only.
type Heap struct {
	Region
	*Allocator
}

// Region is symmetric memory mapped through ucp for peers to reach: the
// segment of a Heap, or memory of the program's that Register registers
// (the static data of a C program), which every PE has of the same size
// and whose contents are symmetric by offset. It gives the packed key
// that peers address it with, and the offsets of its addresses.
type Region struct {
	ctx  *ucp.Context
	memh *ucp.MemHandle
	base unsafe.Pointer
	size int
}

// New maps a heap of size bytes (rounded up to the page size) through
// ctx, starting at an address aligned to MaxAlignOf(size). The memory is
// zeroed. A heap larger than the memory that can ever back it (see
// checkBacking) fails with an error that wraps ucs.ErrNoMemory, as does
// one for which no aligned place can be found or mapped.
func New(ctx *ucp.Context, size int) (*Heap, error) {
	page := os.Getpagesize()
	if size <= 0 || size > math.MaxInt/4 {
		return nil, fmt.Errorf("symheap: size %d: %w", size, ucs.ErrInvalidParam)
	}
	size = alignUp(size, page)
	align := MaxAlignOf(size)
	var memh *ucp.MemHandle
	for try := 1; ; try++ {
		at, err := alignedHole(size, align)
		if err != nil {
			return nil, fmt.Errorf("symheap: heap of %d bytes: %w", size, err)
		}
		memh, err = ctx.MemMap(new(ucp.MemMapParams).SetAddress(at).SetLength(size).SetFlags(ucp.MemMapAllocate | ucp.MemMapFixed))
		if err == nil {
			break
		}
		if try == placeTries {
			return nil, fmt.Errorf("symheap: map %d bytes at %p (aligned to %d): %w", size, at, align, err)
		}
	}
	if err := checkBacking(size, ctx.NamesMemory() && memh.Query().Method == "md:posix"); err != nil {
		ctx.MemUnmap(memh)
		return nil, err
	}
	return &Heap{Region: Region{ctx: ctx, memh: memh, base: memh.Address(), size: size}, Allocator: NewAllocator(size)}, nil
}

// placeTries is how many aligned places New tries: another thread may map
// memory into the place between alignedHole and the mapping, which then
// fails without harm, and a new place is found.
const placeTries = 8

// alignedHole returns an address aligned to align followed by size free
// bytes of address space: it reserves size+align-page bytes (PROT_NONE,
// MAP_NORESERVE: nothing is committed), takes the aligned address inside
// and unmaps the reservation, leaving the place free for a fixed mapping.
// It fails with an error that wraps ucs.ErrNoMemory when the address
// space has no such room.
func alignedHole(size, align int) (unsafe.Pointer, error) {
	n := uintptr(size + align - os.Getpagesize())
	p, err := unix.MmapPtr(-1, 0, nil, n, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("reserve %d bytes of address space for an alignment of %d: %w: %w", n, align, err, ucs.ErrNoMemory)
	}
	if err := unix.MunmapPtr(p, n); err != nil {
		return nil, fmt.Errorf("unmap the reservation at %p: %w: %w", p, err, ucs.ErrNoMemory)
	}
	return unsafe.Add(p, alignUp(int(uintptr(p)), align)-int(uintptr(p))), nil
}

// Size returns the size of the heap in bytes (its Region's, which is its
// Allocator's).
func (h *Heap) Size() int { return h.Region.size }

// Register maps the size bytes of this process's memory at base through
// ctx (ucp mem map of the memory in place, with every memory domain that
// registers memory: cma, tcp, and the software protocols), as a region
// that peers reach with its key. The memory stays the caller's: Close
// only unregisters it. It fails with an error that wraps
// ucs.ErrInvalidParam for a nil base or a size that is not positive, and
// with ucp's error when nothing registers the memory.
func Register(ctx *ucp.Context, base unsafe.Pointer, size int) (*Region, error) {
	if base == nil || size <= 0 {
		return nil, fmt.Errorf("symheap: register %d bytes at %p: %w", size, base, ucs.ErrInvalidParam)
	}
	memh, err := ctx.MemMap(new(ucp.MemMapParams).SetAddress(base).SetLength(size))
	if err != nil {
		return nil, fmt.Errorf("symheap: register %d bytes at %p: %w", size, base, err)
	}
	return &Region{ctx: ctx, memh: memh, base: base, size: size}, nil
}

// Base returns the address of the start of the region (for a heap, a
// multiple of its MaxAlign).
func (r *Region) Base() unsafe.Pointer { return r.base }

// Size returns the size of the region in bytes.
func (r *Region) Size() int { return r.size }

// MemHandle returns the ucp mapping of the region.
func (r *Region) MemHandle() *ucp.MemHandle { return r.memh }

// PackRkey returns the packed remote key of the region's mapping, which
// holds the region (from Base, as peers address it, to Base plus Size).
func (r *Region) PackRkey() ([]byte, error) { return r.ctx.RkeyPack(r.memh) }

// Offset returns the offset of p in the region and whether the n bytes
// from p lie inside it.
func (r *Region) Offset(p unsafe.Pointer, n int) (int, bool) {
	off := uintptr(p) - uintptr(r.base)
	if uintptr(p) < uintptr(r.base) || off > uintptr(r.size) || n < 0 || uintptr(n) > uintptr(r.size)-off {
		return 0, false
	}
	return int(off), true
}

// At returns the address of offset off.
func (r *Region) At(off int) unsafe.Pointer { return unsafe.Add(r.base, off) }

// Close unmaps the region (a heap's memory goes with it; registered
// memory stays the program's).
func (r *Region) Close() error {
	if r.memh == nil {
		return nil
	}
	err := r.ctx.MemUnmap(r.memh)
	r.memh, r.base = nil, nil
	return err
}
