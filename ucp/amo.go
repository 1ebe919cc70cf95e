package ucp

import (
	"fmt"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// AtomicOp is an atomic operation of AtomicOpNBX (ucp_atomic_op_t). Its
// values are those of uct.AtomicOp (not the numbering of the UCX
// documents), so that a valid op converts to uct.AtomicOp by a cast.
type AtomicOp int

// Atomic operations. Add, And, Or and Xor are posted when no reply buffer is
// given and fetching otherwise; Swap and CSwap always fetch.
const (
	AtomicOpAdd   = AtomicOp(uct.AtomicOpAdd)
	AtomicOpAnd   = AtomicOp(uct.AtomicOpAnd)
	AtomicOpOr    = AtomicOp(uct.AtomicOpOr)
	AtomicOpXor   = AtomicOp(uct.AtomicOpXor)
	AtomicOpSwap  = AtomicOp(uct.AtomicOpSwap)
	AtomicOpCSwap = AtomicOp(uct.AtomicOpCSwap)
)

// String returns the name of op ("add", "cswap", ...), or "AtomicOp(N)"
// for a value that is no operation.
func (op AtomicOp) String() string { return uct.AtomicOp(op).String() }

// uct returns op as a uct.AtomicOp, and false when op is no operation.
func (op AtomicOp) uct() (uct.AtomicOp, bool) { return uct.AtomicOp(op), uct.AtomicOp(op).Valid() }

// AtomicOpNBX applies op with operand value to the 4- or 8-byte word at
// raddr in the memory of rkey (ucp_atomic_op_nbx). The operand size is the
// element size of param's datatype (DatatypeContig(4) or (8); 8 when unset).
// With a reply buffer (RequestParam.SetReply) the operation fetches the old
// value into it; for CSwap the reply buffer holds the compare value on input.
// It returns (nil, nil) when the operation completed at once, a request
// otherwise; ucs.ErrInvalidParam for a bad op, size or missing reply buffer.
func (ep *Endpoint) AtomicOpNBX(op AtomicOp, value uint64, raddr uint64, rkey *Rkey, param *RequestParam) (*Request, error) {
	uop, ok := op.uct()
	if !ok {
		return nil, fmt.Errorf("ucp atomic %v: %w", op, ucs.ErrInvalidParam)
	}
	size := 8
	var reply *uint64
	if param != nil {
		if param.OpAttrMask&OpAttrFieldDatatype != 0 {
			size = param.Datatype.ElemSize()
		}
		if param.OpAttrMask&OpAttrFieldReplyBuffer != 0 {
			reply = param.Reply
		}
	}
	if size != 4 && size != 8 {
		return nil, fmt.Errorf("ucp atomic %v: operand size %d: %w", op, size, ucs.ErrInvalidParam)
	}
	if raddr%uint64(size) != 0 {
		return nil, fmt.Errorf("ucp atomic %v: address 0x%x not aligned to %d: %w", op, raddr, size, ucs.ErrInvalidParam)
	}
	if (op == AtomicOpSwap || op == AtomicOpCSwap) && reply == nil {
		return nil, fmt.Errorf("ucp atomic %v needs a reply buffer: %w", op, ucs.ErrInvalidParam)
	}
	if err := ep.checkOp(rkey, "atomic"); err != nil {
		// The operation's name only on failure: building it costs an
		// allocation on every call.
		return nil, fmt.Errorf("%w (atomic %v)", err, op)
	}
	need := rkeyWrite
	if reply != nil {
		need |= rkeyRead
	}
	if err := rkey.allows(need, "atomic"); err != nil {
		return nil, fmt.Errorf("%w (atomic %v)", err, op)
	}
	{
		if p := rkey.direct(raddr, size); p != nil {
			// Shared memory: the CPU atomic on the mapped word, coherent
			// with those of every transport and of software atomics.
			var cmp uint64
			if op == AtomicOpCSwap {
				cmp = *reply
			}
			var old uint64
			var st ucs.Status
			if size == 4 {
				var o uint32
				o, st = uct.CPUAtomic32(uop, (*uint32)(p), uint32(value), uint32(cmp))
				old = uint64(o)
			} else {
				old, st = uct.CPUAtomic64(uop, (*uint64)(p), value, cmp)
			}
			if st != ucs.OK {
				return nil, fmt.Errorf("ucp atomic %v: %w", op, st)
			}
			if reply != nil {
				*reply = old
			}
			if param == nil {
				return nil, nil
			}
			return ep.w.completedNow(param, protoAMODirect, rkey.amo.laneOrNil(), size)
		}
	}
	al := rkey.amo
	if al == nil {
		if err := ep.swCheck(rkey, "atomic "+op.String()); err != nil {
			return nil, err
		}
		if reply != nil && forceImm(param) {
			return nil, fmt.Errorf("ucp amo/sw %v to %s cannot complete at once: %w", op, ep.remoteName, ucs.ErrNoResource)
		}
		r := ep.w.newRequest(param)
		r.size, r.reply = size, reply
		compare := uint64(0)
		if reply != nil {
			compare = *reply
		}
		return ep.swAtomic(uop, size, value, compare, raddr, rkey, r, param)
	}
	w := ep.w
	caps := al.l.wi.attr.Atomic64
	if size == 4 {
		caps = al.l.wi.attr.Atomic32
	}
	mask := caps.OpFlags
	if reply != nil {
		mask = caps.FopFlags
	}
	if mask&uop.OpMask() == 0 {
		return nil, fmt.Errorf("ucp atomic %v/%d on %s: %w", op, size*8, al.l, ucs.ErrUnsupported)
	}
	r := w.newRequest(param)
	r.size, r.reply = size, reply
	r.rma.rl, r.rma.raddr, r.rma.uop, r.rma.value = al, raddr, uop, value
	if reply == nil {
		r.proto = protoAMOPost
		if size == 4 {
			return w.post(al.l, r, param, false, atomicPost32Op)
		}
		return w.post(al.l, r, param, false, atomicPost64Op)
	}
	r.proto = protoAMOFetch
	r.rma.compare = *reply
	switch {
	case size == 4 && uop == uct.AtomicOpCSwap:
		return w.post(al.l, r, param, true, atomicCSwap32Op)
	case size == 4:
		return w.post(al.l, r, param, true, atomicFetch32Op)
	case uop == uct.AtomicOpCSwap:
		return w.post(al.l, r, param, true, atomicCSwap64Op)
	default:
		return w.post(al.l, r, param, true, atomicFetch64Op)
	}
}

// The operations of atomics (see rmaOp).

func atomicPost32Op(r *Request) ucs.Status {
	o := &r.rma
	return o.rl.ep.AtomicPost32(o.uop, uint32(o.value), o.raddr, o.rl.rkey)
}

func atomicPost64Op(r *Request) ucs.Status {
	o := &r.rma
	return o.rl.ep.AtomicPost64(o.uop, o.value, o.raddr, o.rl.rkey)
}

func atomicCSwap32Op(r *Request) ucs.Status {
	o := &r.rma
	return o.rl.ep.AtomicCSwap32(uint32(o.compare), uint32(o.value), o.raddr, o.rl.rkey, &r.result32, &r.comp)
}

func atomicFetch32Op(r *Request) ucs.Status {
	o := &r.rma
	return o.rl.ep.AtomicFetch32(o.uop, uint32(o.value), o.raddr, o.rl.rkey, &r.result32, &r.comp)
}

func atomicCSwap64Op(r *Request) ucs.Status {
	o := &r.rma
	return o.rl.ep.AtomicCSwap64(o.compare, o.value, o.raddr, o.rl.rkey, &r.result, &r.comp)
}

func atomicFetch64Op(r *Request) ucs.Status {
	o := &r.rma
	return o.rl.ep.AtomicFetch64(o.uop, o.value, o.raddr, o.rl.rkey, &r.result, &r.comp)
}
