package tcp

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"net"
	"os"
	"strings"
	"sync"

	"github.com/goshmem/goshmem/ucs"
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

const (
	ifaceAddrMagic uint32 = 0x41545347 // "GSTA"
	devFlagLoop    uint8  = 1 << 0
)

// ifaceAddr is a decoded iface address.
type ifaceAddr struct {
	ip   net.IP // 4 or 16 bytes
	port uint16
	id   uint64
}

func (a *ifaceAddr) encode() []byte {
	b := make([]byte, IfaceAddrLen)
	binary.LittleEndian.PutUint32(b, ifaceAddrMagic)
	if ip4 := a.ip.To4(); ip4 != nil {
		b[4] = 4
		copy(b[8:], ip4)
	} else {
		b[4] = 6
		copy(b[8:], a.ip.To16())
	}
	binary.BigEndian.PutUint16(b[6:], a.port)
	binary.LittleEndian.PutUint64(b[24:], a.id)
	return b
}

// tcpAddr returns the address to dial.
func (a *ifaceAddr) tcpAddr() *net.TCPAddr { return &net.TCPAddr{IP: a.ip, Port: int(a.port)} }

// decodeIfaceAddr decodes an iface address strictly; malformed input fails
// with ucs.ErrInvalidAddr.
func decodeIfaceAddr(b []byte) (ifaceAddr, error) {
	bad := func(why string, args ...any) (ifaceAddr, error) {
		return ifaceAddr{}, fmt.Errorf("uct/tcp: iface address: %s: %w", fmt.Sprintf(why, args...), ucs.ErrInvalidAddr)
	}
	if len(b) != IfaceAddrLen {
		return bad("%d bytes, want %d", len(b), IfaceAddrLen)
	}
	if m := binary.LittleEndian.Uint32(b); m != ifaceAddrMagic {
		return bad("magic %#x", m)
	}
	if b[5] != 0 {
		return bad("reserved bits set")
	}
	a := ifaceAddr{port: binary.BigEndian.Uint16(b[6:]), id: binary.LittleEndian.Uint64(b[24:])}
	switch b[4] {
	case 4:
		for _, c := range b[12:24] {
			if c != 0 {
				return bad("IPv4 address with trailing bytes")
			}
		}
		a.ip = net.IP(append([]byte(nil), b[8:12]...))
	case 6:
		a.ip = net.IP(append([]byte(nil), b[8:24]...))
		if a.ip.To4() != nil {
			return bad("IPv4-mapped IPv6 address %v", a.ip)
		}
	default:
		return bad("family %d", b[4])
	}
	switch {
	case a.ip.IsUnspecified() || a.ip.IsMulticast() || a.ip.Equal(net.IPv4bcast):
		return bad("IP %v", a.ip)
	case a.port == 0:
		return bad("port 0")
	case a.id == 0:
		return bad("zero iface id")
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
	b := make([]byte, DeviceAddrLen)
	b[0] = d.family
	if d.loopback {
		b[1] = devFlagLoop
	}
	binary.LittleEndian.PutUint64(b[8:], d.host)
	return b
}

// decodeDeviceAddr decodes a device address strictly; malformed input
// fails with ucs.ErrInvalidAddr.
func decodeDeviceAddr(b []byte) (deviceAddr, error) {
	bad := func(why string, args ...any) (deviceAddr, error) {
		return deviceAddr{}, fmt.Errorf("uct/tcp: device address: %s: %w", fmt.Sprintf(why, args...), ucs.ErrInvalidAddr)
	}
	if len(b) != DeviceAddrLen {
		return bad("%d bytes, want %d", len(b), DeviceAddrLen)
	}
	d := deviceAddr{family: b[0], loopback: b[1]&devFlagLoop != 0, host: binary.LittleEndian.Uint64(b[8:])}
	if d.family != 4 && d.family != 6 {
		return bad("family %d", d.family)
	}
	if b[1]&^devFlagLoop != 0 {
		return bad("flags %#x", b[1])
	}
	for _, c := range b[2:8] {
		if c != 0 {
			return bad("reserved bits set")
		}
	}
	if d.loopback != (d.host != 0) {
		return bad("host %#x for loopback=%v", d.host, d.loopback)
	}
	return d, nil
}

// hostID returns a non-zero hash naming the loopback network of this
// process: the boot id of the kernel and the network namespace. Two
// processes with the same value reach each other's loopback listeners.
var hostID = sync.OnceValue(func() uint64 {
	h := fnv.New64a()
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	h.Write([]byte(strings.TrimSpace(string(boot))))
	h.Write([]byte{0})
	netns, _ := os.Readlink("/proc/self/ns/net")
	h.Write([]byte(netns))
	return h.Sum64() | 1
})
