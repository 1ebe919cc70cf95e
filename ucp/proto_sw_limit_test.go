package ucp

import (
	"bytes"
	"strings"
	"testing"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// TestSwRefusalFlood feeds a worker a stream of software messages it must
// refuse, as a peer with the job key but a bug could send them: puts and
// atomics to unknown mappings, gets from unknown workers, malformed
// headers and wireups. Each is refused; the log says so a few times and
// then counts, instead of writing a line for each.
func TestSwRefusalFlood(t *testing.T) {
	var logs bytes.Buffer // the logger's lock orders the writes; read once they are done
	w := newWorker(t, newContextParams(t, new(Params).SetFeatures(FeatureRMA|FeatureAMO32|FeatureAMO64).SetLogger(ucs.NewLogger(&logs, "", ucs.LogWarn))))
	msg := func(h swHeader, payload []byte) []byte {
		b := make([]byte, swHeaderLen+len(payload))
		h.put(b)
		copy(b[swHeaderLen:], payload)
		return b
	}
	refused := []struct {
		id  uint8
		msg []byte
	}{
		{amSwPut, msg(swHeader{src: 7, token: 9, raddr: 4096}, []byte("payload"))},
		{amSwAtomicReq, msg(swHeader{op: uint8(uct.AtomicOpAdd), size: 8, src: 7, token: 9, raddr: 64, a: 1}, nil)},
		{amSwGetReq, msg(swHeader{src: 7, token: 9, raddr: 8, a: 8, reqID: 3}, nil)},
		{amSwPut, []byte("short")},
		{amSwWireup, msg(swHeader{src: 7}, []byte("not an address"))},
	}
	const rounds = 400
	for range rounds {
		for _, r := range refused {
			if st := w.swRecv(r.id, r.msg); st != ucs.OK {
				t.Fatalf("swRecv = %v", st)
			}
		}
	}
	n := rounds * len(refused)
	if got := w.sw.warn.Count(); got != uint64(n) {
		t.Errorf("%d refusals counted, want %d", got, n)
	}
	w.sw.warn.Flush()
	s := logs.String()
	if got := strings.Count(s, "\n"); got != swWarnBurst+1 {
		t.Errorf("%d lines logged for %d refused messages, want %d and a summary:\n%s", got, n, swWarnBurst, s)
	}
	if !strings.Contains(s, "1990 more warnings about peers' messages") {
		t.Errorf("the log has no summary of the refusals not logged:\n%s", s)
	}
}
