package shmem

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/goshmem/goshmem/symheap"
	"github.com/goshmem/goshmem/ucp"
	"github.com/goshmem/goshmem/ucs"
)

// Symmetric regions besides the heap: memory of the program's, the same
// size on every PE and symmetric by offset (a C program's static data, a
// Go program's global arrays), that Init registers with ucp as it maps
// the heap, whose keys travel in the init blobs with the heap's, and that
// the routines reach as they reach the heap of a PE that is not mapped
// here (through ucp, which maps, copies over cma or carries over tcp as
// the key allows).
//
// The routines address symmetric memory by symmetric offset: a heap
// offset (below the heap's size) for the heap, and for region r its
// offset in the region plus (r+1)<<regionShift. Every PE computes the
// same symmetric offset for the same object, and offsets of two regions
// never meet (a session's batch joins puts to consecutive offsets).
const regionShift = 48

// regionMem is what SetRegions gave, registered by the next Init.
var regionMem [][]byte

// SetRegions sets the memory, outside the symmetric heap, that the next
// Init registers as further symmetric regions, replacing what an earlier
// call set (none: the heap only, the default). Each region is memory this
// process keeps mapped until the last Finalize, of the same size on every
// PE, its contents symmetric by offset: the n-th byte of region i on one
// PE is the n-th byte of region i on every other PE, wherever each PE has
// it. Every PE that registers regions registers them in the same order;
// a PE reaches region i of a peer that registered a region i of the same
// size, and the routines panic for an address in a region that the
// target PE lacks.
//
// The routines of the package then take addresses in the regions as they
// take addresses in the heap: puts, gets, atomics and signals reach them
// on every PE, through the transports the heap's do (direct copies only
// where a transport maps the memory; across hosts tcp, served without the
// target's participation); waits and tests watch them. The collectives
// and the allocation routines stay on the heap. Registering memory of a Go
// program's global variables makes them symmetric, as C's static data is.
//
// It returns an error wrapping ErrInvalidArgument for an empty region, a
// region that does not start at a multiple of 8 bytes, and regions that
// overlap, and panics when called while the library is
// initialized.
func SetRegions(regions ...[]byte) error {
	if st.phase == initialized {
		panic("shmem.SetRegions called while the library is initialized")
	}
	for i, r := range regions {
		if len(r) == 0 {
			return fmt.Errorf("shmem.SetRegions: region %d is empty: %w", i, ErrInvalidArgument)
		}
		lo := uintptr(unsafe.Pointer(unsafe.SliceData(r)))
		if lo%8 != 0 {
			// Then an offset aligned for an atomic is an address
			// aligned for it on every PE.
			return fmt.Errorf("shmem.SetRegions: region %d at %#x is not aligned to 8 bytes: %w", i, lo, ErrInvalidArgument)
		}
		for j, o := range regions[:i] {
			olo := uintptr(unsafe.Pointer(unsafe.SliceData(o)))
			if lo < olo+uintptr(len(o)) && olo < lo+uintptr(len(r)) {
				return fmt.Errorf("shmem.SetRegions: regions %d and %d overlap: %w", j, i, ErrInvalidArgument)
			}
		}
	}
	regionMem = slices.Clone(regions)
	return nil
}

// symRegion is a region of this PE, registered at Init.
type symRegion struct {
	reg  *symheap.Region
	lo   uintptr // its address here
	size uintptr
}

// peerRegion is a PE's record of region r of a peer. Its key is unpacked
// on the first operation that needs it: unpacking connects the lanes that
// reach the memory (cma, tcp), which a peer whose region this PE never
// reaches through ucp (the C library maps a host's static data itself)
// must not cost.
type peerRegion struct {
	rkey   atomic.Pointer[ucp.Rkey]
	packed []byte // the key to unpack; nil when the region cannot be reached (why)
	raddr  uint64 // the region's address at the peer
	why    error
}

// blobRegion is a region as an init blob carries it.
type blobRegion struct {
	rkey       []byte
	base, size uint64
}

// registerRegions registers the regions SetRegions set with ctx, pushing
// on undo how to unregister them, and returns them with what the init
// blob carries of them.
func registerRegions(ctx *ucp.Context, undo *undoStack) ([]symRegion, []blobRegion, error) {
	var regions []symRegion
	var blob []blobRegion
	for i, m := range regionMem {
		r, err := symheap.Register(ctx, unsafe.Pointer(unsafe.SliceData(m)), len(m))
		if err != nil {
			return nil, nil, fmt.Errorf("symmetric region %d: %w", i, err)
		}
		undo.push(func() { r.Close() })
		k, err := r.PackRkey()
		if err != nil {
			return nil, nil, fmt.Errorf("symmetric region %d: %w", i, err)
		}
		regions = append(regions, symRegion{reg: r, lo: uintptr(r.Base()), size: uintptr(r.Size())})
		blob = append(blob, blobRegion{rkey: k, base: uint64(uintptr(r.Base())), size: uint64(r.Size())})
	}
	return regions, blob, nil
}

// closeRegions unregisters this PE's regions (at Finalize).
func closeRegions() {
	for _, r := range st.regions {
		r.reg.Close()
	}
}

