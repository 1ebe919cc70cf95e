package cma

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
	"github.com/goshmem/goshmem/uct/sm"
	"github.com/goshmem/goshmem/uct/uctest"
)

func TestResources(t *testing.T) {
	c, err := uct.LookupComponent("cma")
	if err != nil {
		t.Fatal(err)
	}
	if rs, _ := c.MDResources(); len(rs) != 1 || rs[0].Name != "cma" {
		t.Errorf("MDResources = %v", rs)
	}
	if _, err := c.OpenMD("posix", nil); !errors.Is(err, ucs.ErrNoDevice) {
		t.Errorf("OpenMD(posix) err = %v", err)
	}
	md, err := c.OpenMD("cma", nil)
	if err != nil {
		t.Fatal(err)
	}
	tls, _ := md.TLResources()
	want := uct.TLResource{TLName: "cma", DevName: "memory", DevType: uct.DeviceTypeShm, Latency: 1500 * time.Nanosecond, Bandwidth: 10e9}
	if len(tls) != 1 || tls[0] != want {
		t.Errorf("TLResources = %v, want [%v]", tls, want)
	}
	attr, _ := md.Query()
	if attr.Flags != uct.MDFlagReg|uct.MDFlagNeedRkey || attr.RkeyPackedSize != MkeyPackedSize || attr.ComponentName != "cma" {
		t.Errorf("MD attr = %+v", attr)
	}
	if _, err := md.MemAlloc(4096, 0, ""); !errors.Is(err, ucs.ErrUnsupported) {
		t.Errorf("MemAlloc err = %v, want ErrUnsupported", err)
	}
	if _, err := md.IfaceOpen(nil, &uct.IfaceParams{TLName: "posix", DevName: DevName}, nil); !errors.Is(err, ucs.ErrNoDevice) {
		t.Errorf("IfaceOpen(posix) err = %v, want ErrNoDevice", err)
	}
	cfg := ucs.ReadConfig("GOSHMEM_CMA_TEST_", md.IfaceConfigTable())
	cfg.Modify("SEG_SIZE", "1")
	if _, err := md.IfaceOpen(nil, nil, cfg); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("IfaceOpen(SEG_SIZE=1) err = %v, want ErrInvalidParam", err)
	}
	cfg.Modify("SEG_SIZE", "256")
	small, err := md.IfaceOpen(nil, nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	if sa, _ := small.Query(); sa.Put.MaxShort != 256 || sa.Put.MaxBcopy != 256 || sa.Get.MaxBcopy != 256 {
		t.Errorf("SEG_SIZE=256: put %+v, get %+v", sa.Put, sa.Get)
	}

	i := openTestIface(t, &uct.IfaceParams{TLName: TLName, DevName: DevName})
	ia, _ := i.Query()
	if ia.IfaceAddrLen != len(i.Address()) || ia.DeviceAddrLen != len(i.DeviceAddress()) {
		t.Errorf("address lengths %d/%d, addresses %d/%d bytes", ia.IfaceAddrLen, ia.DeviceAddrLen, len(i.Address()), len(i.DeviceAddress()))
	}
	const am = uct.IfaceFlagAMShort | uct.IfaceFlagAMBcopy | uct.IfaceFlagAMZcopy | uct.IfaceFlagCBSync | uct.IfaceFlagCBAsync
	const rma = uct.IfaceFlagPutShort | uct.IfaceFlagPutBcopy | uct.IfaceFlagPutZcopy | uct.IfaceFlagGetBcopy | uct.IfaceFlagGetZcopy
	if ia.Flags&am != 0 || ia.Flags&(uct.IfaceFlagAtomicCPU|uct.IfaceFlagAtomicDevice) != 0 || ia.AM != (uct.OpCaps{}) ||
		ia.Atomic32 != (uct.AtomicCaps{}) || ia.Atomic64 != (uct.AtomicCaps{}) {
		t.Errorf("iface claims active messages or atomics: %+v", ia)
	}
	if ia.Flags&rma != rma || ia.Flags&uct.IfaceFlagGetShort != 0 || ia.Flags&uct.IfaceFlagErrhandlePeerDown == 0 ||
		ia.Put.MaxShort != DefaultSegSize || ia.Get.MaxBcopy != DefaultSegSize || ia.Put.MaxZcopy < 1<<30 {
		t.Errorf("iface attr = %+v", ia)
	}
	if ia.Latency.C < 0.1e-6 || ia.Latency.C > 5e-6 || ia.Bandwidth.Dedicated < 1e9 || ia.Bandwidth.Dedicated > 100e9 {
		t.Errorf("iface performance = %+v, %+v", ia.Latency, ia.Bandwidth)
	}
	if !bytes.Equal(i.DeviceAddress(), sm.DomainAddress()) {
		t.Error("device address is not the shared-memory domain")
	}
	if err := i.SetAMHandler(1, func(any, []byte, uint32) ucs.Status { return ucs.OK }, nil, uct.CBFlagSync); !errors.Is(err, ucs.ErrUnsupported) {
		t.Errorf("SetAMHandler err = %v", err)
	}
	if _, err := i.WakeupFD(); !errors.Is(err, ucs.ErrUnsupported) {
		t.Errorf("WakeupFD err = %v", err)
	}
	ep, err := i.EPCreate(&uct.EPParams{DeviceAddr: i.DeviceAddress(), IfaceAddr: i.Address()})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Destroy()
	var r64 uint64
	var r32 uint32
	for name, s := range map[string]ucs.Status{
		"AMShort":       ep.AMShort(1, 0, nil),
		"AMBcopy":       func() ucs.Status { _, s := ep.AMBcopy(1, func([]byte) int { return 0 }, 0); return s }(),
		"AMZcopy":       ep.AMZcopy(1, nil, nil, 0, nil),
		"AtomicPost64":  ep.AtomicPost64(uct.AtomicOpAdd, 1, uint64(uintptr(unsafe.Pointer(&r64))), uint64(pid)),
		"AtomicPost32":  ep.AtomicPost32(uct.AtomicOpAdd, 1, uint64(uintptr(unsafe.Pointer(&r32))), uint64(pid)),
		"AtomicFetch64": ep.AtomicFetch64(uct.AtomicOpAdd, 1, 8, uint64(pid), &r64, nil),
		"AtomicFetch32": ep.AtomicFetch32(uct.AtomicOpAdd, 1, 8, uint64(pid), &r32, nil),
		"AtomicCSwap64": ep.AtomicCSwap64(0, 1, 8, uint64(pid), &r64, nil),
		"AtomicCSwap32": ep.AtomicCSwap32(0, 1, 8, uint64(pid), &r32, nil),
	} {
		if s != ucs.ErrUnsupported {
			t.Errorf("%s = %v, want ErrUnsupported", name, s)
		}
	}
	if s := ep.PendingAdd(&uct.PendingReq{}, 0); s != ucs.ErrBusy {
		t.Errorf("PendingAdd = %v, want ErrBusy", s)
	}
	if s := ep.Flush(0, nil); s != ucs.OK {
		t.Errorf("Flush = %v", s)
	}
	if s := ep.Fence(0); s != ucs.OK {
		t.Errorf("Fence = %v", s)
	}
}

