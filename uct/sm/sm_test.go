package sm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
	"github.com/goshmem/goshmem/uct/uctest"
)

func pattern(n, seed int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*13 + seed*7 + 1)
	}
	return b
}

func TestResources(t *testing.T) {
	c, err := uct.LookupComponent("posix")
	if err != nil {
		t.Fatal(err)
	}
	md, err := c.OpenMD("posix", nil)
	if err != nil {
		t.Fatal(err)
	}
	tls, _ := md.TLResources()
	want := uct.TLResource{TLName: "posix", DevName: "memory", DevType: uct.DeviceTypeShm, Latency: 80 * time.Nanosecond, Bandwidth: 12e9}
	if len(tls) != 1 || tls[0] != want {
		t.Errorf("TLResources = %v, want [%v]", tls, want)
	}
	attr, _ := md.Query()
	if attr.Flags != uct.MDFlagAlloc|uct.MDFlagFixed|uct.MDFlagRkeyPtr|uct.MDFlagNeedRkey || attr.RkeyPackedSize != MkeyPackedSize {
		t.Errorf("MD attr = %+v", attr)
	}
	if _, err := md.MemReg(nil, 8, 0); !errors.Is(err, ucs.ErrUnsupported) {
		t.Errorf("MemReg err = %v, want ErrUnsupported", err)
	}
	if _, err := md.MemAlloc(0, 0, ""); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("MemAlloc(0) err = %v, want ErrInvalidParam", err)
	}
	i := openTestIface(t)
	ia, _ := i.Query()
	if ia.IfaceAddrLen != len(i.Address()) || ia.DeviceAddrLen != len(i.DeviceAddress()) {
		t.Errorf("address lengths %d/%d, addresses %d/%d bytes", ia.IfaceAddrLen, ia.DeviceAddrLen, len(i.Address()), len(i.DeviceAddress()))
	}
	if ia.AM.MaxBcopy != DefaultSegSize || ia.Flags&uct.IfaceFlagAtomicCPU == 0 || ia.Atomic64.FopFlags != 0x3f || ia.Atomic32.OpFlags != 0xf {
		t.Errorf("iface attr = %+v", ia)
	}
}

// TestSegments allocates segments, checks they are private memfds that leave
// nothing in /dev/shm, and that a 1 GiB segment costs no memory until used.
func TestSegments(t *testing.T) {
	md, _ := (&PosixComponent{}).OpenMD(PosixMDName, nil)
	var names []string
	for _, size := range []int{1, 4096, 5000, 1 << 30} {
		a, err := md.MemAlloc(size, 0, "test")
		if err != nil {
			t.Fatalf("MemAlloc(%d): %v", size, err)
		}
		h := a.Memh.(*Memh)
		if a.Length < size || a.Length%os.Getpagesize() != 0 {
			t.Errorf("MemAlloc(%d) length %d", size, a.Length)
		}
		var st unix.Stat_t
		if err := unix.Fstat(h.FD, &st); err != nil || st.Mode&0o777 != segmentMode {
			t.Errorf("segment mode %o (err %v), want %o", st.Mode&0o777, err, segmentMode)
		}
		link, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", h.FD))
		if !strings.HasPrefix(link, "/memfd:"+segmentName(h.SegmentID)) {
			t.Errorf("segment fd links to %q", link)
		}
		names = append(names, segmentName(h.SegmentID))
		mem := unsafe.Slice((*byte)(a.Address), a.Length)
		mem[0], mem[len(mem)-1] = 1, 2
		if mem[0] != 1 || mem[len(mem)-1] != 2 {
			t.Error("segment not writable")
		}
		if err := md.MemFree(a.Memh); err != nil {
			t.Fatal(err)
		}
		if err := md.MemFree(a.Memh); !errors.Is(err, ucs.ErrInvalidParam) {
			t.Errorf("double MemFree err = %v", err)
		}
	}
	entries, err := os.ReadDir("/dev/shm")
	if err != nil {
		t.Logf("no /dev/shm to check: %v", err)
	}
	for _, e := range entries {
		for _, n := range names {
			if strings.Contains(e.Name(), n) || strings.Contains(e.Name(), "goshmem") {
				t.Errorf("/dev/shm/%s left behind", e.Name())
			}
		}
	}
}

