package uctest

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// Active message ids of the suite. A target answers amEcho with the same
// bytes on amEchoReply, and amEchoKeep on amKeepReply; it counts amSink
// messages and sums their first 8 bytes.
const (
	amEcho      uint8 = 1
	amEchoReply uint8 = 2
	amEchoKeep  uint8 = 3
	amKeepReply uint8 = 4
	amSink      uint8 = 5
)

// anyAM is the iface flags of active messages: an iface that claims none
// gets no handlers.
const anyAM = uct.IfaceFlagAMShort | uct.IfaceFlagAMBcopy | uct.IfaceFlagAMZcopy

// targetSize is the size of a target's memory.
const targetSize = 4 << 20

// server is the target side of the suite: the memory that the test reaches
// through its rkey, and the active message handlers. It runs in a peer
// process, or in the test process for loopback resources.
//
// Its handlers run from the iface's Progress; poll sends the replies they
// queued. exec runs one command of the line protocol (see exec) and may be
// called from another goroutine than Progress and poll.
type server struct {
	md    uct.MD
	iface uct.Iface
	attr  *uct.IfaceAttr

	mem   []byte   // the target memory
	memh  uct.Memh // its handle
	alloc bool     // memh is from MemAlloc (else MemReg of mmapped mem)
	key   []byte   // packed key of memh

	ep      uct.EP                // to the test's iface, for replies
	mainEP  uct.EP                // the EP of the connect command (exec goroutine only)
	ceps    []uct.EP              // EPs of epcreate (exec goroutine only; destroyed by free)
	useEP   atomic.Pointer[epRef] // an EP that poll is to reply on from now on
	outbox  []reply               // replies not sent yet (Progress goroutine only)
	sendErr atomic.Pointer[string]

	paused atomic.Bool
	count  atomic.Uint64 // amSink messages
	sum    atomic.Uint64 // of their first 8 bytes

	watchMu sync.Mutex
	watch   *watcher
}

// epRef hands a reply EP from exec to poll.
type epRef struct{ ep uct.EP }

// reply is an active message the server still has to send.
type reply struct {
	id   uint8
	data []byte
}

// newServer allocates the target memory on md and installs the handlers on
// iface, which the server does not own.
func newServer(md uct.MD, iface uct.Iface) (*server, error) {
	attr, err := iface.Query()
	if err != nil {
		return nil, fmt.Errorf("iface query: %w", err)
	}
	s := &server{md: md, iface: iface, attr: attr}
	s.mem, s.memh, s.alloc, err = allocMemory(md, targetSize, "uctest target")
	if err != nil {
		return nil, err
	}
	if s.key, err = md.MkeyPack(nil, s.memh); err != nil {
		s.free()
		return nil, fmt.Errorf("mkey pack: %w", err)
	}
	if attr.Flags&anyAM != 0 {
		for _, id := range []uint8{amEcho, amEchoKeep, amSink} {
			if err := iface.SetAMHandler(id, s.handle, id, uct.CBFlagSync); err != nil {
				s.free()
				return nil, fmt.Errorf("set AM handler %d: %w", id, err)
			}
		}
	}
	return s, nil
}

// allocMemory returns length bytes of memory that md can key: from MemAlloc
// where md has uct.MDFlagAlloc, else an anonymous mapping registered with
// MemReg. The memory is not Go memory, so that what another process writes
// into it is invisible to the race detector, as any foreign write is.
func allocMemory(md uct.MD, length int, name string) (mem []byte, memh uct.Memh, alloc bool, err error) {
	attr, err := md.Query()
	if err != nil {
		return nil, nil, false, fmt.Errorf("md query: %w", err)
	}
	switch {
	case attr.Flags&uct.MDFlagAlloc != 0:
		a, err := md.MemAlloc(length, uct.MemAccessDefault, name)
		if err != nil {
			return nil, nil, false, fmt.Errorf("mem alloc of %d bytes: %w", length, err)
		}
		if a.Length < length {
			md.MemFree(a.Memh)
			return nil, nil, false, fmt.Errorf("mem alloc of %d bytes gave %d", length, a.Length)
		}
		return unsafe.Slice((*byte)(a.Address), length), a.Memh, true, nil
	case attr.Flags&uct.MDFlagReg != 0:
		m, err := unix.Mmap(-1, 0, length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return nil, nil, false, fmt.Errorf("mmap of %d bytes: %w", length, err)
		}
		h, err := md.MemReg(unsafe.Pointer(&m[0]), length, uct.MemAccessDefault)
		if err != nil {
			unix.Munmap(m)
			return nil, nil, false, fmt.Errorf("mem reg of %d bytes: %w", length, err)
		}
		return m, h, false, nil
	}
	return nil, nil, false, fmt.Errorf("md %s neither allocates nor registers memory: %w", md.Name(), ucs.ErrUnsupported)
}

