package ucp

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucs"
)

// readable reports whether fd is readable now (a poll that does not wait).
func readable(t testing.TB, fd int) bool {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			t.Fatalf("poll: %v", err)
		}
		return n > 0 && fds[0].Revents&unix.POLLIN != 0
	}
}

// waitReadable blocks until fd is readable, failing the test after
// hangLimit.
func waitReadable(t testing.TB, fd int) {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, int(hangLimit.Milliseconds()))
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			t.Fatalf("descriptor %d not readable after %v: %v", fd, hangLimit, err)
		}
		return
	}
}

// armQuiet progresses w until Arm succeeds.
func armQuiet(t testing.TB, w *Worker) {
	t.Helper()
	var err error
	progressUntil(t, w, "Arm to succeed", func() bool {
		err = w.Arm()
		if err != nil && !errors.Is(err, ucs.ErrBusy) {
			t.Fatalf("Arm: %v", err)
		}
		return err == nil
	})
}

// wakePair returns a context with FeatureWakeup, a sending worker and a
// receiving one made with params, and a pair from the sender to the
// receiver whose operations go through the software protocols (active
// messages into the receiver).
func wakePair(t *testing.T, params *WorkerParams) (a, b *Worker, p pair) {
	t.Helper()
	c := newContextWith(t, FeatureWakeup)
	a = newWorker(t, c)
	b, err := c.NewWorker(params)
	if err != nil {
		t.Fatalf("NewWorker: %v", err)
	}
	t.Cleanup(b.Destroy)
	aAddr, _ := a.Address()
	back, err := b.NewEndpoint(new(EPParams).SetAddress(aAddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { back.Close(CloseModeForce) })
	p = newPair(t, c, a, b, 1<<16)
	forceSoftware(p.rkey)
	t.Cleanup(func() { p.ep.Close(CloseModeForce) }) // b is not progressed at the end
	return a, b, p
}

// TestWakeupMessage arms a worker, sends it a message over shared memory
// and over tcp, and checks that Wait returns, that the event descriptor
// became readable, and that Arm says events are pending until the worker
// progressed them.
func TestWakeupMessage(t *testing.T) {
	for _, tt := range []struct {
		name, tls string
		events    uint32
	}{
		{"sm", "sm,self", 0},
		{"sm/edge", "sm,self", WakeupRX | WakeupEdge},
		{"tcp", "tcp,self", 0},
		{"tcp/rma", "tcp,self", WakeupRMA},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("UCX_TLS", tt.tls)
			params := new(WorkerParams)
			if tt.events != 0 {
				params.SetEvents(tt.events)
			}
			_, b, p := wakePair(t, params)
			if want := map[string]string{"sm,self": "posix", "tcp,self": "tcp"}[tt.tls]; p.ep.am.wi.rsc.tl.TLName != want {
				t.Fatalf("active messages go over %s, want %s", p.ep.am.wi.rsc.tl.TLName, want)
			}
			efd, err := b.EventFD()
			if err != nil {
				t.Fatalf("EventFD: %v", err)
			}
			armQuiet(t, b)
			if readable(t, efd) {
				t.Fatal("event descriptor readable right after a successful Arm, with nothing sent")
			}
			msg := []byte("wake up")
			if _, err := p.ep.PutNBX(msg, p.base+8, p.rkey, nil); err != nil {
				t.Fatal(err)
			}
			waitReadable(t, efd)
			if err := b.Arm(); !errors.Is(err, ucs.ErrBusy) {
				t.Errorf("Arm with an event not progressed: %v, want ErrBusy", err)
			}
			progressUntil(t, b, "the message to be applied", func() bool { return bytes.Equal(p.mem[8:8+len(msg)], msg) })
			// Wait returns for a message, whether it comes before or after
			// Wait armed the worker.
			armQuiet(t, b)
			waited := make(chan error, 1)
			go func() { waited <- b.Wait() }()
			msg = []byte("wake up again")
			if _, err := p.ep.PutNBX(msg, p.base+8, p.rkey, nil); err != nil {
				t.Fatal(err)
			}
			if err := noHang(t, "Wait for a message", func() error { return <-waited }); err != nil {
				t.Fatalf("Wait: %v", err)
			}
			progressUntil(t, b, "the second message to be applied", func() bool { return bytes.Equal(p.mem[8:8+len(msg)], msg) })
			armQuiet(t, b)
		})
	}
}

