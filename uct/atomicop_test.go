package uct

import (
	"testing"

	"github.com/goshmem/goshmem/ucs"
)

func TestAtomicOpValues(t *testing.T) {
	tests := []struct {
		op    AtomicOp
		valid bool
		name  string
		mask  AtomicOpMask
	}{
		{AtomicOpAdd, true, "add", 1 << 0},
		{AtomicOpAnd, true, "and", 1 << 1},
		{AtomicOpOr, true, "or", 1 << 2},
		{AtomicOpXor, true, "xor", 1 << 3},
		{AtomicOpSwap, true, "swap", 1 << 4},
		{AtomicOpCSwap, true, "cswap", 1 << 5},
		{-1, false, "AtomicOp(-1)", 0},
		{6, false, "AtomicOp(6)", 0},
		{64, false, "AtomicOp(64)", 0},
		{1 << 40, false, "AtomicOp(1099511627776)", 0},
	}
	for _, tt := range tests {
		if got := tt.op.Valid(); got != tt.valid {
			t.Errorf("AtomicOp(%d).Valid() = %v, want %v", int(tt.op), got, tt.valid)
		}
		if got := tt.op.String(); got != tt.name {
			t.Errorf("AtomicOp(%d).String() = %q, want %q", int(tt.op), got, tt.name)
		}
		if got := tt.op.OpMask(); got != tt.mask {
			t.Errorf("AtomicOp(%d).OpMask() = %#x, want %#x", int(tt.op), got, tt.mask)
		}
		var w64 uint64
		var w32 uint32
		// An operation that is not one must fail, not panic.
		if _, st := CPUAtomic64(tt.op, &w64, 1, 0); tt.valid != (st == ucs.OK) {
			t.Errorf("CPUAtomic64(%v) status %v", tt.op, st)
		}
		if _, st := CPUAtomic32(tt.op, &w32, 1, 0); tt.valid != (st == ucs.OK) {
			t.Errorf("CPUAtomic32(%v) status %v", tt.op, st)
		}
	}
}
