package ucp

import (
	"fmt"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// DatatypeClassSGL is the class of DatatypeSGL.
const DatatypeClassSGL = 3

// DatatypeSGL is the scatter-gather-list datatype (ucp_dt_make_sgl, new in
// UCX 1.22), for RequestParam.Datatype and RequestParam.RemoteDatatype of
// puts and gets (SetLocalSGL and SetRemoteSGL set them): one put or get of
// many elements, element i moving Lengths[i] bytes between the local
// buffer Buffers[i] (DTLocalSGL) and the remote address RemoteAddrs[i] of
// the key Rkeys[i] (DTRemoteSGL). Only the N-to-N mapping exists: both
// sides are SGLs of the same count and matching lengths.
//
// The call is PutNBX or GetNBX with a nil buf (its raddr and rkey are not
// used) and a RequestParam that carries both descriptors:
//
//	p := new(RequestParam).SetLocalSGL(&local).SetRemoteSGL(&remote, n)
//	req, err := ep.PutNBX(nil, 0, nil, p)
//
// Each element goes as one operation of the protocol a contiguous put or
// get of its size takes on its key (a copy into mapped memory; put short,
// bcopy or zero-copy, get bcopy or zero-copy on the key's lane; active
// messages where no lane does it), and the one request completes when
// every element did. Request.Query names the protocols used ("sgl:" and
// them, joined by "+").
const DatatypeSGL Datatype = DatatypeClassSGL

// DTLocalSGL is the local descriptor of an SGL operation
// (ucp_dt_local_sgl_t): element i is Lengths[i] bytes at the start of
// Buffers[i] (at most len(Buffers[i])), mapped by Memhs[i] when Memhs is
// set (nil, or a nil entry: not mapped). The count of elements is
// len(Lengths); Buffers, and Memhs when set, have at least as many entries.
// The call copies the descriptor, so it may be reused at once; the slices
// are kept by reference and must stay unchanged until the request
// completes. Every memory handle must be of one memory type.
type DTLocalSGL struct {
	Buffers [][]byte
	Lengths []int
	Memhs   []*MemHandle
}

// Fields of DTRemoteSGL (ucp_dt_remote_sgl_field).
const (
	DTRemoteSGLFieldRemoteAddrs uint64 = 1 << 0
	DTRemoteSGLFieldLengths     uint64 = 1 << 1
	DTRemoteSGLFieldRkeys       uint64 = 1 << 2
)

// DTRemoteSGL is the remote descriptor of an SGL operation
// (ucp_dt_remote_sgl_t): element i targets RemoteAddrs[i] in the memory of
// Rkeys[i]. Only the fields whose bit is in FieldMask count; RemoteAddrs
// and Rkeys are required, and Lengths, when set, must equal the local
// lengths (unset, they are the local ones). The call copies the
// descriptor; the slices are kept by reference until the request
// completes. Every key must be unpacked on the endpoint of the call.
type DTRemoteSGL struct {
	FieldMask   uint64
	RemoteAddrs []uint64
	Lengths     []int
	Rkeys       []*Rkey
}

// SetRemoteAddrs sets the remote addresses of the elements.
func (d *DTRemoteSGL) SetRemoteAddrs(a []uint64) *DTRemoteSGL {
	d.RemoteAddrs, d.FieldMask = a, d.FieldMask|DTRemoteSGLFieldRemoteAddrs
	return d
}

// SetLengths sets the lengths of the remote elements.
func (d *DTRemoteSGL) SetLengths(l []int) *DTRemoteSGL {
	d.Lengths, d.FieldMask = l, d.FieldMask|DTRemoteSGLFieldLengths
	return d
}

// SetRkeys sets the keys of the remote elements.
func (d *DTRemoteSGL) SetRkeys(k []*Rkey) *DTRemoteSGL {
	d.Rkeys, d.FieldMask = k, d.FieldMask|DTRemoteSGLFieldRkeys
	return d
}

// SetLocalSGL sets the datatype to DatatypeSGL and the local descriptor of
// an SGL put or get (the call's buffer in UCX).
func (p *RequestParam) SetLocalSGL(d *DTLocalSGL) *RequestParam {
	p.LocalSGL, p.Datatype, p.OpAttrMask = d, DatatypeSGL, p.OpAttrMask|OpAttrFieldDatatype
	return p
}

// SetRemoteDatatype sets the datatype of the remote side (only DatatypeSGL
// exists).
func (p *RequestParam) SetRemoteDatatype(d Datatype) *RequestParam {
	p.RemoteDatatype, p.OpAttrMask = d, p.OpAttrMask|OpAttrFieldRemoteDatatype
	return p
}

// SetRemote sets the remote descriptor.
func (p *RequestParam) SetRemote(d *DTRemoteSGL) *RequestParam {
	p.Remote, p.OpAttrMask = d, p.OpAttrMask|OpAttrFieldRemote
	return p
}

// SetRemoteCount sets the number of remote elements (equal to the local
// count: only N-to-N exists).
func (p *RequestParam) SetRemoteCount(n int) *RequestParam {
	p.RemoteCount, p.OpAttrMask = n, p.OpAttrMask|OpAttrFieldRemoteCount
	return p
}

// SetRemoteSGL sets the remote side of an SGL operation: RemoteDatatype
// DatatypeSGL, Remote d and RemoteCount n.
func (p *RequestParam) SetRemoteSGL(d *DTRemoteSGL, n int) *RequestParam {
	return p.SetRemoteDatatype(DatatypeSGL).SetRemote(d).SetRemoteCount(n)
}

// opAttrRemote are the fields of the remote side of an SGL operation.
const opAttrRemote = OpAttrFieldRemoteDatatype | OpAttrFieldRemote | OpAttrFieldRemoteCount

// isSGL reports whether param asks for an SGL operation, on either side
// (a call with one side only fails in newSGL).
func isSGL(param *RequestParam) bool {
	return param != nil && (param.OpAttrMask&opAttrRemote != 0 ||
		(param.OpAttrMask&OpAttrFieldDatatype != 0 && param.Datatype.Class() == DatatypeClassSGL))
}

// Protocols of SGL elements, as bits of sglOp.protos.
const (
	sglDirect = 1 << iota
	sglShort
	sglBcopy
	sglZcopy
	sglSw
	sglProtos = iota
)

// sglProtoNames are the protocol names Request.Query reports for an SGL
// operation, by put (0) or get (1) and the sgl* bits of the protocols its
// elements used: "sgl:" and the protocols, with "+" between them.
var sglProtoNames = func() (t [2][1 << sglProtos]string) {
	names := [2][sglProtos]string{
		{protoPutDirect, protoPutShort, protoPutBcopy, protoPutZcopy, protoPutSw},
		{protoGetDirect, "", protoGetBcopy, protoGetZcopy, "get/sw"},
	}
	for k := range t {
		for mask := range t[k] {
			var used []string
			for b, n := range names[k] {
				if mask&(1<<b) != 0 && n != "" {
					used = append(used, n)
				}
			}
			t[k][mask] = "sgl:" + strings.Join(used, "+")
		}
	}
	return t
}()

// sglOp is an SGL operation in progress: its request's completion counts
// the elements in flight, plus one while elements are still to issue.
type sglOp struct {
	ep     *Endpoint
	put    bool
	local  DTLocalSGL  // copied from the caller's
	remote DTRemoteSGL // copied from the caller's
	n      int         // elements
	next   int         // the first element not issued yet
	size   int         // bytes of all elements
	protos uint8       // sgl* bits of the protocols used
	stuck  *lane       // the lane that had no resources for element next
}

// newSGL checks an SGL operation's parameters and returns it. buf must be
// nil. It fails with ucs.ErrInvalidParam for one side without the other,
// counts that differ, lengths that do not match, descriptors shorter than
// the count, an element longer than its buffer, memory handles of mixed
// memory types, or a key not unpacked on ep; with ucs.ErrUnsupported for a
// remote datatype other than DatatypeSGL; with ucs.ErrRejected for a key
// without the access the operation needs.
func (ep *Endpoint) newSGL(buf []byte, param *RequestParam, put bool, what string) (*sglOp, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("ucp %s: sgl: %s: %w", what, fmt.Sprintf(format, a...), ucs.ErrInvalidParam)
	}
	switch {
	case param.OpAttrMask&OpAttrFieldDatatype == 0 || param.Datatype.Class() != DatatypeClassSGL || param.LocalSGL == nil:
		return nil, bad("a remote SGL needs a local one (SetLocalSGL)")
	case param.OpAttrMask&opAttrRemote != opAttrRemote || param.Remote == nil:
		return nil, bad("a local SGL needs the remote datatype, descriptor and count (SetRemoteSGL)")
	case param.RemoteDatatype.Class() != DatatypeClassSGL:
		return nil, fmt.Errorf("ucp %s: remote datatype class %d: only SGL: %w", what, param.RemoteDatatype.Class(), ucs.ErrUnsupported)
	case buf != nil:
		return nil, bad("a buffer beside the local SGL")
	}
	s := &sglOp{ep: ep, put: put, local: *param.LocalSGL, remote: *param.Remote, n: len(param.LocalSGL.Lengths)}
	l, r := &s.local, &s.remote
	switch {
	case param.RemoteCount != s.n:
		return nil, bad("remote count %d, local %d: only N-to-N mapping", param.RemoteCount, s.n)
	case len(l.Buffers) < s.n || (l.Memhs != nil && len(l.Memhs) < s.n):
		return nil, bad("%d lengths, %d buffers and %d memory handles", s.n, len(l.Buffers), len(l.Memhs))
	case r.FieldMask&DTRemoteSGLFieldRemoteAddrs == 0 || r.FieldMask&DTRemoteSGLFieldRkeys == 0:
		return nil, bad("the remote descriptor needs addresses and keys")
	case len(r.RemoteAddrs) < s.n || len(r.Rkeys) < s.n:
		return nil, bad("%d elements, %d remote addresses and %d keys", s.n, len(r.RemoteAddrs), len(r.Rkeys))
	case r.FieldMask&DTRemoteSGLFieldLengths != 0 && len(r.Lengths) < s.n:
		return nil, bad("%d elements, %d remote lengths", s.n, len(r.Lengths))
	}
	memType := ucs.MemoryTypeUnknown
	need := uint8(rkeyRead)
	if put {
		need = rkeyWrite
	}
	for i := range s.n {
		n := l.Lengths[i]
		if n < 0 || n > len(l.Buffers[i]) {
			return nil, bad("element %d: length %d of a buffer of %d", i, n, len(l.Buffers[i]))
		}
		if r.FieldMask&DTRemoteSGLFieldLengths != 0 && r.Lengths[i] != n {
			return nil, bad("element %d: remote length %d, local %d", i, r.Lengths[i], n)
		}
		if l.Memhs != nil && l.Memhs[i] != nil {
			mt := l.Memhs[i].memType
			if mt == ucs.MemoryTypeUnknown {
				mt = ucs.MemoryTypeHost
			}
			if memType != ucs.MemoryTypeUnknown && mt != memType {
				return nil, bad("element %d: memory type %v after %v", i, mt, memType)
			}
			memType = mt
		}
		rk := r.Rkeys[i]
		if rk == nil || rk.ep != ep {
			return nil, bad("element %d: rkey not unpacked on this endpoint", i)
		}
		if err := rk.allows(need, what); err != nil {
			return nil, err
		}
		s.size += n
	}
	return s, nil
}

