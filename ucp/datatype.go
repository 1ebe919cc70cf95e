package ucp

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// Datatypes (the "UCP Data type routines" of the UCX documents).
//
// A Datatype says how the data of an operation is laid out. Its low
// DatatypeShift bits are its class:
//
//   - contiguous (DatatypeContig(n)): elements of n bytes one after the
//     other; the data is the call's buf. It is the default of every call.
//   - iov (DatatypeIOV, ucp_dt_make_iov): a list of buffers, sent and
//     received as if they were one after the other; the list is the
//     RequestParam's IOV (RequestParam.SetIOV), and the call's buf must be
//     nil. Tag, active-message and stream calls, puts and gets take it.
//   - generic (DatatypeCreateGeneric): the application packs and unpacks
//     the data with its six GenericDatatypeOps, in pieces: the library
//     never holds a copy of the whole message, only what one transport
//     message carries. The buffer handed to StartPack and StartUnpack is
//     RequestParam.GenericBuffer with its count when set
//     (RequestParam.SetGenericBuffer), and the call's buf with its length
//     otherwise. Tag, active-message and stream calls take it.
//   - SGL (DatatypeSGL, ucp_dt_make_sgl): a list of elements, each a local
//     buffer and a remote address and key of its own (sgl.go). Puts and
//     gets take it.
//
// A datatype describes the data only: operations move its packed form, and
// a receive may use another datatype than its send.

// Datatype classes (ucp_dt_type) and the layout of a Datatype.
const (
	DatatypeClassContig  = 0
	DatatypeClassStrided = 1 // not supported (UCX does not implement it either)
	DatatypeClassIOV     = 2
	DatatypeClassGeneric = 7
	// DatatypeShift is the number of bits of the class.
	DatatypeShift = 3
	// DatatypeClassMask selects the class bits of a Datatype.
	DatatypeClassMask = 1<<DatatypeShift - 1
)

// DatatypeIOV is the scatter-gather datatype (ucp_dt_make_iov): the data is
// the buffers of RequestParam.IOV, in order.
const DatatypeIOV Datatype = DatatypeClassIOV

// Class returns the class of the datatype: DatatypeClassContig,
// DatatypeClassIOV, DatatypeClassSGL or DatatypeClassGeneric.
func (d Datatype) Class() int { return int(d & DatatypeClassMask) }

// GenericDatatypeOps are the routines of an application-defined datatype
// (ucp_generic_dt_ops_t). Every one must be set. The library calls them from
// the goroutine that starts the operation or from Worker.Progress, never
// two of one state at once.
type GenericDatatypeOps struct {
	// StartPack starts packing count elements of buffer for a send and
	// returns the state the other routines get.
	StartPack func(context, buffer any, count int) (state any)
	// StartUnpack starts unpacking into count elements of buffer for a
	// receive and returns its state.
	StartUnpack func(context, buffer any, count int) (state any)
	// PackedSize returns the size of the data in packed form: for a send,
	// the length of the message; for a receive, how much it can take (a
	// longer message is truncated).
	PackedSize func(state any) int
	// Pack writes the packed data from offset on into dest (at most
	// len(dest) bytes) and returns how many bytes it wrote. It may write
	// less: it is then called again for the rest, from the offset where it
	// stopped.
	Pack func(state any, offset int, dest []byte) int
	// Unpack takes the packed data src that starts at offset. Pieces come
	// in order. An error ends the receive with it: the request completes
	// with that status, and Unpack gets no more pieces of the message.
	Unpack func(state any, offset int, src []byte) error
	// Finish ends the state, once the operation no longer needs it.
	Finish func(state any)
}

// genericDatatype is a datatype made by DatatypeCreateGeneric.
type genericDatatype struct {
	ops     GenericDatatypeOps
	context any
}

// genericTypes holds the generic datatypes by id; a Datatype cannot hold a
// pointer the garbage collector would see.
var genericTypes struct {
	sync.Map // uint64 -> *genericDatatype
	next     atomic.Uint64
}

// DatatypeCreateGeneric creates a generic datatype from ops and the context
// its StartPack and StartUnpack get (ucp_dt_create_generic). It fails with
// ucs.ErrInvalidParam when a routine is missing. DatatypeDestroy releases
// it.
func DatatypeCreateGeneric(ops *GenericDatatypeOps, context any) (Datatype, error) {
	if ops == nil || ops.StartPack == nil || ops.StartUnpack == nil || ops.PackedSize == nil ||
		ops.Pack == nil || ops.Unpack == nil || ops.Finish == nil {
		return 0, fmt.Errorf("ucp dt create generic: every routine must be set: %w", ucs.ErrInvalidParam)
	}
	id := genericTypes.next.Add(1)
	genericTypes.Store(id, &genericDatatype{ops: *ops, context: context})
	return Datatype(id<<DatatypeShift | DatatypeClassGeneric), nil
}

