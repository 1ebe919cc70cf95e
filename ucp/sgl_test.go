package ucp

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/goshmem/goshmem/ucs"
)

// sglPaths are the paths an SGL put or get takes: the target's memory
// mapped here, a transport's RMA lane (sm with the mapping dropped, tcp),
// and the software protocols; wantPut and wantGet are the protocols the
// elements of sglSizes take on it.
var sglPaths = []struct {
	name, tls        string
	self             bool // the target is the initiator's own worker
	unmap, sw        bool
	wantPut, wantGet string
}{
	{"self", "all", true, false, false, "sgl:put/rkey_ptr", "sgl:get/rkey_ptr"},
	{"sm/mapped", "sm", false, false, false, "sgl:put/rkey_ptr", "sgl:get/rkey_ptr"},
	{"sm/lane", "sm", false, true, false, "sgl:put/short+put/zcopy", "sgl:get/bcopy+get/zcopy"},
	{"tcp", "tcp,self", false, false, false, "sgl:put/short+put/bcopy+put/zcopy", "sgl:get/bcopy+get/zcopy"},
	{"tcp/software", "tcp,self", false, false, true, "sgl:put/sw", "sgl:get/sw"},
}

// sglSizes are the element lengths of the SGL tests: empty, short, bcopy
// and zero-copy sizes.
var sglSizes = []int{8, 0, 100, 5000, 300 << 10, 1, 64 << 10}

// TestSGLPutGet puts an SGL whose elements go to two mapped segments, then
// gets it back into other buffers, over each path: one request per call,
// whose callback runs once, after every element is done, and whose
// protocol names each element's.
func TestSGLPutGet(t *testing.T) {
	for _, tp := range sglPaths {
		t.Run(tp.name, func(t *testing.T) {
			c := newContextCfg(t, FeatureRMA, "TLS", tp.tls)
			a := newWorker(t, c)
			b := a
			if !tp.self {
				b = newWorker(t, c)
				stop, done := serve(b)
				defer func() { close(stop); <-done }()
			}
			p := newPair(t, c, a, b, 1<<20)
			q := pair{ep: p.ep} // a second segment, through the same endpoint
			qm := mapMem(t, c, new(MemMapParams).SetLength(1<<20).SetFlags(MemMapAllocate))
			packed, err := c.RkeyPack(qm)
			if err != nil {
				t.Fatal(err)
			}
			if q.rkey, err = p.ep.RkeyUnpack(packed); err != nil {
				t.Fatal(err)
			}
			defer q.rkey.Destroy()
			q.base = uint64(uintptr(qm.Address()))
			for _, rk := range []*Rkey{p.rkey, q.rkey} {
				if tp.sw {
					forceSoftware(rk)
				}
				if tp.unmap {
					rk.base = nil
				}
			}
			n := len(sglSizes)
			src, got := make([][]byte, n), make([][]byte, n)
			lengths, raddrs, rkeys := make([]int, n), make([]uint64, n), make([]*Rkey, n)
			off := [2]uint64{}
			for i, size := range sglSizes {
				src[i], got[i] = pattern(size+3, i), make([]byte, size+3) // longer than the element
				lengths[i] = size
				pp := [2]pair{p, q}[i%2]
				raddrs[i], rkeys[i] = pp.base+off[i%2], pp.rkey
				off[i%2] += uint64(size) + 64
			}
			for _, put := range []bool{true, false} {
				bufs, want := src, tp.wantPut
				if !put {
					bufs, want = got, tp.wantGet
				}
				local := DTLocalSGL{Buffers: bufs, Lengths: lengths}
				remote := new(DTRemoteSGL).SetRemoteAddrs(raddrs).SetRkeys(rkeys).SetLengths(lengths)
				calls := 0
				param := new(RequestParam).SetLocalSGL(&local).SetRemoteSGL(remote, n).
					SetOpAttrFlags(OpAttrFlagNoImmCmpl).SetCallback(func(*Request, error, any) { calls++ })
				var r *Request
				var err error
				if put {
					r, err = p.ep.PutNBX(nil, 0, nil, param)
				} else {
					r, err = p.ep.GetNBX(nil, 0, nil, param)
				}
				// The descriptors are copied: changing them now changes nothing.
				local, *remote = DTLocalSGL{}, DTRemoteSGL{}
				if err != nil {
					t.Fatalf("put=%v: %v", put, err)
				}
				for !r.IsCompleted() {
					a.Progress()
				}
				if err := r.Status(); err != nil {
					t.Fatalf("put=%v: %v", put, err)
				}
				if d := r.Query().DebugString; !strings.HasPrefix(d, want+" ") {
					t.Errorf("put=%v: %q, want protocols %s", put, d, want)
				}
				r.Free()
				if calls != 1 {
					t.Errorf("put=%v: callback called %d times", put, calls)
				}
				if put {
					if err := p.ep.Flush(); err != nil {
						t.Fatal(err)
					}
				}
			}
			for i, size := range sglSizes {
				if !bytes.Equal(got[i][:size], src[i][:size]) {
					t.Errorf("element %d (%d bytes) differs after the put and get", i, size)
				}
				if got[i][size] != 0 {
					t.Errorf("element %d: the get wrote beyond its length", i)
				}
			}
		})
	}
}

