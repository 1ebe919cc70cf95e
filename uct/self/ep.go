package self

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// EP is a self endpoint: its RMA operations are copies at raddr+rkey in this
// process and complete on return; its active messages go to the queue of
// its iface. Atomic operations need naturally aligned addresses
// (ucs.ErrInvalidParam otherwise).
//
// An EP created for connecting to an EP (EPParams without IfaceAddr) fails
// every operation but Fence and Destroy with ucs.ErrNotConnected until
// ConnectToEP bound it (see epconn.go).
type EP struct {
	iface     *Iface
	id        uint64      // non-zero for EPs created unconnected
	connected atomic.Bool // operations are allowed
	peer      uint64      // id of the EP ConnectToEP bound it to; guarded by iface.mu
}

// ptr returns the local address of raddr under rkey.
//
// The target of a self operation is usually ordinary Go memory, so the
// address is turned back into a pointer by reinterpreting its bits: that is
// what converting a uintptr would do, but it keeps go vet's unsafeptr check
// quiet and passes -d=checkptr (enabled by -race), which rejects pointer
// arithmetic (unsafe.Add included) that lands in a heap object not derived
// from the operand. The caller guarantees, as with any uct rkey, that the
// memory stays alive while it is accessed.
func ptr(raddr, rkey uint64) unsafe.Pointer {
	a := uintptr(raddr + rkey)
	return *(*unsafe.Pointer)(unsafe.Pointer(&a))
}

// mem returns n bytes at raddr under rkey.
func mem(raddr, rkey uint64, n int) []byte {
	return unsafe.Slice((*byte)(ptr(raddr, rkey)), n)
}

// PutShort copies buf to raddr.
func (e *EP) PutShort(buf []byte, raddr uint64, rkey uint64) ucs.Status {
	if !e.connected.Load() {
		return ucs.ErrNotConnected
	}
	copy(mem(raddr, rkey, len(buf)), buf)
	return ucs.OK
}

// bouncePool holds the buffers that PutBcopy packs into.
var bouncePool sync.Pool

// PutBcopy packs into a buffer of Put.MaxBcopy bytes and copies the result
// to raddr.
func (e *EP) PutBcopy(pack uct.PackFunc, raddr uint64, rkey uint64) (int, ucs.Status) {
	if !e.connected.Load() {
		return 0, ucs.ErrNotConnected
	}
	bp, _ := bouncePool.Get().(*[]byte)
	if bp == nil || len(*bp) < e.iface.segSize {
		b := make([]byte, e.iface.segSize)
		bp = &b
	}
	buf := (*bp)[:e.iface.segSize]
	n := pack(buf)
	if n < 0 || n > len(buf) {
		bouncePool.Put(bp)
		return 0, ucs.ErrInvalidParam
	}
	copy(mem(raddr, rkey, n), buf[:n])
	bouncePool.Put(bp)
	return n, ucs.OK
}

// PutZcopy copies the iov, in order, to consecutive bytes from raddr.
func (e *EP) PutZcopy(iov []uct.IOV, raddr uint64, rkey uint64, comp *uct.Completion) ucs.Status {
	if !e.connected.Load() {
		return ucs.ErrNotConnected
	}
	for _, v := range iov {
		ucs.Memcpy(mem(raddr, rkey, len(v.Buffer)), v.Buffer)
		raddr += uint64(len(v.Buffer))
	}
	return ucs.OK
}

// GetBcopy passes the length bytes at raddr to unpack.
func (e *EP) GetBcopy(unpack uct.UnpackFunc, length int, raddr uint64, rkey uint64, comp *uct.Completion) ucs.Status {
	if !e.connected.Load() {
		return ucs.ErrNotConnected
	}
	if length < 0 {
		return ucs.ErrInvalidParam
	}
	unpack(mem(raddr, rkey, length))
	return ucs.OK
}

// GetZcopy fills the iov, in order, from consecutive bytes at raddr.
func (e *EP) GetZcopy(iov []uct.IOV, raddr uint64, rkey uint64, comp *uct.Completion) ucs.Status {
	if !e.connected.Load() {
		return ucs.ErrNotConnected
	}
	for _, v := range iov {
		ucs.Memcpy(v.Buffer, mem(raddr, rkey, len(v.Buffer)))
		raddr += uint64(len(v.Buffer))
	}
	return ucs.OK
}

