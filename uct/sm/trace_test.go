package sm

import (
	"bytes"
	"sync"
	"testing"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// traceEvent is one call of a test tracer.
type traceEvent struct {
	typ  uct.AMTraceType
	id   uint8
	data []byte
}

// traceLog records the calls of a tracer.
type traceLog struct {
	mu sync.Mutex
	ev []traceEvent
}

func (l *traceLog) tracer(arg any, typ uct.AMTraceType, id uint8, data []byte) {
	if arg != "arg" {
		panic("tracer called with the wrong arg")
	}
	l.mu.Lock()
	l.ev = append(l.ev, traceEvent{typ, id, append([]byte(nil), data...)})
	l.mu.Unlock()
}

func (l *traceLog) take() []traceEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	ev := l.ev
	l.ev = nil
	return ev
}

func checkTrace(t *testing.T, what string, got, want []traceEvent) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: traced %d events %+v, want %d %+v", what, len(got), got, len(want), want)
	}
	for k := range want {
		if got[k].typ != want[k].typ || got[k].id != want[k].id || !bytes.Equal(got[k].data, want[k].data) {
			t.Errorf("%s: event %d is %+v, want %+v", what, k, got[k], want[k])
		}
	}
}

func TestAMTracer(t *testing.T) {
	rx, tx := openTestIface(t), openTestIface(t)
	var _ uct.AMTracerSetter = rx
	var sent, recv traceLog
	if err := tx.SetAMTracer(sent.tracer, "arg"); err != nil {
		t.Fatal(err)
	}
	if err := rx.SetAMTracer(recv.tracer, "arg"); err != nil {
		t.Fatal(err)
	}
	handled := 0
	rx.SetAMHandler(1, func(any, []byte, uint32) ucs.Status { handled++; return ucs.OK }, nil, uct.CBFlagSync)
	e, err := tx.EPCreate(&uct.EPParams{DeviceAddr: rx.DeviceAddress(), IfaceAddr: rx.Address()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Destroy()

	short := []byte{0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, 'a', 'b'}
	if s := e.AMShort(1, 0x0102030405060708, []byte("ab")); s != ucs.OK {
		t.Fatal(s)
	}
	if _, s := e.AMBcopy(1, func(d []byte) int { return copy(d, "bcopy") }, 0); s != ucs.OK {
		t.Fatal(s)
	}
	if s := e.AMZcopy(1, []byte("hd"), []uct.IOV{{Buffer: []byte("zc")}, {Buffer: []byte("py")}}, 0, nil); s != ucs.OK {
		t.Fatal(s)
	}
	if _, s := e.AMBcopy(1, func([]byte) int { return -1 }, 0); s != ucs.ErrInvalidParam {
		t.Fatalf("bad pack: %v", s)
	}
	if s := e.AMShort(9, 7, nil); s != ucs.OK { // no handler for 9
		t.Fatal(s)
	}
	checkTrace(t, "send", sent.take(), []traceEvent{
		{uct.AMTraceSend, 1, short},
		{uct.AMTraceSend, 1, []byte("bcopy")},
		{uct.AMTraceSend, 1, []byte("hdzcpy")},
		{uct.AMTraceSendDrop, 1, nil},
		{uct.AMTraceSend, 9, []byte{7, 0, 0, 0, 0, 0, 0, 0}},
	})
	for rx.Progress() != 0 {
	}
	checkTrace(t, "receive", recv.take(), []traceEvent{
		{uct.AMTraceRecv, 1, short},
		{uct.AMTraceRecv, 1, []byte("bcopy")},
		{uct.AMTraceRecv, 1, []byte("hdzcpy")},
		{uct.AMTraceRecvDrop, 9, []byte{7, 0, 0, 0, 0, 0, 0, 0}},
	})
	if handled != 3 {
		t.Errorf("handled %d messages, want 3", handled)
	}

	tx.SetAMTracer(nil, nil)
	rx.SetAMTracer(nil, nil)
	e.AMShort(1, 1, nil)
	e.AMBcopy(1, func(d []byte) int { return copy(d, "x") }, 0)
	e.AMZcopy(1, nil, nil, 0, nil)
	for rx.Progress() != 0 {
	}
	if ev := append(sent.take(), recv.take()...); len(ev) != 0 {
		t.Errorf("removed tracers were called: %+v", ev)
	}
	if handled != 6 {
		t.Errorf("handled %d messages, want 6", handled)
	}
}

// TestAMTracerSysv checks that ifaces of the sysv resource trace too.
func TestAMTracerSysv(t *testing.T) {
	md, err := (&SysvComponent{}).OpenMD(SysvMDName, nil)
	if err != nil {
		t.Fatal(err)
	}
	i, err := md.IfaceOpen(nil, &uct.IfaceParams{TLName: SysvTLName, DevName: DevName}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer i.Close()
	ts, ok := i.(uct.AMTracerSetter)
	if !ok {
		t.Fatal("sysv iface is not a uct.AMTracerSetter")
	}
	var l traceLog
	ts.SetAMTracer(l.tracer, "arg")
	e, err := i.EPCreate(&uct.EPParams{DeviceAddr: i.DeviceAddress(), IfaceAddr: i.Address()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Destroy()
	i.SetAMHandler(2, func(any, []byte, uint32) ucs.Status { return ucs.OK }, nil, uct.CBFlagSync)
	e.AMBcopy(2, func(d []byte) int { return copy(d, "sysv") }, 0)
	i.Progress()
	checkTrace(t, "sysv", l.take(), []traceEvent{{uct.AMTraceSend, 2, []byte("sysv")}, {uct.AMTraceRecv, 2, []byte("sysv")}})
}

// TestAMTracerMalformed checks that a malformed cell is traced as dropped.
func TestAMTracerMalformed(t *testing.T) {
	i := openTestIface(t)
	var l traceLog
	i.SetAMTracer(l.tracer, "arg")
	c, tk := i.rx.claim()
	if c == nil {
		t.Fatal("no cell")
	}
	publish(c, tk, uct.AMMaxID+1, 4)
	i.Progress()
	checkTrace(t, "malformed", l.take(), []traceEvent{{uct.AMTraceRecvDrop, uct.AMMaxID + 1, nil}})
}