func TestMkeyDecode(t *testing.T) {
	good := (&mkey{pid: 100, fd: 7, id: 0xabcdef, length: 4096, addr: 0x7f0000000000}).encode()
	if k, err := decodeMkey(good); err != nil || k.pid != 100 || k.fd != 7 || k.id != 0xabcdef || k.length != 4096 || k.addr != 0x7f0000000000 {
		t.Fatalf("decode(good) = %+v, %v", k, err)
	}
	mod := func(off int, v uint64, size int) []byte { return uctest.Patched(good, off, size, v) }
	uctest.CheckBadKeys(t, &PosixComponent{}, good, func(b []byte) error { _, err := decodeMkey(b); return err }, []uctest.BadKey{
		{Name: "magic", Key: mod(0, 0x12345678, 4)},
		{Name: "version", Key: mod(4, 3, 2)},
		{Name: "reserved", Key: mod(6, 1, 2)},
		{Name: "zero pid", Key: mod(8, 0, 4)},
		{Name: "huge pid", Key: mod(8, maxPid, 4)},
		{Name: "negative fd", Key: mod(12, 0xffffffff, 4)},
		{Name: "zero id", Key: mod(16, 0, 8)},
		{Name: "zero length", Key: mod(24, 0, 8)},
		{Name: "zero address", Key: mod(32, 0, 8)},
		{Name: "wrapping range", Key: mod(32, ^uint64(0)-100, 8)},
		{Name: "range above user space", Key: mod(24, maxAddr, 8)},
	}...)
}

// TestLocalRkey unpacks keys of this process: delta 0, one mapping shared,
// range checks of RkeyPtr.
func TestLocalRkey(t *testing.T) {
	c := &PosixComponent{}
	md, _ := c.OpenMD(PosixMDName, nil)
	a, err := md.MemAlloc(8192, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	key, _ := md.MkeyPack(nil, a.Memh)
	r1, err := c.RkeyUnpack(key)
	if err != nil || r1.Rkey != 0 {
		t.Fatalf("RkeyUnpack = %v, %v", r1, err)
	}
	r2, _ := c.RkeyUnpack(key)
	base := uint64(uintptr(a.Address))
	p, err := c.RkeyPtr(r1, base+100)
	if err != nil || p != unsafe.Add(a.Address, 100) {
		t.Errorf("RkeyPtr = %p, %v", p, err)
	}
	for _, raddr := range []uint64{base - 1, base + 8192, 0} {
		if _, err := c.RkeyPtr(r1, raddr); !errors.Is(err, ucs.ErrOutOfRange) {
			t.Errorf("RkeyPtr(%#x) err = %v, want ErrOutOfRange", raddr, err)
		}
	}
	md.MemFree(a.Memh)
	// The rkeys keep the mapping alive; new unpacks fail.
	*(*byte)(p) = 1
	if _, err := c.RkeyUnpack(key); !errors.Is(err, ucs.ErrUnreachable) {
		t.Errorf("RkeyUnpack of a freed segment err = %v, want ErrUnreachable", err)
	}
	c.RkeyRelease(r1)
	if err := c.RkeyRelease(r1); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("double RkeyRelease err = %v", err)
	}
	c.RkeyRelease(r2)
	segments.Lock()
	_, cached := segments.m[segKey{pid, a.Memh.(*Memh).SegmentID}]
	segments.Unlock()
	if cached {
		t.Error("segment still mapped after the last release")
	}
}

// TestLoopbackAM sends to an iface of this process: FIFO full, pending
// requests, delivery order, unknown ids.
func TestLoopbackAM(t *testing.T) {
	i, ep := openLoopback(t)
	var got []uint64
	i.SetAMHandler(3, func(arg any, data []byte, flags uint32) ucs.Status {
		if flags != 0 || len(data) < 8 {
			t.Errorf("handler flags %#x, %d bytes", flags, len(data))
		}
		got = append(got, binary.LittleEndian.Uint64(data))
		return ucs.OK
	}, nil, uct.CBFlagSync)
	r := &uct.PendingReq{}
	if s := ep.PendingAdd(r, 0); s != ucs.ErrBusy {
		t.Errorf("PendingAdd with room = %v, want ErrBusy", s)
	}
	for k := range DefaultFIFOSize {
		if s := ep.AMShort(3, uint64(k), nil); s != ucs.OK {
			t.Fatalf("AMShort %d = %v", k, s)
		}
	}
	if s := ep.AMShort(3, 0, nil); s != ucs.ErrNoResource {
		t.Fatalf("AMShort on a full FIFO = %v, want ErrNoResource", s)
	}
	if _, s := ep.AMBcopy(3, func([]byte) int { t.Error("pack called on a full FIFO"); return 0 }, 0); s != ucs.ErrNoResource {
		t.Fatalf("AMBcopy on a full FIFO = %v", s)
	}
	r.Func = func(*uct.PendingReq) ucs.Status { return ep.AMShort(3, 1000, nil) }
	if s := ep.PendingAdd(r, 0); s != ucs.OK {
		t.Fatalf("PendingAdd on a full FIFO = %v", s)
	}
	for len(got) < DefaultFIFOSize+1 {
		if i.Progress() == 0 {
			t.Fatalf("Progress stalled after %d messages", len(got))
		}
	}
	for k, v := range got {
		if want := uint64(k); k == DefaultFIFOSize {
			if v != 1000 {
				t.Errorf("pending message = %d", v)
			}
		} else if v != want {
			t.Fatalf("message %d has header %d", k, v)
		}
	}
	// A message to an id without handler, and a failing pack, are dropped.
	ep.AMShort(9, 1, nil)
	if _, s := ep.AMBcopy(3, func([]byte) int { return -1 }, 0); s != ucs.ErrInvalidParam {
		t.Errorf("AMBcopy with a bad pack = %v", s)
	}
	got = nil
	if n := i.Progress(); n != 2 || len(got) != 0 {
		t.Errorf("Progress = %d, delivered %v", n, got)
	}
	// Purge.
	var purged int
	for ep.AMShort(3, 0, nil) == ucs.OK {
	}
	ep.PendingAdd(&uct.PendingReq{Func: func(*uct.PendingReq) ucs.Status { t.Error("purged request called"); return ucs.OK }}, 0)
	ep.PendingPurge(func(*uct.PendingReq) { purged++ })
	for i.Progress() != 0 {
	}
	if purged != 1 || i.pending.Len() != 0 {
		t.Errorf("purged %d, %d pending", purged, i.pending.Len())
	}
}

