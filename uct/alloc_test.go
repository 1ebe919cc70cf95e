package uct

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
)

// fakeMD is an MD whose allocations are Go memory, or fail.
type fakeMD struct {
	MD     // the methods the tests do not call
	name   string
	alloc  bool  // has MDFlagAlloc
	noReg  bool  // lacks MDFlagReg
	err    error // MemAlloc fails with it
	allocs map[*byte]bool
	regs   int
}

func (m *fakeMD) Name() string { return m.name }
func (m *fakeMD) Query() (MDAttr, error) {
	a := MDAttr{Flags: MDFlagReg}
	if m.noReg {
		a.Flags = 0
	}
	if m.alloc {
		a.Flags |= MDFlagAlloc
	}
	return a, nil
}
func (m *fakeMD) MemAlloc(length int, _ MemFlags, _ string) (Allocation, error) {
	if m.err != nil {
		return Allocation{}, m.err
	}
	b := make([]byte, length)
	m.allocs[&b[0]] = true
	return Allocation{Address: unsafe.Pointer(&b[0]), Length: length, Memh: &b[0]}, nil
}
func (m *fakeMD) MemFree(memh Memh) error {
	p, _ := memh.(*byte)
	if !m.allocs[p] {
		return ucs.ErrInvalidParam
	}
	delete(m.allocs, p)
	return nil
}
func (m *fakeMD) MemReg(unsafe.Pointer, int, MemFlags) (Memh, error) { m.regs++; return m.regs, nil }
func (m *fakeMD) MemDereg(Memh) error                                { m.regs--; return nil }

func newFakeMD(name string, alloc bool, err error) *fakeMD {
	return &fakeMD{name: name, alloc: alloc, err: err, allocs: map[*byte]bool{}}
}

