package tcp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
	"github.com/goshmem/goshmem/uct/uctest"
)

func TestResources(t *testing.T) {
	c, err := uct.LookupComponent(ComponentName)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.OpenMD("other", nil); !errors.Is(err, ucs.ErrNoDevice) {
		t.Errorf("OpenMD(other) err = %v, want ErrNoDevice", err)
	}
	md, err := c.OpenMD(MDName, nil)
	if err != nil {
		t.Fatal(err)
	}
	attr, _ := md.Query()
	if attr.Flags != uct.MDFlagReg|uct.MDFlagNeedRkey || attr.RkeyPackedSize != MkeyPackedSize {
		t.Errorf("MD attr = %+v", attr)
	}
	if _, err := md.MemAlloc(4096, 0, ""); !errors.Is(err, ucs.ErrUnsupported) {
		t.Errorf("MemAlloc err = %v, want ErrUnsupported", err)
	}
	var x [8]byte
	for _, n := range []int{0, -1} {
		if _, err := md.MemReg(unsafe.Pointer(&x[0]), n, 0); !errors.Is(err, ucs.ErrInvalidParam) {
			t.Errorf("MemReg(%d bytes) err = %v, want ErrInvalidParam", n, err)
		}
	}
	if _, err := c.RkeyPtr(uct.RkeyBundle{}, 0); !errors.Is(err, ucs.ErrUnsupported) {
		t.Errorf("RkeyPtr err = %v, want ErrUnsupported", err)
	}
	tls, err := md.TLResources()
	if err != nil {
		t.Fatal(err)
	}
	dev := loopbackDev(t)
	found := false
	for _, r := range tls {
		if r.TLName != TLName || r.DevType != uct.DeviceTypeNet {
			t.Errorf("resource %+v", r)
		}
		found = found || r.DevName == dev
	}
	if !found {
		t.Errorf("TLResources = %v, without %s", tls, dev)
	}
	if _, err := md.IfaceOpen(nil, &uct.IfaceParams{TLName: TLName, DevName: "no-such-device0"}, nil); !errors.Is(err, ucs.ErrNoDevice) {
		t.Errorf("IfaceOpen on a missing device err = %v, want ErrNoDevice", err)
	}

	i := openIface(t, md.(*MD), nil)
	ia, _ := i.Query()
	if ia.IfaceAddrLen != len(i.Address()) || ia.DeviceAddrLen != len(i.DeviceAddress()) {
		t.Errorf("address lengths %d/%d, addresses %d/%d bytes", ia.IfaceAddrLen, ia.DeviceAddrLen, len(i.Address()), len(i.DeviceAddress()))
	}
	want := uct.IfaceFlagAMShort | uct.IfaceFlagAMBcopy | uct.IfaceFlagAMZcopy | uct.IfaceFlagPutShort |
		uct.IfaceFlagPutBcopy | uct.IfaceFlagPutZcopy | uct.IfaceFlagPending | uct.IfaceFlagConnectToIface |
		uct.IfaceFlagCBSync | uct.IfaceFlagCBAsync | uct.IfaceFlagGetBcopy | uct.IfaceFlagGetZcopy | uct.IfaceFlagAtomicCPU |
		uct.IfaceFlagErrhandleRemoteMem | uct.IfaceFlagErrhandlePeerDown | uct.IfaceFlagAMAsyncDelivery
	if ia.Flags&want != want {
		t.Errorf("iface flags %#x lack %#x", ia.Flags, want&^ia.Flags)
	}
	if bad := uct.IfaceFlagGetShort | uct.IfaceFlagAtomicDevice; ia.Flags&bad != 0 {
		t.Errorf("iface flags %#x claim get short or device atomics", ia.Flags)
	}
	ops := uct.AtomicCaps{OpFlags: 0xf, FopFlags: 0x3f} // add, and, or, xor; and swap, cswap fetching
	if ia.Atomic32 != ops || ia.Atomic64 != ops || ia.Get.MaxShort != 0 || ia.Get.MaxZcopy != maxPutLen {
		t.Errorf("iface atomics are not %+v, or it claims get short, or get limits are off: %+v", ops, ia)
	}
	if ia.AM.MaxBcopy != DefaultSegSize || ia.AM.MaxZcopy != DefaultRxSegSize || ia.Put.MaxZcopy != maxPutLen {
		t.Errorf("iface limits %+v", ia)
	}
	a, err := decodeIfaceAddr(i.Address())
	if err != nil {
		t.Fatal(err)
	}
	if !a.ip.IsLoopback() || i.ln.Addr().(*net.TCPAddr).IP.IsUnspecified() {
		t.Errorf("iface on %s listens on %v, address %v", dev, i.ln.Addr(), a.ip)
	}
	if _, err := i.WakeupFD(); !errors.Is(err, ucs.ErrUnsupported) {
		t.Errorf("WakeupFD err = %v", err)
	}
	ep := connect(t, i, i)
	var r uint64
	for name, st := range map[string]ucs.Status{
		"get no key":       ep.GetBcopy(func([]byte) {}, 8, 0, 0, nil),
		"get zcopy no key": ep.GetZcopy(nil, 0, 0, nil),
		"post64 no key":    ep.AtomicPost64(uct.AtomicOpAdd, 1, 0, 0),
		"post32 no key":    ep.AtomicPost32(uct.AtomicOpAdd, 1, 0, 0),
		"fetch64 no key":   ep.AtomicFetch64(uct.AtomicOpAdd, 1, 0, 0, &r, nil),
		"fetch32 no key":   ep.AtomicFetch32(uct.AtomicOpAdd, 1, 0, 0, nil, nil),
		"cswap64 no key":   ep.AtomicCSwap64(1, 2, 0, 0, &r, nil),
		"cswap32 no key":   ep.AtomicCSwap32(1, 2, 0, 0, nil, nil),
		"put no key":       ep.PutShort([]byte{1}, 8, 12345),
		"posted swap":      ep.AtomicPost64(uct.AtomicOpSwap, 1, 0, 0),
		"posted cswap":     ep.AtomicPost32(uct.AtomicOpCSwap, 1, 0, 0),
		"fetched cswap":    ep.AtomicFetch64(uct.AtomicOpCSwap, 1, 0, 0, &r, nil),
		"unknown op":       ep.AtomicFetch32(uct.AtomicOp(9), 1, 0, 0, nil, nil),
	} {
		want := ucs.ErrUnsupported
		if strings.HasSuffix(name, "no key") {
			want = ucs.ErrInvalidParam
		}
		if st != want {
			t.Errorf("%s = %v, want %v", name, st, want)
		}
	}
}

