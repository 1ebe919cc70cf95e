package symheap

import (
	"errors"
	"math/rand"
	"testing"
)

func TestAllocatorSequence(t *testing.T) {
	type step struct {
		op       string // "alloc", "free", "realloc"
		n, align int
		off      int // for free/realloc: index into earlier results
		want     int
		wantErr  error
	}
	tests := []struct {
		name  string
		size  int
		steps []step
	}{
		{"first fit and reuse", 1024, []step{
			{op: "alloc", n: 10, want: 0},
			{op: "alloc", n: 100, want: 64},
			{op: "alloc", n: 64, want: 192},
			{op: "free", off: 1},
			{op: "alloc", n: 64, want: 64},
			{op: "alloc", n: 64, want: 128},
		}},
		{"alignment", 4096, []step{
			{op: "alloc", n: 8, want: 0},
			{op: "alloc", n: 8, align: 1024, want: 1024},
			{op: "alloc", n: 8, want: 64},
		}},
		{"exhaustion", 320, []step{
			{op: "alloc", n: 200, want: 0},
			{op: "alloc", n: 128, wantErr: ErrNoSpace},
			{op: "alloc", n: 0, want: 256},
			{op: "alloc", n: 1, wantErr: ErrNoSpace},
		}},
		{"coalescing", 256, []step{
			{op: "alloc", n: 64, want: 0},
			{op: "alloc", n: 64, want: 64},
			{op: "alloc", n: 64, want: 128},
			{op: "free", off: 0},
			{op: "free", off: 2},
			{op: "free", off: 1},
			{op: "alloc", n: 256, want: 0},
		}},
		{"realloc grows in place then moves", 1024, []step{
			{op: "alloc", n: 64, want: 0},
			{op: "realloc", off: 0, n: 200, want: 0},
			{op: "alloc", n: 64, want: 256},
			{op: "realloc", off: 1, n: 300, want: 320},
			{op: "alloc", n: 64, want: 0},
		}},
		{"double free", 1024, []step{
			{op: "alloc", n: 64, want: 0},
			{op: "free", off: 0},
			{op: "free", off: 0, wantErr: ErrBadOffset},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := NewAllocator(tt.size)
			var offs []int
			for i, s := range tt.steps {
				var got int
				var err error
				switch s.op {
				case "alloc":
					got, err = a.Alloc(s.n, s.align)
				case "free":
					err = a.Free(offs[s.off])
					got = s.want
				case "realloc":
					got, _, err = a.Realloc(offs[s.off], s.n)
				}
				if s.wantErr != nil {
					if !errors.Is(err, s.wantErr) {
						t.Fatalf("step %d %s: err = %v, want %v", i, s.op, err, s.wantErr)
					}
					offs = append(offs, -1)
					continue
				}
				if err != nil || got != s.want {
					t.Fatalf("step %d %s(%d): got %d, %v; want %d", i, s.op, s.n, got, err, s.want)
				}
				offs = append(offs, got)
			}
		})
	}
}

// TestAllocatorModel drives the allocator with random calls and checks that
// live blocks never overlap, stay in range and are aligned, and that two
// allocators given the same calls agree (determinism across PEs).
func TestAllocatorModel(t *testing.T) {
	const size = 1 << 16
	a, b := NewAllocator(size), NewAllocator(size)
	rng := rand.New(rand.NewSource(1))
	live := map[int]int{}
	for i := 0; i < 5000; i++ {
		switch k := rng.Intn(10); {
		case k < 5:
			n, align := rng.Intn(2000), 1<<uint(rng.Intn(12))
			o1, e1 := a.Alloc(n, align)
			o2, e2 := b.Alloc(n, align)
			if o1 != o2 || (e1 == nil) != (e2 == nil) {
				t.Fatalf("allocators disagree: %d,%v vs %d,%v", o1, e1, o2, e2)
			}
			if e1 != nil {
				if !errors.Is(e1, ErrNoSpace) {
					t.Fatal(e1)
				}
				continue
			}
			if o1%max(align, MinAlign) != 0 || o1+n > size {
				t.Fatalf("block %d+%d misaligned (align %d) or out of range", o1, n, align)
			}
			for off, sz := range live {
				if o1 < off+sz && off < o1+max(n, 1) {
					t.Fatalf("block %d+%d overlaps live %d+%d", o1, n, off, sz)
				}
			}
			live[o1] = max(n, 1)
		case k < 8 && len(live) > 0:
			for off := range live {
				if err := a.Free(off); err != nil {
					t.Fatal(err)
				}
				if err := b.Free(off); err != nil {
					t.Fatal(err)
				}
				delete(live, off)
				break
			}
		case len(live) > 0:
			for off := range live {
				n := rng.Intn(3000)
				o1, _, e1 := a.Realloc(off, n)
				o2, _, e2 := b.Realloc(off, n)
				if o1 != o2 || (e1 == nil) != (e2 == nil) {
					t.Fatalf("realloc disagrees")
				}
				if e1 == nil {
					delete(live, off)
					live[o1] = max(n, 1)
				}
				break
			}
		}
	}
	for off := range live {
		a.Free(off)
	}
	if a.Used() != 0 || len(a.free) != 1 || a.free[0] != (block{0, size}) {
		t.Fatalf("after freeing everything: used %d, free list %v", a.Used(), a.free)
	}
}

func TestAllocCleanTracksUsedMemory(t *testing.T) {
	a := NewAllocator(1 << 20)
	tests := []struct {
		op        string
		n         int
		wantOff   int
		wantDirty int
	}{
		{"alloc", 100, 0, 0},
		{"alloc", 1000, 128, 0},
		{"free0", 0, 0, 0},
		{"alloc", 64, 0, 64},    // reuses freed memory
		{"alloc", 200, 1152, 0}, // past everything used so far
		{"free1", 0, 0, 0},
		{"alloc", 2000, 1152 + 256, 0},
		{"alloc", 1000, 64, 1000}, // in the freed blocks, coalesced
		{"alloc", 5000, 3456, 0},  // past the high-water mark again
	}
	var offs []int
	for i, tt := range tests {
		switch tt.op {
		case "free0":
			if err := a.Free(offs[0]); err != nil {
				t.Fatal(err)
			}
			continue
		case "free1":
			if err := a.Free(offs[1]); err != nil {
				t.Fatal(err)
			}
			continue
		}
		off, dirty, err := a.AllocClean(tt.n, 0)
		if err != nil || off != tt.wantOff || dirty != tt.wantDirty {
			t.Fatalf("step %d: AllocClean(%d) = %d, %d, %v; want %d, %d", i, tt.n, off, dirty, err, tt.wantOff, tt.wantDirty)
		}
		offs = append(offs, off)
	}
}
