package ucp

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
)

// amEnv is a sender worker a with an endpoint to a receiver worker b (which
// is a itself for the self transport), in a context with FeatureAM.
type amEnv struct {
	c    *Context
	a, b *Worker
	ab   *Endpoint
}

// amTransports are the paths every active-message test runs over: UCX_TLS
// (set whatever the environment says), and whether the receiver is the
// sender's own worker.
var amTransports = []struct {
	name, tls string
	self      bool
	lane      string // the AM lane
	rndv      string // the rendezvous protocol
}{
	{"self", "all", true, "self", protoAMRndvGet},
	{"sm", "all", false, "posix", protoAMRndvGet},
	{"tcp", "tcp,self", false, "tcp", protoAMRndv}, // no key: over the network auto puts
}

func newAMEnv(t *testing.T, tls string, self bool) *amEnv {
	t.Helper()
	if tls != "" {
		t.Setenv("UCX_TLS", tls)
	}
	c, err := Init(new(Params).SetFeatures(FeatureAM|FeatureRMA), nil)
	if err != nil {
		t.Fatalf("Init: %v", err)
	}
	t.Cleanup(c.Cleanup)
	e := &amEnv{c: c, a: newWorker(t, c)}
	e.b = e.a
	if !self {
		e.b = newWorker(t, c)
	}
	addr, _ := e.b.Address()
	if e.ab, err = e.a.NewEndpoint(new(EPParams).SetAddress(addr)); err != nil {
		t.Fatalf("NewEndpoint: %v", err)
	}
	return e
}

// wait progresses both workers until cond holds; it fails the test if that
// takes unreasonably long (a hang, not a speed check).
func (e *amEnv) wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		e.a.Progress()
		if e.b != e.a {
			e.b.Progress()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still waiting after 60 s", what)
		}
	}
}

func (e *amEnv) waitReq(t *testing.T, what string, r *Request, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if r == nil {
		return
	}
	e.wait(t, what, r.IsCompleted)
	if err := r.Status(); err != nil {
		t.Fatalf("%s: request ended with %v", what, err)
	}
	r.Free()
}

// amMsg is what a test handler saw of one message.
type amMsg struct {
	header, data []byte
	attr         uint64
	length       int
	desc         *AMDesc
	reply        *Endpoint
}

// recorder returns a callback that records messages; rndv messages are
// kept (InProgress) for the test to receive.
// record makes recorder worker b's handler of active message id (with
// flags) and returns what it records.
func (e *amEnv) record(t *testing.T, id uint32, flags AMHandlerFlags) *[]amMsg {
	t.Helper()
	got := new([]amMsg)
	if err := e.b.SetAMRecvHandler(new(AMHandlerParam).SetID(id).SetCB(recorder(got)).SetFlags(flags)); err != nil {
		t.Fatal(err)
	}
	return got
}

func recorder(got *[]amMsg) AMRecvCallback {
	return func(arg any, header, data []byte, p *AMRecvParam) ucs.Status {
		m := amMsg{header: bytes.Clone(header), data: bytes.Clone(data), attr: p.RecvAttr, length: p.Length, reply: p.ReplyEP}
		*got = append(*got, m)
		if p.RecvAttr&AMRecvAttrFlagRNDV != 0 {
			(*got)[len(*got)-1].desc = p.Desc
			return ucs.InProgress
		}
		return ucs.OK
	}
}

func pattern(n, seed int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + seed)
	}
	return b
}