func TestConfig(t *testing.T) {
	md := testMD(t)
	dev := loopbackDev(t)
	for _, s := range []string{
		"KEY=not base64!", "KEY=c2hvcnQ=", "CONN_TIMEOUT=soon", "CONN_TIMEOUT=0",
		"SEG_SIZE=1", "SEG_SIZE=1m", "RX_SEG_SIZE=1g", "TX_QUEUE_LEN=0", "MAX_POLL=x",
		"HANDSHAKE_TIMEOUT=0", "HANDSHAKE_TIMEOUT=soon", "MAX_HANDSHAKES=0", "PEER_TIMEOUT=10ms",
		"MAX_HANDSHAKES_PER_SOURCE=0", "MAX_HANDSHAKES_PER_SOURCE=257", "MAX_HANDSHAKES_PER_SOURCE=x",
		"PEER_TIMEOUT=soon", "KEEPIDLE=10ms", "KEEPINTVL=x", "KEEPCNT=0", "KEEPCNT=200",
	} {
		_, err := md.IfaceOpen(nil, &uct.IfaceParams{DevName: dev}, testConfig(t, s))
		if !errors.Is(err, ucs.ErrInvalidParam) {
			t.Errorf("%s: IfaceOpen err = %v, want ErrInvalidParam", s, err)
		}
		if err != nil && strings.Contains(s, "KEY") && strings.Contains(err.Error(), strings.TrimPrefix(s, "KEY=")) {
			t.Errorf("%s: the error %q shows the key", s, err)
		}
	}
	i := openIface(t, md, nil, "SEG_SIZE=1k", "RX_SEG_SIZE=2k")
	if ia, _ := i.Query(); ia.AM.MaxBcopy != 1024 || ia.AM.MaxZcopy != 2048 || ia.Put.MaxBcopy != 1024 {
		t.Errorf("limits %+v after UCX_TCP_SEG_SIZE=1k UCX_TCP_RX_SEG_SIZE=2k", ia)
	}
}

// TestLivenessConfig checks where the peer timeout comes from
// (UCX_TCP_PEER_TIMEOUT, else GOSHMEM_FAILURE_TIMEOUT, else 10s) and what
// it sets: the heartbeat and check periods and the kernel's keepalive,
// which KEEPIDLE, KEEPINTVL and KEEPCNT override.
func TestLivenessConfig(t *testing.T) {
	tests := []struct {
		env      string // GOSHMEM_FAILURE_TIMEOUT
		settings []string
		peer     time.Duration
		idle     time.Duration
		intvl    time.Duration
		cnt      int
	}{
		{"", nil, DefaultPeerTimeout, 5 * time.Second, time.Second, 5},
		{"3s", nil, 3 * time.Second, 1500 * time.Millisecond, 300 * time.Millisecond, 5},
		{"3s", []string{"PEER_TIMEOUT=20s"}, 20 * time.Second, 10 * time.Second, 2 * time.Second, 5},
		{"", []string{"PEER_TIMEOUT=inf"}, 0, 0, 0, 0},
		{"", []string{"KEEPIDLE=7s", "KEEPINTVL=auto", "KEEPCNT=3"}, DefaultPeerTimeout, 7 * time.Second, time.Second, 3},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q %q", tt.env, tt.settings), func(t *testing.T) {
			t.Setenv(EnvFailureTimeout, tt.env)
			c, err := parseConfig(testConfig(t, tt.settings...))
			if err != nil {
				t.Fatal(err)
			}
			if c.peerTimeout != tt.peer || c.keepIdle != tt.idle || c.keepIntvl != tt.intvl || c.keepCnt != tt.cnt {
				t.Errorf("peer timeout %v, keepalive %v %v %d; want %v, %v %v %d",
					c.peerTimeout, c.keepIdle, c.keepIntvl, c.keepCnt, tt.peer, tt.idle, tt.intvl, tt.cnt)
			}
			if c.beatEvery() != tt.peer/5 || c.checkEvery() != tt.peer/10 {
				t.Errorf("beat every %v, check every %v", c.beatEvery(), c.checkEvery())
			}
		})
	}
	t.Setenv(EnvFailureTimeout, "soon")
	if _, err := parseConfig(testConfig(t)); !errors.Is(err, ucs.ErrInvalidParam) || !strings.Contains(err.Error(), EnvFailureTimeout) {
		t.Errorf("a bad %s: err = %v, want ErrInvalidParam naming it", EnvFailureTimeout, err)
	}
}

// TestKeySources checks where the job key comes from: UCX_TCP_KEY, else
// GOSHMEM_KEY, else a key of this process only.
func TestKeySources(t *testing.T) {
	md := testMD(t)
	dev := loopbackDev(t)
	withKey := openIface(t, md, nil)
	open := func(config *ucs.Config) *Iface {
		t.Helper()
		i, err := md.IfaceOpen(nil, &uct.IfaceParams{DevName: dev}, config)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(i.Close)
		return i.(*Iface)
	}
	try := func(a, b *Iface) error {
		ep, err := a.EPCreate(&uct.EPParams{DeviceAddr: b.DeviceAddress(), IfaceAddr: b.Address()})
		if err == nil {
			ep.Destroy()
		}
		return err
	}
	captureLog(t)

	t.Setenv(EnvKey, "")
	own1, own2 := open(nil), open(ucs.ReadConfig("UCX_TCP_", ifaceConfigTable))
	if err := try(own1, own2); err != nil {
		t.Errorf("two ifaces with this process's key: %v", err)
	}
	if err := try(own1, withKey); !errors.Is(err, ucs.ErrRejected) {
		t.Errorf("process key to the test key: err = %v, want ErrRejected", err)
	}

	t.Setenv(EnvKey, testKey)
	if err := try(open(nil), withKey); err != nil {
		t.Errorf("key from %s: %v", EnvKey, err)
	}
	t.Setenv(EnvKey, "bm90IHRoZSBzYW1lIGtleSBhdCBhbGwgMDEyMzQ1Njc=") // 32 bytes: a job key is 16, 24 or 32 (internal/jobkey)
	t.Setenv("UCX_TCP_KEY", testKey)
	if err := try(open(ucs.ReadConfig("UCX_TCP_", ifaceConfigTable)), withKey); err != nil {
		t.Errorf("key from UCX_TCP_KEY over %s: %v", EnvKey, err)
	}
	if err := try(open(nil), withKey); !errors.Is(err, ucs.ErrRejected) {
		t.Errorf("key from %s, which differs: err = %v, want ErrRejected", EnvKey, err)
	}
	t.Setenv(EnvKey, "short")
	if _, err := md.IfaceOpen(nil, &uct.IfaceParams{DevName: dev}, nil); !errors.Is(err, ucs.ErrInvalidParam) || !strings.Contains(err.Error(), EnvKey) {
		t.Errorf("bad %s: err = %v, want ErrInvalidParam naming it", EnvKey, err)
	}
}

func TestMkeyDecode(t *testing.T) {
	k := mkey{id: 0xabcdef, addr: 0x7f0000000000, length: 4096, token: 0x1234}
	good := k.encode()
	if got, err := decodeMkey(good); err != nil || got != k {
		t.Fatalf("decode(good) = %+v, %v", got, err)
	}
	mod := func(off int, v uint64, size int) []byte { return uctest.Patched(good, off, size, v) }
	uctest.CheckBadKeys(t, &Component{}, good, func(b []byte) error { _, err := decodeMkey(b); return err }, []uctest.BadKey{
		{Name: "magic", Key: mod(0, 0x12345678, 4)},
		{Name: "version", Key: mod(4, 2, 2)},
		{Name: "reserved", Key: mod(6, 1, 2)},
		{Name: "zero id", Key: mod(8, 0, 8)},
		{Name: "zero address", Key: mod(16, 0, 8)},
		{Name: "zero length", Key: mod(24, 0, 8)},
		{Name: "wrapping range", Key: mod(24, ^uint64(0)-100, 8)},
		{Name: "range above user space", Key: mod(16, maxAddr, 8)},
		{Name: "zero token", Key: mod(32, 0, 8)},
	}...)
}

