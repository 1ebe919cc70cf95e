package cma

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
	"github.com/goshmem/goshmem/uct/internal/base"
)

// DefaultSegSize is the default SEG_SIZE: the largest put short, put bcopy
// and get bcopy, in bytes.
const DefaultSegSize = 8192

const (
	minSegSize = 64
	maxSegSize = 1 << 24
)

var ifaceConfigTable = []ucs.ConfigField{
	{Name: "SEG_SIZE", Default: "8k", Doc: "Largest put short, put bcopy and get bcopy, in bytes (the bcopy buffer size)"},
}

// IfaceAddrLen is the length of a cma iface address.
//
// Layout, little-endian:
//
//	0  magic  uint32  "GSCA"
//	4  pid    uint32  process of the iface
//	8  pidns  uint64  hash of its PID namespace
//	16 id     uint64  random iface id, non-zero
//	24 probe  uint64  address of a word holding id in that process
const IfaceAddrLen = 32

// ifaceAddrFormat is the layout of a cma iface address (see IfaceAddrLen).
var ifaceAddrFormat = base.Format{Name: "uct/cma: iface address", Size: IfaceAddrLen, Magic: 0x41435347, Err: ucs.ErrInvalidAddr}

// ifaceAddr is a decoded iface address.
type ifaceAddr struct {
	pid   uint32
	pidns uint64
	id    uint64
	probe uint64
}

// fields are the fields of the address, in order.
func (a *ifaceAddr) fields() []any { return []any{&a.pid, &a.pidns, &a.id, &a.probe} }

func (a *ifaceAddr) encode() []byte { return ifaceAddrFormat.Encode(0, a.fields()...) }

// decodeIfaceAddr decodes an iface address strictly; malformed input fails
// with ucs.ErrInvalidAddr.
func decodeIfaceAddr(b []byte) (a ifaceAddr, err error) {
	_, err = ifaceAddrFormat.Decode(b, append(a.fields(),
		base.CheckPid(&a.pid), base.CheckNonZero("iface id", &a.id), checkProbe(&a.probe))...)
	return a, err
}

// checkProbe checks that *p may be the address of a probe word: aligned,
// not zero, below base.MaxAddr.
func checkProbe(p *uint64) base.Check {
	return func(f *base.Format) error {
		if *p == 0 || *p%8 != 0 || *p >= base.MaxAddr {
			return f.Errorf("probe address %#x", *p)
		}
		return nil
	}
}

// pidNamespace returns a hash of this process's PID namespace: pids in
// addresses and keys mean the same process only within one.
var pidNamespace = sync.OnceValue(func() uint64 {
	ns, _ := os.Readlink("/proc/self/ns/pid")
	h := fnv.New64a()
	h.Write([]byte(ns))
	return h.Sum64()
})

// randomID returns a random non-zero 64-bit id.
func randomID() uint64 { return base.RandomID("uct/cma") }

// ptraceHint names what decides whether CMA may access another process.
func ptraceHint() string {
	scope := "absent (no Yama)"
	if b, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope"); err == nil {
		scope = strings.TrimSpace(string(b))
	}
	return "CMA needs ptrace access to the peer: the same user, and /proc/sys/kernel/yama/ptrace_scope 0 (it is " +
		scope + ") or CAP_SYS_PTRACE"
}

// Iface is a cma iface. It has no receive side: its address lets peers
// check that this process exists and may be accessed (see the package
// documentation). Every operation of its EPs completes on return.
//
// Progress reports EPs whose peer died (a transfer failed with ESRCH) to
// the error handler of the iface's parameters, once per EP, with
// ucs.ErrConnectionReset. That is its only work, so the iface is in its
// worker's progress only while a failure waits to be reported: a worker
// does not poll an iface that cannot receive anything.
type Iface struct {
	md      *MD
	worker  *uct.Worker
	log     ucs.Logger  // IfaceParams.Logger
	progID  int         // the registration with worker while polled; under mu
	polled  atomic.Bool // Progress is in worker's progress
	segSize int
	probe   *uint64 // holds the iface id; its address is in the iface address
	addr    []byte
	bufs    sync.Pool // *[]byte of segSize bytes, for bcopy
	errCB   func(arg any, ep uct.EP, status ucs.Status)
	errArg  any

	failed   base.Handoff[*EP] // EPs whose failure the error handler has not seen yet
	mu       sync.Mutex
	permOnce sync.Once // logs the ptrace hint once
	closed   bool
}

