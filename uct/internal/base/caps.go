package base

import "github.com/goshmem/goshmem/uct"

// The atomic operations of the transports that offer them all, as
// AtomicCaps bits: add, and, or and xor posted; those and swap and
// compare-and-swap fetching.
const (
	AllAtomicOps  = 1<<uct.AtomicOpAdd | 1<<uct.AtomicOpAnd | 1<<uct.AtomicOpOr | 1<<uct.AtomicOpXor
	AllAtomicFops = AllAtomicOps | 1<<uct.AtomicOpSwap | 1<<uct.AtomicOpCSwap
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
