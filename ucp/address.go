package ucp

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// Worker address layout (little endian):
//
//	magic "GWA" version(1)  u8 flags (addrFlagNetOnly)  u64 worker uid
//	u8 name-len name
//	u8 iface count, then per iface:
//	  u8 len component   u8 len tl-name   u8 device type
//	  u64 cap flags  u64 atomic caps (op32|fop32<<8|op64<<16|fop64<<24)
//	  f64 latency  f64 bandwidth  f64 overhead  u8 priority
//	  u16 len device address   u16 len iface address
const (
	addrMagic     = "GWA"
	addrVersion   = 1
	maxAddrIfaces = 32
	maxAddrName   = 255
	maxAddrBlob   = 4096
)

// addrIface is one interface of a packed worker address.
type addrIface struct {
	component  string
	tlName     string
	devType    uint8
	capFlags   uct.IfaceFlags
	atomics    uint64
	latency    float64
	bandwidth  float64
	overhead   float64
	priority   uint8
	deviceAddr []byte
	ifaceAddr  []byte
}

// workerAddress is a decoded worker address.
type workerAddress struct {
	flags  uint8
	uid    uint64
	name   string
	ifaces []addrIface
}

func appendStr8(b []byte, s string) []byte {
	return append(append(b, byte(len(s))), s...)
}

func appendBlob16(b []byte, p []byte) []byte {
	b = binary.LittleEndian.AppendUint16(b, uint16(len(p)))
	return append(b, p...)
}

func (a *workerAddress) encode() []byte {
	b := make([]byte, 0, 64+len(a.ifaces)*96)
	b = append(b, addrMagic...)
	b = append(b, addrVersion, a.flags)
	b = binary.LittleEndian.AppendUint64(b, a.uid)
	b = appendStr8(b, a.name)
	b = append(b, byte(len(a.ifaces)))
	for _, f := range a.ifaces {
		b = appendStr8(b, f.component)
		b = appendStr8(b, f.tlName)
		b = append(b, f.devType)
		b = binary.LittleEndian.AppendUint64(b, uint64(f.capFlags))
		b = binary.LittleEndian.AppendUint64(b, f.atomics)
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f.latency))
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f.bandwidth))
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f.overhead))
		b = append(b, f.priority)
		b = appendBlob16(b, f.deviceAddr)
		b = appendBlob16(b, f.ifaceAddr)
	}
	return b
}

// decoder reads a byte slice and remembers the first error.
type decoder struct {
	b   []byte
	err bool
}

func (d *decoder) take(n int) []byte {
	if d.err || n < 0 || len(d.b) < n {
		d.err = true
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}

func (d *decoder) u8() uint8 {
	if p := d.take(1); p != nil {
		return p[0]
	}
	return 0
}

func (d *decoder) u16() uint16 {
	if p := d.take(2); p != nil {
		return binary.LittleEndian.Uint16(p)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if p := d.take(8); p != nil {
		return binary.LittleEndian.Uint64(p)
	}
	return 0
}

func (d *decoder) f64() float64 {
	v := math.Float64frombits(d.u64())
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		d.err = true
	}
	return v
}

func (d *decoder) str8() string { return string(d.take(int(d.u8()))) }

func (d *decoder) blob16() []byte {
	p := d.take(int(d.u16()))
	return append([]byte(nil), p...)
}

// decodeWorkerAddress parses a packed worker address. Anything malformed
// (bad magic or version, unknown flags, truncation, trailing bytes, empty or
// oversized fields, non-finite perf figures) fails with ucs.ErrInvalidAddr.
func decodeWorkerAddress(b []byte) (*workerAddress, error) {
	bad := func(why string) error {
		return fmt.Errorf("ucp: worker address (%d bytes): %s: %w", len(b), why, ucs.ErrInvalidAddr)
	}
	if len(b) > maxAddrBlob {
		return nil, bad("too long")
	}
	d := decoder{b: b}
	if string(d.take(len(addrMagic))) != addrMagic {
		return nil, bad("bad magic")
	}
	if v := d.u8(); v != addrVersion {
		return nil, bad(fmt.Sprintf("version %d", v))
	}
	a := &workerAddress{flags: d.u8(), uid: d.u64(), name: d.str8()}
	n := int(d.u8())
	if d.err {
		return nil, bad("truncated header")
	}
	if a.flags&^addrFlagNetOnly != 0 {
		return nil, bad(fmt.Sprintf("flags %#x", a.flags))
	}
	if n == 0 || n > maxAddrIfaces {
		return nil, bad(fmt.Sprintf("%d interfaces", n))
	}
	for i := 0; i < n; i++ {
		f := addrIface{
			component: d.str8(), tlName: d.str8(), devType: d.u8(),
			capFlags: uct.IfaceFlags(d.u64()), atomics: d.u64(),
			latency: d.f64(), bandwidth: d.f64(), overhead: d.f64(),
			priority: d.u8(), deviceAddr: d.blob16(), ifaceAddr: d.blob16(),
		}
		if d.err {
			return nil, bad(fmt.Sprintf("interface %d truncated or invalid", i))
		}
		if f.component == "" || f.tlName == "" {
			return nil, bad(fmt.Sprintf("interface %d unnamed", i))
		}
		a.ifaces = append(a.ifaces, f)
	}
	if len(d.b) != 0 {
		return nil, bad(fmt.Sprintf("%d trailing bytes", len(d.b)))
	}
	return a, nil
}

func packAtomics(op32, fop32, op64, fop64 uct.AtomicOpMask) uint64 {
	return uint64(op32&0xff | (fop32&0xff)<<8 | (op64&0xff)<<16 | (fop64&0xff)<<24)
}