// TestSGLParams checks that SGL calls with bad parameters fail as
// documented, and that a valid one without a request completes at once on
// mapped memory.
func TestSGLParams(t *testing.T) {
	c := newContextCfg(t, FeatureRMA, "TLS", "sm")
	a, b := newWorker(t, c), newWorker(t, c)
	p := newPair(t, c, a, b, 1<<16)
	other := newPair(t, c, b, a, 1<<16) // a key unpacked on another endpoint
	buf := make([]byte, 64)
	good := func() (*DTLocalSGL, *DTRemoteSGL) {
		return &DTLocalSGL{Buffers: [][]byte{buf, buf}, Lengths: []int{64, 32}},
			new(DTRemoteSGL).SetRemoteAddrs([]uint64{p.base, p.base + 64}).SetRkeys([]*Rkey{p.rkey, p.rkey})
	}
	hostMemh := mapMem(t, c, new(MemMapParams).SetLength(4096).SetFlags(MemMapAllocate))
	// No MemMap makes device memory: a handle that says so stands for it.
	cudaMemh := &MemHandle{ctx: c, address: hostMemh.address, length: hostMemh.length, memType: ucs.MemoryTypeCUDA}
	for _, tt := range []struct {
		name  string
		param func() *RequestParam
		buf   []byte
		want  error
	}{
		{"valid", func() *RequestParam { l, r := good(); return new(RequestParam).SetLocalSGL(l).SetRemoteSGL(r, 2) }, nil, nil},
		{"remote count differs", func() *RequestParam { l, r := good(); return new(RequestParam).SetLocalSGL(l).SetRemoteSGL(r, 1) }, nil, ucs.ErrInvalidParam},
		{"local side only", func() *RequestParam { l, _ := good(); return new(RequestParam).SetLocalSGL(l) }, nil, ucs.ErrInvalidParam},
		{"remote side only", func() *RequestParam { _, r := good(); return new(RequestParam).SetRemoteSGL(r, 2) }, nil, ucs.ErrInvalidParam},
		{"remote count not set", func() *RequestParam {
			l, r := good()
			return new(RequestParam).SetLocalSGL(l).SetRemoteDatatype(DatatypeSGL).SetRemote(r)
		}, nil, ucs.ErrInvalidParam},
		{"remote datatype not SGL", func() *RequestParam {
			l, r := good()
			return new(RequestParam).SetLocalSGL(l).SetRemoteSGL(r, 2).SetRemoteDatatype(DatatypeIOV)
		}, nil, ucs.ErrUnsupported},
		{"a buffer beside the SGL", func() *RequestParam { l, r := good(); return new(RequestParam).SetLocalSGL(l).SetRemoteSGL(r, 2) }, buf, ucs.ErrInvalidParam},
		{"remote lengths differ", func() *RequestParam {
			l, r := good()
			return new(RequestParam).SetLocalSGL(l).SetRemoteSGL(r.SetLengths([]int{64, 31}), 2)
		}, nil, ucs.ErrInvalidParam},
		{"element longer than its buffer", func() *RequestParam {
			l, r := good()
			l.Lengths[1] = 65
			return new(RequestParam).SetLocalSGL(l).SetRemoteSGL(r, 2)
		}, nil, ucs.ErrInvalidParam},
		{"too few buffers", func() *RequestParam {
			l, r := good()
			l.Buffers = l.Buffers[:1]
			return new(RequestParam).SetLocalSGL(l).SetRemoteSGL(r, 2)
		}, nil, ucs.ErrInvalidParam},
		{"too few keys", func() *RequestParam {
			l, r := good()
			return new(RequestParam).SetLocalSGL(l).SetRemoteSGL(r.SetRkeys([]*Rkey{p.rkey}), 2)
		}, nil, ucs.ErrInvalidParam},
		{"addresses not in the field mask", func() *RequestParam {
			l, r := good()
			r.FieldMask &^= DTRemoteSGLFieldRemoteAddrs
			return new(RequestParam).SetLocalSGL(l).SetRemoteSGL(r, 2)
		}, nil, ucs.ErrInvalidParam},
		{"key of another endpoint", func() *RequestParam {
			l, r := good()
			return new(RequestParam).SetLocalSGL(l).SetRemoteSGL(r.SetRkeys([]*Rkey{p.rkey, other.rkey}), 2)
		}, nil, ucs.ErrInvalidParam},
		{"nil key", func() *RequestParam {
			l, r := good()
			return new(RequestParam).SetLocalSGL(l).SetRemoteSGL(r.SetRkeys([]*Rkey{p.rkey, nil}), 2)
		}, nil, ucs.ErrInvalidParam},
		{"memory handles of one type", func() *RequestParam {
			l, r := good()
			l.Memhs = []*MemHandle{hostMemh, nil}
			return new(RequestParam).SetLocalSGL(l).SetRemoteSGL(r, 2)
		}, nil, nil},
		{"mixed memory types", func() *RequestParam {
			l, r := good()
			l.Memhs = []*MemHandle{hostMemh, cudaMemh}
			return new(RequestParam).SetLocalSGL(l).SetRemoteSGL(r, 2)
		}, nil, ucs.ErrInvalidParam},
		{"no elements", func() *RequestParam {
			return new(RequestParam).SetLocalSGL(&DTLocalSGL{}).SetRemoteSGL(new(DTRemoteSGL).SetRemoteAddrs(nil).SetRkeys(nil), 0)
		}, nil, nil},
	} {
		for _, put := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/put=%v", tt.name, put), func(t *testing.T) {
				var r *Request
				var err error
				if put {
					r, err = p.ep.PutNBX(tt.buf, 0, nil, tt.param())
				} else {
					r, err = p.ep.GetNBX(tt.buf, 0, nil, tt.param())
				}
				if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
					t.Fatalf("%v, want %v", err, tt.want)
				}
				if r != nil {
					t.Errorf("a request for an operation on mapped memory")
				}
			})
		}
	}
}

