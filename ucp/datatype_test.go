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
		{DatatypeSGL, &DTLocalSGL{Lengths: []int{5, 0, 7}}, 3, 12},
		{DatatypeSGL, &DTLocalSGL{Lengths: []int{5, 0, 7}}, 2, 5},
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
	a.Buffer = &DTLocalSGL{Lengths: []int{1}}
	if err := DatatypeQuery(DatatypeSGL, &a); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("query of 2 SGL elements of 1: %v", err)
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
			got := e.record(t, 7, 0)
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
					*got = (*got)[:0]
					r, err := e.ab.AMSendNBX(7, []byte("h"), nil, sp)
					if err != nil {
						t.Fatalf("%s AM of %d bytes: %v", kind, n, err)
					}
					e.wait(t, "the message", func() bool { return len(*got) == 1 })
					m := (*got)[0]
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

// checkedDT is a generic datatype over a []byte, packed as it is, that
// records its misuse: a routine called on a finished state or on a state
// of the other direction, a state finished twice, an offset out of range,
// Unpack called again after it failed. Unpack fails, with
// ucs.ErrUnsupported, for the piece that holds offset failAt (-1: never);
// Pack writes at most a multiple of chunk bytes (0: all it is offered).
type checkedDT struct {
	failAt, chunk     int
	started, finished int
	bad               []string
}

type checkedState struct {
	buf                      []byte
	count                    int
	unpack, finished, failed bool
}

func (c *checkedDT) badf(f string, a ...any) { c.bad = append(c.bad, fmt.Sprintf(f, a...)) }

func (c *checkedDT) ops() *GenericDatatypeOps {
	start := func(unpack bool) func(_ any, buffer any, count int) any {
		return func(_ any, buffer any, count int) any {
			c.started++
			return &checkedState{buf: buffer.([]byte), count: count, unpack: unpack}
		}
	}
	return &GenericDatatypeOps{
		StartPack:   start(false),
		StartUnpack: start(true),
		PackedSize:  func(st any) int { return st.(*checkedState).count },
		Pack: func(st any, off int, dst []byte) int {
			s := st.(*checkedState)
			if s.finished || s.unpack || off < 0 || off >= s.count {
				c.badf("pack at %d of %d (finished %v, unpack state %v)", off, s.count, s.finished, s.unpack)
				return 0
			}
			if c.chunk > 0 && len(dst) > c.chunk {
				dst = dst[:len(dst)/c.chunk*c.chunk]
			}
			return copy(dst, s.buf[off:s.count])
		},
		Unpack: func(st any, off int, src []byte) error {
			s := st.(*checkedState)
			if s.finished || !s.unpack || s.failed || off < 0 || off+len(src) > s.count {
				c.badf("unpack of %d at %d of %d (finished %v, pack state %v, failed before %v)", len(src), off, s.count, s.finished, !s.unpack, s.failed)
				return ucs.ErrMessageTruncated
			}
			if off <= c.failAt && c.failAt < off+len(src) {
				s.failed = true
				return ucs.ErrUnsupported
			}
			copy(s.buf[off:], src)
			return nil
		},
		Finish: func(st any) {
			s := st.(*checkedState)
			if s.finished {
				c.badf("state finished twice")
			}
			s.finished = true
			c.finished++
		},
	}
}

// check fails the test on misuse, or states not finished exactly once.
// overAM runs body over each active-message transport, with an env whose
// handler 7 records the messages, and checks c's record of misuse after
// it.
func (c *checkedDT) overAM(t *testing.T, body func(t *testing.T, e *amEnv, got *[]amMsg)) {
	for _, tr := range amTransports {
		t.Run("am/"+tr.name, func(t *testing.T) {
			e := newAMEnv(t, tr.tls, tr.self)
			c.bad = nil
			body(t, e, e.record(t, 7, 0))
			c.check(t)
		})
	}
}

func (c *checkedDT) check(t *testing.T) {
	t.Helper()
	if c.started != c.finished || len(c.bad) > 0 {
		t.Errorf("generic states: %d started, %d finished; misuse: %v", c.started, c.finished, c.bad[:min(len(c.bad), 5)])
	}
}

