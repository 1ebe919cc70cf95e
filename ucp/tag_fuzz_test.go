package ucp

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/goshmem/goshmem/ucs"
)

// tagIDs are the uct ids of the tag messages, in the order of
// tagHandlers.
var tagIDs = []uint8{amTagEager, amTagEagerSync, amTagFirst, amTagMiddle, amTagAck, amTagRTS, amTagATS, amTagRTR, amTagData, amTagATP, amTagRevoke}

var tagHandlers = []protoHandler{tagRecvEager, tagRecvEagerSync, fragRecvFirst, fragRecvMiddle, tagRecvAck, rndvRecvRTS, tagRecvATS, tagRecvRTR, rndvRecvData, rndvRecvATP, rndvRecvRevoke}

// encodeTag encodes header h of a tag message of uct id id, as the senders
// do, followed by payload.
func encodeTag(id uint8, h tagHeader, payload []byte) []byte {
	b := make([]byte, tagHdrLen(id), tagHdrLen(id)+len(payload))
	switch id {
	case amTagEager:
		put64(b, h.tag)
	case amTagEagerSync:
		put64(b, h.tag, h.src, h.sreq)
	case amTagFirst:
		put64(b, h.tag, h.src, h.msg, h.total, h.sreq, h.flags)
	case amTagMiddle:
		put64(b, h.src, h.msg, h.off)
	case amTagAck, amTagRevoke:
		put64(b, h.src, h.sreq)
	case amTagRTS:
		put64(b, h.tag, h.src, h.sreq, h.total, h.raddr, h.flags)
	case amTagATS:
		put64(b, h.src, h.sreq, uint64(int64(h.status)))
	case amTagRTR:
		put64(b, h.src, h.sreq, h.rreq, h.raddr)
	case amTagData:
		put64(b, h.src, h.rreq, h.off)
	case amTagATP:
		put64(b, h.src, h.rreq, uint64(int64(h.status)))
	}
	return append(b, payload...)
}

// tagSeeds are real tag messages of every kind: ids and messages.
func tagSeeds() (ids []uint8, msgs [][]byte) {
	add := func(id uint8, h tagHeader, payload []byte) {
		ids, msgs = append(ids, id), append(msgs, encodeTag(id, h, payload))
	}
	add(amTagEager, tagHeader{tag: 5}, []byte("eager"))
	add(amTagEager, tagHeader{tag: 5}, nil)
	add(amTagEagerSync, tagHeader{tag: 5, src: 9, sreq: 1}, []byte("sync"))
	add(amTagFirst, tagHeader{tag: 6, src: 9, msg: 2, total: 10}, []byte("first"))
	add(amTagFirst, tagHeader{tag: 6, src: 9, msg: 3, total: 10, sreq: 4}, []byte("first"))
	add(amTagMiddle, tagHeader{src: 9, msg: 2, off: 5}, []byte("rest!"))
	add(amTagFirst, tagHeader{tag: 3, src: 9, msg: 11, total: 10, flags: hdrFlags(famAM, 2, hdrReply)}, []byte("uhfirst"))
	add(amTagAck, tagHeader{src: 9, sreq: 4}, nil)
	add(amTagRTS, tagHeader{tag: 7, src: 9, sreq: 5, total: 1 << 20}, nil)
	add(amTagRTS, tagHeader{tag: 7, src: 9, sreq: 6, total: 100, flags: tagRTSSync}, nil)
	add(amTagRTS, tagHeader{tag: 7, src: 9, sreq: 7, total: 1 << 20, raddr: 1 << 20}, []byte("GRK\x02key"))
	// An active message's, with its user header, and a stream's.
	add(amTagRTS, tagHeader{tag: 3, src: 9, sreq: 8, total: 1 << 20, flags: hdrFlags(famAM, 2, hdrReply)}, []byte("uh"))
	add(amTagRTS, tagHeader{tag: 3, src: 9, sreq: 9, total: 1 << 20, raddr: 1 << 20, flags: hdrFlags(famAM, 2, 0)}, []byte("uhGRK\x02key"))
	add(amTagRTS, tagHeader{tag: 1, src: 9, sreq: 10, total: 1 << 20, flags: hdrFlags(famStream, 0, 0)}, nil)
	add(amTagATS, tagHeader{src: 9, sreq: 5, status: ucs.ErrIOError}, nil)
	add(amTagRTR, tagHeader{src: 9, sreq: 5, rreq: 8}, nil)
	add(amTagData, tagHeader{src: 9, rreq: 8, off: 0}, []byte("pushed"))
	add(amTagRTR, tagHeader{src: 9, sreq: 5, rreq: 8, raddr: 1 << 20}, []byte("GRK\x02key"))
	add(amTagATP, tagHeader{src: 9, rreq: 8}, nil)
	add(amTagRevoke, tagHeader{src: 9, sreq: 5}, nil)
	return ids, msgs
}

