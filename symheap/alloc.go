// Package symheap holds the symmetric heap of a PE: one segment mapped
// through ucp for remote access, and a deterministic allocator over it.
//
// The allocator works on offsets and keeps its bookkeeping in Go memory,
// outside the segment, so no remote write can corrupt it; the same sequence
// of calls gives the same offsets on every PE, which is what makes the heap
// symmetric.
package symheap

import (
	"errors"
	"fmt"
	"math"
	"sort"
)

// ErrNoSpace reports that the heap has no free block large enough.
var ErrNoSpace = errors.New("symmetric heap exhausted")

// ErrBadOffset reports an offset that is not the start of a live block.
var ErrBadOffset = errors.New("not an allocated block of the symmetric heap")

// MinAlign is the alignment of every block (a cache line, so that two
// blocks never share one and remote writes to one never slow the other).
const MinAlign = 64

// MinBaseAlign is the least alignment of the base of a heap: 2 MiB, the
// huge page of x86-64 and arm64, so that even a small heap gives blocks
// aligned to a huge page.
const MinBaseAlign = 2 << 20

// MaxAlignOf returns the largest alignment that the Allocator of a heap of
// size bytes gives a block, which is the alignment of that heap's base on
// every PE (see New), so that a block at an offset aligned to a is at an
// address aligned to a: size rounded up to a power of two, and at least
// MinBaseAlign. Every alignment that fits the heap is no larger.
func MaxAlignOf(size int) int {
	a := MinBaseAlign
	for a < size && a <= math.MaxInt/2 {
		a *= 2
	}
	return a
}

// ErrBadAlign reports an alignment that is not a power of two or is above
// the heap's largest (MaxAlignOf).
var ErrBadAlign = errors.New("alignment must be a power of two no larger than the heap's size rounded up to a power of two")

// block is a free range [off, off+size).
type block struct{ off, size int }

// Allocator is a first-fit allocator over the offsets [0, size). Its state
// is a sorted list of free blocks and a table of live blocks. It is not safe
// for concurrent use; shmem serializes its collective allocation calls.
type Allocator struct {
	size     int
	maxAlign int         // MaxAlignOf(size)
	free     []block     // sorted by offset, coalesced
	live     map[int]int // offset -> size of allocated blocks
	used     int
	hwm      int // end of the highest block ever allocated: beyond it, memory was never used
}

// NewAllocator returns an allocator for size bytes, which aligns blocks to
// at most MaxAlignOf(size).
func NewAllocator(size int) *Allocator {
	a := &Allocator{size: size, maxAlign: MaxAlignOf(size), live: make(map[int]int)}
	if size > 0 {
		a.free = []block{{0, size}}
	}
	return a
}

func alignUp(n, a int) int { return (n + a - 1) &^ (a - 1) }

// Alloc returns the offset of a new block of at least n bytes aligned to
// align (rounded up to MinAlign; it must be a power of two no larger than
// a.MaxAlign(), or Alloc fails with ErrBadAlign). A zero n gives a block of
// MinAlign bytes, so every allocation has a distinct offset. It fails with
// ErrNoSpace when no free block fits (an alignment up to MaxAlign() but
// above the heap's size leaves only offset 0, for a block that fits).
func (a *Allocator) Alloc(n, align int) (int, error) {
	if n < 0 {
		return 0, fmt.Errorf("symheap alloc of %d bytes: negative size", n)
	}
	if align < MinAlign {
		align = MinAlign
	}
	if align&(align-1) != 0 || align > a.maxAlign {
		return 0, fmt.Errorf("symheap alloc: alignment %d (a heap of %d bytes aligns to at most %d): %w", align, a.size, a.maxAlign, ErrBadAlign)
	}
	n = alignUp(max(n, 1), MinAlign)
	for i, b := range a.free {
		start := alignUp(b.off, align)
		if start+n > b.off+b.size || start+n < start {
			continue
		}
		a.carve(i, start, n)
		a.live[start] = n
		a.used += n
		a.hwm = max(a.hwm, start+n)
		return start, nil
	}
	return 0, fmt.Errorf("symheap alloc of %d bytes (%d of %d in use): %w", n, a.used, a.size, ErrNoSpace)
}