// TestGenericUnpackError receives tag, stream and active-message
// (rendezvous) data of each protocol into a generic datatype whose Unpack
// fails on its first piece: the receive ends with Unpack's error, Unpack
// gets no more pieces after it failed, and the state is finished once.
func TestGenericUnpackError(t *testing.T) {
	cd := &checkedDT{failAt: 3}
	dt, err := DatatypeCreateGeneric(cd.ops(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer DatatypeDestroy(dt)
	recvParam := func(buf []byte) *RequestParam {
		return new(RequestParam).SetDatatype(dt).SetGenericBuffer(buf, len(buf))
	}
	for _, tr := range tagTransports[:3] {
		t.Run(tr.name, func(t *testing.T) {
			e := newStreamEnv(t, tr.sendTLS, tr.recvTLS, tr.self)
			cd.bad = nil
			for _, n := range protoSizes[1:] {
				// Tag: the receive posted before and after the message came.
				for _, early := range []bool{true, false} {
					var rr *Request
					if early {
						if rr, err = e.b.TagRecvNBX(nil, 5, tagMaskFull, recvParam(make([]byte, n))); err != nil {
							t.Fatal(err)
						}
					}
					sr, serr := e.ab.TagSendNBX(pattern(n, n), 5, nil)
					if !early {
						for i := 0; i < 20; i++ {
							e.progress()
						}
						rr, err = e.b.TagRecvNBX(nil, 5, tagMaskFull, recvParam(make([]byte, n)))
					}
					if err := e.done(t, "tag recv", rr, err); !errors.Is(err, ucs.ErrUnsupported) {
						t.Errorf("tag, %d bytes, receive posted first %v: %v, want Unpack's error", n, early, err)
					}
					e.done(t, "tag send", sr, serr)
				}
				// Stream: the failed receive takes its n bytes all the same.
				sr, serr := e.ab.StreamSendNBX(pattern(n, n), nil)
				rr, _, err := e.ba.StreamRecvNBX(nil, recvParam(make([]byte, n)).SetStreamRecvFlags(StreamRecvFlagWaitAll))
				if err := e.done(t, "stream recv", rr, err); !errors.Is(err, ucs.ErrUnsupported) {
					t.Errorf("stream, %d bytes: %v, want Unpack's error", n, err)
				}
				if err := e.done(t, "stream send", sr, serr); err != nil {
					t.Fatal(err)
				}
			}
			cd.check(t)
		})
	}
	cd.overAM(t, func(t *testing.T, e *amEnv, got *[]amMsg) {
		for _, n := range []int{8, 5000, 200 << 10} {
			*got = (*got)[:0]
			r, err := e.ab.AMSendNBX(7, []byte("h"), pattern(n, n), new(RequestParam).SetAMSendFlags(AMSendFlagRNDV))
			if err != nil {
				t.Fatal(err)
			}
			e.wait(t, "the message", func() bool { return len(*got) == 1 })
			rr, err := e.b.AMRecvDataNBX((*got)[0].desc, nil, recvParam(make([]byte, n)))
			if rr != nil {
				e.wait(t, "receive data", rr.IsCompleted)
				err = rr.Status()
				rr.Free()
			}
			if !errors.Is(err, ucs.ErrUnsupported) {
				t.Errorf("%d bytes: %v, want Unpack's error", n, err)
			}
			if r != nil {
				e.wait(t, "send", r.IsCompleted)
				r.Free()
			}
		}
	})
}

// TestGenericShortPack sends tag, stream and active messages (eager and
// rendezvous) of a generic datatype whose Pack writes only whole 7-byte
// elements, less than it is offered: it is called again from where it
// stopped, and the receiver gets all the data.
func TestGenericShortPack(t *testing.T) {
	cd := &checkedDT{failAt: -1, chunk: 7}
	dt, err := DatatypeCreateGeneric(cd.ops(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer DatatypeDestroy(dt)
	sendParam := func(b []byte) *RequestParam { return new(RequestParam).SetDatatype(dt).SetGenericBuffer(b, len(b)) }
	sizes := []int{8, 5000, 30000, 200 << 10}
	for _, tr := range tagTransports[:3] {
		t.Run(tr.name, func(t *testing.T) {
			e := newStreamEnv(t, tr.sendTLS, tr.recvTLS, tr.self)
			cd.bad = nil
			for _, n := range sizes {
				want := pattern(n, n+1)
				got := make([]byte, n)
				rr, err := e.b.TagRecvNBX(got, 9, tagMaskFull, nil)
				if err != nil {
					t.Fatal(err)
				}
				sr, err := e.ab.TagSendNBX(nil, 9, sendParam(want))
				if err := e.done(t, "tag send", sr, err); err != nil {
					t.Fatal(err)
				}
				if err := e.done(t, "tag recv", rr, nil); err != nil || !bytes.Equal(got, want) {
					t.Fatalf("tag, %d bytes: %v, data differs at %d", n, err, firstDiff(got, want))
				}
				got = make([]byte, n)
				sr, serr := e.ab.StreamSendNBX(nil, sendParam(want))
				rr, _, err = e.ba.StreamRecvNBX(got, new(RequestParam).SetStreamRecvFlags(StreamRecvFlagWaitAll))
				if err := e.done(t, "stream recv", rr, err); err != nil || !bytes.Equal(got, want) {
					t.Fatalf("stream, %d bytes: %v, data differs at %d", n, err, firstDiff(got, want))
				}
				if err := e.done(t, "stream send", sr, serr); err != nil {
					t.Fatal(err)
				}
			}
			cd.check(t)
		})
	}
	cd.overAM(t, func(t *testing.T, e *amEnv, got *[]amMsg) {
		for _, n := range sizes {
			for _, fl := range []AMSendFlags{AMSendFlagEager, AMSendFlagRNDV} {
				*got = (*got)[:0]
				want := pattern(n, n)
				r, err := e.ab.AMSendNBX(7, []byte("h"), nil, sendParam(want).SetAMSendFlags(fl))
				if err != nil {
					t.Fatal(err)
				}
				e.wait(t, "the message", func() bool { return len(*got) == 1 })
				data := (*got)[0].data
				if (*got)[0].desc != nil {
					data = make([]byte, n)
					rr, err := e.b.AMRecvDataNBX((*got)[0].desc, data, nil)
					e.waitReq(t, "receive data", rr, err)
				}
				e.waitReq(t, "send", r, nil)
				if !bytes.Equal(data, want) {
					t.Fatalf("%d bytes, flags %#x: data differs at %d", n, fl, firstDiff(data, want))
				}
			}
		}
	})
}