// freeMemory releases what allocMemory returned.
func freeMemory(md uct.MD, mem []byte, memh uct.Memh, alloc bool) {
	if alloc {
		md.MemFree(memh)
		return
	}
	md.MemDereg(memh)
	unix.Munmap(mem)
}

// base returns the address of the target memory in the server's process.
func (s *server) base() uint64 { return uint64(uintptr(unsafe.Pointer(&s.mem[0]))) }

// hello is the first line a peer prints: its packed key, the base address
// and length of its memory, and its device and iface addresses.
func (s *server) hello() string {
	return fmt.Sprintf("hello %s %#x %d %s %s", hexOrDash(s.key), s.base(), len(s.mem),
		hexOrDash(s.iface.DeviceAddress()), hexOrDash(s.iface.Address()))
}

// free releases the server's EP and memory (not the iface).
func (s *server) free() {
	s.stopWatch()
	if s.ep != nil && s.ep != s.mainEP && !slices.Contains(s.ceps, s.ep) {
		s.ep.Destroy()
	}
	s.ep = nil
	if s.mainEP != nil {
		s.mainEP.Destroy()
		s.mainEP = nil
	}
	for _, ep := range s.ceps {
		ep.Destroy()
	}
	s.ceps = nil
	if s.mem != nil {
		freeMemory(s.md, s.mem, s.memh, s.alloc)
		s.mem = nil
	}
}

// handle is the AM handler of the server's ids.
func (s *server) handle(arg any, data []byte, flags uint32) ucs.Status {
	switch id := arg.(uint8); id {
	case amEcho, amEchoKeep:
		s.outbox = append(s.outbox, reply{id + 1, append([]byte(nil), data...)})
	case amSink:
		var v uint64
		if len(data) >= 8 {
			v = binary.LittleEndian.Uint64(data)
		}
		s.sum.Add(v)
		s.count.Add(1)
	}
	return ucs.OK
}

// poll sends the queued replies until the transport has no resources.
func (s *server) poll() {
	if r := s.useEP.Swap(nil); r != nil {
		s.ep = r.ep
	}
	for len(s.outbox) > 0 && s.ep != nil {
		r := s.outbox[0]
		st := sendRaw(s.ep, s.attr, r.id, r.data)
		if st == ucs.ErrNoResource {
			return
		}
		if st.IsErr() {
			msg := fmt.Sprintf("reply %d of %d bytes: %v", r.id, len(r.data), st)
			s.sendErr.Store(&msg)
		}
		s.outbox[0] = reply{}
		s.outbox = s.outbox[1:]
	}
}

// sendRaw sends data as one active message, whole, so that the handler
// sees exactly data: with AMBcopy where it fits, else AMZcopy, else
// AMShort. Its completion, if any, is not awaited: data stays referenced by
// the transport until then.
func sendRaw(ep uct.EP, attr *uct.IfaceAttr, id uint8, data []byte) ucs.Status {
	switch {
	case attr.Flags&uct.IfaceFlagAMBcopy != 0 && len(data) <= attr.AM.MaxBcopy:
		n, st := ep.AMBcopy(id, func(dst []byte) int { return copy(dst, data) }, 0)
		if st == ucs.OK && n != len(data) {
			return ucs.ErrMessageTruncated
		}
		return st
	case attr.Flags&uct.IfaceFlagAMZcopy != 0 && len(data) <= attr.AM.MaxZcopy:
		h := min(len(data), attr.AM.MaxHdr, 8)
		var iov []uct.IOV
		if len(data) > h {
			iov = []uct.IOV{{Buffer: data[h:]}}
		}
		st := ep.AMZcopy(id, data[:h], iov, 0, nil)
		if st == ucs.InProgress {
			return ucs.OK
		}
		return st
	case attr.Flags&uct.IfaceFlagAMShort != 0 && len(data) >= 8 && len(data) <= attr.AM.MaxShort:
		return ep.AMShort(id, binary.LittleEndian.Uint64(data), data[8:])
	}
	return ucs.ErrUnsupported
}

