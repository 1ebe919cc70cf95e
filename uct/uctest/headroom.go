package uctest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// headroomSizes are the receive headrooms the headroom case tries: none
// (the default path), one byte, the size of a small descriptor, and an
// odd size that leaves the data unaligned.
var headroomSizes = []int{0, 1, 40, 333}

// headroomMessages is the number of messages of each headroom run before
// the kept ones are released, and again after.
const headroomMessages = 120

// testRxHeadroom checks uct.IfaceParams.RxHeadroom: out-of-range values
// are refused; an iface opened with n bytes reports n in its attributes
// and hands its AM handlers data with n bytes in front, in the same
// buffer, that Iface.RxHeadroom returns (nil for n = 0), that end where
// the data begins, that the handler may write without touching the data,
// and that stay as written while the handler keeps the data (InProgress
// with CBParamFlagDesc, which every call carries when n > 0) and more
// messages arrive, until ReleaseDesc. Once its buffers are recycled, a
// message sent and delivered allocates nothing, with a headroom or
// without.
//
// The receiving iface is a second one opened by the case, which sends to
// itself: the headroom is a property of the receiver's buffers, whoever
// sent.
func testRxHeadroom(t *testing.T, e *env) {
	for _, n := range []int{-1, uct.MaxRxHeadroom + 1} {
		if i, err := openIface(e.md, e.rid, &uct.IfaceParams{RxHeadroom: n}); !errors.Is(err, ucs.ErrInvalidParam) {
			t.Errorf("IfaceOpen with RxHeadroom %d: %v, want ucs.ErrInvalidParam", n, err)
			if err == nil {
				i.Close()
			}
		}
	}
	ms := e.amMethods()
	if len(ms) == 0 {
		i, err := openIface(e.md, e.rid, &uct.IfaceParams{RxHeadroom: 40})
		if err != nil {
			t.Fatalf("IfaceOpen with RxHeadroom 40: %v", err)
		}
		defer i.Close()
		if a, err := i.Query(); err != nil || a.RxHeadroom != 0 {
			t.Errorf("an iface without active messages reports RxHeadroom %d (err %v), want 0", a.RxHeadroom, err)
		}
		t.Skip("skipped: transport claims no active message")
	}
	modes := []uct.CBFlags{uct.CBFlagSync}
	if e.attr.Flags&uct.IfaceFlagCBAsync != 0 {
		modes = append(modes, uct.CBFlagAsync)
	}
	for _, n := range headroomSizes {
		for _, mode := range modes {
			name := "sync"
			if mode == uct.CBFlagAsync {
				name = "async"
			}
			t.Run(fmt.Sprintf("%d/%s", n, name), func(t *testing.T) { e.runHeadroom(t, n, mode, ms) })
		}
	}
}

// keptMsg is a message a headroom handler kept: its sequence number, its
// headroom and its data, as handed.
type keptMsg struct {
	seq        uint64
	room, data []byte
}

// headroomRecv is the receiving side of a headroom run: its handler checks
// each message and keeps the ones it may (every other one).
type headroomRecv struct {
	t     *testing.T
	iface uct.Iface
	n     int // the headroom asked for

	mu   sync.Mutex // async handlers may run on a transport goroutine
	got  int
	kept []keptMsg
	bad  int // messages that failed a check
}

// errorf reports a failed check of a message: the first few, then only
// their number (at the end of the run).
func (r *headroomRecv) errorf(format string, args ...any) {
	if r.bad++; r.bad <= 3 {
		r.t.Errorf(format, args...)
	}
}

// handle is the AM handler of a headroom run. A message is its sequence
// number (8 bytes) followed by headroomMsg's pattern.
func (r *headroomRecv) handle(_ any, data []byte, flags uint32) ucs.Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got++
	seq := binary.LittleEndian.Uint64(data)
	want := headroomMsg(len(data), seq)
	if string(data) != string(want) {
		r.errorf("message %d: %s, want %s", seq, brief(data), brief(want))
		return ucs.OK
	}
	room := r.iface.RxHeadroom(data)
	if r.n == 0 {
		if room != nil {
			r.errorf("message %d: RxHeadroom of an iface without headroom returned %d bytes", seq, len(room))
		}
	} else {
		if flags&uct.CBParamFlagDesc == 0 {
			r.errorf("message %d: handler flags %#x without CBParamFlagDesc on an iface with a headroom", seq, flags)
			return ucs.OK
		}
		if len(room) != r.n || cap(room) != r.n {
			r.errorf("message %d: headroom of %d bytes (capacity %d), want %d", seq, len(room), cap(room), r.n)
			return ucs.OK
		}
		if end, start := unsafe.Add(unsafe.Pointer(&room[0]), r.n), unsafe.Pointer(unsafe.SliceData(data)); end != start {
			r.errorf("message %d: headroom ends at %p, data begins at %p", seq, end, start)
			return ucs.OK
		}
		copy(room, headroomStamp(r.n, seq))
		if string(data) != string(want) {
			r.errorf("message %d: writing the headroom changed the data to %s", seq, brief(data))
		}
	}
	if flags&uct.CBParamFlagDesc != 0 && seq%2 == 0 {
		r.kept = append(r.kept, keptMsg{seq, room, data})
		return ucs.InProgress
	}
	return ucs.OK
}

