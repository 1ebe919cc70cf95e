package sm

import (
	"testing"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
	"github.com/goshmem/goshmem/uct/uctest"
)

func TestAMTracer(t *testing.T) {
	rx, tx := openTestIface(t), openTestIface(t)
	var _ uct.AMTracerSetter = rx
	var sent, recv uctest.TraceLog
	if err := tx.SetAMTracer(sent.Tracer, uctest.TraceArg); err != nil {
		t.Fatal(err)
	}
	if err := rx.SetAMTracer(recv.Tracer, uctest.TraceArg); err != nil {
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
	uctest.CheckTrace(t, "send", sent.Take(), []uctest.TraceEvent{
		uctest.Ev(uct.AMTraceSend, 1, short),
		uctest.Ev(uct.AMTraceSend, 1, []byte("bcopy")),
		uctest.Ev(uct.AMTraceSend, 1, []byte("hdzcpy")),
		uctest.Ev(uct.AMTraceSendDrop, 1, nil),
		uctest.Ev(uct.AMTraceSend, 9, []byte{7, 0, 0, 0, 0, 0, 0, 0}),
	})
	for rx.Progress() != 0 {
	}
	uctest.CheckTrace(t, "receive", recv.Take(), []uctest.TraceEvent{
		uctest.Ev(uct.AMTraceRecv, 1, short),
		uctest.Ev(uct.AMTraceRecv, 1, []byte("bcopy")),
		uctest.Ev(uct.AMTraceRecv, 1, []byte("hdzcpy")),
		uctest.Ev(uct.AMTraceRecvDrop, 9, []byte{7, 0, 0, 0, 0, 0, 0, 0}),
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
	if ev := append(sent.Take(), recv.Take()...); len(ev) != 0 {
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
	var l uctest.TraceLog
	ts.SetAMTracer(l.Tracer, uctest.TraceArg)
	e, err := i.EPCreate(&uct.EPParams{DeviceAddr: i.DeviceAddress(), IfaceAddr: i.Address()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Destroy()
	i.SetAMHandler(2, func(any, []byte, uint32) ucs.Status { return ucs.OK }, nil, uct.CBFlagSync)
	e.AMBcopy(2, func(d []byte) int { return copy(d, "sysv") }, 0)
	i.Progress()
	uctest.CheckTrace(t, "sysv", l.Take(), []uctest.TraceEvent{uctest.Ev(uct.AMTraceSend, 2, []byte("sysv")), uctest.Ev(uct.AMTraceRecv, 2, []byte("sysv"))})
}

// TestAMTracerMalformed checks that a malformed cell is traced as dropped.
func TestAMTracerMalformed(t *testing.T) {
	i := openTestIface(t)
	var l uctest.TraceLog
	i.SetAMTracer(l.Tracer, uctest.TraceArg)
	c, tk := i.rx.claim()
	if c == nil {
		t.Fatal("no cell")
	}
	publish(c, tk, uct.AMMaxID+1, 4)
	i.Progress()
	uctest.CheckTrace(t, "malformed", l.Take(), []uctest.TraceEvent{uctest.Ev(uct.AMTraceRecvDrop, uct.AMMaxID+1, nil)})
}
