package ucp

// Tag matching, the way UCX does it.
//
// Expected receives (posted before their message came) wait in one of
// three queues (but for the only one, see tagMatch.solo): a hash table of queues by tag for receives that name every
// bit of the tag (mask all ones), a hash table by the sender bits of the
// tag (Params.TagSenderMask) for receives that name the sender but not the
// whole tag (MPI's any-tag from one source), and one wildcard queue for the
// rest. Each receive gets a sequence number when posted; a message matches
// the first receive of each queue that accepts it, and of those the one
// posted first. So the receives of one sender's messages are taken in the
// order they were posted, whatever mix of exact and wildcard receives the
// program uses (MPI's non-overtaking rule).
//
// Unexpected messages (arrived before a receive matched them) wait in
// arrival order on a list of all of them, and on a list per hash of their
// tag and per hash of their sender bits: a receive searches the shortest
// list its mask allows. A message keeps the transport's buffer where the
// transport lets it (uct.CBParamFlagDesc: tcp, self), so its data is copied
// once, into the receive's buffer; otherwise (shared memory) it is copied
// into a buffer of the worker's, and from there into the receive's.

const (
	tagHashBits = 10
	tagHashSize = 1 << tagHashBits
	// tagMaskFull is the mask of a receive that names the whole tag.
	tagMaskFull = ^uint64(0)
)

func tagHash(t uint64) uint32 { return uint32((t * 0x9e3779b97f4a7c15) >> (64 - tagHashBits)) }

func tagMatches(tag, want, mask uint64) bool { return (tag^want)&mask == 0 }

// reqQueue is a queue of expected receives, linked through their requests.
type reqQueue struct{ head, tail *Request }

func (q *reqQueue) push(r *Request) {
	r.tr.prev, r.tr.next = q.tail, nil
	if q.tail != nil {
		q.tail.tr.next = r
	} else {
		q.head = r
	}
	q.tail = r
}

func (q *reqQueue) remove(r *Request) {
	if r.tr.prev != nil {
		r.tr.prev.tr.next = r.tr.next
	} else {
		q.head = r.tr.next
	}
	if r.tr.next != nil {
		r.tr.next.tr.prev = r.tr.prev
	} else {
		q.tail = r.tr.prev
	}
	r.tr.prev, r.tr.next = nil, nil
}

// first returns the first receive of q that accepts tag.
func (q *reqQueue) first(tag uint64) *Request {
	for r := q.head; r != nil; r = r.tr.next {
		if tagMatches(tag, r.tr.tag, r.tr.mask) {
			return r
		}
	}
	return nil
}

// Lists an unexpected message is on.
const (
	listHash = iota // by tag
	listSrc         // by sender bits
	listAll         // all, in arrival order
	numLists
)

type msgLink struct{ next, prev *TagMessage }

// msgList is a list of unexpected messages, linked through link k.
type msgList struct{ head, tail *TagMessage }

func (l *msgList) push(m *TagMessage, k int) {
	m.links[k] = msgLink{prev: l.tail}
	if l.tail != nil {
		l.tail.links[k].next = m
	} else {
		l.head = m
	}
	l.tail = m
}

func (l *msgList) remove(m *TagMessage, k int) {
	lk := &m.links[k]
	if lk.prev != nil {
		lk.prev.links[k].next = lk.next
	} else {
		l.head = lk.next
	}
	if lk.next != nil {
		lk.next.links[k].prev = lk.prev
	} else {
		l.tail = lk.prev
	}
	*lk = msgLink{}
}

// Where an expected receive waits (tagRecvState.where).
const (
	notPosted = iota // not posted, matched or canceled already, or tagMatch.solo
	inHash           // expHash, by its tag
	inSrc            // expSrc, by its sender bits
	inWild           // expWild
)

// tagMatch is a worker's matching state; the worker's tag lock guards it.
type tagMatch struct {
	senderMask uint64
	sn         uint64
	// solo is the expected receive when it is the only one (nExp == 1),
	// whatever its mask, kept out of the queues: a ping-pong's receive,
	// posted before its message comes, is then matched with one
	// comparison, and neither hashed nor linked. A second receive posted
	// meanwhile moves it to its queue first, with its sequence number;
	// solo is nil otherwise.
	solo      *Request
	expHash   [tagHashSize]reqQueue
	expSrc    [tagHashSize]reqQueue
	expWild   reqQueue
	nExp      int // expected receives, solo and in all queues
	nSrc      int // in expSrc
	nWild     int // in expWild
	unexpHash [tagHashSize]msgList
	unexpSrc  [tagHashSize]msgList
	unexpAll  msgList
}

// specificSource reports whether a receive with mask names the sender of
// its message (and not the whole tag).
func (m *tagMatch) specificSource(mask uint64) bool {
	return m.senderMask != 0 && mask&m.senderMask == m.senderMask && mask != tagMaskFull
}

// post makes r, a receive of r.tr.tag under r.tr.mask, expected. The
// only receive, what a ping-pong posts, is inlined; others are queued by
// postQueued.
func (m *tagMatch) post(r *Request) {
	if m.nExp != 0 {
		m.postQueued(r)
		return
	}
	// r.tr.where stays notPosted: solo is where it waits. Its sequence
	// number comes when it is queued.
	m.nExp = 1
	m.solo = r
}

