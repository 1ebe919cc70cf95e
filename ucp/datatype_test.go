package ucp

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/goshmem/goshmem/ucs"
)

// TestDtIter packs and unpacks contiguous, iov and generic data in pieces
// of every size, from every offset, and checks truncation.
func TestDtIter(t *testing.T) {
	var gen strided2
	dt, err := DatatypeCreateGeneric(gen.ops(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer DatatypeDestroy(dt)
	want := pattern(37, 3)
	make3 := func(b []byte) map[string]func() dtIter {
		return map[string]func() dtIter{
			"contig": func() dtIter { return dtIter{contig: b, length: len(b)} },
			"iov": func() dtIter {
				iov := [][]byte{b[:5], nil, b[5:6], b[6:30], {}, b[30:]}
				return dtIter{class: DatatypeClassIOV, iov: iov, length: len(b)}
			},
		}
	}
	for name, mk := range make3(want) {
		for piece := 1; piece <= 40; piece += 3 {
			it := mk()
			got := make([]byte, len(want))
			for off := 0; off < len(want); off += piece {
				it.pack(off, got[off:min(off+piece, len(got))])
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s: pack in pieces of %d: %v", name, piece, got)
			}
		}
	}
	for name, mk := range make3(make([]byte, len(want))) {
		for piece := 1; piece <= 40; piece += 3 {
			it := mk()
			for off := 0; off < len(want); off += piece {
				if st := it.unpack(off, want[off:min(off+piece, len(want))]); st != ucs.OK {
					t.Fatalf("%s: unpack: %v", name, st)
				}
			}
			out := make([]byte, len(want))
			it.pack(0, out)
			if !bytes.Equal(out, want) {
				t.Fatalf("%s: unpack in pieces of %d: %v", name, piece, out)
			}
			if st := it.unpack(30, want[:10]); st != ucs.ErrMessageTruncated {
				t.Fatalf("%s: unpack past the end: %v", name, st)
			}
		}
	}
	// Generic, through the param.
	buf := make([]byte, 2*len(want))
	it, err := dtFromParam(nil, new(RequestParam).SetDatatype(dt).SetGenericBuffer(buf, len(want)), true)
	if err != nil {
		t.Fatal(err)
	}
	it.unpack(0, want[:20])
	it.unpack(20, want[20:])
	it.finish()
	for i := range want {
		if buf[2*i] != want[i] {
			t.Fatalf("generic unpack: byte %d", i)
		}
	}
	if gen.started != 1 || gen.finished != 1 {
		t.Errorf("generic states: %d started, %d finished", gen.started, gen.finished)
	}
}

// TestDatatypeCalls checks DatatypeCreateGeneric, DatatypeDestroy and
// DatatypeQuery.
func TestDatatypeCalls(t *testing.T) {
	var gen strided2
	ops := gen.ops()
	bad := *ops
	bad.Finish = nil
	if _, err := DatatypeCreateGeneric(&bad, nil); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("generic datatype without Finish: %v", err)
	}
	dt, err := DatatypeCreateGeneric(ops, "ctx")
	if err != nil {
		t.Fatal(err)
	}
	if dt.Class() != DatatypeClassGeneric || DatatypeIOV.Class() != DatatypeClassIOV || DatatypeContig(4).Class() != DatatypeClassContig {
		t.Errorf("classes: %d %d %d", dt.Class(), DatatypeIOV.Class(), DatatypeContig(4).Class())
	}
	for _, tc := range []struct {
		dt     Datatype
		buffer any
		count  int
		want   int
	}{
		{DatatypeContig(8), nil, 5, 40},
		{DatatypeIOV, [][]byte{make([]byte, 3), nil, make([]byte, 4)}, 3, 7},
		{DatatypeIOV, [][]byte{make([]byte, 3), nil, make([]byte, 4)}, 1, 3},
		{dt, make([]byte, 20), 10, 10},
	} {
		a := DatatypeAttr{FieldMask: DatatypeAttrFieldPackedSize | DatatypeAttrFieldBuffer | DatatypeAttrFieldCount, Buffer: tc.buffer, Count: tc.count}
		if err := DatatypeQuery(tc.dt, &a); err != nil || a.PackedSize != tc.want {
			t.Errorf("query of %#x: %d, %v; want %d", uint64(tc.dt), a.PackedSize, err, tc.want)
		}
	}
	a := DatatypeAttr{FieldMask: DatatypeAttrFieldPackedSize | DatatypeAttrFieldBuffer | DatatypeAttrFieldCount, Buffer: [][]byte{nil}, Count: 2}
	if err := DatatypeQuery(DatatypeIOV, &a); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("query of 2 iov entries of 1: %v", err)
	}
	DatatypeDestroy(dt)
	if err := DatatypeQuery(dt, &DatatypeAttr{FieldMask: DatatypeAttrFieldPackedSize}); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("query of a destroyed datatype: %v", err)
	}
	if _, err := dtFromParam(nil, new(RequestParam).SetDatatype(dt), false); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("a destroyed datatype: %v", err)
	}
	if _, err := dtFromParam([]byte("x"), new(RequestParam).SetIOV(nil), false); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("an iov datatype with a buffer: %v", err)
	}
	if _, err := dtFromParam(nil, new(RequestParam).SetDatatype(DatatypeClassStrided), false); !errors.Is(err, ucs.ErrUnsupported) {
		t.Errorf("a strided datatype: %v", err)
	}
}

