package uctest

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strconv"
	"testing"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// method is the kind of an RMA or AM operation.
type method int

const (
	short method = iota
	bcopy
	zcopy
)

func (m method) String() string { return [...]string{"short", "bcopy", "zcopy"}[m] }

// putNeed, getNeed and amNeed are the capabilities of each method.
var (
	putNeed = [...]need{needPutShort, needPutBcopy, needPutZcopy}
	getNeed = [...]need{{}, needGetBcopy, needGetZcopy}
	amNeed  = [...]need{needAMShort, needAMBcopy, needAMZcopy}
)

// claims reports whether the iface claims n.
func (e *env) claims(n need) bool { return n.flag != 0 && e.attr.Flags&n.flag != 0 }

// maxPut returns the largest put of method m.
func (e *env) maxPut(m method) int {
	switch m {
	case short:
		return e.attr.Put.MaxShort
	case bcopy:
		return e.attr.Put.MaxBcopy
	}
	return e.attr.Put.MaxZcopy
}

// maxGet returns the largest get of method m.
func (e *env) maxGet(m method) int {
	if m == bcopy {
		return e.attr.Get.MaxBcopy
	}
	return e.attr.Get.MaxZcopy
}

// maxAM returns the largest active message of method m, header included.
func (e *env) maxAM(m method) int {
	switch m {
	case short:
		return e.attr.AM.MaxShort
	case bcopy:
		return e.attr.AM.MaxBcopy
	}
	return e.attr.AM.MaxZcopy
}

// putOp returns the operation that puts data at offset off of c's target
// with method m. For zcopy, data is first copied into scratch memory, which
// stays untouched until the operation completes.
func (e *env) putOp(c *conn, m method, off int, data []byte) func(*uct.Completion) ucs.Status {
	raddr, rkey := c.base+uint64(off), c.rkey.Rkey
	switch m {
	case short:
		return func(*uct.Completion) ucs.Status { return c.ep.PutShort(data, raddr, rkey) }
	case bcopy:
		return func(*uct.Completion) ucs.Status {
			n, st := c.ep.PutBcopy(func(dst []byte) int { return copy(dst, data) }, raddr, rkey)
			if st == ucs.OK && n != len(data) {
				return ucs.ErrMessageTruncated
			}
			return st
		}
	}
	buf := e.scratchBuf(len(data))
	copy(buf, data)
	iov := e.iov(buf, e.attr.Put.MaxIOV)
	return func(comp *uct.Completion) ucs.Status { return c.ep.PutZcopy(iov, raddr, rkey, comp) }
}

// put writes data at offset off of c's target with method m and waits for
// its completion.
func (e *env) put(t testing.TB, c *conn, m method, off int, data []byte) {
	t.Helper()
	e.do(t, fmt.Sprintf("put %s of %d bytes at %d", m, len(data), off), e.putOp(c, m, off, data))
}

// get reads n bytes at offset off of c's target with method m.
func (e *env) get(t testing.TB, c *conn, m method, off, n int) []byte {
	t.Helper()
	out := make([]byte, n)
	e.do(t, fmt.Sprintf("get %s of %d bytes at %d", m, n, off), e.getOp(c, m, off, out))
	return out
}

