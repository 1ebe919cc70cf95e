//go:build !amd64

package ucs

import "unsafe"

var useRepMovsb = false

func repMovsb(dst, src unsafe.Pointer, n uintptr) { panic("ucs: repMovsb without amd64") }
