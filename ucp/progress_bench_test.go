package ucp

import "testing"

// BenchmarkProgressIdle measures a Progress call that finds nothing: what
// a receiver that waits for a message runs again and again, so that half
// of one is, on average, how late it sees a message that comes. The
// worker has an endpoint to a peer over each transport (its interfaces
// enabled as that endpoint's first messages enable them); with sm it also
// has the interface its endpoint did not choose, disabled (adaptive
// progress).
func BenchmarkProgressIdle(b *testing.B) {
	for _, tr := range tagTransports[1:3] {
		b.Run(tr.name, func(b *testing.B) {
			e := newTagEnv(b, tr.sendTLS, tr.recvTLS, false)
			// A message each way enables the interfaces that carry them.
			var buf [8]byte
			for _, p := range []struct {
				w  *Worker
				ep *Endpoint
			}{{e.b, e.ab}, {e.a, e.ba}} {
				r, err := p.w.TagRecvNBX(buf[:], 1, tagMaskFull, nil)
				if err != nil {
					b.Fatal(err)
				}
				s, err := p.ep.TagSendNBX(buf[:], 1, nil)
				if err != nil {
					b.Fatal(err)
				}
				e.wait(b, "the first message", func() bool { return r.IsCompleted() && (s == nil || s.IsCompleted()) })
				r.Free()
				if s != nil {
					s.Free()
				}
			}
			b.ReportAllocs()
			events := 0
			for b.Loop() {
				events += e.a.Progress()
			}
			if events != 0 {
				b.Logf("%d events in %d calls", events, b.N)
			}
		})
	}
}
