package ucp

import (
	"bytes"
	"errors"
	"testing"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
)

// mapAt maps size bytes on e's receiver and returns them with a key for
// them unpacked on e.ab.
func mapAt(t *testing.T, e *tagEnv, size int) ([]byte, *Rkey, uint64) {
	t.Helper()
	m, err := e.cb.MemMap(new(MemMapParams).SetLength(size).SetFlags(MemMapAllocate))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.cb.MemUnmap(m) })
	packed, err := e.cb.RkeyPack(m)
	if err != nil {
		t.Fatal(err)
	}
	rk, err := e.ab.RkeyUnpack(packed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rk.Destroy)
	return unsafe.Slice((*byte)(m.Address()), size), rk, uint64(uintptr(m.Address()))
}

// TestEPFlushNB flushes an endpoint with puts (by the transport, or in
// software, answered by the target) and stream sends outstanding: the
// request completes, its callback runs once, and then everything issued
// before it is at the target.
func TestEPFlushNB(t *testing.T) {
	for _, tr := range tagTransports[1:3] {
		for _, sw := range []bool{false, true} {
			name := tr.name + "/hw"
			if sw {
				name = tr.name + "/sw"
			}
			t.Run(name, func(t *testing.T) {
				e := newStreamEnv(t, tr.sendTLS, tr.recvTLS, false)
				const size = 1 << 20
				mem, rk, base := mapAt(t, e, size)
				if sw {
					forceSoftware(rk)
				}
				data := streamBytes(0, size)
				var puts []*Request
				for off := 0; off < size; off += 64 << 10 {
					r, err := e.ab.PutNBX(data[off:off+64<<10], base+uint64(off), rk, nil)
					if err != nil {
						t.Fatal(err)
					}
					if r != nil {
						puts = append(puts, r)
					}
				}
				// Software messages wait for room by progressing their own
				// worker only: with the receiver progressed by this
				// goroutine too, a stream filling the FIFO would stall
				// them, so the stream goes with the transport's puts.
				var sr *Request
				if !sw {
					var err error
					sr, err = e.ab.StreamSendNBX(data, nil)
					if err != nil {
						t.Fatal(err)
					}
				}
				calls := 0
				var status error
				fr, err := e.ab.EPFlushNBX(new(RequestParam).SetCallback(func(_ *Request, err error, _ any) {
					calls++
					status = err
				}))
				if err != nil {
					t.Fatal(err)
				}
				var got []byte
				if !sw {
					got = streamRecvAll(t, e, e.ba, size, size)
				}
				if fr == nil && !sw && tr.name == "tcp" {
					// (Over shared memory the stream may lie whole in the
					// peer's FIFO already: delivered, nothing to wait for.)
					t.Fatal("flush with a 1 MiB stream outstanding over tcp completed at once")
				}
				if fr != nil {
					e.wait(t, "flush", fr.IsCompleted)
					if err := fr.Status(); err != nil || calls != 1 || status != nil {
						t.Fatalf("flush: %v, callback %d times with %v", err, calls, status)
					}
					fr.Free()
				}
				if sr != nil {
					puts = append(puts, sr)
				}
				for _, r := range puts {
					if r != nil && !r.IsCompleted() {
						t.Fatalf("%s not complete after the flush", r.Query().DebugString)
					}
					if r != nil {
						r.Free()
					}
				}
				if !bytes.Equal(mem, data) {
					t.Fatalf("put data differs at %d after the flush", firstDiff(mem, data))
				}
				if !sw {
					checkStream(t, got, 0)
				}
				// Nothing outstanding: done at once, or a completed
				// request under OpAttrFlagNoImmCmpl.
				if r, err := e.ab.EPFlushNBX(nil); r != nil || err != nil {
					t.Fatalf("idle flush: %v, %v; want nil, nil", r, err)
				}
				calls = 0
				r, err := e.ab.EPFlushNB(0, nil)
				if r != nil || err != nil {
					t.Fatalf("idle old-style flush: %v, %v", r, err)
				}
				r, err = e.ab.EPFlushNBX(new(RequestParam).SetCallback(func(*Request, error, any) { calls++ }).SetOpAttrFlags(OpAttrFlagNoImmCmpl))
				if err != nil || r == nil || !r.IsCompleted() || calls != 1 {
					t.Fatalf("idle flush with NoImmCmpl: %v, %v, callback %d times", r, err, calls)
				}
				r.Free()
			})
		}
	}
}

