package self

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"testing"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// setup opens the self MD, an iface and an EP to it, and registers mem.
func setup(t testing.TB, mem []byte) (*Iface, uct.EP, uct.RkeyBundle) {
	t.Helper()
	c, err := uct.LookupComponent(ComponentName)
	if err != nil {
		t.Fatal(err)
	}
	md, err := c.OpenMD(MDName, nil)
	if err != nil {
		t.Fatal(err)
	}
	iface, err := md.IfaceOpen(uct.NewWorker(ucs.ThreadModeSingle), &uct.IfaceParams{TLName: TLName, DevName: DevName}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(iface.Close)
	ep, err := iface.EPCreate(&uct.EPParams{DeviceAddr: iface.DeviceAddress(), IfaceAddr: iface.Address()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ep.Destroy)
	memh, err := md.MemReg(unsafe.Pointer(unsafe.SliceData(mem)), len(mem), uct.MemAccessDefault)
	if err != nil {
		t.Fatal(err)
	}
	packed, err := md.MkeyPack(nil, memh)
	if err != nil {
		t.Fatal(err)
	}
	rkey, err := c.RkeyUnpack(packed)
	if err != nil {
		t.Fatal(err)
	}
	return iface.(*Iface), ep, rkey
}

func addr(b []byte, off int) uint64 {
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) + uint64(off)
}

func TestResources(t *testing.T) {
	c, err := uct.LookupComponent("self")
	if err != nil {
		t.Fatal(err)
	}
	mds, err := c.MDResources()
	if err != nil || len(mds) != 1 || mds[0].Name != "self" {
		t.Fatalf("MDResources = %v, %v", mds, err)
	}
	md, err := c.OpenMD("self", nil)
	if err != nil {
		t.Fatal(err)
	}
	tls, err := md.TLResources()
	want := uct.TLResource{TLName: "self", DevName: "memory0", DevType: uct.DeviceTypeSelf, Bandwidth: 6911e6}
	if err != nil || len(tls) != 1 || tls[0] != want {
		t.Fatalf("TLResources = %v, %v; want [%v]", tls, err, want)
	}
	attr, _ := md.Query()
	if attr.Flags != uct.MDFlagReg|uct.MDFlagRkeyPtr || attr.RkeyPackedSize != MkeyPackedSize {
		t.Errorf("MD attr = %+v", attr)
	}
	if _, err := md.MemAlloc(4096, 0, "x"); !errors.Is(err, ucs.ErrUnsupported) {
		t.Errorf("MemAlloc err = %v, want ErrUnsupported", err)
	}
	if _, err := c.OpenMD("other", nil); !errors.Is(err, ucs.ErrNoDevice) {
		t.Errorf("OpenMD(other) err = %v, want ErrNoDevice", err)
	}
}

func TestMkey(t *testing.T) {
	c := &Component{}
	good := encodeMkey()
	if rk, err := c.RkeyUnpack(good); err != nil || rk.Rkey != 0 {
		t.Fatalf("RkeyUnpack(own key) = %v, %v", rk, err)
	}
	mod := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	tests := []struct {
		name string
		key  []byte
		want error
	}{
		{"empty", nil, ucs.ErrInvalidParam},
		{"short", good[:15], ucs.ErrInvalidParam},
		{"long", append(append([]byte(nil), good...), 0), ucs.ErrInvalidParam},
		{"magic", mod(func(b []byte) []byte { b[0] ^= 1; return b }), ucs.ErrInvalidParam},
		{"zero pid", mod(func(b []byte) []byte { clear(b[4:8]); return b }), ucs.ErrInvalidParam},
		{"zero id", mod(func(b []byte) []byte { clear(b[8:]); return b }), ucs.ErrInvalidParam},
		{"other pid", mod(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[4:], uint32(os.Getpid())+1); return b }), ucs.ErrUnreachable},
		{"other process id", mod(func(b []byte) []byte { b[9] ^= 0x40; return b }), ucs.ErrUnreachable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := c.RkeyUnpack(tt.key); !errors.Is(err, tt.want) {
				t.Errorf("RkeyUnpack err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestRkeyPtr(t *testing.T) {
	mem := make([]byte, 64)
	c := &Component{}
	p, err := c.RkeyPtr(uct.RkeyBundle{}, addr(mem, 5))
	if err != nil || p != unsafe.Pointer(&mem[5]) {
		t.Fatalf("RkeyPtr = %p, %v; want %p", p, err, &mem[5])
	}
}

func TestEPCreate(t *testing.T) {
	iface, _, _ := setup(t, make([]byte, 8))
	bad := append(iface.Address(), 0)
	other := iface.Address()
	other[5] ^= 1
	tests := []struct {
		name      string
		dev, addr []byte
		want      error
	}{
		{"long address", nil, bad, ucs.ErrInvalidAddr},
		{"empty address", nil, nil, ucs.ErrInvalidAddr},
		{"device address", []byte{1}, iface.Address(), ucs.ErrInvalidAddr},
		{"other iface", nil, other, ucs.ErrUnreachable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if iface.IsReachable(tt.dev, tt.addr) {
				t.Errorf("IsReachable = true")
			}
			if _, err := iface.EPCreate(&uct.EPParams{DeviceAddr: tt.dev, IfaceAddr: tt.addr}); !errors.Is(err, tt.want) {
				t.Errorf("EPCreate err = %v, want %v", err, tt.want)
			}
		})
	}
	if !iface.IsReachable(nil, iface.Address()) {
		t.Error("IsReachable(own address) = false")
	}
}

func TestRMA(t *testing.T) {
	const size = 20000
	target := make([]byte, size)
	_, ep, rkey := setup(t, target)
	model := make([]byte, size)
	pattern := func(n, seed int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*7 + seed)
		}
		return b
	}
	type op struct {
		name string
		off  int
		n    int
	}
	tests := []op{{"empty", 0, 0}, {"one", 1, 1}, {"unaligned", 3, 13}, {"page", 4093, 4099}, {"max bcopy", 17, DefaultSegSize}, {"large", 7, 19000}}
	for k, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := pattern(tt.n, k)
			check := func(how string) {
				t.Helper()
				if !bytes.Equal(target, model) {
					t.Fatalf("%s: target differs from model", how)
				}
			}
			// PutShort
			copy(model[tt.off:], data)
			if s := ep.PutShort(data, addr(target, tt.off), rkey.Rkey); s != ucs.OK {
				t.Fatalf("PutShort = %v", s)
			}
			check("PutShort")
			// PutBcopy
			data = pattern(tt.n, k+1)
			copy(model[tt.off:], data)
			if tt.n <= DefaultSegSize {
				n, s := ep.PutBcopy(func(dst []byte) int { return copy(dst, data) }, addr(target, tt.off), rkey.Rkey)
				if s != ucs.OK || n != tt.n {
					t.Fatalf("PutBcopy = %d, %v", n, s)
				}
			} else {
				ep.PutShort(data, addr(target, tt.off), rkey.Rkey)
			}
			check("PutBcopy")
			// PutZcopy in two pieces
			data = pattern(tt.n, k+2)
			copy(model[tt.off:], data)
			h := tt.n / 3
			iov := []uct.IOV{{Buffer: data[:h]}, {Buffer: data[h:]}}
			if s := ep.PutZcopy(iov, addr(target, tt.off), rkey.Rkey, nil); s != ucs.OK {
				t.Fatalf("PutZcopy = %v", s)
			}
			check("PutZcopy")
			// GetBcopy
			var got []byte
			if s := ep.GetBcopy(func(src []byte) { got = append([]byte(nil), src...) }, tt.n, addr(target, tt.off), rkey.Rkey, nil); s != ucs.OK || !bytes.Equal(got, model[tt.off:tt.off+tt.n]) {
				t.Fatalf("GetBcopy = %v, data equal %v", s, bytes.Equal(got, model[tt.off:tt.off+tt.n]))
			}
			// GetZcopy in two pieces
			got = make([]byte, tt.n)
			iov = []uct.IOV{{Buffer: got[:h]}, {Buffer: got[h:]}}
			if s := ep.GetZcopy(iov, addr(target, tt.off), rkey.Rkey, nil); s != ucs.OK || !bytes.Equal(got, model[tt.off:tt.off+tt.n]) {
				t.Fatalf("GetZcopy = %v, data equal %v", s, bytes.Equal(got, model[tt.off:tt.off+tt.n]))
			}
		})
	}
}