// AMShort queues the header and payload (8+len(payload) <= AM.MaxShort,
// ucs.ErrInvalidParam otherwise) for handler id; ucs.ErrNoResource when the
// iface queue is full.
func (e *EP) AMShort(id uint8, header uint64, payload []byte) ucs.Status {
	if !e.connected.Load() {
		return ucs.ErrNotConnected
	}
	if id >= uct.AMMaxID || 8+len(payload) > e.iface.segSize {
		return ucs.ErrInvalidParam
	}
	buf, ok := e.iface.reserve()
	if !ok {
		return ucs.ErrNoResource
	}
	binary.LittleEndian.PutUint64(buf, header)
	n := 8 + copy(buf[8:], payload)
	e.iface.enqueue(id, buf[:n], uct.EventRecv)
	return ucs.OK
}

// AMBcopy queues what pack writes into an AM.MaxBcopy-byte buffer and
// returns its length; ucs.ErrNoResource when the iface queue is full.
func (e *EP) AMBcopy(id uint8, pack uct.PackFunc, flags uint32) (int, ucs.Status) {
	if !e.connected.Load() {
		return 0, ucs.ErrNotConnected
	}
	if id >= uct.AMMaxID {
		return 0, ucs.ErrInvalidParam
	}
	buf, ok := e.iface.reserve()
	if !ok {
		return 0, ucs.ErrNoResource
	}
	n := pack(buf)
	if n < 0 || n > len(buf) {
		e.iface.tracer.Trace(uct.AMTraceSendDrop, id, nil)
		e.iface.unreserve(buf)
		return 0, ucs.ErrInvalidParam
	}
	e.iface.enqueue(id, buf[:n], uct.RecvEvents(flags))
	return n, ucs.OK
}

// AMZcopy queues a copy of the header followed by the iov (at most
// AM.MaxZcopy bytes in all); it completes on return.
func (e *EP) AMZcopy(id uint8, header []byte, iov []uct.IOV, flags uint32, comp *uct.Completion) ucs.Status {
	if !e.connected.Load() {
		return ucs.ErrNotConnected
	}
	total := len(header)
	for _, v := range iov {
		total += len(v.Buffer)
	}
	if id >= uct.AMMaxID || total > e.iface.segSize {
		return ucs.ErrInvalidParam
	}
	buf, ok := e.iface.reserve()
	if !ok {
		return ucs.ErrNoResource
	}
	n := copy(buf, header)
	for _, v := range iov {
		n += copy(buf[n:], v.Buffer)
	}
	e.iface.enqueue(id, buf[:n], uct.RecvEvents(flags))
	return ucs.OK
}

// AtomicPost64 applies op (Add, And, Or, Xor) to the 8-byte word at raddr.
func (e *EP) AtomicPost64(op uct.AtomicOp, value uint64, raddr uint64, rkey uint64) ucs.Status {
	if !e.connected.Load() {
		return ucs.ErrNotConnected
	}
	var old uint64
	return atomic64(op, value, 0, raddr, rkey, &old)
}

// AtomicPost32 applies op (Add, And, Or, Xor) to the 4-byte word at raddr.
func (e *EP) AtomicPost32(op uct.AtomicOp, value uint32, raddr uint64, rkey uint64) ucs.Status {
	if !e.connected.Load() {
		return ucs.ErrNotConnected
	}
	var old uint32
	return atomic32(op, value, 0, raddr, rkey, &old)
}

// AtomicFetch64 applies op (Add, And, Or, Xor, Swap) to the 8-byte word at
// raddr and stores its old value in *result.
func (e *EP) AtomicFetch64(op uct.AtomicOp, value uint64, raddr uint64, rkey uint64, result *uint64, comp *uct.Completion) ucs.Status {
	if !e.connected.Load() {
		return ucs.ErrNotConnected
	}
	return atomic64(op, value, 0, raddr, rkey, result)
}

