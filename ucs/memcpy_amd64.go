package ucs

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// useRepMovsb: REP MOVSB is fast for large copies on CPUs with ERMS.
var useRepMovsb = cpu.X86.HasERMS

// repMovsb copies n bytes from src to dst, which must not overlap, with
// REP MOVSB.
//
//go:noescape
func repMovsb(dst, src unsafe.Pointer, n uintptr)