func TestMemReg(t *testing.T) {
	md, other := testMD(t), testMD(t)
	mem := make([]byte, 100)
	h, err := md.MemReg(unsafe.Pointer(&mem[3]), 50, uct.MemAccessDefault)
	if err != nil {
		t.Fatal(err)
	}
	packed, err := md.MkeyPack(nil, h)
	if err != nil {
		t.Fatal(err)
	}
	k, err := decodeMkey(packed)
	if err != nil || k.addr != uint64(uintptr(unsafe.Pointer(&mem[3]))) || k.length != 50 || k.token == 0 || md.lookup(k.id) == nil {
		t.Fatalf("packed key %+v, %v", k, err)
	}
	if _, err := other.MkeyPack(nil, h); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("MkeyPack with another MD err = %v", err)
	}
	if err := other.MemDereg(h); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("MemDereg with another MD err = %v", err)
	}
	b, err := (&Component{}).RkeyUnpack(packed)
	if got, ok := lookupRkey(b.Rkey); err != nil || !ok || got != k {
		t.Fatalf("RkeyUnpack = %+v, %v", b, err)
	}
	if err := (&Component{}).RkeyRelease(b); err != nil {
		t.Error(err)
	}
	if err := (&Component{}).RkeyRelease(b); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("second RkeyRelease err = %v", err)
	}
	if _, ok := lookupRkey(b.Rkey); ok {
		t.Error("released rkey still known")
	}
	if err := md.MemDereg(h); err != nil {
		t.Error(err)
	}
	if md.lookup(k.id) != nil {
		t.Error("deregistered key still registered")
	}
	if err := md.MemDereg(h); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("second MemDereg err = %v", err)
	}
}

func TestAddresses(t *testing.T) {
	a := ifaceAddr{ip: net.IPv4(127, 0, 0, 1).To4(), port: 4242, id: 77}
	good := a.encode()
	if got, err := decodeIfaceAddr(good); err != nil || !got.ip.Equal(a.ip) || got.port != a.port || got.id != a.id {
		t.Fatalf("decode(good) = %+v, %v", got, err)
	}
	a6 := ifaceAddr{ip: net.ParseIP("2001:db8::1"), port: 1, id: 1}
	if got, err := decodeIfaceAddr(a6.encode()); err != nil || !got.ip.Equal(a6.ip) {
		t.Fatalf("decode(IPv6) = %+v, %v", got, err)
	}
	mod := func(f func(b []byte)) []byte {
		b := append([]byte(nil), good...)
		f(b)
		return b
	}
	for name, b := range map[string][]byte{
		"empty":        nil,
		"short":        good[:IfaceAddrLen-1],
		"magic":        mod(func(b []byte) { b[0] ^= 1 }),
		"family":       mod(func(b []byte) { b[4] = 5 }),
		"reserved":     mod(func(b []byte) { b[5] = 1 }),
		"zero port":    mod(func(b []byte) { b[6], b[7] = 0, 0 }),
		"v4 trailing":  mod(func(b []byte) { b[20] = 1 }),
		"unspecified":  mod(func(b []byte) { copy(b[8:12], []byte{0, 0, 0, 0}) }),
		"multicast":    mod(func(b []byte) { copy(b[8:12], []byte{224, 0, 0, 1}) }),
		"zero id":      mod(func(b []byte) { clear(b[24:]) }),
		"v4-mapped v6": (&ifaceAddr{ip: net.IPv4(10, 0, 0, 1), port: 1, id: 1}).encode(),
	} {
		if name == "v4-mapped v6" {
			b[4] = 6
			copy(b[8:24], net.IPv4(10, 0, 0, 1).To16())
		}
		if _, err := decodeIfaceAddr(b); !errors.Is(err, ucs.ErrInvalidAddr) {
			t.Errorf("%s: decode err = %v, want ErrInvalidAddr", name, err)
		}
	}
	for name, b := range map[string][]byte{
		"empty":             nil,
		"family":            (&deviceAddr{family: 5}).encode(),
		"loopback, no host": (&deviceAddr{family: 4, loopback: true}).encode(),
		"host, no loopback": (&deviceAddr{family: 4, host: 1}).encode(),
		"flags":             func() []byte { b := (&deviceAddr{family: 4}).encode(); b[1] = 2; return b }(),
		"reserved":          func() []byte { b := (&deviceAddr{family: 4}).encode(); b[3] = 2; return b }(),
	} {
		if _, err := decodeDeviceAddr(b); !errors.Is(err, ucs.ErrInvalidAddr) {
			t.Errorf("device %s: decode err = %v, want ErrInvalidAddr", name, err)
		}
	}

	i := openIface(t, testMD(t), nil)
	loop := i.DeviceAddress()
	tests := []struct {
		name       string
		dev, iface []byte
		want       bool
	}{
		{"itself", loop, i.Address(), true},
		{"same host, other port", loop, (&ifaceAddr{ip: net.IPv4(127, 0, 0, 1), port: 9, id: 3}).encode(), true},
		{"other host's loopback", (&deviceAddr{family: 4, loopback: true, host: hostID() ^ 2}).encode(), i.Address(), false},
		{"network device", (&deviceAddr{family: 4}).encode(), (&ifaceAddr{ip: net.IPv4(10, 1, 2, 3), port: 9, id: 3}).encode(), false},
		{"IPv6 loopback", (&deviceAddr{family: 6, loopback: true, host: hostID()}).encode(), (&ifaceAddr{ip: net.IPv6loopback, port: 9, id: 3}).encode(), false},
		{"non-loopback IP on loopback device", loop, (&ifaceAddr{ip: net.IPv4(10, 1, 2, 3), port: 9, id: 3}).encode(), false},
		{"malformed device", loop[:3], i.Address(), false},
		{"malformed iface", loop, i.Address()[:5], false},
	}
	for _, tt := range tests {
		if got := i.IsReachable(tt.dev, tt.iface); got != tt.want {
			t.Errorf("%s: IsReachable = %v, want %v", tt.name, got, tt.want)
		}
	}
	for _, tt := range tests {
		if tt.want {
			continue
		}
		_, err := i.EPCreate(&uct.EPParams{DeviceAddr: tt.dev, IfaceAddr: tt.iface})
		if !errors.Is(err, ucs.ErrUnreachable) && !errors.Is(err, ucs.ErrInvalidAddr) {
			t.Errorf("%s: EPCreate err = %v, want ErrUnreachable or ErrInvalidAddr", tt.name, err)
		}
	}
}

// amKind sends an active message of one kind.
type amKind struct {
	name string
	max  func(*uct.IfaceAttr) int
	send func(ep *EP, id uint8, msg []byte) ucs.Status
}

