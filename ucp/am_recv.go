package ucp

import (
	"fmt"
	"sync"

	"github.com/goshmem/goshmem/ucs"
)

// AMRecvCallback handles one active message (ucp_am_recv_callback_t). header
// is the user header (valid only during the call); data is the message data
// for an eager message, nil for a rendezvous one. It returns ucs.OK when it
// is done with the data, or ucs.InProgress to keep it (allowed with
// AMRecvAttrFlagData or AMRecvAttrFlagRNDV only; otherwise it counts as
// ucs.OK and a warning is logged). It runs from Worker.Progress; it may send
// (AMSendNBX) and receive rendezvous data (AMRecvDataNBX) but must not call
// Progress or wait for a request.
type AMRecvCallback func(arg any, header, data []byte, param *AMRecvParam) ucs.Status

// AMRecvParam describes a received message to its callback
// (ucp_am_recv_param_t). It is valid only during the callback.
type AMRecvParam struct {
	// RecvAttr holds AMRecvAttr* bits.
	RecvAttr uint64
	// ReplyEP is an endpoint to the sender's worker, when RecvAttr has
	// AMRecvAttrFieldReplyEP.
	ReplyEP *Endpoint
	// Length is the length of the message data (len(data) for an eager
	// message).
	Length int
	// Desc stands for the data when RecvAttr has AMRecvAttrFlagData or
	// AMRecvAttrFlagRNDV; nil otherwise.
	Desc *AMDesc
}

type amHandler struct {
	cb    AMRecvCallback
	arg   any
	flags AMHandlerFlags
}

// AMDesc stands for the data of a received active message beyond the
// callback: the eager data a callback kept (AMRecvAttrFlagData), or
// rendezvous data still at the sender (AMRecvAttrFlagRNDV). It is released
// by Worker.AMDataRelease or consumed by Worker.AMRecvDataNBX; it must not
// be used after that, nor after a callback that did not keep it returned.
type AMDesc struct {
	w      *Worker
	state  uint8
	rndv   bool
	data   []byte       // eager: the data
	raw    []byte       // eager: the transport's buffer to give back, if any
	wi     *workerIface // the interface raw came from
	length int          // data length
	src    uint64       // rendezvous: the sender's worker uid
	sreq   uint64       // rendezvous: the sender's request id
	ep     *Endpoint    // rendezvous: the endpoint back to the sender
	key    []byte       // rendezvous: the packed key of the data, if it may be got
	keyBuf *[]byte      // rendezvous: key's buffer, from amKeyPool, until the data is fetched
	raddr  uint64       // rendezvous: the data's address at the sender
	// revoked: rendezvous data its sender took back (amRevoked) before
	// it was received; guarded by the worker's am.mu.
	revoked bool
}

// States of an AMDesc.
const (
	descInCallback uint8 = iota // lent to a running callback
	descKept                    // kept by the user after its callback
	descDone                    // released or consumed
)

// Length returns the length of the message data.
func (d *AMDesc) Length() int { return d.length }

// IsRNDV reports whether the data is still at the sender (rendezvous).
func (d *AMDesc) IsRNDV() bool { return d.rndv }

// Data returns the data of an eager message (nil for a rendezvous one, or
// once released).
func (d *AMDesc) Data() []byte {
	if d.rndv || d.state == descDone {
		return nil
	}
	return d.data
}

var descPool = sync.Pool{New: func() any { return new(AMDesc) }}

// amKeyPool recycles the buffers of the keys that rendezvous descriptors
// hold until their data is fetched or released.
var amKeyPool = sync.Pool{New: func() any { return new([]byte) }}

// dropKey gives back the buffer of d's key, once the key is used or no
// longer needed.
func (d *AMDesc) dropKey() {
	if d.keyBuf != nil {
		amKeyPool.Put(d.keyBuf)
		d.keyBuf, d.key = nil, nil
	}
}

// amReasm is where the fragments of an eager message go (w.am.reasm
// counts them): the user header, then the data, for its handler.
type amReasm struct {
	buf   []byte
	hlen  int
	id    uint16
	flags uint8
}

// SetAMRecvHandler installs, replaces or removes the handler of an
// active-message id (ucp_worker_set_am_recv_handler). The id field is
// mandatory; without a callback (or with a nil one) the id's handler is
// removed, and its later messages are dropped with a logged warning. It
// fails with ucs.ErrInvalidParam for a missing or out-of-range id or unknown
// flags, and ucs.ErrUnsupported when the context lacks FeatureAM.
func (w *Worker) SetAMRecvHandler(p *AMHandlerParam) error {
	if w.closed.Load() {
		return fmt.Errorf("ucp set am handler: %w", ErrClosed)
	}
	if !w.am.enabled {
		return fmt.Errorf("ucp set am handler: the context was created without FeatureAM: %w", ucs.ErrUnsupported)
	}
	if p == nil || p.FieldMask&AMHandlerParamFieldID == 0 {
		return fmt.Errorf("ucp set am handler: id not set: %w", ucs.ErrInvalidParam)
	}
	if p.ID > MaxAMID {
		return fmt.Errorf("ucp set am handler: id %d above %d: %w", p.ID, MaxAMID, ucs.ErrInvalidParam)
	}
	var h *amHandler
	if p.FieldMask&AMHandlerParamFieldCB != 0 && p.CB != nil {
		h = &amHandler{cb: p.CB}
		if p.FieldMask&AMHandlerParamFieldFlags != 0 {
			if p.Flags&^(AMFlagWholeMsg|AMFlagPersistentData) != 0 {
				return fmt.Errorf("ucp set am handler: flags %#x: %w", p.Flags, ucs.ErrInvalidParam)
			}
			h.flags = p.Flags
		}
		if p.FieldMask&AMHandlerParamFieldArg != 0 {
			h.arg = p.Arg
		}
	}
	a := &w.am
	a.hmu.Lock()
	defer a.hmu.Unlock()
	old := *a.handlers.Load()
	n := len(old)
	if int(p.ID) >= n {
		n = int(p.ID) + 1
	}
	hs := make([]*amHandler, n)
	copy(hs, old)
	hs[p.ID] = h
	a.handlers.Store(&hs)
	return nil
}

