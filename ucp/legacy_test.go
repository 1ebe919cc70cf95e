package ucp

import (
	"bytes"
	"errors"
	"testing"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
)

// TestLegacyCalls runs the older blocking calls over each path (a
// transport's RMA and atomics, and the software protocols): each returns
// the value the current call would, and its effect is in the target's
// memory once it returned (after a flush for the posted add).
func TestLegacyCalls(t *testing.T) {
	cases := []struct {
		name, tls string
		sw        bool
	}{
		{"sm", "sm,self", false},
		{"tcp", "tcp,self", false},
		{"software", "tcp,self", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newContextTLS(t, tc.tls)
			a, b := newWorker(t, c), newWorker(t, c)
			p := newPair(t, c, a, b, 4096)
			connect(t, b, a, nil) // the software protocols answer on it
			if tc.sw {
				forceSoftware(p.rkey)
			}
			done, exited := make(chan struct{}), make(chan struct{})
			defer func() { close(done); <-exited }()
			go func() { // the target progresses on its own, as a peer process does
				defer close(exited)
				for {
					select {
					case <-done:
						return
					default:
						if b.Progress() == 0 {
							b.Idle()
						}
					}
				}
			}()
			msg := []byte("legacy put and get")
			if err := p.ep.Put(msg, p.base+64, p.rkey); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(msg))
			if err := p.ep.Get(got, p.base+64, p.rkey); err != nil || !bytes.Equal(got, msg) {
				t.Fatalf("Get after Put: %q, %v; want %q", got, err, msg)
			}
			w32 := (*uint32)(unsafe.Pointer(&p.mem[0]))
			w64 := (*uint64)(unsafe.Pointer(&p.mem[8]))
			a32, a64 := p.base, p.base+8
			type step struct {
				name      string
				do        func() (uint64, error)
				old, want uint64 // the value returned, and the word's after
				is64      bool
			}
			steps := []step{
				{"add32", func() (uint64, error) { return 0, p.ep.AtomicAdd32(5, a32, p.rkey) }, 0, 5, false},
				{"fadd32", func() (uint64, error) { v, err := p.ep.AtomicFAdd32(3, a32, p.rkey); return uint64(v), err }, 5, 8, false},
				{"swap32", func() (uint64, error) { v, err := p.ep.AtomicSwap32(100, a32, p.rkey); return uint64(v), err }, 8, 100, false},
				{"cswap32 miss", func() (uint64, error) { v, err := p.ep.AtomicCSwap32(7, 1, a32, p.rkey); return uint64(v), err }, 100, 100, false},
				{"cswap32 hit", func() (uint64, error) { v, err := p.ep.AtomicCSwap32(100, 1, a32, p.rkey); return uint64(v), err }, 100, 1, false},
				{"add64", func() (uint64, error) { return 0, p.ep.AtomicAdd64(1<<40, a64, p.rkey) }, 0, 1 << 40, true},
				{"fadd64", func() (uint64, error) { return p.ep.AtomicFAdd64(2, a64, p.rkey) }, 1 << 40, 1<<40 + 2, true},
				{"swap64", func() (uint64, error) { return p.ep.AtomicSwap64(9, a64, p.rkey) }, 1<<40 + 2, 9, true},
				{"cswap64 miss", func() (uint64, error) { return p.ep.AtomicCSwap64(8, 3, a64, p.rkey) }, 9, 9, true},
				{"cswap64 hit", func() (uint64, error) { return p.ep.AtomicCSwap64(9, 3, a64, p.rkey) }, 9, 3, true},
			}
			for _, s := range steps {
				v, err := s.do()
				if err != nil {
					t.Fatalf("%s: %v", s.name, err)
				}
				if err := p.ep.Flush(); err != nil {
					t.Fatal(err)
				}
				now := uint64(*w32)
				if s.is64 {
					now = *w64
				}
				if (s.name[:3] != "add" && v != s.old) || now != s.want {
					t.Fatalf("%s: returned %d, word %d; want %d, %d", s.name, v, now, s.old, s.want)
				}
			}
			if err := p.ep.AtomicAdd64(1, a64+1, p.rkey); !errors.Is(err, ucs.ErrInvalidParam) {
				t.Fatalf("misaligned add: %v, want ErrInvalidParam", err)
			}
		})
	}
}
