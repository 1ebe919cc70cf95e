package cma

import (
	"errors"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

const (
	// iovBatch is the number of local iovecs one system call takes at most:
	// below IOV_MAX (1024), and small enough to live on the stack.
	iovBatch = 64
	// maxXfer bounds the bytes of one system call (the kernel moves at
	// most MAX_RW_COUNT, about 2 GiB, per call anyway).
	maxXfer = 1 << 30
)

// EP is a cma endpoint to the process of a peer iface. Every operation is
// one or more process_vm_writev/readv calls on that process and completes
// on return; the rkey must be the peer's pid (as RkeyUnpack returns it for
// the peer's keys), raddr an address in the peer.
//
// An operation that finds the peer dead fails with ucs.ErrConnectionReset,
// and so does every later one, without a system call. An operation refused
// for lack of ptrace permission fails with ucs.ErrUnreachable; an invalid
// remote range with ucs.ErrIOError. The EP may be used from several
// goroutines at once.
type EP struct {
	iface  *Iface
	pid    int
	failed atomic.Bool
}

// PutShort writes buf (at most Put.MaxShort bytes) to raddr.
func (e *EP) PutShort(buf []byte, raddr uint64, rkey uint64) ucs.Status {
	if len(buf) > e.iface.segSize {
		return ucs.ErrInvalidParam
	}
	iov := [1]uct.IOV{{Buffer: buf}}
	return e.xfer(true, iov[:], raddr, rkey)
}

// PutBcopy lets pack write into a buffer of Put.MaxBcopy bytes and writes
// what it produced to raddr; it returns the number of bytes.
func (e *EP) PutBcopy(pack uct.PackFunc, raddr uint64, rkey uint64) (int, ucs.Status) {
	bp := e.iface.bufs.Get().(*[]byte)
	defer e.iface.bufs.Put(bp)
	n := pack(*bp)
	if n < 0 || n > len(*bp) {
		return 0, ucs.ErrInvalidParam
	}
	iov := [1]uct.IOV{{Buffer: (*bp)[:n]}}
	if s := e.xfer(true, iov[:], raddr, rkey); s != ucs.OK {
		return 0, s
	}
	return n, ucs.OK
}

// PutZcopy writes the iov, in order, to consecutive bytes from raddr,
// straight from its buffers.
func (e *EP) PutZcopy(iov []uct.IOV, raddr uint64, rkey uint64, comp *uct.Completion) ucs.Status {
	return e.xfer(true, iov, raddr, rkey)
}

// GetBcopy reads length bytes (at most Get.MaxBcopy) at raddr into a
// buffer and passes them to unpack.
func (e *EP) GetBcopy(unpack uct.UnpackFunc, length int, raddr uint64, rkey uint64, comp *uct.Completion) ucs.Status {
	if length < 0 || length > e.iface.segSize {
		return ucs.ErrInvalidParam
	}
	bp := e.iface.bufs.Get().(*[]byte)
	defer e.iface.bufs.Put(bp)
	buf := (*bp)[:length]
	iov := [1]uct.IOV{{Buffer: buf}}
	if s := e.xfer(false, iov[:], raddr, rkey); s != ucs.OK {
		return s
	}
	unpack(buf)
	return ucs.OK
}

// GetZcopy fills the iov, in order, from consecutive bytes at raddr,
// straight into its buffers.
func (e *EP) GetZcopy(iov []uct.IOV, raddr uint64, rkey uint64, comp *uct.Completion) ucs.Status {
	return e.xfer(false, iov, raddr, rkey)
}

// xfer moves the bytes of iov to (write) or from the remote range at raddr
// of the peer, in system calls of at most iovBatch local iovecs and maxXfer
// bytes, continuing after partial transfers.
func (e *EP) xfer(write bool, iov []uct.IOV, raddr uint64, rkey uint64) ucs.Status {
	if rkey != uint64(e.pid) {
		return ucs.ErrInvalidParam
	}
	if e.failed.Load() {
		return ucs.ErrConnectionReset
	}
	var local [iovBatch]unix.Iovec
	var remote [1]unix.RemoteIovec
	k, off := 0, 0 // the next byte to move is iov[k].Buffer[off]
	for {
		n, total := 0, 0
		for j, o := k, off; j < len(iov) && n < iovBatch && total < maxXfer; j, o = j+1, 0 {
			b := iov[j].Buffer[o:]
			if len(b) == 0 {
				continue
			}
			if len(b) > maxXfer-total {
				b = b[:maxXfer-total]
			}
			local[n].Base = &b[0]
			local[n].SetLen(len(b))
			n++
			total += len(b)
		}
		if n == 0 {
			return ucs.OK
		}
		remote[0] = unix.RemoteIovec{Base: uintptr(raddr), Len: total}
		var got int
		var err error
		if write {
			got, err = unix.ProcessVMWritev(e.pid, local[:n], remote[:], 0)
		} else {
			got, err = unix.ProcessVMReadv(e.pid, local[:n], remote[:], 0)
		}
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return e.fail(err)
		}
		if got <= 0 {
			return ucs.ErrIOError
		}
		raddr += uint64(got)
		for got > 0 {
			if rest := len(iov[k].Buffer) - off; got < rest {
				off += got
				got = 0
			} else {
				got -= rest
				k, off = k+1, 0
			}
		}
	}
}

