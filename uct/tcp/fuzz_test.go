package tcp

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// FuzzMkeyDecode checks that the key decoder either fails with
// ucs.ErrInvalidParam or returns a key that satisfies every invariant and
// encodes back to the same bytes.
func FuzzMkeyDecode(f *testing.F) {
	good := (&mkey{id: 0x1122334455667788, addr: 0x7f12_3456_0000, length: 1 << 20, token: 99}).encode()
	f.Add(good)
	f.Add([]byte{})
	f.Add(good[:20])
	f.Add(make([]byte, MkeyPackedSize))
	f.Add((&mkey{id: 1, addr: 1, length: ^uint64(0), token: 1}).encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := decodeMkey(b)
		if err != nil {
			if !errors.Is(err, ucs.ErrInvalidParam) {
				t.Fatalf("error %v is not ErrInvalidParam", err)
			}
			return
		}
		if k.id == 0 || k.token == 0 || k.length == 0 || k.addr == 0 || k.addr+k.length > maxAddr || k.addr+k.length < k.addr {
			t.Fatalf("accepted %+v", k)
		}
		if !bytes.Equal(k.encode(), b) {
			t.Fatalf("%x decodes to %+v, which encodes differently", b, k)
		}
	})
}

// FuzzIfaceAddrDecode checks the iface address decoder the same way.
func FuzzIfaceAddrDecode(f *testing.F) {
	f.Add((&ifaceAddr{ip: net.IPv4(127, 0, 0, 1), port: 4000, id: 7}).encode())
	f.Add((&ifaceAddr{ip: net.ParseIP("fd00::1"), port: 1, id: 1}).encode())
	f.Add([]byte{})
	f.Add(make([]byte, IfaceAddrLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := decodeIfaceAddr(b)
		if err != nil {
			if !errors.Is(err, ucs.ErrInvalidAddr) {
				t.Fatalf("error %v is not ErrInvalidAddr", err)
			}
			return
		}
		if a.port == 0 || a.id == 0 || a.ip.IsUnspecified() || a.ip.IsMulticast() || (len(a.ip) != 4 && len(a.ip) != 16) {
			t.Fatalf("accepted %+v", a)
		}
		if !bytes.Equal(a.encode(), b) {
			t.Fatalf("%x decodes to %+v, which encodes differently", b, a)
		}
	})
}

// FuzzDeviceAddrDecode checks the device address decoder the same way.
func FuzzDeviceAddrDecode(f *testing.F) {
	f.Add((&deviceAddr{family: 4, loopback: true, host: hostID()}).encode())
	f.Add((&deviceAddr{family: 6}).encode())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := decodeDeviceAddr(b)
		if err != nil {
			if !errors.Is(err, ucs.ErrInvalidAddr) {
				t.Fatalf("error %v is not ErrInvalidAddr", err)
			}
			return
		}
		if (d.family != 4 && d.family != 6) || d.loopback != (d.host != 0) {
			t.Fatalf("accepted %+v", d)
		}
		if !bytes.Equal(d.encode(), b) {
			t.Fatalf("%x decodes to %+v, which encodes differently", b, d)
		}
	})
}

