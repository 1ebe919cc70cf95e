package dist_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/goshmem/goshmem/dist"
	"github.com/goshmem/goshmem/rpc"
	"github.com/goshmem/goshmem/shmem"
	"github.com/goshmem/goshmem/shmemtest"
)

var opts = shmemtest.Options{Shared: true, NPs: []int{2, 3}, QuickNPs: []int{3}}

func run(t *testing.T, body func(t *testing.T, me, n int)) {
	t.Helper()
	shmemtest.RunWith(t, opts, func(t *testing.T) {
		dist.RegisterAtomics[int64]()
		if err := rpc.Start(rpc.Options{}); err != nil {
			t.Fatal(err)
		}
		body(t, shmem.MyPE(), shmem.NPEs())
		rpc.Stop()
	})
}

func TestObject(t *testing.T) {
	run(t, func(t *testing.T, me, n int) {
		o, err := dist.NewObject(fmt.Sprintf("pe%d", me))
		if err != nil {
			t.Fatal(err)
		}
		for pe := range n {
			if v, err := o.Fetch(pe).Wait(); err != nil || v != fmt.Sprintf("pe%d", pe) {
				t.Errorf("Fetch(%d): %q, %v", pe, v, err)
			}
		}
		rpc.Barrier()
	})
}

func TestArray(t *testing.T) {
	for _, d := range []dist.Distribution{dist.Block, dist.Cyclic} {
		run(t, func(t *testing.T, me, n int) {
			const size = 103
			a, err := dist.NewArray[int64](size, d)
			if err != nil {
				t.Fatal(err)
			}
			total := 0
			for i := range a.Local() {
				total++
				if pe, k := a.Owner(a.Global(i)); pe != me || k != i {
					t.Fatalf("dist %d: local %d is global %d, owned by %d at %d", d, i, a.Global(i), pe, k)
				}
			}
			// Each PE sets its share of elements (by index), then all read all.
			for i := me; i < size; i += n {
				if err := a.Set(i, int64(10*i)); err != nil {
					t.Fatal(err)
				}
			}
			if err := rpc.Barrier(); err != nil {
				t.Fatal(err)
			}
			for i, v := range a.All() {
				if v != int64(10*i) {
					t.Errorf("dist %d: local element %d is %d", d, i, v)
				}
			}
			all, err := a.Range(0, size)
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range all {
				if v != int64(10*i) {
					t.Fatalf("dist %d: element %d is %d", d, i, v)
				}
			}
			if v, err := a.Get(size - 1).Wait(); err != nil || v != 10*(size-1) {
				t.Errorf("Get: %d, %v", v, err)
			}
			if _, err := a.Get(size).Wait(); err == nil {
				t.Error("Get out of range: no error")
			}
			g, err := a.Gather([]int{5, 1, 99})
			if err != nil || g[0] != 50 || g[1] != 10 || g[2] != 990 {
				t.Errorf("Gather: %v, %v", g, err)
			}
			rpc.Barrier()
			a.ForEach(func(i int, v *int64) { *v = 0 })
			rpc.Barrier()
			for i := range size {
				if err := dist.AtomicAdd(a, i, 1); err != nil {
					t.Fatal(err)
				}
			}
			rpc.Barrier()
			for _, v := range a.All() {
				if v != int64(n) {
					t.Fatalf("after AtomicAdd: %d, want %d", v, n)
				}
			}
			rpc.Barrier() // every PE checked before element 0 changes
			if _, err := dist.FetchAdd(a, 0, 1).Wait(); err != nil {
				t.Fatal(err)
			}
			rpc.Barrier()
			if v, _ := a.Get(0).Wait(); v != int64(2*n) {
				t.Errorf("after FetchAdd: %d, want %d", v, 2*n)
			}
			if err := a.Scatter([]int{1, 2}, []int64{7}); err == nil {
				t.Error("Scatter of mismatched lengths: no error")
			}
			_ = total
			rpc.Barrier()
		})
	}
}