var amKinds = []amKind{
	{"short", func(a *uct.IfaceAttr) int { return a.AM.MaxShort }, func(ep *EP, id uint8, msg []byte) ucs.Status {
		return ep.AMShort(id, binary.LittleEndian.Uint64(msg), msg[8:])
	}},
	{"bcopy", func(a *uct.IfaceAttr) int { return a.AM.MaxBcopy }, func(ep *EP, id uint8, msg []byte) ucs.Status {
		n, st := ep.AMBcopy(id, func(dst []byte) int { return copy(dst, msg) }, 0)
		if st == ucs.OK && n != len(msg) {
			return ucs.ErrMessageTruncated
		}
		return st
	}},
	{"zcopy", func(a *uct.IfaceAttr) int { return a.AM.MaxZcopy }, func(ep *EP, id uint8, msg []byte) ucs.Status {
		h := min(len(msg), 11)
		rest := msg[h:]
		iov := []uct.IOV{{Buffer: rest[:len(rest)/3]}, {}, {Buffer: rest[len(rest)/3:]}}
		st := ep.AMZcopy(id, msg[:h], iov, 0, nil)
		if st == ucs.InProgress {
			st = ucs.OK
		}
		return st
	}},
}

func TestAM(t *testing.T) {
	md := testMD(t)
	a, b := openIface(t, md, nil), openIface(t, md, nil)
	ep := connect(t, a, b)
	attr, _ := a.Query()
	for _, kind := range amKinds {
		for _, flags := range []uct.CBFlags{uct.CBFlagSync, uct.CBFlagAsync} {
			for _, size := range []int{8, 9, 100, kind.max(attr) - 1, kind.max(attr)} {
				name := fmt.Sprintf("%s/flags=%d/%d", kind.name, flags, size)
				t.Run(name, func(t *testing.T) {
					var mu sync.Mutex
					var got [][]byte
					var descFlags uint32
					err := b.SetAMHandler(5, func(arg any, data []byte, f uint32) ucs.Status {
						if arg != "arg" {
							t.Errorf("handler arg %v", arg)
						}
						mu.Lock()
						got = append(got, append([]byte(nil), data...))
						descFlags = f
						mu.Unlock()
						return ucs.OK
					}, "arg", flags)
					if err != nil {
						t.Fatal(err)
					}
					var want [][]byte
					for k := range 3 {
						msg := pattern(size, k+size)
						want = append(want, msg)
						if st := kind.send(ep, 5, msg); st != ucs.OK {
							t.Fatalf("send %d: %v", k, st)
						}
					}
					n := func() int { mu.Lock(); defer mu.Unlock(); return len(got) }
					progressUntil(t, func() bool { return n() >= len(want) }, a, b)
					mu.Lock()
					defer mu.Unlock()
					if len(got) != len(want) {
						t.Fatalf("got %d messages, want %d", len(got), len(want))
					}
					for k := range want {
						if !bytes.Equal(got[k], want[k]) {
							t.Errorf("message %d: got %d bytes %x..., want %d bytes %x...", k, len(got[k]), got[k][:min(8, len(got[k]))], len(want[k]), want[k][:8])
						}
					}
					if descFlags != uct.CBParamFlagDesc {
						t.Errorf("handler flags %#x, want CBParamFlagDesc", descFlags)
					}
				})
			}
		}
		// A pack function cannot write more than AM.MaxBcopy bytes.
		if kind.name == "bcopy" {
			continue
		}
		if st := kind.send(ep, 5, make([]byte, kind.max(attr)+1)); st != ucs.ErrInvalidParam {
			t.Errorf("%s of %d bytes = %v, want ErrInvalidParam", kind.name, kind.max(attr)+1, st)
		}
	}
	if st := ep.AMShort(uct.AMMaxID, 0, nil); st != ucs.ErrInvalidParam {
		t.Errorf("AMShort to id %d = %v", uct.AMMaxID, st)
	}
	for _, f := range []uct.CBFlags{0, uct.CBFlagSync | uct.CBFlagAsync, 1} {
		if err := b.SetAMHandler(1, func(any, []byte, uint32) ucs.Status { return ucs.OK }, nil, f); !errors.Is(err, ucs.ErrInvalidParam) {
			t.Errorf("SetAMHandler flags %#x err = %v", f, err)
		}
	}
	if err := b.SetAMHandler(uct.AMMaxID, nil, nil, uct.CBFlagSync); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("SetAMHandler id %d err = %v", uct.AMMaxID, err)
	}
}

// TestAMKeep checks that a handler may keep data until ReleaseDesc, and
// that a message without handler is dropped and logged.
func TestAMKeep(t *testing.T) {
	logs := captureLog(t)
	md := testMD(t)
	a, b := openIface(t, md, nil), openIface(t, md, nil)
	ep := connect(t, a, b)
	var kept [][]byte
	b.SetAMHandler(1, func(_ any, data []byte, _ uint32) ucs.Status {
		kept = append(kept, data)
		return ucs.InProgress
	}, nil, uct.CBFlagSync)
	for k := range 10 {
		if st := ep.AMShort(1, uint64(k), pattern(100, k)); st != ucs.OK {
			t.Fatal(st)
		}
	}
	progressUntil(t, func() bool { return len(kept) == 10 }, a, b)
	for k, d := range kept {
		if binary.LittleEndian.Uint64(d) != uint64(k) || !bytes.Equal(d[8:], pattern(100, k)) {
			t.Errorf("kept message %d changed", k)
		}
		b.ReleaseDesc(d)
	}
	if st := ep.AMShort(2, 0, nil); st != ucs.OK {
		t.Fatal(st)
	}
	if st := flush(t, ep, b); st != ucs.OK {
		t.Fatal(st)
	}
	progressUntil(t, func() bool { return strings.Contains(logs.String(), "no handler") }, b)
}

// putKind writes with one put flavour.
type putKind struct {
	name string
	max  int
	put  func(ep *EP, src []byte, raddr, rkey uint64) ucs.Status
}

var putKinds = []putKind{
	{"short", maxShort, func(ep *EP, src []byte, raddr, rkey uint64) ucs.Status { return ep.PutShort(src, raddr, rkey) }},
	{"bcopy", DefaultSegSize, func(ep *EP, src []byte, raddr, rkey uint64) ucs.Status {
		n, st := ep.PutBcopy(func(dst []byte) int { return copy(dst, src) }, raddr, rkey)
		if st == ucs.OK && n != len(src) {
			return ucs.ErrMessageTruncated
		}
		return st
	}},
	{"zcopy", maxPutLen, func(ep *EP, src []byte, raddr, rkey uint64) ucs.Status {
		iov := []uct.IOV{{Buffer: src[:len(src)/2]}, {Buffer: src[len(src)/2:]}}
		if st := ep.PutZcopy(iov, raddr, rkey, nil); st != ucs.InProgress {
			return st
		}
		return ucs.OK
	}},
}

