package rpc_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/goshmem/goshmem/bootstrap"
	"github.com/goshmem/goshmem/rpc"
	"github.com/goshmem/goshmem/shmem"
	"github.com/goshmem/goshmem/shmemtest"
)

// opts are those of the package's jobs: shared, 2 PEs (and 4 in the full
// matrices), over sm and tcp.
var opts = shmemtest.Options{Shared: true, NPs: []int{2, 4}, QuickNPs: []int{2}}

// run runs body in every PE of the package's jobs, between rpc.Start and
// rpc.Stop.
func run(t *testing.T, body func(t *testing.T, me, n int)) {
	t.Helper()
	shmemtest.RunWith(t, opts, func(t *testing.T) {
		if err := rpc.Start(rpc.Options{}); err != nil {
			t.Fatal(err)
		}
		body(t, shmem.MyPE(), shmem.NPEs())
		rpc.Stop()
	})
}

type point struct{ X, Y int32 }

type record struct {
	Name string
	Tags map[string]int
}

var (
	square = rpc.Register("square", rpc.Inline, func(src int, x int64) (int64, error) { return x * x, nil })
	whoami = rpc.Register("whoami", rpc.Goroutine, func(src int, _ struct{}) ([2]int, error) {
		time.Sleep(time.Millisecond) // a handler that blocks
		return [2]int{shmem.MyPE(), src}, nil
	})
	sum = rpc.Register("sum", rpc.Inline, func(_ int, xs []float64) (float64, error) {
		s := 0.0
		for _, x := range xs {
			s += x
		}
		return s, nil
	})
	reverse = rpc.Register("reverse", rpc.Inline, func(_ int, ps []point) ([]point, error) {
		out := make([]point, len(ps))
		for i, p := range ps {
			out[len(ps)-1-i] = p
		}
		return out, nil
	})
	describe = rpc.Register("describe", rpc.Goroutine, func(src int, r record) (string, error) {
		return fmt.Sprintf("%s:%d on %d from %d", r.Name, r.Tags["k"], shmem.MyPE(), src), nil
	})
	// forward calls square on the next PE and replies with its result
	// plus one, once that came: a handler that calls and replies later.
	forward = rpc.RegisterDeferred("forward", func(_ int, x int64, r *rpc.Reply[int64]) {
		next := (shmem.MyPE() + 1) % shmem.NPEs()
		rpc.Then(square.Call(next, x), func(v int64, err error) (struct{}, error) {
			r.Send(v+1, err)
			return struct{}{}, nil
		})
	})
	counter int64
	add     = rpc.Register("add", rpc.Inline, func(_ int, d int64) (struct{}, error) { counter += d; return struct{}{}, nil })
	// slowCounter is counter for addSlow, a Goroutine handler that takes
	// its time: Barrier waits until it returned.
	slowCounter atomic.Int64
	addSlow     = rpc.Register("addSlow", rpc.Goroutine, func(_ int, d int64) (struct{}, error) {
		time.Sleep(2 * time.Millisecond)
		slowCounter.Add(d)
		return struct{}{}, nil
	})
	fail  = rpc.Register("fail", rpc.Inline, func(_ int, _ int32) (int32, error) { return 0, errors.New("no such thing") })
	boom  = rpc.Register("boom", rpc.Goroutine, func(_ int, _ int32) (int32, error) { panic("kaboom") })
	never *rpc.Reply[int32]
	hold  = rpc.RegisterDeferred("hold", func(_ int, _ int32, r *rpc.Reply[int32]) { never = r })
)