func TestMemReg(t *testing.T) {
	c := &Component{}
	md, _ := c.OpenMD(MDName, nil)
	buf := make([]byte, 100)
	for _, tt := range []struct {
		name string
		addr unsafe.Pointer
		n    int
	}{
		{"nil", nil, 8},
		{"zero length", unsafe.Pointer(&buf[0]), 0},
		{"negative length", unsafe.Pointer(&buf[0]), -1},
		{"beyond user space", unsafe.Add(unsafe.Pointer(nil), maxAddr-4), 8},
	} {
		if _, err := md.MemReg(tt.addr, tt.n, 0); !errors.Is(err, ucs.ErrInvalidParam) {
			t.Errorf("MemReg(%s) err = %v, want ErrInvalidParam", tt.name, err)
		}
	}
	memh, err := md.MemReg(unsafe.Pointer(&buf[3]), 97, uct.MemAccessDefault)
	if err != nil {
		t.Fatal(err)
	}
	key, err := md.MkeyPack(nil, memh)
	if err != nil || len(key) != MkeyPackedSize {
		t.Fatalf("MkeyPack = %x, %v", key, err)
	}
	k, err := decodeMkey(key)
	if err != nil || k.pid != pid || k.addr != uint64(uintptr(unsafe.Pointer(&buf[3]))) || k.length != 97 {
		t.Errorf("key %+v, %v", k, err)
	}
	rk, err := c.RkeyUnpack(key)
	if err != nil || rk.Rkey != uint64(os.Getpid()) {
		t.Fatalf("RkeyUnpack = %+v, %v; want rkey %d", rk, err, os.Getpid())
	}
	if _, err := c.RkeyPtr(rk, k.addr); !errors.Is(err, ucs.ErrUnsupported) {
		t.Errorf("RkeyPtr err = %v, want ErrUnsupported", err)
	}
	if err := c.RkeyRelease(rk); err != nil {
		t.Error(err)
	}
	if err := c.RkeyRelease(rk); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("double RkeyRelease err = %v", err)
	}
	if _, err := c.RkeyPtr(rk, k.addr); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("RkeyPtr of a released rkey err = %v", err)
	}
	if err := c.RkeyRelease(uct.RkeyBundle{Rkey: 1}); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("RkeyRelease of a foreign bundle err = %v", err)
	}
	if err := md.MemDereg(memh); err != nil {
		t.Error(err)
	}
	if err := md.MemDereg(memh); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("double MemDereg err = %v", err)
	}
	if _, err := md.MkeyPack(nil, memh); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("MkeyPack of a released handle err = %v", err)
	}
	if err := md.MemFree(memh); !errors.Is(err, ucs.ErrUnsupported) {
		t.Errorf("MemFree err = %v", err)
	}
}