// TestAMSendRecv sends messages of every size class with every protocol
// choice over each transport and checks what the handler gets: header,
// data, length and attributes, and rendezvous data received into a user
// buffer.
func TestAMSendRecv(t *testing.T) {
	for _, tr := range amTransports {
		t.Run(tr.name, func(t *testing.T) {
			e := newAMEnv(t, tr.tls, tr.self)
			if l := e.ab.Query().Lanes; len(l) == 0 || l[0].Transport != tr.lane {
				t.Fatalf("lanes %+v, want an AM lane on %s", l, tr.lane)
			}
			maxHdr := e.a.Query().MaxAMHeader
			if maxHdr <= 0 {
				t.Fatalf("MaxAMHeader %d", maxHdr)
			}
			var got []amMsg
			protos, rprotos := map[string]int{}, map[string]int{}
			if err := e.b.SetAMRecvHandler(new(AMHandlerParam).SetID(7).SetCB(recorder(&got)).SetFlags(AMFlagWholeMsg)); err != nil {
				t.Fatal(err)
			}
			sizes := []int{0, 1, 8, 100, 8192 - amHdrLen - 3, 8192, 65536 + 13, 1 << 20}
			for _, n := range sizes {
				for _, hl := range []int{0, 3, maxHdr} {
					for _, mode := range []struct {
						name  string
						flags AMSendFlags
					}{{"auto", 0}, {"eager", AMSendFlagEager}, {"rndv", AMSendFlagRNDV}} {
						what := fmt.Sprintf("%d bytes, header %d, %s", n, hl, mode.name)
						got = got[:0]
						hdr, data := pattern(hl, n+1), pattern(n, hl)
						// Always a request, to see its protocol.
						param := new(RequestParam).SetAMSendFlags(mode.flags).SetOpAttrFlags(OpAttrFlagNoImmCmpl)
						r, err := e.ab.AMSendNBX(7, hdr, data, param)
						if err != nil {
							t.Fatalf("%s: send: %v", what, err)
						}
						if r == nil {
							t.Fatalf("%s: no request with OpAttrFlagNoImmCmpl", what)
						}
						protos[strings.Fields(r.Query().DebugString)[0]]++
						e.wait(t, what+": delivery", func() bool { return len(got) > 0 })
						m := got[0]
						wantRndv := mode.flags == AMSendFlagRNDV || (mode.flags == 0 && n >= amDefaultRndvThresh)
						if gotRndv := m.attr&AMRecvAttrFlagRNDV != 0; gotRndv != wantRndv {
							t.Fatalf("%s: rendezvous %v, want %v (attr %#x)", what, gotRndv, wantRndv, m.attr)
						}
						if !bytes.Equal(m.header, hdr) || m.length != n {
							t.Fatalf("%s: header %d bytes (equal %v), length %d", what, len(m.header), bytes.Equal(m.header, hdr), m.length)
						}
						if m.attr&AMRecvAttrFieldReplyEP != 0 {
							t.Errorf("%s: reply endpoint without AMSendFlagReply", what)
						}
						if wantRndv {
							buf := make([]byte, n)
							rr, err := e.b.AMRecvDataNBX(m.desc, buf, new(RequestParam).SetOpAttrFlags(OpAttrFlagNoImmCmpl))
							if rr != nil {
								rprotos[strings.Fields(rr.Query().DebugString)[0]]++
							}
							e.waitReq(t, what+": receive", rr, err)
							m.data = buf
						}
						if !bytes.Equal(m.data, data) {
							t.Fatalf("%s: data differs (%d bytes received)", what, len(m.data))
						}
						e.waitReq(t, what+": send request", r, nil)
						if len(got) != 1 {
							t.Fatalf("%s: %d deliveries", what, len(got))
						}
					}
				}
			}
			if err := e.ab.Flush(); err != nil {
				t.Fatalf("flush: %v", err)
			}
			// Rendezvous data is got where a lane to the sender gets (cma,
			// self here), put by the sender over the network, and pushed
			// when the key does not fit beside the header (a header of
			// MaxAMHeader).
			t.Logf("protocols of the requests: %v, of the receives: %v", protos, rprotos)
			for _, p := range []string{tr.rndv, protoAMRndv, protoAMFrag} {
				if protos[p] == 0 {
					t.Errorf("no request used %s: %v", p, protos)
				}
			}
			if rprotos[protoAMRecv] == 0 || rprotos[protoAMRecvGet]+rprotos[protoAMRecvRkeyPtr]+rprotos[protoAMRecvPut] == 0 {
				t.Errorf("receives %v: want some pushed, some got, copied or put", rprotos)
			}
		})
	}
}

// TestAMRndvSchemes receives a rendezvous active message over every
// transport and UCX_RNDV_SCHEME into a user buffer (AMRecvDataNBX), and
// checks the data and the protocols both sides took: the scheme's, as for
// tag messages (the sender puts into the receive's buffer under put_zcopy,
// and under auto over the network).
func TestAMRndvSchemes(t *testing.T) {
	for _, sch := range []string{"auto", "get_zcopy", "put_zcopy", "am"} {
		for _, tr := range amTransports {
			t.Run(sch+"/"+tr.name, func(t *testing.T) {
				t.Setenv("UCX_RNDV_SCHEME", sch)
				e := newAMEnv(t, tr.tls, tr.self)
				got := e.record(t, 9, AMFlagWholeMsg)
				data := pattern(1<<20, 5)
				param := new(RequestParam).SetAMSendFlags(AMSendFlagRNDV).SetOpAttrFlags(OpAttrFlagNoImmCmpl)
				r, err := e.ab.AMSendNBX(9, []byte("hdr"), data, param)
				if err != nil || r == nil {
					t.Fatalf("send: %v, %v; want a request", r, err)
				}
				e.wait(t, "delivery", func() bool { return len(*got) > 0 })
				buf := make([]byte, len(data))
				rr, err := e.b.AMRecvDataNBX((*got)[0].desc, buf, new(RequestParam).SetOpAttrFlags(OpAttrFlagNoImmCmpl))
				if err != nil || rr == nil {
					t.Fatalf("receive: %v, %v; want a request", rr, err)
				}
				rproto := strings.Fields(rr.Query().DebugString)[0]
				e.waitReq(t, "receive", rr, nil)
				e.waitReq(t, "send", r, nil)
				if !bytes.Equal(buf, data) {
					t.Fatal("data differs")
				}
				sproto := strings.Fields(r.Query().DebugString)[0]
				want := map[string][2]string{
					"get_zcopy": {protoAMRndvGet, protoAMRecvGet},
					"put_zcopy": {protoAMRndvPut, protoAMRecvPut},
					"am":        {protoAMRndvAM, protoAMRecv},
				}[sch]
				if sch == "auto" {
					want = map[string][2]string{
						"self": {protoAMRndvGet, protoAMRecvRkeyPtr},
						"sm":   {protoAMRndvGet, protoAMRecvGet},
						"tcp":  {protoAMRndvPut, protoAMRecvPut},
					}[tr.name]
				}
				if sproto != want[0] || rproto != want[1] {
					t.Errorf("send %s, receive %s; want %s, %s", sproto, rproto, want[0], want[1])
				}
			})
		}
	}
}

