package uctest

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"testing"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// pendingMessages is the number of active messages of the pending case,
// and pendingMsgSize their size where the transport has AM bcopy: 32 MiB
// in all, more than the send and receive queues of every transport hold.
const (
	pendingMessages = 4000
	pendingMsgSize  = 8 << 10
)

// testPending sends many active messages to the target's counting sink
// while the target does not progress, queues each message that finds no
// resources with PendingAdd, lets the target progress again, and checks
// that progress posts every queued message and each arrives exactly once.
func testPending(t *testing.T, e *env) {
	c := e.main
	var send func(seq uint64) ucs.Status
	switch {
	case e.claims(needAMBcopy) && e.attr.AM.MaxBcopy >= 8:
		n := min(e.attr.AM.MaxBcopy, pendingMsgSize)
		send = func(seq uint64) ucs.Status {
			_, st := c.ep.AMBcopy(amSink, func(dst []byte) int {
				binary.LittleEndian.PutUint64(dst, seq)
				return n
			}, 0)
			return st
		}
	case e.claims(needAMShort) && e.attr.AM.MaxShort >= 8:
		send = func(seq uint64) ucs.Status { return c.ep.AMShort(amSink, seq, nil) }
	default:
		t.Skip("skipped: transport claims neither AM short nor AM bcopy of 8 bytes")
	}
	e.call(t, c, "reset")
	e.call(t, c, "pause")
	paused := true
	defer func() {
		if paused {
			c.tgt.call("resume")
		}
	}()

	var queued, posted int
	var want uint64
	for i := range pendingMessages {
		seq := uint64(i)
		want += seq
		st := send(seq)
		for st == ucs.ErrNoResource {
			r := &uct.PendingReq{Func: func(r *uct.PendingReq) ucs.Status {
				st := send(seq)
				if st == ucs.OK {
					posted++
				} else if st != ucs.ErrNoResource {
					t.Errorf("pending send of message %d: %v", seq, st)
				}
				return st
			}}
			switch pst := c.ep.PendingAdd(r, 0); pst {
			case ucs.OK:
				queued++
				st = ucs.OK
			case ucs.ErrBusy:
				st = send(seq) // resources came back: retry now
			default:
				t.Fatalf("pending add of message %d: %v", seq, pst)
			}
		}
		if st != ucs.OK {
			t.Fatalf("send of message %d: %v", seq, st)
		}
	}
	e.call(t, c, "resume")
	paused = false
	e.waitUntil(t, fmt.Sprintf("progress posting %d pending messages (%d posted)", queued, posted), func() bool { return posted >= queued })
	var count, sum uint64
	e.waitUntil(t, fmt.Sprintf("target receiving %d messages", pendingMessages), func() bool {
		f := e.call(t, c, "stats")
		count, _ = strconv.ParseUint(f[0], 10, 64)
		sum, _ = strconv.ParseUint(f[1], 10, 64)
		return count >= pendingMessages
	})
	if count != pendingMessages || sum != want {
		t.Errorf("target received %d messages with sequence sum %d, want %d and %d", count, sum, pendingMessages, want)
	}
	if posted != queued {
		t.Errorf("%d requests were queued but %d posted", queued, posted)
	}
	if queued == 0 {
		t.Skipf("skipped: the transport took all %d messages without ErrNoResource; the pending queue was not exercised (all arrived)", pendingMessages)
	}
	t.Logf("%d of %d messages went through the pending queue", queued, pendingMessages)
}

// testKeepDesc checks, where the transport passes CBParamFlagDesc to AM
// handlers, that a handler may keep the data by returning InProgress: the
// data stays intact while more messages arrive, until ReleaseDesc.
func testKeepDesc(t *testing.T, e *env) {
	c := e.main
	ms := e.amMethods()
	if len(ms) == 0 {
		t.Skip("skipped: transport claims no active message")
	}
	m := ms[0]
	var kept []byte
	var keptFlags uint32
	got := false
	e.iface.SetAMHandler(amKeepReply, func(arg any, data []byte, flags uint32) ucs.Status {
		got, keptFlags = true, flags
		if flags&uct.CBParamFlagDesc != 0 {
			kept = data
			return ucs.InProgress
		}
		return ucs.OK
	}, nil, uct.CBFlagSync)
	defer e.iface.SetAMHandler(amKeepReply, e.record, amKeepReply, uct.CBFlagSync)

	n := min(capped(e.maxAM(m)), 64)
	first := pattern(n, 900)
	e.do(t, "AM to the keeping handler", e.amOp(c, m, amEchoKeep, first))
	e.waitUntil(t, "reply to the keeping handler", func() bool { return got })
	if keptFlags&uct.CBParamFlagDesc == 0 {
		t.Skipf("skipped: transport does not pass CBParamFlagDesc to AM handlers (flags %#x)", keptFlags)
	}
	if string(kept) != string(first) {
		t.Fatalf("kept data %s, want %s", brief(kept), brief(first))
	}
	// Enough traffic to reuse any buffer that was not really kept: a burst
	// of echoes, then their replies.
	const burst = 300
	for i := range burst {
		e.do(t, fmt.Sprintf("AM %s #%d", m, i), e.amOp(c, m, amEcho, pattern(n, uint64(901+i))))
	}
	for i := range burst {
		if got, want := e.takeReply(t, amEchoReply), pattern(n, uint64(901+i)); string(got) != string(want) {
			t.Fatalf("echo %d came back as %s, want %s", i, brief(got), brief(want))
		}
	}
	if i := firstDiff(kept, first); i >= 0 {
		t.Fatalf("kept descriptor changed at byte %d while more messages arrived: %s, want %s", i, brief(kept[i:]), brief(first[i:]))
	}
	e.iface.ReleaseDesc(kept)
	e.echo(t, c, m, pattern(n, 1300))
}

// amMethods returns the AM methods the transport claims.
func (e *env) amMethods() []method {
	var ms []method
	for _, m := range []method{short, bcopy, zcopy} {
		if e.claims(amNeed[m]) && (m != short || e.attr.AM.MaxShort >= 8) {
			ms = append(ms, m)
		}
	}
	return ms
}
