package uct

import (
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucs"
)

// AllocMethod is a way of allocating memory (uct_alloc_method_t), for
// MemAlloc and IfaceMemAlloc.
type AllocMethod int

// Allocation methods. AllocMethodMD, Heap, Mmap and Huge keep the numbers
// of the seed document's enumeration; AllocMethodTHP is UCX's later
// addition.
const (
	// AllocMethodMD allocates with the memory domains given, in turn
	// (MD.MemAlloc of those with MDFlagAlloc): UCX's UCT_ALLOC_METHOD_MD
	// (PD in the seed). The memory is keyed by that MD.
	AllocMethodMD AllocMethod = iota
	// AllocMethodHeap allocates from the Go heap (libc's malloc in UCX).
	AllocMethodHeap
	// AllocMethodMmap maps anonymous memory (mmap).
	AllocMethodMmap
	// AllocMethodHuge maps anonymous huge pages (MAP_HUGETLB); it fails
	// where the system has none reserved.
	AllocMethodHuge
	// AllocMethodTHP maps anonymous memory aligned to 2 MiB and asks for
	// transparent huge pages (madvise MADV_HUGEPAGE); it fails where they
	// are disabled.
	AllocMethodTHP
	// AllocMethodDefault stands for DefaultAllocMethods at its place in
	// the list.
	AllocMethodDefault
)

// DefaultAllocMethods is the order AllocMethodDefault stands for: the
// memory domains, then anonymous mappings, then the heap.
var DefaultAllocMethods = []AllocMethod{AllocMethodMD, AllocMethodMmap, AllocMethodHeap}

// String returns the method's name as UCX's configuration spells it
// ("md", "heap", "mmap", "huge", "thp", "default"), or "AllocMethod(N)".
func (m AllocMethod) String() string {
	if m >= 0 && int(m) < len(allocMethodNames) {
		return allocMethodNames[m]
	}
	return fmt.Sprintf("AllocMethod(%d)", int(m))
}

var allocMethodNames = [...]string{"md", "heap", "mmap", "huge", "thp", "default"}

// AllocatedMemory describes memory that MemAlloc or IfaceMemAlloc
// allocated (uct_allocated_memory_t): where it is, its length (the length
// asked for, rounded up as the method requires), the method that
// allocated it, and with AllocMethodMD the MD and its handle. For
// IfaceMemAlloc, MD is the iface's MD for every method, and Memh its
// handle of the memory: of the allocation, or of a registration.
type AllocatedMemory struct {
	Address unsafe.Pointer
	Length  int
	Method  AllocMethod
	MD      MD
	Memh    Memh

	heap   []byte // AllocMethodHeap: keeps the memory alive
	mapped []byte // AllocMethodMmap, Huge, THP: the mapping, for munmap
	reg    bool   // Memh is a registration of MD (IfaceMemAlloc)
}

// hugePage is the size of a transparent huge page, the alignment of
// AllocMethodTHP.
const hugePage = 2 << 20

// MemAlloc allocates at least minLength bytes (uct_mem_alloc): it tries
// each method of methods in turn until one succeeds, and for
// AllocMethodMD each MD of mds in turn (those without MDFlagAlloc are
// passed over; an empty mds skips the method). The result says which
// method (and MD) allocated the memory; release it with MemFree. A
// minLength that is not positive, or an unknown method, fails with
// ucs.ErrInvalidParam; when no method succeeds the error wraps
// ucs.ErrNoMemory and says why each failed.
func MemAlloc(minLength int, methods []AllocMethod, mds []MD, name string) (AllocatedMemory, error) {
	if minLength <= 0 {
		return AllocatedMemory{}, fmt.Errorf("uct mem alloc of %d bytes: %w", minLength, ucs.ErrInvalidParam)
	}
	var why []string
	for _, m := range methods {
		try := []AllocMethod{m}
		if m == AllocMethodDefault {
			try = DefaultAllocMethods
		}
		for _, m := range try {
			mem, err := allocWith(m, minLength, mds, name)
			if err == nil {
				return mem, nil
			}
			if errors.Is(err, ucs.ErrInvalidParam) {
				return AllocatedMemory{}, fmt.Errorf("uct mem alloc: %w", err)
			}
			why = append(why, err.Error())
		}
	}
	return AllocatedMemory{}, fmt.Errorf("uct mem alloc of %d bytes (%s): no method succeeded: %w",
		minLength, strings.Join(why, "; "), ucs.ErrNoMemory)
}

// allocWith allocates length bytes with method m (mds for AllocMethodMD).
func allocWith(m AllocMethod, length int, mds []MD, name string) (AllocatedMemory, error) {
	switch m {
	case AllocMethodMD:
		if len(mds) == 0 {
			return AllocatedMemory{}, errors.New("md: no memory domain given")
		}
		var why []string
		for _, md := range mds {
			if attr, err := md.Query(); err != nil || attr.Flags&MDFlagAlloc == 0 {
				why = append(why, md.Name()+" does not allocate")
				continue
			}
			a, err := md.MemAlloc(length, MemAccessDefault, name)
			if err != nil {
				why = append(why, err.Error())
				continue
			}
			return AllocatedMemory{Address: a.Address, Length: a.Length, Method: m, MD: md, Memh: a.Memh}, nil
		}
		return AllocatedMemory{}, fmt.Errorf("md: %s", strings.Join(why, ", "))
	case AllocMethodHeap:
		b := make([]byte, length)
		return AllocatedMemory{Address: unsafe.Pointer(&b[0]), Length: length, Method: m, heap: b}, nil
	case AllocMethodMmap, AllocMethodHuge, AllocMethodTHP:
		return mapAnon(m, length)
	}
	return AllocatedMemory{}, fmt.Errorf("method %v: %w", m, ucs.ErrInvalidParam)
}

