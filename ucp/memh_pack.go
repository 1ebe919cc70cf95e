package ucp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// Fields of MemhPackParams (ucp_memh_pack_params_field).
const (
	MemhPackParamFieldFlags uint64 = 1 << 0
)

// Flags of MemhPackParams (ucp_memh_pack_flags).
// MemhPackFlags are the flags of Context.MemhPack (MemhPackParams.Flags).
type MemhPackFlags uint64

// Flags of MemhPackParams (ucp_memh_pack_flags).
const (
	// MemhPackFlagExport packs the handle so that another process on this
	// node can map the same memory: MemMap with
	// MemMapParams.SetExportedMemhBuffer.
	MemhPackFlagExport MemhPackFlags = 1 << 0
)

// MemhPackParams are the parameters of Context.MemhPack
// (ucp_memh_pack_params_t). Flags counts only with MemhPackParamFieldFlags
// in FieldMask; it is 0 otherwise.
type MemhPackParams struct {
	FieldMask uint64
	Flags     MemhPackFlags
}

// SetFlags sets the MemhPackFlag* flags (default 0).
func (p *MemhPackParams) SetFlags(f MemhPackFlags) *MemhPackParams {
	p.Flags, p.FieldMask = f, p.FieldMask|MemhPackParamFieldFlags
	return p
}

// MemhBufferReleaseParams are the parameters of MemhBufferRelease
// (ucp_memh_buffer_release_params_t); FieldMask must be 0, as no field is
// defined.
type MemhBufferReleaseParams struct {
	FieldMask uint64
}

// MemhBufferRelease releases a buffer from Context.MemhPack
// (ucp_memh_buffer_release). Buffers are ordinary Go memory, so it does
// nothing; it exists for symmetry with the UCX API, and params may be nil.
func MemhBufferRelease(buf []byte, params *MemhBufferReleaseParams) {}

// importedMem is the mapping of another process's memory, made from an
// exported memh buffer: the key of the exporter's memory domain, unpacked
// by the component here.
type importedMem struct {
	comp   uct.Component
	bundle uct.RkeyBundle
}

// Exported memh buffer layout (little endian):
//
//	magic "GMH" version(1)  u8 memory type  u64 address  u64 length
//	u8 len component, component  u16 len mkey, mkey
//
// The mkey is the packed key of the memory domain that allocated the
// memory, in a component that maps it for direct access (RkeyPtr).
const (
	memhMagic   = "GMH"
	memhVersion = 1
	maxMemhBlob = 4096
)

// packedMemh is a decoded exported memh buffer.
type packedMemh struct {
	memType   ucs.MemoryType
	address   uint64
	length    uint64
	component string
	mkey      []byte
}

// encode packs k in the layout above.
func (k *packedMemh) encode() []byte {
	b := make([]byte, 0, 32+len(k.component)+len(k.mkey))
	b = append(b, memhMagic...)
	b = append(b, memhVersion, byte(k.memType))
	b = binary.LittleEndian.AppendUint64(b, k.address)
	b = binary.LittleEndian.AppendUint64(b, k.length)
	b = appendStr8(b, k.component)
	return appendBlob16(b, k.mkey)
}

// decodeMemhBuffer parses an exported memh buffer strictly: a bad magic or
// version, a memory type other than host, an empty or wrapping range or one
// beyond the largest int, an unnamed component, an empty key, truncation
// and trailing bytes fail with ucs.ErrInvalidParam.
func decodeMemhBuffer(b []byte) (*packedMemh, error) {
	bad := func(why string) error {
		return fmt.Errorf("ucp: exported memh buffer (%d bytes): %s: %w", len(b), why, ucs.ErrInvalidParam)
	}
	if len(b) > maxMemhBlob {
		return nil, bad("too long")
	}
	d := decoder{b: b}
	if string(d.take(len(memhMagic))) != memhMagic {
		return nil, bad("bad magic")
	}
	if v := d.u8(); v != memhVersion {
		return nil, bad(fmt.Sprintf("version %d", v))
	}
	k := &packedMemh{memType: ucs.MemoryType(d.u8()), address: d.u64(), length: d.u64(), component: d.str8(), mkey: d.blob16()}
	switch {
	case d.err:
		return nil, bad("truncated")
	case k.memType != ucs.MemoryTypeHost:
		return nil, bad(fmt.Sprintf("memory type %d", k.memType))
	case k.length == 0 || k.length > math.MaxInt || k.address == 0 || k.address+k.length < k.address:
		return nil, bad(fmt.Sprintf("range %#x+%d", k.address, k.length))
	case k.component == "" || len(k.mkey) == 0:
		return nil, bad("no memory key")
	case len(d.b) != 0:
		return nil, bad(fmt.Sprintf("%d trailing bytes", len(d.b)))
	}
	return k, nil
}

// exportMD reports whether memory allocated by the MD of e can be exported:
// the MD maps its keys for direct access and UCX_TLS selected a
// shared-memory transport of it (an MD kept only to allocate, or the
// process-local self MD, exports nothing).
func (c *Context) exportMD(e *mdEntry) bool {
	if e == nil || e.attr.Flags&uct.MDFlagRkeyPtr == 0 {
		return false
	}
	for i := range c.resources {
		if r := &c.resources[i]; r.md == e && r.tl.DevType == uct.DeviceTypeShm {
			return true
		}
	}
	return false
}