func TestMap(t *testing.T) {
	run(t, func(t *testing.T, me, n int) {
		words, err := dist.NewMap[string, int](func(old int, _ bool, v int) int { return old + v })
		if err != nil {
			t.Fatal(err)
		}
		text := []string{"a", "b", "a", "c", "a", "b"}
		for _, w := range text {
			if err := words.Update(w, 1); err != nil {
				t.Fatal(err)
			}
		}
		words.Insert("mine"+fmt.Sprint(me), me)
		rpc.Barrier()
		for w, want := range map[string]int{"a": 3 * n, "b": 2 * n, "c": n} {
			if f, err := words.Get(w).Wait(); err != nil || !f.OK || f.Value != want {
				t.Errorf("%q: %+v, %v, want %d", w, f, err, want)
			}
		}
		for k := range words.Local() {
			if words.Owner(k) != me {
				t.Errorf("%q held by PE %d, owned by %d", k, me, words.Owner(k))
			}
		}
		rpc.Barrier() // every PE read "a" before PE 0 changes it
		if me == 0 {
			if f, err := words.Apply("a", 100).Wait(); err != nil || f.Value != 3*n+100 {
				t.Errorf("Apply: %+v, %v", f, err)
			}
		}
		rpc.Barrier()
		if me == 0 {
			words.Delete("c")
		}
		rpc.Barrier()
		if f, err := words.Get("c").Wait(); err != nil || f.OK {
			t.Errorf("after Delete: %+v, %v", f, err)
		}
		var e *rpc.Error
		if _, err := words.Get("x").WaitContext(t.Context()); err != nil && !errors.As(err, &e) {
			t.Error(err)
		}
		rpc.Barrier()
	})
}

// TestDestroy: Destroy applies every PE's buffered operations, then
// removes the object from every PE; later operations fail; rpc.Stop
// removes the objects left.
func TestDestroy(t *testing.T) {
	run(t, func(t *testing.T, me, n int) {
		before := dist.Objects()
		m, err := dist.NewMap[int, int](nil)
		if err != nil {
			t.Fatal(err)
		}
		a, err := dist.NewArray[int64](n+5, dist.Block)
		if err != nil {
			t.Fatal(err)
		}
		o, err := dist.NewObject(me)
		if err != nil {
			t.Fatal(err)
		}
		if got := dist.Objects(); got != before+3 {
			t.Fatalf("%d objects, want %d", got, before+3)
		}
		// Buffered: Destroy applies them first.
		if err := m.Insert(me, me); err != nil {
			t.Fatal(err)
		}
		if err := dist.AtomicAdd(a, me, 1); err != nil {
			t.Fatal(err)
		}
		if err := a.Set(n+me, 2); err != nil {
			t.Fatal(err)
		}
		for _, d := range []func() error{m.Destroy, a.Destroy, o.Destroy} {
			if err := d(); err != nil {
				t.Fatal(err)
			}
		}
		if got := dist.Objects(); got != before {
			t.Errorf("%d objects after Destroy, want %d", got, before)
		}
		owned := 0
		for k := range n {
			if m.Owner(k) == me {
				owned++
			}
		}
		if m.Len() != owned {
			t.Errorf("the map's part holds %d keys, want %d", m.Len(), owned)
		}
		for k, v := range a.Local() {
			want := int64(0)
			if i := a.Global(k); i < n {
				want = 1
			} else if i < 2*n {
				want = 2
			}
			if v != want {
				t.Errorf("element %d is %d, want %d", a.Global(k), v, want)
			}
		}
		next := (me + 1) % n
		if err := m.Insert(1, 1); !errors.Is(err, rpc.ErrClosed) {
			t.Errorf("Insert after Destroy: %v, want ErrClosed", err)
		}
		if err := dist.AtomicAdd(a, 0, 1); !errors.Is(err, rpc.ErrClosed) {
			t.Errorf("AtomicAdd after Destroy: %v, want ErrClosed", err)
		}
		var e *rpc.Error
		if _, err := o.Fetch(next).Wait(); !errors.As(err, &e) || e.PE != next {
			t.Errorf("Fetch after Destroy: %v, want an *rpc.Error naming PE %d", err, next)
		}
		if _, err := m.Get(1).Wait(); !errors.As(err, &e) {
			t.Errorf("Get after Destroy: %v, want an *rpc.Error", err)
		}
		// Left to rpc.Stop.
		if _, err := dist.NewMap[int, int](nil); err != nil {
			t.Fatal(err)
		}
		rpc.Stop()
		if got := dist.Objects(); got != 0 {
			t.Errorf("%d objects after rpc.Stop", got)
		}
		if err := rpc.Start(rpc.Options{}); err != nil {
			t.Fatal(err)
		}
	})
}