// modelOp is what op does to old, for the atomic model.
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
		return old
	}
	panic("bad op")
}

func TestAtomics(t *testing.T) {
	words := make([]uint64, 4)
	mem := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), 32)
	_, ep, rkey := setup(t, mem)
	const init64 = 0xf0f0_1234_5678_9abc
	tests := []struct {
		op       uct.AtomicOp
		v, cmp   uint64
		fetching bool
	}{
		{uct.AtomicOpAdd, 5, 0, false}, {uct.AtomicOpAdd, ^uint64(0), 0, true},
		{uct.AtomicOpAnd, 0xff00ff00ff00ff00, 0, false}, {uct.AtomicOpAnd, 0x0f0f, 0, true},
		{uct.AtomicOpOr, 0x1000_0000_0000_0001, 0, false}, {uct.AtomicOpOr, 3, 0, true},
		{uct.AtomicOpXor, 0xffff_ffff_ffff_ffff, 0, false}, {uct.AtomicOpXor, 0x5555, 0, true},
		{uct.AtomicOpSwap, 42, 0, true},
		{uct.AtomicOpCSwap, 7, init64, true}, {uct.AtomicOpCSwap, 7, 1, true},
		{uct.AtomicOpCSwap, 7, init64 & 0xffff_ffff, true}, // the 32-bit run matches
	}
	for _, tt := range tests {
		t.Run(tt.op.String(), func(t *testing.T) {
			// 64-bit on words[1].
			a := addr(mem, 8)
			words[1] = init64
			var res uint64
			var s ucs.Status
			switch {
			case tt.op == uct.AtomicOpCSwap:
				s = ep.AtomicCSwap64(tt.cmp, tt.v, a, rkey.Rkey, &res, nil)
			case tt.fetching:
				s = ep.AtomicFetch64(tt.op, tt.v, a, rkey.Rkey, &res, nil)
			default:
				s = ep.AtomicPost64(tt.op, tt.v, a, rkey.Rkey)
				res = init64
			}
			if s != ucs.OK || res != init64 || words[1] != modelOp(tt.op, init64, tt.v, tt.cmp) {
				t.Errorf("64: status %v old %#x new %#x; want old %#x new %#x", s, res, words[1], uint64(init64), modelOp(tt.op, init64, tt.v, tt.cmp))
			}
			// 32-bit on the upper half of words[2].
			const init32 = uint32(init64 & 0xffff_ffff)
			a = addr(mem, 20)
			words[2] = 0x1111_1111_2222_2222
			*(*uint32)(unsafe.Pointer(&mem[20])) = init32
			var res32 uint32
			switch {
			case tt.op == uct.AtomicOpCSwap:
				s = ep.AtomicCSwap32(uint32(tt.cmp), uint32(tt.v), a, rkey.Rkey, &res32, nil)
			case tt.fetching:
				s = ep.AtomicFetch32(tt.op, uint32(tt.v), a, rkey.Rkey, &res32, nil)
			default:
				s = ep.AtomicPost32(tt.op, uint32(tt.v), a, rkey.Rkey)
				res32 = init32
			}
			want := uint32(modelOp(tt.op, uint64(init32), uint64(uint32(tt.v)), uint64(uint32(tt.cmp))))
			if got := *(*uint32)(unsafe.Pointer(&mem[20])); s != ucs.OK || res32 != init32 || got != want {
				t.Errorf("32: status %v old %#x new %#x; want old %#x new %#x", s, res32, got, init32, want)
			}
			if lo := uint32(words[2]); lo != 0x2222_2222 {
				t.Errorf("32-bit op touched the neighbouring word: %#x", lo)
			}
		})
	}
	var res uint64
	if s := ep.AtomicFetch64(uct.AtomicOpAdd, 1, addr(mem, 4), rkey.Rkey, &res, nil); s != ucs.ErrInvalidParam {
		t.Errorf("misaligned 64-bit atomic = %v, want ErrInvalidParam", s)
	}
}