// DatatypeDestroy releases a generic datatype (ucp_dt_destroy); operations
// already started with it finish normally. Other datatypes need no release
// and are ignored.
func DatatypeDestroy(d Datatype) {
	if d.Class() == DatatypeClassGeneric {
		genericTypes.Delete(uint64(d >> DatatypeShift))
	}
}

func (d Datatype) generic() *genericDatatype {
	v, ok := genericTypes.Load(uint64(d >> DatatypeShift))
	if !ok {
		return nil
	}
	return v.(*genericDatatype)
}

// Fields of DatatypeAttr (ucp_datatype_attr_field).
const (
	DatatypeAttrFieldPackedSize uint64 = 1 << 0
	DatatypeAttrFieldBuffer     uint64 = 1 << 1
	DatatypeAttrFieldCount      uint64 = 1 << 2
)

// DatatypeAttr is the query and answer of DatatypeQuery
// (ucp_datatype_attr_t). Buffer is what the data lives in: a []byte for a
// contiguous datatype, a [][]byte for DatatypeIOV, a *DTLocalSGL for
// DatatypeSGL, what StartPack takes for a generic one (default nil); Count
// is the number of elements (default 1; for DatatypeIOV the number of
// buffers used, for DatatypeSGL the number of elements).
type DatatypeAttr struct {
	FieldMask  uint64
	PackedSize int
	Buffer     any
	Count      int
}

// DatatypeQuery fills in attr.PackedSize, the packed size of Count
// elements of d in Buffer, when attr.FieldMask asks for it (ucp_dt_query).
// It fails with ucs.ErrInvalidParam for an unknown or destroyed datatype, a
// buffer of the wrong type, or a count beyond it.
func DatatypeQuery(d Datatype, attr *DatatypeAttr) error {
	if attr == nil {
		return fmt.Errorf("ucp dt query: %w", ucs.ErrInvalidParam)
	}
	var buf any
	count := 1
	if attr.FieldMask&DatatypeAttrFieldBuffer != 0 {
		buf = attr.Buffer
	}
	if attr.FieldMask&DatatypeAttrFieldCount != 0 {
		count = attr.Count
	}
	if attr.FieldMask&DatatypeAttrFieldPackedSize == 0 {
		return nil
	}
	if count < 0 {
		return fmt.Errorf("ucp dt query: count %d: %w", count, ucs.ErrInvalidParam)
	}
	switch d.Class() {
	case DatatypeClassContig:
		attr.PackedSize = count * d.ElemSize()
	case DatatypeClassIOV:
		iov, _ := buf.([][]byte)
		if count > len(iov) {
			return fmt.Errorf("ucp dt query: %d iov entries of %d: %w", count, len(iov), ucs.ErrInvalidParam)
		}
		attr.PackedSize = iovLen(iov[:count])
	case DatatypeClassSGL:
		sgl, _ := buf.(*DTLocalSGL)
		if sgl == nil || count > len(sgl.Lengths) {
			return fmt.Errorf("ucp dt query: %d SGL elements of a *DTLocalSGL %v: %w", count, sgl != nil, ucs.ErrInvalidParam)
		}
		attr.PackedSize = 0
		for _, n := range sgl.Lengths[:count] {
			attr.PackedSize += n
		}
	case DatatypeClassGeneric:
		g := d.generic()
		if g == nil {
			return fmt.Errorf("ucp dt query: datatype %#x destroyed or unknown: %w", uint64(d), ucs.ErrInvalidParam)
		}
		st := g.ops.StartPack(g.context, buf, count)
		attr.PackedSize = g.ops.PackedSize(st)
		g.ops.Finish(st)
	default:
		return fmt.Errorf("ucp dt query: datatype class %d: %w", d.Class(), ucs.ErrUnsupported)
	}
	return nil
}

func iovLen(iov [][]byte) int {
	n := 0
	for _, b := range iov {
		n += len(b)
	}
	return n
}