// TestAMQueueOrder sends many messages without letting the receiver
// progress, so that the transport runs out of room and sends wait in the
// worker's queue, and checks that every message arrives once, in order.
func TestAMQueueOrder(t *testing.T) {
	for _, tr := range amTransports {
		t.Run(tr.name, func(t *testing.T) {
			t.Setenv("UCX_TCP_TX_QUEUE_LEN", "16k") // so that tcp runs out of room too
			t.Setenv("UCX_TCP_RX_QUEUE_LEN", "16k")
			e := newAMEnv(t, tr.tls, tr.self)
			var got []int
			cb := func(arg any, header, data []byte, p *AMRecvParam) ucs.Status {
				got = append(got, int(header[0])|int(header[1])<<8)
				if len(data) != 3000 || data[2999] != header[0] {
					t.Errorf("message %d: %d bytes", int(header[0])|int(header[1])<<8, len(data))
				}
				return ucs.OK
			}
			if err := e.b.SetAMRecvHandler(new(AMHandlerParam).SetID(1).SetCB(cb)); err != nil {
				t.Fatal(err)
			}
			const n = 3000
			var reqs []*Request
			queued := 0
			for i := 0; i < n; i++ {
				data := make([]byte, 3000)
				data[2999] = byte(i)
				r, err := e.ab.AMSendNBX(1, []byte{byte(i), byte(i >> 8)}, data, nil)
				if err != nil {
					t.Fatalf("send %d: %v", i, err)
				}
				if r != nil {
					queued++
					reqs = append(reqs, r)
				}
			}
			t.Logf("%d of %d sends waited in the queue", queued, n)
			for _, r := range reqs {
				e.waitReq(t, "queued send", r, nil)
			}
			e.wait(t, "deliveries", func() bool { return len(got) >= n })
			for i, v := range got {
				if v != i%65536 {
					t.Fatalf("message %d arrived as number %d", v, i)
				}
			}
			if len(got) != n {
				t.Errorf("%d deliveries, want %d", len(got), n)
			}
		})
	}
}

