package ucp

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// Fields of MemMapParams (ucp_mem_map_params_field).
const (
	MemMapParamFieldAddress            uint64 = 1 << 0
	MemMapParamFieldLength             uint64 = 1 << 1
	MemMapParamFieldFlags              uint64 = 1 << 2
	MemMapParamFieldProt               uint64 = 1 << 3
	MemMapParamFieldMemoryType         uint64 = 1 << 4
	MemMapParamFieldExportedMemhBuffer uint64 = 1 << 5
)

// MemMapFlags are the flags of MemMapParams.Flags (UCP_MEM_MAP_*).
type MemMapFlags uint32

// Mem map flags (UCP_MEM_MAP_*).
const (
	// MemMapNonblock: map without populating the pages now.
	MemMapNonblock MemMapFlags = 1 << 0
	// MemMapAllocate: allocate the memory (the address is a hint, or
	// ignored) instead of registering the caller's.
	MemMapAllocate MemMapFlags = 1 << 1
	// MemMapFixed: with MemMapAllocate, at exactly the given address.
	MemMapFixed MemMapFlags = 1 << 2
)

// Memory protection bits (UCP_MEM_MAP_PROT_*).
const (
	ProtLocalRead   uint32 = 1 << 0
	ProtLocalWrite  uint32 = 1 << 1
	ProtRemoteRead  uint32 = 1 << 8
	ProtRemoteWrite uint32 = 1 << 9
	// ProtDefault is the protection used when none is given.
	ProtDefault = ProtLocalRead | ProtLocalWrite | ProtRemoteRead | ProtRemoteWrite
)

// MemMapParams are the parameters of Context.MemMap (ucp_mem_map_params_t).
// Only the fields whose MemMapParamField bit is set count; the others take
// their defaults: no address (MemMap allocates),
// flags 0, ProtDefault, host memory, no exported buffer. Length is
// mandatory unless ExportedMemhBuffer is given.
type MemMapParams struct {
	FieldMask  uint64
	Address    unsafe.Pointer
	Length     int
	Flags      MemMapFlags
	Prot       uint32
	MemoryType ucs.MemoryType
	// ExportedMemhBuffer is a buffer from Context.MemhPack with
	// MemhPackFlagExport, made by a process on this node: MemMap then maps
	// that process's memory here instead of mapping local memory.
	ExportedMemhBuffer []byte
}

// SetAddress sets the memory to register, or with MemMapAllocate the address
// to allocate at (a hint, or exact with MemMapFixed). Unset (or nil), MemMap
// allocates wherever it can, with or without MemMapAllocate.
func (p *MemMapParams) SetAddress(a unsafe.Pointer) *MemMapParams {
	p.Address, p.FieldMask = a, p.FieldMask|MemMapParamFieldAddress
	return p
}

// SetLength sets the number of bytes to map; mandatory unless an exported
// memh buffer is set.
func (p *MemMapParams) SetLength(n int) *MemMapParams {
	p.Length, p.FieldMask = n, p.FieldMask|MemMapParamFieldLength
	return p
}

// SetFlags sets MemMap* flags (default 0).
func (p *MemMapParams) SetFlags(f MemMapFlags) *MemMapParams {
	p.Flags, p.FieldMask = f, p.FieldMask|MemMapParamFieldFlags
	return p
}

// SetProt sets the protection (default ProtDefault: local and remote read
// and write). Peers are held to the remote bits: through a key of memory
// mapped without ProtRemoteWrite, puts and atomics fail with
// ucs.ErrRejected and write nothing; without ProtRemoteRead, gets and
// fetching atomics do (and rendezvous protocols do not read it in place).
// (A pointer from Rkey.Ptr is the program's own to use.)
func (p *MemMapParams) SetProt(prot uint32) *MemMapParams {
	p.Prot, p.FieldMask = prot, p.FieldMask|MemMapParamFieldProt
	return p
}

// SetMemoryType sets the memory type (default host; only host memory is
// supported).
func (p *MemMapParams) SetMemoryType(t ucs.MemoryType) *MemMapParams {
	p.MemoryType, p.FieldMask = t, p.FieldMask|MemMapParamFieldMemoryType
	return p
}