// postQueued is post of a receive beside others.
func (m *tagMatch) postQueued(r *Request) {
	if s := m.solo; s != nil {
		// Posted before r, and the only one.
		m.solo = nil
		s.tr.sn = m.sn
		m.sn++
		m.queue(s)
	}
	r.tr.sn = m.sn
	m.sn++
	m.nExp++
	m.queue(r)
}

// queue puts r, expected, in its queue.
func (m *tagMatch) queue(r *Request) {
	switch {
	case r.tr.mask == tagMaskFull:
		r.tr.where = inHash
		m.expHash[tagHash(r.tr.tag)].push(r)
	case m.specificSource(r.tr.mask):
		r.tr.where = inSrc
		m.nSrc++
		m.expSrc[tagHash(r.tr.tag&m.senderMask)].push(r)
	default:
		r.tr.where = inWild
		m.nWild++
		m.expWild.push(r)
	}
}

// unpost removes the expected receive r; false when it is not expected
// (matched already).
func (m *tagMatch) unpost(r *Request) bool {
	switch r.tr.where {
	case notPosted:
		if m.solo != r {
			return false
		}
		m.solo = nil
	case inHash:
		m.expHash[tagHash(r.tr.tag)].remove(r)
	case inSrc:
		m.nSrc--
		m.expSrc[tagHash(r.tr.tag&m.senderMask)].remove(r)
	default:
		m.nWild--
		m.expWild.remove(r)
	}
	m.nExp--
	r.tr.where = notPosted
	return true
}

// match removes and returns the expected receive a message of tag goes to:
// of the first receive of each queue that accepts it, the one posted first.
// The only receive that takes the message, a ping-pong's, is inlined;
// matchQueued does the rest.
func (m *tagMatch) match(tag uint64) *Request {
	if r := m.takeSolo(tag); r != nil {
		return r
	}
	return m.matchQueued(tag)
}

// takeSolo is match of the only receive, a ping-pong's, when it takes the
// message (nil otherwise): inlined where messages arrive.
func (m *tagMatch) takeSolo(tag uint64) *Request {
	if r := m.solo; r != nil && tagMatches(tag, r.tr.tag, r.tr.mask) {
		m.solo = nil
		m.nExp = 0
		return r
	}
	return nil
}

// matchQueued is match but for the only receive taking the message: none
// does when that one does not, or when there is none; otherwise the
// receives are in their queues.
func (m *tagMatch) matchQueued(tag uint64) *Request {
	if m.solo != nil || m.nExp == 0 {
		return nil
	}
	best := m.expHash[tagHash(tag)].first(tag)
	if m.nSrc > 0 {
		if r := m.expSrc[tagHash(tag&m.senderMask)].first(tag); r != nil && (best == nil || r.tr.sn < best.tr.sn) {
			best = r
		}
	}
	if m.nWild > 0 {
		if r := m.expWild.first(tag); r != nil && (best == nil || r.tr.sn < best.tr.sn) {
			best = r
		}
	}
	if best != nil {
		m.unpost(best)
	}
	return best
}

// expected returns the receives that wait for a message, in no order.
func (m *tagMatch) expected() []*Request {
	var rs []*Request
	if m.solo != nil {
		rs = append(rs, m.solo)
	}
	for _, qs := range []*[tagHashSize]reqQueue{&m.expHash, &m.expSrc} {
		for k := range qs {
			for r := qs[k].head; r != nil; r = r.tr.next {
				rs = append(rs, r)
			}
		}
	}
	for r := m.expWild.head; r != nil; r = r.tr.next {
		rs = append(rs, r)
	}
	return rs
}

// addUnexpected queues message msg, which no receive took.
func (m *tagMatch) addUnexpected(msg *TagMessage) {
	msg.queued = true
	m.unexpHash[tagHash(msg.tag)].push(msg, listHash)
	if m.senderMask != 0 {
		m.unexpSrc[tagHash(msg.tag&m.senderMask)].push(msg, listSrc)
	}
	m.unexpAll.push(msg, listAll)
}

// removeUnexpected takes msg off the unexpected lists.
func (m *tagMatch) removeUnexpected(msg *TagMessage) {
	if !msg.queued {
		return
	}
	msg.queued = false
	m.unexpHash[tagHash(msg.tag)].remove(msg, listHash)
	if m.senderMask != 0 {
		m.unexpSrc[tagHash(msg.tag&m.senderMask)].remove(msg, listSrc)
	}
	m.unexpAll.remove(msg, listAll)
}

// searchUnexpected returns the first unexpected message that a receive of
// tag under mask takes (removing it if remove), or nil.
func (m *tagMatch) searchUnexpected(tag, mask uint64, remove bool) *TagMessage {
	if m.unexpAll.head == nil {
		return nil
	}
	var head *TagMessage
	k := listAll
	switch {
	case mask == tagMaskFull:
		head, k = m.unexpHash[tagHash(tag)].head, listHash
	case m.specificSource(mask):
		head, k = m.unexpSrc[tagHash(tag&m.senderMask)].head, listSrc
	default:
		head = m.unexpAll.head
	}
	for msg := head; msg != nil; msg = msg.links[k].next {
		if tagMatches(msg.tag, tag, mask) {
			if remove {
				m.removeUnexpected(msg)
			}
			return msg
		}
	}
	return nil
}
