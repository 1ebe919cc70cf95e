package ucp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

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
	return c.rkeyAppend(nil, m)
}

// rkeyAppend appends the packed remote key of m, mapped memory of this
// process, to b: a caller that keeps a buffer packs without allocating.
func (c *Context) rkeyAppend(b []byte, m *MemHandle) ([]byte, error) {
	b = append(b, rkeyMagic...)
	b = append(b, rkeyVersion, byte(m.memType), m.remoteAccess())
	b = binary.LittleEndian.AppendUint64(b, uint64(uintptr(m.address)))
	b = binary.LittleEndian.AppendUint64(b, uint64(m.length))
	n := len(m.regMDs)
	if m.token != 0 {
		n++
	}
	b = append(b, byte(n))
	if m.token != 0 {
		b = appendStr8(b, swComponent)
		b = binary.LittleEndian.AppendUint16(b, 8)
		b = binary.LittleEndian.AppendUint64(b, m.token)
	}
	for _, e := range m.regMDs {
		b = appendStr8(b, e.comp.Name())
		// The MD appends its key after a length that is known once it has.
		at := len(b)
		b = binary.LittleEndian.AppendUint16(b, 0)
		var err error
		if b, err = e.md.MkeyPack(b, m.memhs[e.index]); err != nil {
			return nil, fmt.Errorf("ucp rkey pack %s: %w", e.md.Name(), err)
		}
		binary.LittleEndian.PutUint16(b[at:], uint16(len(b)-at-2))
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

// packedRkey is a decoded rkey. It refers to the bytes it was decoded
// from, which must not change while it is used, and holds its memory
// domains' keys in place: a receiver checks the key of every rendezvous
// message without allocating.
type packedRkey struct {
	memType ucs.MemoryType
	access  uint8
	address uint64
	length  uint64
	n       int // mkeys[:n] are the memory domains' keys
	mkeys   [maxRkeyMDs]packedMkey
}

// packedMkey is the key of one memory domain in a packed rkey: the
// component's name and its key, in the packed bytes.
type packedMkey struct {
	component []byte
	mkey      []byte
}

// mkey returns the key of the component name (the last, should it appear
// twice), or nil.
func (k *packedRkey) mkey(name string) []byte {
	for i := k.n - 1; i >= 0; i-- {
		if string(k.mkeys[i].component) == name {
			return k.mkeys[i].mkey
		}
	}
	return nil
}

// decodeRkey parses the packed rkey b into k, which then refers to b;
// anything malformed fails with ucs.ErrInvalidParam.
func decodeRkey(b []byte, k *packedRkey) error {
	if len(b) > maxRkeyBlob {
		return badRkey(b, "too long")
	}
	d := decoder{b: b}
	if string(d.take(len(rkeyMagic))) != rkeyMagic {
		return badRkey(b, "bad magic")
	}
	if v := d.u8(); v != rkeyVersion {
		return badRkey(b, fmt.Sprintf("version %d", v))
	}
	k.memType, k.access, k.address, k.length, k.n = ucs.MemoryType(d.u8()), d.u8(), d.u64(), d.u64(), 0
	n := int(d.u8())
	if d.err {
		return badRkey(b, "truncated header")
	}
	if k.access&^(rkeyRead|rkeyWrite) != 0 {
		return badRkey(b, fmt.Sprintf("remote access %#x", k.access))
	}
	if k.memType != ucs.MemoryTypeHost {
		return badRkey(b, fmt.Sprintf("memory type %d", k.memType))
	}
	if k.length == 0 || k.address+k.length < k.address {
		return badRkey(b, "empty or wrapping range")
	}
	if n > maxRkeyMDs {
		return badRkey(b, fmt.Sprintf("%d memory domains", n))
	}
	for i := 0; i < n; i++ {
		mk := packedMkey{component: d.take(int(d.u8()))}
		mk.mkey = d.take(int(d.u16()))
		if d.err || len(mk.component) == 0 {
			return badRkey(b, fmt.Sprintf("memory domain %d truncated or unnamed", i))
		}
		k.mkeys[i] = mk
	}
	if len(d.b) != 0 {
		return badRkey(b, fmt.Sprintf("%d trailing bytes", len(d.b)))
	}
	k.n = n
	return nil
}

// checkRkey checks a packed rkey that a peer sent, as decodeRkey does.
func checkRkey(b []byte) error {
	var k packedRkey
	return decodeRkey(b, &k)
}

// badRkey is decodeRkey's error for the packed rkey b, malformed as why
// says.
func badRkey(b []byte, why string) error {
	return fmt.Errorf("ucp: packed rkey (%d bytes): %s: %w", len(b), why, ucs.ErrInvalidParam)
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

// rmaLane returns the lane of RMA through l with the uct key rkey.
func rmaLane(c *Context, l *lane, rkey uint64) rkeyLane {
	at := l.wi.attr
	rl := rkeyLane{l: l, ep: l.ep, rkey: rkey, putShort: at.Put.MaxShort, putBcopy: at.Put.MaxBcopy,
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
	rma     *rkeyLane // nil: software RMA over the AM lane; else &lanes[0]
	amo     *rkeyLane // nil: software atomics over the AM lane; else &lanes[1]
	lanes   [2]rkeyLane
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
	rk := new(Rkey)
	if err := ep.rkeyUnpack(rk, packed); err != nil {
		return nil, err
	}
	return rk, nil
}

// rkeyUnpack is RkeyUnpack into rk, new or destroyed: its buffers are used
// again (the worker's cache of senders' keys recycles its keys).
func (ep *Endpoint) rkeyUnpack(rk *Rkey, packed []byte) error {
	if ep.closed.Load() {
		return fmt.Errorf("ucp rkey unpack: %w", ErrClosed)
	}
	if err := ep.waitConnected(); err != nil {
		return fmt.Errorf("ucp rkey unpack: %w", err)
	}
	ep.laneMu.Lock() // lanes and their usages; several goroutines may unpack at once
	defer ep.laneMu.Unlock()
	var k packedRkey
	if err := decodeRkey(packed, &k); err != nil {
		return fmt.Errorf("ucp rkey unpack: %w", err)
	}
	entries := rk.entries[:0]
	if cap(entries) < k.n {
		// Room for every key: the entries do not move as unpack adds them.
		entries = make([]rkeyEntry, 0, k.n)
	}
	*rk = Rkey{ep: ep, access: k.access, packed: append(rk.packed[:0], packed...), address: k.address, length: k.length,
		entries: entries}
	if tok := k.mkey(swComponent); tok != nil {
		if len(tok) != 8 {
			return fmt.Errorf("ucp rkey unpack: software token of %d bytes: %w", len(tok), ucs.ErrInvalidParam)
		}
		rk.swToken = binary.LittleEndian.Uint64(tok)
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
		b, err := comp.RkeyUnpack(k.mkey(name))
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
	for i := range ep.cands {
		c := &ep.cands[i]
		name := c.wi.rsc.md.comp.Name()
		if k.mkey(name) == nil || (rk.rma != nil && rk.amo != nil) {
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
			rk.lanes[0] = rmaLane(ep.w.ctx, l, e.bundle.Rkey)
			rk.rma, l.usage = &rk.lanes[0], l.usage|usageRMA
		}
		if wantAMO {
			rk.lanes[1] = rkeyLane{l: l, ep: l.ep, rkey: e.bundle.Rkey}
			rk.amo, l.usage = &rk.lanes[1], l.usage|usageAMO
		}
	}
	// Direct access: any key whose component maps the memory here, among
	// the components that reach the peer through this endpoint (one from a
	// WorkerAddressFlagNetOnly address reaches none).
	for _, mk := range k.mkeys[:k.n] {
		if rk.ptr != nil {
			break
		}
		name := candidateOf(ep.cands, mk.component)
		if name == "" || !ep.w.ctx.mapsComponent(name) {
			continue
		}
		if pe, err := unpack(name); err == nil && pe.hasPtr {
			if base, err := pe.comp.RkeyPtr(pe.bundle, rk.address); err == nil {
				rk.ptr, rk.base = pe, base
				ep.direct.Store(true)
			}
		}
	}
	if rk.rma == nil && rk.amo == nil && rk.ptr == nil && (rk.swToken == 0 || ep.am == nil) {
		rk.Destroy()
		return fmt.Errorf("ucp rkey unpack: no lane of %s can reach the memory: %w", ep.name, ucs.ErrUnreachable)
	}
	return nil
}

// candidateOf returns the name of the component name when one of the
// candidate lanes cands belongs to it, and "" otherwise.
func candidateOf(cands []candidate, name []byte) string {
	for i := range cands {
		if n := cands[i].wi.rsc.md.comp.Name(); n == string(name) {
			return n
		}
	}
	return ""
}

// mapsComponent reports whether the context maps the memory of the
// component name's remote keys here (an MD with uct.MDFlagRkeyPtr). Only
// through a transport UCX_TLS selected: an MD kept just to allocate memory
// must not open a path the user excluded.
func (c *Context) mapsComponent(name string) bool {
	for _, e := range c.mds {
		if e.comp.Name() == name && e.attr.Flags&uct.MDFlagRkeyPtr != 0 && e.selected > 0 {
			return true
		}
	}
	return false
}

// MapsRemoteKey reports, without connecting or mapping anything, whether
// an endpoint of this worker to the worker whose address is addr would map
// the memory of the packed remote key rkey here, so that Rkey.Ptr would
// give a pointer to it: whether a transport that reaches that worker maps
// the key's memory. (A goshmem extension: it lets a caller that talks to
// many peers decide how to reach each before it connects to it, and
// connect on first use.) The mapping itself may still fail when the
// endpoint unpacks the key, for instance when the peer is gone. A malformed
// address fails with ucs.ErrInvalidAddr, a malformed key with
// ucs.ErrInvalidParam.
func (w *Worker) MapsRemoteKey(addr, rkey []byte) (bool, error) {
	ra, err := decodeWorkerAddress(addr)
	if err != nil {
		return false, fmt.Errorf("ucp maps remote key: %w", err)
	}
	var k packedRkey
	if err := decodeRkey(rkey, &k); err != nil {
		return false, fmt.Errorf("ucp maps remote key: %w", err)
	}
	for _, mk := range k.mkeys[:k.n] {
		if name := string(mk.component); name != swComponent && w.ctx.mapsComponent(name) && w.reachesComponent(ra, name) {
			return true, nil
		}
	}
	return false, nil
}

// reachesComponent reports whether an interface of the worker of the
// component name reaches one of the remote worker ra: whether an endpoint
// to ra would have a candidate lane of that component (see candidates).
func (w *Worker) reachesComponent(ra *workerAddress, name string) bool {
	for i := range ra.ifaces {
		if r := &ra.ifaces[i]; r.component == name {
			for _, wi := range w.ifaces {
				if wi.reaches(r) {
					return true
				}
			}
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

// TargetProgress reports whether the RMA (puts and gets) and the atomics
// through rk complete only when the target's program progresses its
// worker: they are software operations on an active-message lane whose
// transport delivers messages only in the receiver's Progress (shared
// memory), rather than operations of a lane that reaches the memory on
// its own (mapped memory, cma, tcp) or software that the target's
// transport applies as it receives it (uct.IfaceFlagAMAsyncDelivery: tcp).
// It says how the lanes RkeyUnpack chose work, and connects nothing. This
// is goshmem's own; UCX has no such query.
func (rk *Rkey) TargetProgress() (rma, amo bool) {
	am := rk.ep.am
	sw := am != nil && rk.ptr == nil && am.remote.capFlags&uct.IfaceFlagAMAsyncDelivery == 0
	return sw && rk.rma == nil, sw && rk.amo == nil
}

// Compare orders two keys by their packed form (ucp_rkey_compare): 0 when
// they key the same memory the same way.
func (rk *Rkey) Compare(o *Rkey) int { return bytes.Compare(rk.packed, o.packed) }

// Destroy releases the key (ucp_rkey_destroy).
func (rk *Rkey) Destroy() {
	for _, e := range rk.entries {
		e.comp.RkeyRelease(e.bundle)
	}
	clear(rk.entries)
	rk.entries, rk.ptr, rk.rma, rk.amo, rk.base = rk.entries[:0], nil, nil, nil, nil
}