// BenchmarkSGLPut puts 64 elements of 64 B and of 64 KiB to a peer's
// memory over each path, as one SGL put and as 64 puts, each flushed.
func BenchmarkSGLPut(b *testing.B) {
	const count = 64
	for _, tp := range sglPaths {
		if tp.self || tp.sw {
			continue
		}
		for _, size := range []int{64, 64 << 10} {
			c := newContextCfg(b, FeatureRMA, "TLS", tp.tls)
			wa, wb := newWorker(b, c), newWorker(b, c)
			stop, done := serve(wb)
			p := newPair(b, c, wa, wb, count*size)
			clear(p.mem) // faults the pages in before either is timed
			if tp.unmap {
				p.rkey.base = nil
			}
			bufs, lengths, raddrs, rkeys := make([][]byte, count), make([]int, count), make([]uint64, count), make([]*Rkey, count)
			for i := range count {
				bufs[i], lengths[i], raddrs[i], rkeys[i] = pattern(size, i), size, p.base+uint64(i*size), p.rkey
			}
			param := new(RequestParam).SetLocalSGL(&DTLocalSGL{Buffers: bufs, Lengths: lengths}).
				SetRemoteSGL(new(DTRemoteSGL).SetRemoteAddrs(raddrs).SetRkeys(rkeys), count)
			b.Run(fmt.Sprintf("%s/%dx%d/sgl", tp.name, count, size), func(b *testing.B) {
				b.SetBytes(int64(count * size))
				for b.Loop() {
					if err := waitDone(p.ep.PutNBX(nil, 0, nil, param)); err != nil {
						b.Fatal(err)
					}
					if err := p.ep.Flush(); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(fmt.Sprintf("%s/%dx%d/puts", tp.name, count, size), func(b *testing.B) {
				b.SetBytes(int64(count * size))
				reqs := make([]*Request, 0, count)
				for b.Loop() {
					reqs = reqs[:0]
					for i := range count {
						r, err := p.ep.PutNBX(bufs[i], raddrs[i], p.rkey, nil)
						if err != nil {
							b.Fatal(err)
						}
						if r != nil {
							reqs = append(reqs, r)
						}
					}
					for _, r := range reqs {
						if err := waitDone(r, nil); err != nil {
							b.Fatal(err)
						}
					}
					if err := p.ep.Flush(); err != nil {
						b.Fatal(err)
					}
				}
			})
			close(stop)
			<-done
		}
	}
}
