package tcp

import "time"

// Batches of small frames.
//
// Each write costs a system call, and over loopback (or any network fast
// enough) the kernel's work for a small frame, which it hands to the
// receiving socket within the sender's call, is most of what a small
// operation costs: a loop of 8-byte puts wrote one frame per 8 µs. When
// operations follow each other with no Progress call between them (a loop
// of puts or non-fetching atomics, a stream of active messages), nobody
// here waits for their frames, and the EP gathers them: a frame of at
// most maxBatchFrame bytes (not a flush request nor one whose completion
// someone waits for), posted while nothing else is queued and no Progress
// call runs, when the EP wrote last after the last start or end of a
// Progress call, is queued without a write, as are the small frames that
// follow it, up to UCX_TCP_TX_BATCH bytes. The batch goes out in one
// writev:
//
//   - at once when a frame that is not gathered follows it (a large one, a
//     flush request, a zero-copy frame, a reply), or when it would grow
//     beyond UCX_TCP_TX_BATCH;
//   - at the start and at the end of every Progress call: whoever waits for
//     a reply or a completion progresses (frames posted while a Progress
//     call runs, by its handlers or by other goroutines, are written at
//     once);
//   - by the poller (poller.go) once the batch waited UCX_TCP_PASSIVE_DELAY
//     with no Progress call: a process that puts and then computes has its
//     puts delivered within about the delay, as its peers' gets are
//     answered.
//
// A frame posted after a Progress call is written at once: a ping-pong,
// or an operation whose caller then waits, costs nothing more. The frames
// of a batch are operations issued: their order, their count for flushes
// and their completion (copied frames are complete when posted) do not
// change. UCX_TCP_TX_BATCH=0, or a PASSIVE_DELAY of 0, writes every frame
// at once.

// maxBatchFrame is the largest frame an EP gathers: above it the system
// call is a small part of the frame's cost.
const maxBatchFrame = 1024

// gathers reports whether f, posted when the EP's queue is empty
// (e.batched false) or holds only a batch (e.batched), joins the batch
// instead of being written; e.mu is held and f is not counted in
// e.queued yet.
func (e *EP) gathers(f *txFrame) bool {
	i := e.iface
	if f.size > maxBatchFrame || f.comp != nil || f.buf[0] == frameFlush || e.queued+f.size > i.cfg.txBatch {
		return false
	}
	if e.batched {
		return true
	}
	// The EP's last write came after the last start or end of a Progress
	// call (lastWrite holds progSeq+1 at that write; 0 before it wrote),
	// and no Progress call runs: the frames that handlers post during a
	// call answer the peer (a rendezvous reply, an acknowledgement), and
	// the peer waits for them while the call may last (it reads a large
	// put). Gathered, they stalled tcp tag_bw 1 MiB from 5.4 to 4.0 GB/s.
	seq := i.progSeq.Load()
	return seq&1 == 0 && e.lastWrite == seq+1 && i.cfg.passiveDelay > 0
}

// startBatch records that the EP holds a batch; called without e.mu. It
// wakes the poller when the poller waits on the sockets with no batch to
// deliver, so that the batch waits at most about the delay.
func (i *Iface) startBatch(e *EP) {
	if !e.batchListed.CompareAndSwap(false, true) {
		return
	}
	if !i.batchEPs.Add(e) {
		return
	}
	// A poller that reads the list before the time is stored writes the
	// batch early, which is harmless.
	i.batchSince.Store(time.Now().UnixNano())
	if i.pollerBlocked.Load() {
		i.wakePoller()
	}
}

// writeBatches writes the batches of the EPs that hold one; with none it
// costs one atomic load.
func (i *Iface) writeBatches() {
	i.batchEPs.Take(func(e *EP) {
		e.batchListed.Store(false)
		e.flushTx()
	})
}

// batchDue returns how long the oldest batch may still wait for Progress
// before the poller writes it (at most 0: now), and false when no EP holds
// a batch.
func (i *Iface) batchDue(now time.Time) (time.Duration, bool) {
	if i.batchEPs.Len() == 0 {
		return 0, false
	}
	return i.cfg.passiveDelay - now.Sub(time.Unix(0, i.batchSince.Load())), true
}