// TestHeadAfterBurst: once the receiver's Progress has delivered a burst
// and found its ring empty, the head it published leaves the whole ring
// to the producers, for every length of burst (a head published late, or
// lazily, as UCX's mm receiver does by FIFO_RELEASE_FACTOR, must still
// catch up before the receiver waits).
func TestHeadAfterBurst(t *testing.T) {
	i, ep := openLoopback(t)
	got := 0
	i.SetAMHandler(3, func(any, []byte, uint32) ucs.Status { got++; return ucs.OK }, nil, uct.CBFlagSync)
	for _, burst := range []int{1, 3, DefaultFIFOSize/4 - 1, DefaultFIFOSize / 4, DefaultFIFOSize/4 + 1, DefaultFIFOSize - 1, DefaultFIFOSize} {
		got = 0
		for k := range burst {
			if s := ep.AMShort(3, uint64(k), nil); s != ucs.OK {
				t.Fatalf("burst %d: AMShort %d = %v", burst, k, s)
			}
		}
		for got < burst {
			if i.Progress() == 0 {
				t.Fatalf("burst %d: Progress stalled after %d messages", burst, got)
			}
		}
		if n := i.Progress(); n != 0 {
			t.Fatalf("burst %d: an empty ring's Progress = %d", burst, n)
		}
		e := ep.(*EP)
		if free := DefaultFIFOSize - int(atomic.LoadUint64(e.tx.tail)-atomic.LoadUint64(e.tx.head)); free != DefaultFIFOSize {
			t.Errorf("burst %d: %d cells free to producers after the receiver found its ring empty, want %d", burst, free, DefaultFIFOSize)
		}
	}
}

// TestHeadBeforeSleep: a receiver that arms for events (to sleep) after a
// Progress that delivered a burst, and found the ring empty only then,
// leaves the whole ring to the producers too: it publishes its head
// lazily, and a producer that found the ring full while the receiver
// sleeps would wait for a wakeup that no message brings.
func TestHeadBeforeSleep(t *testing.T) {
	i, ep := openLoopback(t)
	i.SetAMHandler(3, func(any, []byte, uint32) ucs.Status { return ucs.OK }, nil, uct.CBFlagSync)
	for k := range 3 {
		if s := ep.AMShort(3, uint64(k), nil); s != ucs.OK {
			t.Fatalf("AMShort %d = %v", k, s)
		}
	}
	if n := i.Progress(); n != 3 {
		t.Fatalf("Progress = %d, want the 3 messages", n)
	}
	if s := i.EventArm(uct.EventRecv); s != ucs.OK {
		t.Fatalf("EventArm of an empty ring = %v", s)
	}
	e := ep.(*EP)
	if free := DefaultFIFOSize - int(atomic.LoadUint64(e.tx.tail)-atomic.LoadUint64(e.tx.head)); free != DefaultFIFOSize {
		t.Errorf("%d cells free to producers once the receiver armed, want %d", free, DefaultFIFOSize)
	}
}

// openLoopback opens a posix iface and an EP to it, both ended with the
// test.
func openLoopback(t *testing.T) (*Iface, uct.EP) {
	t.Helper()
	i := openTestIface(t)
	ep, err := loopbackEP(i)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ep.Destroy)
	return i, ep
}

