package uctest

import (
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// cases returns the table of conformance cases, in the order they run.
func cases() []testCase {
	cs := []testCase{
		{"iface_attr", nil, testIfaceAttr},
		{"iface_mem_alloc", nil, testIfaceMemAlloc},
		{"put_short", []need{needPutShort}, func(t *testing.T, e *env) { testPut(t, e, short) }},
		{"put_bcopy", []need{needPutBcopy}, func(t *testing.T, e *env) { testPut(t, e, bcopy) }},
		{"put_zcopy", []need{needPutZcopy}, func(t *testing.T, e *env) { testPut(t, e, zcopy) }},
		{"get_bcopy", []need{needGetBcopy}, func(t *testing.T, e *env) { testGet(t, e, bcopy) }},
		{"get_zcopy", []need{needGetZcopy}, func(t *testing.T, e *env) { testGet(t, e, zcopy) }},
		{"am_short", []need{needAMShort}, func(t *testing.T, e *env) { testAM(t, e, short) }},
		{"am_bcopy", []need{needAMBcopy}, func(t *testing.T, e *env) { testAM(t, e, bcopy) }},
		{"am_zcopy", []need{needAMZcopy}, func(t *testing.T, e *env) { testAM(t, e, zcopy) }},
	}
	cs = append(cs, atomicCases()...)
	return append(cs, []testCase{
		{"max_short", nil, func(t *testing.T, e *env) { testMax(t, e, short) }},
		{"max_bcopy", nil, func(t *testing.T, e *env) { testMax(t, e, bcopy) }},
		{"max_zcopy", nil, func(t *testing.T, e *env) { testMax(t, e, zcopy) }},
		{"zero_length", nil, testZeroLength},
		{"unaligned", nil, testUnaligned},
		{"flush", nil, testFlush},
		{"fence", nil, testFence},
		{"pending", []need{needPending}, testPending},
		{"am_keep_desc", nil, testKeepDesc},
		{"am_rx_headroom", nil, testRxHeadroom},
		{"connect_to_ep", nil, testConnectToEP},
		{"err_unreachable", nil, testUnreachable},
		{"err_malformed_addr", nil, testMalformedAddr},
		{"err_destroyed_ep", nil, testDestroyedEP},
		{"err_remote_mem", nil, testRemoteMem},
		{"err_killed_peer", nil, testKilledPeer},
	}...)
}

// Offsets of the target memory used by the cases.
const (
	rmaOff    = 64 << 10 // puts and gets
	atomicOff = 2 << 20  // atomic words, 8 bytes apart
	flushOff  = 1 << 20  // the flush case
	fenceOff  = 3 << 20  // the fence case
	guardLen  = 16       // bytes checked on each side of a put
	guardByte = byte(0xee)
)

// sizesUpTo returns the sizes of sizes that are at most limit, then limit
// itself (capped) when it is larger than them all.
func sizesUpTo(limit int, sizes ...int) []int {
	var out []int
	top := 0
	for _, n := range sizes {
		if n <= limit {
			out = append(out, n)
			top = max(top, n)
		}
	}
	if c := capped(limit); c > top {
		out = append(out, c)
	}
	return out
}

// guardedPut fills the target around [off, off+len(data)) with guardByte,
// puts data there with method m, flushes (a put that returned OK or
// completed is complete locally: only a flush makes it visible at the
// target), and checks data and the guards.
func (e *env) guardedPut(t testing.TB, c *conn, m method, off int, data []byte) {
	t.Helper()
	lo := max(off-guardLen, 0)
	hi := min(off+len(data)+guardLen, c.size)
	e.fill(t, c, lo, hi-lo, guardByte)
	e.put(t, c, m, off, data)
	e.flush(t, c)
	want := make([]byte, hi-lo)
	for i := range want {
		want[i] = guardByte
	}
	copy(want[off-lo:], data)
	e.checkMem(t, c, fmt.Sprintf("put %s of %d bytes at %d (with %d guard bytes each side)", m, len(data), off, guardLen), lo, want)
}

func testPut(t *testing.T, e *env, m method) {
	for i, n := range sizesUpTo(e.maxPut(m), 1, 8, 61, 1000, 4096) {
		e.guardedPut(t, e.main, m, rmaOff, pattern(n, uint64(i)))
	}
}

func testGet(t *testing.T, e *env, m method) {
	for i, n := range sizesUpTo(e.maxGet(m), 1, 8, 61, 1000, 4096) {
		want := e.writePattern(t, e.main, rmaOff, n, uint64(100+i))
		if got := e.get(t, e.main, m, rmaOff, n); firstDiff(got, want) >= 0 {
			t.Fatalf("get %s of %d bytes: got %s, want %s", m, n, brief(got), brief(want))
		}
	}
}

func testAM(t *testing.T, e *env, m method) {
	lo := 0
	if m == short {
		lo = 8 // the header
	}
	if e.maxAM(m) < lo {
		t.Fatalf("transport claims AM %s with a largest message of %d bytes", m, e.maxAM(m))
	}
	for i, n := range sizesUpTo(e.maxAM(m), lo, lo+1, 61, 1000) {
		e.echo(t, e.main, m, pattern(n, uint64(200+i)))
	}
}

// testMax tries every operation of method m at its largest size (capped at
// sizeCap), at the very end of the target memory.
func testMax(t *testing.T, e *env, m method) {
	c := e.main
	t.Run("put", func(t *testing.T) {
		if !e.claims(putNeed[m]) {
			t.Skipf("skipped: transport does not claim %s", putNeed[m].name)
		}
		n := capped(e.maxPut(m))
		if n <= 0 {
			t.Fatalf("transport claims %s with a limit of %d bytes", putNeed[m].name, e.maxPut(m))
		}
		t.Logf("%d bytes (limit %d) ending at the end of the target memory", n, e.maxPut(m))
		e.guardedPut(t, c, m, c.size-n, pattern(n, 300))
	})
	t.Run("get", func(t *testing.T) {
		if m == short {
			t.Skip("skipped: uct has no get short")
		}
		if !e.claims(getNeed[m]) {
			t.Skipf("skipped: transport does not claim %s", getNeed[m].name)
		}
		n := capped(e.maxGet(m))
		if n <= 0 {
			t.Fatalf("transport claims %s with a limit of %d bytes", getNeed[m].name, e.maxGet(m))
		}
		want := e.writePattern(t, c, c.size-n, n, 301)
		if got := e.get(t, c, m, c.size-n, n); firstDiff(got, want) >= 0 {
			t.Fatalf("get %s of %d bytes at the end: got %s, want %s", m, n, brief(got), brief(want))
		}
	})
	t.Run("am", func(t *testing.T) {
		if !e.claims(amNeed[m]) {
			t.Skipf("skipped: transport does not claim %s", amNeed[m].name)
		}
		n := capped(e.maxAM(m))
		if n < 8 && m == short {
			t.Fatalf("transport claims AM short with a limit of %d bytes, less than its header", n)
		}
		e.echo(t, c, m, pattern(n, 302))
	})
}

// testZeroLength tries every claimed operation with no data: it must
// succeed and leave the target memory alone.
func testZeroLength(t *testing.T, e *env) {
	c := e.main
	for _, m := range []method{short, bcopy, zcopy} {
		t.Run("put_"+m.String(), func(t *testing.T) {
			if !e.claims(putNeed[m]) {
				t.Skipf("skipped: transport does not claim %s", putNeed[m].name)
			}
			e.guardedPut(t, c, m, rmaOff, nil)
		})
		if m != short {
			t.Run("get_"+m.String(), func(t *testing.T) {
				if !e.claims(getNeed[m]) {
					t.Skipf("skipped: transport does not claim %s", getNeed[m].name)
				}
				if got := e.get(t, c, m, rmaOff, 0); len(got) != 0 {
					t.Fatalf("get of 0 bytes returned %d", len(got))
				}
			})
		}
		t.Run("am_"+m.String(), func(t *testing.T) {
			if !e.claims(amNeed[m]) {
				t.Skipf("skipped: transport does not claim %s", amNeed[m].name)
			}
			n := 0
			if m == short {
				n = 8 // the header alone: an empty payload
			}
			e.echo(t, c, m, pattern(n, 400))
		})
	}
}

// testUnaligned puts, gets and sends at odd offsets, odd lengths and (for
// zcopy) from odd local addresses.
func testUnaligned(t *testing.T, e *env) {
	c := e.main
	e.skew = 1
	defer func() { e.skew = 0 }()
	spans := []struct{ off, n int }{{1, 1}, {3, 3}, {7, 5}, {13, 13}, {4093, 1031}, {rmaOff + 9, 4099}}
	for _, m := range []method{short, bcopy, zcopy} {
		t.Run("put_"+m.String(), func(t *testing.T) {
			if !e.claims(putNeed[m]) {
				t.Skipf("skipped: transport does not claim %s", putNeed[m].name)
			}
			for i, s := range spans {
				if s.n <= e.maxPut(m) {
					e.guardedPut(t, c, m, s.off, pattern(s.n, uint64(500+i)))
				}
			}
		})
		if m != short {
			t.Run("get_"+m.String(), func(t *testing.T) {
				if !e.claims(getNeed[m]) {
					t.Skipf("skipped: transport does not claim %s", getNeed[m].name)
				}
				for i, s := range spans {
					if s.n > e.maxGet(m) {
						continue
					}
					want := e.writePattern(t, c, s.off, s.n, uint64(600+i))
					if got := e.get(t, c, m, s.off, s.n); firstDiff(got, want) >= 0 {
						t.Fatalf("get %s of %d bytes at %d: got %s, want %s", m, s.n, s.off, brief(got), brief(want))
					}
				}
			})
		}
		t.Run("am_"+m.String(), func(t *testing.T) {
			if !e.claims(amNeed[m]) {
				t.Skipf("skipped: transport does not claim %s", amNeed[m].name)
			}
			for i, n := range []int{9, 13, 1031, 4099} {
				if n <= e.maxAM(m) {
					e.echo(t, c, m, pattern(n, uint64(700+i)))
				}
			}
		})
	}
}

// post issues op without waiting for its completion, retrying (with
// progress) while the transport has no resources. It returns the
// completion to wait for, or nil when op completed at once.
func (e *env) post(t testing.TB, what string, op func(*uct.Completion) ucs.Status) *completion {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for spins := 1; ; spins++ {
		c := newCompletion()
		switch st := op(&c.Completion); st {
		case ucs.OK:
			return nil
		case ucs.InProgress:
			return c
		case ucs.ErrNoResource:
			e.progress()
			if spins%256 == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("%s: still ErrNoResource after %v", what, waitLimit)
				}
				runtime.Gosched()
			}
		default:
			t.Fatalf("%s: %v", what, st)
		}
	}
}

