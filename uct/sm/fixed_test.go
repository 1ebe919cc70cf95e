package sm

import (
	"errors"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// TestMemAllocFixed: every MD of the package allocates exactly at a given
// page (uct.FixedAllocator), the memory usable and keyed as MemAlloc's,
// and refuses a range that is mapped already, in whole or in part,
// without replacing what is there, and an address off a page.
func TestMemAllocFixed(t *testing.T) {
	page := unix.Getpagesize()
	for _, tc := range []struct {
		name string
		md   func(t *testing.T) uct.MD
	}{
		{"posix-memfd", func(t *testing.T) uct.MD { return openMD(t, &PosixComponent{}, PosixMDName) }},
		{"posix-shm-open", func(t *testing.T) uct.MD { return openNamedMD(t) }},
		{"sysv", func(t *testing.T) uct.MD { return openMD(t, &SysvComponent{}, "sysv") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			md := tc.md(t)
			if a, _ := md.Query(); a.Flags&uct.MDFlagFixed == 0 {
				t.Fatalf("MD flags %#x lack MDFlagFixed", a.Flags)
			}
			fa, ok := md.(uct.FixedAllocator)
			if !ok {
				t.Fatalf("%T is no uct.FixedAllocator", md)
			}
			// A free place: reserve 4 pages and give them back.
			at, err := unix.MmapPtr(-1, 0, nil, uintptr(4*page), unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
			if err != nil {
				t.Fatal(err)
			}
			unix.MunmapPtr(at, uintptr(4*page))
			a, err := fa.MemAllocFixed(at, 2*page, uct.MemAccessDefault, "fixed")
			if err != nil {
				t.Fatalf("MemAllocFixed at %p: %v", at, err)
			}
			defer md.MemFree(a.Memh)
			if a.Address != at || a.Length != 2*page {
				t.Fatalf("MemAllocFixed at %p: %d bytes at %p", at, a.Length, a.Address)
			}
			b := unsafe.Slice((*byte)(at), 2*page)
			b[0], b[len(b)-1] = 1, 2
			if _, err := md.MkeyPack(nil, a.Memh); err != nil {
				t.Error(err)
			}
			for _, over := range []unsafe.Pointer{at, unsafe.Add(at, page)} {
				if o, err := fa.MemAllocFixed(over, 2*page, uct.MemAccessDefault, "over"); !errors.Is(err, ucs.ErrNoMemory) {
					if err == nil {
						md.MemFree(o.Memh)
					}
					t.Errorf("MemAllocFixed over the allocation at %p: %v, want ErrNoMemory", over, err)
				}
			}
			if b[0] != 1 || b[len(b)-1] != 2 {
				t.Error("a refused fixed allocation replaced the memory")
			}
			if _, err := fa.MemAllocFixed(unsafe.Add(at, 8), page, uct.MemAccessDefault, "odd"); !errors.Is(err, ucs.ErrInvalidParam) {
				t.Errorf("MemAllocFixed off a page: %v, want ErrInvalidParam", err)
			}
		})
	}
}

// openMD opens the MD name of component c with its defaults.
func openMD(t *testing.T, c uct.Component, name string) uct.MD {
	t.Helper()
	md, err := c.OpenMD(name, nil)
	if err != nil {
		t.Fatal(err)
	}
	return md
}
