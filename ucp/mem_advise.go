package ucp

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucs"
)

// MemAdvice is advice on the use of mapped memory (ucp_mem_advice_t).
type MemAdvice int

// Memory advice, with the numbering of the UCX documents.
const (
	// MadvNormal: no special treatment (madvise MADV_NORMAL).
	MadvNormal MemAdvice = iota
	// MadvWillneed: the memory will be used soon; the system may read its
	// pages in ahead (madvise MADV_WILLNEED).
	MadvWillneed
)

// Fields of MemAdviseParams (ucp_mem_advise_params_field); all are
// mandatory.
const (
	MemAdviseParamFieldAddress uint64 = 1 << 0
	MemAdviseParamFieldLength  uint64 = 1 << 1
	MemAdviseParamFieldAdvice  uint64 = 1 << 2

	memAdviseParamFieldsAll = MemAdviseParamFieldAddress | MemAdviseParamFieldLength | MemAdviseParamFieldAdvice
)

// MemAdviseParams are the parameters of Context.MemAdvise
// (ucp_mem_advise_params_t). Every field is mandatory: set them with the
// setters, which record the field mask.
type MemAdviseParams struct {
	FieldMask uint64
	Address   unsafe.Pointer
	Length    int
	Advice    MemAdvice
}

// SetAddress sets the start of the memory the advice is about.
func (p *MemAdviseParams) SetAddress(a unsafe.Pointer) *MemAdviseParams {
	p.Address, p.FieldMask = a, p.FieldMask|MemAdviseParamFieldAddress
	return p
}

// SetLength sets the number of bytes the advice is about.
func (p *MemAdviseParams) SetLength(n int) *MemAdviseParams {
	p.Length, p.FieldMask = n, p.FieldMask|MemAdviseParamFieldLength
	return p
}

// SetAdvice sets the advice.
func (p *MemAdviseParams) SetAdvice(a MemAdvice) *MemAdviseParams {
	p.Advice, p.FieldMask = a, p.FieldMask|MemAdviseParamFieldAdvice
	return p
}

// MemAdvise gives the system advice on how the range [p.Address,
// p.Address+p.Length) of the memory of m will be used (ucp_mem_advise),
// with madvise(2) on the pages that hold it. The range must lie inside m;
// an empty one does nothing.
//
// It fails with ucs.ErrInvalidParam for a nil, unmapped or foreign handle,
// nil params or a field not set, a negative length, a range that leaves the
// memory of m, and an unknown advice; with ucs.ErrIOError when the system
// refuses the advice.
func (c *Context) MemAdvise(m *MemHandle, p *MemAdviseParams) error {
	if m == nil || m.unmapped || m.ctx != c {
		return fmt.Errorf("ucp mem advise: bad memory handle: %w", ucs.ErrInvalidParam)
	}
	if p == nil || p.FieldMask&memAdviseParamFieldsAll != memAdviseParamFieldsAll {
		return fmt.Errorf("ucp mem advise: address, length and advice must all be set: %w", ucs.ErrInvalidParam)
	}
	base, start := uintptr(m.address), uintptr(p.Address)
	if p.Length < 0 || start < base || start-base > uintptr(m.length) || uintptr(p.Length) > uintptr(m.length)-(start-base) {
		return fmt.Errorf("ucp mem advise: range %p+%d outside the memory %p+%d: %w", p.Address, p.Length, m.address, m.length, ucs.ErrInvalidParam)
	}
	var advice int
	switch p.Advice {
	case MadvNormal:
		advice = unix.MADV_NORMAL
	case MadvWillneed:
		advice = unix.MADV_WILLNEED
	default:
		return fmt.Errorf("ucp mem advise: advice %d: %w", p.Advice, ucs.ErrInvalidParam)
	}
	if p.Length == 0 {
		return nil
	}
	// madvise takes whole pages: those that hold the range, all mapped.
	page := uintptr(unix.Getpagesize())
	first := start &^ (page - 1)
	end := (start + uintptr(p.Length) + page - 1) &^ (page - 1)
	// A raw system call: the pages may hold other Go objects, which a slice
	// over them would straddle.
	if _, _, errno := unix.Syscall(unix.SYS_MADVISE, first, end-first, uintptr(advice)); errno != 0 {
		return fmt.Errorf("ucp mem advise %p+%d: madvise: %w: %w", p.Address, p.Length, errno, ucs.ErrIOError)
	}
	return nil
}
