package ucp

import "fmt"

// The older calls of the UCX API standard document (version 1.0) that
// today's ucp.h no longer has: blocking RMA and atomics, and the older
// endpoint and request release calls. Each is a thin form over the
// current call. ucp_request_is_completed and ucp_request_release are
// Request.IsCompleted and Request.Release; ucp_worker_flush is
// Worker.Flush.

// waitDone waits for the operation whose call returned (r, err): nil, or its
// error, once it completed; r is freed.
func waitDone(r *Request, err error) error {
	if err != nil || r == nil {
		return err
	}
	err = r.Wait()
	r.Free()
	return err
}

// Put writes buf to raddr in the memory of rkey and returns once buf may
// be reused (ucp_put): PutNBX, waited for. Completion at the target needs
// a flush, as for PutNBX. Errors are PutNBX's.
func (ep *Endpoint) Put(buf []byte, raddr uint64, rkey *Rkey) error {
	return waitDone(ep.PutNBX(buf, raddr, rkey, nil))
}

// Get reads len(buf) bytes at raddr in the memory of rkey into buf and
// returns once they are there (ucp_get): GetNBX, waited for.
func (ep *Endpoint) Get(buf []byte, raddr uint64, rkey *Rkey) error {
	return waitDone(ep.GetNBX(buf, raddr, rkey, nil))
}

// AtomicAdd32 adds add to the 32-bit word at raddr (4-byte aligned) in the
// memory of rkey (ucp_atomic_add32). It returns once the operation was
// posted, without waiting for it to complete (a flush does). Errors are
// AtomicOpNBX's.
func (ep *Endpoint) AtomicAdd32(add uint32, raddr uint64, rkey *Rkey) error {
	return ep.atomicPost(uint64(add), 4, raddr, rkey)
}

// AtomicAdd64 is AtomicAdd32 for the 64-bit word at raddr (8-byte aligned)
// (ucp_atomic_add64).
func (ep *Endpoint) AtomicAdd64(add uint64, raddr uint64, rkey *Rkey) error {
	return ep.atomicPost(add, 8, raddr, rkey)
}

// AtomicFAdd32 adds add to the 32-bit word at raddr (4-byte aligned) in
// the memory of rkey and returns the word's old value, once the operation
// completed (ucp_atomic_fadd32).
func (ep *Endpoint) AtomicFAdd32(add uint32, raddr uint64, rkey *Rkey) (uint32, error) {
	v, err := ep.atomicFetch(AtomicOpAdd, uint64(add), 0, 4, raddr, rkey)
	return uint32(v), err
}

// AtomicFAdd64 is AtomicFAdd32 for the 64-bit word at raddr (8-byte
// aligned) (ucp_atomic_fadd64).
func (ep *Endpoint) AtomicFAdd64(add uint64, raddr uint64, rkey *Rkey) (uint64, error) {
	return ep.atomicFetch(AtomicOpAdd, add, 0, 8, raddr, rkey)
}

// AtomicSwap32 stores swap in the 32-bit word at raddr (4-byte aligned) in
// the memory of rkey and returns the word's old value, once the operation
// completed (ucp_atomic_swap32).
func (ep *Endpoint) AtomicSwap32(swap uint32, raddr uint64, rkey *Rkey) (uint32, error) {
	v, err := ep.atomicFetch(AtomicOpSwap, uint64(swap), 0, 4, raddr, rkey)
	return uint32(v), err
}

// AtomicSwap64 is AtomicSwap32 for the 64-bit word at raddr (8-byte
// aligned) (ucp_atomic_swap64).
func (ep *Endpoint) AtomicSwap64(swap uint64, raddr uint64, rkey *Rkey) (uint64, error) {
	return ep.atomicFetch(AtomicOpSwap, swap, 0, 8, raddr, rkey)
}

// AtomicCSwap32 stores swap in the 32-bit word at raddr (4-byte aligned)
// in the memory of rkey if the word equals compare, and returns the word's
// old value (equal to compare when it swapped), once the operation
// completed (ucp_atomic_cswap32).
func (ep *Endpoint) AtomicCSwap32(compare, swap uint32, raddr uint64, rkey *Rkey) (uint32, error) {
	v, err := ep.atomicFetch(AtomicOpCSwap, uint64(swap), uint64(compare), 4, raddr, rkey)
	return uint32(v), err
}

// AtomicCSwap64 is AtomicCSwap32 for the 64-bit word at raddr (8-byte
// aligned) (ucp_atomic_cswap64).
func (ep *Endpoint) AtomicCSwap64(compare, swap uint64, raddr uint64, rkey *Rkey) (uint64, error) {
	return ep.atomicFetch(AtomicOpCSwap, swap, compare, 8, raddr, rkey)
}

// atomicPost posts an add of value to the word of size bytes at raddr; a
// request, if any, is freed and completes by itself.
func (ep *Endpoint) atomicPost(value uint64, size int, raddr uint64, rkey *Rkey) error {
	p := RequestParam{}
	p.SetDatatype(DatatypeContig(size))
	r, err := ep.AtomicOpNBX(AtomicOpAdd, value, raddr, rkey, &p)
	if r != nil {
		r.Free()
	}
	return err
}

// atomicFetch applies op to the word of size bytes at raddr, waits for it
// and returns the old value; cmp is CSwap's compare value.
func (ep *Endpoint) atomicFetch(op AtomicOp, value, cmp uint64, size int, raddr uint64, rkey *Rkey) (uint64, error) {
	old := cmp
	p := RequestParam{}
	p.SetDatatype(DatatypeContig(size)).SetReply(&old)
	if err := waitDone(ep.AtomicOpNBX(op, value, raddr, rkey, &p)); err != nil {
		return 0, err
	}
	return old, nil
}

// Destroy releases the endpoint (ucp_ep_destroy, the older form of
// ucp_ep_close_nbx): its outstanding operations are flushed first, as
// Close(CloseModeFlush) does, and the endpoint closes even when that
// fails; the flush's error is returned.
func (ep *Endpoint) Destroy() error {
	if err := ep.Close(CloseModeFlush); err != nil {
		return fmt.Errorf("ucp ep destroy: %w", err)
	}
	return nil
}

// RequestCancel cancels the request r of the worker, as r.Cancel does
// (ucp_request_cancel, whose older form names the worker).
func (w *Worker) RequestCancel(r *Request) { r.Cancel() }
