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

// TestHeapBaseAligned: every heap starts at a multiple of MaxAlign,
// whatever the mapping's place, on each memory allocation method, so that a
// block aligned to MaxAlign in offsets is aligned in addresses. Heaps of a
// few pages each, alive at once, lie next to each other where the kernel
// puts them: without the alignment, most start off a 2 MiB boundary (and
// every other one off an 8 KiB one).
func TestHeapBaseAligned(t *testing.T) {
	for _, prio := range []string{"md:*,mmap", "mmap"} {
		t.Run(prio, func(t *testing.T) {
			t.Setenv("UCX_ALLOC_PRIO", prio)
			ctx, err := ucp.Init(new(ucp.Params).SetFeatures(ucp.FeatureRMA), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer ctx.Cleanup()
			page := os.Getpagesize()
			var heaps []*symheap.Heap
			defer func() {
				for _, h := range heaps {
					if err := h.Close(); err != nil {
						t.Error(err)
					}
				}
			}()
			for i := range 8 {
				h, err := symheap.New(ctx, (i%3+1)*page)
				if err != nil {
					t.Fatal(err)
				}
				heaps = append(heaps, h)
				base := uintptr(h.Base())
				if base%symheap.MaxAlign != 0 {
					t.Errorf("heap %d of %d bytes starts at %#x, not a multiple of MaxAlign (%#x)", i, h.Size(), base, symheap.MaxAlign)
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
				off, err := h.Alloc(1, symheap.MaxAlign)
				if err != nil || uintptr(h.At(off))%symheap.MaxAlign != 0 {
					t.Errorf("heap %d: Alloc aligned to MaxAlign: offset %d (%p), %v", i, off, h.At(off), err)
				}
			}
			if _, err := symheap.New(ctx, 0); !errors.Is(err, ucs.ErrInvalidParam) {
				t.Errorf("New of 0 bytes: %v, want ErrInvalidParam", err)
			}
		})
	}
}

// TestAllocRefusesBadAlign: an alignment above MaxAlign, which the heap's
// base does not have, or not a power of two, is refused.
func TestAllocRefusesBadAlign(t *testing.T) {
	a := symheap.NewAllocator(8 * symheap.MaxAlign)
	for _, align := range []int{96, 3 << 10, 2 * symheap.MaxAlign, 1 << 40} {
		if off, err := a.Alloc(8, align); !errors.Is(err, symheap.ErrBadAlign) {
			t.Errorf("Alloc(8, %d) = %d, %v; want ErrBadAlign", align, off, err)
		}
	}
	if off, err := a.Alloc(8, symheap.MaxAlign); err != nil || off%symheap.MaxAlign != 0 {
		t.Errorf("Alloc(8, MaxAlign) = %d, %v", off, err)
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