// peerRegions returns the records of the regions of PE pe that its blob
// carries, by this PE's region number: those that match one of this PE's
// (in size) can be reached, the others not, saying why.
func peerRegions(pe int, in []blobRegion) []peerRegion {
	if len(st.regions) == 0 {
		return nil
	}
	out := make([]peerRegion, len(st.regions))
	for r, mine := range st.regions {
		q := &out[r]
		switch {
		case r >= len(in):
			q.why = fmt.Errorf("PE %d registered %d symmetric regions, not region %d (is it another program?)", pe, len(in), r)
		case in[r].size != uint64(mine.size):
			q.why = fmt.Errorf("PE %d has a symmetric region %d of %d bytes, this PE of %d (is it another program?)", pe, r, in[r].size, mine.size)
		default:
			q.packed, q.raddr = in[r].rkey, in[r].base
		}
	}
	return out
}

// destroyRegions destroys the keys of a peer's regions.
func destroyRegions(regions []peerRegion) {
	for i := range regions {
		if rk := regions[i].rkey.Swap(nil); rk != nil {
			rk.Destroy()
		}
	}
}

// regionKey returns the key of region r of the peer, PE pe, unpacking it
// on first use, or nil (and why) when the region cannot be reached.
func (q *peer) regionKey(pe, r int) (*ucp.Rkey, error) {
	if r >= len(q.regions) {
		return nil, errors.New("the PE is not connected")
	}
	pr := &q.regions[r]
	if rk := pr.rkey.Load(); rk != nil {
		return rk, nil
	}
	if pr.packed == nil {
		return nil, pr.why
	}
	connectMu.Lock()
	defer connectMu.Unlock()
	if rk := pr.rkey.Load(); rk != nil {
		return rk, nil
	}
	rk, err := q.ep.RkeyUnpack(pr.packed)
	if err != nil {
		return nil, fmt.Errorf("the key of symmetric region %d: %w", r, err)
	}
	pr.rkey.Store(rk)
	warnTargetProgress(pe, r, rk)
	return rk, nil
}

// targetProgressWarned is set once warnTargetProgress warned.
var targetProgressWarned atomic.Bool

// warnTargetProgress logs one line at ucs.LogWarn, once per process, when
// operations on region r of PE pe complete only while pe is inside the
// library (ucp.Rkey.TargetProgress): no transport UCX_TLS selects reaches
// the region on its own, and the shared-memory messages that carry them
// are applied in pe's Progress. The specification lets a target compute
// without calling the library while others' atomics on its memory
// complete; these wait. The line names a UCX_TLS that serves them (with
// tcp) where this host offers one.
func warnTargetProgress(pe, r int, rk *ucp.Rkey) {
	rma, amo := rk.TargetProgress()
	if !rma && !amo || targetProgressWarned.Swap(true) {
		return
	}
	what := "atomics"
	switch {
	case rma && amo:
		what = "puts, gets and atomics"
	case rma:
		what = "puts and gets"
	}
	hint := "no transport this host offers serves them without it"
	if tls := st.ctx.SelectionWith("tcp"); tls != "" {
		hint = "UCX_TLS=" + tls + " serves them without it"
	}
	lg().Logf(ucs.LogWarn, "goshmem: PE %d: %s on symmetric region %d of PE %d (%d bytes: memory of SetRegions, a C program's static data) are shared-memory messages that PE %d applies only while it is inside the library, so a PE computing without calling it holds them up; %s (UCX_LOG_LEVEL=error silences this warning)",
		st.me, what, r, pe, st.regions[r].size, pe, hint)
}

// regionOffset returns the symmetric offset of the n bytes at p in one
// of this PE's regions, panicking (as for an address outside the heap)
// when they are in none. The routines call it for what is not in the
// heap.
//
//go:noinline
func regionOffset(routine, arg string, p unsafe.Pointer, n int) uintptr {
	a := uintptr(p)
	for r, x := range st.regions {
		if off := a - x.lo; off < x.size && uintptr(n) <= x.size-off {
			return uintptr(r+1)<<regionShift | off
		}
	}
	badAddr(routine, arg, p, n)
	return 0
}

// regionOf splits a symmetric offset of a region into the region's index
// and the offset in it.
func regionOf(off uintptr) (int, uintptr) {
	return int(off>>regionShift) - 1, off & (1<<regionShift - 1)
}

// at returns where the symmetric offset off is at the peer (pe, of the
// routine's context, connected): the remote address and the key that
// reaches it. It panics for a region of this PE's that the peer lacks.
func (q *peer) at(routine string, pe int, off uintptr) (uint64, *ucp.Rkey) {
	if off < st.heapSize {
		return q.raddr + uint64(off), q.rkey
	}
	r, roff := regionOf(off)
	rk, err := q.regionKey(pe, r)
	if err != nil {
		noRegion(routine, pe, r, err)
	}
	return q.regions[r].raddr + uint64(roff), rk
}

//go:noinline
func noRegion(routine string, pe, r int, why error) {
	panic(fmt.Sprintf("shmem.%s: symmetric region %d (%#x, %d bytes here) cannot be reached on PE %d: %v",
		routine, r, st.regions[r].lo, st.regions[r].size, pe, why))
}

// regionPtr returns a pointer to the symmetric offset off of a region on
// the job's PE pe where a transport maps the peer's region here, or nil.
func regionPtr(routine string, pe int, off uintptr) unsafe.Pointer {
	q := defaultCtx.remote(routine, pe)
	r, roff := regionOf(off)
	rk, err := q.regionKey(pe, r)
	if err != nil {
		return nil
	}
	p, err := rk.Ptr(q.regions[r].raddr + uint64(roff))
	if err != nil {
		return nil
	}
	return p
}
