package sm

import (
	"encoding/binary"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// EP is a posix endpoint: a producer view of a peer iface's FIFO, plus the
// RMA and atomic operations, which need no connection at all (raddr+rkey is
// the local mapping of the remote address).
//
// Every operation completes on return. RMA and atomic operations do no
// checks beyond their size limits and atomic alignment (ucs.ErrInvalidParam):
// raddr and rkey must come from an unpacked key that covers the range, as
// with every uct transport.
type EP struct {
	iface   *Iface
	tx      fifo
	seg     segKey
	maxAM   int              // largest message, header included
	pending uct.PendingGroup // in iface.pending
	peer    segKey           // the peer's FIFO segment, for Check (seg is cleared by Destroy)
	peerFD  int32            // descriptor of the peer's FIFO memfd in its process, for Check
}

// remote returns the local address of raddr under the posix rkey delta.
// The memory is a shared mapping, not Go memory, so the pointer is formed by
// offsetting nil.
func remote(raddr, rkey uint64) unsafe.Pointer {
	return unsafe.Add(unsafe.Pointer(nil), raddr+rkey)
}

// mem returns n bytes at raddr.
func mem(raddr, rkey uint64, n int) []byte {
	return unsafe.Slice((*byte)(remote(raddr, rkey)), n)
}

// PutShort copies buf (at most Put.MaxShort bytes) to raddr.
func (e *EP) PutShort(buf []byte, raddr uint64, rkey uint64) ucs.Status {
	if len(buf) > e.iface.segSize {
		return ucs.ErrInvalidParam
	}
	copy(mem(raddr, rkey, len(buf)), buf)
	return ucs.OK
}

// PutBcopy lets pack write straight into the remote memory at raddr (its
// dst has Put.MaxBcopy bytes, so pack must write only the bytes it returns)
// and returns their number.
func (e *EP) PutBcopy(pack uct.PackFunc, raddr uint64, rkey uint64) (int, ucs.Status) {
	dst := mem(raddr, rkey, e.iface.segSize)
	n := pack(dst)
	if n < 0 || n > len(dst) {
		return 0, ucs.ErrInvalidParam
	}
	return n, ucs.OK
}

// PutZcopy copies the iov, in order, to consecutive bytes from raddr.
func (e *EP) PutZcopy(iov []uct.IOV, raddr uint64, rkey uint64, comp *uct.Completion) ucs.Status {
	for k := range iov {
		b := iov[k].Buffer
		ucs.Memcpy(mem(raddr, rkey, len(b)), b)
		raddr += uint64(len(b))
	}
	return ucs.OK
}

// GetBcopy passes the length bytes (at most Get.MaxBcopy) at raddr to
// unpack, which reads them straight from the remote memory.
func (e *EP) GetBcopy(unpack uct.UnpackFunc, length int, raddr uint64, rkey uint64, comp *uct.Completion) ucs.Status {
	if length < 0 || length > e.iface.segSize {
		return ucs.ErrInvalidParam
	}
	unpack(mem(raddr, rkey, length))
	return ucs.OK
}

// GetZcopy fills the iov, in order, from consecutive bytes at raddr.
func (e *EP) GetZcopy(iov []uct.IOV, raddr uint64, rkey uint64, comp *uct.Completion) ucs.Status {
	for k := range iov {
		b := iov[k].Buffer
		ucs.Memcpy(b, mem(raddr, rkey, len(b)))
		raddr += uint64(len(b))
	}
	return ucs.OK
}

// AMShort sends the header and payload (8+len(payload) <= AM.MaxShort,
// ucs.ErrInvalidParam otherwise) to handler id of the peer; it fails with
// ucs.ErrNoResource when the peer's FIFO is full.
func (e *EP) AMShort(id uint8, header uint64, payload []byte) ucs.Status {
	if e.tx.tail == nil {
		return ucs.ErrNotConnected
	}
	if id >= uct.AMMaxID || 8+len(payload) > e.maxAM {
		return ucs.ErrInvalidParam
	}
	c, lap := e.tx.tryClaim()
	if c == nil {
		if c, lap = e.tx.claim(); c == nil {
			return ucs.ErrNoResource
		}
	}
	// The header and payload are written through pointers, not through a
	// slice of the message, which only a tracer needs.
	n := 8 + len(payload)
	d := unsafe.Add(c, cellHeaderSize)
	binary.LittleEndian.PutUint64((*[8]byte)(d)[:], header)
	ucs.Copy(unsafe.Slice((*byte)(unsafe.Add(d, 8)), len(payload)), payload)
	if tr := e.iface.tracer.Load(); tr != nil {
		tr.Call(uct.AMTraceSend, id, e.tx.msg(c, n))
	}
	publish(c, lap, id, n)
	e.tx.notify(uct.EventRecv)
	return ucs.OK
}

// AMBcopy lets pack write the message straight into a cell of the peer's
// FIFO (dst has AM.MaxBcopy bytes) and sends what it wrote (flags: 0 or
// uct.SendFlagSignaled, see EventArm); it fails with
// ucs.ErrNoResource, without calling pack, when the FIFO is full.
func (e *EP) AMBcopy(id uint8, pack uct.PackFunc, flags uint32) (int, ucs.Status) {
	if e.tx.tail == nil {
		return 0, ucs.ErrNotConnected
	}
	if id >= uct.AMMaxID {
		return 0, ucs.ErrInvalidParam
	}
	c, lap := e.tx.tryClaim()
	if c == nil {
		if c, lap = e.tx.claim(); c == nil {
			return 0, ucs.ErrNoResource
		}
	}
	d := e.tx.data(c)[:e.maxAM]
	n := pack(d)
	if n < 0 || n > len(d) {
		// The cell is claimed and must be published: publish it void.
		e.iface.tracer.Trace(uct.AMTraceSendDrop, id, nil)
		publish(c, lap, voidID, 0)
		e.tx.notify(uct.EventRecv)
		return 0, ucs.ErrInvalidParam
	}
	e.iface.tracer.Trace(uct.AMTraceSend, id, d[:n])
	publish(c, lap, id, n)
	e.tx.notify(uct.RecvEvents(flags))
	return n, ucs.OK
}

// AMZcopy copies the header and the iov (at most AM.MaxZcopy bytes in all)
// into a cell of the peer's FIFO; it completes on return and fails with
// ucs.ErrNoResource when the FIFO is full.
func (e *EP) AMZcopy(id uint8, header []byte, iov []uct.IOV, flags uint32, comp *uct.Completion) ucs.Status {
	total := len(header)
	for k := range iov {
		total += len(iov[k].Buffer)
	}
	if e.tx.tail == nil {
		return ucs.ErrNotConnected
	}
	if id >= uct.AMMaxID || total > e.maxAM {
		return ucs.ErrInvalidParam
	}
	c, lap := e.tx.tryClaim()
	if c == nil {
		if c, lap = e.tx.claim(); c == nil {
			return ucs.ErrNoResource
		}
	}
	d := e.tx.data(c)
	n := copy(d, header)
	for k := range iov {
		n += copy(d[n:], iov[k].Buffer)
	}
	e.iface.tracer.Trace(uct.AMTraceSend, id, d[:n])
	publish(c, lap, id, n)
	e.tx.notify(uct.RecvEvents(flags))
	return ucs.OK
}

// AtomicPost64 applies op (Add, And, Or, Xor) to the 8-byte word at raddr.
func (e *EP) AtomicPost64(op uct.AtomicOp, value uint64, raddr uint64, rkey uint64) ucs.Status {
	var old uint64
	return atomic64(op, value, 0, remote(raddr, rkey), &old)
}

// AtomicPost32 applies op (Add, And, Or, Xor) to the 4-byte word at raddr.
func (e *EP) AtomicPost32(op uct.AtomicOp, value uint32, raddr uint64, rkey uint64) ucs.Status {
	var old uint32
	return atomic32(op, value, 0, remote(raddr, rkey), &old)
}

// AtomicFetch64 applies op (Add, And, Or, Xor, Swap) to the 8-byte word at
// raddr and stores its old value in *result.
func (e *EP) AtomicFetch64(op uct.AtomicOp, value uint64, raddr uint64, rkey uint64, result *uint64, comp *uct.Completion) ucs.Status {
	return atomic64(op, value, 0, remote(raddr, rkey), result)
}

// AtomicFetch32 applies op (Add, And, Or, Xor, Swap) to the 4-byte word at
// raddr and stores its old value in *result.
func (e *EP) AtomicFetch32(op uct.AtomicOp, value uint32, raddr uint64, rkey uint64, result *uint32, comp *uct.Completion) ucs.Status {
	return atomic32(op, value, 0, remote(raddr, rkey), result)
}

// AtomicCSwap64 stores swap at raddr if it holds compare; *result gets the
// old value.
func (e *EP) AtomicCSwap64(compare, swap uint64, raddr uint64, rkey uint64, result *uint64, comp *uct.Completion) ucs.Status {
	return atomic64(uct.AtomicOpCSwap, swap, compare, remote(raddr, rkey), result)
}

// AtomicCSwap32 stores swap at raddr if it holds compare; *result gets the
// old value.
func (e *EP) AtomicCSwap32(compare, swap uint32, raddr uint64, rkey uint64, result *uint32, comp *uct.Completion) ucs.Status {
	return atomic32(uct.AtomicOpCSwap, swap, compare, remote(raddr, rkey), result)
}

// atomic64 applies op to the word at p, which must be 8-byte aligned
// (ucs.ErrInvalidParam otherwise: a split lock is not atomic everywhere),
// with the CPU atomics every transport shares, and stores the old value in
// *old.
func atomic64(op uct.AtomicOp, v, cmp uint64, p unsafe.Pointer, old *uint64) ucs.Status {
	if uintptr(p)&7 != 0 {
		return ucs.ErrInvalidParam
	}
	o, st := uct.CPUAtomic64(op, (*uint64)(p), v, cmp)
	if st == ucs.OK {
		*old = o
	}
	return st
}

// atomic32 is atomic64 for 4-byte words.
func atomic32(op uct.AtomicOp, v, cmp uint32, p unsafe.Pointer, old *uint32) ucs.Status {
	if uintptr(p)&3 != 0 {
		return ucs.ErrInvalidParam
	}
	o, st := uct.CPUAtomic32(op, (*uint32)(p), v, cmp)
	if st == ucs.OK {
		*old = o
	}
	return st
}

// Flush returns OK: every operation completed on return.
func (e *EP) Flush(flags uct.FlushFlags, comp *uct.Completion) ucs.Status { return ucs.OK }

// Fence issues a full memory barrier.
func (e *EP) Fence(flags uint32) ucs.Status {
	memoryBarrier()
	return ucs.OK
}

// PendingAdd returns ucs.ErrBusy when the peer's FIFO has a free cell;
// otherwise it queues r, to be called by the Progress of this EP's iface
// until it posts (any result but ucs.ErrNoResource).
func (e *EP) PendingAdd(r *uct.PendingReq, flags uint32) ucs.Status {
	if e.tx.tail == nil {
		return ucs.ErrNotConnected
	}
	if e.tx.hasRoom() {
		return ucs.ErrBusy
	}
	e.iface.pending.Add(&e.pending, r)
	return ucs.OK
}

// PendingPurge removes every request queued on the EP, calling cb (when not
// nil) on each.
func (e *EP) PendingPurge(cb func(r *uct.PendingReq)) {
	e.iface.pending.PurgeEach(&e.pending, cb)
}

// Check implements uct.EPChecker: it tells whether the process of the peer
// iface still runs and still has its FIFO open, by reading the link
// /proc/<pid>/fd/<fd> of the FIFO's memfd in that process. A process that
// ended (a zombie not yet reaped included) has no descriptors left, and a
// reused pid or descriptor number names something else: either way Check
// returns ucs.ErrEndpointTimeout, as UCX's shared-memory keepalive does. It
// returns ucs.OK while the peer lives, and ucs.ErrInvalidParam for flags
// other than 0 or a non-nil comp (the check completes on return). It costs
// one readlink system call and touches no shared memory, so it is safe from
// any goroutine, even while or after the EP is destroyed.
func (e *EP) Check(flags uint32, comp *uct.Completion) ucs.Status {
	if flags != 0 || comp != nil {
		return ucs.ErrInvalidParam
	}
	if e.peer.id == 0 {
		return ucs.ErrNotConnected
	}
	if !segmentOpenIn(e.peer, int(e.peerFD)) {
		return ucs.ErrEndpointTimeout
	}
	return ucs.OK
}

var _ uct.EPChecker = (*EP)(nil)

// Destroy purges the EP's pending requests and drops its reference to the
// peer's FIFO mapping. The EP should not be used afterwards: active
// messages and PendingAdd then fail with ucs.ErrNotConnected (RMA and
// atomics, which do not use the FIFO, still reach memory of unpacked rkeys).
func (e *EP) Destroy() {
	e.PendingPurge(nil)
	if e.seg.id != 0 {
		e.tx = fifo{}
		releaseSegment(e.seg, false)
		e.seg = segKey{}
	}
}