// fail returns the status of a failed transfer. A dead peer marks the EP
// failed (once) and queues it for the iface's error handler; a refusal for
// lack of permission logs the ptrace hint once per iface.
func (e *EP) fail(err error) ucs.Status {
	s := errnoStatus(err)
	switch s {
	case ucs.ErrConnectionReset:
		if !e.failed.Swap(true) {
			e.iface.epFailed(e)
		}
	case ucs.ErrUnreachable:
		e.iface.permOnce.Do(func() {
			e.iface.log.Logf(ucs.LogWarn, "uct/cma: process_vm_writev/readv of pid %d: %v; %s", e.pid, err, ptraceHint())
		})
	}
	return s
}

// AMShort fails with ucs.ErrUnsupported: cma has no active messages.
func (*EP) AMShort(uint8, uint64, []byte) ucs.Status { return ucs.ErrUnsupported }

// AMBcopy fails with ucs.ErrUnsupported.
func (*EP) AMBcopy(uint8, uct.PackFunc, uint32) (int, ucs.Status) { return 0, ucs.ErrUnsupported }

// AMZcopy fails with ucs.ErrUnsupported.
func (*EP) AMZcopy(uint8, []byte, []uct.IOV, uint32, *uct.Completion) ucs.Status {
	return ucs.ErrUnsupported
}

// AtomicPost64 fails with ucs.ErrUnsupported: cma has no atomics.
func (*EP) AtomicPost64(uct.AtomicOp, uint64, uint64, uint64) ucs.Status { return ucs.ErrUnsupported }

// AtomicPost32 fails with ucs.ErrUnsupported.
func (*EP) AtomicPost32(uct.AtomicOp, uint32, uint64, uint64) ucs.Status { return ucs.ErrUnsupported }

// AtomicFetch64 fails with ucs.ErrUnsupported.
func (*EP) AtomicFetch64(uct.AtomicOp, uint64, uint64, uint64, *uint64, *uct.Completion) ucs.Status {
	return ucs.ErrUnsupported
}

// AtomicFetch32 fails with ucs.ErrUnsupported.
func (*EP) AtomicFetch32(uct.AtomicOp, uint32, uint64, uint64, *uint32, *uct.Completion) ucs.Status {
	return ucs.ErrUnsupported
}

// AtomicCSwap64 fails with ucs.ErrUnsupported.
func (*EP) AtomicCSwap64(uint64, uint64, uint64, uint64, *uint64, *uct.Completion) ucs.Status {
	return ucs.ErrUnsupported
}

// AtomicCSwap32 fails with ucs.ErrUnsupported.
func (*EP) AtomicCSwap32(uint32, uint32, uint64, uint64, *uint32, *uct.Completion) ucs.Status {
	return ucs.ErrUnsupported
}

// Flush returns OK, every operation having completed on return, or
// ucs.ErrConnectionReset once the peer was found dead.
func (e *EP) Flush(flags uct.FlushFlags, comp *uct.Completion) ucs.Status {
	if e.failed.Load() {
		return ucs.ErrConnectionReset
	}
	return ucs.OK
}

// Fence returns OK: operations complete on return, so they are ordered.
func (*EP) Fence(uint32) ucs.Status { return ucs.OK }

// PendingAdd returns ucs.ErrBusy: the EP never runs out of resources, so the
// operation should be retried at once.
func (*EP) PendingAdd(*uct.PendingReq, uint32) ucs.Status { return ucs.ErrBusy }

// PendingPurge does nothing: nothing is ever queued.
func (*EP) PendingPurge(func(r *uct.PendingReq)) {}

// Destroy releases the EP; it holds nothing but its peer's pid. Operations
// after Destroy fail with ucs.ErrConnectionReset (without reaching the error
// handler).
func (e *EP) Destroy() { e.failed.Store(true) }