func TestCall(t *testing.T) {
	run(t, func(t *testing.T, me, n int) {
		next := (me + 1) % n
		if v, err := square.Call(next, int64(me+3)).Wait(); err != nil || v != int64((me+3)*(me+3)) {
			t.Errorf("square: %v, %v", v, err)
		}
		for i := range int64(3) { // reusing the package's futures
			if v, err := square.Invoke(next, i); err != nil || v != i*i {
				t.Errorf("Invoke square(%d): %v, %v", i, v, err)
			}
		}
		if _, err := fail.Invoke(next, 1); err == nil {
			t.Error("Invoke of a failing handler: no error")
		}
		if v, err := whoami.Call(next, struct{}{}).Wait(); err != nil || v != [2]int{next, me} {
			t.Errorf("whoami: %v, %v", v, err)
		}
		if v, err := sum.Call(next, []float64{1, 2, 3.5}).Wait(); err != nil || v != 6.5 {
			t.Errorf("sum: %v, %v", v, err)
		}
		if v, err := sum.Call(next, nil).Wait(); err != nil || v != 0 {
			t.Errorf("sum of nothing: %v, %v", v, err)
		}
		big := make([]point, 100000) // larger than a message's header: goes as data
		for i := range big {
			big[i] = point{int32(i), -int32(i)}
		}
		if v, err := reverse.Call(next, big).Wait(); err != nil || len(v) != len(big) || v[0] != big[len(big)-1] || v[len(v)-1] != big[0] {
			t.Errorf("reverse: %d points, %v", len(v), err)
		}
		want := fmt.Sprintf("x:7 on %d from %d", next, me)
		if v, err := describe.Call(next, record{"x", map[string]int{"k": 7}}).Wait(); err != nil || v != want {
			t.Errorf("describe: %q, %v, want %q", v, err, want)
		}
		if v, err := forward.Call(next, 5).Wait(); err != nil || v != 26 {
			t.Errorf("forward: %v, %v", v, err)
		}
		// A chain and a select over several.
		f := rpc.Then(square.Call(me, 4), func(v int64, err error) (string, error) { return fmt.Sprint(v), err })
		g := whoami.Call(next, struct{}{})
		if i := rpc.WaitAny(f, g); i < 0 || (!f.Ready() && !g.Ready()) {
			t.Errorf("WaitAny: %d", i)
		}
		if v, err := f.Wait(); err != nil || v != "16" {
			t.Errorf("Then: %q, %v", v, err)
		}
		g.Wait()
		select {
		case <-g.Done():
		default:
			t.Error("Done not closed after Wait")
		}
		vals, err := rpc.WaitAll(square.CallTeam(shmem.TeamWorld, 3))
		if err != nil || len(vals) != n || vals[n-1] != 9 {
			t.Errorf("CallTeam: %v, %v", vals, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if v, err := square.Call(next, 2).WaitContext(ctx); err != nil || v != 4 {
			t.Errorf("WaitContext: %v, %v", v, err)
		}
	})
}

// TestFutureTaken: a future gives its result once; a spent handle (one
// whose result was taken, or the zero Future) is ready, its Done is
// closed, and its waits and Then get ErrTaken, never the result of a
// later call that reuses the future's state.
func TestFutureTaken(t *testing.T) {
	run(t, func(t *testing.T, me, n int) {
		next := (me + 1) % n
		f := square.Call(next, 3)
		if v, err := f.Wait(); err != nil || v != 9 {
			t.Fatalf("square: %v, %v", v, err)
		}
		g := square.Call(next, 4) // takes f's state again, as a rule
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, c := range []struct {
			name string
			f    rpc.Future[int64]
		}{{"taken", f}, {"zero", rpc.Future[int64]{}}} {
			if !c.f.Ready() {
				t.Errorf("%s: not ready", c.name)
			}
			select {
			case <-c.f.Done():
			default:
				t.Errorf("%s: Done not closed", c.name)
			}
			if v, err := c.f.Wait(); !errors.Is(err, rpc.ErrTaken) || v != 0 {
				t.Errorf("%s: Wait: %v, %v, want ErrTaken", c.name, v, err)
			}
			if v, err := c.f.WaitContext(ctx); !errors.Is(err, rpc.ErrTaken) || v != 0 {
				t.Errorf("%s: WaitContext: %v, %v, want ErrTaken", c.name, v, err)
			}
			if v, err := c.f.Result(); !errors.Is(err, rpc.ErrTaken) || v != 0 {
				t.Errorf("%s: Result: %v, %v, want ErrTaken", c.name, v, err)
			}
			h := rpc.Then(c.f, func(v int64, err error) (int64, error) { return v + 1, err })
			if v, err := h.Wait(); !errors.Is(err, rpc.ErrTaken) || v != 1 {
				t.Errorf("%s: Then: %v, %v, want 1 and ErrTaken", c.name, v, err)
			}
		}
		if v, err := g.Wait(); err != nil || v != 16 {
			t.Errorf("the later call: %v, %v", v, err)
		}
		// Then takes the result: a wait on the chained future after it
		// gets ErrTaken.
		h := square.Call(next, 5)
		if v, err := rpc.Then(h, func(v int64, err error) (int64, error) { return v, err }).Wait(); err != nil || v != 25 {
			t.Errorf("Then: %v, %v", v, err)
		}
		if _, err := h.Wait(); !errors.Is(err, rpc.ErrTaken) {
			t.Errorf("Wait after Then: %v, want ErrTaken", err)
		}
	})
}

func TestGo(t *testing.T) {
	run(t, func(t *testing.T, me, n int) {
		counter = 0
		slowCounter.Store(0)
		rpc.Barrier()
		for pe := range n {
			for range 10 {
				if err := add.Go(pe, int64(me+1)); err != nil {
					t.Fatal(err)
				}
				if err := addSlow.Go(pe, int64(me+1)); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := rpc.Barrier(); err != nil {
			t.Fatal(err)
		}
		want := int64(10 * n * (n + 1) / 2)
		if counter != want {
			t.Errorf("counter %d, want %d", counter, want)
		}
		if got := slowCounter.Load(); got != want {
			t.Errorf("counter of the Goroutine handler %d, want %d", got, want)
		}
	})
}

func TestAggregator(t *testing.T) {
	run(t, func(t *testing.T, me, n int) {
		counter = 0
		rpc.Barrier()
		g := rpc.NewAggregator(add, 64) // flushed by size many times
		const per = 1000
		for i := range per * n {
			if err := g.Go(i%n, 1); err != nil {
				t.Fatal(err)
			}
		}
		if err := rpc.Barrier(); err != nil { // flushes the rest
			t.Fatal(err)
		}
		if want := int64(per * n); counter != want {
			t.Errorf("counter %d, want %d", counter, want)
		}
		g.Go(me, 5)
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
		if err := rpc.Quiet(); err != nil {
			t.Fatal(err)
		}
		if want := int64(per*n + 5); counter != want {
			t.Errorf("after Close and Quiet: counter %d, want %d", counter, want)
		}
		rpc.Barrier()
	})
}

// mismatch is registered with other argument types on PE 0 than on the
// others, in the body of TestErrors.
var mismatch64 *rpc.Func[int64, int64]

func TestErrors(t *testing.T) {
	run(t, func(t *testing.T, me, n int) {
		next := (me + 1) % n
		if me == 0 {
			if mismatch64 == nil {
				mismatch64 = rpc.Register("mismatch", rpc.Inline, func(_ int, x int64) (int64, error) { return x, nil })
			}
		} else if mismatch64 == nil {
			mismatch64 = new(rpc.Func[int64, int64]) // unused
			rpc.Register("mismatch", rpc.Inline, func(_ int, x int32) (int64, error) { return int64(x), nil })
		}
		rpc.Barrier()
		for _, c := range []struct {
			name, fn string
			err      func() error
			is       error
			says     string
		}{
			{"handler error", "fail", func() error { _, err := fail.Call(next, 1).Wait(); return err }, nil, "no such thing"},
			{"panic", "boom", func() error { _, err := boom.Call(next, 1).Wait(); return err }, rpc.ErrPanic, "kaboom"},
			{"bad PE", "square", func() error { _, err := square.Call(n, 1).Wait(); return err }, nil, "not a PE of the job"},
		} {
			err := c.err()
			var e *rpc.Error
			if !errors.As(err, &e) || e.PE != map[bool]int{true: n, false: next}[c.name == "bad PE"] || e.Func != c.fn {
				t.Errorf("%s: %v, want an *rpc.Error naming %s on PE %d", c.name, err, c.fn, next)
				continue
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("%s: %v is not %v", c.name, err, c.is)
			}
			if !strings.Contains(err.Error(), c.says) {
				t.Errorf("%s: %q does not say %q", c.name, err, c.says)
			}
		}
		if me == 0 && n > 1 {
			_, err := mismatch64.Call(1, 1).Wait()
			var e *rpc.Error
			if !errors.Is(err, rpc.ErrNotRegistered) || !errors.As(err, &e) || e.PE != 1 || e.Func != "mismatch" {
				t.Errorf("mismatched registration: %v", err)
			}
			if !strings.Contains(err.Error(), "mismatch on PE 1") {
				t.Errorf("%q names neither the function nor the PE", err)
			}
		}
		rpc.Barrier()
	})
}

// TestPeerFailure: the calls outstanding to a PE that fails complete with
// ErrPeerFailed naming the PE and the function, and later calls to it fail
// at once. The failure is that of shmem.OnPeerFailure's hook, called here
// as shmem calls it (a PE that really dies makes goshmem-run end the job).
func TestPeerFailure(t *testing.T) {
	run(t, func(t *testing.T, me, n int) {
		if me == 0 {
			rpc.SetSurvive(true)
			f := hold.Call(n-1, 1)
			for range 100 {
				rpc.Progress() // the call reaches PE n-1, which holds it
			}
			if f.Ready() {
				t.Fatal("hold completed")
			}
			if !rpc.PeerFailed(n-1, bootstrap.Failure{Rank: n - 1, Cause: bootstrap.EndCause{Kind: bootstrap.EndExited, Status: 3}}) {
				t.Fatal("the hook did not take charge of the failure")
			}
			for i, f := range []rpc.Future[int32]{f, hold.Call(n-1, 2)} {
				_, err := f.Wait()
				var e *rpc.Error
				if !errors.Is(err, rpc.ErrPeerFailed) || !errors.As(err, &e) || e.PE != n-1 || e.Func != "hold" || !strings.Contains(err.Error(), "exited with status 3") {
					t.Errorf("call %d: %v, want ErrPeerFailed naming hold on PE %d", i, err, n-1)
				}
			}
			rpc.SetSurvive(false)
			if rpc.PeerFailed(n-1, bootstrap.Failure{Rank: n - 1}) {
				t.Error("the hook took charge of a failure without SurvivePeerFailure")
			}
		}
		rpc.Barrier()
		if me == n-1 && never != nil {
			never.Send(0, nil) // its caller dropped it
			never = nil
		}
	})
}

// TestAllocs: arguments and results of pointer-free types travel as their
// memory, with nothing allocated on the sender's side: a call without
// reply, an aggregated one, and a call's round trip, whose future's state
// is reused once its result was taken.
func TestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops what is put back: allocation counts mean nothing under -race")
	}
	run(t, func(t *testing.T, me, n int) {
		if me != 0 { // the others serve, from the barrier
			rpc.Barrier()
			return
		}
		next := (me + 1) % n
		g := rpc.NewAggregator(add, 1<<20) // not flushed in the runs
		xs := []float64{1, 2}
		for _, c := range []struct {
			name string
			max  float64
			fn   func()
		}{
			{"Aggregator.Go", 0, func() { g.Go(next, 1) }},
			// A Call behind it: the transport's buffers (tcp's) come
			// back before the next, as they do in a steady flow.
			{"Go, then a Call", 0, func() { add.Go(next, 1); square.Call(next, 3).Wait() }},
			{"Call", 0, func() { square.Call(next, 3).Wait() }},
			{"Call of a slice", 0, func() { sum.Call(next, xs).Wait() }},
			{"Invoke", 0, func() { square.Invoke(next, 3) }},
		} {
			if a := testing.AllocsPerRun(100, c.fn); a > c.max {
				t.Errorf("%s: %v allocations, want at most %v", c.name, a, c.max)
			}
		}
		g.Close()
		rpc.Barrier()
	})
}

// slow replies from a goroutine of its own, after a computation.
var slow = rpc.Register("slow", rpc.Goroutine, func(_ int, x int64) (int64, error) {
	time.Sleep(20 * time.Millisecond) // PE 1 is in BarrierAll by then, as a rule
	s := int64(0)
	for i := range x {
		s += i
	}
	return s, nil
})

// TestReplyFromBarrier: a Goroutine handler's reply leaves while its PE
// waits in a shmem routine (here shmem.BarrierAll, which its caller joins
// only once the reply came): whatever progresses the PE sends it.
func TestReplyFromBarrier(t *testing.T) {
	run(t, func(t *testing.T, me, n int) {
		if me == 0 {
			if v, err := slow.Call(n-1, 1000).Wait(); err != nil || v != 499500 {
				t.Errorf("slow: %v, %v", v, err)
			}
		}
		shmem.BarrierAll()
	})
}

// TestThreadMultiple: at shmem.ThreadMultiple goroutines call, progress
// and reply at once (Goroutine handlers reply from their own goroutine).
func TestThreadMultiple(t *testing.T) {
	o := opts
	o.Shared = false
	o.ThreadLevel = shmem.ThreadMultiple
	shmemtest.RunWith(t, o, func(t *testing.T) {
		if err := rpc.Start(rpc.Options{}); err != nil {
			t.Fatal(err)
		}
		me, n := shmem.MyPE(), shmem.NPEs()
		next := (me + 1) % n
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 50 {
					x := int64(g*100 + i)
					if v, err := square.Call(next, x).Wait(); err != nil || v != x*x {
						t.Errorf("square(%d): %v, %v", x, v, err)
					}
					if v, err := square.Invoke(next, x+1); err != nil || v != (x+1)*(x+1) {
						t.Errorf("Invoke square(%d): %v, %v", x+1, v, err)
					}
					if v, err := whoami.Call(next, struct{}{}).Wait(); err != nil || v != [2]int{next, me} {
						t.Errorf("whoami: %v, %v", v, err)
					}
					if err := add.Go(next, 1); err != nil {
						t.Error(err)
					}
				}
			}()
		}
		wg.Wait()
		if err := rpc.Barrier(); err != nil {
			t.Fatal(err)
		}
		rpc.Stop()
	})
}