// getOp returns the operation that reads len(out) bytes at offset off of
// c's target into out with method m. For zcopy the data lands in scratch
// memory and is copied to out on completion; for bcopy an unpack that
// does not deliver every byte makes the operation fail with
// ucs.ErrMessageTruncated.
func (e *env) getOp(c *conn, m method, off int, out []byte) func(*uct.Completion) ucs.Status {
	raddr, rkey, n := c.base+uint64(off), c.rkey.Rkey, len(out)
	if m == bcopy {
		return func(comp *uct.Completion) ucs.Status {
			got := -1
			unpack := func(src []byte) { got = copy(out, src) }
			st := c.ep.GetBcopy(unpack, n, raddr, rkey, comp)
			if st == ucs.InProgress {
				// Checked when the completion is: wrap its function.
				f := comp.Func
				comp.Func = func(cc *uct.Completion) {
					if got != n {
						cc.SetError(ucs.ErrMessageTruncated)
					}
					f(cc)
				}
				return st
			}
			if st == ucs.OK && got != n {
				return ucs.ErrMessageTruncated
			}
			return st
		}
	}
	buf := e.scratchBuf(n)
	clear(buf)
	iov := e.iov(buf, e.attr.Get.MaxIOV)
	return func(comp *uct.Completion) ucs.Status {
		st := c.ep.GetZcopy(iov, raddr, rkey, comp)
		if st == ucs.OK {
			copy(out, buf)
		} else if st == ucs.InProgress {
			f := comp.Func
			comp.Func = func(cc *uct.Completion) { copy(out, buf); f(cc) }
		}
		return st
	}
}

// amOp returns the operation that sends data as one active message to id
// with method m, so that the handler sees exactly data: for short, the
// first 8 bytes are the header (data must have at least 8); for zcopy, up
// to 8 bytes (and at most AM.MaxHdr) are the header and the rest the iov.
func (e *env) amOp(c *conn, m method, id uint8, data []byte) func(*uct.Completion) ucs.Status {
	switch m {
	case short:
		h := binary.LittleEndian.Uint64(data)
		return func(*uct.Completion) ucs.Status { return c.ep.AMShort(id, h, data[8:]) }
	case bcopy:
		return func(*uct.Completion) ucs.Status {
			n, st := c.ep.AMBcopy(id, func(dst []byte) int { return copy(dst, data) }, 0)
			if st == ucs.OK && n != len(data) {
				return ucs.ErrMessageTruncated
			}
			return st
		}
	}
	h := min(len(data), 8, e.attr.AM.MaxHdr)
	header := append([]byte(nil), data[:h]...)
	var iov []uct.IOV
	if len(data) > h {
		buf := e.scratchBuf(len(data) - h)
		copy(buf, data[h:])
		iov = e.iov(buf, e.attr.AM.MaxIOV)
	}
	return func(comp *uct.Completion) ucs.Status { return c.ep.AMZcopy(id, header, iov, 0, comp) }
}

// echo sends data to the target's echo handler with method m and checks
// that the same bytes come back.
func (e *env) echo(t testing.TB, c *conn, m method, data []byte) {
	t.Helper()
	what := fmt.Sprintf("AM %s of %d bytes", m, len(data))
	e.do(t, what, e.amOp(c, m, amEcho, data))
	got := e.takeReply(t, amEchoReply)
	if string(got) != string(data) {
		t.Fatalf("%s: echo came back as %d bytes %s, want %d bytes %s", what, len(got), brief(got), len(data), brief(data))
	}
}

// checkMem reads n bytes at off of c's target and compares them with want
// (large ranges by their CRC first, so that only a mismatch transfers
// them).
func (e *env) checkMem(t testing.TB, c *conn, what string, off int, want []byte) {
	t.Helper()
	if len(want) > 4096 {
		f := e.call(t, c, fmt.Sprintf("crc %d %d", off, len(want)))
		if len(f) == 1 && f[0] == strconv.FormatUint(uint64(crc32.Checksum(want, crcTable)), 10) {
			return
		}
	}
	got := e.read(t, c, off, len(want))
	if i := firstDiff(got, want); i >= 0 {
		t.Fatalf("%s: target memory differs at byte %d of %d: got %s, want %s", what, i, len(want), brief(got[i:]), brief(want[i:]))
	}
}

// firstDiff returns the first index where a and b differ, -1 if none.
func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// brief formats the start of b for a failure message.
func brief(b []byte) string {
	if len(b) > 16 {
		return fmt.Sprintf("%x...", b[:16])
	}
	return fmt.Sprintf("%x", b)
}