// FuzzFrameHeaderDecode checks that a frame header from the wire never
// yields a type the reader did not allow, an AM id beyond uct.AMMaxID, or a
// body length beyond the limits of its type.
func FuzzFrameHeaderDecode(f *testing.F) {
	for _, h := range []struct {
		typ, id uint8
		n       int
	}{{frameAM, 0, 0}, {frameAM, uct.AMMaxID - 1, DefaultRxSegSize}, {framePut, 0, putHeaderLen},
		{framePut, 0, putHeaderLen + maxPutLen}, {frameAck, 0, ackBodyLen}, {frameFlush, 0, 0}, {31, 0, 0},
		{frameGet, 0, getHeaderLen}, {frameGetRep, 0, getRepHeaderLen + 8}, {frameEPClose, 0, 0},
		{frameIfaceClose, 0, ackBodyLen}, {frameAlive, 0, 0}, {frameAtomic, 0, atomicHeaderLen},
		{frameAtomicRep, 0, atomicRepLen}} {
		b := make([]byte, frameHeaderLen)
		putFrameHeader(b, h.typ, h.id, h.n)
		f.Add(b, clientToServer)
		f.Add(b, serverToClient)
		f.Add(b, clientToServer|serverToClient) // a shared connection
	}
	f.Add([]byte{1, 2, 3}, uint32(0xffffffff))
	f.Fuzz(func(t *testing.T, b []byte, allowed uint32) {
		h, err := decodeFrameHeader(b, allowed, DefaultRxSegSize)
		if err != nil {
			if !errors.Is(err, ucs.ErrInvalidParam) {
				t.Fatalf("error %v is not ErrInvalidParam", err)
			}
			return
		}
		switch {
		case allowed&(1<<h.typ) == 0:
			t.Fatalf("accepted type %d, allowed %#x", h.typ, allowed)
		case h.typ == frameAM && (h.id >= uct.AMMaxID || h.len > DefaultRxSegSize):
			t.Fatalf("accepted AM id %d of %d bytes", h.id, h.len)
		case h.typ == framePut && (h.id != 0 || h.len < putHeaderLen || h.len > putHeaderLen+maxPutLen):
			t.Fatalf("accepted put of %d bytes", h.len)
		case h.typ == frameAck && (h.id != 0 || h.len != ackBodyLen):
			t.Fatalf("accepted ack of %d bytes", h.len)
		case (h.typ == frameFlush || h.typ == frameEPClose || h.typ == frameAlive) && (h.id != 0 || h.len != 0):
			t.Fatalf("accepted frame of type %d with %d bytes", h.typ, h.len)
		case h.typ == frameIfaceClose && (h.id != 0 || h.len != ackBodyLen):
			t.Fatalf("accepted iface close of %d bytes", h.len)
		case h.typ == frameGet && (h.id != 0 || h.len != getHeaderLen):
			t.Fatalf("accepted get of %d bytes", h.len)
		case h.typ == frameGetRep && (h.id != 0 || h.len < getRepHeaderLen || h.len > getRepHeaderLen+maxPutLen):
			t.Fatalf("accepted get reply of %d bytes", h.len)
		case h.typ == frameAtomic && (h.id != 0 || h.len != atomicHeaderLen):
			t.Fatalf("accepted atomic of %d bytes", h.len)
		case h.typ == frameAtomicRep && (h.id != 0 || h.len != atomicRepLen):
			t.Fatalf("accepted atomic reply of %d bytes", h.len)
		case h.typ < frameAM || h.typ > frameAtomicRep:
			t.Fatalf("accepted type %d", h.typ)
		}
		e := make([]byte, frameHeaderLen)
		putFrameHeader(e, h.typ, h.id, int(h.len))
		if !bytes.Equal(e, b) {
			t.Fatalf("%x decodes to %+v, which encodes as %x", b, h, e)
		}
	})
}

// FuzzHandshakeDecode checks that the handshake decoder accepts only
// messages of the expected type and exact length, with the ids their type
// needs and no reserved bit set, which encode back to the same bytes.
func FuzzHandshakeDecode(f *testing.F) {
	hello := handshake{typ: hsHello, ifaceID: 5, clientID: 6, connID: 7}
	hello.nonce[0] = 1
	helloEP := handshake{typ: hsHelloEP, ifaceID: 5, epID: 8, clientID: 6, connID: 7, flags: hsFlagOneWay}
	useMine := handshake{typ: hsChallenge, verdict: hsUseMine, connID: 9}
	for _, m := range []handshake{hello, helloEP, {typ: hsChallenge}, useMine, {typ: hsProof}} {
		f.Add(m.encode(), m.typ)
	}
	f.Add([]byte{}, hsHello)
	f.Add(make([]byte, hsLen(hsHello)), uint8(0))
	f.Fuzz(func(t *testing.T, b []byte, typ uint8) {
		m, err := decodeHandshake(b, typ)
		if err != nil {
			if !errors.Is(err, ucs.ErrInvalidParam) {
				t.Fatalf("error %v is not ErrInvalidParam", err)
			}
			return
		}
		if m.typ != typ || len(b) != hsLen(typ) {
			t.Fatalf("accepted %+v from %d bytes", m, len(b))
		}
		switch typ {
		case hsHello, hsHelloEP:
			if m.ifaceID == 0 || m.clientID == 0 || m.connID == 0 || (typ == hsHelloEP) != (m.epID != 0) || m.flags&^hsFlagOneWay != 0 {
				t.Fatalf("accepted the hello %+v", m)
			}
		case hsChallenge:
			if m.verdict > hsUseMine || (m.verdict == hsUseMine) != (m.connID != 0) {
				t.Fatalf("accepted the challenge %+v", m)
			}
		}
		if !bytes.Equal(m.encode(), b) {
			t.Fatalf("%x decodes to %+v, which encodes differently", b, m)
		}
	})
}

