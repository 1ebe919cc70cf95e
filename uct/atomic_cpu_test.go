package uct

import (
	"testing"

	"github.com/goshmem/goshmem/ucs"
)

func TestCPUAtomics(t *testing.T) {
	tests := []struct {
		op       AtomicOp
		init     uint64
		v, cmp   uint64
		old, now uint64
	}{
		{AtomicOpAdd, 5, 3, 0, 5, 8},
		{AtomicOpAdd, 1, ^uint64(0), 0, 1, 0},
		{AtomicOpAnd, 0b1100, 0b1010, 0, 0b1100, 0b1000},
		{AtomicOpOr, 0b1100, 0b1010, 0, 0b1100, 0b1110},
		{AtomicOpXor, 0b1100, 0b1010, 0, 0b1100, 0b0110},
		{AtomicOpSwap, 7, 9, 0, 7, 9},
		{AtomicOpCSwap, 7, 9, 7, 7, 9},
		{AtomicOpCSwap, 7, 9, 8, 7, 7},
	}
	for _, tt := range tests {
		w := tt.init
		old, st := CPUAtomic64(tt.op, &w, tt.v, tt.cmp)
		if st != ucs.OK || old != tt.old || w != tt.now {
			t.Errorf("64 %v(%d, v=%d cmp=%d) = %d, %v, now %d; want %d, now %d", tt.op, tt.init, tt.v, tt.cmp, old, st, w, tt.old, tt.now)
		}
		w32 := uint32(tt.init)
		old32, st := CPUAtomic32(tt.op, &w32, uint32(tt.v), uint32(tt.cmp))
		if st != ucs.OK || old32 != uint32(tt.old) || w32 != uint32(tt.now) {
			t.Errorf("32 %v: %d, %v, now %d; want %d, now %d", tt.op, old32, st, w32, uint32(tt.old), uint32(tt.now))
		}
	}
	var w uint64
	if _, st := CPUAtomic64(AtomicOp(99), &w, 1, 0); st != ucs.ErrUnsupported {
		t.Errorf("unknown op: %v", st)
	}
}