func TestPut(t *testing.T) {
	const regionSize = 4<<20 + 64
	md := testMD(t)
	a, b := openIface(t, md, nil), openIface(t, md, nil)
	ep := connect(t, a, b)
	target := register(t, md, regionSize)
	for _, kind := range putKinds {
		for _, size := range []int{0, 1, 7, 255, 256, 4097, 8192, 65537, 4 << 20} {
			if size > kind.max {
				continue
			}
			for _, off := range []int{0, 3} {
				t.Run(fmt.Sprintf("%s/%d+%d", kind.name, size, off), func(t *testing.T) {
					before := target.snapshot()
					src := pattern(size, size+off+len(kind.name))
					raddr := target.base() + uint64(off) + 5
					if st := kind.put(ep, src, raddr, target.rkey.Rkey); st != ucs.OK {
						t.Fatalf("put: %v", st)
					}
					if st := flush(t, ep, b); st != ucs.OK {
						t.Fatalf("flush: %v", st)
					}
					want := before
					copy(want[off+5:], src)
					if got := target.snapshot(); !bytes.Equal(got, want) {
						k := 0
						for k < len(got) && got[k] == want[k] {
							k++
						}
						t.Errorf("target differs at byte %d of %d", k, len(got))
					}
				})
			}
		}
	}
	// The initiator refuses what it can tell is wrong.
	for _, kind := range putKinds {
		if st := kind.put(ep, make([]byte, 16), target.base()+regionSize-8, target.rkey.Rkey); st != ucs.ErrInvalidParam {
			t.Errorf("%s put past the key's end = %v, want ErrInvalidParam", kind.name, st)
		}
	}
	if st := ep.PutShort(make([]byte, maxShort+1), target.base(), target.rkey.Rkey); st != ucs.ErrInvalidParam {
		t.Errorf("PutShort of %d bytes = %v", maxShort+1, st)
	}
}

// TestFlush checks that flush completions come after the data is at the
// target, for EP and iface flush, and that a completed flush returns OK.
func TestFlush(t *testing.T) {
	md := testMD(t)
	a, b := openIface(t, md, nil), openIface(t, md, nil)
	ep1, ep2 := connect(t, a, b), connect(t, a, b)
	t1, t2 := register(t, md, 1<<20), register(t, md, 1<<20)
	src := pattern(1<<20, 1)
	var zdone atomic.Int32
	zcomp := &uct.Completion{Count: 1, Func: func(*uct.Completion) { zdone.Add(1) }}
	for _, p := range []struct {
		ep *EP
		r  *testRegion
	}{{ep1, t1}, {ep2, t2}} {
		switch st := p.ep.PutZcopy([]uct.IOV{{Buffer: src}}, p.r.base(), p.r.rkey.Rkey, zcomp); st {
		case ucs.InProgress:
			atomic.AddInt32(&zcomp.Count, 1)
		case ucs.OK:
		default:
			t.Fatal(st)
		}
	}
	zcomp.Invoke(ucs.OK)
	done := false
	comp := &uct.Completion{Count: 1, Func: func(*uct.Completion) { done = true }}
	if st := a.Flush(0, comp); st != ucs.InProgress && st != ucs.OK {
		t.Fatalf("iface flush = %v", st)
	} else if st == ucs.OK {
		done = true
	}
	progressUntil(t, func() bool { return done && zdone.Load() == 1 }, a, b)
	if comp.Status() != ucs.OK || zcomp.Status() != ucs.OK {
		t.Errorf("completion status %v, zcopy %v", comp.Status(), zcomp.Status())
	}
	if !bytes.Equal(t1.snapshot(), src) || !bytes.Equal(t2.snapshot(), src) {
		t.Error("data not at the target after the iface flush completed")
	}
	if st := a.Flush(0, nil); st != ucs.OK {
		t.Errorf("iface flush with nothing outstanding = %v", st)
	}
	if st := ep1.Flush(0, nil); st != ucs.OK {
		t.Errorf("EP flush with nothing outstanding = %v", st)
	}
	if st := ep1.Fence(0); st != ucs.OK {
		t.Errorf("Fence = %v", st)
	}
}

// TestFlushAllocatesNothing: a put then a flush of its EP or of the iface,
// completed through Progress, as a loop of puts and quiets does them,
// allocates nothing once the first has run (waiters are reused).
func TestFlushAllocatesNothing(t *testing.T) {
	md := testMD(t)
	a, b := openIface(t, md, nil), openIface(t, md, nil)
	ep := connect(t, a, b)
	r := register(t, md, 64)
	src := []byte("8 bytes!")
	done := false
	comp := &uct.Completion{Func: func(*uct.Completion) { done = true }}
	for _, c := range []struct {
		name  string
		flush func() ucs.Status
	}{
		{"EP", func() ucs.Status { return ep.Flush(0, comp) }},
		{"iface", func() ucs.Status { return a.Flush(0, comp) }},
	} {
		putFlush := func() {
			if st := ep.PutShort(src, r.base(), r.rkey.Rkey); st != ucs.OK {
				t.Fatalf("PutShort = %v", st)
			}
			done, comp.Count = false, 1
			switch st := c.flush(); st {
			case ucs.InProgress:
				for !done {
					a.Progress()
					b.Progress()
				}
			case ucs.OK:
			default:
				t.Fatalf("%s flush = %v", c.name, st)
			}
		}
		putFlush()
		// The least of three runs: the ifaces' pollers may allocate
		// during one of them; an allocation of the flush shows in all.
		allocs := testing.AllocsPerRun(50, putFlush)
		for range 2 {
			allocs = min(allocs, testing.AllocsPerRun(50, putFlush))
		}
		if allocs != 0 {
			t.Errorf("a put and a flush of the %s allocate %v times", c.name, allocs)
		}
	}
}

// TestFlushAfterActiveMessages: active messages are complete once written,
// so a flush after them alone is complete at once, with the peer not
// progressing; a put among them makes the flush wait for the peer.
func TestFlushAfterActiveMessages(t *testing.T) {
	md := testMD(t)
	a, b := openIface(t, md, nil), openIface(t, md, nil)
	var got atomic.Int32
	b.SetAMHandler(2, func(any, []byte, uint32) ucs.Status { got.Add(1); return ucs.OK }, nil, uct.CBFlagSync)
	target := register(t, md, 8)
	tests := []struct {
		name    string
		put     bool
		settled ucs.Status // the flush before the peer progresses
	}{
		{"active messages", false, ucs.OK},
		{"a put, then active messages", true, ucs.InProgress},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ep := connect(t, a, b)
			if tt.put {
				if st := ep.PutShort([]byte{1}, target.base(), target.rkey.Rkey); st != ucs.OK {
					t.Fatal(st)
				}
			}
			for range 3 {
				if st := ep.AMShort(2, 0, []byte("signal")); st != ucs.OK {
					t.Fatal(st)
				}
			}
			if st := ep.Flush(0, nil); st != tt.settled {
				t.Errorf("flush = %v, want %v", st, tt.settled)
			}
			progressUntil(t, func() bool { return ep.Flush(0, nil) == ucs.OK }, a, b)
		})
	}
	progressUntil(t, func() bool { return got.Load() == 6 }, a, b) // every message arrives
}