// FuzzEPAddrDecode checks that the EP address decoder accepts only a
// well-formed iface address followed by a non-zero ep id, and fails every
// other input with ucs.ErrInvalidAddr.
func FuzzEPAddrDecode(f *testing.F) {
	good := append((&ifaceAddr{ip: net.IPv4(127, 0, 0, 1), port: 4000, id: 7}).encode(), 1, 2, 3, 4, 5, 6, 7, 8)
	f.Add(good)
	f.Add(good[:IfaceAddrLen])
	f.Add(append(append([]byte(nil), good[:IfaceAddrLen]...), make([]byte, 8)...))
	f.Add([]byte{})
	f.Add(make([]byte, EPAddrLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, id, err := decodeEPAddr(b)
		if err != nil {
			if !errors.Is(err, ucs.ErrInvalidAddr) {
				t.Fatalf("error %v is not ErrInvalidAddr", err)
			}
			return
		}
		if len(b) != EPAddrLen || id == 0 || a.id == 0 || a.port == 0 {
			t.Fatalf("accepted %x", b)
		}
		if !bytes.Equal(a.encode(), b[:IfaceAddrLen]) {
			t.Fatalf("%x decodes to %+v, which encodes differently", b, a)
		}
	})
}

// FuzzReadHello checks that the server's first read accepts only an hsHello
// or an hsHelloEP (with non-zero ids, an ep id exactly in an hsHelloEP),
// fails everything else with ucs.ErrInvalidParam (or a short read), and
// never reads past the message.
func FuzzReadHello(f *testing.F) {
	h := handshake{typ: hsHello, ifaceID: 5, clientID: 6, connID: 7}
	f.Add(h.encode())
	h = handshake{typ: hsHelloEP, ifaceID: 5, epID: 9, clientID: 6, connID: 7, flags: hsFlagOneWay}
	f.Add(append(h.encode(), 0xff))
	f.Add((&handshake{typ: hsProof}).encode())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		m, err := readHello(r)
		if err != nil {
			if !errors.Is(err, ucs.ErrInvalidParam) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("error %v", err)
			}
			return
		}
		n := len(b) - r.Len()
		if (m.typ != hsHello && m.typ != hsHelloEP) || n != hsLen(m.typ) || m.ifaceID == 0 || m.clientID == 0 || m.connID == 0 || (m.typ == hsHelloEP) != (m.epID != 0) {
			t.Fatalf("accepted %+v from %d bytes", m, n)
		}
		if !bytes.Equal(m.encode(), b[:n]) {
			t.Fatalf("%x decodes to %+v, which encodes differently", b[:n], m)
		}
	})
}

// FuzzGetHeaderDecode checks that get headers are decoded without panics
// and that no length over the limit passes.
func FuzzGetHeaderDecode(f *testing.F) {
	b := make([]byte, getHeaderLen)
	(&getHeader{key: 1, token: 2, raddr: 4096, length: 8, id: 7}).encode(b)
	f.Add(b)
	(&getHeader{length: maxPutLen + 1}).encode(b)
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < getHeaderLen {
			return // the reader always passes getHeaderLen bytes
		}
		g, err := decodeGetHeader(b[:getHeaderLen])
		if err != nil {
			if !errors.Is(err, ucs.ErrInvalidParam) {
				t.Fatalf("error %v is not ErrInvalidParam", err)
			}
			return
		}
		if g.length > maxPutLen {
			t.Fatalf("accepted a get of %d bytes", g.length)
		}
		var again [getHeaderLen]byte
		g.encode(again[:])
		if !bytes.Equal(again[:], b[:getHeaderLen]) {
			t.Fatalf("decode/encode changed %x to %x", b[:getHeaderLen], again)
		}
	})
}