// headroomMsg returns the message of sequence number seq of n bytes (8 at
// least): seq, then a pattern of it.
func headroomMsg(n int, seq uint64) []byte {
	b := pattern(n, 2000+seq)
	binary.LittleEndian.PutUint64(b, seq)
	return b
}

// headroomStamp is what a handler writes in the headroom of message seq.
func headroomStamp(n int, seq uint64) []byte { return pattern(n, 5000+seq) }

// runHeadroom opens an iface with a headroom of n bytes and handlers of
// mode, sends it messages of every method of ms from itself, and checks
// them and their headrooms (see testRxHeadroom).
func (e *env) runHeadroom(t *testing.T, n int, mode uct.CBFlags, ms []method) {
	h, err := openIface(e.md, e.rid, &uct.IfaceParams{RxHeadroom: n})
	if err != nil {
		t.Fatalf("IfaceOpen with RxHeadroom %d: %v", n, err)
	}
	defer h.Close()
	if a, err := h.Query(); err != nil || a.RxHeadroom != n {
		t.Errorf("iface attributes report RxHeadroom %d (err %v), want %d", a.RxHeadroom, err, n)
	}
	r := &headroomRecv{t: t, iface: h, n: n}
	if err := h.SetAMHandler(amSink, r.handle, nil, mode); err != nil {
		t.Fatalf("set AM handler: %v", err)
	}
	ep, err := h.EPCreate(&uct.EPParams{DeviceAddr: h.DeviceAddress(), IfaceAddr: h.Address()})
	if err != nil {
		t.Fatalf("EPCreate to the iface itself: %v", err)
	}
	defer ep.Destroy()
	e.extra = h
	defer func() { e.extra = nil }()
	// A message sent and delivered allocates nothing, with a headroom (the
	// receive buffers are recycled) or without (the default path, as
	// before there were headrooms); checked first, before the kept
	// buffers of the rounds below fill any free list.
	e.checkAllocs(t, h, ep)
	c := &conn{ep: ep}
	delivered := func() int { r.mu.Lock(); defer r.mu.Unlock(); return r.got }
	seq := uint64(0)
	send := func() {
		for range headroomMessages {
			m := ms[int(seq)%len(ms)]
			sizes := []int{8, 61, 1000, capped(e.maxAM(m))}
			size := min(sizes[int(seq/uint64(len(ms)))%len(sizes)], capped(e.maxAM(m)))
			e.do(t, fmt.Sprintf("AM %s #%d of %d bytes", m, seq, size), e.amOp(c, m, amSink, headroomMsg(size, seq)))
			seq++
		}
		e.waitUntil(t, "delivery of every message", func() bool { return delivered() == int(seq) })
	}
	send()
	r.mu.Lock()
	kept := r.kept
	r.kept = nil
	r.mu.Unlock()
	if n > 0 && len(kept) == 0 {
		t.Fatal("the handler kept no message")
	}
	for _, k := range kept {
		if want := headroomStamp(n, k.seq); string(k.room) != string(want) {
			t.Errorf("headroom of kept message %d changed while more messages arrived: %s, want %s", k.seq, brief(k.room), brief(want))
		}
		if want := headroomMsg(len(k.data), k.seq); string(k.data) != string(want) {
			t.Errorf("kept message %d changed while more messages arrived: %s, want %s", k.seq, brief(k.data), brief(want))
		}
		h.ReleaseDesc(k.data)
	}
	// The released buffers are reused, headroom and all.
	send()
	r.mu.Lock()
	kept, bad := r.kept, r.bad
	r.mu.Unlock()
	if bad > 3 {
		t.Errorf("%d of %d messages failed a check", bad, seq)
	}
	for _, k := range kept {
		h.ReleaseDesc(k.data)
	}
}

// checkAllocs checks that an AM short that ep sends to h, delivered by
// h's Progress, allocates nothing (where the transport claims AM short).
func (e *env) checkAllocs(t *testing.T, h uct.Iface, ep uct.EP) {
	if !e.claims(needAMShort) {
		return
	}
	var delivered int
	if err := h.SetAMHandler(amEcho, func(any, []byte, uint32) ucs.Status { delivered++; return ucs.OK }, nil, uct.CBFlagSync); err != nil {
		t.Fatalf("set AM handler: %v", err)
	}
	// AllocsPerRun rounds down: a transport goroutine's occasional
	// allocation does not count, one per message does.
	allocs := testing.AllocsPerRun(200, func() {
		want := delivered + 1
		for ep.AMShort(amEcho, 0, nil) != ucs.OK {
			h.Progress()
		}
		for delivered < want {
			h.Progress()
		}
	})
	if allocs != 0 {
		t.Errorf("an AM short sent and delivered costs %v allocations, want 0", allocs)
	}
}
