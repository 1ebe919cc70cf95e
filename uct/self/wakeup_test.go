package self

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// pollTimeout bounds every wait for a wakeup, so that a lost one fails the
// test instead of hanging it.
const pollTimeout = 30 * time.Second

// readable polls fd for up to timeout and reports whether it became
// readable.
func readable(t *testing.T, fd int, timeout time.Duration) bool {
	t.Helper()
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
			t.Fatalf("poll: %v", err)
		}
		return n == 1 && pfd[0].Revents&unix.POLLIN != 0
	}
}

// counter reads the eventfd: its counter, or 0 when it was not readable.
func counter(t *testing.T, fd int) uint64 {
	t.Helper()
	var b [8]byte
	n, err := unix.Read(fd, b[:])
	if err == unix.EAGAIN {
		return 0
	}
	if err != nil || n != 8 {
		t.Fatalf("read eventfd: %d, %v", n, err)
	}
	return binary.LittleEndian.Uint64(b[:])
}

// TestWakeup: an armed iface sleeping in poll on its eventfd is woken by a
// message that another goroutine sends, once, by each kind of send.
func TestWakeup(t *testing.T) {
	for _, c := range []struct {
		name string
		send func(ep uct.EP) ucs.Status
	}{
		{"short", func(ep uct.EP) ucs.Status { return ep.AMShort(1, 7, []byte("x")) }},
		{"bcopy", func(ep uct.EP) ucs.Status {
			_, s := ep.AMBcopy(1, func(d []byte) int { return copy(d, "xxxxxxxxx") }, 0)
			return s
		}},
		{"zcopy", func(ep uct.EP) ucs.Status {
			return ep.AMZcopy(1, []byte("xxxxxxxx"), []uct.IOV{{Buffer: []byte("x")}}, 0, nil)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			i, ep, _ := setup(t, make([]byte, 64))
			var got [][]byte
			i.SetAMHandler(1, func(_ any, d []byte, _ uint32) ucs.Status {
				got = append(got, append([]byte(nil), d...))
				return ucs.OK
			}, nil, uct.CBFlagSync)
			fd, err := i.WakeupFD()
			if err != nil {
				t.Fatal(err)
			}
			if fd2, err := i.WakeupFD(); fd2 != fd || err != nil {
				t.Fatalf("second WakeupFD = %d, %v; want %d", fd2, err, fd)
			}
			if s := i.EventArm(uct.EventRecv); s != ucs.OK {
				t.Fatalf("EventArm = %v", s)
			}
			sent := make(chan ucs.Status, 1)
			go func() {
				time.Sleep(50 * time.Millisecond)
				sent <- c.send(ep)
			}()
			if !readable(t, fd, pollTimeout) {
				t.Fatal("the eventfd did not become readable")
			}
			if s := <-sent; s != ucs.OK {
				t.Fatalf("send: %v", s)
			}
			if v := counter(t, fd); v != 1 {
				t.Errorf("eventfd counter %d, want 1", v)
			}
			if n := i.Progress(); n != 1 || len(got) != 1 {
				t.Fatalf("Progress = %d, %d messages; want 1", n, len(got))
			}

			// Disarmed by the wakeup: the next message writes nothing.
			if s := c.send(ep); s != ucs.OK {
				t.Fatal(s)
			}
			if counter(t, fd) != 0 {
				t.Error("the eventfd was written while not armed")
			}
			// A message is queued: EventArm is busy and arms nothing.
			if s := i.EventArm(uct.EventRecvSig); s != ucs.ErrBusy {
				t.Errorf("EventArm with a queued message = %v, want ErrBusy", s)
			}
			if s := c.send(ep); s != ucs.OK {
				t.Fatal(s)
			}
			if counter(t, fd) != 0 {
				t.Error("the eventfd was written after a busy EventArm")
			}
			if n := i.Progress(); n != 2 {
				t.Errorf("Progress = %d, want 2", n)
			}
		})
	}
}

// TestWakeupSignaled: armed for EventRecv, every message wakes the iface;
// armed for EventRecvSig alone, only a bcopy or zcopy sent with
// uct.SendFlagSignaled. The eventfd is written before the send returns.
func TestWakeupSignaled(t *testing.T) {
	send := []struct {
		name string
		f    func(ep uct.EP, flags uint32) ucs.Status
		sig  bool // the send carries flags
	}{
		{"short", func(ep uct.EP, _ uint32) ucs.Status { return ep.AMShort(1, 7, []byte("x")) }, false},
		{"bcopy", func(ep uct.EP, flags uint32) ucs.Status {
			_, s := ep.AMBcopy(1, func(d []byte) int { return copy(d, "x") }, flags)
			return s
		}, true},
		{"zcopy", func(ep uct.EP, flags uint32) ucs.Status {
			return ep.AMZcopy(1, []byte("h"), []uct.IOV{{Buffer: []byte("x")}}, flags, nil)
		}, true},
	}
	for _, sc := range send {
		for _, c := range []struct{ armed, flags uint32 }{
			{uct.EventRecv, 0},
			{uct.EventRecv, uct.SendFlagSignaled},
			{uct.EventRecvSig, 0},
			{uct.EventRecvSig, uct.SendFlagSignaled},
			{uct.EventRecvSig | uct.EventSendComp, uct.SendFlagSignaled},
		} {
			wake := c.armed&uct.EventRecv != 0 || sc.sig && c.flags != 0
			t.Run(fmt.Sprintf("%s/armed=%#x/flags=%d", sc.name, c.armed, c.flags), func(t *testing.T) {
				i, ep, _ := setup(t, make([]byte, 64))
				i.SetAMHandler(1, func(any, []byte, uint32) ucs.Status { return ucs.OK }, nil, uct.CBFlagSync)
				fd, err := i.WakeupFD()
				if err != nil {
					t.Fatal(err)
				}
				if s := i.EventArm(c.armed); s != ucs.OK {
					t.Fatalf("EventArm = %v", s)
				}
				if s := sc.f(ep, c.flags); s != ucs.OK {
					t.Fatalf("send: %v", s)
				}
				if v := counter(t, fd); (v == 1) != wake || v > 1 {
					t.Errorf("eventfd counter %d, want woken %v", v, wake)
				}
				if n := i.Progress(); n != 1 {
					t.Errorf("Progress = %d, want 1", n)
				}
			})
		}
	}
}

// TestEventArm checks the statuses of EventArm, and that Close closes the
// descriptor and refuses later calls.
func TestEventArm(t *testing.T) {
	i, _, _ := setup(t, make([]byte, 64))
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
		i.mu.Lock()
		i.armed = 0
		i.mu.Unlock()
		if s := i.EventArm(c.events); s != c.want {
			t.Errorf("EventArm(%#x) = %v, want %v", c.events, s, c.want)
		}
		i.mu.Lock()
		armed := i.armed
		i.mu.Unlock()
		if armed != c.armed {
			t.Errorf("EventArm(%#x): armed %#x, want %#x", c.events, armed, c.armed)
		}
	}
	if !i.hasWakeFD {
		t.Fatal("EventArm did not create the eventfd")
	}
	i.Close()
	if i.hasWakeFD || i.armed != 0 {
		t.Error("Close left the eventfd open or the iface armed")
	}
	if _, err := i.WakeupFD(); !errors.Is(err, ucs.ErrNoDevice) {
		t.Errorf("WakeupFD after Close: %v, want ErrNoDevice", err)
	}
	if s := i.EventArm(uct.EventRecv); s != ucs.ErrNoDevice {
		t.Errorf("EventArm after Close = %v, want ErrNoDevice", s)
	}
}