// openIface creates an iface on the resource params name (see MD.IfaceOpen).
func openIface(md *MD, worker *uct.Worker, params *uct.IfaceParams, config *ucs.Config) (*Iface, error) {
	if err := md.CheckIface(params); err != nil {
		return nil, err
	}
	// A headroom is checked like any transport's, and vacuous: no data is
	// handed to handlers.
	if _, err := base.NewHeadroom("uct/cma", params); err != nil {
		return nil, err
	}
	segSize := DefaultSegSize
	if config != nil && config.Get("SEG_SIZE") != "" {
		v, err := ucs.ParseSize(config.Get("SEG_SIZE"))
		if err != nil {
			return nil, fmt.Errorf("uct/cma: SEG_SIZE: %w", err)
		}
		if v < minSegSize || v > maxSegSize {
			return nil, fmt.Errorf("uct/cma: SEG_SIZE=%d outside [%d, %d]: %w", v, minSegSize, maxSegSize, ucs.ErrInvalidParam)
		}
		segSize = int(v)
	}
	i := &Iface{md: md, worker: worker, segSize: segSize, probe: new(uint64), log: params.Log()}
	i.bufs.New = func() any { b := make([]byte, segSize); return &b }
	*i.probe = randomID()
	a := ifaceAddr{pid: pid, pidns: pidNamespace(), id: *i.probe, probe: uint64(uintptr(unsafe.Pointer(i.probe)))}
	i.addr = a.encode()
	if params != nil {
		i.errCB, i.errArg = params.ErrHandler, params.ErrHandlerArg
	}
	return i, nil
}

// Query describes the iface: put short, bcopy (up to SEG_SIZE) and zcopy
// (any size, any number of iov elements), get bcopy (up to SEG_SIZE) and
// zcopy; no active messages, no atomics; errors of invalid remote buffers
// and of dead peers are reported, not fatal.
func (i *Iface) Query() (*uct.IfaceAttr, error) {
	flags := base.RMAFlags | uct.IfaceFlagConnectToIface |
		uct.IfaceFlagErrhandleShort | uct.IfaceFlagErrhandleBcopy | uct.IfaceFlagErrhandleZcopy | uct.IfaceFlagErrhandlePeerDown
	a := base.IfaceAttr(flags, ucs.ShmDomainLen, IfaceAddrLen, cost)
	a.Put = base.OpCaps(i.segSize, i.segSize, math.MaxInt, math.MaxInt32)
	a.Get = base.OpCaps(0, i.segSize, math.MaxInt, math.MaxInt32)
	return a, nil
}

// DeviceAddress returns the shared-memory domain of this process
// (the device address of uct/sm's ifaces too, sm.DomainAddress).
func (*Iface) DeviceAddress() []byte { return append([]byte(nil), ucs.ShmDomain()...) }

// Address returns the IfaceAddrLen-byte address of the iface.
func (i *Iface) Address() []byte { return append([]byte(nil), i.addr...) }

// IsReachable reports whether the iface with these addresses is in this
// shared-memory domain and PID namespace and its process can be read: it
// reads the address's probe word with process_vm_readv and compares it
// with the iface id.
func (i *Iface) IsReachable(deviceAddr, ifaceAddr []byte) bool {
	_, err := i.check(deviceAddr, ifaceAddr)
	return err == nil
}

// check decodes and checks the addresses of a peer iface (see IsReachable).
// Malformed addresses fail with ucs.ErrInvalidAddr, an unreachable iface
// with ucs.ErrUnreachable.
func (i *Iface) check(deviceAddr, addr []byte) (ifaceAddr, error) {
	if len(deviceAddr) != ucs.ShmDomainLen {
		return ifaceAddr{}, fmt.Errorf("uct/cma: device address of %d bytes: %w", len(deviceAddr), ucs.ErrInvalidAddr)
	}
	a, err := decodeIfaceAddr(addr)
	if err != nil {
		return a, err
	}
	if string(deviceAddr) != string(ucs.ShmDomain()) {
		return a, fmt.Errorf("uct/cma: device %x is another shared-memory domain: %w", deviceAddr, ucs.ErrUnreachable)
	}
	if a.pidns != pidNamespace() {
		return a, fmt.Errorf("uct/cma: pid %d is in another PID namespace: %w", a.pid, ucs.ErrUnreachable)
	}
	var word uint64
	local := [1]unix.Iovec{{Base: (*byte)(unsafe.Pointer(&word))}}
	local[0].SetLen(8)
	remote := [1]unix.RemoteIovec{{Base: uintptr(a.probe), Len: 8}}
	n, err := unix.ProcessVMReadv(int(a.pid), local[:], remote[:], 0)
	switch {
	case errors.Is(err, unix.ESRCH):
		return a, fmt.Errorf("uct/cma: process %d does not exist: %w", a.pid, ucs.ErrUnreachable)
	case errors.Is(err, unix.EPERM):
		return a, fmt.Errorf("uct/cma: process_vm_readv of pid %d: %w; %s: %w", a.pid, err, ptraceHint(), ucs.ErrUnreachable)
	case err != nil:
		return a, fmt.Errorf("uct/cma: process_vm_readv of pid %d: %w: %w", a.pid, err, ucs.ErrUnreachable)
	case n != 8 || word != a.id:
		return a, fmt.Errorf("uct/cma: pid %d is not the process of iface %#x: %w", a.pid, a.id, ucs.ErrUnreachable)
	}
	return a, nil
}