// TestEPCloseNB closes endpoints with operations outstanding: in flush
// mode they complete and their data arrives before the endpoint closes;
// in force mode they end with ucs.ErrCanceled at once.
func TestEPCloseNB(t *testing.T) {
	cases := []struct {
		name  string
		param *RequestParam
		force bool
	}{
		{"flush", nil, false},
		{"force", new(RequestParam).SetEPCloseFlags(EPCloseFlagForce), true},
	}
	for _, tr := range tagTransports[1:3] {
		for _, tc := range cases {
			t.Run(tr.name+"/"+tc.name, func(t *testing.T) {
				e := newStreamEnv(t, tr.sendTLS, tr.recvTLS, false)
				const size = 4 << 20
				data := streamBytes(0, size)
				sends := make([]*Request, 0, 8)
				for range cap(sends) {
					r, err := e.ab.StreamSendNBX(data, nil)
					if err != nil {
						t.Fatal(err)
					}
					sends = append(sends, r)
				}
				// A receive of ab's own waits for data that never comes.
				rr, _, err := e.ab.StreamRecvNBX(make([]byte, 10), nil)
				if err != nil || rr == nil {
					t.Fatal(rr, err)
				}
				var open []*Request
				for _, r := range sends {
					if r != nil && !r.IsCompleted() {
						open = append(open, r)
					}
				}
				if len(open) == 0 {
					t.Fatal("no send outstanding before the close")
				}
				cr, err := e.ab.EPCloseNBX(tc.param)
				if err != nil {
					t.Fatal(err)
				}
				if again, err := e.ab.EPCloseNBX(nil); again != nil || err != nil {
					t.Fatalf("second close: %v, %v; want nil, nil", again, err)
				}
				if tc.force {
					if cr != nil {
						t.Fatalf("force close returned a request")
					}
					// Each ends, none hangs: the receive is canceled; a
					// send ends canceled, or succeeds when the transport
					// had taken it whole before the close (how many did
					// depends on the schedule, over tcp all of them may).
					for _, r := range append(open, rr) {
						e.wait(t, "canceled operation", r.IsCompleted)
					}
					if !errors.Is(rr.Status(), ucs.ErrCanceled) {
						t.Fatalf("force close: receive %v, want ErrCanceled", rr.Status())
					}
					for i, r := range open {
						if err := r.Status(); err != nil && !errors.Is(err, ucs.ErrCanceled) {
							t.Errorf("force close: send %d ended with %v, want success or ErrCanceled", i, err)
						}
					}
				} else {
					if cr == nil {
						t.Fatalf("flush close with 32 MiB outstanding completed at once")
					}
					for range sends {
						checkStream(t, streamRecvAll(t, e, e.ba, size, size), 0)
					}
					e.wait(t, "close", cr.IsCompleted)
					if err := cr.Status(); err != nil {
						t.Fatalf("flush close: %v", err)
					}
					cr.Free()
					for _, r := range sends {
						if r != nil && r.Status() != nil {
							t.Fatalf("send on a flush-closed endpoint: %v", r.Status())
						}
					}
					if err := rr.Status(); !errors.Is(err, ucs.ErrCanceled) {
						t.Fatalf("pending receive after the close: %v, want ErrCanceled", err)
					}
				}
				if _, err := e.ab.StreamSendNBX(data[:1], nil); err == nil {
					t.Fatal("send on a closed endpoint succeeded")
				}
				if _, err := e.ab.EPFlushNBX(nil); err == nil {
					t.Fatal("flush of a closed endpoint succeeded")
				}
				if _, err := e.ba.EPCloseNB(7); !errors.Is(err, ucs.ErrInvalidParam) {
					t.Fatalf("close mode 7: %v, want ErrInvalidParam", err)
				}
				if _, err := e.ba.EPCloseNBX(new(RequestParam).SetFlags(1 << 5)); !errors.Is(err, ucs.ErrInvalidParam) {
					t.Fatalf("close flags 1<<5: %v, want ErrInvalidParam", err)
				}
			})
		}
	}
}