// rmaSGL runs the SGL put or get of param.
func (ep *Endpoint) rmaSGL(buf []byte, param *RequestParam, put bool) (*Request, error) {
	what := "get"
	if put {
		what = "put"
	}
	if err := ep.checkEP(what); err != nil {
		return nil, err
	}
	s, err := ep.newSGL(buf, param, put, what)
	if err != nil {
		return nil, err
	}
	w := ep.w
	flags := sendFlags(param)
	force := flags&flagForceImmCmpl != 0
	if force && s.defers() {
		return nil, fmt.Errorf("ucp %s sgl to %s cannot complete at once: %w", what, ep.remoteName, ucs.ErrNoResource)
	}
	r := w.newRequest(param)
	r.size, r.sgl = s.size, s
	r.ownCompletion() // the elements' operations count in it
	if rl := s.remote.Rkeys; s.n > 0 {
		r.lane = rl[0].rma.laneOrNil()
	}
	w.inflight.Add(1)
	st := s.issue(r)
	if st == ucs.ErrNoResource {
		if force {
			// Nothing is in flight: no element defers.
			s.end(r, st)
			w.inflight.Add(-1)
			r.release()
			return nil, fmt.Errorf("ucp %s sgl: %w", what, ucs.ErrNoResource)
		}
		if st = w.queue(s.stuck, r, s.issue); st.IsErr() {
			st = s.end(r, st)
		}
	}
	switch st {
	case ucs.InProgress:
		return r, nil
	case ucs.OK:
		return r.doneNow(flags), nil
	default:
		w.inflight.Add(-1)
		r.release()
		return nil, fmt.Errorf("ucp %s sgl to %s: %w", what, ep.remoteName, st)
	}
}