// exec runs one command of the line protocol and returns its answer: "ok"
// followed by results, or "err" followed by a message. The commands:
//
//	connect DEV IFACE   create the EP for replies to these addresses (hex)
//	epcreate            create an unconnected EP (connect to EP); answer
//	                    its EP address
//	epconnect DEV EPA   connect the last epcreate EP to the EP at these
//	                    addresses and send replies on it from now on
//	epdone              send replies on the connect EP again
//	read OFF N          answer the N bytes at offset OFF of the memory (hex)
//	write OFF HEX       store bytes at offset OFF
//	fill OFF N BYTE     store N bytes BYTE at offset OFF
//	pattern OFF N SEED  store pattern(N, SEED) at offset OFF
//	crc OFF N           answer the CRC-32C of the N bytes at offset OFF
//	pause / resume      stop / restart progress (peers only)
//	stats               answer the amSink count and sum, and the first
//	                    reply send error (or "-")
//	reset               zero the amSink count and sum
//	watch A B LAST      watch the bytes at offsets A and B (4-aligned) until
//	                    B holds LAST, counting samples where B > A
//	watchwait           wait for the watch to end; answer violations and
//	                    samples
func (s *server) exec(line string) string {
	f := strings.Fields(line)
	if len(f) == 0 {
		return "err empty command"
	}
	arg := func(k int) (int, error) {
		if k >= len(f) {
			return 0, fmt.Errorf("%s: missing argument %d", f[0], k)
		}
		v, err := strconv.ParseInt(f[k], 0, 64)
		return int(v), err
	}
	span := func(off, n int) error {
		if off < 0 || n < 0 || off > len(s.mem) || n > len(s.mem)-off {
			return fmt.Errorf("range %d+%d outside %d bytes", off, n, len(s.mem))
		}
		return nil
	}
	fail := func(err error) string { return "err " + err.Error() }
	switch f[0] {
	case "connect":
		if len(f) != 3 {
			return "err connect: want 2 addresses"
		}
		dev, err1 := unhexOrDash(f[1])
		ifa, err2 := unhexOrDash(f[2])
		if err := errors.Join(err1, err2); err != nil {
			return fail(err)
		}
		ep, err := s.iface.EPCreate(&uct.EPParams{DeviceAddr: dev, IfaceAddr: ifa})
		if err != nil {
			return fail(err)
		}
		s.ep, s.mainEP = ep, ep
		return "ok"
	case "epcreate":
		// An unconnected EP for connect to EP; answers its EP address.
		ep, err := s.iface.EPCreate(&uct.EPParams{Unconnected: true})
		if err != nil {
			return fail(err)
		}
		s.ceps = append(s.ceps, ep)
		conn, ok := ep.(uct.EPConnector)
		if !ok {
			return "err epcreate: the EP does not implement uct.EPConnector"
		}
		a, err := conn.EPAddress()
		if err != nil {
			return fail(err)
		}
		return "ok " + hexOrDash(a)
	case "epconnect":
		// Connects the last epcreate EP to the test's EP whose device and
		// EP addresses are given, and replies on it from now on.
		if len(f) != 3 || len(s.ceps) == 0 {
			return "err epconnect: want 2 addresses, after epcreate"
		}
		dev, err1 := unhexOrDash(f[1])
		epa, err2 := unhexOrDash(f[2])
		if err := errors.Join(err1, err2); err != nil {
			return fail(err)
		}
		ep := s.ceps[len(s.ceps)-1]
		if err := ep.(uct.EPConnector).ConnectToEP(dev, epa); err != nil {
			return fail(err)
		}
		s.useEP.Store(&epRef{ep})
		return "ok"
	case "epdone":
		// Replies go back to the EP of the connect command.
		if s.mainEP == nil {
			return "err epdone: not connected"
		}
		s.useEP.Store(&epRef{s.mainEP})
		return "ok"
	case "read":
		off, err1 := arg(1)
		n, err2 := arg(2)
		if err := errors.Join(err1, err2); err != nil {
			return fail(err)
		}
		if err := span(off, n); err != nil {
			return fail(err)
		}
		return "ok " + hexOrDash(s.mem[off:off+n])
	case "write":
		off, err := arg(1)
		if err != nil {
			return fail(err)
		}
		if len(f) != 3 {
			return "err write: want offset and data"
		}
		b, err := unhexOrDash(f[2])
		if err != nil {
			return fail(err)
		}
		if err := span(off, len(b)); err != nil {
			return fail(err)
		}
		copy(s.mem[off:], b)
		return "ok"
	case "fill", "pattern":
		off, err1 := arg(1)
		n, err2 := arg(2)
		v, err3 := arg(3)
		if err := errors.Join(err1, err2, err3); err != nil {
			return fail(err)
		}
		if err := span(off, n); err != nil {
			return fail(err)
		}
		if f[0] == "pattern" {
			copy(s.mem[off:], pattern(n, uint64(v)))
			return "ok"
		}
		b := s.mem[off : off+n]
		for i := range b {
			b[i] = byte(v)
		}
		return "ok"
	case "crc":
		off, err1 := arg(1)
		n, err2 := arg(2)
		if err := errors.Join(err1, err2); err != nil {
			return fail(err)
		}
		if err := span(off, n); err != nil {
			return fail(err)
		}
		return fmt.Sprintf("ok %d", crc32.Checksum(s.mem[off:off+n], crcTable))
	case "pause":
		s.paused.Store(true)
		return "ok"
	case "resume":
		s.paused.Store(false)
		return "ok"
	case "stats":
		e := "-"
		if p := s.sendErr.Load(); p != nil {
			e = strconv.Quote(*p)
		}
		return fmt.Sprintf("ok %d %d %s", s.count.Load(), s.sum.Load(), e)
	case "reset":
		s.count.Store(0)
		s.sum.Store(0)
		return "ok"
	case "watch":
		a, err1 := arg(1)
		b, err2 := arg(2)
		last, err3 := arg(3)
		if err := errors.Join(err1, err2, err3); err != nil {
			return fail(err)
		}
		if err := errors.Join(span(a, 4), span(b, 4)); err != nil || a%4 != 0 || b%4 != 0 {
			return fmt.Sprintf("err watch: bad offsets %d, %d: %v", a, b, err)
		}
		s.startWatch(a, b, byte(last))
		return "ok"
	case "watchwait":
		v, n, err := s.waitWatch()
		if err != nil {
			return fail(err)
		}
		return fmt.Sprintf("ok %d %d", v, n)
	}
	return "err unknown command " + strconv.Quote(f[0])
}