// AllocClean is Alloc that also returns how many bytes from the start of the
// block may hold data of earlier blocks; the rest has never been allocated
// and is still as the segment was created (zero, for a fresh mapping). It
// lets a zeroing allocation skip memory that is zero already.
func (a *Allocator) AllocClean(n, align int) (off, dirty int, err error) {
	hwm := a.hwm
	off, err = a.Alloc(n, align)
	if err != nil {
		return 0, 0, err
	}
	return off, min(max(hwm-off, 0), n), nil
}

// carve removes [start, start+n) from free block i, keeping what is left on
// either side.
func (a *Allocator) carve(i, start, n int) {
	b := a.free[i]
	var rest []block
	if start > b.off {
		rest = append(rest, block{b.off, start - b.off})
	}
	if end := start + n; end < b.off+b.size {
		rest = append(rest, block{end, b.off + b.size - end})
	}
	a.free = append(a.free[:i], append(rest, a.free[i+1:]...)...)
}

// Free releases the block at off. It fails with ErrBadOffset if off is not
// the start of a live block.
func (a *Allocator) Free(off int) error {
	n, ok := a.live[off]
	if !ok {
		return fmt.Errorf("symheap free of offset %d: %w", off, ErrBadOffset)
	}
	delete(a.live, off)
	a.used -= n
	i := sort.Search(len(a.free), func(i int) bool { return a.free[i].off > off })
	a.free = append(a.free, block{})
	copy(a.free[i+1:], a.free[i:])
	a.free[i] = block{off, n}
	// Coalesce with the next block, then with the previous one.
	if i+1 < len(a.free) && a.free[i].off+a.free[i].size == a.free[i+1].off {
		a.free[i].size += a.free[i+1].size
		a.free = append(a.free[:i+1], a.free[i+2:]...)
	}
	if i > 0 && a.free[i-1].off+a.free[i-1].size == a.free[i].off {
		a.free[i-1].size += a.free[i].size
		a.free = append(a.free[:i], a.free[i+1:]...)
	}
	return nil
}

// Realloc resizes the block at off to n bytes, in place when the block or
// the free space after it allows, and returns the new offset and whether the
// block moved (then the caller copies the contents and frees nothing: the old
// block is already released). It fails with ErrBadOffset or ErrNoSpace; on
// failure the old block is unchanged.
func (a *Allocator) Realloc(off, n int) (newOff int, moved bool, err error) {
	old, ok := a.live[off]
	if !ok {
		return 0, false, fmt.Errorf("symheap realloc of offset %d: %w", off, ErrBadOffset)
	}
	n = alignUp(max(n, 1), MinAlign)
	if n <= old {
		if n < old {
			a.live[off] = n
			a.used -= old - n
			// Give the tail back.
			a.live[off+n] = old - n
			a.used += old - n
			_ = a.Free(off + n)
		}
		return off, false, nil
	}
	// Grow in place if the free block right after covers the difference.
	end := off + old
	i := sort.Search(len(a.free), func(i int) bool { return a.free[i].off >= end })
	if i < len(a.free) && a.free[i].off == end && a.free[i].size >= n-old {
		a.carve(i, end, n-old)
		a.live[off] = n
		a.used += n - old
		return off, false, nil
	}
	newOff, err = a.Alloc(n, MinAlign)
	if err != nil {
		return 0, false, err
	}
	_ = a.Free(off)
	return newOff, true, nil
}

// SizeOf returns the size of the live block at off, or 0.
func (a *Allocator) SizeOf(off int) int { return a.live[off] }

// Used returns the number of bytes in live blocks.
func (a *Allocator) Used() int { return a.used }

// MaxAlign returns the largest alignment Alloc gives a block,
// MaxAlignOf(Size()).
func (a *Allocator) MaxAlign() int { return a.maxAlign }

// Size returns the size the allocator manages.
func (a *Allocator) Size() int { return a.size }