// dies ends its PE, as a PE that fails does, in the middle of a call.
var dies = rpc.Register("dies", rpc.Inline, func(_ int, code int32) (int32, error) {
	os.Exit(int(code))
	return 0, nil
})

// TestPeerDies: a PE really dies (exit status 3, from a handler) while
// another has calls outstanding to it. goshmem-run ends the job, naming
// the PE that failed; with SurvivePeerFailure, and SIGTERM caught for the
// kill grace (as Options.SurvivePeerFailure says), the caller first gets,
// for each call, an *rpc.Error naming the PE and the function, and prints
// it.
func TestPeerDies(t *testing.T) {
	o := opts
	o.Shared = false
	o.NPs, o.QuickNPs = []int{2}, nil
	o.WantExit = 3
	o.Check = func(t *testing.T, out string) {
		for _, want := range []string{
			"[pe 0] caller: rpc: dies on PE 1: the PE failed",
			"[pe 0] caller: rpc: hold on PE 1: the PE failed",
			"PE 1 on host",
			"exited with status 3",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("the output does not say %q:\n%s", want, out)
			}
		}
	}
	shmemtest.RunWith(t, o, func(t *testing.T) {
		if err := rpc.Start(rpc.Options{SurvivePeerFailure: true}); err != nil {
			t.Fatal(err)
		}
		if shmem.MyPE() == 1 {
			shmem.BarrierAll() // serves the calls until one ends it
			t.Fatal("PE 1 lived on")
		}
		// goshmem-run's SIGTERM would end this PE before the notice of
		// PE 1's failure reached it.
		signal.Notify(make(chan os.Signal, 1), syscall.SIGTERM)
		h := hold.Call(1, 1)
		if _, err := square.Call(1, 2).Wait(); err != nil { // hold reached PE 1 before it
			t.Fatal(err)
		}
		d := dies.Call(1, 3)
		for _, f := range []rpc.Future[int32]{d, h} {
			_, err := f.Wait()
			var e *rpc.Error
			if !errors.Is(err, rpc.ErrPeerFailed) || !errors.As(err, &e) || e.PE != 1 {
				t.Errorf("%v, want ErrPeerFailed naming PE 1", err)
			}
			fmt.Printf("caller: %v\n", err)
		}
		os.Exit(0) // the job cannot finalize without PE 1
	})
}

