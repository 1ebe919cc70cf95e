package ucp

import (
	"math/rand/v2"
	"testing"
)

// matchOp is a step of a tag-matching script: a receive posted (post), a
// message arrived (msg), or a receive canceled (cancel, by its post
// number).
type matchOp struct {
	op        byte // 'p', 'm' or 'c'
	tag, mask uint64
	k         int // 'c': the receive, in post order
}

// matchModel is what tagMatch must do: a message goes to the first posted
// receive that is still expected and accepts it.
type matchModel struct {
	tags, masks []uint64
	expected    []bool
}

func (md *matchModel) post(tag, mask uint64) int {
	md.tags, md.masks, md.expected = append(md.tags, tag), append(md.masks, mask), append(md.expected, true)
	return len(md.tags) - 1
}

func (md *matchModel) match(tag uint64) int {
	for k, ok := range md.expected {
		if ok && tagMatches(tag, md.tags[k], md.masks[k]) {
			md.expected[k] = false
			return k
		}
	}
	return -1
}

func (md *matchModel) cancel(k int) bool {
	was := md.expected[k]
	md.expected[k] = false
	return was
}

// runMatch runs ops on a tagMatch with senderMask and on the model, and
// fails at the first step where they differ, or where the counts of the
// tagMatch do not add up.
func runMatch(t *testing.T, senderMask uint64, ops []matchOp) {
	t.Helper()
	m := &tagMatch{senderMask: senderMask}
	var md matchModel
	var reqs []*Request
	for i, o := range ops {
		switch o.op {
		case 'p':
			r := &Request{}
			r.tr.tag, r.tr.mask = o.tag, o.mask
			reqs = append(reqs, r)
			md.post(o.tag, o.mask)
			m.post(r)
		case 'm':
			want := md.match(o.tag)
			got := m.match(o.tag)
			gotK := -1
			for k, r := range reqs {
				if r == got {
					gotK = k
				}
			}
			if gotK != want {
				t.Fatalf("step %d: message %#x went to receive %d, want %d", i, o.tag, gotK, want)
			}
			if got != nil && got.tr.where != notPosted {
				t.Fatalf("step %d: the matched receive is still posted (%d)", i, got.tr.where)
			}
		case 'c':
			if got, want := m.unpost(reqs[o.k]), md.cancel(o.k); got != want {
				t.Fatalf("step %d: unpost of receive %d: %v, want %v", i, o.k, got, want)
			}
		}
		n := 0
		for _, ok := range md.expected {
			if ok {
				n++
			}
		}
		exp := m.expected()
		if m.nExp != n || len(exp) != n {
			t.Fatalf("step %d: %d expected receives (%d listed), want %d", i, m.nExp, len(exp), n)
		}
		if m.solo != nil && n != 1 {
			t.Fatalf("step %d: a solo receive beside %d others", i, n-1)
		}
	}
}

// TestTagMatchOrder checks the expected queues against the model (the
// first posted receive that accepts a message takes it), through the
// changes of the solo receive: alone, moved to its queue by a second one,
// canceled, and the last of a queue.
func TestTagMatchOrder(t *testing.T) {
	const sm = 0xff00000000000000
	const me = 0x0500000000000000
	p := func(tag, mask uint64) matchOp { return matchOp{op: 'p', tag: tag, mask: mask} }
	msg := func(tag uint64) matchOp { return matchOp{op: 'm', tag: tag} }
	cancel := func(k int) matchOp { return matchOp{op: 'c', k: k} }
	for _, tc := range []struct {
		name string
		ops  []matchOp
	}{
		{"solo exact", []matchOp{p(7, tagMaskFull), msg(8), msg(7), msg(7)}},
		{"solo wildcard", []matchOp{p(0, 0), msg(8), msg(9)}},
		{"solo sender", []matchOp{p(me, sm), msg(me | 3), p(me, sm), msg(0x0600000000000003), msg(me | 4)}},
		{"solo canceled", []matchOp{p(7, tagMaskFull), cancel(0), cancel(0), msg(7), p(7, tagMaskFull), msg(7)}},
		{"second moves solo", []matchOp{p(7, tagMaskFull), p(7, tagMaskFull), msg(7), msg(7), msg(7)}},
		{"wildcard before exact", []matchOp{p(0, 0), p(7, tagMaskFull), msg(7), msg(7)}},
		{"exact before wildcard", []matchOp{p(7, tagMaskFull), p(0, 0), msg(8), msg(7)}},
		{"last of a queue, then solo", []matchOp{p(7, tagMaskFull), p(8, tagMaskFull), msg(7), p(9, tagMaskFull), msg(9), msg(8)}},
		{"cancel the moved solo", []matchOp{p(7, tagMaskFull), p(0, 0), cancel(0), msg(7), msg(7)}},
		{"cancel matched", []matchOp{p(7, tagMaskFull), msg(7), cancel(0)}},
		{"mixed", []matchOp{p(me|1, tagMaskFull), p(0, 0), p(me, sm), p(me|1, tagMaskFull),
			msg(me | 1), msg(me | 1), msg(me | 1), msg(me | 1), msg(me | 1)}},
	} {
		t.Run(tc.name, func(t *testing.T) { runMatch(t, sm, tc.ops) })
	}
	// Random scripts over few tags, so that receives and messages meet.
	rng := rand.New(rand.NewPCG(1, 2))
	for run := range 200 {
		var ops []matchOp
		posted := 0
		masks := []uint64{tagMaskFull, tagMaskFull, sm, 0}
		for range 40 {
			tag := uint64(rng.IntN(2))<<56 | uint64(rng.IntN(3))
			switch x := rng.IntN(10); {
			case x < 4:
				ops = append(ops, p(tag, masks[rng.IntN(len(masks))]))
				posted++
			case x < 9:
				ops = append(ops, msg(tag))
			case posted > 0:
				ops = append(ops, cancel(rng.IntN(posted)))
			}
		}
		t.Run("random", func(t *testing.T) {
			t.Logf("run %d", run)
			runMatch(t, sm, ops)
		})
	}
}