// loopbackEP creates an EP from iface i to itself.
func loopbackEP(i *Iface) (uct.EP, error) {
	return i.EPCreate(&uct.EPParams{DeviceAddr: i.DeviceAddress(), IfaceAddr: i.Address()})
}

// TestMalformedCells: a cell whose header another process wrote wrong (an
// id of uct.AMMaxID or more, a length beyond the cell, padding that is not
// zero) is dropped, without a tracer too (Progress's own path for the
// usual message), and never reaches a handler, not even the handler of
// its id modulo uct.AMMaxID; the message after it is delivered, and the
// drop is logged.
func TestMalformedCells(t *testing.T) {
	i := openTestIface(t)
	var log bytes.Buffer
	i.log = ucs.NewLogger(&log, "", ucs.LogWarn)
	ep, err := loopbackEP(i)
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Destroy()
	var got [][]byte
	i.SetAMHandler(1, func(_ any, data []byte, _ uint32) ucs.Status {
		got = append(got, bytes.Clone(data))
		return ucs.OK
	}, nil, uct.CBFlagSync)
	word := func(id uint8, n uint32, pad [3]byte) (h [cellHeaderSize - 8]byte) {
		binary.LittleEndian.PutUint32(h[:], n)
		h[4] = id
		copy(h[5:], pad[:])
		return h
	}
	for _, tc := range []struct {
		name string
		hdr  [cellHeaderSize - 8]byte
	}{
		{"id AMMaxID+1", word(uct.AMMaxID+1, 8, [3]byte{})},
		{"id 255 with data", word(voidID, 8, [3]byte{})},
		{"length beyond the cell", word(1, uint32(i.rx.payload)+1, [3]byte{})},
		{"length 2^32-1", word(1, ^uint32(0), [3]byte{})},
		{"padding", word(1, 8, [3]byte{1, 0, 0})},
		{"last padding byte", word(1, 8, [3]byte{0, 0, 0x80})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got = nil
			log.Reset()
			c, lap := i.rx.claim()
			if c == nil {
				t.Fatal("no free cell")
			}
			*header(c) = tc.hdr
			atomic.StoreUint64((*uint64)(c), lap+1)
			if s := ep.AMShort(1, 7, nil); s != ucs.OK {
				t.Fatalf("AMShort: %v", s)
			}
			if n := i.Progress(); n != 2 || len(got) != 1 || binary.LittleEndian.Uint64(got[0]) != 7 {
				t.Errorf("Progress = %d, handler got %x; want 2, the message after the cell only", n, got)
			}
			if !strings.Contains(log.String(), "dropped a malformed message") {
				t.Errorf("log %q says nothing of the dropped cell", log.String())
			}
		})
	}
}

func TestIfaceAddrDecode(t *testing.T) {
	i := openTestIface(t)
	good := i.Address()
	if _, err := decodeIfaceAddr(good); err != nil {
		t.Fatal(err)
	}
	mod := func(off int, v uint32) []byte {
		b := append([]byte(nil), good...)
		binary.LittleEndian.PutUint32(b[off:], v)
		return b
	}
	tests := []struct {
		name string
		addr []byte
	}{
		{"empty", nil},
		{"short", good[:IfaceAddrLen-1]},
		{"magic", mod(0, 1)},
		{"zero pid", mod(4, 0)},
		{"negative fd", mod(8, 0xffffffff)},
		{"cells not a power of two", mod(12, 3)},
		{"one cell", mod(12, 1)},
		{"zero id", append(append(append([]byte(nil), good[:16]...), make([]byte, 8)...), good[24:]...)},
		{"unaligned stride", mod(24, 8200)},
		{"huge stride", mod(24, 1<<30)},
		{"reserved", mod(28, 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := decodeIfaceAddr(tt.addr); !errors.Is(err, ucs.ErrInvalidAddr) {
				t.Errorf("decode err = %v, want ErrInvalidAddr", err)
			}
			if i.IsReachable(i.DeviceAddress(), tt.addr) {
				t.Error("IsReachable = true")
			}
			if _, err := i.EPCreate(&uct.EPParams{DeviceAddr: i.DeviceAddress(), IfaceAddr: tt.addr}); !errors.Is(err, ucs.ErrInvalidAddr) {
				t.Errorf("EPCreate err = %v, want ErrInvalidAddr", err)
			}
		})
	}
	otherDev := i.DeviceAddress()
	otherDev[0] ^= 1
	if i.IsReachable(otherDev, good) {
		t.Error("IsReachable(other domain) = true")
	}
	if _, err := i.EPCreate(&uct.EPParams{DeviceAddr: otherDev, IfaceAddr: good}); !errors.Is(err, ucs.ErrUnreachable) {
		t.Errorf("EPCreate(other domain) err = %v, want ErrUnreachable", err)
	}
	if _, err := i.EPCreate(&uct.EPParams{DeviceAddr: otherDev[:4], IfaceAddr: good}); !errors.Is(err, ucs.ErrInvalidAddr) {
		t.Errorf("EPCreate(short device address) err = %v, want ErrInvalidAddr", err)
	}
}

