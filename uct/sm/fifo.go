package sm

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// The receive FIFO of an iface is a bounded multi-producer single-consumer
// ring of fixed cells in a shared segment. Any process that mapped it may
// send; only the owning iface receives.
//
// Segment layout (offsets in bytes; every counter on its own cache line):
//
//	0    magic    uint64  fifoMagic
//	8    ncells   uint32  a power of two
//	12   stride   uint32  bytes per cell, a multiple of 64
//	64   tail     uint64  next ticket for producers (claimed with CAS)
//	128  armed    uint32  the receive events the sleeping owner waits for; 0 awake
//	132  wseq     uint32  wakeup sequence: a futex word (see wakeup.go)
//	192  head     uint64  tickets the consumer is done with
//	256  cells    ncells * stride
//
// Each cell starts with a 16-byte header:
//
//	0    seq      uint64  lap+1 once ticket t is published, where lap =
//	                      t &^ (ncells-1)
//	8    length   uint32  bytes of data
//	12   am id    uint8   voidID (with length 0) for a cell to skip
//	13   (zero)   3 bytes
//
// followed by stride-16 bytes of data. A producer may take ticket t when
// t < head+ncells (otherwise the ring is full: the send fails with
// ucs.ErrNoResource, it never waits); it claims t with a CAS on tail,
// writes the data and header, and publishes with seq = lap+1. The consumer
// reads tickets in order and stores head lazily: every half ring, and
// whenever it finds the ring empty (Iface.releaseCells). After
// publishing, a producer that finds armed set wakes the owner
// (wakeup.go).
//
// Only producers write a cell, and only the consumer writes head, which
// producers read only when the ring looks full to them (each view caches
// the head it read last). So in a ping-pong a message costs one move of its
// cell's cache line to the consumer and no move back: releasing each cell
// by writing its seq, as format 03 did, made the producer's claim wait for
// that line (sm tag_lat 8 B 0.56 -> 0.39 us). A cell of an earlier lap
// holds an older seq, and a zeroed segment is a ring of free cells (seq 0
// is no ticket's publication): a new iface formats only the header, and
// the pages of cells no message used are never touched (a FIFO is 2 MiB by
// default, and writing every cell cost milliseconds per iface).
//
// The magic is the format version: format 02 added armed and wseq, format
// 03 counted seq from the lap, format 04 replaced the release of each cell
// with head, format 05 made armed the events the owner armed for; a peer
// of another format is refused with ucs.ErrInvalidAddr
// at EP creation.
const fifoMagic uint64 = 0x35304f4649465347 // "GSFIFO05"

const (
	fifoHeaderSize = 256
	fifoTailOff    = 64
	fifoArmedOff   = 128
	fifoWseqOff    = 132
	fifoHeadOff    = 192
	cellHeaderSize = 16
	cellAlign      = 64

	// voidID marks a claimed cell that carries no message (its sender's
	// pack function failed).
	voidID = 0xff

	minFIFOCells = 2
	maxFIFOCells = 1 << 16
	minSegSize   = 64
	maxSegSize   = 1 << 24
)

// fifo is a view of a ring mapped in this process, by its owner or by a
// producer.
type fifo struct {
	tail    *uint64
	head    *uint64       // the consumer's count of tickets it is done with
	seen    atomic.Uint64 // the head this view read last (producers)
	armed   *uint32       // the events the sleeping owner waits for: wake it after publishing one
	wseq    *uint32       // futex word bumped by each wakeup
	cells   unsafe.Pointer
	mask    uint64
	stride  uintptr
	payload int // data bytes per cell
}

// fifoSize returns the bytes of a ring of n cells of stride bytes.
func fifoSize(n, stride int) uint64 {
	return fifoHeaderSize + uint64(n)*uint64(stride)
}

// cellStride returns the stride of cells holding segSize bytes of data.
func cellStride(segSize int) int {
	return (cellHeaderSize + segSize + cellAlign - 1) &^ (cellAlign - 1)
}

// initFIFO formats a ring of n cells of stride bytes at base (fifoSize
// bytes, zeroed: every cell is then free for its ticket of lap 0).
func initFIFO(base unsafe.Pointer, n, stride int) {
	*(*uint32)(unsafe.Add(base, 8)) = uint32(n)
	*(*uint32)(unsafe.Add(base, 12)) = uint32(stride)
	atomic.StoreUint64((*uint64)(base), fifoMagic)
}