// defers reports whether an element may complete after its call (a get or
// zero-copy put on a network lane, a get in active messages), which
// OpAttrFlagForceImmCmpl refuses.
func (s *sglOp) defers() bool {
	for i := range s.n {
		n, rk := s.local.Lengths[i], s.remote.Rkeys[i]
		if n == 0 || rk.direct(s.remote.RemoteAddrs[i], n) != nil {
			continue
		}
		rl := rk.rma
		switch {
		case !s.put && (rl == nil || !rl.get):
			return true
		case rl == nil:
		case rl.l.wi.rsc.tl.DevType == uct.DeviceTypeNet && (!s.put || n > rl.putBcopy):
			return true
		}
	}
	return false
}

// issue issues the elements from s.next on, each as one operation. It
// returns ucs.ErrNoResource when a lane has no room for element s.next
// (s.stuck; issue is called again from its pending queue); otherwise it
// ends the issuing, as end says.
func (s *sglOp) issue(r *Request) ucs.Status {
	for ; s.next < s.n; s.next++ {
		st := s.element(r, s.next)
		if st == ucs.ErrNoResource {
			return st
		}
		if st.IsErr() {
			return s.end(r, st)
		}
	}
	r.proto = sglProtoNames[b2i(!s.put)][s.protos]
	return s.end(r, ucs.OK)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// end ends the issuing of r's elements, with the error st when an element
// failed: it returns r's status when no element is in flight any more,
// ucs.InProgress while some are (the last one completes r).
func (s *sglOp) end(r *Request, st ucs.Status) ucs.Status {
	if st.IsErr() {
		// Recorded as an element that failed: the issuing's own count
		// keeps Invoke from completing r.
		atomic.AddInt32(&r.comp.Count, 1)
		r.comp.Invoke(st)
	}
	if atomic.AddInt32(&r.comp.Count, -1) == 0 {
		return r.comp.Status()
	}
	return ucs.InProgress
}

// element issues element i: OK when it is done or in flight (counted in
// r.comp), ucs.ErrNoResource when its lane has no room (s.stuck), or its
// error.
func (s *sglOp) element(r *Request, i int) ucs.Status {
	n := s.local.Lengths[i]
	if n == 0 {
		return ucs.OK // its buffer is not accessed
	}
	buf, raddr, rk := s.local.Buffers[i][:n], s.remote.RemoteAddrs[i], s.remote.Rkeys[i]
	if p := rk.direct(raddr, n); p != nil {
		if s.put {
			ucs.Memcpy(unsafe.Slice((*byte)(p), n), buf)
		} else {
			ucs.Memcpy(buf, unsafe.Slice((*byte)(p), n))
		}
		s.protos |= sglDirect
		return ucs.OK
	}
	rl := rk.rma
	if s.put && rl == nil {
		s.protos |= sglSw
		return statusOf(s.ep.swPut(buf, raddr, rk))
	}
	if !s.put && (rl == nil || !rl.get) {
		s.protos |= sglSw
		return s.swGet(r, buf, raddr, rk)
	}
	var st ucs.Status
	switch {
	case s.put && n <= rl.putShort:
		s.protos |= sglShort
		st = rl.ep.PutShort(buf, raddr, rl.rkey)
	case s.put && n <= rl.putBcopy:
		s.protos |= sglBcopy
		_, st = rl.ep.PutBcopy(func(dst []byte) int { return copy(dst, buf) }, raddr, rl.rkey)
	default:
		atomic.AddInt32(&r.comp.Count, 1)
		switch {
		case s.put:
			s.protos |= sglZcopy
			st = rl.ep.PutZcopy([]uct.IOV{{Buffer: buf}}, raddr, rl.rkey, &r.comp)
		case n <= rl.getBcopy:
			s.protos |= sglBcopy
			st = rl.ep.GetBcopy(func(src []byte) { copy(buf, src) }, n, raddr, rl.rkey, &r.comp)
		default:
			s.protos |= sglZcopy
			st = rl.ep.GetZcopy([]uct.IOV{{Buffer: buf}}, raddr, rl.rkey, &r.comp)
		}
		if st == ucs.InProgress {
			return ucs.OK
		}
		atomic.AddInt32(&r.comp.Count, -1)
	}
	if st == ucs.ErrNoResource {
		s.stuck = rl.l
	}
	return st
}

// swGet asks the target for element buf's data in active messages; the
// reply completes the element in r.comp.
func (s *sglOp) swGet(r *Request, buf []byte, raddr uint64, rk *Rkey) ucs.Status {
	ep := s.ep
	if err := ep.swCheck(rk, "get"); err != nil {
		return statusOf(err)
	}
	atomic.AddInt32(&r.comp.Count, 1)
	id, st := ep.w.sw.addFor(ep, &swReq{r: r, comp: &r.comp, dt: dtIter{contig: buf, length: len(buf)}, missing: len(buf)})
	if st != ucs.OK {
		atomic.AddInt32(&r.comp.Count, -1)
		return st
	}
	h := swHeader{token: rk.swToken, raddr: raddr, a: uint64(len(buf)), reqID: id}
	if err := ep.swSend(amSwGetReq, &h, nil); err != nil {
		if ep.w.sw.take(id, true) == nil {
			return ucs.OK // the endpoint failed, and its failure ended the element
		}
		atomic.AddInt32(&r.comp.Count, -1)
		return statusOf(err)
	}
	return ucs.OK
}