// SetExportedMemhBuffer sets the buffer of a memory handle that another
// process packed with Context.MemhPack and MemhPackFlagExport (default
// none): MemMap then maps the exporter's memory.
func (p *MemMapParams) SetExportedMemhBuffer(b []byte) *MemMapParams {
	p.ExportedMemhBuffer, p.FieldMask = b, p.FieldMask|MemMapParamFieldExportedMemhBuffer
	return p
}

// MemHandle is mapped memory (ucp_mem_h): registered with, or allocated by,
// the context's memory domains.
type MemHandle struct {
	ctx      *Context
	address  unsafe.Pointer
	length   int
	memType  ucs.MemoryType
	prot     uint32
	method   string     // how it was allocated ("md:posix", "mmap") or "" if given
	allocMD  *mdEntry   // the MD that allocated it, if any
	mmapped  bool       // memory from the mmap method, to munmap
	memhs    []uct.Memh // per context MD index; nil where not registered
	regMDs   []*mdEntry
	token    uint64       // names the mapping to software RMA requests; 0 if not remotely accessible
	imported *importedMem // memory of another process, mapped from an exported memh buffer
	unmapped bool
	// key caches the packed key of memory MemMap mapped, for the sends of
	// data inside it (keyFor).
	key atomic.Pointer[[]byte]
	// transient marks a registration made for one rendezvous transfer
	// (memRegFor), whose handle MemUnmap recycles.
	transient bool
	// packed is a transient registration's packed key (rndvKey), kept
	// with the handle as it is recycled.
	packed []byte
}

