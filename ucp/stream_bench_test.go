package ucp

import (
	"fmt"
	"testing"
)

// The stream benchmarks run a sender and a receiver worker in this
// process, progressing both from the benchmark's goroutine, as the tag
// benchmarks do; -benchmem shows what a send and a receive allocate.

// BenchmarkStreamPingPong measures a round trip on the endpoints'
// streams: each side receives with a wait-all receive posted before the
// data comes.
func BenchmarkStreamPingPong(b *testing.B) {
	for _, tr := range tagTransports[1:3] {
		for _, n := range []int{8, 4096, 64 << 10, 1 << 20} {
			b.Run(fmt.Sprintf("%s/%d", tr.name, n), func(b *testing.B) {
				e := newStreamEnv(b, tr.sendTLS, tr.recvTLS, false)
				src, dst := make([]byte, n), make([]byte, n)
				wait := new(RequestParam).SetStreamRecvFlags(StreamRecvFlagWaitAll)
				b.SetBytes(int64(n))
				b.ReportAllocs()
				for b.Loop() {
					e.streamRoundTrip(b, src, dst, wait)
				}
			})
		}
	}
}

// streamRoundTrip sends src on the stream from a to b and back, each
// received into dst by a receive with param posted before the data comes.
func (e *tagEnv) streamRoundTrip(tb testing.TB, src, dst []byte, param *RequestParam) {
	rb, _, err := e.ba.StreamRecvNBX(dst, param)
	e.check(tb, err)
	sa, err := e.ab.StreamSendNBX(src, nil)
	e.check(tb, err)
	e.finish(tb, rb, nil)
	ra, _, err := e.ab.StreamRecvNBX(dst, param)
	e.check(tb, err)
	sb, err := e.ba.StreamSendNBX(src, nil)
	e.check(tb, err)
	e.finish(tb, ra, nil)
	e.finish(tb, sa, nil)
	e.finish(tb, sb, nil)
}

// BenchmarkStreamUnexpected measures small sends received after they
// arrived: a receive that completes at once from the queued data, and one
// that takes the data where it lies (StreamRecvDataNB).
func BenchmarkStreamUnexpected(b *testing.B) {
	for _, tr := range tagTransports[1:3] {
		for _, zc := range []bool{false, true} {
			name := tr.name + "/copy"
			if zc {
				name = tr.name + "/recv_data"
			}
			b.Run(name, func(b *testing.B) {
				e := newStreamEnv(b, tr.sendTLS, tr.recvTLS, false)
				src, dst := make([]byte, 8), make([]byte, 8)
				b.ReportAllocs()
				for b.Loop() {
					r, err := e.ab.StreamSendNBX(src, nil)
					e.finish(b, r, err)
					for e.ba.strm.bytes < len(src) {
						e.progress()
					}
					if zc {
						d, err := e.ba.StreamRecvDataNB()
						e.check(b, err)
						e.ba.StreamDataRelease(d)
						continue
					}
					r, _, err = e.ba.StreamRecvNBX(dst, nil)
					e.finish(b, r, err)
				}
			})
		}
	}
}

// check fails the benchmark on an error.
func (e *tagEnv) check(b testing.TB, err error) {
	if err != nil {
		b.Fatal(err)
	}
}
