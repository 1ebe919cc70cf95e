package tcp

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// Gets: the EP sends a frameGet naming the key, range and a number of its
// own; the peer's receiving goroutine checks it as it checks a put and
// answers on the same connection with a frameGetRep, written straight from
// the registered memory; the EP's reader goroutine reads the data straight
// into the caller's buffers (zcopy) or hands it to the unpack function
// (bcopy), and the completion is signalled from Progress. Replies come in
// the order of the gets, behind the acknowledgements of what came before,
// so a flush that completes has seen every get before it answered.

// getOp is a get waiting for its reply.
type getOp struct {
	iov    [][]byte       // zcopy: where the data goes, in order
	unpack uct.UnpackFunc // bcopy: what takes the data
	n      int            // bytes asked for
	comp   *uct.Completion
}

var getOpPool = make(chan *getOp, 256)

func newGetOp() *getOp {
	select {
	case g := <-getOpPool:
		return g
	default:
		return new(getOp)
	}
}

func (g *getOp) release() {
	clear(g.iov)
	*g = getOp{iov: g.iov[:0]}
	select {
	case getOpPool <- g:
	default:
	}
}

// GetBcopy reads length bytes (at most Get.MaxBcopy) at raddr under rkey
// and passes them to unpack, from the EP's reading goroutine, before comp
// is signalled from Progress. It returns ucs.InProgress; ucs.ErrNoResource
// when the EP's queue is full; ucs.ErrInvalidParam for a range outside the
// key or a length over the limit. A get the peer refuses completes with
// ucs.ErrInvalidAddr.
func (e *EP) GetBcopy(unpack uct.UnpackFunc, length int, raddr uint64, rkey uint64, comp *uct.Completion) ucs.Status {
	if unpack == nil || length < 0 || length > e.iface.cfg.segSize {
		return ucs.ErrInvalidParam
	}
	g := newGetOp()
	g.unpack, g.n, g.comp = unpack, length, comp
	return e.postGet(g, raddr, rkey)
}

// GetZcopy reads into the iov, in order, the consecutive bytes from raddr
// under rkey (at most Get.MaxZcopy bytes in all), without copying them: the
// EP's reading goroutine reads them from the socket into the buffers. It
// returns ucs.InProgress and signals comp from Progress when the data is
// there; errors as for GetBcopy.
func (e *EP) GetZcopy(iov []uct.IOV, raddr uint64, rkey uint64, comp *uct.Completion) ucs.Status {
	n := 0
	for k := range iov {
		n += len(iov[k].Buffer)
	}
	if len(iov) > maxIOV || n > maxPutLen {
		return ucs.ErrInvalidParam
	}
	g := newGetOp()
	for k := range iov {
		if len(iov[k].Buffer) > 0 {
			g.iov = append(g.iov, iov[k].Buffer)
		}
	}
	g.n, g.comp = n, comp
	return e.postGet(g, raddr, rkey)
}

// postGet records g under a new id and sends its request.
func (e *EP) postGet(g *getOp, raddr, rkey uint64) ucs.Status {
	k, st := remoteRange(rkey, raddr, g.n)
	if st != ucs.OK {
		g.release()
		return st
	}
	if !e.hasRoom() {
		g.release()
		return ucs.ErrNoResource
	}
	e.mu.Lock()
	if e.failed {
		e.mu.Unlock()
		g.release()
		return e.status()
	}
	if e.gets == nil {
		e.gets = make(map[uint64]*getOp)
	}
	e.getID++
	id := e.getID
	e.gets[id] = g
	e.mu.Unlock()
	f := newFrame(frameHeaderLen + getHeaderLen)
	putFrameHeader(f.buf, frameGet, 0, getHeaderLen)
	h := getHeader{key: k.key.id, token: k.key.token, raddr: raddr, length: uint64(g.n), id: id}
	h.encode(f.buf[frameHeaderLen:])
	if st, _ := e.post(f, true); st != ucs.OK && st != ucs.InProgress {
		// Failed: fail took the get (and signals it) unless the EP failed
		// before it was recorded.
		e.mu.Lock()
		if e.gets[id] == g {
			delete(e.gets, id)
			g.release()
		}
		e.mu.Unlock()
		return st
	}
	return ucs.InProgress
}

// epReader is the frameHandler of an EP's connection: it takes the
// peer's acknowledgements, get replies, heartbeats and goodbye.
type epReader struct {
	e     *EP
	reads uint64    // the stream's reads at the last tick (alive.go)
	heard time.Time // when they last changed
	g     *getOp    // the get whose reply is being read
	id    uint64    // its id
	st    ucs.Status
	buf   []byte // bcopy: the reply's data, for g.unpack
	one   [1][]byte
}

// begin takes an acknowledgement, or the header of a get reply and
// returns where its data goes. A reply to no get, or of another length
// than asked, is a protocol error.
func (r *epReader) begin(h frameHeader, fixed []byte) ([][]byte, error) {
	e := r.e
	switch h.typ {
	case frameAck:
		return nil, e.acknowledged(binary.LittleEndian.Uint64(fixed))
	case frameAlive:
		return nil, nil // it was read: that is all it is for
	case frameIfaceClose:
		return nil, &ifaceClosedError{processed: binary.LittleEndian.Uint64(fixed)}
	}
	id := binary.LittleEndian.Uint64(fixed)
	v := int64(binary.LittleEndian.Uint64(fixed[8:]))
	n := int(h.len - getRepHeaderLen)
	if v > 0 || v < -128 || (v != 0 && n != 0) {
		return nil, fmt.Errorf("get reply with status %d and %d bytes: %w", v, n, ucs.ErrInvalidParam)
	}
	st := ucs.Status(v)
	e.mu.Lock()
	g := e.gets[id]
	delete(e.gets, id)
	e.mu.Unlock()
	switch {
	case g == nil:
		return nil, fmt.Errorf("reply to get %d, which is not waiting: %w", id, ucs.ErrInvalidParam)
	}
	r.g, r.id, r.st = g, id, st
	if st == ucs.OK && n != g.n {
		return nil, fmt.Errorf("get reply of %d bytes to a get of %d: %w", n, g.n, ucs.ErrInvalidParam)
	}
	switch {
	case st != ucs.OK:
		return nil, nil
	case g.unpack != nil:
		r.buf = getBuf(n)
		r.one[0] = r.buf
		return r.one[:], nil
	}
	return g.iov, nil // read straight into the caller's buffers
}

// end completes the get whose reply was read.
func (r *epReader) end(bool) error {
	g := r.g
	if g == nil {
		return nil // an acknowledgement
	}
	if r.buf != nil {
		g.unpack(r.buf)
		putBuf(r.buf)
		r.buf, r.one[0] = nil, nil
	}
	if g.comp != nil {
		r.e.iface.pushComp(g.comp, r.st)
	}
	g.release()
	r.g = nil
	return nil
}

// abort gives the get whose reply was cut short back to the EP, which
// fails next and completes it with its error.
func (r *epReader) abort(error) {
	g := r.g
	if g == nil {
		return
	}
	if r.buf != nil {
		putBuf(r.buf)
		r.buf, r.one[0] = nil, nil
	}
	r.g = nil
	e := r.e
	e.mu.Lock()
	if !e.failed {
		e.gets[r.id] = g
		g = nil
	}
	e.mu.Unlock()
	if g != nil {
		if g.comp != nil {
			e.iface.pushComp(g.comp, e.status())
		}
		g.release()
	}
}

func (r *epReader) caughtUp() error { return nil }
