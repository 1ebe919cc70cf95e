package self

import (
	"bytes"
	"sync"
	"testing"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

type traceEvent struct {
	typ  uct.AMTraceType
	id   uint8
	data []byte
}

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

func TestAMTracer(t *testing.T) {
	iface, ep, _ := setup(t, make([]byte, 64))
	var ts uct.AMTracerSetter = iface
	var l traceLog
	if err := ts.SetAMTracer(l.tracer, "arg"); err != nil {
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
	want := []traceEvent{
		{uct.AMTraceSend, 1, short},
		{uct.AMTraceSend, 1, []byte("bcopy")},
		{uct.AMTraceSend, 1, []byte("hdzcpy")},
		{uct.AMTraceSendDrop, 1, nil},
		{uct.AMTraceSend, 9, []byte{7, 0, 0, 0, 0, 0, 0, 0}},
		{uct.AMTraceRecv, 1, short},
		{uct.AMTraceRecv, 1, []byte("bcopy")},
		{uct.AMTraceRecv, 1, []byte("hdzcpy")},
		{uct.AMTraceRecvDrop, 9, []byte{7, 0, 0, 0, 0, 0, 0, 0}},
	}
	got := l.take()
	if len(got) != len(want) {
		t.Fatalf("traced %+v, want %+v", got, want)
	}
	for k := range want {
		if got[k].typ != want[k].typ || got[k].id != want[k].id || !bytes.Equal(got[k].data, want[k].data) {
			t.Errorf("event %d is %+v, want %+v", k, got[k], want[k])
		}
	}
	if handled != 3 {
		t.Errorf("handled %d, want 3", handled)
	}

	ts.SetAMTracer(nil, nil)
	ep.AMShort(1, 1, nil)
	ep.AMBcopy(1, func(d []byte) int { return copy(d, "x") }, 0)
	ep.AMZcopy(1, nil, nil, 0, nil)
	ep.AMShort(9, 1, nil)
	iface.Progress()
	if ev := l.take(); len(ev) != 0 {
		t.Errorf("removed tracer was called: %+v", ev)
	}
	if handled != 6 {
		t.Errorf("handled %d, want 6", handled)
	}
}