// MemMap maps memory for remote access (ucp_mem_map), as the fields of p
// say:
//
//   - ExportedMemhBuffer set (and not nil): the memory another process of
//     this node exported with Context.MemhPack is mapped here (see
//     MemhPack); Address, Length and Prot are then ignored and
//     MemMapAllocate is refused.
//   - No Address (unset or nil), with or without MemMapAllocate: memory
//     is allocated, trying UCX_ALLOC_PRIO's methods in order (an MD that
//     can allocate shareable memory first, then mmap), but an MD none of
//     whose transports UCX_TLS selects only after all the others (with
//     UCX_TLS=posix the posix MD, not sysv; with UCX_TLS=cma,tcp mmap), as
//     its memory is reachable by no selected transport.
//   - MemMapAllocate and an Address: memory is allocated at Address if
//     possible (a hint); with MemMapFixed exactly there, which the mmap
//     method and the MDs with uct.MDFlagFixed do (the shared-memory ones),
//     and never over memory that is mapped already.
//   - An Address without MemMapAllocate: the memory there is registered.
//
// The memory is then registered with every other MD that registers memory.
// Pages are never populated up front, so MemMapNonblock changes nothing.
//
// MemMap fails with ucs.ErrInvalidParam when neither Length nor an exported
// buffer is set, for a length that is not positive, for MemMapFixed
// without MemMapAllocate and an Address, or
// with an Address that is not page aligned, and for MemMapAllocate with an
// exported buffer; with ucs.ErrUnsupported for a memory type other than
// host (or unknown, taken as host); with ucs.ErrNoMemory when no method can
// allocate. Importing fails as Context.MemhPack's documentation says.
func (c *Context) MemMap(p *MemMapParams) (*MemHandle, error) {
	if p == nil || p.FieldMask&(MemMapParamFieldLength|MemMapParamFieldExportedMemhBuffer) == 0 {
		return nil, fmt.Errorf("ucp mem map: neither length nor exported memh buffer set: %w", ucs.ErrInvalidParam)
	}
	if c.closed.Load() {
		return nil, fmt.Errorf("ucp mem map: %w", ErrClosed)
	}
	var (
		flags MemMapFlags
		addr  unsafe.Pointer
	)
	if p.FieldMask&MemMapParamFieldFlags != 0 {
		flags = p.Flags
	}
	if p.FieldMask&MemMapParamFieldAddress != 0 {
		addr = p.Address
	}
	if p.FieldMask&MemMapParamFieldMemoryType != 0 && p.MemoryType != ucs.MemoryTypeHost && p.MemoryType != ucs.MemoryTypeUnknown {
		return nil, fmt.Errorf("ucp mem map: memory type %v: %w", p.MemoryType, ucs.ErrUnsupported)
	}
	if flags&MemMapFixed != 0 && uintptr(addr)%uintptr(unix.Getpagesize()) != 0 {
		return nil, fmt.Errorf("ucp mem map: MemMapFixed at %p, not page aligned: %w", addr, ucs.ErrInvalidParam)
	}
	if p.FieldMask&MemMapParamFieldExportedMemhBuffer != 0 && p.ExportedMemhBuffer != nil {
		if flags&MemMapAllocate != 0 {
			return nil, fmt.Errorf("ucp mem map: MemMapAllocate with an exported memh buffer: %w", ucs.ErrInvalidParam)
		}
		return c.memImport(p.ExportedMemhBuffer)
	}
	if p.FieldMask&MemMapParamFieldLength == 0 || p.Length <= 0 {
		return nil, fmt.Errorf("ucp mem map: length %d: %w", p.Length, ucs.ErrInvalidParam)
	}
	if addr == nil {
		// No address (nil or unset) means allocate, with or without
		// MemMapAllocate, as ucp_mem_map_params_t.address says.
		flags |= MemMapAllocate
	}
	switch {
	case addr == nil && flags&MemMapFixed != 0:
		return nil, fmt.Errorf("ucp mem map: MemMapFixed without an address: %w", ucs.ErrInvalidParam)
	case addr != nil && flags&MemMapAllocate == 0 && flags&MemMapFixed != 0:
		return nil, fmt.Errorf("ucp mem map: MemMapFixed on memory to register: %w", ucs.ErrInvalidParam)
	}
	m := &MemHandle{ctx: c, length: p.Length, prot: ProtDefault, memhs: make([]uct.Memh, len(c.mds))}
	if p.FieldMask&MemMapParamFieldProt != 0 {
		m.prot = p.Prot
	}
	if flags&MemMapAllocate != 0 {
		if err := c.allocate(m, addr, flags&MemMapFixed != 0); err != nil {
			return nil, err
		}
	} else {
		m.address = addr
	}
	for _, e := range c.mds {
		if e == m.allocMD || e.attr.Flags&uct.MDFlagReg == 0 {
			continue
		}
		memh, err := e.md.MemReg(m.address, m.length, uct.MemAccessDefault)
		if err != nil {
			continue // that MD cannot reach this memory; its transports will not be used for it
		}
		m.memhs[e.index] = memh
		m.regMDs = append(m.regMDs, e)
	}
	if m.prot&(ProtRemoteRead|ProtRemoteWrite) != 0 {
		m.token = newToken()
		c.regions.Store(m.token, m)
	}
	c.addMapped(m)
	return m, nil
}

// addMapped records m in the context's address-ordered list of mapped
// memory.
func (c *Context) addMapped(m *MemHandle) {
	c.mappedMu.Lock()
	defer c.mappedMu.Unlock()
	i := sort.Search(len(c.mapped), func(i int) bool { return uintptr(c.mapped[i].address) >= uintptr(m.address) })
	c.mapped = append(c.mapped, nil)
	copy(c.mapped[i+1:], c.mapped[i:])
	c.mapped[i] = m
}

// removeMapped drops m from the list of mapped memory.
func (c *Context) removeMapped(m *MemHandle) {
	c.mappedMu.Lock()
	defer c.mappedMu.Unlock()
	for i, e := range c.mapped {
		if e == m {
			c.mapped = append(c.mapped[:i], c.mapped[i+1:]...)
			return
		}
	}
}