// TestAMReplyAndDrop covers reply endpoints (found through the hello a
// sender sends, with no endpoint created by the test on the receiver),
// dropped rendezvous messages, persistent data kept past the callback and
// released later, and request callbacks.
func TestAMReplyAndDrop(t *testing.T) {
	for _, tr := range amTransports {
		t.Run(tr.name, func(t *testing.T) {
			e := newAMEnv(t, tr.tls, tr.self)
			// The receiver echoes id 1 to id 2 on the reply endpoint.
			echo := func(arg any, header, data []byte, p *AMRecvParam) ucs.Status {
				if p.RecvAttr&AMRecvAttrFieldReplyEP == 0 || p.ReplyEP == nil {
					t.Errorf("no reply endpoint (attr %#x)", p.RecvAttr)
					return ucs.OK
				}
				if _, err := p.ReplyEP.AMSendNBX(2, header, data, new(RequestParam).SetAMSendFlags(AMSendFlagEager)); err != nil {
					t.Errorf("reply: %v", err)
				}
				return ucs.OK
			}
			if err := e.b.SetAMRecvHandler(new(AMHandlerParam).SetID(1).SetCB(echo)); err != nil {
				t.Fatal(err)
			}
			var replies []amMsg
			if err := e.a.SetAMRecvHandler(new(AMHandlerParam).SetID(2).SetCB(recorder(&replies))); err != nil {
				t.Fatal(err)
			}
			for _, n := range []int{5, 20000} {
				r, err := e.ab.AMSendNBX(1, []byte("hdr"), pattern(n, 1), new(RequestParam).SetAMSendFlags(AMSendFlagReply|AMSendFlagEager))
				e.waitReq(t, "send with reply", r, err)
				e.wait(t, "reply", func() bool { return len(replies) > 0 })
				if string(replies[0].header) != "hdr" || !bytes.Equal(replies[0].data, pattern(n, 1)) {
					t.Errorf("%d bytes: reply header %q, %d data bytes", n, replies[0].header, len(replies[0].data))
				}
				replies = replies[:0]
			}

			// A rendezvous message the handler does not take completes its
			// sender's request, with the callback and user data.
			dropped := 0
			drop := func(arg any, header, data []byte, p *AMRecvParam) ucs.Status {
				if p.RecvAttr&AMRecvAttrFlagRNDV == 0 || data != nil || p.Desc == nil || p.Length != 1000 {
					t.Errorf("rendezvous delivery: attr %#x data %d length %d", p.RecvAttr, len(data), p.Length)
				}
				dropped++
				if arg.(string) == "release" {
					e.b.AMDataRelease(p.Desc)
				}
				return ucs.OK
			}
			for _, how := range []string{"return", "release"} {
				if err := e.b.SetAMRecvHandler(new(AMHandlerParam).SetID(3).SetCB(drop).SetArg(how)); err != nil {
					t.Fatal(err)
				}
				var cbStatus error = ucs.InProgress
				var cbUser any
				param := new(RequestParam).SetAMSendFlags(AMSendFlagRNDV).SetUserData("ud").
					SetCallback(func(_ *Request, st error, ud any) { cbStatus, cbUser = st, ud })
				r, err := e.ab.AMSendNBX(3, nil, make([]byte, 1000), param)
				if err != nil || r == nil {
					t.Fatalf("rendezvous send: %v %v", r, err)
				}
				e.wait(t, "dropped rendezvous", r.IsCompleted)
				if cbStatus != nil || cbUser != "ud" || r.Status() != nil {
					t.Errorf("%s: callback status %v user %v, request %v", how, cbStatus, cbUser, r.Status())
				}
				r.Free()
			}
			if dropped != 2 {
				t.Errorf("%d rendezvous deliveries, want 2", dropped)
			}

			// Persistent data: kept past the callback, then released.
			var kept []*AMDesc
			keep := func(arg any, header, data []byte, p *AMRecvParam) ucs.Status {
				if p.RecvAttr&AMRecvAttrFlagData == 0 || p.Desc == nil {
					t.Errorf("persistent handler without AMRecvAttrFlagData: %#x", p.RecvAttr)
					return ucs.OK
				}
				kept = append(kept, p.Desc)
				return ucs.InProgress
			}
			if err := e.b.SetAMRecvHandler(new(AMHandlerParam).SetID(4).SetCB(keep).SetFlags(AMFlagPersistentData)); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 10; i++ {
				r, err := e.ab.AMSendNBX(4, nil, pattern(100+i, i), nil)
				e.waitReq(t, "persistent send", r, err)
			}
			e.wait(t, "persistent deliveries", func() bool { return len(kept) == 10 })
			for i, d := range kept {
				if !bytes.Equal(d.Data(), pattern(100+i, i)) || d.Length() != 100+i || d.IsRNDV() {
					t.Errorf("kept message %d changed: %d bytes", i, len(d.Data()))
				}
				if i%2 == 0 {
					buf := make([]byte, d.Length())
					if r, err := e.b.AMRecvDataNBX(d, buf, nil); r != nil || err != nil || !bytes.Equal(buf, pattern(100+i, i)) {
						t.Errorf("AMRecvDataNBX of kept eager data: %v %v", r, err)
					}
				} else {
					e.b.AMDataRelease(d)
				}
				if d.Data() != nil {
					t.Errorf("descriptor %d still has data after release", i)
				}
				e.b.AMDataRelease(d) // a second release does nothing
			}
			if _, err := e.b.AMRecvDataNBX(kept[0], make([]byte, 200), nil); !errors.Is(err, ucs.ErrInvalidParam) {
				t.Errorf("receive from a consumed descriptor: %v", err)
			}
		})
	}
}