// TestPending fills an EP's queue against a receiver that does not progress
// and checks that ErrNoResource, PendingAdd and Progress deliver every
// message, in order.
func TestPending(t *testing.T) {
	md := testMD(t)
	a := openIface(t, md, nil, "TX_QUEUE_LEN=128k")
	b := openIface(t, md, nil, "RX_QUEUE_LEN=256k")
	ep := connect(t, a, b)
	const n, size = 400, 60 << 10
	var got []uint32
	b.SetAMHandler(3, func(_ any, data []byte, _ uint32) ucs.Status {
		if len(data) != size {
			t.Errorf("message of %d bytes", len(data))
		}
		got = append(got, binary.LittleEndian.Uint32(data))
		return ucs.OK
	}, nil, uct.CBFlagSync)
	msgs := make([][]byte, n)
	for k := range msgs {
		msgs[k] = pattern(size, k)
		binary.LittleEndian.PutUint32(msgs[k], uint32(k))
	}
	next, noResource, completed := 0, 0, 0
	var comps []*uct.Completion
	send := func() ucs.Status {
		c := &uct.Completion{Count: 1, Func: func(*uct.Completion) { completed++ }}
		st := ep.AMZcopy(3, msgs[next][:4], []uct.IOV{{Buffer: msgs[next][4:]}}, 0, c)
		switch st {
		case ucs.OK:
			completed++
			next++
			return ucs.InProgress
		case ucs.InProgress:
			comps = append(comps, c)
			next++
		}
		return st
	}
	var req uct.PendingReq
	queued := false
	req.Func = func(r *uct.PendingReq) ucs.Status {
		for next < n {
			if st := send(); st != ucs.InProgress {
				return st
			}
		}
		queued = false
		return ucs.OK
	}
	// Without progress on b, the sender must run out of room.
	for next < n {
		st := send()
		if st == ucs.ErrNoResource {
			noResource++
			break
		}
		if st != ucs.InProgress {
			t.Fatalf("send %d: %v", next, st)
		}
		a.Progress()
	}
	if noResource == 0 {
		t.Fatalf("sent all %d messages of %d bytes without ErrNoResource", n, size)
	}
	for next < n || len(got) < n {
		if next < n && !queued {
			switch st := ep.PendingAdd(&req, 0); st {
			case ucs.OK:
				queued = true
			case ucs.ErrBusy:
				req.Func(&req)
			default:
				t.Fatalf("PendingAdd = %v", st)
			}
		}
		progressUntil(t, func() bool { return (next < n && !queued) || len(got) == n }, a, b)
	}
	progressUntil(t, func() bool { return completed == n }, a, b)
	for k, v := range got {
		if v != uint32(k) {
			t.Fatalf("message %d has sequence number %d", k, v)
		}
	}
	if ep.PendingAdd(&req, 0) != ucs.ErrBusy {
		t.Error("PendingAdd on an idle EP did not return ErrBusy")
	}
}

// TestPendingPurge checks that purged requests reach the callback and are
// never called.
func TestPendingPurge(t *testing.T) {
	md := testMD(t)
	a := openIface(t, md, nil, "TX_QUEUE_LEN=1")
	b := openIface(t, md, nil)
	b.SetAMHandler(1, func(any, []byte, uint32) ucs.Status { return ucs.OK }, nil, uct.CBFlagSync)
	ep := connect(t, a, b)
	big := make([]byte, 16<<20)
	target := register(t, md, len(big))
	for st := ucs.OK; st != ucs.ErrNoResource; st = ep.PutZcopy([]uct.IOV{{Buffer: big}}, target.base(), target.rkey.Rkey, nil) {
		if st.IsErr() {
			t.Fatal(st)
		}
	}
	called := false
	reqs := []*uct.PendingReq{{Func: func(*uct.PendingReq) ucs.Status { called = true; return ucs.OK }}, {}}
	reqs[1].Func = reqs[0].Func
	added := 0
	for _, r := range reqs {
		if st := ep.PendingAdd(r, 0); st == ucs.OK {
			added++
		}
	}
	var purged []*uct.PendingReq
	ep.PendingPurge(func(r *uct.PendingReq) { purged = append(purged, r) })
	if len(purged) != added {
		t.Errorf("purged %d of %d requests", len(purged), added)
	}
	if st := flush(t, ep, b); st != ucs.OK {
		t.Fatal(st)
	}
	a.Progress()
	if called {
		t.Error("a purged request was called")
	}
}

// TestRejectedPuts checks that puts with a wrong token, an unknown or
// deregistered key (whose region a later registration uses again), or a
// range outside the region leave the target's memory untouched, are
// logged, and still flush; and that gets with such
// keys complete with ucs.ErrInvalidAddr and are logged. Each case has a
// target iface of its own: an iface logs only the first few rejections
// of a minute (see TestRejectionFlood).
func TestRejectedPuts(t *testing.T) {
	logs := captureLog(t)
	md := testMD(t)
	a := openIface(t, md, nil)
	target := register(t, md, 4096)
	dead := register(t, md, 64)
	deadKey := dead.key
	md.MemDereg(dead.memh)
	// The deregistered region, registered again for other memory: the old
	// key must not reach it.
	again := register(t, md, 64)
	if again.memh != dead.memh {
		t.Fatal("MemReg did not use the deregistered region again")
	}
	k, _ := decodeMkey(target.key)
	forge := func(f func(k *mkey)) []byte {
		k := k
		f(&k)
		return k.encode()
	}
	tests := []struct {
		name  string
		key   []byte
		raddr uint64
		size  int
		why   string
	}{
		{"wrong token", forge(func(k *mkey) { k.token ^= 1 }), k.addr, 8, "wrong token"},
		{"unknown key", forge(func(k *mkey) { k.id ^= 1 }), k.addr, 8, "unknown key"},
		{"past the end", forge(func(k *mkey) { k.length += 100 }), k.addr + 4090, 20, "outside"},
		{"before the start", forge(func(k *mkey) { k.addr -= 64; k.length += 64 }), k.addr - 8, 16, "outside"},
		{"deregistered", deadKey, dead.base(), 8, "unknown key"},
	}
	// The other MD's registry does not count either.
	other := testMD(t)
	foreign := register(t, other, 4096)
	tests = append(tests, struct {
		name  string
		key   []byte
		raddr uint64
		size  int
		why   string
	}{"key of another MD", foreign.key, foreign.base(), 8, "unknown key"})

	for _, tt := range tests {
		b := openIface(t, md, nil)
		ep := connect(t, a, b)
		for _, kind := range putKinds {
			t.Run(tt.name+"/"+kind.name, func(t *testing.T) {
				rk, err := (&Component{}).RkeyUnpack(tt.key)
				if err != nil {
					t.Fatal(err)
				}
				defer (&Component{}).RkeyRelease(rk)
				before, fbefore, abefore := target.snapshot(), foreign.snapshot(), again.snapshot()
				if st := kind.put(ep, bytes.Repeat([]byte{0xee}, tt.size), tt.raddr, rk.Rkey); st != ucs.OK {
					t.Fatalf("put: %v", st)
				}
				if st := flush(t, ep, b); st != ucs.OK {
					t.Fatalf("flush: %v", st)
				}
				if !bytes.Equal(target.snapshot(), before) || !bytes.Equal(foreign.snapshot(), fbefore) || !bytes.Equal(again.snapshot(), abefore) {
					t.Error("a rejected put changed memory")
				}
				if !strings.Contains(logs.String(), tt.why) {
					t.Errorf("log %q does not say %q", logs.String(), tt.why)
				}
			})
		}
		for _, kind := range []string{"get_bcopy", "get_zcopy"} {
			t.Run(tt.name+"/"+kind, func(t *testing.T) {
				rk, err := (&Component{}).RkeyUnpack(tt.key)
				if err != nil {
					t.Fatal(err)
				}
				defer (&Component{}).RkeyRelease(rk)
				buf := bytes.Repeat([]byte{0x5a}, tt.size)
				done := false
				comp := &uct.Completion{Count: 1, Func: func(*uct.Completion) { done = true }}
				var st ucs.Status
				if kind == "get_bcopy" {
					st = ep.GetBcopy(func(src []byte) { copy(buf, src) }, tt.size, tt.raddr, rk.Rkey, comp)
				} else {
					st = ep.GetZcopy([]uct.IOV{{Buffer: buf}}, tt.raddr, rk.Rkey, comp)
				}
				if st != ucs.InProgress {
					t.Fatalf("get: %v", st)
				}
				progressUntil(t, func() bool { return done }, a, b)
				if comp.Status() != ucs.ErrInvalidAddr {
					t.Errorf("refused get completed with %v, want %v", comp.Status(), ucs.ErrInvalidAddr)
				}
				if !bytes.Equal(buf, bytes.Repeat([]byte{0x5a}, tt.size)) {
					t.Error("a refused get wrote the buffer")
				}
				if !strings.Contains(logs.String(), "rejected a get") {
					t.Errorf("log %q does not report the get", logs.String())
				}
			})
		}
		if got, want := b.warn.rejected.Count(), uint64(len(putKinds)+2); got != want {
			t.Errorf("%s: %d rejections counted, want %d", tt.name, got, want)
		}
		// The connection survives rejected puts.
		if st := ep.PutShort([]byte{1, 2, 3}, target.base(), target.rkey.Rkey); st != ucs.OK {
			t.Fatal(st)
		}
		if st := flush(t, ep, b); st != ucs.OK {
			t.Fatal(st)
		}
		if got := target.snapshot(); !bytes.Equal(got[:3], []byte{1, 2, 3}) {
			t.Errorf("%s: valid put after rejected ones: %x", tt.name, got[:3])
		}
	}
}

