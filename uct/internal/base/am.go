package base

import (
	"fmt"
	"sync/atomic"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// AMHandler is an active message handler installed on an iface.
type AMHandler struct {
	CB    uct.AMCallback
	Arg   any
	Flags uct.CBFlags // how it was installed
}

// AMMsg is a received active message waiting for delivery.
type AMMsg struct {
	ID   uint8
	Data []byte
}

// AMHandlers are the active message handlers of an iface, by id; the zero
// value has none. Receivers load them with AMHandlers[id].Load.
type AMHandlers [uct.AMMaxID]atomic.Pointer[AMHandler]

// Set installs cb for id, or removes the handler of id when cb is nil.
// id must be below uct.AMMaxID, and flags exactly one of uct.CBFlagSync
// and uct.CBFlagAsync when oneMode is set, or any non-empty combination of
// the two otherwise; anything else fails with ucs.ErrInvalidParam, in an
// error that pkg begins.
func (h *AMHandlers) Set(pkg string, id uint8, cb uct.AMCallback, arg any, flags uct.CBFlags, oneMode bool) error {
	if id >= uct.AMMaxID {
		return fmt.Errorf("%s: AM id %d >= %d: %w", pkg, id, uct.AMMaxID, ucs.ErrInvalidParam)
	}
	valid := flags != 0 && flags&^(uct.CBFlagSync|uct.CBFlagAsync) == 0
	if oneMode {
		valid = flags == uct.CBFlagSync || flags == uct.CBFlagAsync
	}
	if !valid {
		return fmt.Errorf("%s: AM handler flags %#x: %w", pkg, flags, ucs.ErrInvalidParam)
	}
	if cb == nil {
		h[id].Store(nil)
		return nil
	}
	h[id].Store(&AMHandler{CB: cb, Arg: arg, Flags: flags})
	return nil
}