// viewFIFO returns the view of a ring at base.
func viewFIFO(base unsafe.Pointer, n, stride int) fifo {
	return fifo{
		tail:    (*uint64)(unsafe.Add(base, fifoTailOff)),
		head:    (*uint64)(unsafe.Add(base, fifoHeadOff)),
		armed:   (*uint32)(unsafe.Add(base, fifoArmedOff)),
		wseq:    (*uint32)(unsafe.Add(base, fifoWseqOff)),
		cells:   unsafe.Add(base, fifoHeaderSize),
		mask:    uint64(n - 1),
		stride:  uintptr(stride),
		payload: stride - cellHeaderSize,
	}
}

// checkFIFO reports whether the ring at base is formatted with n cells of
// stride bytes, as its address said.
func checkFIFO(base unsafe.Pointer, n, stride int) error {
	if atomic.LoadUint64((*uint64)(base)) != fifoMagic ||
		*(*uint32)(unsafe.Add(base, 8)) != uint32(n) || *(*uint32)(unsafe.Add(base, 12)) != uint32(stride) {
		return fmt.Errorf("uct/sm: peer FIFO is not formatted as its address says: %w", ucs.ErrInvalidAddr)
	}
	return nil
}

// cell returns the cell of ticket t.
func (f *fifo) cell(t uint64) unsafe.Pointer {
	return unsafe.Add(f.cells, uintptr(t&f.mask)*f.stride)
}

// data returns the data area of cell c.
func (f *fifo) data(c unsafe.Pointer) []byte {
	return unsafe.Slice((*byte)(unsafe.Add(c, cellHeaderSize)), f.payload)
}

// msg returns the first n bytes of the data area of cell c; n must be
// within it (0 <= n <= payload).
func (f *fifo) msg(c unsafe.Pointer, n int) []byte {
	return unsafe.Slice((*byte)(unsafe.Add(c, cellHeaderSize)), n)
}

// lap returns the lap of ticket t, from which its cell's seq counts.
func (f *fifo) lap(t uint64) uint64 { return t &^ f.mask }

// tryClaim is claim's first try, small enough to be inlined: it takes the
// next ticket when the head seen last says its cell is free, and returns
// nil when it does not or when another producer took the ticket first
// (then claim says which it is).
func (f *fifo) tryClaim() (unsafe.Pointer, uint64) {
	t := atomic.LoadUint64(f.tail)
	if t-f.seen.Load() > f.mask || !atomic.CompareAndSwapUint64(f.tail, t, t+1) {
		return nil, 0
	}
	return f.cell(t), f.lap(t)
}

// claim takes the next ticket and returns its cell and lap (for publish),
// or nil when the ring is full.
func (f *fifo) claim() (unsafe.Pointer, uint64) {
	t := atomic.LoadUint64(f.tail)
	for {
		if !f.free(t) {
			return nil, 0
		}
		if atomic.CompareAndSwapUint64(f.tail, t, t+1) {
			return f.cell(t), f.lap(t)
		}
		t = atomic.LoadUint64(f.tail)
	}
}

// free reports whether the consumer is done with the previous lap's ticket
// of ticket t's cell, reading head only when the one seen last says no.
func (f *fifo) free(t uint64) bool {
	if t-f.seen.Load() <= f.mask {
		return true
	}
	h := atomic.LoadUint64(f.head)
	f.seen.Store(h)
	// A ticket below head (another producer's claim moved tail on) takes
	// another look at tail.
	return t-h <= f.mask || t < h
}

// hasRoom reports whether a claim would find a free cell now.
func (f *fifo) hasRoom() bool { return f.free(atomic.LoadUint64(f.tail)) }

// publish writes the header of cell c, claimed in lap, and hands it to the
// consumer.
func publish(c unsafe.Pointer, lap uint64, id uint8, n int) {
	putCellHeader(header(c)[:], id, n)
	atomic.StoreUint64((*uint64)(c), lap+1)
}