// TestTwoProcessRMA puts into and gets from a peer process's segment with
// every flavour, checking through the peer itself that data landed.
func TestTwoProcessRMA(t *testing.T) { testTwoProcessRMA(t, startPeer(t)) }

// testTwoProcessRMA is TestTwoProcessRMA with the peer p, of any MD.
func testTwoProcessRMA(t *testing.T, p *peer) {
	ia, _ := p.iface.Query()
	model := make([]byte, childSegSize)
	tests := []struct {
		name string
		off  int
		n    int
	}{
		{"empty", 0, 0},
		{"one byte", 1, 1},
		{"unaligned", 3, 13},
		{"across a page", 4093, 4099},
		{"max short", 5, ia.Put.MaxShort},
		{"max bcopy", 12345, ia.Put.MaxBcopy},
		{"large", 7, 100003},
	}
	for k, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raddr := p.base + uint64(tt.off)
			check := func(how string) {
				t.Helper()
				if got := p.read(uint64(tt.off), tt.n); !bytes.Equal(got, model[tt.off:tt.off+tt.n]) {
					t.Fatalf("%s: peer memory differs", how)
				}
				if tt.off > 0 { // the byte before is untouched
					if got := p.read(uint64(tt.off-1), 1); got[0] != model[tt.off-1] {
						t.Fatalf("%s: wrote before the range", how)
					}
				}
			}
			small := tt.n <= ia.Put.MaxShort
			if small {
				data := pattern(tt.n, 3*k)
				copy(model[tt.off:], data)
				if s := p.ep.PutShort(data, raddr, p.rkey.Rkey); s != ucs.OK {
					t.Fatalf("PutShort = %v", s)
				}
				check("PutShort")
				data = pattern(tt.n, 3*k+1)
				copy(model[tt.off:], data)
				n, s := p.ep.PutBcopy(func(dst []byte) int { return copy(dst, data) }, raddr, p.rkey.Rkey)
				if s != ucs.OK || n != tt.n {
					t.Fatalf("PutBcopy = %d, %v", n, s)
				}
				check("PutBcopy")
			} else if s := p.ep.PutShort(make([]byte, tt.n), raddr, p.rkey.Rkey); s != ucs.ErrInvalidParam {
				t.Errorf("PutShort beyond MaxShort = %v", s)
			}
			data := pattern(tt.n, 3*k+2)
			copy(model[tt.off:], data)
			h := tt.n / 3
			if s := p.ep.PutZcopy([]uct.IOV{{Buffer: data[:h]}, {Buffer: nil}, {Buffer: data[h:]}}, raddr, p.rkey.Rkey, nil); s != ucs.OK {
				t.Fatalf("PutZcopy = %v", s)
			}
			check("PutZcopy")

			want := model[tt.off : tt.off+tt.n]
			if small {
				var got []byte
				s := p.ep.GetBcopy(func(src []byte) { got = append([]byte{}, src...) }, tt.n, raddr, p.rkey.Rkey, nil)
				if s != ucs.OK || !bytes.Equal(got, want) {
					t.Errorf("GetBcopy = %v, equal %v", s, bytes.Equal(got, want))
				}
			}
			got := make([]byte, tt.n)
			if s := p.ep.GetZcopy([]uct.IOV{{Buffer: got[:h]}, {Buffer: got[h:]}}, raddr, p.rkey.Rkey, nil); s != ucs.OK || !bytes.Equal(got, want) {
				t.Errorf("GetZcopy = %v, equal %v", s, bytes.Equal(got, want))
			}
			// RkeyPtr gives the same bytes.
			if tt.n > 0 {
				ptr, err := p.md.comp.RkeyPtr(p.rkey, raddr)
				if err != nil || !bytes.Equal(unsafe.Slice((*byte)(ptr), tt.n), want) {
					t.Errorf("RkeyPtr = %v, %v", ptr, err)
				}
			}
		})
	}
}

func modelOp(op uct.AtomicOp, old, v, cmp uint64) uint64 {
	switch op {
	case uct.AtomicOpAdd:
		return old + v
	case uct.AtomicOpAnd:
		return old & v
	case uct.AtomicOpOr:
		return old | v
	case uct.AtomicOpXor:
		return old ^ v
	case uct.AtomicOpSwap:
		return v
	case uct.AtomicOpCSwap:
		if old == cmp {
			return v
		}
	}
	return old
}