func TestMkeyDecode(t *testing.T) {
	good := (&mkey{pid: 100, addr: 0x7f0000000000, length: 4096}).encode()
	if k, err := decodeMkey(good); err != nil || k.pid != 100 || k.addr != 0x7f0000000000 || k.length != 4096 {
		t.Fatalf("decode(good) = %+v, %v", k, err)
	}
	mod := func(off int, v uint64, size int) []byte { return uctest.Patched(good, off, size, v) }
	uctest.CheckBadKeys(t, &Component{}, good, func(b []byte) error { _, err := decodeMkey(b); return err }, []uctest.BadKey{
		{Name: "magic", Key: mod(0, 0x12345678, 4)},
		{Name: "version", Key: mod(4, 2, 2)},
		{Name: "reserved 6", Key: mod(6, 1, 2)},
		{Name: "reserved 12", Key: mod(12, 1, 4)},
		{Name: "zero pid", Key: mod(8, 0, 4)},
		{Name: "huge pid", Key: mod(8, maxPid, 4)},
		{Name: "zero address", Key: mod(16, 0, 8)},
		{Name: "zero length", Key: mod(24, 0, 8)},
		{Name: "wrapping range", Key: mod(16, ^uint64(0)-100, 8)},
		{Name: "range above user space", Key: mod(24, maxAddr, 8)},
	}...)
	// A well-formed key of a process that does not exist.
	dead := (&mkey{pid: maxPid - 1, addr: 0x10000, length: 8}).encode()
	if _, err := (&Component{}).RkeyUnpack(dead); !errors.Is(err, ucs.ErrUnreachable) {
		t.Errorf("RkeyUnpack of a key of no process err = %v, want ErrUnreachable", err)
	}
}