// TestWakeupSignal checks Signal: it makes Arm busy once, and wakes Wait,
// from any goroutine.
func TestWakeupSignal(t *testing.T) {
	c := newContextWith(t, FeatureWakeup)
	w, err := c.NewWorker(new(WorkerParams).SetThreadMode(ucs.ThreadModeMulti))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Destroy()
	armQuiet(t, w)
	if err := w.Signal(); err != nil {
		t.Fatalf("Signal: %v", err)
	}
	if err := w.Arm(); err != ucs.ErrBusy {
		t.Errorf("Arm after Signal: %v, want ucs.ErrBusy", err)
	}
	if err := w.Arm(); err != nil {
		t.Errorf("second Arm after Signal: %v, want nil", err)
	}
	for round := range 3 {
		waited := make(chan error, 1)
		go func() { waited <- w.Wait() }()
		go w.Signal()
		if err := noHang(t, "Wait for Signal", func() error { return <-waited }); err != nil {
			t.Fatalf("round %d: Wait: %v", round, err)
		}
		armQuiet(t, w)
	}
	// Many signallers at once.
	done := make(chan struct{})
	for range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 100 {
				if err := w.Signal(); err != nil {
					t.Errorf("Signal: %v", err)
					return
				}
			}
		}()
	}
	for range 8 {
		<-done
	}
	if err := w.Wait(); err != nil {
		t.Errorf("Wait after signals: %v", err)
	}
	w.Destroy()
	if err := w.Signal(); err == nil {
		t.Error("Signal of a destroyed worker succeeded")
	}
}

// TestWakeupExternalFD has the worker report on an epoll descriptor of the
// test's: EventFD is unsupported, a message makes the descriptor report an
// event with the worker's user data, and Destroy takes the worker's
// descriptors out of it.
func TestWakeupExternalFD(t *testing.T) {
	t.Setenv("UCX_TLS", "sm,self")
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(epfd)
	const user = uint64(0xfeed_0000_beef)
	_, b, p := wakePair(t, new(WorkerParams).SetEventFD(epfd).SetUserData(user))
	if _, err := b.EventFD(); !errors.Is(err, ucs.ErrUnsupported) {
		t.Errorf("EventFD with an external descriptor: %v, want ErrUnsupported", err)
	}
	armQuiet(t, b)
	var evs [8]unix.EpollEvent
	if n, _ := unix.EpollWait(epfd, evs[:], 0); n != 0 {
		t.Fatalf("%d events right after a successful Arm, with nothing sent", n)
	}
	if _, err := p.ep.PutNBX([]byte("x"), p.base, p.rkey, nil); err != nil {
		t.Fatal(err)
	}
	var n int
	noHang(t, "an event on the external descriptor", func() error {
		for {
			if n, err = unix.EpollWait(epfd, evs[:], -1); err != unix.EINTR {
				return err
			}
		}
	})
	if n < 1 {
		t.Fatalf("EpollWait: %d events, %v", n, err)
	}
	if got := uint64(uint32(evs[0].Fd)) | uint64(uint32(evs[0].Pad))<<32; got != user {
		t.Errorf("event data %#x, want the worker's user data %#x", got, user)
	}
	if err := b.Wait(); err != nil { // events pending: returns at once
		t.Errorf("Wait: %v", err)
	}
	b.Destroy()
	if n, _ := unix.EpollWait(epfd, evs[:], 0); n != 0 {
		t.Errorf("%d events on the external descriptor after Destroy", n)
	}
}

// TestWorkerParams checks the validation and defaults of the worker
// parameters this package added setters for.
func TestWorkerParams(t *testing.T) {
	plain := newContext(t)
	wake := newContextWith(t, FeatureWakeup)
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	for _, tt := range []struct {
		name   string
		ctx    *Context
		params *WorkerParams
	}{
		{"events", wake, new(WorkerParams).SetEvents(1 << 5)},
		{"event fd not epoll", wake, new(WorkerParams).SetEventFD(efd)},
		{"event fd -1", wake, new(WorkerParams).SetEventFD(-1)},
		{"flags", plain, new(WorkerParams).SetFlags(2)},
		{"AM alignment 3", plain, new(WorkerParams).SetAMAlignment(3)},
		{"AM alignment 0", plain, new(WorkerParams).SetAMAlignment(0)},
		{"CPU -1", plain, new(WorkerParams).SetCPUMask([]int{0, -1})},
		{"CPU 1024", plain, new(WorkerParams).SetCPUMask([]int{1024})},
		{"thread mode", plain, new(WorkerParams).SetThreadMode(ucs.ThreadMode(9))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if w, err := tt.ctx.NewWorker(tt.params); !errors.Is(err, ucs.ErrInvalidParam) {
				t.Errorf("NewWorker: %v, want ErrInvalidParam", err)
				if err == nil {
					w.Destroy()
				}
			}
		})
	}
	w, err := plain.NewWorker(new(WorkerParams).SetFlags(WorkerFlagIgnoreRequestLeak).SetAMAlignment(64).SetCPUMask([]int{0}))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Destroy()
	if w.AMAlignment() != 64 {
		t.Errorf("AMAlignment %d, want 64", w.AMAlignment())
	}
	if d := newWorker(t, plain); d.AMAlignment() != 1 {
		t.Errorf("default AMAlignment %d, want 1", d.AMAlignment())
	}
	// Without FeatureWakeup the wakeup calls are invalid, as in UCX.
	for name, call := range map[string]func() error{
		"EventFD": func() error { _, err := w.EventFD(); return err },
		"Arm":     w.Arm,
		"Wait":    w.Wait,
		"Signal":  w.Signal,
	} {
		if err := call(); !errors.Is(err, ucs.ErrInvalidParam) {
			t.Errorf("%s without FeatureWakeup: %v, want ErrInvalidParam", name, err)
		}
	}
}