// TestWrongKey checks that ifaces with different job keys do not connect,
// and that the refused side's handlers see nothing.
func TestWrongKey(t *testing.T) {
	logs := captureLog(t)
	md := testMD(t)
	a := openIface(t, md, nil)
	b := openIface(t, md, nil, "KEY=b3RoZXIgam9iIGtleSAwMTIzNDU2Nzg5MDEyMzQ1Njc=")
	seen := atomic.Int32{}
	for _, i := range []*Iface{a, b} {
		i.SetAMHandler(1, func(any, []byte, uint32) ucs.Status { seen.Add(1); return ucs.OK }, nil, uct.CBFlagAsync)
	}
	for _, dir := range []struct {
		name string
		from *Iface
		to   *Iface
	}{{"a to b", a, b}, {"b to a", b, a}} {
		_, err := dir.from.EPCreate(&uct.EPParams{DeviceAddr: dir.to.DeviceAddress(), IfaceAddr: dir.to.Address()})
		if !errors.Is(err, ucs.ErrUnreachable) || !errors.Is(err, ucs.ErrRejected) {
			t.Errorf("%s: EPCreate err = %v, want ErrUnreachable and ErrRejected", dir.name, err)
		}
	}
	// A client that skips the handshake and sends a frame is refused too.
	c, err := net.Dial("tcp", b.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	frame := make([]byte, frameHeaderLen+8)
	putFrameHeader(frame, frameAM, 1, 8)
	hello := make([]byte, hsLen(hsHello))
	copy(hello, frame)
	c.Write(hello)
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("the iface answered a client that sent a frame instead of a hello")
	}
	progressUntil(t, func() bool { return strings.Count(logs.String(), "refused a connection") >= 3 }, a, b)
	if n := seen.Load(); n != 0 {
		t.Errorf("handlers saw %d messages from refused connections", n)
	}
}

// rawClient connects to i and passes the handshake with the test key, for
// a connection that the client's iface and i may share (as EPCreate
// dials).
func rawClient(t *testing.T, i *Iface) net.Conn {
	t.Helper()
	return rawClientHello(t, i, testHello(i))
}

// rawClientHello is rawClient with the hello h.
func rawClientHello(t *testing.T, i *Iface, h handshake) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", i.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := clientHandshake(c, i.cfg.key, h, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestMalformedFrame sends broken frames on authenticated connections and
// checks that the iface closes them without calling handlers.
func TestMalformedFrame(t *testing.T) {
	logs := captureLog(t)
	md := testMD(t)
	b := openIface(t, md, nil)
	var seen atomic.Int32
	b.SetAMHandler(1, func(any, []byte, uint32) ucs.Status { seen.Add(1); return ucs.OK }, nil, uct.CBFlagAsync)
	hdr := func(typ, id uint8, n uint32) []byte {
		h := make([]byte, frameHeaderLen)
		putFrameHeader(h, typ, id, int(n))
		return h
	}
	u64 := func(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
	tests := []struct {
		name   string
		frame  []byte
		oneWay bool // a one-way connection: the client's iface only sends operations on it
	}{
		{"unknown type", hdr(31, 0, 0), false},
		{"heartbeat from a one-way client", hdr(frameAlive, 0, 0), true},
		{"ack from a one-way client", append(hdr(frameAck, 0, 8), make([]byte, 8)...), true},
		{"iface close from a one-way client", append(hdr(frameIfaceClose, 0, 8), make([]byte, 8)...), true},
		// A shared connection: the iface's EP sent nothing on it.
		{"ack of frames never sent", append(hdr(frameAck, 0, 8), u64(3)...), false},
		{"get reply to no get", append(hdr(frameGetRep, 0, getRepHeaderLen), make([]byte, getRepHeaderLen)...), false},
		{"atomic reply to no atomic", append(hdr(frameAtomicRep, 0, atomicRepLen), make([]byte, atomicRepLen)...), false},
		{"operation after the goodbye", append(append(hdr(frameEPClose, 0, 0), hdr(frameAM, 1, 8)...), make([]byte, 8)...), false},
		{"AM id too large", append(hdr(frameAM, uct.AMMaxID, 8), make([]byte, 8)...), false},
		{"AM too long", hdr(frameAM, 1, DefaultRxSegSize+1), false},
		{"reserved bits", func() []byte { h := hdr(frameAM, 1, 0); h[3] = 1; return h }(), false},
		{"put without header", append(hdr(framePut, 0, 4), make([]byte, 4)...), false},
		{"put with id", append(hdr(framePut, 1, putHeaderLen), make([]byte, putHeaderLen)...), false},
		{"put too long", hdr(framePut, 0, putHeaderLen+maxPutLen+1), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := testHello(b)
			if tt.oneWay {
				h.flags = hsFlagOneWay
			}
			c := rawClientHello(t, b, h)
			if _, err := c.Write(tt.frame); err != nil {
				t.Fatal(err)
			}
			c.SetReadDeadline(time.Now().Add(time.Minute))
			got, err := io.ReadAll(c)
			if tt.frame[0] == frameEPClose && bytes.Equal(got, hdr(frameEPClose, 0, 0)) {
				// The iface's goodbye for the connection, which no EP
				// of it took and none will.
				got = nil
			}
			if len(got) > 0 || err != nil && !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("the iface answered %x (%v) instead of closing", got, err)
			}
		})
	}
	if n := seen.Load(); n != 0 {
		t.Errorf("handlers saw %d messages", n)
	}
	// The limiter logs ten a minute, and counts the rest.
	progressUntil(t, func() bool { return b.warn.closed.Count() == uint64(len(tests)) }, b)
	if got, want := strings.Count(logs.String(), "closed the connection"), min(len(tests), 10); got != want {
		t.Errorf("%d connections closed in the log, want %d:\n%s", got, want, logs)
	}
	// A good frame on a fresh connection still goes through.
	c := rawClient(t, b)
	c.Write(append(hdr(frameAM, 1, 8), make([]byte, 8)...))
	progressUntil(t, func() bool { return seen.Load() == 1 }, b)
}