// TestTwoProcessAtomics applies every atomic to a peer's memory, checks
// old and new values against a model, and checks that the peer's own
// atomics and ours on one word are coherent.
func TestTwoProcessAtomics(t *testing.T) { testTwoProcessAtomics(t, startPeer(t)) }

// testTwoProcessAtomics is TestTwoProcessAtomics with the peer p, of any MD.
func testTwoProcessAtomics(t *testing.T, p *peer) {
	const off = 4096
	const init64 = 0x8000_0000_ffff_0001
	const init32 = 0xffff_0001
	tests := []struct {
		op       uct.AtomicOp
		v, cmp   uint64
		fetching bool
	}{
		{uct.AtomicOpAdd, 0xffff, 0, false}, {uct.AtomicOpAdd, ^uint64(0), 0, true},
		{uct.AtomicOpAnd, 0xf0f0_f0f0_f0f0_f0f0, 0, false}, {uct.AtomicOpAnd, 0xff, 0, true},
		{uct.AtomicOpOr, 0x0101_0101_0101_0101, 0, false}, {uct.AtomicOpOr, 0x10, 0, true},
		{uct.AtomicOpXor, ^uint64(0), 0, false}, {uct.AtomicOpXor, 0x3, 0, true},
		{uct.AtomicOpSwap, 0x1234_5678_9abc_def0, 0, true},
		{uct.AtomicOpCSwap, 77, init64, true}, {uct.AtomicOpCSwap, 77, 5, true}, {uct.AtomicOpCSwap, 77, init32, true},
	}
	for _, tt := range tests {
		name := tt.op.String()
		if tt.fetching && tt.op < uct.AtomicOpSwap {
			name = "fetch-" + name
		}
		t.Run(name, func(t *testing.T) {
			var b [8]byte
			raddr := p.base + off
			// 64 bits.
			binary.LittleEndian.PutUint64(b[:], init64)
			p.ep.PutShort(b[:], raddr, p.rkey.Rkey)
			var old uint64 = init64
			var s ucs.Status
			switch {
			case tt.op == uct.AtomicOpCSwap:
				s = p.ep.AtomicCSwap64(tt.cmp, tt.v, raddr, p.rkey.Rkey, &old, nil)
			case tt.fetching:
				s = p.ep.AtomicFetch64(tt.op, tt.v, raddr, p.rkey.Rkey, &old, nil)
			default:
				s = p.ep.AtomicPost64(tt.op, tt.v, raddr, p.rkey.Rkey)
			}
			got := binary.LittleEndian.Uint64(p.read(off, 8))
			if want := modelOp(tt.op, init64, tt.v, tt.cmp); s != ucs.OK || old != init64 || got != want {
				t.Errorf("64: %v, old %#x, new %#x; want old %#x, new %#x", s, old, got, uint64(init64), want)
			}
			// 32 bits, on the second half of a word, the first half untouched.
			binary.LittleEndian.PutUint32(b[:], 0xaaaa_aaaa)
			binary.LittleEndian.PutUint32(b[4:], init32)
			p.ep.PutShort(b[:], raddr, p.rkey.Rkey)
			var old32 uint32 = init32
			switch {
			case tt.op == uct.AtomicOpCSwap:
				s = p.ep.AtomicCSwap32(uint32(tt.cmp), uint32(tt.v), raddr+4, p.rkey.Rkey, &old32, nil)
			case tt.fetching:
				s = p.ep.AtomicFetch32(tt.op, uint32(tt.v), raddr+4, p.rkey.Rkey, &old32, nil)
			default:
				s = p.ep.AtomicPost32(tt.op, uint32(tt.v), raddr+4, p.rkey.Rkey)
			}
			mem := p.read(off, 8)
			want := uint32(modelOp(tt.op, init32, uint64(uint32(tt.v)), uint64(uint32(tt.cmp))))
			if got := binary.LittleEndian.Uint32(mem[4:]); s != ucs.OK || old32 != init32 || got != want {
				t.Errorf("32: %v, old %#x, new %#x; want old %#x, new %#x", s, old32, got, uint32(init32), want)
			}
			if lo := binary.LittleEndian.Uint32(mem); lo != 0xaaaa_aaaa {
				t.Errorf("32-bit op changed the neighbour word to %#x", lo)
			}
		})
	}
	t.Run("misaligned", func(t *testing.T) {
		var r64 uint64
		var r32 uint32
		if s := p.ep.AtomicFetch64(uct.AtomicOpAdd, 1, p.base+off+4, p.rkey.Rkey, &r64, nil); s != ucs.ErrInvalidParam {
			t.Errorf("misaligned 64 = %v", s)
		}
		if s := p.ep.AtomicPost32(uct.AtomicOpAdd, 1, p.base+off+2, p.rkey.Rkey); s != ucs.ErrInvalidParam {
			t.Errorf("misaligned 32 = %v", s)
		}
		if s := p.ep.AtomicFetch32(uct.AtomicOpAdd, 1, p.base+off+1, p.rkey.Rkey, &r32, nil); s != ucs.ErrInvalidParam {
			t.Errorf("misaligned 32 = %v", s)
		}
	})
	t.Run("coherent with the peer", func(t *testing.T) {
		const count = 100000
		raddr := p.base + off
		p.ep.PutShort(make([]byte, 8), raddr, p.rkey.Rkey)
		var pl [8]byte
		binary.LittleEndian.PutUint64(pl[:], count)
		p.send(func() ucs.Status { return p.ep.AMShort(amAdd, off, pl[:]) })
		for range count {
			p.ep.AtomicPost64(uct.AtomicOpAdd, 1, raddr, p.rkey.Rkey)
		}
		if r := p.wait(); r.id != amDone {
			t.Fatalf("reply %d", r.id)
		}
		var v uint64
		p.ep.AtomicFetch64(uct.AtomicOpAdd, 0, raddr, p.rkey.Rkey, &v, nil)
		if v != 2*count {
			t.Errorf("after %d adds by each process the word is %d", count, v)
		}
	})
}

