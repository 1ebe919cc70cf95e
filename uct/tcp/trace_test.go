package tcp

import (
	"sync"
	"testing"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
	"github.com/goshmem/goshmem/uct/uctest"
)

func TestAMTracer(t *testing.T) {
	captureLog(t) // the dropped message is logged
	md := testMD(t)
	a, b := openIface(t, md, nil), openIface(t, md, nil)
	var ts uct.AMTracerSetter = a
	var sent, recv uctest.TraceLog
	if err := ts.SetAMTracer(sent.Tracer, uctest.TraceArg); err != nil {
		t.Fatal(err)
	}
	b.SetAMTracer(recv.Tracer, uctest.TraceArg)
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
	wantSent := []uctest.TraceEvent{
		uctest.Ev(uct.AMTraceSend, 1, short),
		uctest.Ev(uct.AMTraceSend, 1, []byte("bcopy")),
		uctest.Ev(uct.AMTraceSend, 1, []byte("hdzcpy")),
		uctest.Ev(uct.AMTraceSendDrop, 1, nil),
		uctest.Ev(uct.AMTraceSend, 2, []byte("async")),
		uctest.Ev(uct.AMTraceSend, 9, []byte{7, 0, 0, 0, 0, 0, 0, 0}),
	}
	if got := sent.Take(); !uctest.SameTrace(got, wantSent) {
		t.Errorf("sent: traced %+v, want %+v", got, wantSent)
	}
	progressUntil(t, func() bool { return recv.Len() >= 5 }, a, b)
	handled.Wait()
	wantRecv := []uctest.TraceEvent{
		uctest.Ev(uct.AMTraceRecv, 1, short),
		uctest.Ev(uct.AMTraceRecv, 1, []byte("bcopy")),
		uctest.Ev(uct.AMTraceRecv, 1, []byte("hdzcpy")),
		uctest.Ev(uct.AMTraceRecv, 2, []byte("async")),
		uctest.Ev(uct.AMTraceRecvDrop, 9, []byte{7, 0, 0, 0, 0, 0, 0, 0}),
	}
	if got := recv.Take(); !uctest.SameTrace(got, wantRecv) {
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
	if got, want := sent.Take(), []uctest.TraceEvent{uctest.Ev(uct.AMTraceSendDrop, 3, []byte{1, 0, 0, 0, 0, 0, 0, 0, 'x'})}; !uctest.SameTrace(got, want) {
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
	if ev := append(sent.Take(), recv.Take()...); len(ev) != 0 {
		t.Errorf("removed tracers were called: %+v", ev)
	}
}
