package tcp

import (
	"encoding/binary"
	"net"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct/internal/base"
)

// IfaceAddrLen is the length of a tcp iface address.
//
// Layout (multi-byte fields little-endian, except the IP and port, which
// are in network order as on the wire):
//
//	0  magic  uint32    "GSTA"
//	4  family uint8     4 or 6
//	5  (zero) uint8
//	6  port   uint16    listening port, non-zero
//	8  ip     [16]byte  IPv4: 4 bytes then 12 zero bytes; IPv6: 16 bytes
//	24 id     uint64    random id of the iface, checked by the handshake
const IfaceAddrLen = 32

// DeviceAddrLen is the length of a tcp device address.
//
// Layout, little-endian:
//
//	0  family   uint8   4 or 6
//	1  flags    uint8   bit 0: loopback device
//	2  (zero)   [6]byte
//	8  host     uint64  loopback: hash of the boot id and network
//	                    namespace (non-zero); others: zero
const DeviceAddrLen = 16

// devFlagLoop marks the device address of a loopback device.
const devFlagLoop uint8 = 1 << 0

// ifaceAddrFormat and deviceAddrFormat are the layouts of iface and device
// addresses (see IfaceAddrLen and DeviceAddrLen).
var (
	ifaceAddrFormat  = base.Format{Name: "uct/tcp: iface address", Size: IfaceAddrLen, Magic: 0x41545347, Err: ucs.ErrInvalidAddr}
	deviceAddrFormat = base.Format{Name: "uct/tcp: device address", Size: DeviceAddrLen, Err: ucs.ErrInvalidAddr}
)

// ifaceAddr is a decoded iface address.
type ifaceAddr struct {
	ip   net.IP // 4 or 16 bytes
	port uint16
	id   uint64
}

func (a *ifaceAddr) encode() []byte {
	var ip [16]byte
	family := uint8(6)
	if ip4 := a.ip.To4(); ip4 != nil {
		family = 4
		copy(ip[:], ip4)
	} else {
		copy(ip[:], a.ip.To16())
	}
	return ifaceAddrFormat.Encode(0, family, base.Zero(1), binary.BigEndian.AppendUint16(nil, a.port), ip[:], a.id)
}

// tcpAddr returns the address to dial.
func (a *ifaceAddr) tcpAddr() *net.TCPAddr { return &net.TCPAddr{IP: a.ip, Port: int(a.port)} }

// decodeIfaceAddr decodes an iface address strictly; malformed input fails
// with ucs.ErrInvalidAddr.
func decodeIfaceAddr(b []byte) (ifaceAddr, error) {
	bad := ifaceAddrFormat.Errorf
	var (
		a      ifaceAddr
		family uint8
		port   [2]byte
		ip     [16]byte
	)
	if _, err := ifaceAddrFormat.Decode(b, &family, base.Zero(1), port[:], ip[:], &a.id); err != nil {
		return ifaceAddr{}, err
	}
	a.port = binary.BigEndian.Uint16(port[:])
	switch family {
	case 4:
		if ip != [16]byte{0: ip[0], 1: ip[1], 2: ip[2], 3: ip[3]} {
			return ifaceAddr{}, bad("IPv4 address with trailing bytes")
		}
		a.ip = net.IP(append([]byte(nil), ip[:4]...))
	case 6:
		a.ip = net.IP(append([]byte(nil), ip[:]...))
		if a.ip.To4() != nil {
			return ifaceAddr{}, bad("IPv4-mapped IPv6 address %v", a.ip)
		}
	default:
		return ifaceAddr{}, bad("family %d", family)
	}
	switch {
	case a.ip.IsUnspecified() || a.ip.IsMulticast() || a.ip.Equal(net.IPv4bcast):
		return ifaceAddr{}, bad("IP %v", a.ip)
	case a.port == 0:
		return ifaceAddr{}, bad("port 0")
	case a.id == 0:
		return ifaceAddr{}, bad("zero iface id")
	}
	return a, nil
}

// deviceAddr is a decoded device address.
type deviceAddr struct {
	family   uint8
	loopback bool
	host     uint64
}

func (d *deviceAddr) encode() []byte {
	var flags uint8
	if d.loopback {
		flags = devFlagLoop
	}
	return deviceAddrFormat.Encode(0, d.family, flags, base.Zero(6), d.host)
}

// decodeDeviceAddr decodes a device address strictly; malformed input
// fails with ucs.ErrInvalidAddr.
func decodeDeviceAddr(b []byte) (deviceAddr, error) {
	var (
		d     deviceAddr
		flags uint8
	)
	if _, err := deviceAddrFormat.Decode(b, &d.family, &flags, base.Zero(6), &d.host); err != nil {
		return deviceAddr{}, err
	}
	d.loopback = flags&devFlagLoop != 0
	switch {
	case d.family != 4 && d.family != 6:
		return deviceAddr{}, deviceAddrFormat.Errorf("family %d", d.family)
	case flags&^devFlagLoop != 0:
		return deviceAddr{}, deviceAddrFormat.Errorf("flags %#x", flags)
	case d.loopback != (d.host != 0):
		return deviceAddr{}, deviceAddrFormat.Errorf("host %#x for loopback=%v", d.host, d.loopback)
	}
	return d, nil
}

// hostID returns a non-zero hash naming the loopback network of this
// process: the boot id of the kernel and the network namespace. Two
// processes with the same value reach each other's loopback listeners.
var hostID = ucs.LoopbackHostID
