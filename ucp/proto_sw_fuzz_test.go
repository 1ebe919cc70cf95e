package ucp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// Offsets of the fields of a software message header (see swHeader.put).
const (
	swOffSrc   = 4
	swOffToken = 12
	swOffRaddr = 20
)

// swSeeds are real software messages of every kind: the message id, and the
// header followed by the payload.
func swSeeds() (ids []uint8, msgs [][]byte) {
	add := func(id uint8, h swHeader, payload []byte) {
		b := make([]byte, swHeaderLen+len(payload))
		h.put(b)
		copy(b[swHeaderLen:], payload)
		ids, msgs = append(ids, id), append(msgs, b)
	}
	add(amSwPut, swHeader{src: 7, token: 9, raddr: 16}, []byte("payload"))
	add(amSwPut, swHeader{src: 7, token: 9, raddr: 0}, nil)
	add(amSwGetReq, swHeader{src: 7, token: 9, raddr: 8, a: 100, reqID: 3}, nil)
	add(amSwGetRep, swHeader{a: 64, reqID: 3}, []byte("data"))
	add(amSwGetRep, swHeader{status: int8(ucs.ErrInvalidAddr), reqID: 3}, nil)
	add(amSwAtomicReq, swHeader{op: uint8(uct.AtomicOpAdd), size: 8, src: 7, token: 9, raddr: 64, a: 5}, nil)
	add(amSwAtomicReq, swHeader{op: uint8(uct.AtomicOpCSwap), size: 4, fetch: 1, src: 7, token: 9, raddr: 68, a: 1, b: 2, reqID: 4}, nil)
	add(amSwAtomicRep, swHeader{b: 42, reqID: 4}, nil)
	add(amSwFlushReq, swHeader{src: 7, reqID: 5}, nil)
	add(amSwFlushRep, swHeader{reqID: 5}, nil)
	add(amSwWireup, swHeader{src: 7}, []byte("GWA\x01"))
	return ids, msgs
}

// numSwIDs is the number of software message ids, amSwWireup to amSwPut.
const numSwIDs = amSwPut - amSwWireup + 1

// FuzzSwHeader checks the decoder of software message headers: it accepts
// only headers whose fields are in range, which encode back to the same
// bytes, and hands the rest of the message over as the payload.
func FuzzSwHeader(f *testing.F) {
	_, msgs := swSeeds()
	for _, m := range msgs {
		f.Add(m)
	}
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		h, payload, err := decodeSwHeader(data)
		if err != nil {
			if !errors.Is(err, ucs.ErrInvalidParam) {
				t.Fatalf("error %v is not ErrInvalidParam", err)
			}
			return
		}
		switch {
		case h.status > 0:
			t.Fatalf("accepted status %d", h.status)
		case h.fetch > 1:
			t.Fatalf("accepted fetch %d", h.fetch)
		case h.size != 0 && h.size != 4 && h.size != 8:
			t.Fatalf("accepted size %d", h.size)
		case h.op > uint8(uct.AtomicOpCSwap):
			t.Fatalf("accepted op %d", h.op)
		}
		if !bytes.Equal(payload, data[swHeaderLen:]) {
			t.Fatalf("payload of %d bytes from a %d-byte message", len(payload), len(data))
		}
		b := make([]byte, swHeaderLen)
		h.put(b)
		if !bytes.Equal(b, data[:swHeaderLen]) {
			t.Fatalf("%x decodes to %+v, which encodes as %x", data[:swHeaderLen], h, b)
		}
	})
}

// FuzzSwRecv feeds software messages to a worker's receive path, as a peer
// could send them. The worker has mapped one page in the middle of three
// (registered Go memory) and has an endpoint to itself, so that requests
// naming it get replies (and wireup messages find it). The fuzzer picks the
// message kind, its bytes, and
// with flags may give it the mapping's real token (bit 0), take its target
// address as an offset from the mapping's base (bit 1) and name the worker
// itself as the sender (bit 2). Whatever comes in, nothing outside the
// mapping changes, and a put that fits the mapping with the right token
// lands there.
func FuzzSwRecv(f *testing.F) {
	c := newContextParams(f, new(Params).SetFeatures(FeatureRMA|FeatureAMO32|FeatureAMO64).SetLogger(ucs.DiscardLogger())) // refused requests are logged
	w := newWorker(f, c)
	addr, _ := w.Address()
	ep, err := w.NewEndpoint(new(EPParams).SetAddress(addr))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { ep.Close(CloseModeForce) })
	page := unix.Getpagesize()
	mem := make([]byte, 4*page)
	off := page - int(uintptr(unsafe.Pointer(&mem[0])))%page // the middle page starts page aligned
	region := mem[off : off+page]
	m := mapMem(f, c, new(MemMapParams).SetAddress(unsafe.Pointer(&region[0])).SetLength(page))
	if m.token == 0 {
		f.Fatal("registered memory has no software token")
	}
	base := uint64(uintptr(m.Address()))

	ids, msgs := swSeeds()
	for i, msg := range msgs {
		f.Add(amSwPut-ids[i], msg, uint8(7))
		f.Add(amSwPut-ids[i], msg, uint8(0))
	}
	// Wireup messages with the worker's own address: from itself (it has
	// an endpoint to itself already) and from a worker the address is not
	// of (dropped).
	wireup := make([]byte, swHeaderLen+len(addr))
	(&swHeader{}).put(wireup)
	copy(wireup[swHeaderLen:], addr)
	f.Add(amSwPut-amSwWireup, wireup, uint8(4))
	f.Add(amSwPut-amSwWireup, wireup, uint8(0))
	f.Fuzz(func(t *testing.T, kind uint8, data []byte, flags uint8) {
		id := amSwPut - kind%numSwIDs
		msg := append([]byte(nil), data...)
		if len(msg) >= swHeaderLen {
			if flags&1 != 0 {
				binary.LittleEndian.PutUint64(msg[swOffToken:], m.token)
			}
			if flags&2 != 0 {
				binary.LittleEndian.PutUint64(msg[swOffRaddr:], base+binary.LittleEndian.Uint64(msg[swOffRaddr:]))
			}
			if flags&4 != 0 {
				binary.LittleEndian.PutUint64(msg[swOffSrc:], w.uid)
			}
		}
		for i := range mem {
			mem[i] = 0xee
		}
		if st := w.swRecv(id, msg); st != ucs.OK {
			t.Fatalf("swRecv returned %v", st)
		}
		for i := 0; i < 1000 && w.Progress() > 0; i++ { // deliver the replies to the worker itself
		}
		for i := range mem {
			if (i < off || i >= off+page) && mem[i] != 0xee {
				t.Fatalf("byte %d outside the mapping changed", i-off)
			}
		}
		h, payload, err := decodeSwHeader(msg)
		if err == nil && id == amSwPut && h.token == m.token && h.raddr >= base &&
			h.raddr-base <= uint64(page) && uint64(len(payload)) <= uint64(page)-(h.raddr-base) {
			if o := h.raddr - base; !bytes.Equal(region[o:o+uint64(len(payload))], payload) {
				t.Fatalf("a put of %d bytes at offset %d did not land", len(payload), o)
			}
		}
	})
}