// claimedPuts returns the put methods the transport claims.
func (e *env) claimedPuts() []method { return e.claimed(putNeed) }

// claimedGets returns the get methods the transport claims.
func (e *env) claimedGets() []method { return e.claimed(getNeed) }

// claimed returns the methods whose capability in needs the transport
// claims.
func (e *env) claimed(needs [3]need) []method {
	var ms []method
	for _, m := range []method{short, bcopy, zcopy} {
		if e.claims(needs[m]) {
			ms = append(ms, m)
		}
	}
	return ms
}

// testFlush issues puts of every claimed kind and posted atomic adds
// without waiting for them, flushes, and checks that every operation
// completed and is visible in the target memory.
func testFlush(t *testing.T, e *env) {
	for _, level := range []string{"ep", "iface"} {
		t.Run(level, func(t *testing.T) {
			c := e.main
			ms := e.claimedPuts()
			add := e.attr.Atomic64.OpFlags&uct.AtomicOpAdd.OpMask() != 0
			if len(ms) == 0 && !add {
				t.Skip("skipped: transport claims neither put nor posted 64-bit atomic add")
			}
			e.resetScratch()
			type written struct {
				off  int
				data []byte
			}
			var ws []written
			var comps []*completion
			off := flushOff
			for i := range 48 {
				if len(ms) == 0 {
					break
				}
				m := ms[i%len(ms)]
				n := min(e.maxPut(m), 1+(i*131)%700)
				data := pattern(n, uint64(800+i))
				what := fmt.Sprintf("put %s #%d", m, i)
				if cp := e.post(t, what, e.putOp(c, m, off, data)); cp != nil {
					comps = append(comps, cp)
				}
				ws = append(ws, written{off, data})
				off += (n + 63) &^ 63
			}
			const adds = 100
			word := atomicOff + 1024
			if add {
				e.write(t, c, word, make([]byte, 8))
				for i := range adds {
					e.post(t, fmt.Sprintf("atomic add #%d", i), func(*uct.Completion) ucs.Status {
						return c.ep.AtomicPost64(uct.AtomicOpAdd, 3, c.base+uint64(word), c.rkey.Rkey)
					})
				}
			}
			if level == "ep" {
				e.flush(t, c)
			} else {
				e.do(t, "iface flush", func(comp *uct.Completion) ucs.Status { return e.iface.Flush(uct.FlushFlagLocal, comp) })
			}
			for i, cp := range comps {
				if !cp.done.Load() {
					t.Errorf("operation %d of %d still in progress after the flush completed", i, len(comps))
				} else if cp.Status().IsErr() {
					t.Errorf("operation %d completed with %v", i, cp.Status())
				}
			}
			for _, w := range ws {
				e.checkMem(t, c, fmt.Sprintf("after flush: put of %d bytes at %d", len(w.data), w.off), w.off, w.data)
			}
			if add {
				got := e.read(t, c, word, 8)
				if v := le64(got); v != 3*adds {
					t.Errorf("after flush: %d posted adds of 3 left %d, want %d", adds, v, 3*adds)
				}
			}
		})
	}
}

