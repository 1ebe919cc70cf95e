package tcp

import (
	"bytes"
	"encoding/base64"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// testKey is the job key of the tests' ifaces.
var testKey = base64.StdEncoding.EncodeToString([]byte("goshmem uct/tcp test key 0123456"))

// pattern returns n bytes that differ for different seeds.
func pattern(n, seed int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*13 + seed*7 + 1)
	}
	return b
}

// testConfig returns an iface configuration with the test key and the
// given NAME=value settings.
func testConfig(tb testing.TB, settings ...string) *ucs.Config {
	tb.Helper()
	c := ucs.ReadConfig("GOSHMEM_TCP_TEST_UNSET_", ifaceConfigTable)
	if err := c.Modify("KEY", testKey); err != nil {
		tb.Fatal(err)
	}
	for _, s := range settings {
		name, value, _ := strings.Cut(s, "=")
		if err := c.Modify(name, value); err != nil {
			tb.Fatal(err)
		}
	}
	return c
}

// testMD opens a tcp MD.
func testMD(tb testing.TB) *MD {
	tb.Helper()
	md, err := (&Component{}).OpenMD(MDName, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return md.(*MD)
}

// openIface opens an iface on "lo" of md that is closed at the end of the
// test.
func openIface(tb testing.TB, md *MD, params *uct.IfaceParams, settings ...string) *Iface {
	tb.Helper()
	if params == nil {
		params = &uct.IfaceParams{}
	}
	params.TLName, params.DevName = TLName, loopbackDev(tb)
	if params.Logger == nil {
		params.Logger = capturedLog
	}
	i, err := md.IfaceOpen(nil, params, testConfig(tb, settings...))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(i.Close)
	return i.(*Iface)
}

// loopbackDev returns the name of the loopback interface, skipping the
// test where there is none.
func loopbackDev(tb testing.TB) string {
	tb.Helper()
	tls, err := (&MD{}).TLResources()
	if err != nil {
		tb.Fatal(err)
	}
	for _, r := range tls {
		if r.DevName == "lo" {
			return r.DevName
		}
	}
	tb.Skip("no loopback interface named lo with an address: the tests cross only loopback")
	return ""
}

// connect creates an EP from a to b, destroyed at the end of the test.
func connect(tb testing.TB, a, b *Iface) *EP {
	tb.Helper()
	ep, err := a.EPCreate(&uct.EPParams{DeviceAddr: b.DeviceAddress(), IfaceAddr: b.Address()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(ep.Destroy)
	return ep.(*EP)
}

// progressUntil progresses the ifaces until cond holds. It gives up after a
// minute so that a broken transport fails the test instead of hanging it;
// that is a guard, not a timed assertion.
func progressUntil(tb testing.TB, cond func() bool, ifaces ...*Iface) {
	tb.Helper()
	deadline := time.Now().Add(time.Minute)
	for spins := 0; !cond(); spins++ {
		n := 0
		for _, i := range ifaces {
			n += i.Progress()
		}
		if spins%64 == 63 && time.Now().After(deadline) {
			tb.Fatal("gave up waiting after a minute")
		}
		if n == 0 {
			runtime.Gosched()
			if spins%256 == 255 {
				time.Sleep(100 * time.Microsecond)
			}
		}
	}
}

// flush flushes ep through a completion and returns its status.
func flush(tb testing.TB, ep *EP, ifaces ...*Iface) ucs.Status {
	tb.Helper()
	done := false
	comp := &uct.Completion{Count: 1, Func: func(*uct.Completion) { done = true }}
	st := ep.Flush(0, comp)
	if st != ucs.InProgress {
		return st
	}
	progressUntil(tb, func() bool { return done }, append(ifaces, ep.iface)...)
	return comp.Status()
}

// region is registered memory of a test.
type testRegion struct {
	mem  []byte
	memh *Memh
	key  []byte
	rkey uct.RkeyBundle
}

// register registers n bytes with md, packs and unpacks the key; all is
// released at the end of the test.
func register(tb testing.TB, md *MD, n int) *testRegion {
	tb.Helper()
	r := &testRegion{mem: make([]byte, n)}
	h, err := md.MemReg(unsafe.Pointer(&r.mem[0]), n, uct.MemAccessDefault)
	if err != nil {
		tb.Fatal(err)
	}
	r.memh = h.(*Memh)
	if r.key, err = md.MkeyPack(nil, h); err != nil {
		tb.Fatal(err)
	}
	if r.rkey, err = (&Component{}).RkeyUnpack(r.key); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		(&Component{}).RkeyRelease(r.rkey)
		md.MemDereg(h)
	})
	return r
}

// base returns the address of the region's first byte.
func (r *testRegion) base() uint64 { return uint64(uintptr(unsafe.Pointer(&r.mem[0]))) }

// snapshot returns a copy of the region, read after the puts written into
// it (it takes the region's lock, which orders it after them).
func (r *testRegion) snapshot() []byte {
	r.memh.r.mu.Lock()
	defer r.memh.r.mu.Unlock()
	return append([]byte(nil), r.mem...)
}

// logBuffer collects the package's log.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// capturedLog is the logger that openIface gives the ifaces it opens
// without one, when set (by captureLog).
var capturedLog ucs.Logger

// captureLog sends the log of the ifaces opened afterwards in the test
// (by openIface, or with logger(l) in their params) to a buffer, up to
// LogWarn.
func captureLog(tb testing.TB) *logBuffer { return captureLogAt(tb, ucs.LogWarn) }

// captureLogAt is captureLog up to level.
func captureLogAt(tb testing.TB, level ucs.LogLevel) *logBuffer {
	l := &logBuffer{}
	old := capturedLog
	capturedLog = ucs.NewLogger(l, "", level)
	tb.Cleanup(func() { capturedLog = old })
	return l
}

// testHello is the hello of a client that means to reach i from an iface
// of its own with a made-up id.
func testHello(i *Iface) handshake {
	return handshake{ifaceID: i.id, clientID: 0xc11e47, connID: randomID()}
}