// watcher observes two bytes of the target memory from its own goroutine.
type watcher struct {
	stop       atomic.Bool
	done       chan struct{}
	violations int
	samples    int
	timedOut   bool
}

// watchLimit bounds a watch, so that a transport that never writes the last
// value fails the case instead of hanging it.
const watchLimit = 20 * time.Second

// startWatch starts a watcher of the bytes at offsets a and b: it loads b,
// then a, and counts the samples where b > a, until b holds last.
func (s *server) startWatch(a, b int, last byte) {
	s.stopWatch()
	w := &watcher{done: make(chan struct{})}
	s.watchMu.Lock()
	s.watch = w
	s.watchMu.Unlock()
	pa := (*uint32)(unsafe.Pointer(&s.mem[a]))
	pb := (*uint32)(unsafe.Pointer(&s.mem[b]))
	go func() {
		defer close(w.done)
		deadline := time.Now().Add(watchLimit)
		for !w.stop.Load() {
			vb := byte(atomic.LoadUint32(pb))
			va := byte(atomic.LoadUint32(pa))
			w.samples++
			if vb > va {
				w.violations++
			}
			if vb == last {
				return
			}
			if w.samples%1024 == 0 {
				if time.Now().After(deadline) {
					w.timedOut = true
					return
				}
				runtime.Gosched()
			}
		}
	}()
}

// waitWatch waits for the watcher to end and returns its counts.
func (s *server) waitWatch() (violations, samples int, err error) {
	s.watchMu.Lock()
	w := s.watch
	s.watch = nil
	s.watchMu.Unlock()
	if w == nil {
		return 0, 0, errors.New("no watch running")
	}
	<-w.done
	if w.timedOut {
		return w.violations, w.samples, fmt.Errorf("watched byte never reached its last value in %v (%d samples)", watchLimit, w.samples)
	}
	return w.violations, w.samples, nil
}

// stopWatch ends a running watcher, if any.
func (s *server) stopWatch() {
	s.watchMu.Lock()
	w := s.watch
	s.watch = nil
	s.watchMu.Unlock()
	if w != nil {
		w.stop.Store(true)
		<-w.done
	}
}

// crcTable is the table of the crc command (CRC-32C).
var crcTable = crc32.MakeTable(crc32.Castagnoli)

// hexOrDash encodes b in hex, "-" when empty, so that every protocol field
// is one word.
func hexOrDash(b []byte) string {
	if len(b) == 0 {
		return "-"
	}
	return hex.EncodeToString(b)
}

// unhexOrDash decodes what hexOrDash encoded.
func unhexOrDash(s string) ([]byte, error) {
	if s == "-" {
		return nil, nil
	}
	b, err := hex.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("hex field %.20q: %w", s, err)
	}
	return b, nil
}