// SetAMHandler fails with ucs.ErrUnsupported: cma has no active messages.
func (*Iface) SetAMHandler(id uint8, cb uct.AMCallback, arg any, flags uct.CBFlags) error {
	return fmt.Errorf("uct/cma: active messages: %w", ucs.ErrUnsupported)
}

// ReleaseDesc does nothing: there are no active messages.
func (*Iface) ReleaseDesc([]byte) {}

// RxHeadroom returns nil: there are no active messages, hence no data
// with a headroom (IfaceAttr.RxHeadroom is 0).
func (*Iface) RxHeadroom([]byte) []byte { return nil }

// Progress calls the iface's error handler for each EP that failed since
// the last call and returns their number.
func (i *Iface) Progress() int {
	n := i.failed.Take(func(e *EP) {
		if i.errCB != nil {
			i.errCB(i.errArg, e, ucs.ErrConnectionReset)
		}
	})
	if i.polled.Load() && i.failed.Len() == 0 {
		i.mu.Lock()
		// Under mu, which epFailed takes after it queued: a failure queued
		// since is seen here, or registers the iface again there.
		if i.failed.Len() == 0 && i.polled.Load() {
			i.worker.ProgressUnregister(i.progID)
			i.polled.Store(false)
		}
		i.mu.Unlock()
	}
	return n
}

// epFailed queues e for the error handler, and puts the iface in its
// worker's progress until the handler has seen it.
func (i *Iface) epFailed(e *EP) {
	i.failed.Add(e)
	i.mu.Lock()
	if i.worker != nil && !i.closed && !i.polled.Load() {
		i.progID = i.worker.ProgressAdd(i)
		i.polled.Store(true)
	}
	i.mu.Unlock()
}

// Flush returns OK: every operation completes on return.
func (*Iface) Flush(uct.FlushFlags, *uct.Completion) ucs.Status { return ucs.OK }

// Fence returns OK: every operation completes on return, in order.
func (*Iface) Fence(uint32) ucs.Status { return ucs.OK }

// EPCreate checks the iface whose addresses params gives (see IsReachable)
// and returns an EP to its process. Malformed addresses fail with
// ucs.ErrInvalidAddr; an iface that is not reachable with
// ucs.ErrUnreachable, whose message says why (for lack of ptrace
// permission, it names ptrace_scope).
func (i *Iface) EPCreate(params *uct.EPParams) (uct.EP, error) {
	if params == nil {
		return nil, fmt.Errorf("uct/cma: ep create without addresses: %w", ucs.ErrInvalidAddr)
	}
	a, err := i.check(params.DeviceAddr, params.IfaceAddr)
	if err != nil {
		return nil, fmt.Errorf("uct/cma: ep create: %w", err)
	}
	return &EP{iface: i, pid: int(a.pid)}, nil
}

// WakeupFD fails with ucs.ErrUnsupported: there is nothing to wait for.
func (*Iface) WakeupFD() (int, error) {
	return -1, fmt.Errorf("uct/cma: wakeup fd: %w", ucs.ErrUnsupported)
}

// Close unregisters the iface from its worker; peers can no longer create
// EPs to it.
func (i *Iface) Close() {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.closed {
		return
	}
	i.closed = true
	*i.probe = 0
	if i.polled.Load() {
		i.worker.ProgressUnregister(i.progID)
		i.polled.Store(false)
	}
}

// cost is the cost model of cma: one system call per operation (plus the
// kernel's page pinning): about 1.5 µs where a system call costs a few
// hundred ns, 2.7-3.3 µs for 8 bytes on a VM whose getppid takes 1 µs;
// 1 MiB copies ran at 14-19 GB/s there.
var cost = base.Cost{Overhead: 0.5e-6, Latency: 1.5e-6, Bandwidth: uct.Bandwidth{Dedicated: 10e9}}