// mapAnon maps length bytes of anonymous memory for method m, rounded up
// to pages (to huge pages for Huge and THP).
func mapAnon(m AllocMethod, length int) (AllocatedMemory, error) {
	flags := unix.MAP_PRIVATE | unix.MAP_ANONYMOUS
	n := roundUp(length, unix.Getpagesize())
	if m == AllocMethodHuge {
		flags |= unix.MAP_HUGETLB
		n = roundUp(length, hugePage)
	}
	mapLen := n
	if m == AllocMethodTHP {
		// Map a huge page more than needed, to cut an aligned range out.
		n = roundUp(length, hugePage)
		mapLen = n + hugePage
	}
	p, err := unix.MmapPtr(-1, 0, nil, uintptr(mapLen), unix.PROT_READ|unix.PROT_WRITE, flags)
	if err != nil {
		return AllocatedMemory{}, fmt.Errorf("%v: mmap of %d bytes: %v", m, mapLen, err)
	}
	b := unsafe.Slice((*byte)(p), mapLen)
	if m == AllocMethodTHP {
		skip := roundUp(int(uintptr(p)), hugePage) - int(uintptr(p))
		b, err = trimMapping(b, skip, n)
		if err == nil {
			if err = unix.Madvise(b, unix.MADV_HUGEPAGE); err != nil {
				munmap(b)
			}
		}
		if err != nil {
			return AllocatedMemory{}, fmt.Errorf("%v: %v", m, err)
		}
	}
	return AllocatedMemory{Address: unsafe.Pointer(&b[0]), Length: n, Method: m, mapped: b}, nil
}

// trimMapping unmaps the bytes of mapping b before skip and after
// skip+n, and returns the n bytes left; on failure it unmaps all of b.
func trimMapping(b []byte, skip, n int) ([]byte, error) {
	if skip > 0 {
		if err := munmap(b[:skip]); err != nil {
			munmap(b[skip:])
			return nil, err
		}
	}
	if tail := len(b) - skip - n; tail > 0 {
		if err := munmap(b[skip+n:]); err != nil {
			munmap(b[skip : skip+n])
			return nil, err
		}
	}
	return b[skip : skip+n : skip+n], nil
}

// munmap unmaps b, a range of a mapping made with unix.MmapPtr.
func munmap(b []byte) error { return unix.MunmapPtr(unsafe.Pointer(&b[0]), uintptr(len(b))) }

func roundUp(n, to int) int { return (n + to - 1) / to * to }

// MemFree releases memory of MemAlloc or IfaceMemAlloc (uct_mem_free),
// and its registration when IfaceMemAlloc registered it. Memory freed
// already, or not from them, fails with ucs.ErrInvalidParam.
func MemFree(mem *AllocatedMemory) error {
	if mem == nil || mem.Address == nil {
		return fmt.Errorf("uct mem free: no allocation: %w", ucs.ErrInvalidParam)
	}
	var err error
	if mem.reg {
		err = mem.MD.MemDereg(mem.Memh)
	}
	switch mem.Method {
	case AllocMethodMD:
		err = errors.Join(err, mem.MD.MemFree(mem.Memh))
	case AllocMethodHeap:
	case AllocMethodMmap, AllocMethodHuge, AllocMethodTHP:
		if e := munmap(mem.mapped); e != nil {
			err = errors.Join(err, fmt.Errorf("munmap: %v: %w", e, ucs.ErrInvalidParam))
		}
	default:
		return fmt.Errorf("uct mem free: method %v: %w", mem.Method, ucs.ErrInvalidParam)
	}
	*mem = AllocatedMemory{}
	if err != nil {
		return fmt.Errorf("uct mem free: %w", err)
	}
	return nil
}

// IfaceMemAlloc allocates at least length bytes for use with ifaces of md
// (uct_iface_mem_alloc): MemAlloc with methods (DefaultAllocMethods when
// empty) and md as the one MD, then, when another method than
// AllocMethodMD allocated the memory and md registers memory (MDFlagReg),
// a registration with md, so that Memh keys the memory for md. On an MD
// that cannot register, memory of another method has no Memh (as in UCX).
// It fails as MemAlloc does, or with the error of MemReg (the memory is
// then freed).
func IfaceMemAlloc(md MD, length int, methods []AllocMethod, name string) (AllocatedMemory, error) {
	if len(methods) == 0 {
		methods = DefaultAllocMethods
	}
	mem, err := MemAlloc(length, methods, []MD{md}, name)
	if err != nil {
		return mem, fmt.Errorf("uct iface mem alloc: %w", err)
	}
	if mem.Method == AllocMethodMD {
		return mem, nil
	}
	mem.MD = md
	if attr, err := md.Query(); err != nil || attr.Flags&MDFlagReg == 0 {
		return mem, nil
	}
	h, err := md.MemReg(mem.Address, mem.Length, MemAccessDefault)
	if err != nil {
		n, m := mem.Length, mem.Method
		MemFree(&mem)
		return AllocatedMemory{}, fmt.Errorf("uct iface mem alloc: register %d bytes allocated by %v with %s: %w", n, m, md.Name(), err)
	}
	mem.Memh, mem.reg = h, true
	return mem, nil
}
