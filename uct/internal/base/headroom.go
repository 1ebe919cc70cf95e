package base

import (
	"fmt"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// Headroom is the receive headroom of an iface (uct.IfaceParams.RxHeadroom):
// the bytes reserved in front of the data its AM handlers get, in the same
// buffer. The zero value reserves none.
//
// A transport that hands data with headroom allocates each receive buffer
// as Len bytes of headroom followed by the data, hands its handlers
// Data(buf, length) (whose capacity is never zero, so that the pointer of
// the slice really lies in the buffer, Len bytes past its start), and gets
// the buffer back from that slice with Buffer. Of, which the iface's
// RxHeadroom method returns, is the users' way to the headroom.
type Headroom struct{ n int }

// NewHeadroom returns the headroom params ask for (none when params is
// nil). A negative RxHeadroom, or one above uct.MaxRxHeadroom, fails with
// ucs.ErrInvalidParam in an error that pkg begins.
func NewHeadroom(pkg string, params *uct.IfaceParams) (Headroom, error) {
	if params == nil {
		return Headroom{}, nil
	}
	if n := params.RxHeadroom; n < 0 || n > uct.MaxRxHeadroom {
		return Headroom{}, fmt.Errorf("%s: RxHeadroom %d outside [0, %d]: %w", pkg, n, uct.MaxRxHeadroom, ucs.ErrInvalidParam)
	}
	return Headroom{params.RxHeadroom}, nil
}

// Len returns the number of bytes reserved in front of the data.
func (h Headroom) Len() int { return h.n }

// Alloc returns a new receive buffer for data of up to length bytes:
// Len bytes of headroom, then length bytes (one at least, so that data
// of no bytes still has capacity in the buffer). Transports with free
// lists of buffers size them as Alloc does.
func (h Headroom) Alloc(length int) []byte { return make([]byte, h.n+max(length, 1)) }

// Data returns the length data bytes of buf, a receive buffer of this
// headroom (at least Len+1 bytes): buf[Len:Len+length], with the
// capacity of the rest of buf.
func (h Headroom) Data(buf []byte, length int) []byte { return buf[h.n : h.n+length] }

// Buffer returns the receive buffer that data was cut from by Data: the
// Len bytes in front of data and data, with the capacity of the buffer.
// Without headroom it returns data itself. data must be exactly what Data
// returned (or a slice of it that starts where it starts): anything else
// gives a slice of memory that is not the buffer's.
func (h Headroom) Buffer(data []byte) []byte {
	if h.n == 0 {
		return data
	}
	return unsafe.Slice(h.front(data), h.n+cap(data))[:h.n+len(data)]
}

// Of returns the Len bytes reserved in front of data, nil without
// headroom (see uct.Iface.RxHeadroom). Its capacity ends where data
// begins, so appending to it cannot write data. It panics when data has
// no capacity: no transport hands such data with headroom.
func (h Headroom) Of(data []byte) []byte {
	if h.n == 0 {
		return nil
	}
	return unsafe.Slice(h.front(data), h.n)
}

// front returns the address Len bytes before data's first byte, which must
// lie in the same buffer: the slice pointer of data (with cap(data) > 0)
// points into the buffer of Data, Len bytes past its start, and a pointer
// to the start keeps the same allocation alive.
func (h Headroom) front(data []byte) *byte {
	if cap(data) == 0 {
		panic(fmt.Sprintf("uct: RxHeadroom of a slice with no capacity: not data a transport handed with %d bytes of headroom", h.n))
	}
	return (*byte)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(data)), -h.n))
}
