package self

import (
	"testing"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
	"github.com/goshmem/goshmem/uct/uctest"
)

func TestAMTracer(t *testing.T) {
	iface, ep, _ := setup(t, make([]byte, 64))
	var ts uct.AMTracerSetter = iface
	var l uctest.TraceLog
	if err := ts.SetAMTracer(l.Tracer, uctest.TraceArg); err != nil {
		t.Fatal(err)
	}
	handled := 0
	iface.SetAMHandler(1, func(any, []byte, uint32) ucs.Status { handled++; return ucs.OK }, nil, uct.CBFlagSync)

	short := []byte{8, 7, 6, 5, 4, 3, 2, 1, 'a', 'b'}
	if s := ep.AMShort(1, 0x0102030405060708, []byte("ab")); s != ucs.OK {
		t.Fatal(s)
	}
	if _, s := ep.AMBcopy(1, func(d []byte) int { return copy(d, "bcopy") }, 0); s != ucs.OK {
		t.Fatal(s)
	}
	if s := ep.AMZcopy(1, []byte("hd"), []uct.IOV{{Buffer: []byte("zc")}, {Buffer: []byte("py")}}, 0, nil); s != ucs.OK {
		t.Fatal(s)
	}
	if _, s := ep.AMBcopy(1, func([]byte) int { return -1 }, 0); s != ucs.ErrInvalidParam {
		t.Fatalf("bad pack: %v", s)
	}
	if s := ep.AMShort(9, 7, nil); s != ucs.OK {
		t.Fatal(s)
	}
	iface.Progress()
	want := []uctest.TraceEvent{
		uctest.Ev(uct.AMTraceSend, 1, short),
		uctest.Ev(uct.AMTraceSend, 1, []byte("bcopy")),
		uctest.Ev(uct.AMTraceSend, 1, []byte("hdzcpy")),
		uctest.Ev(uct.AMTraceSendDrop, 1, nil),
		uctest.Ev(uct.AMTraceSend, 9, []byte{7, 0, 0, 0, 0, 0, 0, 0}),
		uctest.Ev(uct.AMTraceRecv, 1, short),
		uctest.Ev(uct.AMTraceRecv, 1, []byte("bcopy")),
		uctest.Ev(uct.AMTraceRecv, 1, []byte("hdzcpy")),
		uctest.Ev(uct.AMTraceRecvDrop, 9, []byte{7, 0, 0, 0, 0, 0, 0, 0}),
	}
	uctest.CheckTrace(t, "self", l.Take(), want)
	if handled != 3 {
		t.Errorf("handled %d, want 3", handled)
	}

	ts.SetAMTracer(nil, nil)
	ep.AMShort(1, 1, nil)
	ep.AMBcopy(1, func(d []byte) int { return copy(d, "x") }, 0)
	ep.AMZcopy(1, nil, nil, 0, nil)
	ep.AMShort(9, 1, nil)
	iface.Progress()
	if ev := l.Take(); len(ev) != 0 {
		t.Errorf("removed tracer was called: %+v", ev)
	}
	if handled != 6 {
		t.Errorf("handled %d, want 6", handled)
	}
}
