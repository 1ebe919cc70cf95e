package self

import (
	"fmt"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
	"github.com/goshmem/goshmem/uct/internal/base"
)

// EPAddrLen is the length of a self EP address: the IfaceAddrLen-byte
// address of its iface followed by the EP's random 64-bit id
// (little-endian, non-zero).
const EPAddrLen = IfaceAddrLen + 8

var _ uct.EPConnector = (*EP)(nil)

// decodeEPAddr splits an EP address into its iface address and EP id;
// malformed input fails with ucs.ErrInvalidAddr.
func decodeEPAddr(b []byte) (ifaceAddr []byte, id uint64, err error) {
	ifaceAddr, id, err = base.SplitEPAddr("uct/self", b, IfaceAddrLen)
	if err != nil {
		return nil, 0, err
	}
	var pid uint32
	var iid uint64
	if _, err := ifaceAddrFormat.Decode(ifaceAddr, &pid, &iid); err != nil {
		return nil, 0, err
	}
	if pid == 0 || iid == 0 {
		return nil, 0, ifaceAddrFormat.Errorf("zero pid or iface id")
	}
	return ifaceAddr, id, nil
}

// EPAddress returns the EPAddrLen-byte address of an EP created
// unconnected (EPParams without IfaceAddr); an EP connected to an iface
// has none (ucs.ErrUnsupported).
func (e *EP) EPAddress() ([]byte, error) {
	if e.id == 0 {
		return nil, fmt.Errorf("uct/self: ep address of an ep connected to an iface: %w", ucs.ErrUnsupported)
	}
	return base.EncodeEPAddr(e.iface.addr, e.id), nil
}

// ConnectToEP binds the EP to the EP whose address is epAddr, which must be
// an EP of this same iface (a self iface reaches only itself) that was not
// destroyed; the device address must be empty. Malformed addresses fail
// with ucs.ErrInvalidAddr, an EP of another iface or an unknown EP id with
// ucs.ErrUnreachable, an EP connected already with ucs.ErrAlreadyExists.
// Binding only enables the EP's operations: they reach the iface's memory
// and queue, whichever EP issues them.
func (e *EP) ConnectToEP(deviceAddr, epAddr []byte) error {
	ifAddr, id, err := decodeEPAddr(epAddr)
	if err != nil {
		return err
	}
	if len(deviceAddr) != 0 {
		return fmt.Errorf("uct/self: connect to ep: %d-byte device address: %w", len(deviceAddr), ucs.ErrInvalidAddr)
	}
	i := e.iface
	if !i.IsReachable(deviceAddr, ifAddr) {
		return fmt.Errorf("uct/self: connect to ep: iface %x is not this one: %w", ifAddr, ucs.ErrUnreachable)
	}
	if e.id == 0 {
		return fmt.Errorf("uct/self: connect to ep: ep is connected to an iface: %w", ucs.ErrAlreadyExists)
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	if _, ok := i.epIDs[id]; !ok {
		return fmt.Errorf("uct/self: connect to ep: no ep %#x on this iface: %w", id, ucs.ErrUnreachable)
	}
	if e.connected.Load() {
		return fmt.Errorf("uct/self: connect to ep: connected already: %w", ucs.ErrAlreadyExists)
	}
	e.peer = id
	e.connected.Store(true)
	return nil
}