// TestTwoProcessAM sends active messages of every kind and size to the peer,
// which echoes them back.
func TestTwoProcessAM(t *testing.T) {
	p := startPeer(t)
	max := p.ep.maxAM
	tests := []struct {
		name string
		send func(data []byte) ucs.Status
		size int
	}{
		{"short empty", func(d []byte) ucs.Status { return p.ep.AMShort(amEcho, binary.LittleEndian.Uint64(d), d[8:]) }, 8},
		{"short", func(d []byte) ucs.Status { return p.ep.AMShort(amEcho, binary.LittleEndian.Uint64(d), d[8:]) }, 8 + 61},
		{"short max", func(d []byte) ucs.Status { return p.ep.AMShort(amEcho, binary.LittleEndian.Uint64(d), d[8:]) }, max},
		{"bcopy empty", func(d []byte) ucs.Status {
			_, s := p.ep.AMBcopy(amEcho, func(dst []byte) int { return copy(dst, d) }, 0)
			return s
		}, 0},
		{"bcopy max", func(d []byte) ucs.Status {
			_, s := p.ep.AMBcopy(amEcho, func(dst []byte) int { return copy(dst, d) }, 0)
			return s
		}, max},
		{"zcopy", func(d []byte) ucs.Status {
			return p.ep.AMZcopy(amZEcho, d[:5], []uct.IOV{{Buffer: d[5:100]}, {Buffer: d[100:]}}, 0, nil)
		}, 1001},
		{"zcopy max", func(d []byte) ucs.Status {
			return p.ep.AMZcopy(amZEcho, d[:5], []uct.IOV{{Buffer: d[5:]}}, 0, nil)
		}, max},
	}
	for k, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := pattern(tt.size, k)
			// A burst larger than the FIFO exercises ErrNoResource too.
			const burst = DefaultFIFOSize + 10
			for range burst {
				p.send(func() ucs.Status { return tt.send(data) })
			}
			for range burst {
				r := p.wait()
				if r.id != amEchoReply || !bytes.Equal(r.data, data) {
					t.Fatalf("echo: id %d, %d bytes, equal %v", r.id, len(r.data), bytes.Equal(r.data, data))
				}
			}
		})
	}
	if s := p.ep.AMShort(amEcho, 0, make([]byte, max-7)); s != ucs.ErrInvalidParam {
		t.Errorf("AMShort beyond max = %v", s)
	}
	if s := p.ep.AMZcopy(amEcho, nil, []uct.IOV{{Buffer: make([]byte, max+1)}}, 0, nil); s != ucs.ErrInvalidParam {
		t.Errorf("AMZcopy beyond max = %v", s)
	}
}

