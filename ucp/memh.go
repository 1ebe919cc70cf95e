package ucp

import (
	"bytes"
	"encoding/binary"
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

// Mem map flags (UCP_MEM_MAP_*).
const (
	MemMapNonblock uint32 = 1 << 0
	MemMapAllocate uint32 = 1 << 1
	MemMapFixed    uint32 = 1 << 2
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
// their defaults: no address (MemMap allocates, given MemMapAllocate),
// flags 0, ProtDefault, host memory, no exported buffer. Length is
// mandatory unless ExportedMemhBuffer is given.
type MemMapParams struct {
	FieldMask  uint64
	Address    unsafe.Pointer
	Length     int
	Flags      uint32
	Prot       uint32
	MemoryType ucs.MemoryType
	// ExportedMemhBuffer is a buffer from Context.MemhPack with
	// MemhPackFlagExport, made by a process on this node: MemMap then maps
	// that process's memory here instead of mapping local memory.
	ExportedMemhBuffer []byte
}

// SetAddress sets the memory to register, or with MemMapAllocate the address
// to allocate at (a hint, or exact with MemMapFixed). Unset (or nil), MemMap
// allocates wherever it can, which needs MemMapAllocate.
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
func (p *MemMapParams) SetFlags(f uint32) *MemMapParams {
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
	// transient marks a registration made for one rendezvous send.
	transient bool
}

// MemMap maps memory for remote access (ucp_mem_map), as the fields of p
// say:
//
//   - ExportedMemhBuffer set (and not nil): the memory another process of
//     this node exported with Context.MemhPack is mapped here (see
//     MemhPack); Address, Length and Prot are then ignored and
//     MemMapAllocate is refused.
//   - MemMapAllocate and no Address: memory is allocated, trying
//     UCX_ALLOC_PRIO's methods in order (an MD that can allocate shareable
//     memory first, then mmap).
//   - MemMapAllocate and an Address: memory is allocated at Address if
//     possible (a hint); with MemMapFixed exactly there, which only the mmap
//     method does, and never over memory that is mapped already.
//   - An Address without MemMapAllocate: the memory there is registered.
//
// The memory is then registered with every other MD that registers memory.
// Pages are never populated up front, so MemMapNonblock changes nothing.
//
// MemMap fails with ucs.ErrInvalidParam when neither Length nor an exported
// buffer is set, for a length that is not positive, for no Address without
// MemMapAllocate, for MemMapFixed without MemMapAllocate and an Address, or
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
		flags uint32
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
	switch {
	case addr == nil && flags&MemMapAllocate == 0:
		return nil, fmt.Errorf("ucp mem map: no address and no MemMapAllocate: %w", ucs.ErrInvalidParam)
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
// one transfer: MemUnmap releases it.
func (c *Context) memRegFor(data []byte, e *mdEntry) (*MemHandle, error) {
	p := unsafe.Pointer(unsafe.SliceData(data))
	memh, err := e.md.MemReg(p, len(data), uct.MemAccessDefault)
	if err != nil {
		return nil, err
	}
	m := &MemHandle{ctx: c, address: p, length: len(data), prot: ProtDefault, memhs: make([]uct.Memh, len(c.mds)),
		regMDs: []*mdEntry{e}, transient: true}
	m.memhs[e.index] = memh
	return m, nil
}

// allocate allocates m.length bytes for m with the first method of
// UCX_ALLOC_PRIO that can: at hint if possible, and with fixed exactly at
// hint or not at all (only mmap places memory at a given address).
func (c *Context) allocate(m *MemHandle, hint unsafe.Pointer, fixed bool) error {
	var why []string
	for _, method := range c.allocPrio {
		switch {
		case strings.HasPrefix(method, "md:"):
			if fixed {
				continue // MD allocations go where the MD puts them
			}
			want := strings.TrimPrefix(method, "md:")
			for _, e := range c.mds {
				if e.attr.Flags&uct.MDFlagAlloc == 0 || (want != "*" && e.md.Name() != want) {
					continue
				}
				a, err := e.md.MemAlloc(m.length, uct.MemAccessDefault, c.name)
				if err != nil {
					why = append(why, err.Error())
					continue
				}
				m.address, m.memhs[e.index], m.allocMD, m.method = a.Address, a.Memh, e, method
				m.regMDs = append(m.regMDs, e)
				return nil
			}
		case method == "mmap" || method == "heap":
			mflags := unix.MAP_PRIVATE | unix.MAP_ANONYMOUS | unix.MAP_NORESERVE
			if fixed {
				// Never MAP_FIXED: it would replace whatever is mapped there,
				// the Go heap included.
				mflags |= unix.MAP_FIXED_NOREPLACE
			}
			p, err := unix.MmapPtr(-1, 0, hint, uintptr(m.length), unix.PROT_READ|unix.PROT_WRITE, mflags)
			if err != nil {
				why = append(why, fmt.Sprintf("mmap at %p: %v", hint, err))
				continue
			}
			if fixed && p != hint { // a kernel older than MAP_FIXED_NOREPLACE takes it as a hint
				unix.MunmapPtr(p, uintptr(m.length))
				why = append(why, fmt.Sprintf("mmap placed the memory at %p, not %p", p, hint))
				continue
			}
			m.address, m.mmapped, m.method = p, true, method
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

// Packed rkey layout (little endian):
//
//	magic "GRK" version(2)  u8 memory type  u8 remote access  u64 address
//	u64 length  u8 count, then per MD: u8 len component, u16 len mkey, mkey
//
// The remote access byte holds rkeyRead and rkeyWrite: what the mapping's
// protection (ProtRemoteRead, ProtRemoteWrite) lets peers do.
const (
	rkeyMagic   = "GRK"
	rkeyVersion = 2
	maxRkeyMDs  = 16
	maxRkeyBlob = 4096
)

// RkeyPack packs the remote key of m, for peers to unpack with
// Endpoint.RkeyUnpack (ucp_rkey_pack).
// It fails with ucs.ErrInvalidParam for a nil or unmapped handle, and with
// ucs.ErrUnsupported for imported memory (another process's, which only
// that process can key).
func (c *Context) RkeyPack(m *MemHandle) ([]byte, error) {
	if m == nil || m.unmapped {
		return nil, fmt.Errorf("ucp rkey pack: %w", ucs.ErrInvalidParam)
	}
	if m.imported != nil {
		return nil, fmt.Errorf("ucp rkey pack: memory imported from another process: %w", ucs.ErrUnsupported)
	}
	b := append([]byte(rkeyMagic), rkeyVersion, byte(m.memType), m.remoteAccess())
	b = binary.LittleEndian.AppendUint64(b, uint64(uintptr(m.address)))
	b = binary.LittleEndian.AppendUint64(b, uint64(m.length))
	n := len(m.regMDs)
	if m.token != 0 {
		n++
	}
	b = append(b, byte(n))
	if m.token != 0 {
		b = appendStr8(b, swComponent)
		b = appendBlob16(b, binary.LittleEndian.AppendUint64(nil, m.token))
	}
	for _, e := range m.regMDs {
		mk, err := e.md.MkeyPack(m.memhs[e.index])
		if err != nil {
			return nil, fmt.Errorf("ucp rkey pack %s: %w", e.md.Name(), err)
		}
		b = appendStr8(b, e.comp.Name())
		b = appendBlob16(b, mk)
	}
	return b, nil
}

// RkeyBufferRelease exists for symmetry with ucp_rkey_buffer_release.
func RkeyBufferRelease([]byte) {}

// Remote access bits of a packed key.
const (
	rkeyRead  uint8 = 1 << 0
	rkeyWrite uint8 = 1 << 1
)

// remoteAccess returns the remote access bits of m's protection.
func (m *MemHandle) remoteAccess() uint8 {
	var a uint8
	if m.prot&ProtRemoteRead != 0 {
		a |= rkeyRead
	}
	if m.prot&ProtRemoteWrite != 0 {
		a |= rkeyWrite
	}
	return a
}

type packedRkey struct {
	memType ucs.MemoryType
	access  uint8
	address uint64
	length  uint64
	mkeys   []packedMkey
}

type packedMkey struct {
	component string
	mkey      []byte
}

// decodeRkey parses a packed rkey; anything malformed fails with
// ucs.ErrInvalidParam.
func decodeRkey(b []byte) (*packedRkey, error) {
	bad := func(why string) error {
		return fmt.Errorf("ucp: packed rkey (%d bytes): %s: %w", len(b), why, ucs.ErrInvalidParam)
	}
	if len(b) > maxRkeyBlob {
		return nil, bad("too long")
	}
	d := decoder{b: b}
	if string(d.take(len(rkeyMagic))) != rkeyMagic {
		return nil, bad("bad magic")
	}
	if v := d.u8(); v != rkeyVersion {
		return nil, bad(fmt.Sprintf("version %d", v))
	}
	k := &packedRkey{memType: ucs.MemoryType(d.u8()), access: d.u8(), address: d.u64(), length: d.u64()}
	n := int(d.u8())
	if d.err {
		return nil, bad("truncated header")
	}
	if k.access&^(rkeyRead|rkeyWrite) != 0 {
		return nil, bad(fmt.Sprintf("remote access %#x", k.access))
	}
	if k.memType != ucs.MemoryTypeHost {
		return nil, bad(fmt.Sprintf("memory type %d", k.memType))
	}
	if k.length == 0 || k.address+k.length < k.address {
		return nil, bad("empty or wrapping range")
	}
	if n > maxRkeyMDs {
		return nil, bad(fmt.Sprintf("%d memory domains", n))
	}
	for i := 0; i < n; i++ {
		mk := packedMkey{component: d.str8(), mkey: d.blob16()}
		if d.err || mk.component == "" {
			return nil, bad(fmt.Sprintf("memory domain %d truncated or unnamed", i))
		}
		k.mkeys = append(k.mkeys, mk)
	}
	if len(d.b) != 0 {
		return nil, bad(fmt.Sprintf("%d trailing bytes", len(d.b)))
	}
	return k, nil
}

// rkeyEntry is one unpacked memory key.
type rkeyEntry struct {
	comp   uct.Component
	bundle uct.RkeyBundle
	hasPtr bool
}

// rkeyLane is the lane an Rkey's operations take, with the uct key and the
// protocol limits that go with it.
type rkeyLane struct {
	l        *lane
	ep       uct.EP
	rkey     uint64
	putShort int  // largest put sent short (-1: none)
	putBcopy int  // largest put sent bcopy (then zcopy)
	getBcopy int  // largest get done bcopy (then zcopy)
	get      bool // the lane does gets
}

func newRkeyLane(c *Context, l *lane, rkey uint64) *rkeyLane {
	at := l.wi.attr
	rl := &rkeyLane{l: l, ep: l.ep, rkey: rkey, putShort: at.Put.MaxShort, putBcopy: at.Put.MaxBcopy,
		getBcopy: at.Get.MaxBcopy, get: at.Flags&capGet != 0 && l.remote.capFlags&capGet != 0}
	if thr := c.zcopyThr; thr > 0 {
		rl.putBcopy = min(rl.putBcopy, thr-1)
		rl.getBcopy = min(rl.getBcopy, thr-1)
	}
	if thr := c.bcopyThr; thr > 0 {
		rl.putShort = min(rl.putShort, thr-1)
	}
	if at.Flags&uct.IfaceFlagPutShort == 0 {
		rl.putShort = -1
	}
	if at.Flags&uct.IfaceFlagGetBcopy == 0 {
		rl.getBcopy = -1
	}
	return rl
}

// Rkey is a remote key unpacked on an endpoint (ucp_rkey_h): the lanes its
// operations take, chosen among the endpoint's candidates by the memory
// domains that registered the remote memory, and what they need to reach it.
type Rkey struct {
	ep      *Endpoint
	access  uint8 // rkeyRead, rkeyWrite: what the owner lets peers do
	packed  []byte
	address uint64
	length  uint64
	entries []rkeyEntry
	swToken uint64    // token for software RMA and atomics; 0 if none
	rma     *rkeyLane // nil: software RMA over the AM lane
	amo     *rkeyLane // nil: software atomics over the AM lane
	ptr     *rkeyEntry
	base    unsafe.Pointer // through ptr: where the memory at address is mapped here
}

// allows checks that the key's owner lets peers access its memory the way
// need (rkeyRead, rkeyWrite) says: memory mapped without ProtRemoteWrite is
// not written, without ProtRemoteRead not read, and an operation that
// would is refused with ucs.ErrRejected.
func (rk *Rkey) allows(need uint8, what string) error {
	if rk.access&need != need {
		return fmt.Errorf("ucp %s: the memory is mapped without remote %s access: %w", what, accessName(need&^rk.access), ucs.ErrRejected)
	}
	return nil
}

func accessName(a uint8) string {
	switch a {
	case rkeyRead:
		return "read"
	case rkeyWrite:
		return "write"
	}
	return "read and write"
}

// direct returns a local pointer to [raddr, raddr+n) when a transport that
// reaches the peer maps the key's memory here, and nil otherwise. The
// memory of a key is mapped in one piece, so the pointer is an offset from
// base.
func (rk *Rkey) direct(raddr uint64, n int) unsafe.Pointer {
	if rk.base == nil || raddr < rk.address || uint64(n) > rk.length || raddr-rk.address > rk.length-uint64(n) {
		return nil
	}
	return unsafe.Add(rk.base, raddr-rk.address)
}

// laneOrNil returns the lane of rl, or nil for none.
func (rl *rkeyLane) laneOrNil() *lane {
	if rl == nil {
		return nil
	}
	return rl.l
}

// RkeyUnpack unpacks a key packed by Context.RkeyPack in the peer
// (ucp_ep_rkey_unpack) and picks, for its RMA and for its atomics, the best
// candidate lane whose memory domain registered the memory, connecting it if
// needed. Operations no lane can do are done in software over the AM lane.
// It fails with ucs.ErrInvalidParam for malformed input and
// ucs.ErrUnreachable when nothing can reach the memory.
func (ep *Endpoint) RkeyUnpack(packed []byte) (*Rkey, error) {
	if ep.closed.Load() {
		return nil, fmt.Errorf("ucp rkey unpack: %w", ErrClosed)
	}
	ep.laneMu.Lock() // lanes and their usages; several goroutines may unpack at once
	defer ep.laneMu.Unlock()
	k, err := decodeRkey(packed)
	if err != nil {
		return nil, fmt.Errorf("ucp rkey unpack: %w", err)
	}
	rk := &Rkey{ep: ep, access: k.access, packed: append([]byte(nil), packed...), address: k.address, length: k.length}
	mkeys := map[string][]byte{}
	for _, mk := range k.mkeys {
		if mk.component == swComponent {
			if len(mk.mkey) != 8 {
				return nil, fmt.Errorf("ucp rkey unpack: software token of %d bytes: %w", len(mk.mkey), ucs.ErrInvalidParam)
			}
			rk.swToken = binary.LittleEndian.Uint64(mk.mkey)
			continue
		}
		mkeys[mk.component] = mk.mkey
	}
	// unpack returns the entry of the component's key, unpacking it once.
	unpack := func(name string) (*rkeyEntry, error) {
		for i := range rk.entries {
			if rk.entries[i].comp.Name() == name {
				return &rk.entries[i], nil
			}
		}
		comp, err := uct.LookupComponent(name)
		if err != nil {
			return nil, err
		}
		b, err := comp.RkeyUnpack(mkeys[name])
		if err != nil {
			return nil, err
		}
		hasPtr := false
		for _, e := range ep.w.ctx.mds {
			if e.comp == comp && e.attr.Flags&uct.MDFlagRkeyPtr != 0 {
				hasPtr = true
			}
		}
		rk.entries = append(rk.entries, rkeyEntry{comp: comp, bundle: b, hasPtr: hasPtr})
		return &rk.entries[len(rk.entries)-1], nil
	}
	rk.entries = make([]rkeyEntry, 0, len(mkeys))
	for i := range ep.cands {
		c := &ep.cands[i]
		name := c.wi.rsc.md.comp.Name()
		if _, ok := mkeys[name]; !ok || (rk.rma != nil && rk.amo != nil) {
			continue
		}
		wantRMA, wantAMO := rk.rma == nil && c.can(capRMA), rk.amo == nil && c.canAMO()
		if !wantRMA && !wantAMO {
			continue
		}
		e, err := unpack(name)
		if err != nil {
			continue // this lane cannot use the key; a later one may
		}
		l, err := ep.laneFor(c)
		if err != nil {
			continue
		}
		if wantRMA {
			rk.rma, l.usage = newRkeyLane(ep.w.ctx, l, e.bundle.Rkey), l.usage|usageRMA
		}
		if wantAMO {
			rk.amo, l.usage = &rkeyLane{l: l, ep: l.ep, rkey: e.bundle.Rkey}, l.usage|usageAMO
		}
	}
	// Direct access: any key whose component maps the memory here, among
	// the components that reach the peer through this endpoint (one from a
	// WorkerAddressFlagNetOnly address reaches none).
	for name := range mkeys {
		if rk.ptr != nil {
			break
		}
		if !ep.reachesComponent(name) {
			continue
		}
		for _, e := range ep.w.ctx.mds {
			// Only through a transport UCX_TLS selected: an MD kept just to
			// allocate memory must not open a path the user excluded.
			if e.comp.Name() == name && e.attr.Flags&uct.MDFlagRkeyPtr != 0 && e.selected > 0 {
				if pe, err := unpack(name); err == nil && pe.hasPtr {
					if base, err := pe.comp.RkeyPtr(pe.bundle, rk.address); err == nil {
						rk.ptr, rk.base = pe, base
						ep.direct.Store(true)
					}
				}
				break
			}
		}
	}
	if rk.rma == nil && rk.amo == nil && rk.ptr == nil && (rk.swToken == 0 || ep.am == nil) {
		rk.Destroy()
		return nil, fmt.Errorf("ucp rkey unpack: no lane of %s can reach the memory: %w", ep.name, ucs.ErrUnreachable)
	}
	return rk, nil
}

// reachesComponent reports whether a candidate lane of the endpoint belongs
// to the component name.
func (ep *Endpoint) reachesComponent(name string) bool {
	for i := range ep.cands {
		if ep.cands[i].wi.rsc.md.comp.Name() == name {
			return true
		}
	}
	return false
}

// Ptr returns a local pointer through which the remote address raddr can be
// read and written directly (ucp_rkey_ptr); ucs.ErrUnreachable where no
// transport maps the peer's memory here, ucs.ErrOutOfRange outside the key.
func (rk *Rkey) Ptr(raddr uint64) (unsafe.Pointer, error) {
	if raddr < rk.address || raddr-rk.address >= rk.length {
		return nil, fmt.Errorf("ucp rkey ptr 0x%x: %w", raddr, ucs.ErrOutOfRange)
	}
	if rk.ptr == nil {
		return nil, fmt.Errorf("ucp rkey ptr: %w", ucs.ErrUnreachable)
	}
	p, err := rk.ptr.comp.RkeyPtr(rk.ptr.bundle, raddr)
	if err != nil {
		return nil, fmt.Errorf("ucp rkey ptr: %w", err)
	}
	return p, nil
}

// Compare orders two keys by their packed form (ucp_rkey_compare): 0 when
// they key the same memory the same way.
func (rk *Rkey) Compare(o *Rkey) int { return bytes.Compare(rk.packed, o.packed) }

// Destroy releases the key (ucp_rkey_destroy).
func (rk *Rkey) Destroy() {
	for _, e := range rk.entries {
		e.comp.RkeyRelease(e.bundle)
	}
	rk.entries, rk.ptr, rk.rma, rk.amo, rk.base = nil, nil, nil, nil, nil
}