// fakeServer accepts one connection on the loopback, passes the handshake
// as iface id with the test key, and hands the connection to serve.
func fakeServer(t *testing.T, i *Iface, serve func(c net.Conn)) (dev, addr []byte) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	const id = 0x5eed
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if _, err := serverHandshake(c, i.cfg.key, id, time.Now().Add(time.Minute), nil); err != nil {
			t.Errorf("fake server handshake: %v", err)
			return
		}
		serve(c)
	}()
	a := ifaceAddr{ip: net.IPv4(127, 0, 0, 1).To4(), port: uint16(ln.Addr().(*net.TCPAddr).Port), id: id}
	return i.DeviceAddress(), a.encode()
}

// TestEPFailure checks that an EP fails, with its error handler called from
// Progress and its operations and flushes failing, when the peer sends a
// malformed acknowledgement, closes the connection, or its iface closes.
func TestEPFailure(t *testing.T) {
	captureLog(t)
	tests := []struct {
		name  string
		serve func(c net.Conn)
	}{
		{"garbage", func(c net.Conn) { c.Write([]byte("garbage!garbage!")) }},
		{"ack beyond issued", func(c net.Conn) {
			b := make([]byte, frameHeaderLen+ackBodyLen)
			putFrameHeader(b, frameAck, 0, ackBodyLen)
			binary.LittleEndian.PutUint64(b[frameHeaderLen:], 1000)
			c.Write(b)
		}},
		{"close", func(c net.Conn) {}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var failed atomic.Pointer[EP]
			var failStatus ucs.Status
			md := testMD(t)
			a := openIface(t, md, &uct.IfaceParams{
				ErrHandler: func(arg any, ep uct.EP, st ucs.Status) {
					if arg != "a" {
						t.Errorf("error handler arg %v", arg)
					}
					failed.Store(ep.(*EP))
					failStatus = st
				},
				ErrHandlerArg: "a",
			})
			block := make(chan struct{})
			dev, addr := fakeServer(t, a, func(c net.Conn) {
				<-block
				tt.serve(c)
			})
			ep := connect(t, a, openIface(t, md, nil))
			ep2, err := a.EPCreate(&uct.EPParams{DeviceAddr: dev, IfaceAddr: addr})
			if err != nil {
				t.Fatal(err)
			}
			defer ep2.Destroy()
			// A put completes at the peer: the flush waits for its
			// acknowledgement.
			r := register(t, md, 8)
			if st := ep2.PutShort([]byte{1}, r.base(), r.rkey.Rkey); st != ucs.OK {
				t.Fatal(st)
			}
			done := false
			comp := &uct.Completion{Count: 1, Func: func(*uct.Completion) { done = true }}
			if st := ep2.Flush(0, comp); st != ucs.InProgress {
				t.Fatalf("flush before acknowledgement = %v", st)
			}
			close(block)
			progressUntil(t, func() bool { return failed.Load() != nil && done }, a)
			if failed.Load() != ep2.(*EP) || failStatus != ucs.ErrConnectionReset {
				t.Errorf("error handler got %p, %v; want %p, ErrConnectionReset", failed.Load(), failStatus, ep2)
			}
			if comp.Status() != ucs.ErrConnectionReset {
				t.Errorf("flush completion status %v", comp.Status())
			}
			if st := ep2.AMShort(1, 0, nil); st != ucs.ErrConnectionReset {
				t.Errorf("AMShort on the failed EP = %v", st)
			}
			if st := ep2.Flush(0, nil); st != ucs.ErrConnectionReset {
				t.Errorf("Flush on the failed EP = %v", st)
			}
			if st := ep2.PendingAdd(&uct.PendingReq{}, 0); st != ucs.ErrBusy {
				t.Errorf("PendingAdd on the failed EP = %v, want ErrBusy", st)
			}
			// The iface and its other EPs are unaffected.
			if st := ep.AMShort(1, 0, nil); st != ucs.OK {
				t.Errorf("AMShort on another EP = %v", st)
			}
			if st := a.Flush(0, nil); st.IsErr() {
				t.Errorf("iface flush = %v", st)
			}
		})
	}
}

// TestClosedPeer checks that an EP to an iface that closes fails, and that
// connecting to a closed iface fails at once.
func TestClosedPeer(t *testing.T) {
	captureLog(t)
	md := testMD(t)
	a := openIface(t, md, nil)
	b, err := md.IfaceOpen(nil, &uct.IfaceParams{DevName: loopbackDev(t)}, testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	ep := connect(t, a, b.(*Iface))
	dev, addr := b.DeviceAddress(), b.Address()
	b.Close()
	b.Close()
	if _, err := a.EPCreate(&uct.EPParams{DeviceAddr: dev, IfaceAddr: addr}); !errors.Is(err, ucs.ErrUnreachable) {
		t.Errorf("EPCreate to a closed iface err = %v, want ErrUnreachable", err)
	}
	var st ucs.Status
	progressUntil(t, func() bool {
		if st = ep.AMShort(1, 0, nil); st == ucs.OK {
			st = flush(t, ep)
		}
		return st.IsErr()
	}, a)
	if st != ucs.ErrConnectionReset {
		t.Errorf("operations on an EP to a closed iface: %v, want ErrConnectionReset", st)
	}
}

// TestDestroy checks that destroying an EP with zcopy operations queued
// signals their completions, and that closing an iface with EPs works.
func TestDestroy(t *testing.T) {
	md := testMD(t)
	a := openIface(t, md, nil, "TX_QUEUE_LEN=1")
	b := openIface(t, md, nil, "RX_QUEUE_LEN=1")
	b.SetAMHandler(1, func(any, []byte, uint32) ucs.Status { return ucs.OK }, nil, uct.CBFlagSync)
	ep, err := a.EPCreate(&uct.EPParams{DeviceAddr: b.DeviceAddress(), IfaceAddr: b.Address()})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	comp := &uct.Completion{Count: 1 << 20}
	buf := make([]byte, DefaultRxSegSize)
	for {
		st := ep.AMZcopy(1, nil, []uct.IOV{{Buffer: buf}}, 0, comp)
		if st == ucs.InProgress {
			n++
		} else if st != ucs.OK {
			break
		}
	}
	ep.Destroy()
	if st := ep.AMShort(1, 0, nil); st != ucs.ErrCanceled {
		t.Errorf("AMShort after Destroy = %v, want ErrCanceled", st)
	}
	progressUntil(t, func() bool { return atomic.LoadInt32(&comp.Count) == 1<<20-int32(n) }, a)
	connect(t, a, b)
	a.Close()
	b.Close()
}