// TestAMErrors checks the argument errors of the API.
func TestAMErrors(t *testing.T) {
	e := newAMEnv(t, "all", false)
	maxHdr := e.a.Query().MaxAMHeader
	cb := func(any, []byte, []byte, *AMRecvParam) ucs.Status { return ucs.OK }
	for _, tt := range []struct {
		name string
		err  error
		want error
	}{
		{"handler without id", e.a.SetAMRecvHandler(new(AMHandlerParam).SetCB(cb)), ucs.ErrInvalidParam},
		{"handler id too large", e.a.SetAMRecvHandler(new(AMHandlerParam).SetID(MaxAMID + 1).SetCB(cb)), ucs.ErrInvalidParam},
		{"handler flags", e.a.SetAMRecvHandler(new(AMHandlerParam).SetID(1).SetCB(cb).SetFlags(1 << 9)), ucs.ErrInvalidParam},
		{"nil params", e.a.SetAMRecvHandler(nil), ucs.ErrInvalidParam},
		{"remove handler", e.a.SetAMRecvHandler(new(AMHandlerParam).SetID(MaxAMID)), nil},
		{"id too large", sendErr(e.ab.AMSendNBX(MaxAMID+1, nil, nil, nil)), ucs.ErrInvalidParam},
		{"header too large", sendErr(e.ab.AMSendNBX(1, make([]byte, maxHdr+1), nil, nil)), ucs.ErrExceedsLimit},
		{"eager and rndv", sendErr(e.ab.AMSendNBX(1, nil, nil, new(RequestParam).SetAMSendFlags(AMSendFlagEager|AMSendFlagRNDV))), ucs.ErrInvalidParam},
		{"rndv with force immediate", sendErr(e.ab.AMSendNBX(1, nil, nil, new(RequestParam).SetAMSendFlags(AMSendFlagRNDV).SetOpAttrFlags(OpAttrFlagForceImmCmpl))), ucs.ErrNoResource},
		{"recv nil descriptor", sendErr(e.a.AMRecvDataNBX(nil, nil, nil)), ucs.ErrInvalidParam},
	} {
		if !errors.Is(tt.err, tt.want) && !(tt.want == nil && tt.err == nil) {
			t.Errorf("%s: %v, want %v", tt.name, tt.err, tt.want)
		}
	}
	// A message for an id without handler is dropped; the next one is not.
	var got []amMsg
	r, err := e.ab.AMSendNBX(9, nil, []byte("lost"), nil)
	e.waitReq(t, "send without handler", r, err)
	e.b.Progress()
	if err := e.b.SetAMRecvHandler(new(AMHandlerParam).SetID(9).SetCB(recorder(&got))); err != nil {
		t.Fatal(err)
	}
	r, err = e.ab.AMSendNBX(9, nil, []byte("kept"), new(RequestParam).SetOpAttrFlags(OpAttrFlagNoImmCmpl))
	if err != nil || r == nil {
		t.Fatalf("send with NoImmCmpl: %v %v", r, err)
	}
	e.waitReq(t, "send with NoImmCmpl", r, err)
	e.wait(t, "delivery", func() bool { return len(got) > 0 })
	if string(got[0].data) != "kept" || len(got) != 1 {
		t.Errorf("got %q (%d messages)", got[0].data, len(got))
	}

	// Without FeatureAM the API refuses.
	c, err := Init(new(Params).SetFeatures(FeatureRMA), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Cleanup()
	w, err := c.NewWorker(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Destroy()
	if err := w.SetAMRecvHandler(new(AMHandlerParam).SetID(1).SetCB(cb)); !errors.Is(err, ucs.ErrUnsupported) {
		t.Errorf("handler without FeatureAM: %v", err)
	}
	if got := w.Query().MaxAMHeader; got != maxHdr {
		t.Errorf("MaxAMHeader without FeatureAM: %d, want %d (a property of the transports)", got, maxHdr)
	}
	addr, _ := e.b.Address()
	ep, err := w.NewEndpoint(new(EPParams).SetAddress(addr))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ep.AMSendNBX(1, nil, nil, nil); !errors.Is(err, ucs.ErrUnsupported) {
		t.Errorf("send without FeatureAM: %v", err)
	}
	ep.Close(CloseModeForce)
}

func sendErr(_ *Request, err error) error { return err }

// TestAMMalformed hands the receiver malformed messages straight from the
// transport: each is dropped (and logged) without a panic or a delivery,
// and a valid message still arrives after them.
func TestAMMalformed(t *testing.T) {
	for _, tr := range amTransports {
		t.Run(tr.name, func(t *testing.T) {
			e := newAMEnv(t, tr.tls, tr.self)
			var got []amMsg
			if err := e.b.SetAMRecvHandler(new(AMHandlerParam).SetID(1).SetCB(recorder(&got))); err != nil {
				t.Fatal(err)
			}
			src := e.a.Query().UID
			hdr := func(h amHeader, payload string) []byte {
				b := make([]byte, amHdrLen)
				h.put(b)
				return append(b, payload...)
			}
			// Fragments go as the tag messages' (of the AM family).
			first := func(msg, total uint64, payload string) []byte {
				return encodeTag(amTagFirst, tagHeader{tag: 1, src: src, msg: msg, total: total, flags: hdrFlags(famAM, 1, 0)}, []byte(payload))
			}
			middle := func(msg, off uint64, payload string) []byte {
				return encodeTag(amTagMiddle, tagHeader{src: src, msg: msg, off: off}, []byte(payload))
			}
			for _, c := range []struct {
				id uint8
				m  []byte
			}{
				{amUCP, []byte{}},
				{amUCP, []byte("short")},
				{amUCP, hdr(amHeader{typ: 0, src: src}, "")},
				{amUCP, hdr(amHeader{typ: amTypeEnd, src: src}, "")},
				{amUCP, hdr(amHeader{typ: amSingle, id: 1, hlen: 10, src: src}, "abc")},
				{amUCP, hdr(amHeader{typ: amSingle, id: 1, flags: 0x80, src: src}, "abc")},
				{amUCP, hdr(amHeader{typ: amSingle, id: 1, src: src, msg: 5, total: 2}, "abc")},
				{amUCP, hdr(amHeader{typ: amHello, src: src, msg: 12345}, "GWA\x01")},
				{amUCP, hdr(amHeader{typ: amHello, src: src}, "GWA\x01junk")},
				{amTagMiddle, middle(77, 3, "abc")},
				{amTagFirst, first(5, 2, "habc")}, // longer than its message
				// A first fragment, then a fragment that skips ahead.
				{amTagFirst, first(6, 10, "habc")},
				{amTagMiddle, middle(6, 5, "abc")},
				{amTagMiddle, middle(6, 3, "defghij")},
			} {
				m := c.m
				e.ab.am.sendMu.mu.Lock()
				_, st := e.ab.am.ep.AMBcopy(c.id, func(dst []byte) int { return copy(dst, m) }, 0)
				e.ab.am.sendMu.mu.Unlock()
				if st != ucs.OK {
					t.Fatalf("raw send: %v", st)
				}
			}
			r, err := e.ab.AMSendNBX(1, []byte("h"), []byte("valid"), nil)
			e.waitReq(t, "valid send", r, err)
			e.wait(t, "valid delivery", func() bool { return len(got) > 0 })
			if len(got) != 1 || string(got[0].data) != "valid" {
				t.Errorf("deliveries %+v, want only the valid message", got)
			}
		})
	}
}

func FuzzAMHeader(f *testing.F) {
	add := func(h amHeader, payload string) {
		b := make([]byte, amHdrLen)
		h.put(b)
		f.Add(append(b, payload...))
	}
	add(amHeader{typ: amSingle, id: 3, hlen: 2, src: 9}, "hhdata")
	add(amHeader{typ: amHello, src: 9}, "GWA\x01")
	f.Add([]byte{})
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, p, err := decodeAMHeader(b)
		if err != nil {
			if !errors.Is(err, ucs.ErrInvalidParam) {
				t.Fatalf("error %v is not ErrInvalidParam", err)
			}
			return
		}
		// What decodes re-encodes to the same bytes, and the header's
		// lengths agree with the payload.
		re := make([]byte, amHdrLen)
		h.put(re)
		if !bytes.Equal(re, b[:amHdrLen]) || len(p) != len(b)-amHdrLen {
			t.Fatalf("re-encoding differs")
		}
		if uint64(h.hlen) > uint64(len(p)) {
			t.Fatalf("header length %d beyond payload %d", h.hlen, len(p))
		}
	})
}