// fenceRounds is the number of A-then-B rounds of the fence case; every
// value must fit a byte.
const fenceRounds = 250

// testFence writes A=k, fences, writes B=k for k = 1..fenceRounds, while
// the target watches both bytes and counts the times it sees B ahead of A.
func testFence(t *testing.T, e *env) {
	c := e.main
	ms := e.claimedPuts()
	if len(ms) == 0 {
		t.Skip("skipped: transport claims no put")
	}
	m := ms[0]
	a, b := fenceOff, fenceOff+256
	e.write(t, c, a, make([]byte, 4))
	e.write(t, c, b, make([]byte, 4))
	e.call(t, c, fmt.Sprintf("watch %d %d %d", a, b, fenceRounds))
	var comps []*completion
	for k := 1; k <= fenceRounds; k++ {
		v := []byte{byte(k)}
		if cp := e.post(t, "put A", e.putOp(c, m, a, v)); cp != nil {
			comps = append(comps, cp)
		}
		if st := c.ep.Fence(0); st.IsErr() {
			t.Fatalf("ep fence: %v", st)
		}
		if cp := e.post(t, "put B", e.putOp(c, m, b, v)); cp != nil {
			comps = append(comps, cp)
		}
	}
	e.flush(t, c)
	if st := e.iface.Fence(0); st.IsErr() {
		t.Errorf("iface fence: %v", st)
	}
	f := e.call(t, c, "watchwait")
	if len(f) != 2 {
		t.Fatalf("watchwait answer %q", f)
	}
	viol, _ := strconv.Atoi(f[0])
	if viol != 0 {
		t.Errorf("the target saw B ahead of A %s times in %s samples despite the fence (put %s)", f[0], f[1], m)
	} else {
		t.Logf("put %s: %s samples by the target, B never ahead of A", m, f[1])
	}
	got := e.read(t, c, a, 1)[0]
	if gb := e.read(t, c, b, 1)[0]; got != fenceRounds || gb != fenceRounds {
		t.Errorf("after flush: A=%d B=%d, want both %d", got, gb, fenceRounds)
	}
	for _, cp := range comps {
		if !cp.done.Load() {
			t.Errorf("a put was still in progress after the flush completed")
			break
		}
	}
}

// le64 decodes a little-endian uint64.
func le64(b []byte) uint64 {
	var v uint64
	for i := 7; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}
