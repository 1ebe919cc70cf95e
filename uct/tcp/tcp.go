package tcp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
	"github.com/goshmem/goshmem/uct/internal/base"
)

// ifaceWarnings are an iface's warnings that a peer or a stranger can
// cause at any rate, each kind through its own limiter.
type ifaceWarnings struct {
	refused  *ucs.LogLimiter // connections refused or dropped before authentication
	rejected *ucs.LogLimiter // puts and gets that name no registered memory
	closed   *ucs.LogLimiter // connections closed for a bad frame
	dropped  *ucs.LogLimiter // active messages without a handler
	// ended: connections that ended without a goodbye, at LogDiag (see
	// peerEnded).
	ended *ucs.LogLimiter
}

// The limiters write warnBurst lines of each kind per warnInterval.
const (
	warnBurst    = 10
	warnInterval = time.Minute
)

// newIfaceWarnings returns the limiters of the iface listening on addr,
// which write to log at LogWarn (ended: LogDiag) lines that begin with
// "uct/tcp: iface ADDR: ".
func newIfaceWarnings(log ucs.Logger, addr net.Addr) ifaceWarnings {
	prefix := "uct/tcp: iface " + addr.String() + ": "
	warnf := func(format string, args ...any) { log.Logf(ucs.LogWarn, prefix+format, args...) }
	diagf := func(format string, args ...any) { log.Logf(ucs.LogDiag, prefix+format, args...) }
	return ifaceWarnings{
		refused:  ucs.NewLogLimiter("refused connections", warnBurst, warnInterval, warnf),
		rejected: ucs.NewLogLimiter("rejected puts and gets", warnBurst, warnInterval, warnf),
		closed:   ucs.NewLogLimiter("connections closed for a bad frame", warnBurst, warnInterval, warnf),
		dropped:  ucs.NewLogLimiter("dropped active messages", warnBurst, warnInterval, warnf),
		ended:    ucs.NewLogLimiter("connections ended without a goodbye", warnBurst, warnInterval, diagf),
	}
}

