package ucs

import "unsafe"

// memcpyChunk is the largest piece Memcpy hands to the runtime's copy. The
// Go runtime switches to non-temporal stores for copies of 1 MiB and more;
// between shared-memory mappings, which have 4 KiB pages (no transparent huge
// pages for shmem), that path measured 32 µs per MiB against 22 µs for the
// cached path in 512 KiB pieces on this project's machines.
const memcpyChunk = 512 << 10

// memcpyRepMin is the size from which Memcpy copies with REP MOVSB where
// the CPU has enhanced REP MOVSB (ERMS): measured on the project's 2-core
// AMD EPYC VMs between two mappings of a /dev/shm file, it took 0.60 µs
// for 64 KiB (copy: 0.79), 1.15 µs for 128 KiB (copy 1.6-1.9, glibc's
// memcpy 1.40) and 18-19 µs for 1 MiB (512 KiB pieces of copy: 22, glibc:
// 22); at 16 KiB and below it gains nothing. Non-temporal stores (AVX2
// and AVX-512, with SFENCE) were measured against it from 64 KiB to 4 MiB,
// warm, flushed and cold destinations: they lost everywhere (1 MiB: 24-27
// µs); only into rotating cold buffers did a cached AVX2 loop beat it, by
// page-table walks over 4 KiB pages, not the copy (uct/sm's
// BenchmarkLargeCopy keeps the comparison with copy).
const memcpyRepMin = 32 << 10

// MemcpyMin is the size from which Memcpy does better than copy; callers on
// hot paths call copy below it and save a call.
const MemcpyMin = memcpyRepMin

// Memcpy copies src into dst like copy and returns the number of bytes
// copied. It is meant for large copies into and out of shared memory: from
// 32 KiB on it uses REP MOVSB where the CPU does that well (amd64 with
// ERMS), otherwise the runtime's copy in pieces that keep it on its cached
// path; small copies cost one comparison more than copy. Overlapping
// slices are copied correctly, as by copy.
func Memcpy(dst, src []byte) int {
	n := min(len(dst), len(src))
	if n < memcpyRepMin {
		return copy(dst, src)
	}
	dst, src = dst[:n], src[:n]
	d, s := uintptr(unsafe.Pointer(&dst[0])), uintptr(unsafe.Pointer(&src[0]))
	if useRepMovsb && (d+uintptr(n) <= s || s+uintptr(n) <= d) {
		repMovsb(unsafe.Pointer(&dst[0]), unsafe.Pointer(&src[0]), uintptr(n))
		return n
	}
	for len(src) > memcpyChunk {
		copy(dst[:memcpyChunk], src[:memcpyChunk])
		dst, src = dst[memcpyChunk:], src[memcpyChunk:]
	}
	copy(dst, src)
	return n
}