// mappedAt returns mapped memory that holds the n bytes at p and peers may
// access as prot says, or nil.
func (c *Context) mappedAt(p uintptr, n int, prot uint32) *MemHandle {
	c.mappedMu.RLock()
	defer c.mappedMu.RUnlock()
	// The last mapping that starts at or before p, then those before it
	// (mappings may nest).
	i := sort.Search(len(c.mapped), func(i int) bool { return uintptr(c.mapped[i].address) > p })
	for i--; i >= 0; i-- {
		m := c.mapped[i]
		if m.contains(p, n) && m.prot&prot == prot {
			return m
		}
	}
	return nil
}

// contains reports whether the n bytes at p lie inside m.
func (m *MemHandle) contains(p uintptr, n int) bool {
	base := uintptr(m.address)
	return p >= base && p-base <= uintptr(m.length) && uintptr(n) <= uintptr(m.length)-(p-base)
}

// keyFor returns the packed key of m when the n bytes at p lie inside it
// and peers may access it as prot (ProtRemoteRead, ProtRemoteWrite) says,
// nil otherwise; the key is packed once.
func (m *MemHandle) keyFor(p uintptr, n int, prot uint32) []byte {
	if m.unmapped || m.imported != nil || m.prot&prot != prot || !m.contains(p, n) {
		return nil
	}
	if k := m.key.Load(); k != nil {
		return *k
	}
	k, err := m.ctx.RkeyPack(m)
	if err != nil {
		return nil
	}
	m.key.Store(&k)
	return k
}

// memRegFor registers data with the memory domain e only, for the life of
// one transfer: MemUnmap releases it, and recycles the handle. Only the
// handle is: the registration itself ends with the transfer, since a
// registration lets peers reach the memory (tcp), which the program may
// use for something else afterwards.
func (c *Context) memRegFor(data []byte, e *mdEntry) (*MemHandle, error) {
	p := unsafe.Pointer(unsafe.SliceData(data))
	memh, err := e.md.MemReg(p, len(data), uct.MemAccessDefault)
	if err != nil {
		return nil, err
	}
	m, _ := c.transients.Get().(*MemHandle)
	if m == nil {
		m = &MemHandle{ctx: c, prot: ProtDefault, memhs: make([]uct.Memh, len(c.mds)), regMDs: make([]*mdEntry, 1), transient: true}
	}
	m.address, m.length, m.unmapped = p, len(data), false
	m.regMDs[0], m.memhs[e.index] = e, memh
	return m, nil
}

// recycleTransient keeps m, a transient handle MemUnmap released, for the
// next memRegFor: nothing may refer to it any more.
func (c *Context) recycleTransient(m *MemHandle) {
	m.memhs[m.regMDs[0].index], m.regMDs[0] = nil, nil
	m.address, m.packed = nil, m.packed[:0]
	c.transients.Put(m)
}

// allocate allocates m.length bytes for m with the first method of
// UCX_ALLOC_PRIO that can: at hint if possible, and with fixed exactly at
// hint or not at all (mmap, and the MDs with uct.MDFlagFixed, place memory
// at a given address; the others are passed over).
//
// An MD none of whose transports UCX_TLS selects is passed over on the
// first round and tried only on a second one, after mmap: its memory is
// reachable by no selected transport (with UCX_TLS=posix, sysv memory has
// no key the posix transport unpacks, so atomics and direct pointers to it
// would fail), while mmap memory is at least registered with the selected
// MDs that register memory.
func (c *Context) allocate(m *MemHandle, hint unsafe.Pointer, fixed bool) error {
	var why []string
	for _, unselected := range []bool{false, true} {
		if err := c.allocateRound(m, hint, fixed, unselected, &why); err == nil {
			return nil
		}
	}
	where := ""
	if fixed {
		where = fmt.Sprintf(" at %p", hint)
	}
	return fmt.Errorf("ucp mem map: no method of UCX_ALLOC_PRIO=%s allocates %d bytes%s (%s): %w",
		c.config.Get("ALLOC_PRIO"), m.length, where, strings.Join(why, "; "), ucs.ErrNoMemory)
}