// TestAMRndvMemh sends rendezvous data that lies in mapped memory given as
// the request's memory handle: the receiver takes it through the key of
// that memory, copying it from the memory mapped at the receiver too
// (rkey_ptr, as a tag receive does: the receive is one, rndvFetch), and
// nothing is registered for the send.
func TestAMRndvMemh(t *testing.T) {
	e := newAMEnv(t, "all", false)
	m, err := e.c.MemMap(new(MemMapParams).SetLength(1 << 20).SetFlags(MemMapAllocate))
	if err != nil {
		t.Fatal(err)
	}
	defer e.c.MemUnmap(m)
	src := unsafe.Slice((*byte)(m.Address()), 1<<20)
	copy(src, pattern(1<<20, 3))
	var got []amMsg
	if err := e.b.SetAMRecvHandler(new(AMHandlerParam).SetID(1).SetCB(recorder(&got))); err != nil {
		t.Fatal(err)
	}
	param := new(RequestParam).SetAMSendFlags(AMSendFlagRNDV)
	param.Memh, param.OpAttrMask = m, param.OpAttrMask|OpAttrFieldMemh
	r, err := e.ab.AMSendNBX(1, nil, src[100:], param)
	if err != nil || r == nil {
		t.Fatalf("send: %v %v", r, err)
	}
	if q := r.Query().DebugString; !strings.HasPrefix(q, protoAMRndvGet) {
		t.Errorf("protocol %q, want %s", q, protoAMRndvGet)
	}
	e.wait(t, "delivery", func() bool { return len(got) > 0 })
	buf := make([]byte, len(src)-100)
	rr, err := e.b.AMRecvDataNBX(got[0].desc, buf, new(RequestParam).SetOpAttrFlags(OpAttrFlagNoImmCmpl))
	if rr == nil {
		t.Fatalf("receive: no request with OpAttrFlagNoImmCmpl: %v", err)
	}
	if q := rr.Query().DebugString; !strings.HasPrefix(q, protoAMRecvRkeyPtr) {
		t.Errorf("receive protocol %q, want %s", q, protoAMRecvRkeyPtr)
	}
	e.waitReq(t, "receive", rr, err)
	e.waitReq(t, "send", r, nil)
	if !bytes.Equal(buf, src[100:]) {
		t.Error("data differs")
	}
}