// putCellHeader encodes the am id and length of a cell into b (the 8 header
// bytes after seq), with one 64-bit store; n is a cell's length (0 <= n <=
// maxSegSize). (Written uint64(uint32(n)), the length would leave the
// compiler sure of the three zero bytes, which it then stores one by one
// beside the five others.)
func putCellHeader(b []byte, id uint8, n int) {
	binary.LittleEndian.PutUint64(b, uint64(n)|uint64(id)<<32)
}

// decodeCellHeader decodes the 8 header bytes after seq of a cell whose data
// area holds payload bytes; a void cell decodes as id voidID and length 0.
// The cell was written by another process, so nothing is trusted: another id
// of uct.AMMaxID or more, a length beyond payload or non-zero padding fail
// with ucs.ErrInvalidParam.
func decodeCellHeader(b []byte, payload int) (id uint8, n int, err error) {
	if len(b) != cellHeaderSize-8 {
		return 0, 0, fmt.Errorf("uct/sm: cell header of %d bytes: %w", len(b), ucs.ErrInvalidParam)
	}
	l := binary.LittleEndian.Uint32(b)
	id = b[4]
	switch {
	case uint64(l) > uint64(payload):
		return 0, 0, fmt.Errorf("uct/sm: cell of %d bytes in a %d-byte cell: %w", l, payload, ucs.ErrInvalidParam)
	case b[5]|b[6]|b[7] != 0:
		return 0, 0, fmt.Errorf("uct/sm: cell header padding %x: %w", b[5:], ucs.ErrInvalidParam)
	case id == voidID && l == 0:
	case id >= uct.AMMaxID:
		return 0, 0, fmt.Errorf("uct/sm: cell for AM id %d: %w", id, ucs.ErrInvalidParam)
	}
	return id, int(l), nil
}

// cellHeaderFast decodes the 8 header bytes after seq of a cell whose data
// area holds payload bytes with one 64-bit load, when they are those of a
// message (an id below uct.AMMaxID, a length within payload, zero
// padding), and reports whether they were: a void or malformed cell is
// left to decodeCellHeader, which says what it is.
func cellHeaderFast(b *[cellHeaderSize - 8]byte, payload int) (id uint8, n int, ok bool) {
	h := binary.LittleEndian.Uint64(b[:])
	l := uint32(h)
	// The padding is zero and id below uct.AMMaxID when the bits from
	// id's amIDBits up are all zero: one shift and compare for both.
	return uint8(h >> 32), int(l), h>>(32+amIDBits) == 0 && uint64(l) <= uint64(payload)
}

// amIDBits is the number of bits of an AM id below uct.AMMaxID.
const amIDBits = 6

// uct.AMMaxID is 1<<amIDBits, as cellHeaderFast requires (this fails to
// compile otherwise).
var _ [uct.AMMaxID - 1<<amIDBits]struct{}
var _ [1<<amIDBits - uct.AMMaxID]struct{}

// cursor is the consumer's place in its ring: the ticket it reads next,
// with the offset of that ticket's cell and the seq that publishes it,
// kept as the ticket moves on, so that a look at the cell (what a
// receiver polling an empty ring does all the time) is two loads and a
// compare. (An offset, not a pointer: storing a pointer in the iface
// would cost a write barrier check.)
type cursor struct {
	t   uint64  // the next ticket
	off uintptr // its cell's offset from the first cell
	seq uint64  // the seq that publishes it: its lap+1
}

// start returns the cursor of ticket 0, where a new ring's consumer
// starts.
func start() cursor { return cursor{seq: 1} }

// ready returns the cell of r's ticket if it was published, or nil.
func (f *fifo) ready(r *cursor) unsafe.Pointer {
	c := unsafe.Add(f.cells, r.off)
	if atomic.LoadUint64((*uint64)(c)) != r.seq {
		return nil
	}
	return c
}

// advance moves r to the next ticket.
func (f *fifo) advance(r *cursor) {
	r.t++
	if r.t&f.mask != 0 {
		r.off += f.stride
		return
	}
	r.off, r.seq = 0, r.seq+f.mask+1
}

// done tells producers that the consumer is done with every ticket below
// t, whose cells they may now write again.
func (f *fifo) done(t uint64) { atomic.StoreUint64(f.head, t) }

// header returns the 8 header bytes after seq of cell c.
func header(c unsafe.Pointer) *[cellHeaderSize - 8]byte {
	return (*[cellHeaderSize - 8]byte)(unsafe.Add(c, 8))
}