func TestIfaceAddr(t *testing.T) {
	i := openTestIface(t, nil)
	good := i.Address()
	dev := i.DeviceAddress()
	a, err := decodeIfaceAddr(good)
	if err != nil || a.pid != pid || a.pidns != pidNamespace() || a.id == 0 {
		t.Fatalf("decode(own address) = %+v, %v", a, err)
	}
	if !i.IsReachable(dev, good) {
		t.Fatal("own iface not reachable")
	}
	forge := func(f func(a *ifaceAddr)) []byte {
		a2 := a
		f(&a2)
		return a2.encode()
	}
	malformed := []struct {
		name string
		addr []byte
	}{
		{"empty", nil},
		{"short", good[:IfaceAddrLen-1]},
		{"magic", append([]byte{1}, good[1:]...)},
		{"zero pid", forge(func(a *ifaceAddr) { a.pid = 0 })},
		{"huge pid", forge(func(a *ifaceAddr) { a.pid = maxPid })},
		{"zero id", forge(func(a *ifaceAddr) { a.id = 0 })},
		{"zero probe", forge(func(a *ifaceAddr) { a.probe = 0 })},
		{"unaligned probe", forge(func(a *ifaceAddr) { a.probe++ })},
		{"probe above user space", forge(func(a *ifaceAddr) { a.probe = maxAddr })},
	}
	for _, tt := range malformed {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := decodeIfaceAddr(tt.addr); !errors.Is(err, ucs.ErrInvalidAddr) {
				t.Errorf("decode err = %v, want ErrInvalidAddr", err)
			}
			if i.IsReachable(dev, tt.addr) {
				t.Error("IsReachable = true")
			}
			if _, err := i.EPCreate(&uct.EPParams{DeviceAddr: dev, IfaceAddr: tt.addr}); !errors.Is(err, ucs.ErrInvalidAddr) {
				t.Errorf("EPCreate err = %v, want ErrInvalidAddr", err)
			}
		})
	}
	otherDev := append([]byte(nil), dev...)
	otherDev[0] ^= 1
	var zero uint64
	unreachable := []struct {
		name      string
		dev, addr []byte
		why       string
	}{
		{"other domain", otherDev, good, "shared-memory domain"},
		{"other PID namespace", dev, forge(func(a *ifaceAddr) { a.pidns++ }), "PID namespace"},
		{"other iface id", dev, forge(func(a *ifaceAddr) { a.id++ }), "not the process"},
		{"probe elsewhere", dev, forge(func(a *ifaceAddr) { a.probe = uint64(uintptr(unsafe.Pointer(&zero))) }), "not the process"},
		{"unmapped probe", dev, forge(func(a *ifaceAddr) { a.probe = 8 }), "process_vm_readv"},
		{"no such process", dev, forge(func(a *ifaceAddr) { a.pid = maxPid - 1 }), "does not exist"},
	}
	for _, tt := range unreachable {
		t.Run(tt.name, func(t *testing.T) {
			if i.IsReachable(tt.dev, tt.addr) {
				t.Error("IsReachable = true")
			}
			_, err := i.EPCreate(&uct.EPParams{DeviceAddr: tt.dev, IfaceAddr: tt.addr})
			if !errors.Is(err, ucs.ErrUnreachable) || !strings.Contains(err.Error(), tt.why) {
				t.Errorf("EPCreate err = %v, want ErrUnreachable saying %q", err, tt.why)
			}
		})
	}
	if _, err := i.EPCreate(&uct.EPParams{DeviceAddr: dev[:4], IfaceAddr: good}); !errors.Is(err, ucs.ErrInvalidAddr) {
		t.Errorf("EPCreate(short device address) err = %v, want ErrInvalidAddr", err)
	}
	if _, err := i.EPCreate(nil); !errors.Is(err, ucs.ErrInvalidAddr) {
		t.Errorf("EPCreate(nil) err = %v, want ErrInvalidAddr", err)
	}
	// A closed iface cannot be reached any more.
	i2 := openTestIface(t, nil)
	addr2 := i2.Address()
	i2.Close()
	if i.IsReachable(dev, addr2) {
		t.Error("closed iface reachable")
	}
}

