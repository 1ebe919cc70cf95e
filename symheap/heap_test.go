package symheap_test

import (
	"errors"
	"os"
	"testing"
	"unsafe"

	"github.com/goshmem/goshmem/symheap"
	"github.com/goshmem/goshmem/ucp"
	"github.com/goshmem/goshmem/ucs"
)

// TestHeapBaseAligned: every heap starts at a multiple of MaxAlignOf(its
// size), whatever the mapping's place, on each memory allocation method,
// so that a block aligned to any alignment up to the heap's MaxAlign in
// offsets is aligned in addresses; and the segment is exactly the heap.
// Heaps alive at once lie next to each other where the kernel puts them:
// without the alignment, most start off a 2 MiB boundary (and every other
// one off an 8 KiB one), and the heap used to be aligned to 2 MiB only,
// so that alignments beyond it (shmem_align(8 MiB), as tests-sos asks)
// were refused.
func TestHeapBaseAligned(t *testing.T) {
	page := os.Getpagesize()
	sizes := []int{page, 2 * page, 3 * page, symheap.MinBaseAlign + page, 64 << 20, 100 << 20}
	for _, prio := range []string{"md:posix", "md:sysv", "mmap"} {
		t.Run(prio, func(t *testing.T) {
			t.Setenv("UCX_ALLOC_PRIO", prio)
			ctx, err := ucp.Init(new(ucp.Params).SetFeatures(ucp.FeatureRMA), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer ctx.Cleanup()
			var heaps []*symheap.Heap
			defer func() {
				for _, h := range heaps {
					if err := h.Close(); err != nil {
						t.Error(err)
					}
				}
			}()
			for i, size := range sizes {
				h, err := symheap.New(ctx, size)
				if err != nil {
					if m, merr := ctx.MemMap(new(ucp.MemMapParams).SetLength(size)); merr != nil {
						t.Skipf("%s allocates nothing here (a System V segment beyond kernel.shmmax, say): %v", prio, merr)
					} else {
						ctx.MemUnmap(m)
					}
					t.Fatal(err)
				}
				heaps = append(heaps, h)
				if q := h.MemHandle().Query(); q.Method != prio || q.Length != size {
					t.Errorf("heap %d of %d bytes: a segment of %d bytes by %s, want exactly the heap by %s", i, size, q.Length, q.Method, prio)
				}
				maxAlign := symheap.MaxAlignOf(size)
				if h.MaxAlign() != maxAlign || maxAlign < size || maxAlign < symheap.MinBaseAlign {
					t.Errorf("heap %d of %d bytes: MaxAlign %d, MaxAlignOf %d", i, size, h.MaxAlign(), maxAlign)
				}
				base := uintptr(h.Base())
				if base%uintptr(maxAlign) != 0 {
					t.Errorf("heap %d of %d bytes starts at %#x, not a multiple of its MaxAlign (%#x)", i, size, base, maxAlign)
				}
				// The whole heap is usable and zero, and peers reach it
				// through the key: its last byte can be written.
				b := unsafe.Slice((*byte)(h.Base()), h.Size())
				if b[0] != 0 || b[len(b)-1] != 0 {
					t.Errorf("heap %d is not zero", i)
				}
				b[len(b)-1] = 1
				if _, err := h.PackRkey(); err != nil {
					t.Error(err)
				}
				for align := symheap.MinAlign; align <= maxAlign; align *= 2 {
					off, err := h.Alloc(1, align)
					if err != nil || uintptr(h.At(off))%uintptr(align) != 0 {
						t.Errorf("heap %d of %d bytes: Alloc aligned to %d: offset %d (%p), %v", i, size, align, off, h.At(off), err)
						continue
					}
					h.Free(off)
				}
				if off, err := h.Alloc(1, 2*maxAlign); !errors.Is(err, symheap.ErrBadAlign) {
					t.Errorf("heap %d of %d bytes: Alloc aligned to twice its MaxAlign = %d, %v; want ErrBadAlign", i, size, off, err)
				}
			}
			if _, err := symheap.New(ctx, 0); !errors.Is(err, ucs.ErrInvalidParam) {
				t.Errorf("New of 0 bytes: %v, want ErrInvalidParam", err)
			}
		})
	}
}

// TestAllocAlign: the Allocator gives blocks aligned to every power of two
// up to MaxAlignOf(its size), in offsets, each at the first free place so
// aligned (after a small block at 0, the first multiple of the alignment);
// an alignment above it, which the heap's base does not have, or not a
// power of two, is refused.
func TestAllocAlign(t *testing.T) {
	for _, tc := range []struct {
		size, maxAlign int
		good           []int
		bad            []int
	}{
		{4096, symheap.MinBaseAlign, []int{64, 4096, symheap.MinBaseAlign}, []int{96, 3 << 10, 2 * symheap.MinBaseAlign, 1 << 40}},
		{64 << 20, 64 << 20, []int{4096, 2 << 20, 8 << 20, 32 << 20, 64 << 20}, []int{128 << 20, 1 << 40, 24 << 20}},
		{100 << 20, 128 << 20, []int{8 << 20, 64 << 20, 128 << 20}, []int{256 << 20, 3 << 20}},
		{1 << 30, 1 << 30, []int{8 << 20, 256 << 20, 512 << 20}, []int{2 << 30}},
	} {
		a := symheap.NewAllocator(tc.size)
		if a.MaxAlign() != tc.maxAlign || symheap.MaxAlignOf(tc.size) != tc.maxAlign {
			t.Errorf("size %d: MaxAlign %d, MaxAlignOf %d; want %d", tc.size, a.MaxAlign(), symheap.MaxAlignOf(tc.size), tc.maxAlign)
		}
		for _, align := range tc.good {
			small, err := a.Alloc(8, 0)
			if err != nil {
				t.Fatalf("size %d: Alloc(8, 0): %v", tc.size, err)
			}
			off, err := a.Alloc(8, align)
			want := align
			if align > tc.size-8 {
				// Only offset 0 is so aligned, and the small block is there.
				want = -1
			}
			switch {
			case want < 0 && !errors.Is(err, symheap.ErrNoSpace):
				t.Errorf("size %d: Alloc(8, %d) after a block at 0 = %d, %v; want ErrNoSpace", tc.size, align, off, err)
			case want >= 0 && (err != nil || off != want):
				t.Errorf("size %d: Alloc(8, %d) after a block at 0 = %d, %v; want %d", tc.size, align, off, err, want)
			}
			if err == nil {
				a.Free(off)
			}
			a.Free(small)
			if off, err := a.Alloc(8, align); err != nil || off != 0 {
				t.Errorf("size %d: Alloc(8, %d) on an empty heap = %d, %v; want 0", tc.size, align, off, err)
			} else {
				a.Free(off)
			}
		}
		for _, align := range tc.bad {
			if off, err := a.Alloc(8, align); !errors.Is(err, symheap.ErrBadAlign) {
				t.Errorf("size %d: Alloc(8, %d) = %d, %v; want ErrBadAlign", tc.size, align, off, err)
			}
		}
	}
}

// TestRegister: memory of the program's registers in place as a region
// (its offsets and key, as a heap's), stays the program's after Close,
// and nil or empty memory is refused.
func TestRegister(t *testing.T) {
	ctx, err := ucp.Init(new(ucp.Params).SetFeatures(ucp.FeatureRMA), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Cleanup()
	mem := make([]byte, 3*os.Getpagesize())
	r, err := symheap.Register(ctx, unsafe.Pointer(&mem[0]), len(mem))
	if err != nil {
		t.Fatal(err)
	}
	if r.Base() != unsafe.Pointer(&mem[0]) || r.Size() != len(mem) {
		t.Errorf("region at %p of %d bytes, want %p of %d", r.Base(), r.Size(), &mem[0], len(mem))
	}
	if off, ok := r.Offset(unsafe.Pointer(&mem[100]), 8); !ok || off != 100 || r.At(off) != unsafe.Pointer(&mem[100]) {
		t.Errorf("Offset(&mem[100], 8) = %d, %v", off, ok)
	}
	if _, ok := r.Offset(unsafe.Pointer(&mem[len(mem)-4]), 8); ok {
		t.Error("Offset of 8 bytes running past the end is ok")
	}
	if _, err := r.PackRkey(); err != nil {
		t.Error(err)
	}
	if err := r.Close(); err != nil {
		t.Error(err)
	}
	mem[0] = 1 // still the program's
	for _, tc := range []struct {
		p unsafe.Pointer
		n int
	}{{nil, 8}, {unsafe.Pointer(&mem[0]), 0}} {
		if _, err := symheap.Register(ctx, tc.p, tc.n); !errors.Is(err, ucs.ErrInvalidParam) {
			t.Errorf("Register(%p, %d): %v, want ErrInvalidParam", tc.p, tc.n, err)
		}
	}
}
