package ucp

import (
	"testing"

	"github.com/goshmem/goshmem/uct"
)

// TestAtomicOpValues checks that every ucp atomic operation converts to the
// uct one of the same name by a cast, and that values that are no operation
// neither panic nor convert.
func TestAtomicOpValues(t *testing.T) {
	tests := []struct {
		op   AtomicOp
		uct  uct.AtomicOp
		ok   bool
		name string
	}{
		{AtomicOpAdd, uct.AtomicOpAdd, true, "add"},
		{AtomicOpAnd, uct.AtomicOpAnd, true, "and"},
		{AtomicOpOr, uct.AtomicOpOr, true, "or"},
		{AtomicOpXor, uct.AtomicOpXor, true, "xor"},
		{AtomicOpSwap, uct.AtomicOpSwap, true, "swap"},
		{AtomicOpCSwap, uct.AtomicOpCSwap, true, "cswap"},
		{-1, -1, false, "AtomicOp(-1)"},
		{6, 6, false, "AtomicOp(6)"},
		{1 << 20, 1 << 20, false, "AtomicOp(1048576)"},
	}
	for _, tt := range tests {
		got, ok := tt.op.uct()
		if got != tt.uct || ok != tt.ok {
			t.Errorf("AtomicOp(%d).uct() = %d, %v; want %d, %v", int(tt.op), got, ok, tt.uct, tt.ok)
		}
		if s := tt.op.String(); s != tt.name {
			t.Errorf("AtomicOp(%d).String() = %q, want %q", int(tt.op), s, tt.name)
		}
		if ok && tt.op.String() != tt.uct.String() {
			t.Errorf("%v and uct's %v differ in name", tt.op, tt.uct)
		}
	}
}