// TestMemAllocOrder checks MemAlloc against uct_mem_alloc: the methods are
// tried in the order given, and the MDs in theirs for AllocMethodMD, until
// one succeeds; the result says which; MemFree releases it.
func TestMemAllocOrder(t *testing.T) {
	noAlloc := newFakeMD("noalloc", false, nil)
	failing := newFakeMD("failing", true, ucs.ErrNoMemory)
	good := newFakeMD("good", true, nil)
	for _, tc := range []struct {
		name    string
		length  int
		methods []AllocMethod
		mds     []MD
		want    []AllocMethod // the method used: one of these
		wantMD  MD
		wantErr error
	}{
		{"heap", 100, []AllocMethod{AllocMethodHeap}, nil, []AllocMethod{AllocMethodHeap}, nil, nil},
		{"mmap", 100, []AllocMethod{AllocMethodMmap, AllocMethodHeap}, nil, []AllocMethod{AllocMethodMmap}, nil, nil},
		{"md first", 100, []AllocMethod{AllocMethodMD, AllocMethodHeap}, []MD{noAlloc, failing, good}, []AllocMethod{AllocMethodMD}, good, nil},
		{"md fails, heap next", 100, []AllocMethod{AllocMethodMD, AllocMethodHeap}, []MD{noAlloc, failing}, []AllocMethod{AllocMethodHeap}, nil, nil},
		{"md without mds", 100, []AllocMethod{AllocMethodMD, AllocMethodMmap}, nil, []AllocMethod{AllocMethodMmap}, nil, nil},
		{"heap before md", 100, []AllocMethod{AllocMethodHeap, AllocMethodMD}, []MD{good}, []AllocMethod{AllocMethodHeap}, nil, nil},
		{"huge, else mmap", 100, []AllocMethod{AllocMethodHuge, AllocMethodMmap}, nil, []AllocMethod{AllocMethodHuge, AllocMethodMmap}, nil, nil},
		{"thp, else heap", 3 << 20, []AllocMethod{AllocMethodTHP, AllocMethodHeap}, nil, []AllocMethod{AllocMethodTHP, AllocMethodHeap}, nil, nil},
		{"default", 100, []AllocMethod{AllocMethodDefault}, []MD{good}, []AllocMethod{AllocMethodMD}, good, nil},
		{"default without mds", 100, []AllocMethod{AllocMethodDefault}, nil, []AllocMethod{AllocMethodMmap}, nil, nil},
		{"no method", 100, nil, nil, nil, nil, ucs.ErrNoMemory},
		{"only failing mds", 100, []AllocMethod{AllocMethodMD}, []MD{failing, noAlloc}, nil, nil, ucs.ErrNoMemory},
		{"unknown method", 100, []AllocMethod{AllocMethod(42)}, nil, nil, nil, ucs.ErrInvalidParam},
		{"zero length", 0, []AllocMethod{AllocMethodHeap}, nil, nil, nil, ucs.ErrInvalidParam},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem, err := MemAlloc(tc.length, tc.methods, tc.mds, tc.name)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("MemAlloc: %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("MemAlloc: %v", err)
			}
			ok := false
			for _, m := range tc.want {
				ok = ok || mem.Method == m
			}
			if !ok || mem.MD != tc.wantMD || mem.Length < tc.length || mem.Address == nil {
				t.Fatalf("allocated by %v (MD %v), %d bytes at %p; want one of %v (MD %v), %d bytes", mem.Method, mem.MD, mem.Length, mem.Address, tc.want, tc.wantMD, tc.length)
			}
			if mem.Method == AllocMethodTHP && uintptr(mem.Address)%hugePage != 0 {
				t.Errorf("thp memory at %p is not aligned to a huge page", mem.Address)
			}
			b := unsafe.Slice((*byte)(mem.Address), mem.Length)
			b[0], b[len(b)-1] = 1, 2 // the memory is there
			if err := MemFree(&mem); err != nil {
				t.Fatalf("MemFree: %v", err)
			}
			if err := MemFree(&mem); !errors.Is(err, ucs.ErrInvalidParam) {
				t.Errorf("second MemFree: %v, want ucs.ErrInvalidParam", err)
			}
		})
	}
	if len(good.allocs) != 0 {
		t.Errorf("%d MD allocations not freed", len(good.allocs))
	}
}

// TestIfaceMemAlloc checks that IfaceMemAlloc keys the memory for its MD
// whatever method allocated it: allocated by the MD, or registered with it
// (and deregistered by MemFree).
func TestIfaceMemAlloc(t *testing.T) {
	for _, tc := range []struct {
		name    string
		md      *fakeMD
		methods []AllocMethod
		want    AllocMethod
		reg     bool
	}{
		{"by the md", newFakeMD("good", true, nil), nil, AllocMethodMD, false},
		{"md cannot: mmap, registered", newFakeMD("noalloc", false, nil), nil, AllocMethodMmap, true},
		{"md neither allocates nor registers", &fakeMD{name: "none", noReg: true}, nil, AllocMethodMmap, false},
		{"heap asked first", newFakeMD("good", true, nil), []AllocMethod{AllocMethodHeap, AllocMethodMD}, AllocMethodHeap, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem, err := IfaceMemAlloc(tc.md, 64, tc.methods, tc.name)
			if err != nil {
				t.Fatal(err)
			}
			if mem.Method != tc.want || mem.MD != MD(tc.md) || (mem.Memh == nil) != tc.md.noReg || (tc.md.regs == 1) != tc.reg {
				t.Errorf("method %v, MD %v, memh %v, %d registrations; want %v, registered %v", mem.Method, mem.MD, mem.Memh, tc.md.regs, tc.want, tc.reg)
			}
			if err := MemFree(&mem); err != nil || tc.md.regs != 0 || len(tc.md.allocs) != 0 {
				t.Errorf("MemFree: %v; %d registrations and %d allocations left", err, tc.md.regs, len(tc.md.allocs))
			}
		})
	}
}
