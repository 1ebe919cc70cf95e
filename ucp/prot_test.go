package ucp

import (
	"bytes"
	"errors"
	"testing"

	"github.com/goshmem/goshmem/ucs"
)

// TestMemProtection maps memory that peers may only read, and memory they
// may only write, and checks every path a peer takes (its memory mapped
// here, a lane's RMA, software RMA and atomics): what the protection
// forbids fails with ucs.ErrRejected and changes nothing; what it allows
// works.
func TestMemProtection(t *testing.T) {
	for _, tls := range []string{"sm", "tcp,self"} {
		for _, software := range []bool{false, true} {
			name := tls
			if software {
				name += "/software"
			}
			t.Run(name, func(t *testing.T) {
				c := newContextCfg(t, FeatureRMA|FeatureAMO64, "TLS", tls)
				a, b := newWorker(t, c), newWorker(t, c)
				addr, _ := b.Address()
				ep := connect(t, a, b, new(EPParams).SetAddress(addr))
				stop, done := serve(b) // the target serves software requests
				defer func() { close(stop); <-done }()
				for _, tc := range []struct {
					prot          uint32
					read, write   bool
					fetch, atomic bool
				}{
					{ProtLocalRead | ProtLocalWrite | ProtRemoteRead, true, false, false, false},
					{ProtLocalRead | ProtLocalWrite | ProtRemoteWrite, false, true, false, true},
					{ProtDefault, true, true, true, true},
				} {
					m := mapMem(t, c, new(MemMapParams).SetLength(4096).SetFlags(MemMapAllocate).SetProt(tc.prot))
					mem := memBytes(m)
					copy(mem, "original")
					packed, err := c.RkeyPack(m)
					if err != nil {
						t.Fatal(err)
					}
					rk, err := ep.RkeyUnpack(packed)
					if err != nil {
						t.Fatal(err)
					}
					if software {
						forceSoftware(rk)
					}
					base := uint64(uintptr(m.Address()))
					check := func(what string, allowed bool, err error) {
						t.Helper()
						if allowed && err != nil {
							t.Errorf("prot %#x: %s: %v", tc.prot, what, err)
						}
						if !allowed && !errors.Is(err, ucs.ErrRejected) {
							t.Errorf("prot %#x: %s: %v, want ucs.ErrRejected", tc.prot, what, err)
						}
					}
					r, err := ep.PutNBX([]byte("written!"), base, rk, nil)
					check("put", tc.write, waitDone(r, err))
					if err := ep.Flush(); err != nil {
						t.Fatal(err)
					}
					if want := map[bool]string{true: "written!", false: "original"}[tc.write]; !bytes.Equal(mem[:8], []byte(want)) {
						t.Errorf("prot %#x: memory holds %q after the put, want %q", tc.prot, mem[:8], want)
					}
					got := make([]byte, 8)
					r, err = ep.GetNBX(got, base, rk, nil)
					check("get", tc.read, waitDone(r, err))
					r, err = ep.AtomicOpNBX(AtomicOpAdd, 1, base+8, rk, nil)
					check("posted atomic", tc.atomic, waitDone(r, err))
					var old uint64
					r, err = ep.AtomicOpNBX(AtomicOpAdd, 1, base+8, rk, new(RequestParam).SetReply(&old))
					check("fetching atomic", tc.fetch, waitDone(r, err))
					rk.Destroy()
				}
			})
		}
	}
}

// TestSwRegionProtection checks the target's own check of software
// requests: a region mapped without remote write is not written even by a
// request whose key claims it may.
func TestSwRegionProtection(t *testing.T) {
	c := newContextCfg(t, FeatureRMA, "TLS", "sm")
	m := mapMem(t, c, new(MemMapParams).SetLength(4096).SetFlags(MemMapAllocate).SetProt(ProtLocalRead|ProtLocalWrite|ProtRemoteRead))
	base := uint64(uintptr(m.Address()))
	if _, ok := c.region(m.token, base, 8, ProtRemoteWrite); ok {
		t.Error("a read-only region accepts a write")
	}
	if _, ok := c.region(m.token, base, 8, ProtRemoteRead); !ok {
		t.Error("a read-only region refuses a read")
	}
}
