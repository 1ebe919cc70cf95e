package base

import (
	"math"

	"github.com/goshmem/goshmem/uct"
)

// The atomic operations of the transports that offer them all, as
// AtomicCaps bits: add, and, or and xor posted; those and swap and
// compare-and-swap fetching.
const (
	AllAtomicOps  uct.AtomicOpMask = 1<<uct.AtomicOpAdd | 1<<uct.AtomicOpAnd | 1<<uct.AtomicOpOr | 1<<uct.AtomicOpXor
	AllAtomicFops                  = AllAtomicOps | 1<<uct.AtomicOpSwap | 1<<uct.AtomicOpCSwap
)

// AllAtomics are the capabilities of a transport that offers every atomic
// operation (AllAtomicOps, AllAtomicFops).
var AllAtomics = uct.AtomicCaps{OpFlags: AllAtomicOps, FopFlags: AllAtomicFops}

// The iface flags that several transports report together.
const (
	// RMAFlags: put short, bcopy and zcopy, get bcopy and zcopy.
	RMAFlags = uct.IfaceFlagPutShort | uct.IfaceFlagPutBcopy | uct.IfaceFlagPutZcopy |
		uct.IfaceFlagGetBcopy | uct.IfaceFlagGetZcopy
	// AMFlags: active messages short, bcopy and zcopy, pending queues, and
	// handlers called from Progress whether installed sync or async.
	AMFlags = uct.IfaceFlagAMShort | uct.IfaceFlagAMBcopy | uct.IfaceFlagAMZcopy | uct.IfaceFlagPending |
		uct.IfaceFlagCBSync | uct.IfaceFlagCBAsync
)

// OpCaps returns the capabilities of one kind of operation with these
// limits (0 where the operation lacks that variant), no alignment
// constraints and maxIOV iov elements per zcopy.
func OpCaps(maxShort, maxBcopy, maxZcopy, maxIOV int) uct.OpCaps {
	return uct.OpCaps{MaxShort: maxShort, MaxBcopy: maxBcopy, MaxZcopy: maxZcopy, OptZcopyAlign: 1, AlignMTU: 1, MaxIOV: maxIOV}
}

// AMCaps returns OpCaps(maxShort, maxBcopy, maxZcopy, maxIOV) with headers
// of up to maxHdr bytes.
func AMCaps(maxShort, maxBcopy, maxZcopy, maxIOV, maxHdr int) uct.OpCaps {
	c := OpCaps(maxShort, maxBcopy, maxZcopy, maxIOV)
	c.MaxHdr = maxHdr
	return c
}

// IfaceAttr returns the attributes of an iface with these flags, address
// lengths and cost model, priority 0 and any number of EPs
// (math.MaxInt32); the caller sets the limits of the operations it offers.
func IfaceAttr(flags uct.IfaceFlags, deviceAddrLen, ifaceAddrLen int, cost Cost) *uct.IfaceAttr {
	return &uct.IfaceAttr{
		Flags:         flags,
		DeviceAddrLen: deviceAddrLen,
		IfaceAddrLen:  ifaceAddrLen,
		Overhead:      cost.Overhead,
		Bandwidth:     cost.Bandwidth,
		Latency:       uct.LinearModel{C: cost.Latency},
		MaxNumEPs:     math.MaxInt32,
	}
}

// SetMemoryOps sets in a the limits of an iface that reaches memory with
// the CPU and carries active messages in segments of segSize bytes (self,
// sm): puts short and bcopy up to segSize, gets bcopy up to segSize, RMA
// zcopy of any size and iov, active messages and their headers up to
// segSize, and every atomic operation on 32- and 64-bit words.
func SetMemoryOps(a *uct.IfaceAttr, segSize int) {
	a.Put = OpCaps(segSize, segSize, math.MaxInt, math.MaxInt32)
	a.Get = OpCaps(0, segSize, math.MaxInt, math.MaxInt32)
	a.AM = AMCaps(segSize, segSize, segSize, math.MaxInt32, segSize)
	a.Atomic32 = AllAtomics
	a.Atomic64 = AllAtomics
}
