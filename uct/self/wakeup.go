package self

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// wakeupFDLocked creates the eventfd once; i.mu is held. A closed iface
// fails with ucs.ErrNoDevice, an eventfd that cannot be created with
// ucs.ErrIOError.
func (i *Iface) wakeupFDLocked() (int, ucs.Status) {
	if i.closed {
		return -1, ucs.ErrNoDevice
	}
	if !i.hasWakeFD {
		fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			return -1, ucs.ErrIOError
		}
		i.wakeFD, i.hasWakeFD = fd, true
	}
	return i.wakeFD, ucs.OK
}

// WakeupFD returns the iface's eventfd (EFD_CLOEXEC|EFD_NONBLOCK), created
// at the first call. It becomes readable when a message is queued after
// EventArm returned ucs.OK; the caller reads it to reset it. The iface owns
// it: Close closes it. On a closed iface it fails with ucs.ErrNoDevice.
func (i *Iface) WakeupFD() (int, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	fd, s := i.wakeupFDLocked()
	if s != ucs.OK {
		return -1, fmt.Errorf("uct/self: wakeup fd: %w", s)
	}
	return fd, nil
}

// EventArm implements uct.EventArmer. EventRecv and EventRecvSig arm the
// iface: it returns ucs.ErrBusy when messages are queued for Progress,
// ucs.OK when armed, after which the next message queued writes 1 to the
// WakeupFD descriptor, once: any message when armed for EventRecv, only
// one sent with uct.SendFlagSignaled when armed for EventRecvSig alone.
// EventSendComp
// and EventTagComp are accepted and never fire (every send completes on
// return); events with only those return ucs.OK without arming. Unknown
// event bits fail with ucs.ErrInvalidParam, a closed iface with
// ucs.ErrNoDevice. EventArm creates the descriptor itself if WakeupFD was
// not called yet.
func (i *Iface) EventArm(events uint32) ucs.Status {
	recv, st := uct.ArmedRecvEvents(events)
	if recv == 0 {
		return st
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	if _, s := i.wakeupFDLocked(); s != ucs.OK {
		return s
	}
	if len(i.queue) > 0 {
		return ucs.ErrBusy
	}
	i.armed = recv
	return ucs.OK
}

// wakeLocked disarms the iface and writes 1 to its eventfd; i.mu is held.
func (i *Iface) wakeLocked() {
	i.armed = 0
	if i.hasWakeFD {
		one := [8]byte{1}            // 1 as a native (little-endian) uint64
		unix.Write(i.wakeFD, one[:]) // EAGAIN: the counter is saturated, readable anyway
	}
}

// closeWakeupLocked closes the eventfd; i.mu is held.
func (i *Iface) closeWakeupLocked() {
	i.armed = 0
	if i.hasWakeFD {
		unix.Close(i.wakeFD)
		i.hasWakeFD = false
	}
}

var _ uct.EventArmer = (*Iface)(nil)