// TestLoopback transfers within this process: many-element iovs (beyond
// IOV_MAX), empty elements, wrong rkeys and invalid remote ranges.
func TestLoopback(t *testing.T) {
	i := openTestIface(t, nil)
	ep, err := i.EPCreate(&uct.EPParams{DeviceAddr: i.DeviceAddress(), IfaceAddr: i.Address()})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Destroy()
	rkey := uint64(os.Getpid())
	const elems = 2500 // > IOV_MAX (1024)
	src := pattern(elems*3, 1)
	dst := make([]byte, len(src)+2)
	raddr := uint64(uintptr(unsafe.Pointer(&dst[1])))
	iov := make([]uct.IOV, 0, 2*elems)
	for k := range elems {
		iov = append(iov, uct.IOV{Buffer: src[3*k : 3*k+3]}, uct.IOV{})
	}
	if s := ep.PutZcopy(iov, raddr, rkey, nil); s != ucs.OK {
		t.Fatalf("PutZcopy of %d elements = %v", len(iov), s)
	}
	if !bytes.Equal(dst[1:len(dst)-1], src) || dst[0] != 0 || dst[len(dst)-1] != 0 {
		t.Fatal("PutZcopy: wrong bytes")
	}
	got := make([]byte, len(src))
	iov = iov[:0]
	for k := 0; k < len(got); k += 5 {
		iov = append(iov, uct.IOV{Buffer: got[k:min(k+5, len(got))]})
	}
	if s := ep.GetZcopy(iov, raddr, rkey, nil); s != ucs.OK || !bytes.Equal(got, src) {
		t.Fatalf("GetZcopy of %d elements = %v, equal %v", len(iov), s, bytes.Equal(got, src))
	}
	one := []uct.IOV{{Buffer: make([]byte, 8)}}
	if s := ep.PutZcopy(one, raddr, rkey+1, nil); s != ucs.ErrInvalidParam {
		t.Errorf("PutZcopy with another pid's rkey = %v, want ErrInvalidParam", s)
	}
	if s := ep.PutShort(make([]byte, DefaultSegSize+1), raddr, rkey); s != ucs.ErrInvalidParam {
		t.Errorf("PutShort beyond MaxShort = %v", s)
	}
	if s := ep.GetBcopy(func([]byte) {}, DefaultSegSize+1, raddr, rkey, nil); s != ucs.ErrInvalidParam {
		t.Errorf("GetBcopy beyond MaxBcopy = %v", s)
	}
	if _, s := ep.PutBcopy(func(dst []byte) int { return len(dst) + 1 }, raddr, rkey); s != ucs.ErrInvalidParam {
		t.Errorf("PutBcopy with a bad pack = %v", s)
	}
	// Invalid remote ranges: unmapped, and running off the end of a mapping.
	m, err := unix.Mmap(-1, 0, 2*os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	if err := unix.Mprotect(m[os.Getpagesize():], unix.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	edge := uint64(uintptr(unsafe.Pointer(&m[os.Getpagesize()-4])))
	for name, raddr := range map[string]uint64{"unmapped": 8, "across the end of a mapping": edge} {
		if s := ep.PutZcopy([]uct.IOV{{Buffer: make([]byte, 64)}}, raddr, rkey, nil); s != ucs.ErrIOError {
			t.Errorf("PutZcopy %s = %v, want ErrIOError", name, s)
		}
		if s := ep.GetZcopy([]uct.IOV{{Buffer: make([]byte, 64)}}, raddr, rkey, nil); s != ucs.ErrIOError {
			t.Errorf("GetZcopy %s = %v, want ErrIOError", name, s)
		}
	}
	if m[os.Getpagesize()-4] != 0 {
		// A partial transfer wrote the first bytes: allowed, but then the
		// error must still be reported, as above.
		t.Log("partial write before the end of the mapping")
	}
	if s := ep.Flush(0, nil); s != ucs.OK {
		t.Errorf("Flush after I/O errors = %v", s)
	}
}

// TestTwoProcess puts into and gets from a peer process's buffer with every
// flavour and sizes up to 8 MiB, at unaligned offsets, checked by the peer.
func TestTwoProcess(t *testing.T) {
	p := startPeer(t)
	ia, _ := p.iface.Query()
	sizes := []int{0, 1, 7, 64, 4095, 4096, 4097, ia.Put.MaxShort, 65536 + 3, 1 << 20, 8 << 20}
	for k, n := range sizes {
		off := (k * 4099) % 61
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			raddr := p.base + uint64(off)
			// Known bytes around the range, which no put may touch.
			if off > 0 {
				p.fill(off-1, 1, 5)
			}
			p.fill(off+n, 1, 6)
			put := func(how string, s ucs.Status, data []byte) {
				t.Helper()
				if s != ucs.OK {
					t.Fatalf("%s = %v", how, s)
				}
				if got, want := p.sum(off, n), hexSum(data); got != want {
					t.Fatalf("%s: peer memory differs", how)
				}
				if off > 0 && p.sum(off-1, 1) != hexSum(pattern(1, 5)) {
					t.Fatalf("%s: wrote before the range", how)
				}
				if p.sum(off+n, 1) != hexSum(pattern(1, 6)) {
					t.Fatalf("%s: wrote after the range", how)
				}
			}
			if n <= ia.Put.MaxShort {
				data := pattern(n, 3*k)
				put("PutShort", p.ep.PutShort(data, raddr, p.rkey.Rkey), data)
				data = pattern(n, 3*k+1)
				got, s := p.ep.PutBcopy(func(dst []byte) int { return copy(dst, data) }, raddr, p.rkey.Rkey)
				if got != n {
					t.Errorf("PutBcopy = %d bytes", got)
				}
				put("PutBcopy", s, data)
			}
			data := pattern(n, 3*k+2)
			h := n / 3
			put("PutZcopy", p.ep.PutZcopy([]uct.IOV{{Buffer: data[:h]}, {}, {Buffer: data[h : 2*h]}, {Buffer: data[2*h:]}}, raddr, p.rkey.Rkey, nil), data)

			p.fill(off, n, 7*k)
			want := pattern(n, 7*k)
			if n <= ia.Get.MaxBcopy {
				var got []byte
				s := p.ep.GetBcopy(func(src []byte) { got = append([]byte{}, src...) }, n, raddr, p.rkey.Rkey, nil)
				if s != ucs.OK || !bytes.Equal(got, want) {
					t.Errorf("GetBcopy = %v, equal %v", s, bytes.Equal(got, want))
				}
			}
			got := make([]byte, n+1)
			got[n] = 0x5a
			if s := p.ep.GetZcopy([]uct.IOV{{Buffer: got[:h]}, {Buffer: got[h:n]}}, raddr, p.rkey.Rkey, nil); s != ucs.OK || !bytes.Equal(got[:n], want) || got[n] != 0x5a {
				t.Errorf("GetZcopy = %v, equal %v", s, bytes.Equal(got[:n], want))
			}
		})
	}
}