// TestWorkerCPUMaskTransports checks that the CPU mask reaches the
// goroutines of the worker's transports: tcp's accepting and polling
// goroutines, the wakeup goroutine of shared memory. It counts the
// process's threads whose affinity is exactly the mask, before and after
// the worker is created.
func TestWorkerCPUMaskTransports(t *testing.T) {
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		t.Skipf("skipped: sched_getaffinity: %v", err)
	}
	if allowed.Count() < 2 {
		t.Skip("skipped: one CPU allowed: a mask cannot tell bound threads from the others")
	}
	cpu := -1
	for i := range maxCPU {
		if allowed.IsSet(i) {
			cpu = i
		}
	}
	var mask unix.CPUSet
	mask.Set(cpu)
	// bound returns the threads whose affinity is the mask.
	bound := func() map[int]bool {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			t.Skipf("skipped: %v", err)
		}
		tids := map[int]bool{}
		for _, task := range tasks {
			tid, err := strconv.Atoi(task.Name())
			var set unix.CPUSet
			if err == nil && unix.SchedGetaffinity(tid, &set) == nil && set == mask {
				tids[tid] = true
			}
		}
		return tids
	}
	for _, tc := range []struct {
		name     string
		tls      string
		features Feature
		want     int // new threads bound at least
	}{
		{"tcp accept and poller", "tcp", 0, 2},
		{"sm wakeup", "posix", FeatureWakeup, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newContextCfg(t, FeatureRMA|FeatureAM|tc.features, "TLS", tc.tls)
			// Threads bound before (a bound goroutine that ran on the
			// main thread leaves it parked for good, bound) do not count.
			before := bound()
			w, err := c.NewWorker(new(WorkerParams).SetCPUMask([]int{cpu}))
			if err != nil {
				t.Fatal(err)
			}
			defer w.Destroy()
			waitFor(t, fmt.Sprintf("%d new threads bound to CPU %d", tc.want, cpu), func() bool {
				n := 0
				for tid := range bound() {
					if !before[tid] {
						n++
					}
				}
				return n >= tc.want
			})
		})
	}
}

// TestWorkerCPUMask checks that the worker's own goroutine (the keepalive
// of its PEER endpoints) runs bound to the CPU mask.
func TestWorkerCPUMask(t *testing.T) {
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		t.Skipf("sched_getaffinity: %v", err)
	}
	cpu := -1
	for i := range maxCPU {
		if allowed.IsSet(i) {
			cpu = i
		}
	}
	if allowed.Count() < 2 {
		t.Logf("only CPU %d is allowed: the mask cannot narrow the affinity, only keep it", cpu)
	}
	c := newContext(t)
	w, err := c.NewWorker(new(WorkerParams).SetCPUMask([]int{cpu}))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Destroy()
	b := newWorker(t, c)
	addr, _ := b.Address()
	ep, err := w.NewEndpoint(new(EPParams).SetAddress(addr).SetErrMode(ErrHandlingModePeer))
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close(CloseModeForce)
	waitFor(t, "the keepalive goroutine to apply the mask", func() bool { return w.fail.kaCPUs.Load() != nil })
	if got := w.fail.kaCPUs.Load(); got.Count() != 1 || !got.IsSet(cpu) {
		t.Errorf("keepalive thread affinity: %d CPUs, CPU %d set: %v; want only CPU %d", got.Count(), cpu, got.IsSet(cpu), cpu)
	}
	var mine unix.CPUSet
	if err := unix.SchedGetaffinity(0, &mine); err == nil && mine != allowed {
		t.Error("the CPU mask leaked to the test's thread")
	}
}
