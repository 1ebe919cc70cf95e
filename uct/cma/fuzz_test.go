package cma

import (
	"bytes"
	"errors"
	"testing"

	"github.com/goshmem/goshmem/ucs"
)

// FuzzMkeyDecode checks that the key decoder either fails with
// ucs.ErrInvalidParam or returns a key that satisfies every invariant and
// encodes back to the same bytes.
func FuzzMkeyDecode(f *testing.F) {
	good := (&mkey{pid: 4242, addr: 0x7f12_3456_0000, length: 1 << 20}).encode()
	f.Add(good)
	f.Add([]byte{})
	f.Add(good[:20])
	f.Add(make([]byte, MkeyPackedSize))
	f.Add((&mkey{pid: 1, addr: 1, length: ^uint64(0)}).encode())
	f.Add((&mkey{pid: maxPid - 1, addr: maxAddr - 1, length: 1}).encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := decodeMkey(b)
		if err != nil {
			if !errors.Is(err, ucs.ErrInvalidParam) {
				t.Fatalf("error %v is not ErrInvalidParam", err)
			}
			return
		}
		if k.pid == 0 || k.pid >= maxPid || k.length == 0 || k.addr == 0 || k.addr+k.length > maxAddr || k.addr+k.length < k.addr {
			t.Fatalf("accepted %+v", k)
		}
		if !bytes.Equal(k.encode(), b) {
			t.Fatalf("%x decodes to %+v, which encodes differently", b, k)
		}
	})
}

// FuzzIfaceAddrDecode checks the iface address decoder the same way.
func FuzzIfaceAddrDecode(f *testing.F) {
	good := (&ifaceAddr{pid: 77, pidns: 0x1234, id: 99, probe: 0xc000012340}).encode()
	f.Add(good)
	f.Add([]byte{})
	f.Add(good[:31])
	f.Add(make([]byte, IfaceAddrLen))
	f.Add((&ifaceAddr{pid: 1, id: 1, probe: 7}).encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := decodeIfaceAddr(b)
		if err != nil {
			if !errors.Is(err, ucs.ErrInvalidAddr) {
				t.Fatalf("error %v is not ErrInvalidAddr", err)
			}
			return
		}
		if a.pid == 0 || a.pid >= maxPid || a.id == 0 || a.probe == 0 || a.probe%8 != 0 || a.probe >= maxAddr {
			t.Fatalf("accepted %+v", a)
		}
		if !bytes.Equal(a.encode(), b) {
			t.Fatalf("%x decodes to %+v, which encodes differently", b, a)
		}
	})
}