type amRecord struct {
	id   uint8
	data []byte
}

func TestAM(t *testing.T) {
	iface, ep, _ := setup(t, make([]byte, 8))
	var got []amRecord
	handler := func(id uint8) uct.AMCallback {
		return func(arg any, data []byte, flags uint32) ucs.Status {
			if arg != iface || flags != uct.CBParamFlagDesc {
				t.Errorf("handler arg %v flags %#x", arg, flags)
			}
			got = append(got, amRecord{id, append([]byte(nil), data...)})
			return ucs.OK
		}
	}
	for id := uint8(0); id < 3; id++ {
		if err := iface.SetAMHandler(id, handler(id), iface, uct.CBFlagSync); err != nil {
			t.Fatal(err)
		}
	}
	if err := iface.SetAMHandler(uct.AMMaxID, handler(0), nil, uct.CBFlagSync); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("SetAMHandler(AMMaxID) err = %v", err)
	}
	payload := bytes.Repeat([]byte("abc"), 100)
	var want []amRecord
	hdr := make([]byte, 8)
	binary.LittleEndian.PutUint64(hdr, 0x0102030405060708)
	if s := ep.AMShort(0, 0x0102030405060708, payload); s != ucs.OK {
		t.Fatal(s)
	}
	want = append(want, amRecord{0, append(append([]byte(nil), hdr...), payload...)})
	if s := ep.AMShort(0, 0x0102030405060708, nil); s != ucs.OK {
		t.Fatal(s)
	}
	want = append(want, amRecord{0, hdr})
	if n, s := ep.AMBcopy(1, func(dst []byte) int { return copy(dst, payload[:DefaultSegSize%len(payload)]) }, 0); s != ucs.OK || n != DefaultSegSize%len(payload) {
		t.Fatal(n, s)
	}
	want = append(want, amRecord{1, payload[:DefaultSegSize%len(payload)]})
	big := bytes.Repeat([]byte{9}, DefaultSegSize)
	if n, s := ep.AMBcopy(1, func(dst []byte) int { return copy(dst, big) }, 0); s != ucs.OK || n != DefaultSegSize {
		t.Fatal(n, s)
	}
	want = append(want, amRecord{1, big})
	if s := ep.AMZcopy(2, []byte("hd"), []uct.IOV{{Buffer: []byte("x")}, {Buffer: []byte("yz")}}, 0, nil); s != ucs.OK {
		t.Fatal(s)
	}
	want = append(want, amRecord{2, []byte("hdxyz")})
	if s := ep.AMShort(0, 0, make([]byte, DefaultSegSize-7)); s != ucs.ErrInvalidParam {
		t.Errorf("oversized AMShort = %v", s)
	}
	if len(got) != 0 {
		t.Fatal("handler called outside Progress")
	}
	if n := iface.Progress(); n != len(want) {
		t.Errorf("Progress = %d, want %d", n, len(want))
	}
	if len(got) != len(want) {
		t.Fatalf("got %d messages, want %d", len(got), len(want))
	}
	for k := range want {
		if got[k].id != want[k].id || !bytes.Equal(got[k].data, want[k].data) {
			t.Errorf("message %d: id %d len %d; want id %d len %d", k, got[k].id, len(got[k].data), want[k].id, len(want[k].data))
		}
	}
	// An id without handler is dropped.
	if s := ep.AMShort(5, 1, nil); s != ucs.OK {
		t.Fatal(s)
	}
	got = nil
	if iface.Progress(); len(got) != 0 {
		t.Errorf("unhandled message delivered: %v", got)
	}
}