// peerEnded reports whether err, a connection's failure, says that the
// peer's process ended: it closed the connection without a goodbye
// (errNoGoodbye wraps io.EOF), in the middle of a frame, or reset it, or
// a write found the connection closed by it (EPIPE: the kernel had seen
// the peer's end before this side read it).
// Whoever ran the peer reports that end (goshmem-run names the PE and how
// it ended), and its peers' transports are then only the first to notice
// a consequence: they log it at LogDiag, not as a warning of their own, so
// that a job that fails says why once.
func peerEnded(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// flush writes the summaries the limiters hold back (at Close).
func (w *ifaceWarnings) flush() {
	for _, l := range []*ucs.LogLimiter{w.refused, w.rejected, w.closed, w.dropped, w.ended} {
		l.Flush()
	}
}

// randomID returns a random non-zero 64-bit value.
func randomID() uint64 { return base.RandomID("uct/tcp") }

// Component is the "tcp" component. The zero value is ready to use; the
// package registers one instance with uct.Register.
type Component struct {
	base.Component[transport]
}

// rkeys maps the Rkey values of unpacked keys to the keys: what a put
// frame needs to name the remote region, and the range for a local check.
// EP operations take the Rkey value only, and a put frame needs key id and
// token (128 bits), so the value is a handle into this table. The keys
// are held by value: unpacking one allocates nothing, and an operation
// works on a copy, which a release cannot change under it.
var rkeys struct {
	sync.RWMutex
	m    map[uint64]mkey
	next uint64
}

// tcpRkey is the uct.RkeyBundle.Handle of the keys this component
// unpacked, by which RkeyRelease tells them from other components'.
type tcpRkey struct{}

var ourRkey = &tcpRkey{}

// lookupRkey returns the unpacked key of handle h, and whether there is
// one.
func lookupRkey(h uint64) (mkey, bool) {
	rkeys.RLock()
	k, ok := rkeys.m[h]
	rkeys.RUnlock()
	return k, ok
}

// RkeyUnpack decodes a key from MD.MkeyPack. The rkey is a handle of this
// process naming the key (its id, token and range); it needs no connection
// and can be used with EPs to the process that packed the key. Malformed
// keys fail with ucs.ErrInvalidParam.
func (*Component) RkeyUnpack(packed []byte) (uct.RkeyBundle, error) {
	k, err := decodeMkey(packed)
	if err != nil {
		return uct.RkeyBundle{}, err
	}
	rkeys.Lock()
	defer rkeys.Unlock()
	if rkeys.m == nil {
		rkeys.m = make(map[uint64]mkey)
	}
	rkeys.next++
	rkeys.m[rkeys.next] = k
	return uct.RkeyBundle{Rkey: rkeys.next, Handle: ourRkey}, nil
}

// RkeyPtr fails with ucs.ErrUnsupported: remote memory is reached only
// through the network.
func (*Component) RkeyPtr(uct.RkeyBundle, uint64) (unsafe.Pointer, error) {
	return nil, fmt.Errorf("uct/tcp: rkey ptr: %w", ucs.ErrUnsupported)
}

// RkeyRelease forgets an unpacked key; a bundle that RkeyUnpack did not
// return, or one released already, fails with ucs.ErrInvalidParam.
func (*Component) RkeyRelease(b uct.RkeyBundle) error {
	if _, ok := b.Handle.(*tcpRkey); !ok {
		return fmt.Errorf("uct/tcp: release of a foreign rkey: %w", ucs.ErrInvalidParam)
	}
	rkeys.Lock()
	defer rkeys.Unlock()
	if _, ok := rkeys.m[b.Rkey]; !ok {
		return fmt.Errorf("uct/tcp: release of a released rkey: %w", ucs.ErrInvalidParam)
	}
	delete(rkeys.m, b.Rkey)
	return nil
}

// region is registered memory. Puts hold mu for reading while they write
// into it, MemDereg takes it for writing, so that no put writes into
// memory that was deregistered. A deregistered region is used again by a
// later MemReg, under another key: key, mem and dead change under mu, and
// whoever found the region by its key checks them under mu (MD.access).
type region struct {
	mu    sync.RWMutex
	key   mkey
	mem   []byte // the registered bytes
	dead  bool   // deregistered
	owner *MD
	h     Memh // the handle MemReg returns, of this region
	// pins counts the get replies queued with bytes of mem, not written
	// yet (EP.reply): MemDereg waits for them. A pin is taken only with
	// mu read-locked and the region live, so none is taken after
	// MemDereg marked it dead; holding one blocks no reader, as a read
	// lock would once MemDereg waits to lock mu.
	pins atomic.Int32
}

// MD is the "tcp" memory domain: a registry of the memory its ifaces let
// peers write.
type MD struct {
	base.RegisterMD[transport]
	mu      sync.RWMutex
	regions map[uint64]*region // by key id
	// free holds deregistered regions for MemReg to use again (at most
	// maxFreeRegions): a registration per rendezvous transfer then
	// allocates nothing. Guarded by mu.
	free []*region
}

// maxFreeRegions bounds MD.free.
const maxFreeRegions = 16

// Memh is the memory handle of the tcp MD.
type Memh struct {
	r *region
}

// Query reports MDFlagReg and MDFlagNeedRkey: memory must be registered to
// be written by peers, and MemAlloc is not offered.
func (m *MD) Query() (uct.MDAttr, error) {
	a := m.Attr(uct.MDFlagReg|uct.MDFlagNeedRkey, MkeyPackedSize)
	a.MaxReg = maxAddr
	a.RegCost = uct.LinearModel{C: 1e-7}
	return a, nil
}

// MemReg registers the length bytes at addr under a new random key id and
// token, and returns a *Memh. A nil address or a length that is not
// positive fails with ucs.ErrInvalidParam. The memory must stay valid until
// MemDereg.
func (m *MD) MemReg(addr unsafe.Pointer, length int, flags uct.MemFlags) (uct.Memh, error) {
	start := uint64(uintptr(addr))
	if addr == nil || length <= 0 || !base.ValidRange(start, uint64(length)) {
		return nil, fmt.Errorf("uct/tcp: mem reg of %d bytes at %p: %w", length, addr, ucs.ErrInvalidParam)
	}
	key := mkey{addr: start, length: uint64(length), token: randomID()}
	m.mu.Lock()
	var r *region
	if n := len(m.free); n > 0 {
		r, m.free = m.free[n-1], m.free[:n-1]
	} else {
		r = &region{owner: m}
		r.h.r = r
	}
	for {
		key.id = randomID()
		if m.regions[key.id] == nil {
			break
		}
	}
	r.mu.Lock()
	r.key, r.mem, r.dead = key, unsafe.Slice((*byte)(addr), length), false
	r.mu.Unlock()
	m.regions[key.id] = r
	m.mu.Unlock()
	return &r.h, nil
}

// MemDereg removes a registration: puts that arrive later for its key are
// rejected, and MemDereg waits for the puts being written into it to end.
// A handle of another MD, or one deregistered already, fails with
// ucs.ErrInvalidParam. The handle is the MD's again: a later MemReg may
// return it for another registration (it allocates nothing then), so the
// caller must not use it any more.
func (m *MD) MemDereg(memh uct.Memh) error {
	h, ok := memh.(*Memh)
	if !ok || h == nil || h.r.owner != m {
		return fmt.Errorf("uct/tcp: mem dereg of a foreign handle %T: %w", memh, ucs.ErrInvalidParam)
	}
	m.mu.Lock()
	if m.regions[h.r.key.id] != h.r {
		m.mu.Unlock()
		return fmt.Errorf("uct/tcp: mem dereg twice: %w", ucs.ErrInvalidParam)
	}
	delete(m.regions, h.r.key.id)
	m.mu.Unlock()
	h.r.mu.Lock()
	h.r.dead, h.r.mem = true, nil
	h.r.mu.Unlock()
	// Get replies queued with bytes of the region are written by
	// Progress or the poller, and the peer reads them whatever it does:
	// they go soon.
	for h.r.pins.Load() > 0 {
		time.Sleep(50 * time.Microsecond)
	}
	m.mu.Lock()
	if len(m.free) < maxFreeRegions {
		m.free = append(m.free, h.r)
	}
	m.mu.Unlock()
	return nil
}

// lookup returns the region registered under key id, or nil.
func (m *MD) lookup(id uint64) *region {
	m.mu.RLock()
	r := m.regions[id]
	m.mu.RUnlock()
	return r
}

// MkeyPack appends the MkeyPackedSize-byte key of memh, a handle of this
// MD (ucs.ErrInvalidParam otherwise), to dst.
func (m *MD) MkeyPack(dst []byte, memh uct.Memh) ([]byte, error) {
	h, ok := memh.(*Memh)
	if !ok || h == nil || h.r.owner != m {
		return nil, fmt.Errorf("uct/tcp: mkey pack of a foreign handle %T: %w", memh, ucs.ErrInvalidParam)
	}
	return h.r.key.appendTo(dst), nil
}

// TLResources lists one resource per usable network interface (see
// deviceAddrs).
func (*MD) TLResources() ([]uct.TLResource, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("uct/tcp: listing network interfaces: %w: %w", ucs.ErrNoDevice, err)
	}
	var tls []uct.TLResource
	for _, ifi := range ifs {
		if _, err := deviceIP(&ifi); err == nil {
			tls = append(tls, deviceCost(deviceBandwidth(&ifi)).Resource(TLName, ifi.Name, uct.DeviceTypeNet))
		}
	}
	return tls, nil
}