// allocateRound is one round of allocate: with unselected false, every
// method of UCX_ALLOC_PRIO but the MDs of no selected transport; with
// unselected true, only those MDs. It appends why each method failed to
// why, and returns ucs.ErrNoMemory when none allocated.
func (c *Context) allocateRound(m *MemHandle, hint unsafe.Pointer, fixed, unselected bool, why *[]string) error {
	for _, method := range c.allocPrio {
		switch {
		case strings.HasPrefix(method, "md:"):
			want := strings.TrimPrefix(method, "md:")
			for _, e := range c.mds {
				if e.attr.Flags&uct.MDFlagAlloc == 0 || (want != "*" && e.md.Name() != want) || (e.selected == 0) != unselected {
					continue
				}
				var (
					a   uct.Allocation
					err error
				)
				if fixed {
					fa, ok := e.md.(uct.FixedAllocator)
					if !ok || e.attr.Flags&uct.MDFlagFixed == 0 {
						continue // this MD puts its memory where it likes
					}
					a, err = fa.MemAllocFixed(hint, m.length, uct.MemAccessDefault, c.name)
				} else {
					a, err = e.md.MemAlloc(m.length, uct.MemAccessDefault, c.name)
				}
				if err != nil {
					*why = append(*why, err.Error())
					continue
				}
				m.address, m.memhs[e.index], m.allocMD, m.method = a.Address, a.Memh, e, method
				m.regMDs = append(m.regMDs, e)
				return nil
			}
		case unselected:
			continue
		case method == "mmap" || method == "heap":
			mflags := unix.MAP_PRIVATE | unix.MAP_ANONYMOUS | unix.MAP_NORESERVE
			if fixed {
				// Never MAP_FIXED: it would replace whatever is mapped there,
				// the Go heap included.
				mflags |= unix.MAP_FIXED_NOREPLACE
			}
			p, err := unix.MmapPtr(-1, 0, hint, uintptr(m.length), unix.PROT_READ|unix.PROT_WRITE, mflags)
			if err != nil {
				*why = append(*why, fmt.Sprintf("mmap at %p: %v", hint, err))
				continue
			}
			if fixed && p != hint { // a kernel older than MAP_FIXED_NOREPLACE takes it as a hint
				unix.MunmapPtr(p, uintptr(m.length))
				*why = append(*why, fmt.Sprintf("mmap placed the memory at %p, not %p", p, hint))
				continue
			}
			m.address, m.mmapped, m.method = p, true, method
			return nil
		}
	}
	return ucs.ErrNoMemory
}

// NamesMemory reports whether peers map memory of this context by names in
// the file system (UCX_POSIX_USE_SHM_OPEN=y), which UnlinkMemoryNames
// removes: a peer must then map what it needs before that call. This is
// goshmem's own; UCX has no such routine.
func (c *Context) NamesMemory() bool {
	for _, e := range c.mds {
		if u, ok := e.md.(uct.NameUnlinker); ok && u.NamesMemory() {
			return true
		}
	}
	return false
}

// UnlinkMemoryNames removes from the file system the names through which
// peers map the memory this context allocated (posix segments with
// UCX_POSIX_USE_SHM_OPEN=y; see uct.NameUnlinker). Call it once every peer
// has mapped what it needs (unpacked the keys and used them, or taken
// their pointers): the memory then stays usable, and nothing is left in
// /dev/shm however the process ends. Memory allocated later is named again
// until the next call. This is goshmem's own; UCX has no such routine.
func (c *Context) UnlinkMemoryNames() error {
	var errs []error
	for _, e := range c.mds {
		if u, ok := e.md.(uct.NameUnlinker); ok {
			if err := u.UnlinkNames(); err != nil {
				errs = append(errs, fmt.Errorf("ucp: %s: %w", e.md.Name(), err))
			}
		}
	}
	return errors.Join(errs...)
}