// TestDeadPeer checks that transfers to a peer that died fail at once with
// ErrConnectionReset, and that the error handler hears of it once, from
// the worker's progress, which polls the iface only while a failure waits
// to be reported (it has nothing else to do).
func TestDeadPeer(t *testing.T) {
	p := startPeer(t)
	var calls []uct.EP
	var statuses []ucs.Status
	w := uct.NewWorker(ucs.ThreadModeSingle)
	i := openTestIfaceOn(t, w, &uct.IfaceParams{ErrHandler: func(arg any, ep uct.EP, s ucs.Status) {
		if arg != "arg" {
			t.Errorf("error handler arg %v", arg)
		}
		calls = append(calls, ep)
		statuses = append(statuses, s)
	}, ErrHandlerArg: "arg"})
	ep, err := i.EPCreate(&uct.EPParams{DeviceAddr: p.dev, IfaceAddr: p.addr})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	if s := ep.PutShort(buf[:8], p.base, p.rkey.Rkey); s != ucs.OK {
		t.Fatalf("PutShort to the live peer = %v", s)
	}
	if n := w.Progress(); n != 0 || i.polled.Load() {
		t.Errorf("Progress = %d before any failure, iface polled %v", n, i.polled.Load())
	}
	p.kill()
	start := time.Now()
	if s := ep.PutShort(buf[:8], p.base, p.rkey.Rkey); s != ucs.ErrConnectionReset {
		t.Errorf("PutShort to the dead peer = %v, want ErrConnectionReset", s)
	}
	if s := ep.GetZcopy([]uct.IOV{{Buffer: buf}}, p.base, p.rkey.Rkey, nil); s != ucs.ErrConnectionReset {
		t.Errorf("GetZcopy from the dead peer = %v, want ErrConnectionReset", s)
	}
	if _, s := ep.PutBcopy(func(dst []byte) int { return 8 }, p.base, p.rkey.Rkey); s != ucs.ErrConnectionReset {
		t.Errorf("PutBcopy to the dead peer = %v, want ErrConnectionReset", s)
	}
	if s := ep.Flush(0, nil); s != ucs.ErrConnectionReset {
		t.Errorf("Flush = %v, want ErrConnectionReset", s)
	}
	// The EP made by startPeer fails on its own too.
	if s := p.ep.GetBcopy(func([]byte) {}, 8, p.base, p.rkey.Rkey, nil); s != ucs.ErrConnectionReset {
		t.Errorf("GetBcopy from the dead peer = %v, want ErrConnectionReset", s)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("failing took %v", d)
	}
	if !i.polled.Load() {
		t.Error("a failure to report did not put the iface in its worker's progress")
	}
	if n := w.Progress(); n != 1 || len(calls) != 1 || calls[0] != ep || statuses[0] != ucs.ErrConnectionReset {
		t.Errorf("Progress = %d, error handler called %d times (%v)", n, len(calls), statuses)
	}
	if n := w.Progress(); n != 0 || len(calls) != 1 || i.polled.Load() {
		t.Errorf("error handler called again: Progress = %d, %d calls; iface polled %v", n, len(calls), i.polled.Load())
	}
	if i.IsReachable(p.dev, p.addr) {
		t.Error("dead peer reachable")
	}
	if _, err := i.EPCreate(&uct.EPParams{DeviceAddr: p.dev, IfaceAddr: p.addr}); !errors.Is(err, ucs.ErrUnreachable) {
		t.Errorf("EPCreate to the dead peer err = %v, want ErrUnreachable", err)
	}
	if _, err := (&Component{}).RkeyUnpack(p.key); !errors.Is(err, ucs.ErrUnreachable) {
		t.Errorf("RkeyUnpack of the dead peer's key err = %v, want ErrUnreachable", err)
	}
	ep.Destroy()
}

