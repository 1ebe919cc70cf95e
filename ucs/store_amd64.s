//go:build !race

#include "textflag.h"

// func storeRelease(p *uint64, v uint64)
// x86-64 is TSO: a plain store is not reordered with earlier loads or
// stores.
TEXT ·storeRelease(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), AX
	MOVQ v+8(FP), BX
	MOVQ BX, (AX)
	RET

// func storeRelease32(p *int32, v int32)
TEXT ·storeRelease32(SB), NOSPLIT, $0-12
	MOVQ p+0(FP), AX
	MOVL v+8(FP), BX
	MOVL BX, (AX)
	RET