func (w *Worker) amHandler(id uint16) *amHandler {
	hs := *w.am.handlers.Load()
	if int(id) < len(hs) {
		return hs[id]
	}
	return nil
}

// AMRecvDataNBX receives the data that desc stands for into buf
// (ucp_am_recv_data_nbx); buf must hold desc.Length() bytes. For a
// rendezvous message it asks the sender for the data and returns a request
// that completes when all of it is in buf (its callback, param's SendCallback,
// then runs with the status); for eager data kept by a callback it copies
// the data and releases desc, and returns (nil, nil). desc is consumed
// either way. It fails with ucs.ErrInvalidParam for a nil or already
// consumed descriptor, ucs.ErrMessageTruncated for a buffer too small, and
// ucs.ErrCanceled for rendezvous data its sender took back (it closed its
// endpoint or canceled the send).
func (w *Worker) AMRecvDataNBX(desc *AMDesc, buf []byte, param *RequestParam) (*Request, error) {
	if desc == nil || desc.w != w || desc.state == descDone {
		return nil, fmt.Errorf("ucp am recv data: descriptor not valid: %w", ucs.ErrInvalidParam)
	}
	it, err := dtFromParam(buf, param, true)
	if err != nil {
		return nil, fmt.Errorf("ucp am recv data: %w", err)
	}
	if it.length < desc.length {
		it.finish()
		return nil, fmt.Errorf("ucp am recv data: buffer of %d bytes for %d: %w", it.length, desc.length, ucs.ErrMessageTruncated)
	}
	flags := sendFlags(param)
	if !desc.rndv {
		st := it.unpack(0, desc.data)
		it.finish()
		w.AMDataRelease(desc)
		if st != ucs.OK {
			return nil, fmt.Errorf("ucp am recv data: %w", st)
		}
		if flags&flagNoImmCmpl != 0 {
			r := w.newRequest(param)
			r.size, r.proto = desc.length, protoAMRecv
			w.inflight.Add(1)
			r.complete(ucs.OK)
			return r, nil
		}
		return nil, nil
	}
	if flags&flagForceImmCmpl != 0 && desc.length > 0 {
		it.finish()
		return nil, fmt.Errorf("ucp am recv data: rendezvous data cannot arrive at once: %w", ucs.ErrNoResource)
	}
	desc.state = descDone
	a := &w.am
	k := fragKey{desc.src, desc.sreq}
	a.mu.Lock()
	revoked := desc.revoked
	if !revoked {
		a.rts[k] = nil // being taken: a revoke waits for the drop or RTR
	}
	a.mu.Unlock()
	if revoked {
		desc.dropKey()
		it.finish()
		return nil, fmt.Errorf("ucp am recv data: the sender took the message back: %w", ucs.ErrCanceled)
	}
	r := w.newRequest(param)
	r.size, r.proto, r.lane, r.dt = desc.length, protoAMRecv, desc.ep.am, it
	r.tr = tagRecvState{fam: famAM, status: ucs.OK, info: TagRecvInfo{Length: desc.length}, src: desc.src, sreq: desc.sreq, ep: desc.ep}
	w.inflight.Add(1)
	if desc.length == 0 {
		// Nothing to fetch: tell the sender it is done.
		desc.dropKey()
		w.rndvTook(r, false)
		if st := w.rndvATS(desc.src, desc.sreq, ucs.OK); st.IsErr() {
			r.finish(st)
			r.release()
			return nil, fmt.Errorf("ucp am recv data: %w", st)
		}
		return r.doneNow(flags), nil
	}
	// The data may come inside the call (from mapped memory, a get done
	// at once).
	r.hold()
	w.rndvFetch(r, desc.key, desc.raddr)
	desc.dropKey() // rndvFetch keeps no reference to it
	r, st := r.heldResult(flags)
	if r == nil && st.IsErr() {
		return nil, fmt.Errorf("ucp am recv data: %w", st)
	}
	return r, nil
}

// AMDataRelease releases the data desc stands for (ucp_am_data_release):
// eager data a callback kept goes back to the transport, and a rendezvous
// message is dropped (its sender's request completes). A nil or already
// released descriptor is ignored.
func (w *Worker) AMDataRelease(desc *AMDesc) {
	if desc == nil || desc.w != w || desc.state == descDone {
		return
	}
	inCallback := desc.state == descInCallback
	desc.state = descDone
	if desc.rndv {
		desc.dropKey()
		a := &w.am
		a.mu.Lock()
		delete(a.rts, fragKey{desc.src, desc.sreq})
		revoked := desc.revoked
		a.mu.Unlock()
		if revoked {
			return // the sender took it back: nothing to tell it
		}
		w.rndvATS(desc.src, desc.sreq, ucs.OK) // (logs a failure)
		return
	}
	// Inside its callback the transport's buffer is given back when the
	// callback returns.
	if !inCallback && desc.raw != nil {
		desc.wi.iface.ReleaseDesc(desc.raw)
	}
	desc.raw, desc.data = nil, nil
}