// dtIter walks the data of one operation in packed form: it packs a send's
// data piece by piece, or unpacks a receive's. The zero value is empty
// contiguous data.
type dtIter struct {
	class  uint8
	length int    // packed length (receive: what the buffer takes)
	contig []byte // contiguous data
	iov    [][]byte
	// The iov cursor: element iovIdx starts at packed offset iovBase.
	iovIdx, iovBase int
	gen             *genericDatatype
	state           any
	started         bool       // state must be finished
	genErr          ucs.Status // the generic Unpack's first error
}

// dtFromParam returns the iterator over the data of a call: buf for a
// contiguous datatype, param's iov or generic buffer otherwise. unpack says
// whether the data is received into. It fails with ucs.ErrInvalidParam for
// a destroyed or unknown datatype, an iov datatype without iov (or with a
// buf), and with ucs.ErrUnsupported for a strided one.
func dtFromParam(buf []byte, param *RequestParam, unpack bool) (dtIter, error) {
	if param == nil || param.OpAttrMask&OpAttrFieldDatatype == 0 || param.Datatype.Class() == DatatypeClassContig {
		return dtIter{length: len(buf), contig: buf}, nil
	}
	d := param.Datatype
	switch d.Class() {
	case DatatypeClassIOV:
		if buf != nil {
			return dtIter{}, fmt.Errorf("iov datatype with a buffer (the iov goes in RequestParam.SetIOV): %w", ucs.ErrInvalidParam)
		}
		return dtIter{class: DatatypeClassIOV, iov: param.IOV, length: iovLen(param.IOV)}, nil
	case DatatypeClassGeneric:
		g := d.generic()
		if g == nil {
			return dtIter{}, fmt.Errorf("generic datatype %#x destroyed or unknown: %w", uint64(d), ucs.ErrInvalidParam)
		}
		var b any = buf
		count := len(buf)
		if param.OpAttrMask&OpAttrFieldGenericBuffer != 0 {
			b, count = param.GenericBuffer, param.GenericCount
		}
		it := dtIter{class: DatatypeClassGeneric, gen: g, started: true}
		if unpack {
			it.state = g.ops.StartUnpack(g.context, b, count)
		} else {
			it.state = g.ops.StartPack(g.context, b, count)
		}
		it.length = max(g.ops.PackedSize(it.state), 0)
		return it, nil
	}
	return dtIter{}, fmt.Errorf("datatype class %d: %w", d.Class(), ucs.ErrUnsupported)
}

// dtFromArgs returns the iterator over the data of an old-style call
// (buffer, count, datatype): buffer is a []byte for a contiguous datatype
// (count elements of it), a [][]byte for DatatypeIOV (its first count
// buffers), and what StartPack or StartUnpack take for a generic one.
func dtFromArgs(buffer any, count int, d Datatype, unpack bool) (dtIter, error) {
	if count < 0 {
		return dtIter{}, fmt.Errorf("count %d: %w", count, ucs.ErrInvalidParam)
	}
	switch d.Class() {
	case DatatypeClassContig:
		b, ok := buffer.([]byte)
		n := count * max(d.ElemSize(), 1)
		if !ok && buffer != nil || n > len(b) {
			return dtIter{}, fmt.Errorf("contiguous datatype: want a []byte of %d bytes, got %T of %d: %w", n, buffer, len(b), ucs.ErrInvalidParam)
		}
		return dtIter{length: n, contig: b[:n]}, nil
	case DatatypeClassIOV:
		iov, ok := buffer.([][]byte)
		if !ok && buffer != nil || count > len(iov) {
			return dtIter{}, fmt.Errorf("iov datatype: want a [][]byte of %d buffers, got %T: %w", count, buffer, ucs.ErrInvalidParam)
		}
		return dtIter{class: DatatypeClassIOV, iov: iov[:count], length: iovLen(iov[:count])}, nil
	}
	p := RequestParam{OpAttrMask: OpAttrFieldDatatype | OpAttrFieldGenericBuffer, Datatype: d, GenericBuffer: buffer, GenericCount: count}
	return dtFromParam(nil, &p, unpack)
}

// isContig reports whether the data is one contiguous buffer.
func (it *dtIter) isContig() bool { return it.class == DatatypeClassContig }

// canZcopy reports whether the data may be sent from where it lies (not
// generic).
func (it *dtIter) canZcopy() bool { return it.class != DatatypeClassGeneric }