// TestForgedKeys unpacks keys and connects to addresses that name the
// peer's memory wrongly, and the peer's after it died.
func TestForgedKeys(t *testing.T) {
	p := startPeer(t)
	c := &PosixComponent{}
	// Drop the mappings startPeer made, so that each forged key is checked
	// against the peer's descriptors rather than found in the cache.
	c.RkeyRelease(p.rkey)
	p.rkey = uct.RkeyBundle{}
	p.ep.Destroy()
	p.ep = nil
	k, _ := decodeMkey(p.key)
	a, _ := decodeIfaceAddr(p.addr)
	forge := func(f func(k *mkey)) []byte {
		k2 := k
		f(&k2)
		return k2.encode()
	}
	tests := []struct {
		name string
		key  []byte
		want error
	}{
		{"other descriptor", forge(func(k *mkey) { k.fd = 0 }), ucs.ErrUnreachable},
		{"fifo descriptor", forge(func(k *mkey) { k.fd = a.fd }), ucs.ErrUnreachable},
		{"closed descriptor", forge(func(k *mkey) { k.fd = 1000 }), ucs.ErrUnreachable},
		{"other segment id", forge(func(k *mkey) { k.id++ }), ucs.ErrUnreachable},
		{"no such pid", forge(func(k *mkey) { k.pid = maxPid - 1 }), ucs.ErrUnreachable},
		{"this pid", forge(func(k *mkey) { k.pid = pid }), ucs.ErrUnreachable},
		{"too long", forge(func(k *mkey) { k.length = 2 * childSegSize }), ucs.ErrInvalidParam},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if rk, err := c.RkeyUnpack(tt.key); !errors.Is(err, tt.want) {
				t.Errorf("RkeyUnpack err = %v, want %v", err, tt.want)
				if err == nil {
					c.RkeyRelease(rk)
				}
			}
		})
	}
	forgeAddr := func(f func(a *ifaceAddr)) []byte {
		a2 := a
		f(&a2)
		return a2.encode()
	}
	for name, addr := range map[string][]byte{
		"segment descriptor": forgeAddr(func(a *ifaceAddr) { a.fd = k.fd }),
		"other id":           forgeAddr(func(a *ifaceAddr) { a.id ^= 1 }),
	} {
		if ep, err := p.iface.EPCreate(&uct.EPParams{DeviceAddr: p.dev, IfaceAddr: addr}); !errors.Is(err, ucs.ErrUnreachable) {
			t.Errorf("EPCreate(%s) err = %v, want ErrUnreachable", name, err)
			if err == nil {
				ep.Destroy()
			}
		}
	}
	// The same key unpacked again shares the cached mapping.
	rk1, err := c.RkeyUnpack(p.key)
	if err != nil {
		t.Fatal(err)
	}
	rk2, err := c.RkeyUnpack(p.key)
	segments.Lock()
	refs := segments.m[segKey{k.pid, k.id}].refs
	segments.Unlock()
	if err != nil || rk2.Rkey != rk1.Rkey || refs != 2 {
		t.Errorf("second RkeyUnpack = %#x, %v, %d references; want %#x, 2 references", rk2.Rkey, err, refs, rk1.Rkey)
	}
	c.RkeyRelease(rk1)
	c.RkeyRelease(rk2)
	// Once the peer is gone, its key is unreachable.
	p.stop()
	if rk, err := c.RkeyUnpack(p.key); !errors.Is(err, ucs.ErrUnreachable) {
		t.Errorf("RkeyUnpack after the peer exited err = %v, want ErrUnreachable", err)
		if err == nil {
			c.RkeyRelease(rk)
		}
	}
	if _, err := p.iface.EPCreate(&uct.EPParams{DeviceAddr: p.dev, IfaceAddr: p.addr}); !errors.Is(err, ucs.ErrUnreachable) {
		t.Errorf("EPCreate after the peer exited err = %v, want ErrUnreachable", err)
	}
}

func TestAllocs(t *testing.T) {
	i := openTestIface(t)
	md, _ := (&PosixComponent{}).OpenMD(PosixMDName, nil)
	a, _ := md.MemAlloc(4096, 0, "")
	defer md.MemFree(a.Memh)
	ep, _ := i.EPCreate(&uct.EPParams{DeviceAddr: i.DeviceAddress(), IfaceAddr: i.Address()})
	defer ep.Destroy()
	i.SetAMHandler(1, func(any, []byte, uint32) ucs.Status { return ucs.OK }, nil, uct.CBFlagSync)
	buf := make([]byte, 8)
	raddr := uint64(uintptr(a.Address))
	res := new(uint64)
	iov := []uct.IOV{{Buffer: buf}}
	for name, f := range map[string]func(){
		"PutShort":      func() { ep.PutShort(buf, raddr, 0) },
		"GetZcopy":      func() { ep.GetZcopy(iov, raddr, 0, nil) },
		"AtomicFetch64": func() { ep.AtomicFetch64(uct.AtomicOpAdd, 1, raddr, 0, res, nil) },
		"AtomicPost64":  func() { ep.AtomicPost64(uct.AtomicOpXor, 1, raddr, 0) },
		"AMShort":       func() { ep.AMShort(1, 1, buf); i.Progress() },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocations", name, n)
		}
	}
}
