package tcp

import (
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// TestBatch posts small active messages with no Progress call of the
// sender between them, then does what should send the batch (or nothing,
// leaving it to the poller), and checks that the receiver, which alone
// progresses, gets every message in order, and that the sender gathered
// them into few writes, or wrote each at once where batching is off. With
// a passive delay of 10s, a batch that arrives sooner was sent by the end
// step, not by the poller.
func TestBatch(t *testing.T) {
	const n = 200
	tests := []struct {
		name     string
		settings []string
		end      func(t *testing.T, a *Iface, ep *EP) int // the messages it sends
		batched  bool
	}{
		{"poller", nil, nil, true},
		{"progress", []string{"PASSIVE_DELAY=10s"}, func(t *testing.T, a *Iface, ep *EP) int {
			a.Progress()
			return 0
		}, true},
		{"flush", []string{"PASSIVE_DELAY=10s"}, func(t *testing.T, a *Iface, ep *EP) int {
			if st := ep.Flush(0, nil); st != ucs.OK {
				t.Errorf("flush after active messages alone: %v, want OK", st)
			}
			return 0
		}, true},
		{"destroy", []string{"PASSIVE_DELAY=10s"}, func(t *testing.T, a *Iface, ep *EP) int {
			ep.Destroy()
			return 0
		}, true},
		{"large frame", []string{"PASSIVE_DELAY=10s"}, func(t *testing.T, a *Iface, ep *EP) int {
			_, st := ep.AMBcopy(3, func(b []byte) int {
				binary.LittleEndian.PutUint64(b, n)
				return 2 * maxBatchFrame
			}, 0)
			if st != ucs.OK {
				t.Fatalf("AMBcopy: %v", st)
			}
			return 1
		}, true},
		{"batch full", []string{"PASSIVE_DELAY=10s", "TX_BATCH=512"}, func(t *testing.T, a *Iface, ep *EP) int {
			a.Progress() // the last, partial batch
			return 0
		}, true},
		{"off", []string{"TX_BATCH=0"}, nil, false},
		{"no passive delay", []string{"PASSIVE_DELAY=0"}, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			md := testMD(t)
			a, b := openIface(t, md, nil, tt.settings...), openIface(t, md, nil)
			var (
				mu  sync.Mutex
				got []uint64
			)
			b.SetAMHandler(3, func(_ any, data []byte, _ uint32) ucs.Status {
				mu.Lock()
				got = append(got, binary.LittleEndian.Uint64(data))
				mu.Unlock()
				return ucs.OK
			}, nil, uct.CBFlagSync)
			ep := connect(t, a, b)
			if st := flush(t, ep, a, b); st != ucs.OK { // connected, and a progressed last
				t.Fatal(st)
			}
			start, wrote := time.Now(), ep.wrote.Load()
			for k := range n {
				if st := ep.AMShort(3, uint64(k), nil); st != ucs.OK {
					t.Fatalf("AMShort %d: %v", k, st)
				}
			}
			writes := ep.wrote.Load() - wrote
			want := n
			if tt.end != nil {
				want += tt.end(t, a, ep)
			}
			progressUntil(t, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(got) >= want
			}, b)
			// The receiver's Close waits for the sender's goodbye, which
			// the sender's poller would read only after the delay.
			t.Cleanup(func() {
				stop := progressLoop(a)
				b.Close()
				stop()
			})
			if tt.end != nil && tt.batched && time.Since(start) >= 10*time.Second {
				t.Error("the batch came after the passive delay: the end step did not send it, the poller did")
			}
			mu.Lock()
			defer mu.Unlock()
			for k, v := range got {
				if v != uint64(k) {
					t.Fatalf("message %d carries %d: out of order", k, v)
				}
			}
			if len(got) != want {
				t.Errorf("%d messages, want %d", len(got), want)
			}
			switch {
			case tt.batched && writes > n/10:
				t.Errorf("%d writes for %d small messages posted back to back: not batched", writes, n)
			case !tt.batched && writes != n:
				t.Errorf("%d writes for %d messages with batching off, want one each", writes, n)
			}
		})
	}
}
