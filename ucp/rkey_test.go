package ucp

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/goshmem/goshmem/ucs"
)

// encodeRkey packs k in the layout RkeyPack writes.
func encodeRkey(k *packedRkey) []byte {
	b := append([]byte(rkeyMagic), rkeyVersion, byte(k.memType), k.access)
	b = binary.LittleEndian.AppendUint64(b, k.address)
	b = binary.LittleEndian.AppendUint64(b, k.length)
	b = append(b, byte(k.n))
	for _, mk := range k.mkeys[:k.n] {
		b = appendStr8(b, string(mk.component))
		b = appendBlob16(b, mk.mkey)
	}
	return b
}

// FuzzRkeyUnpack feeds packed keys to Endpoint.RkeyUnpack on an endpoint
// between two workers (every transport's key decoder and unpacking, then
// lane selection): it fails with a documented status, or gives a key that
// can be used for direct access inside its range only and destroyed.
func FuzzRkeyUnpack(f *testing.F) {
	c := newContext(f)
	a, b := newWorker(f, c), newWorker(f, c)
	addr, _ := b.Address()
	ep, err := a.NewEndpoint(new(EPParams).SetAddress(addr))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { ep.Close(CloseModeForce) })
	for _, prio := range []string{"md:posix", "md:sysv", "mmap"} {
		cc := newContextCfg(f, FeatureRMA, "ALLOC_PRIO", prio)
		m, err := cc.MemMap(new(MemMapParams).SetLength(4096).SetFlags(MemMapAllocate))
		if err != nil {
			f.Logf("no %s memory: %v", prio, err)
			continue
		}
		packed, err := cc.RkeyPack(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(packed)
		cc.MemUnmap(m)
	}
	// A key of memory that stays mapped, so that unpacking can succeed.
	live := mapMem(f, c, new(MemMapParams).SetLength(8192).SetFlags(MemMapAllocate))
	packed, err := c.RkeyPack(live)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(packed)
	f.Fuzz(func(t *testing.T, b []byte) {
		rk, err := ep.RkeyUnpack(b)
		if err != nil {
			if !errors.Is(err, ucs.ErrInvalidParam) && !errors.Is(err, ucs.ErrUnreachable) && !errors.Is(err, ucs.ErrNoMemory) {
				t.Fatalf("RkeyUnpack error %v is not a documented status", err)
			}
			return
		}
		defer rk.Destroy()
		if _, err := rk.Ptr(rk.address + rk.length); !errors.Is(err, ucs.ErrOutOfRange) {
			t.Fatalf("Ptr one past the key's range: %v", err)
		}
		if rk.address > 0 {
			if _, err := rk.Ptr(rk.address - 1); !errors.Is(err, ucs.ErrOutOfRange) {
				t.Fatalf("Ptr before the key's range: %v", err)
			}
		}
	})
}

// TestRkeyCompare: keys unpacked from the same packed key compare equal,
// keys of different memory do not, and the order is antisymmetric.
func TestRkeyCompare(t *testing.T) {
	c := newContext(t)
	a, b := newWorker(t, c), newWorker(t, c)
	p1 := newPair(t, c, a, b, 4096)
	p2 := newPair(t, c, a, b, 4096)
	packed, err := c.RkeyPack(mapMem(t, c, new(MemMapParams).SetLength(4096).SetFlags(MemMapAllocate)))
	if err != nil {
		t.Fatal(err)
	}
	defer RkeyBufferRelease(packed)
	k1, err := p1.ep.RkeyUnpack(packed)
	if err != nil {
		t.Fatal(err)
	}
	defer k1.Destroy()
	k2, err := p2.ep.RkeyUnpack(packed)
	if err != nil {
		t.Fatal(err)
	}
	defer k2.Destroy()
	if k1.Compare(k2) != 0 || k2.Compare(k1) != 0 {
		t.Error("keys unpacked from the same packed key differ")
	}
	if x, y := p1.rkey.Compare(p2.rkey), p2.rkey.Compare(p1.rkey); x == 0 || x != -y {
		t.Errorf("keys of different memory compare %d and %d", x, y)
	}
}

// TestMapsRemoteKey: Worker.MapsRemoteKey says, without connecting,
// exactly what an endpoint's RkeyUnpack then does: whether Rkey.Ptr maps
// the peer's memory, for every pair of transport selections; a malformed
// address fails with ucs.ErrInvalidAddr, a malformed key with
// ucs.ErrInvalidParam.
func TestMapsRemoteKey(t *testing.T) {
	for _, tt := range []struct{ local, remote, alloc string }{
		{"posix", "posix", "md:posix"},
		{"posix", "posix", "mmap"},
		{"sysv", "sysv", "md:sysv"},
		{"sm", "sm", "md:posix"},
		{"posix,tcp", "posix,tcp", "md:posix"},
		{"tcp", "posix,tcp", "md:posix"},
		{"posix,tcp", "tcp", "md:posix"},
		{"tcp", "tcp", "md:posix"},
		{"sysv,tcp", "posix,tcp", "md:posix"},
	} {
		t.Run(tt.local+"/"+tt.remote+"/"+tt.alloc, func(t *testing.T) {
			lc := newContextTLS(t, tt.local)
			rc := newContextCfg(t, FeatureRMA|FeatureAMO64, "TLS", tt.remote, "ALLOC_PRIO", tt.alloc)
			lw, rw := newWorker(t, lc), newWorker(t, rc)
			m := mapMem(t, rc, new(MemMapParams).SetLength(8192).SetFlags(MemMapAllocate))
			packed, err := rc.RkeyPack(m)
			if err != nil {
				t.Fatal(err)
			}
			addr, err := rw.Address()
			if err != nil {
				t.Fatal(err)
			}
			says, err := lw.MapsRemoteKey(addr, packed)
			if err != nil {
				t.Fatalf("MapsRemoteKey: %v", err)
			}
			ep, err := lw.NewEndpoint(new(EPParams).SetAddress(addr))
			if err != nil {
				t.Fatal(err)
			}
			defer ep.Close(CloseModeForce)
			rk, err := ep.RkeyUnpack(packed)
			if err != nil {
				t.Fatal(err)
			}
			defer rk.Destroy()
			_, err = rk.Ptr(uint64(uintptr(m.Address())))
			if maps := err == nil; maps != says {
				t.Errorf("MapsRemoteKey says %v, but Ptr gives %v", says, err)
			}
			t.Logf("maps: %v", says)
			if _, err := lw.MapsRemoteKey(addr[:len(addr)/2], packed); !errors.Is(err, ucs.ErrInvalidAddr) {
				t.Errorf("half an address: %v, want ucs.ErrInvalidAddr", err)
			}
			if _, err := lw.MapsRemoteKey(addr, packed[:len(packed)-1]); !errors.Is(err, ucs.ErrInvalidParam) {
				t.Errorf("a truncated key: %v, want ucs.ErrInvalidParam", err)
			}
		})
	}
}