// TestPtraceDenied runs a peer as another user (uid 65534), which may not
// access this process: its EP creation must fail with a message naming
// ptrace_scope, and a transfer with ErrUnreachable. It needs root.
func TestPtraceDenied(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to start a peer process as another user")
	}
	// The test binary, where uid 65534 may run it.
	dir, err := os.MkdirTemp("", "cma-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "cma.test")
	if err := copyFile(os.Args[0], bin); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	asNobody := func(_ string, arg ...string) *exec.Cmd {
		cmd := exec.Command(bin, arg...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		return cmd
	}
	p := spawnPeer(t, asNobody)
	i := openTestIface(t, nil)
	// Root reaches the peer ...
	if !i.IsReachable(p.dev, p.addr) {
		t.Fatal("root cannot reach a peer of another user")
	}
	// ... but not the reverse.
	r := p.call("connect %x", i.Address())
	if !strings.Contains(r, "ptrace_scope") || !strings.Contains(r, ucs.ErrUnreachable.Error()) {
		t.Errorf("connect from another user: %q, want unreachable naming ptrace_scope", r)
	}
	var word uint64
	if r := p.call("put %d %d", os.Getpid(), uintptr(unsafe.Pointer(&word))); r != ucs.ErrUnreachable.Error() {
		t.Errorf("put from another user: %q, want %q", r, ucs.ErrUnreachable.Error())
	}
	if word != 0 {
		t.Error("another user wrote into this process")
	}
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func TestAllocs(t *testing.T) {
	i := openTestIface(t, nil)
	ep, _ := i.EPCreate(&uct.EPParams{DeviceAddr: i.DeviceAddress(), IfaceAddr: i.Address()})
	defer ep.Destroy()
	dst := make([]byte, 64)
	raddr, rkey := uint64(uintptr(unsafe.Pointer(&dst[0]))), uint64(os.Getpid())
	buf := make([]byte, 8)
	iov := []uct.IOV{{Buffer: buf}, {Buffer: buf}}
	pack := func(d []byte) int { return copy(d, buf) }
	unpack := func([]byte) {}
	for name, f := range map[string]func(){
		"PutShort":  func() { ep.PutShort(buf, raddr, rkey) },
		"PutBcopy":  func() { ep.PutBcopy(pack, raddr, rkey) },
		"PutZcopy":  func() { ep.PutZcopy(iov, raddr, rkey, nil) },
		"GetBcopy":  func() { ep.GetBcopy(unpack, 8, raddr, rkey, nil) },
		"GetZcopy":  func() { ep.GetZcopy(iov, raddr, rkey, nil) },
		"Progress":  func() { i.Progress() },
		"Flush":     func() { ep.Flush(0, nil) },
		"AtomicAdd": func() { ep.AtomicPost64(uct.AtomicOpAdd, 1, raddr, rkey) },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocations", name, n)
		}
	}
}
