//go:build !race

#include "textflag.h"

// func storeRelease(p *uint64, v uint64)
TEXT ·storeRelease(SB), NOSPLIT, $0-16
	MOVD p+0(FP), R0
	MOVD v+8(FP), R1
	STLR R1, (R0)
	RET

// func storeRelease32(p *int32, v int32)
TEXT ·storeRelease32(SB), NOSPLIT, $0-12
	MOVD p+0(FP), R0
	MOVW v+8(FP), R1
	STLRW R1, (R0)
	RET