// FuzzTagHeader checks the decoder of tag message headers (eager, sync,
// fragments, sync acknowledgement, RTS, ATS, RTR, pushed data, revoke): it
// accepts only headers whose fields are in range for their kind, which
// encode back to the same bytes, and hands over the rest of the message.
func FuzzTagHeader(f *testing.F) {
	ids, msgs := tagSeeds()
	for i, m := range msgs {
		f.Add(ids[i], m)
	}
	f.Add(uint8(0), []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, id uint8, data []byte) {
		h, rest, err := decodeTag(id, data)
		if err != nil {
			if !errors.Is(err, ucs.ErrInvalidParam) {
				t.Fatalf("error %v is not ErrInvalidParam", err)
			}
			return
		}
		n := tagHdrLen(id)
		if n == 0 || !bytes.Equal(rest, data[n:]) {
			t.Fatalf("id %d: %d bytes after the header of a %d-byte message", id, len(rest), len(data))
		}
		if b := encodeTag(id, h, nil); !bytes.Equal(b, data[:n]) {
			t.Fatalf("id %d: %x decodes to %+v, which encodes as %x", id, data[:n], h, b)
		}
		switch {
		case (id == amTagEagerSync || id == amTagAck || id == amTagRTS || id == amTagATS || id == amTagRTR || id == amTagRevoke) && h.sreq == 0,
			(id == amTagRTR || id == amTagData || id == amTagATP) && h.rreq == 0:
			t.Fatalf("id %d accepted without a send or receive number", id)
		case (id == amTagFirst || id == amTagMiddle) && h.msg == 0:
			t.Fatalf("fragment accepted without a message number")
		case id == amTagFirst && (h.total > tagMaxEager || h.total < uint64(len(rest)-h.hlen) || h.fam == famTag && h.total == uint64(len(rest))):
			t.Fatalf("first fragment of %d bytes announces %d", len(rest), h.total)
		case id == amTagATS && h.status > 0:
			t.Fatalf("ATS with status %d", h.status)
		case (id == amTagRTS || id == amTagRTR) && (len(rest) == h.hlen) != (h.raddr == 0):
			t.Fatalf("id %d with a key of %d bytes at address %#x", id, len(rest)-h.hlen, h.raddr)
		case (id == amTagRTS || id == amTagFirst) && (h.fam > famStream || (h.hlen > 0 || h.flags&hdrReply != 0) && h.fam != famAM || h.flags&tagRTSSync != 0 && h.fam != famTag):
			t.Fatalf("RTS of family %d with flags %#x", h.fam, h.flags)
		}
	})
}

// FuzzTagRecv feeds tag messages to a worker's receive path, as a peer
// could send them, with receives posted into buffers between guard bytes
// and an endpoint of the worker to itself (so that replies find a way).
// Whatever comes in, no receive writes outside its buffer, nothing panics,
// and afterwards a real message is still received whole.
func FuzzTagRecv(f *testing.F) {
	// Dropped messages are logged.
	c := newTagContext(f, "self", func(p *Params) { p.SetLogger(ucs.DiscardLogger()) })
	w := newWorker(f, c)
	ep := connect(f, w, w, nil)
	arg := &protoArg{w: w, wi: w.ifaces[0]}
	const guard, size = 16, 64
	mem := make([]byte, 4*(size+2*guard))
	ids, msgs := tagSeeds()
	for i, m := range msgs {
		// kind selects the handler: that of the seed's own id.
		k := uint8(slices.Index(tagIDs, ids[i]))
		f.Add(k, m, true)
		f.Add(k, m, false)
	}
	f.Fuzz(func(t *testing.T, kind uint8, data []byte, own bool) {
		k := int(kind) % len(tagIDs)
		id := tagIDs[k]
		msg := append([]byte(nil), data...)
		if own && len(msg) >= 16 {
			// Name the worker itself as the sender, whose endpoint exists.
			o := 8
			if id == amTagMiddle || id == amTagAck || id == amTagATS || id == amTagRTR || id == amTagData || id == amTagATP || id == amTagRevoke {
				o = 0
			}
			put64(msg[o:], w.uid)
		}
		if (id == amTagRTS || id == amTagRTR) && len(msg) >= tagHdrLen(id) {
			// No key: a peer's key names its own memory, which a forged one
			// here would make the worker read or write.
			msg = msg[:tagHdrLen(id)]
			raddr := 32
			if id == amTagRTR {
				raddr = 24
			}
			put64(msg[raddr:], 0)
		}
		for i := range mem {
			mem[i] = 0xee
		}
		var reqs []*Request
		for r := range 4 {
			off := r*(size+2*guard) + guard
			req, err := w.TagRecvNBX(mem[off:off+size:off+size], uint64(r+4), ^uint64(3), nil)
			if err == nil && req != nil {
				reqs = append(reqs, req)
			}
		}
		tagHandlers[k](arg, msg, 0)
		for i := 0; i < 100 && w.Progress() > 0; i++ {
		}
		for r := range 4 {
			base := r * (size + 2*guard)
			for i := 0; i < guard; i++ {
				if mem[base+i] != 0xee || mem[base+guard+size+i] != 0xee {
					t.Fatalf("receive %d wrote outside its buffer", r)
				}
			}
		}
		for _, req := range reqs {
			req.Cancel()
			req.Free()
		}
		// Drain what stayed unexpected, then check a real message.
		for m := w.TagProbeNB(0, 0, true, nil); m != nil; m = w.TagProbeNB(0, 0, true, nil) {
			if r, err := w.TagMsgRecvNBX(make([]byte, 1<<20), m, nil); err == nil && r != nil {
				r.Cancel()
			}
		}
		got := make([]byte, 5)
		req, err := w.TagRecvNBX(got, 1<<40, tagMaskFull, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ep.TagSendNBX([]byte("after"), 1<<40, nil); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 1000 && !req.IsCompleted(); i++ {
			w.Progress()
		}
		if err := req.Status(); err != nil || string(got) != "after" {
			t.Fatalf("a real message after the fuzzed one: %v %q", err, got)
		}
		req.Free()
	})
}