// MemUnmap releases the mapping and, if MemMap allocated it, the memory
// (ucp_mem_unmap).
//
// The mapping of an imported handle is released; the exporter's memory is
// not. A nil handle, one of another context, or one unmapped already fails
// with ucs.ErrInvalidParam.
func (c *Context) MemUnmap(m *MemHandle) error {
	if m == nil || m.unmapped || m.ctx != c {
		return fmt.Errorf("ucp mem unmap: %w", ucs.ErrInvalidParam)
	}
	m.unmapped = true
	if !m.transient {
		c.removeMapped(m)
	}
	if m.imported != nil {
		if err := m.imported.comp.RkeyRelease(m.imported.bundle); err != nil {
			return fmt.Errorf("ucp mem unmap of imported memory: %w", err)
		}
		return nil
	}
	if m.token != 0 {
		c.regions.Delete(m.token)
	}
	var first error
	for _, e := range m.regMDs {
		var err error
		if e == m.allocMD {
			err = e.md.MemFree(m.memhs[e.index])
		} else {
			err = e.md.MemDereg(m.memhs[e.index])
		}
		if err != nil && first == nil {
			first = err
		}
	}
	if m.transient {
		c.recycleTransient(m)
		if first != nil {
			return fmt.Errorf("ucp mem unmap: %w", first)
		}
		return nil
	}
	if m.mmapped {
		if err := unix.MunmapPtr(m.address, uintptr(m.length)); err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return fmt.Errorf("ucp mem unmap: %w", first)
	}
	return nil
}

// Address returns the start of the mapped memory.
func (m *MemHandle) Address() unsafe.Pointer { return m.address }

// Length returns the length of the mapped memory.
func (m *MemHandle) Length() int { return m.length }

// Fields of MemAttr (ucp_mem_attr_field). MemAttrFieldMethod and
// MemAttrFieldMDs are goshmem's.
const (
	MemAttrFieldAddress uint64 = 1 << 0
	MemAttrFieldLength  uint64 = 1 << 1
	MemAttrFieldMemType uint64 = 1 << 2
	MemAttrFieldMethod  uint64 = 1 << 32
	MemAttrFieldMDs     uint64 = 1 << 33

	memAttrFieldsAll = MemAttrFieldAddress | MemAttrFieldLength | MemAttrFieldMemType | MemAttrFieldMethod | MemAttrFieldMDs
)

// MemAttr describes mapped memory (ucp_mem_attr_t). FieldMask says which
// fields are filled in.
type MemAttr struct {
	FieldMask  uint64
	Address    unsafe.Pointer
	Length     int
	MemoryType ucs.MemoryType
	// Method is how the memory was allocated ("md:posix", "mmap"), "" if it
	// was given to MemMap, or "import:<component>" for memory of another
	// process mapped from an exported memh buffer.
	Method string
	// MDs names the memory domains the memory is registered with.
	MDs []string
}

// Query describes the mapped memory, every field of MemAttr filled in
// (ucp_mem_query with every field); for an unmapped handle only FieldMask
// is.
func (m *MemHandle) Query() MemAttr {
	a := MemAttr{FieldMask: memAttrFieldsAll}
	m.QueryAttr(&a)
	return a
}

// QueryAttr fills in the fields of attr that attr.FieldMask selects, and
// clears the others (ucp_mem_query); unknown bits are ignored. It fails with
// ucs.ErrInvalidParam for a nil attr or a nil or unmapped handle.
func (m *MemHandle) QueryAttr(attr *MemAttr) error {
	if attr == nil || m == nil || m.unmapped {
		return fmt.Errorf("ucp mem query: %w", ucs.ErrInvalidParam)
	}
	*attr = MemAttr{FieldMask: attr.FieldMask}
	if attr.FieldMask&MemAttrFieldAddress != 0 {
		attr.Address = m.address
	}
	if attr.FieldMask&MemAttrFieldLength != 0 {
		attr.Length = m.length
	}
	if attr.FieldMask&MemAttrFieldMemType != 0 {
		attr.MemoryType = m.memType
	}
	if attr.FieldMask&MemAttrFieldMethod != 0 {
		attr.Method = m.method
	}
	if attr.FieldMask&MemAttrFieldMDs != 0 {
		for _, e := range m.regMDs {
			attr.MDs = append(attr.MDs, e.md.Name())
		}
	}
	return nil
}