// TestAMAllocs checks that a small eager message costs no allocation, to
// send or to receive, over shared memory.
func TestAMAllocs(t *testing.T) {
	e := newAMEnv(t, "all", false)
	n := 0
	if err := e.b.SetAMRecvHandler(new(AMHandlerParam).SetID(1).SetCB(func(any, []byte, []byte, *AMRecvParam) ucs.Status { n++; return ucs.OK })); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 8)
	allocs := testing.AllocsPerRun(1000, func() {
		if r, err := e.ab.AMSendNBX(1, nil, data, nil); r != nil || err != nil {
			t.Fatalf("send: %v %v", r, err)
		}
		for want := n + 1; n < want; {
			e.b.Progress()
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per message", allocs)
	}
}

// TestAMTwoEndpoints sends fragmented messages on two endpoints from the
// same worker to the same worker at once: their fragments interleave at the
// receiver, which must keep the messages apart.
func TestAMTwoEndpoints(t *testing.T) {
	for _, tr := range amTransports[1:] {
		t.Run(tr.name, func(t *testing.T) {
			e := newAMEnv(t, tr.tls, false)
			addr, _ := e.b.Address()
			ep2, err := e.a.NewEndpoint(new(EPParams).SetAddress(addr))
			if err != nil {
				t.Fatal(err)
			}
			var got []amMsg
			if err := e.b.SetAMRecvHandler(new(AMHandlerParam).SetID(1).SetCB(recorder(&got))); err != nil {
				t.Fatal(err)
			}
			const n, size = 8, 60000
			var reqs []*Request
			for i := 0; i < n; i++ {
				ep := e.ab
				if i%2 == 1 {
					ep = ep2
				}
				r, err := ep.AMSendNBX(1, []byte{byte(i)}, pattern(size, i), new(RequestParam).SetAMSendFlags(AMSendFlagEager))
				if err != nil {
					t.Fatal(err)
				}
				reqs = append(reqs, r)
			}
			for _, r := range reqs {
				e.waitReq(t, "send", r, nil)
			}
			e.wait(t, "deliveries", func() bool { return len(got) >= n })
			seen := map[byte]bool{}
			for _, m := range got {
				i := m.header[0]
				if seen[i] || !bytes.Equal(m.data, pattern(size, int(i))) {
					t.Errorf("message %d: duplicate %v or data differs", i, seen[i])
				}
				seen[i] = true
			}
			if len(got) != n {
				t.Errorf("%d deliveries, want %d", len(got), n)
			}
		})
	}
}

// TestAMAlignment checks that a worker created with an AM alignment hands
// its handlers data that starts at a multiple of it, whatever the protocol.
func TestAMAlignment(t *testing.T) {
	for _, tr := range amTransports {
		t.Run(tr.name, func(t *testing.T) {
			if tr.tls != "" {
				t.Setenv("UCX_TLS", tr.tls)
			}
			c, err := Init(new(Params).SetFeatures(FeatureAM), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Cleanup)
			const align = 64
			b, err := c.NewWorker(new(WorkerParams).SetAMAlignment(align))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(b.Destroy)
			a := b
			if !tr.self {
				a = newWorker(t, c)
			}
			e := &amEnv{c: c, a: a, b: b}
			addr, _ := b.Address()
			if e.ab, err = a.NewEndpoint(new(EPParams).SetAddress(addr)); err != nil {
				t.Fatal(err)
			}
			var got []amMsg
			misaligned := 0
			cb := func(arg any, header, data []byte, p *AMRecvParam) ucs.Status {
				if len(data) > 0 && uintptr(unsafe.Pointer(&data[0]))%align != 0 {
					misaligned++
				}
				return recorder(&got)(arg, header, data, p)
			}
			if err := b.SetAMRecvHandler(new(AMHandlerParam).SetID(1).SetCB(cb)); err != nil {
				t.Fatal(err)
			}
			for _, n := range []int{1, 100, 20000} {
				got = got[:0]
				r, err := e.ab.AMSendNBX(1, []byte("odd"), pattern(n, 5), new(RequestParam).SetAMSendFlags(AMSendFlagEager))
				e.waitReq(t, "send", r, err)
				e.wait(t, "delivery", func() bool { return len(got) > 0 })
				if !bytes.Equal(got[0].data, pattern(n, 5)) {
					t.Errorf("%d bytes: data differs", n)
				}
			}
			if misaligned > 0 {
				t.Errorf("%d messages with misaligned data", misaligned)
			}
		})
	}
}

// TestAMRndvSenderCloses closes the sender's endpoint (flush or force
// mode), or cancels the send, while a rendezvous active message is
// announced and the receiver's handler kept it without receiving its data
// yet, over every transport. The send completes (a canceled one with only
// the sender progressing, whatever the receiver does), and the sender
// then overwrites its buffer, as it may. The announcement is revoked: the
// receiver's AMRecvDataNBX never succeeds with other data than was sent
// (it fails with ucs.ErrCanceled), and the sender forgets the send once
// the receiver answered the revoke.
func TestAMRndvSenderCloses(t *testing.T) {
	const cancel = -1
	for _, tr := range amTransports {
		for _, mode := range []int{CloseModeFlush, CloseModeForce, cancel} {
			name := map[int]string{CloseModeFlush: "flush", CloseModeForce: "force", cancel: "cancel"}[mode]
			t.Run(tr.name+"/"+name, func(t *testing.T) {
				e := newAMEnv(t, tr.tls, tr.self)
				got := e.record(t, 7, 0)
				src := pattern(rndvMsgBytes, 1)
				sent := bytes.Clone(src)
				sr, err := e.ab.AMSendNBX(7, nil, src, new(RequestParam).SetAMSendFlags(AMSendFlagRNDV))
				if err != nil || sr == nil {
					t.Fatalf("send: %v, %v; want a request", sr, err)
				}
				// Only the receiver progresses until the close: the sender
				// answers nothing before it.
				announced := func() bool { return len(*got) == 1 }
				if tr.self {
					e.wait(t, "the announcement", announced)
				} else {
					progressUntil(t, e.b, "the announcement", announced)
				}
				desc := (*got)[0].desc
				if mode == cancel {
					sr.Cancel()
					progressUntil(t, e.a, "the canceled send", sr.IsCompleted)
					e.wait(t, "the revoke", func() bool {
						e.b.am.mu.Lock()
						defer e.b.am.mu.Unlock()
						return desc.revoked
					})
				} else {
					cr, err := e.ab.EPCloseNB(mode)
					if err != nil {
						t.Fatalf("close: %v", err)
					}
					if cr != nil {
						e.wait(t, "the close", cr.IsCompleted)
						cr.Free()
					}
				}
				sst := sendEnded(t, func(what string, c func() bool) { e.wait(t, what, c) }, sr, src)
				buf := make([]byte, rndvMsgBytes)
				rr, err := e.b.AMRecvDataNBX(desc, buf, nil)
				if err == nil && rr != nil {
					e.wait(t, "the receive", rr.IsCompleted)
					err = rr.Status()
					rr.Free()
				}
				switch {
				case err == nil && !bytes.Equal(buf, sent):
					t.Fatalf("the receive succeeded with other data than was sent (first difference at %d)", firstDiff(buf, sent))
				case sst != nil && err == nil:
					t.Fatal("the send was canceled, its receive succeeded")
				case err != nil && !errors.Is(err, ucs.ErrCanceled):
					t.Fatalf("the receive failed with %v, want ucs.ErrCanceled", err)
				}
				t.Logf("send: %v; receive: %v", sst, err)
				e.wait(t, "the receiver's answer", func() bool {
					e.a.proto.lock()
					defer e.a.proto.unlock()
					return len(e.a.proto.sends) == 0
				})
			})
		}
	}
}

// TestAMRndvAllocatesItsDescriptor: an active message sent by rendezvous,
// over shared memory (the receiver gets) and tcp (the sender puts),
// received into a user buffer by AMRecvDataNBX, allocates one object once
// warm: the descriptor its handler kept, which is the user's and never
// recycled (a stale one fails cleanly). The rest is recycled, as for tag
// and stream messages (TestRndvAllocatesNothing).
func TestAMRndvAllocatesItsDescriptor(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop what is put back: allocations mean nothing")
	}
	for _, tr := range amTransports[1:] {
		for _, n := range []int{64 << 10, 1 << 20} {
			t.Run(fmt.Sprintf("%s/%d", tr.name, n), func(t *testing.T) {
				e := newAMEnv(t, tr.tls, false)
				var desc *AMDesc
				cb := func(_ any, _, _ []byte, p *AMRecvParam) ucs.Status {
					if p.RecvAttr&AMRecvAttrFlagRNDV == 0 {
						t.Errorf("a message of %d bytes came with attributes %#x, not by rendezvous", n, p.RecvAttr)
						return ucs.OK
					}
					desc = p.Desc
					return ucs.InProgress
				}
				if err := e.b.SetAMRecvHandler(new(AMHandlerParam).SetID(1).SetCB(cb)); err != nil {
					t.Fatal(err)
				}
				src, dst := make([]byte, n), make([]byte, n)
				param := new(RequestParam).SetAMSendFlags(AMSendFlagRNDV)
				message := func() {
					r, err := e.ab.AMSendNBX(1, nil, src, param)
					if err != nil {
						t.Fatalf("send: %v", err)
					}
					for desc == nil {
						e.a.Progress()
						e.b.Progress()
					}
					rr, err := e.b.AMRecvDataNBX(desc, dst, nil)
					if err != nil {
						t.Fatalf("receive: %v", err)
					}
					desc = nil
					for _, q := range []*Request{rr, r} {
						for q != nil && !q.IsCompleted() {
							e.a.Progress()
							e.b.Progress()
						}
						if q != nil {
							if err := q.Status(); err != nil {
								t.Fatal(err)
							}
							q.Free()
						}
					}
				}
				message()
				if a := allocsPerRun(20, message); a > 1 {
					t.Errorf("%v allocations per message, want 1 (the descriptor)", a)
				}
			})
		}
	}
}
