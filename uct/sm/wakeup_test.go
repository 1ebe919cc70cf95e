package sm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// pollTimeout bounds every wait for a wakeup: a lost wakeup fails the test
// instead of hanging it.
const pollTimeout = 30 * time.Second

// waitReadable polls fd for up to timeout and reports whether it became
// readable.
func waitReadable(tb testing.TB, fd int, timeout time.Duration) bool {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ms := int(time.Until(deadline).Milliseconds())
		if ms <= 0 {
			return false
		}
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, ms)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			tb.Fatalf("poll: %v", err)
		}
		return n == 1 && pfd[0].Revents&unix.POLLIN != 0
	}
}

// readEvent reads the eventfd: its counter, or 0 when it was not readable.
func readEvent(tb testing.TB, fd int) uint64 {
	tb.Helper()
	var b [8]byte
	n, err := unix.Read(fd, b[:])
	if err == unix.EAGAIN {
		return 0
	}
	if err != nil || n != 8 {
		tb.Fatalf("read eventfd: %d, %v", n, err)
	}
	return binary.LittleEndian.Uint64(b[:])
}

// waitQueued waits until the FIFO of i holds an undelivered message.
func waitQueued(tb testing.TB, i *Iface) {
	tb.Helper()
	deadline := time.Now().Add(pollTimeout)
	for i.rx.ready(&i.rxc) == nil {
		if time.Now().After(deadline) {
			tb.Fatal("no message arrived")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// TestWakeupPeer: the receiver arms, sleeps in poll on its eventfd, and a
// peer process's message wakes it; a message already queued makes EventArm
// busy; a message sent while not armed writes nothing. Peers whose segment
// is posix or sysv (their ifaces are the same) both wake a posix iface.
func TestWakeupPeer(t *testing.T) {
	for _, md := range []testMD{posixTest, sysvTest} {
		t.Run(md.name, func(t *testing.T) {
			p := startPeerMD(t, md)
			fd, err := p.iface.WakeupFD()
			if err != nil {
				t.Fatal(err)
			}
			if fd2, err := p.iface.WakeupFD(); err != nil || fd2 != fd {
				t.Fatalf("second WakeupFD = %d, %v; want %d", fd2, err, fd)
			}

			// Armed: the peer answers 200 ms later, while this process
			// sleeps in poll.
			if s := p.iface.EventArm(uct.EventRecv); s != ucs.OK {
				t.Fatalf("EventArm on an empty FIFO = %v", s)
			}
			p.send(func() ucs.Status { return p.ep.AMShort(amLateEcho, 200, []byte("wake")) })
			if !waitReadable(t, fd, pollTimeout) {
				t.Fatal("the eventfd did not become readable")
			}
			if v := readEvent(t, fd); v != 1 {
				t.Errorf("eventfd counter %d, want 1", v)
			}
			if atomic.LoadUint32(p.iface.rx.armed) != 0 {
				t.Error("still armed after the wakeup")
			}
			if r := p.wait(); r.id != amEchoReply || string(r.data) != "wake" {
				t.Fatalf("reply %d %q", r.id, r.data)
			}

			// A message waits in the FIFO: EventArm is busy, and arms nothing.
			p.send(func() ucs.Status { return p.ep.AMShort(amEcho, 0, []byte("busy")) })
			waitQueued(t, p.iface)
			for _, ev := range []uint32{uct.EventRecv, uct.EventRecvSig, uct.EventRecv | uct.EventSendComp} {
				if s := p.iface.EventArm(ev); s != ucs.ErrBusy {
					t.Errorf("EventArm(%#x) with a queued message = %v, want ErrBusy", ev, s)
				}
			}
			if atomic.LoadUint32(p.iface.rx.armed) != 0 {
				t.Error("armed by a busy EventArm")
			}
			if r := p.wait(); string(r.data[8:]) != "busy" {
				t.Fatalf("reply %q", r.data)
			}

			// Not armed: a message writes nothing to the eventfd.
			seq := atomic.LoadUint32(p.iface.rx.wseq)
			p.send(func() ucs.Status { return p.ep.AMShort(amEcho, 0, []byte("quiet")) })
			waitQueued(t, p.iface)
			if waitReadable(t, fd, 100*time.Millisecond) {
				t.Error("the eventfd became readable while not armed")
			}
			if got := atomic.LoadUint32(p.iface.rx.wseq); got != seq {
				t.Errorf("wakeup sequence %d -> %d while not armed", seq, got)
			}
			if r := p.wait(); string(r.data[8:]) != "quiet" {
				t.Fatalf("reply %q", r.data)
			}
		})
	}
}

// loopEP returns an EP of i to itself.
func loopEP(tb testing.TB, i *Iface) *EP {
	tb.Helper()
	ep, err := i.EPCreate(&uct.EPParams{DeviceAddr: i.DeviceAddress(), IfaceAddr: i.Address()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(ep.Destroy)
	return ep.(*EP)
}

// TestEventArm checks the statuses of EventArm and which sends wake an armed
// iface, in one process (the EP sends to its own iface): armed for
// EventRecv, every message; for EventRecvSig alone, only a bcopy or zcopy
// sent with uct.SendFlagSignaled. The sender decides, before its send
// returns: the wakeup sequence word moved or not.
func TestEventArm(t *testing.T) {
	send := []struct {
		name string
		f    func(e *EP, flags uint32) ucs.Status
		sig  bool // the send carries flags
	}{
		{"short", func(e *EP, _ uint32) ucs.Status { return e.AMShort(1, 7, []byte("x")) }, false},
		{"bcopy", func(e *EP, flags uint32) ucs.Status {
			_, s := e.AMBcopy(1, func(d []byte) int { return copy(d, "x") }, flags)
			return s
		}, true},
		{"bcopy-void", func(e *EP, flags uint32) ucs.Status {
			if _, s := e.AMBcopy(1, func([]byte) int { return -1 }, flags); s != ucs.ErrInvalidParam {
				return s
			}
			return ucs.OK
		}, false},
		{"zcopy", func(e *EP, flags uint32) ucs.Status {
			return e.AMZcopy(1, []byte("h"), []uct.IOV{{Buffer: []byte("x")}}, flags, nil)
		}, true},
	}
	for _, sc := range send {
		for _, c := range []struct {
			armed, flags uint32
		}{
			{uct.EventRecv, 0},
			{uct.EventRecv, uct.SendFlagSignaled},
			{uct.EventRecvSig, 0},
			{uct.EventRecvSig, uct.SendFlagSignaled},
			{uct.EventRecvSig | uct.EventSendComp, uct.SendFlagSignaled},
		} {
			wake := c.armed&uct.EventRecv != 0 || sc.sig && c.flags != 0
			t.Run(fmt.Sprintf("%s/armed=%#x/flags=%d", sc.name, c.armed, c.flags), func(t *testing.T) {
				i := openTestIface(t)
				ep := loopEP(t, i)
				i.SetAMHandler(1, func(any, []byte, uint32) ucs.Status { return ucs.OK }, nil, uct.CBFlagSync)
				fd, err := i.WakeupFD()
				if err != nil {
					t.Fatal(err)
				}
				if s := i.EventArm(c.armed); s != ucs.OK {
					t.Fatalf("EventArm = %v", s)
				}
				seq := atomic.LoadUint32(i.rx.wseq)
				if s := sc.f(ep, c.flags); s != ucs.OK {
					t.Fatalf("send: %v", s)
				}
				if woke := atomic.LoadUint32(i.rx.wseq) != seq; woke != wake {
					t.Fatalf("woken %v, want %v", woke, wake)
				}
				if a := atomic.LoadUint32(i.rx.armed); (a == 0) != wake {
					t.Errorf("armed word %#x after the send", a)
				}
				if wake {
					if !waitReadable(t, fd, pollTimeout) {
						t.Fatal("woken, but the eventfd did not become readable")
					}
					if v := readEvent(t, fd); v != 1 {
						t.Errorf("eventfd counter %d, want 1", v)
					}
				}
				if n := i.Progress(); n != 1 {
					t.Errorf("Progress = %d, want 1", n)
				}
				if !wake {
					return
				}
				// Disarmed by the wakeup: the next message writes nothing.
				seq = atomic.LoadUint32(i.rx.wseq)
				if s := sc.f(ep, c.flags); s != ucs.OK {
					t.Fatalf("send: %v", s)
				}
				if atomic.LoadUint32(i.rx.wseq) != seq {
					t.Error("a second wakeup without arming")
				}
			})
		}
	}

	i := openTestIface(t)
	for _, c := range []struct {
		events uint32
		want   ucs.Status
		armed  uint32
	}{
		// The mask's cases are uct.ArmedRecvEvents's (TestArmedRecvEvents).
		{uct.EventSendComp, ucs.OK, 0},
		{uct.EventRecv | 1<<31, ucs.ErrInvalidParam, 0},
		{uct.EventRecvSig | uct.EventSendComp, ucs.OK, uct.EventRecvSig},
	} {
		atomic.StoreUint32(i.rx.armed, 0)
		if s := i.EventArm(c.events); s != c.want {
			t.Errorf("EventArm(%#x) = %v, want %v", c.events, s, c.want)
		}
		if a := atomic.LoadUint32(i.rx.armed); a != c.armed {
			t.Errorf("EventArm(%#x): armed %d, want %d", c.events, a, c.armed)
		}
	}
}

// TestWakeupClose checks that Close stops the helper goroutine and that a
// closed iface refuses WakeupFD and EventArm.
func TestWakeupClose(t *testing.T) {
	for _, c := range []struct {
		name  string
		start func(i *Iface) error
	}{
		{"WakeupFD", func(i *Iface) error { _, err := i.WakeupFD(); return err }},
		{"EventArm", func(i *Iface) error { return i.EventArm(uct.EventRecv).Err() }},
		{"none", func(*Iface) error { return nil }},
	} {
		t.Run(c.name, func(t *testing.T) {
			i := openTestIface(t)
			if err := c.start(i); err != nil {
				t.Fatal(err)
			}
			done := i.wake.done
			i.Close()
			if done != nil {
				select {
				case <-done:
				case <-time.After(pollTimeout):
					t.Fatal("the wakeup helper did not exit on Close")
				}
			}
			if _, err := i.WakeupFD(); !errors.Is(err, ucs.ErrNoDevice) {
				t.Errorf("WakeupFD after Close: %v, want ErrNoDevice", err)
			}
			if s := i.EventArm(uct.EventRecv); s != ucs.ErrNoDevice {
				t.Errorf("EventArm after Close = %v, want ErrNoDevice", s)
			}
			i.Close() // twice is harmless
		})
	}
}

// TestWakeupFormat checks the FIFO header words and that a FIFO of the
// previous format is refused.
func TestWakeupFormat(t *testing.T) {
	if fifoArmedOff < fifoTailOff+cellAlign || fifoWseqOff+4 > fifoHeaderSize || fifoArmedOff%4 != 0 || fifoWseqOff%4 != 0 {
		t.Fatal("armed and wseq overlap the tail line or the cells, or are misaligned")
	}
	i := openTestIface(t)
	base := unsafe.Pointer(i.rx.tail)
	base = unsafe.Add(base, -fifoTailOff)
	n, stride := int(i.rx.mask+1), int(i.rx.stride)
	if err := checkFIFO(base, n, stride); err != nil {
		t.Fatal(err)
	}
	atomic.StoreUint64((*uint64)(base), 0x31304f4649465347) // "GSFIFO01"
	defer atomic.StoreUint64((*uint64)(base), fifoMagic)
	if err := checkFIFO(base, n, stride); !errors.Is(err, ucs.ErrInvalidAddr) {
		t.Errorf("a format 01 FIFO: %v, want ErrInvalidAddr", err)
	}
}