// AtomicFetch32 applies op (Add, And, Or, Xor, Swap) to the 4-byte word at
// raddr and stores its old value in *result.
func (e *EP) AtomicFetch32(op uct.AtomicOp, value uint32, raddr uint64, rkey uint64, result *uint32, comp *uct.Completion) ucs.Status {
	if !e.connected.Load() {
		return ucs.ErrNotConnected
	}
	return atomic32(op, value, 0, raddr, rkey, result)
}

// AtomicCSwap64 stores swap at raddr if it holds compare; *result gets the
// old value.
func (e *EP) AtomicCSwap64(compare, swap uint64, raddr uint64, rkey uint64, result *uint64, comp *uct.Completion) ucs.Status {
	if !e.connected.Load() {
		return ucs.ErrNotConnected
	}
	return atomic64(uct.AtomicOpCSwap, swap, compare, raddr, rkey, result)
}

// AtomicCSwap32 stores swap at raddr if it holds compare; *result gets the
// old value.
func (e *EP) AtomicCSwap32(compare, swap uint32, raddr uint64, rkey uint64, result *uint32, comp *uct.Completion) ucs.Status {
	if !e.connected.Load() {
		return ucs.ErrNotConnected
	}
	return atomic32(uct.AtomicOpCSwap, swap, compare, raddr, rkey, result)
}

// atomic64 applies op to the 8-byte word at raddr+rkey with the CPU
// atomics every transport shares, and stores the old value in *old.
func atomic64(op uct.AtomicOp, v, cmp uint64, raddr, rkey uint64, old *uint64) ucs.Status {
	if uintptr(ptr(raddr, rkey))&7 != 0 {
		return ucs.ErrInvalidParam
	}
	o, st := uct.CPUAtomic64(op, (*uint64)(ptr(raddr, rkey)), v, cmp)
	if st == ucs.OK {
		*old = o
	}
	return st
}

// atomic32 is atomic64 for 4-byte words.
func atomic32(op uct.AtomicOp, v, cmp uint32, raddr, rkey uint64, old *uint32) ucs.Status {
	if uintptr(ptr(raddr, rkey))&3 != 0 {
		return ucs.ErrInvalidParam
	}
	o, st := uct.CPUAtomic32(op, (*uint32)(ptr(raddr, rkey)), v, cmp)
	if st == ucs.OK {
		*old = o
	}
	return st
}

// Flush returns OK: every operation completed on return; it fails with
// ucs.ErrNotConnected before ConnectToEP.
func (e *EP) Flush(flags uct.FlushFlags, comp *uct.Completion) ucs.Status {
	if !e.connected.Load() {
		return ucs.ErrNotConnected
	}
	return ucs.OK
}

// Fence issues a full memory barrier.
func (e *EP) Fence(flags uint32) ucs.Status {
	memoryBarrier()
	return ucs.OK
}

// PendingAdd returns ucs.ErrBusy when the iface queue has room; otherwise it
// queues r, to be called by the iface's Progress once messages drained.
func (e *EP) PendingAdd(r *uct.PendingReq, flags uint32) ucs.Status {
	if !e.connected.Load() {
		return ucs.ErrNotConnected
	}
	i := e.iface
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.used < i.qlen {
		return ucs.ErrBusy
	}
	i.pending = append(i.pending, pendingEntry{e, r})
	i.npending.Add(1)
	return ucs.OK
}

// PendingPurge removes the requests this EP queued, calling cb on each.
func (e *EP) PendingPurge(cb func(r *uct.PendingReq)) {
	i := e.iface
	i.mu.Lock()
	var purged []*uct.PendingReq
	kept := i.pending[:0]
	for _, p := range i.pending {
		if p.ep == e {
			purged = append(purged, p.req)
		} else {
			kept = append(kept, p)
		}
	}
	clear(i.pending[len(kept):])
	i.pending = kept
	i.npending.Store(int32(len(kept)))
	i.mu.Unlock()
	if cb != nil {
		for _, r := range purged {
			cb(r)
		}
	}
}

// Destroy purges the EP's pending requests; the id of an EP created for
// connecting to an EP is forgotten.
func (e *EP) Destroy() {
	e.PendingPurge(nil)
	if e.id != 0 {
		e.iface.mu.Lock()
		delete(e.iface.epIDs, e.id)
		e.iface.mu.Unlock()
	}
}
