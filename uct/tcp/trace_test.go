package tcp

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

func (l *traceLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ev)
}

// sameEvents reports whether got holds the events of want, in any order.
func sameEvents(got, want []traceEvent) bool {
	if len(got) != len(want) {
		return false
	}
	used := make([]bool, len(got))
next:
	for _, w := range want {
		for k, g := range got {
			if !used[k] && g.typ == w.typ && g.id == w.id && bytes.Equal(g.data, w.data) {
				used[k] = true
				continue next
			}
		}
		return false
	}
	return true
}

func TestAMTracer(t *testing.T) {
	captureLog(t) // the dropped message is logged
	md := testMD(t)
	a, b := openIface(t, md, nil), openIface(t, md, nil)
	var ts uct.AMTracerSetter = a
	var sent, recv traceLog
	if err := ts.SetAMTracer(sent.tracer, "arg"); err != nil {
		t.Fatal(err)
	}
	b.SetAMTracer(recv.tracer, "arg")
	var handled sync.WaitGroup
	h := func(any, []byte, uint32) ucs.Status { handled.Done(); return ucs.OK }
	b.SetAMHandler(1, h, nil, uct.CBFlagSync)
	b.SetAMHandler(2, h, nil, uct.CBFlagAsync)
	ep := connect(t, a, b)

	short := []byte{8, 7, 6, 5, 4, 3, 2, 1, 'a', 'b'}
	handled.Add(4)
	if s := ep.AMShort(1, 0x0102030405060708, []byte("ab")); s != ucs.OK {
		t.Fatal(s)
	}
	if _, s := ep.AMBcopy(1, func(d []byte) int { return copy(d, "bcopy") }, 0); s != ucs.OK {
		t.Fatal(s)
	}
	if s := ep.AMZcopy(1, []byte("hd"), []uct.IOV{{Buffer: []byte("zc")}, {Buffer: []byte("py")}}, 0, nil); s.IsErr() {
		t.Fatal(s)
	}
	if _, s := ep.AMBcopy(1, func([]byte) int { return -1 }, 0); s != ucs.ErrInvalidParam {
		t.Fatalf("bad pack: %v", s)
	}
	if _, s := ep.AMBcopy(2, func(d []byte) int { return copy(d, "async") }, 0); s != ucs.OK {
		t.Fatal(s)
	}
	if s := ep.AMShort(9, 7, nil); s != ucs.OK { // no handler
		t.Fatal(s)
	}
	wantSent := []traceEvent{
		{uct.AMTraceSend, 1, short},
		{uct.AMTraceSend, 1, []byte("bcopy")},
		{uct.AMTraceSend, 1, []byte("hdzcpy")},
		{uct.AMTraceSendDrop, 1, nil},
		{uct.AMTraceSend, 2, []byte("async")},
		{uct.AMTraceSend, 9, []byte{7, 0, 0, 0, 0, 0, 0, 0}},
	}
	if got := sent.take(); !sameEvents(got, wantSent) {
		t.Errorf("sent: traced %+v, want %+v", got, wantSent)
	}
	progressUntil(t, func() bool { return recv.len() >= 5 }, a, b)
	handled.Wait()
	wantRecv := []traceEvent{
		{uct.AMTraceRecv, 1, short},
		{uct.AMTraceRecv, 1, []byte("bcopy")},
		{uct.AMTraceRecv, 1, []byte("hdzcpy")},
		{uct.AMTraceRecv, 2, []byte("async")},
		{uct.AMTraceRecvDrop, 9, []byte{7, 0, 0, 0, 0, 0, 0, 0}},
	}
	if got := recv.take(); !sameEvents(got, wantRecv) {
		t.Errorf("received: traced %+v, want %+v", got, wantRecv)
	}

	// A send on a destroyed EP is refused after the message was built.
	dead, err := a.EPCreate(&uct.EPParams{DeviceAddr: b.DeviceAddress(), IfaceAddr: b.Address()})
	if err != nil {
		t.Fatal(err)
	}
	dead.Destroy()
	if s := dead.AMShort(3, 1, []byte("x")); !s.IsErr() {
		t.Fatalf("AMShort on a destroyed EP: %v", s)
	}
	if got, want := sent.take(), []traceEvent{{uct.AMTraceSendDrop, 3, []byte{1, 0, 0, 0, 0, 0, 0, 0, 'x'}}}; !sameEvents(got, want) {
		t.Errorf("destroyed EP: traced %+v, want %+v", got, want)
	}

	a.SetAMTracer(nil, nil)
	b.SetAMTracer(nil, nil)
	handled.Add(4)
	ep.AMShort(1, 1, nil)
	ep.AMBcopy(1, func(d []byte) int { return copy(d, "x") }, 0)
	ep.AMZcopy(1, []byte("h"), nil, 0, nil)
	ep.AMBcopy(2, func(d []byte) int { return copy(d, "y") }, 0)
	if st := flush(t, ep, a, b); st != ucs.OK {
		t.Fatal(st)
	}
	done := make(chan struct{})
	go func() { handled.Wait(); close(done) }()
	progressUntil(t, func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	}, a, b)
	if ev := append(sent.take(), recv.take()...); len(ev) != 0 {
		t.Errorf("removed tracers were called: %+v", ev)
	}
}
