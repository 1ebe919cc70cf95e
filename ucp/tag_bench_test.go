package ucp

import (
	"fmt"
	"testing"
)

// The tag benchmarks run a sender and a receiver worker in this process,
// progressing both from the benchmark's goroutine; -benchmem shows that the
// eager paths allocate nothing.

// BenchmarkTagPingPong measures a round trip of a tagged message, received
// by a receive posted before it arrives (the expected path).
func BenchmarkTagPingPong(b *testing.B) {
	for _, tr := range tagTransports[1:3] {
		for _, n := range []int{8, 4096, 64 << 10, 1 << 20} {
			b.Run(fmt.Sprintf("%s/%d", tr.name, n), func(b *testing.B) {
				e := newTagEnv(b, tr.sendTLS, tr.recvTLS, false)
				src, dst := make([]byte, n), make([]byte, n)
				b.SetBytes(int64(n))
				b.ReportAllocs()
				for b.Loop() {
					e.tagRoundTrip(b, src, dst)
				}
			})
		}
	}
}

// tagRoundTrip sends src from a to b and back, each received into dst by
// a receive posted before the message comes.
func (e *tagEnv) tagRoundTrip(tb testing.TB, src, dst []byte) {
	rb, err := e.b.TagRecvNBX(dst, 1, tagMaskFull, nil)
	e.check(tb, err)
	sa, err := e.ab.TagSendNBX(src, 1, nil)
	e.check(tb, err)
	e.finish(tb, rb, nil)
	ra, err := e.a.TagRecvNBX(dst, 2, tagMaskFull, nil)
	e.check(tb, err)
	sb, err := e.ba.TagSendNBX(src, 2, nil)
	e.check(tb, err)
	e.finish(tb, ra, nil)
	e.finish(tb, sa, nil)
	e.finish(tb, sb, nil)
}

// BenchmarkTagStream measures small messages sent in a stream, received by
// receives posted after they arrived (the unexpected path).
func BenchmarkTagStream(b *testing.B) {
	for _, tr := range tagTransports[1:3] {
		b.Run(tr.name, func(b *testing.B) {
			e := newTagEnv(b, tr.sendTLS, tr.recvTLS, false)
			src, dst := make([]byte, 8), make([]byte, 8)
			var info TagRecvInfo
			param := new(RequestParam).SetRecvInfo(&info)
			b.ReportAllocs()
			for b.Loop() {
				r, err := e.ab.TagSendNBX(src, 1, nil)
				e.finish(b, r, err)
				r, err = e.b.TagRecvNBX(dst, 1, tagMaskFull, param)
				e.finish(b, r, err)
			}
		})
	}
}

// finish progresses until r (if any) completes and frees it, failing the
// benchmark on an error.
func (e *tagEnv) finish(b testing.TB, r *Request, err error) {
	if err != nil {
		b.Fatal(err)
	}
	if r == nil {
		return
	}
	for !r.IsCompleted() {
		e.progress()
	}
	if err := r.Status(); err != nil {
		b.Fatal(err)
	}
	r.Free()
}