// MemhPack packs the memory handle m (ucp_memh_pack). Only exporting is
// supported: with MemhPackFlagExport the buffer lets another process on this
// node, whose context also has FeatureExportedMemh, map the same memory
// with MemMap and MemMapParams.SetExportedMemhBuffer; a remote key for RMA is
// packed with RkeyPack. Release the buffer with MemhBufferRelease.
//
// Memory can be exported when MemMap allocated it in a shared segment of a
// memory domain whose transport UCX_TLS selected (posix or sysv): the
// importer maps that segment. The exporter may unmap its handle while
// importers still map the memory; the segment lives until the last mapping
// goes, but no new process can import it.
//
// MemhPack fails with ucs.ErrInvalidParam for a nil or unmapped handle or
// one of another context, and with ucs.ErrUnsupported without
// MemhPackFlagExport, when the context lacks FeatureExportedMemh, and for
// memory that cannot be exported: memory that was given to MemMap (only
// registered), allocated with mmap, allocated by an MD that UCX_TLS leaves
// out (UCX_TLS=tcp,self, for example), or imported itself.
//
// The importer's MemMap fails with ucs.ErrInvalidParam for a malformed
// buffer, with ucs.ErrUnsupported when its context lacks
// FeatureExportedMemh, and with ucs.ErrUnreachable when the memory cannot be
// mapped there: the exporter is on another node (or namespace), has exited
// or unmapped the memory, or the importer's UCX_TLS leaves out the exporting
// memory domain's transport.
func (c *Context) MemhPack(m *MemHandle, p *MemhPackParams) ([]byte, error) {
	if m == nil || m.unmapped || m.ctx != c {
		return nil, fmt.Errorf("ucp memh pack: %w", ucs.ErrInvalidParam)
	}
	var flags MemhPackFlags
	if p != nil && p.FieldMask&MemhPackParamFieldFlags != 0 {
		flags = p.Flags
	}
	if flags&MemhPackFlagExport == 0 {
		return nil, fmt.Errorf("ucp memh pack: only MemhPackFlagExport is supported (RkeyPack packs remote keys): %w", ucs.ErrUnsupported)
	}
	if c.features&FeatureExportedMemh == 0 {
		return nil, fmt.Errorf("ucp memh pack: the context was created without FeatureExportedMemh: %w", ucs.ErrUnsupported)
	}
	if m.imported != nil {
		return nil, fmt.Errorf("ucp memh pack: memory imported from another process: %w", ucs.ErrUnsupported)
	}
	e := m.allocMD
	if !c.exportMD(e) {
		why := "memory given to mem map is only registered"
		switch {
		case m.mmapped:
			why = "memory allocated with " + m.method + " is private"
		case e != nil:
			why = "UCX_TLS=" + c.config.Get("TLS") + " selects no shared-memory transport of md " + e.md.Name()
		}
		return nil, fmt.Errorf("ucp memh pack: cannot export: %s: %w", why, ucs.ErrUnsupported)
	}
	mk, err := e.md.MkeyPack(nil, m.memhs[e.index])
	if err != nil {
		return nil, fmt.Errorf("ucp memh pack %s: %w", e.md.Name(), err)
	}
	k := packedMemh{memType: m.memType, address: uint64(uintptr(m.address)), length: uint64(m.length),
		component: e.comp.Name(), mkey: mk}
	return k.encode(), nil
}

// memImport maps the memory an exported memh buffer names (MemMap with an
// exported buffer); see MemhPack for the errors.
func (c *Context) memImport(buf []byte) (*MemHandle, error) {
	if c.features&FeatureExportedMemh == 0 {
		return nil, fmt.Errorf("ucp mem map: importing needs FeatureExportedMemh: %w", ucs.ErrUnsupported)
	}
	k, err := decodeMemhBuffer(buf)
	if err != nil {
		return nil, fmt.Errorf("ucp mem map: %w", err)
	}
	var e *mdEntry
	for _, x := range c.mds {
		if x.comp.Name() == k.component && c.exportMD(x) {
			e = x
			break
		}
	}
	if e == nil {
		return nil, fmt.Errorf("ucp mem map: UCX_TLS=%s selects no shared-memory transport of component %q to import from: %w",
			c.config.Get("TLS"), k.component, ucs.ErrUnreachable)
	}
	bundle, err := e.comp.RkeyUnpack(k.mkey)
	if err != nil {
		return nil, fmt.Errorf("ucp mem map: import from %s: %w", k.component, err)
	}
	// The key must cover the whole exported range, through one mapping.
	first, err := e.comp.RkeyPtr(bundle, k.address)
	var last unsafe.Pointer
	if err == nil {
		last, err = e.comp.RkeyPtr(bundle, k.address+k.length-1)
	}
	if err == nil && uintptr(last)-uintptr(first) != uintptr(k.length-1) {
		err = fmt.Errorf("range %#x+%d is not mapped contiguously: %w", k.address, k.length, ucs.ErrInvalidParam)
	}
	if err != nil {
		e.comp.RkeyRelease(bundle)
		if errors.Is(err, ucs.ErrOutOfRange) {
			// The buffer claims memory its own key does not cover.
			err = fmt.Errorf("the key does not cover it (%v): %w", err, ucs.ErrInvalidParam)
		}
		return nil, fmt.Errorf("ucp mem map: import of %#x+%d from %s: %w", k.address, k.length, k.component, err)
	}
	return &MemHandle{ctx: c, address: first, length: int(k.length), memType: k.memType,
		prot: ProtLocalRead | ProtLocalWrite, method: "import:" + k.component,
		memhs: make([]uct.Memh, len(c.mds)), imported: &importedMem{comp: e.comp, bundle: bundle}}, nil
}