func TestAMQueueFullAndPending(t *testing.T) {
	iface, ep, _ := setup(t, make([]byte, 8))
	var kept [][]byte
	iface.SetAMHandler(0, func(arg any, data []byte, flags uint32) ucs.Status {
		kept = append(kept, data)
		return ucs.InProgress
	}, nil, uct.CBFlagAsync)
	r := &uct.PendingReq{}
	if s := ep.PendingAdd(r, 0); s != ucs.ErrBusy {
		t.Fatalf("PendingAdd with room = %v, want ErrBusy", s)
	}
	for k := 0; k < DefaultAMQueueLen; k++ {
		if s := ep.AMShort(0, uint64(k), nil); s != ucs.OK {
			t.Fatalf("AMShort %d = %v", k, s)
		}
	}
	if s := ep.AMShort(0, 0, nil); s != ucs.ErrNoResource {
		t.Fatalf("AMShort on full queue = %v, want ErrNoResource", s)
	}
	var calls int
	r.Func = func(r *uct.PendingReq) ucs.Status {
		calls++
		return ep.AMShort(0, 999, nil)
	}
	if s := ep.PendingAdd(r, 0); s != ucs.OK {
		t.Fatalf("PendingAdd on full queue = %v", s)
	}
	ep2, err := iface.EPCreate(&uct.EPParams{IfaceAddr: iface.Address()})
	if err != nil {
		t.Fatal(err)
	}
	r2 := &uct.PendingReq{Func: func(*uct.PendingReq) ucs.Status { t.Error("purged request called"); return ucs.OK }}
	ep2.PendingAdd(r2, 0)
	var purged []*uct.PendingReq
	ep2.PendingPurge(func(r *uct.PendingReq) { purged = append(purged, r) })
	if len(purged) != 1 || purged[0] != r2 {
		t.Errorf("purged %v, want [r2]", purged)
	}
	iface.Progress()
	if calls != 1 || len(kept) != DefaultAMQueueLen {
		t.Fatalf("after Progress: pending calls %d, kept %d", calls, len(kept))
	}
	if iface.npending.Load() != 0 {
		t.Fatalf("pending left = %d, want 0", iface.npending.Load())
	}
	for _, d := range kept {
		iface.ReleaseDesc(d)
	}
	if len(iface.free) < DefaultAMQueueLen {
		t.Errorf("released descriptors not recycled: %d free", len(iface.free))
	}
	iface.Progress()
	if len(kept) != DefaultAMQueueLen+1 || binary.LittleEndian.Uint64(kept[DefaultAMQueueLen]) != 999 {
		t.Errorf("pending message not delivered")
	}
}

func TestAllocs(t *testing.T) {
	mem := make([]byte, 64)
	_, ep, rkey := setup(t, mem)
	buf := make([]byte, 8)
	var res uint64
	a := addr(mem, 8)
	n := testing.AllocsPerRun(100, func() {
		ep.PutShort(buf, a, rkey.Rkey)
		ep.AtomicFetch64(uct.AtomicOpAdd, 1, a, rkey.Rkey, &res, nil)
		ep.AtomicPost64(uct.AtomicOpXor, 1, a, rkey.Rkey)
	})
	if n != 0 {
		t.Errorf("allocations per put+atomics = %v", n)
	}
}