// TestRMAIOV puts and gets iov data over each path: the peer's memory
// mapped here, a lane (bcopy and zero-copy sizes), software.
func TestRMAIOV(t *testing.T) {
	for _, tls := range []string{"sm", "tcp,self"} {
		for _, software := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/software=%v", tls, software), func(t *testing.T) {
				c := newContextCfg(t, FeatureRMA, "TLS", tls)
				a, b := newWorker(t, c), newWorker(t, c)
				p := newPair(t, c, a, b, 1<<20)
				stop, done := serve(b)
				defer func() { close(stop); <-done }()
				if software {
					forceSoftware(p.rkey)
				}
				for _, n := range []int{10, 5000, 300 << 10} {
					src := pattern(n, n)
					iov := [][]byte{src[:n/3], nil, src[n/3 : n/2], src[n/2:]}
					r, err := p.ep.PutNBX(nil, p.base+64, p.rkey, new(RequestParam).SetIOV(iov))
					if err := waitDone(r, err); err != nil {
						t.Fatalf("iov put of %d bytes: %v", n, err)
					}
					if err := p.ep.Flush(); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(p.mem[64:64+n], src) {
						t.Fatalf("iov put of %d bytes: data differs", n)
					}
					got := make([]byte, n)
					giov := [][]byte{got[:n/4], got[n/4 : n/2], {}, got[n/2:]}
					r, err = p.ep.GetNBX(nil, p.base+64, p.rkey, new(RequestParam).SetIOV(giov))
					if err := waitDone(r, err); err != nil {
						t.Fatalf("iov get of %d bytes: %v", n, err)
					}
					if !bytes.Equal(got, src) {
						t.Fatalf("iov get of %d bytes: data differs", n)
					}
				}
				if _, err := p.ep.PutNBX(nil, p.base, p.rkey, new(RequestParam).SetDatatype(DatatypeClassGeneric)); err == nil {
					t.Error("a generic put was accepted")
				}
			})
		}
	}
}

// serve progresses w on a goroutine until stop is closed (done is closed
// then).
func serve(w *Worker) (stop, done chan struct{}) {
	stop, done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				if w.Progress() == 0 {
					w.Idle()
				}
			}
		}
	}()
	return stop, done
}

// TestAMDatatypes sends active messages of iov and generic data with every
// protocol, and receives rendezvous data into iov and generic buffers.
func TestAMDatatypes(t *testing.T) {
	var gen strided2
	dt, err := DatatypeCreateGeneric(gen.ops(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer DatatypeDestroy(dt)
	for _, tr := range amTransports {
		t.Run(tr.name, func(t *testing.T) {
			e := newAMEnv(t, tr.tls, tr.self)
			var got []amMsg
			if err := e.b.SetAMRecvHandler(new(AMHandlerParam).SetID(7).SetCB(recorder(&got))); err != nil {
				t.Fatal(err)
			}
			for _, n := range []int{5, 5000, 30000, 200 << 10} {
				for _, kind := range []string{"iov", "generic"} {
					want := pattern(n, n+len(kind))
					sp := new(RequestParam)
					switch kind {
					case "iov":
						sp.SetIOV([][]byte{want[:n/2], nil, want[n/2:]})
					case "generic":
						sb := make([]byte, 2*n)
						for i, v := range want {
							sb[2*i] = v
						}
						sp.SetDatatype(dt).SetGenericBuffer(sb, n)
					}
					got = got[:0]
					r, err := e.ab.AMSendNBX(7, []byte("h"), nil, sp)
					if err != nil {
						t.Fatalf("%s AM of %d bytes: %v", kind, n, err)
					}
					e.wait(t, "the message", func() bool { return len(got) == 1 })
					m := got[0]
					data := m.data
					if m.desc != nil {
						// Rendezvous: receive into the other kind.
						data = make([]byte, n)
						rp := new(RequestParam)
						var rb []byte
						if kind == "generic" {
							rp.SetIOV([][]byte{data[:3], data[3:]})
						} else {
							rb = make([]byte, 2*n)
							rp.SetDatatype(dt).SetGenericBuffer(rb, n)
						}
						rr, err := e.b.AMRecvDataNBX(m.desc, nil, rp)
						e.waitReq(t, "receive data", rr, err)
						if rb != nil {
							for i := range data {
								data[i] = rb[2*i]
							}
						}
					}
					e.waitReq(t, "send", r, nil)
					if !bytes.Equal(data, want) || string(m.header) != "h" {
						t.Fatalf("%s AM of %d bytes: data differs", kind, n)
					}
				}
			}
			if gen.started != gen.finished {
				t.Errorf("generic states: %d started, %d finished", gen.started, gen.finished)
			}
		})
	}
}