// kept are the replies of keep, which holds them for the test to send.
var (
	kept []*rpc.Reply[int32]
	keep = rpc.RegisterDeferred("keep", func(_ int, _ int32, r *rpc.Reply[int32]) { kept = append(kept, r) })
)

// TestStop: Stop leaves nothing behind. An aggregator left open is closed
// (after Stop's Barrier flushed it), a call outstanding fails with
// ErrNotStarted, and its reply, sent once the package started again,
// completes no other call: call ids carry their slot's generation.
func TestStop(t *testing.T) {
	run(t, func(t *testing.T, me, n int) {
		next := (me + 1) % n
		counter = 0
		kept = nil
		rpc.Barrier()
		g := rpc.NewAggregator(add, 0)
		if err := g.Go(next, 1); err != nil {
			t.Fatal(err)
		}
		h := keep.Call(next, 1)
		if _, err := square.Call(next, 1).Wait(); err != nil { // behind keep's call
			t.Fatal(err)
		}
		rpc.Stop()
		if counter != 1 {
			t.Errorf("counter %d after Stop, want 1: the aggregator was not flushed", counter)
		}
		if _, err := h.Wait(); !errors.Is(err, rpc.ErrNotStarted) {
			t.Errorf("a call outstanding at Stop: %v, want ErrNotStarted", err)
		}
		if err := g.Go(next, 1); !errors.Is(err, rpc.ErrClosed) {
			t.Errorf("Go on an aggregator after Stop: %v, want ErrClosed", err)
		}
		if l := rpc.Leftovers(); l != "" {
			t.Errorf("Stop left %s", l)
		}
		if err := rpc.Start(rpc.Options{}); err != nil {
			t.Fatal(err)
		}
		f := keep.Call(next, 2)
		for len(kept) < 2 {
			rpc.Progress()
		}
		kept[0].Send(-1, nil) // the old call's reply, first
		kept[1].Send(7, nil)
		if v, err := f.Wait(); err != nil || v != 7 {
			t.Errorf("call after a restart: %v, %v, want 7 (the old call's reply completed it?)", v, err)
		}
		kept = nil
		rpc.Barrier()
	})
}