// seek moves the iov cursor to the element that holds packed offset off
// (or past the end), and returns the offset inside it.
func (it *dtIter) seek(off int) int {
	if off < it.iovBase {
		it.iovIdx, it.iovBase = 0, 0
	}
	for it.iovIdx < len(it.iov) && off-it.iovBase >= len(it.iov[it.iovIdx]) {
		it.iovBase += len(it.iov[it.iovIdx])
		it.iovIdx++
	}
	return off - it.iovBase
}

// pack writes the packed data from offset off on into dst and returns the
// number of bytes written: min(len(dst), length-off).
func (it *dtIter) pack(off int, dst []byte) int {
	n := min(len(dst), it.length-off)
	if n <= 0 {
		return 0
	}
	switch it.class {
	case DatatypeClassContig:
		return copy(dst[:n], it.contig[off:])
	case DatatypeClassIOV:
		done := 0
		in := it.seek(off)
		for k := it.iovIdx; k < len(it.iov) && done < n; k++ {
			c := copy(dst[done:n], it.iov[k][in:])
			done += c
			in = 0
		}
		return done
	default:
		// Pack may write less than it is offered (ucp_generic_dt_ops: at
		// most max_length): it is called again from where it stopped,
		// until dst is full or it writes nothing.
		done := 0
		for done < n {
			k := min(max(it.gen.ops.Pack(it.state, off+done, dst[done:n]), 0), n-done)
			if k == 0 {
				break
			}
			done += k
		}
		return done
	}
}

// unpack copies src, the packed data at offset off, into the receive
// buffer. It returns ucs.ErrMessageTruncated when src goes beyond what the
// buffer takes (the part that fits is unpacked) and the generic Unpack's
// error as a status.
func (it *dtIter) unpack(off int, src []byte) ucs.Status {
	if it.fits(off, len(src)) {
		// The common case: contiguous data that fits.
		ucs.Copy(it.contig[off:], src)
		return ucs.OK
	}
	return it.unpackRest(off, src)
}

// fits reports whether n bytes of packed data at offset off go by
// unpack's first case: contiguous data that fits, which a receive's fast
// path copies itself (ucs.Copy into contig[off:]) without unpack's call.
func (it *dtIter) fits(off, n int) bool {
	return it.class == DatatypeClassContig && n <= it.length-off
}

// unpackRest is unpack of data that does not fit, or is not contiguous.
func (it *dtIter) unpackRest(off int, src []byte) ucs.Status {
	st := ucs.OK
	if n := it.length - off; len(src) > n {
		src, st = src[:max(n, 0)], ucs.ErrMessageTruncated
	}
	if len(src) == 0 {
		return st
	}
	switch it.class {
	case DatatypeClassContig:
		ucs.Copy(it.contig[off:off+len(src)], src)
	case DatatypeClassIOV:
		in := it.seek(off)
		for k := it.iovIdx; k < len(it.iov) && len(src) > 0; k++ {
			c := copy(it.iov[k][in:], src)
			src = src[c:]
			in = 0
		}
	default:
		// After an Unpack error the receive has failed: the state gets no
		// more data (UCX unpacks only while the request's status is OK).
		if it.genErr != ucs.OK {
			return it.genErr
		}
		if err := it.gen.ops.Unpack(it.state, off, src); err != nil {
			it.genErr = statusOf(err)
			return it.genErr
		}
	}
	return st
}

// zcopyIOV appends to dst the memory of the n packed bytes at offset off,
// as transport iov elements; the data must not be generic.
func (it *dtIter) zcopyIOV(dst []uct.IOV, off, n int) []uct.IOV {
	if it.class == DatatypeClassContig {
		return append(dst, uct.IOV{Buffer: it.contig[off : off+n]})
	}
	in := it.seek(off)
	for k := it.iovIdx; k < len(it.iov) && n > 0; k++ {
		b := it.iov[k][in:]
		in = 0
		if len(b) == 0 {
			continue
		}
		c := min(len(b), n)
		dst = append(dst, uct.IOV{Buffer: b[:c]})
		n -= c
	}
	return dst
}

// iovCount returns how many iov elements the n packed bytes at off take.
func (it *dtIter) iovCount(off, n int) int {
	if it.class == DatatypeClassContig {
		return 1
	}
	in, c := it.seek(off), 0
	for k := it.iovIdx; k < len(it.iov) && n > 0; k++ {
		if m := len(it.iov[k]) - in; m > 0 {
			c++
			n -= m
		}
		in = 0
	}
	return c
}

// finish ends a generic datatype's state, once.
func (it *dtIter) finish() {
	if it.started {
		it.started = false
		it.gen.ops.Finish(it.state)
	}
	*it = dtIter{}
}
