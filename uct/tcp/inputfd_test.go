package tcp

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// readable polls fd, waiting up to ms milliseconds.
func readable(t *testing.T, fd, ms int) bool {
	t.Helper()
	for {
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(p, ms)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			t.Fatalf("poll: %v", err)
		}
		return n > 0 && p[0].Revents&unix.POLLIN != 0
	}
}

// TestInputFD: the iface's InputFD (uct.InputPoller) polls readable once
// a frame came for Progress to read, and no longer once Progress read
// it: a goroutine that sleeps in poll(2) on it is woken by the frame, and
// does not spin on input already taken. The poller reads nothing here
// (a passive delay of 10s), so Progress is the one reader.
func TestInputFD(t *testing.T) {
	md := testMD(t)
	target := openIface(t, md, nil, "PASSIVE_DELAY=10s")
	var ip uct.InputPoller = target
	fd := ip.InputFD()
	got := 0
	target.SetAMHandler(5, func(any, []byte, uint32) ucs.Status { got++; return ucs.OK }, nil, uct.CBFlagSync)
	src := openIface(t, md, nil)
	ep := connect(t, src, target)
	progressUntil(t, func() bool { return target.Progress() == 0 && !readable(t, fd, 0) }, target)
	for k := 1; k <= 3; k++ {
		if st := ep.AMShort(5, uint64(k), nil); st != ucs.OK {
			t.Fatalf("AMShort: %v", st)
		}
		src.Progress() // out of a batch
		if !readable(t, fd, 60000) {
			t.Fatalf("message %d: InputFD not readable a minute after it was sent", k)
		}
		progressUntil(t, func() bool { return got == k }, target)
		if readable(t, fd, 0) {
			t.Fatalf("message %d: InputFD still readable after Progress read it", k)
		}
	}
}