// deviceIP returns the address an iface on ifi listens on: its first IPv4
// address, or else its first global unicast IPv6 address (link-local
// addresses would need a zone in iface addresses, so they are not used). An
// interface that is down or has no such address fails with
// ucs.ErrNoDevice.
func deviceIP(ifi *net.Interface) (net.IP, error) {
	if ifi.Flags&net.FlagUp == 0 {
		return nil, fmt.Errorf("uct/tcp: interface %s is down: %w", ifi.Name, ucs.ErrNoDevice)
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return nil, fmt.Errorf("uct/tcp: addresses of %s: %w: %w", ifi.Name, ucs.ErrNoDevice, err)
	}
	var v6 net.IP
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		if ip4 := n.IP.To4(); ip4 != nil && !ip4.IsUnspecified() && !ip4.IsMulticast() {
			return ip4, nil
		}
		if v6 == nil && n.IP.To4() == nil && (n.IP.IsGlobalUnicast() || n.IP.IsLoopback()) {
			v6 = n.IP
		}
	}
	if v6 != nil {
		return v6, nil
	}
	return nil, fmt.Errorf("uct/tcp: interface %s has no usable address: %w", ifi.Name, ucs.ErrNoDevice)
}

// maxAddr bounds addresses: above any user address (5-level paging).
const maxAddr = base.MaxAddr

// transport is the transport as seen by the base types that Component and its MD
// embed: its names and how it opens its MD.
type transport struct{}

func (transport) Names() base.Names {
	return base.Names{Pkg: "uct/tcp", Component: ComponentName, MD: MDName, TL: TLName, DevType: uct.DeviceTypeNet, IfaceConfig: ifaceConfigTable}
}

func (transport) NewMD(config *ucs.Config) (uct.MD, error) {
	return &MD{regions: make(map[uint64]*region)}, nil
}

func init() { uct.Register(&Component{}) }
