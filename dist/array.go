package dist

import (
	"errors"
	"fmt"
	"iter"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/goshmem/goshmem/rpc"
	"github.com/goshmem/goshmem/shmem"
)

// Distribution is how an Array's elements are spread over the PEs.
type Distribution uint8

const (
	// Block gives each PE one run of consecutive elements: PE p holds
	// elements p*B to (p+1)*B-1, B being the length over the PEs, rounded
	// up.
	Block Distribution = iota
	// Cyclic deals the elements round-robin: element i is on PE i%NPEs.
	Cyclic
)

// Array is an array of n elements of type T spread over the PEs. Get,
// Gather and Range read (futures or waits); Set and Scatter write
// (aggregated, applied once flushed: Flush or rpc.Barrier).
type Array[T any] struct {
	id    uint32
	n     int
	np    int
	me    int
	dist  Distribution
	block int
	local []T
	fns   *arrayFuncs[T]
	sets  *rpc.Aggregator[arraySet[T], struct{}]
	adds  *rpc.Aggregator[arrayAdd, struct{}] // AtomicAdd's, made by the first
	amu   sync.Mutex                          // atomics on elements of a size sync/atomic lacks
}

type arraySet[T any] struct {
	ID  uint32
	I   int64 // the local index
	Val T
}

type arrayAdd struct {
	ID uint32
	I  int64
	V  int64
}

type arrayFuncs[T any] struct {
	get *rpc.Func[[]int64, []T] // {id, local indices...}
	set *rpc.Func[arraySet[T], struct{}]
}

// NewArray makes an Array of n elements (zero) distributed as d. A
// collective.
func NewArray[T any](n int, d Distribution) (*Array[T], error) {
	if n < 0 || d > Cyclic {
		return nil, fmt.Errorf("dist.NewArray: length %d, distribution %d", n, d)
	}
	np, me := shmem.NPEs(), shmem.MyPE()
	a := &Array[T]{n: n, np: np, me: me, dist: d, block: (n + np - 1) / np}
	a.local = make([]T, a.localLen(me))
	t := reflect.TypeFor[T]()
	a.fns = registerOnce(typeKey("dist.array", t), func() *arrayFuncs[T] {
		f := &arrayFuncs[T]{}
		f.get = rpc.Register(typeKey("dist.array.get", t), rpc.Inline, func(_ int, idx []int64) ([]T, error) {
			if len(idx) == 0 {
				return nil, fmt.Errorf("dist: empty gather")
			}
			a, err := object[*Array[T]](uint32(idx[0]))
			if err != nil {
				return nil, err
			}
			out := make([]T, len(idx)-1)
			for k, i := range idx[1:] {
				if i < 0 || i >= int64(len(a.local)) {
					return nil, fmt.Errorf("dist: local index %d of %d", i, len(a.local))
				}
				out[k] = a.local[i]
			}
			return out, nil
		})
		f.set = rpc.Register(typeKey("dist.array.set", t), rpc.Inline, func(_ int, s arraySet[T]) (struct{}, error) {
			a, err := object[*Array[T]](s.ID)
			if err == nil && s.I >= 0 && s.I < int64(len(a.local)) {
				a.local[s.I] = s.Val
			}
			return struct{}{}, err
		})
		return f
	})
	a.id = newObject(a)
	a.sets = rpc.NewAggregator(a.fns.set, 0)
	return a, ready()
}

// Len returns the array's length.
func (a *Array[T]) Len() int { return a.n }

// localLen returns the number of elements PE pe holds.
func (a *Array[T]) localLen(pe int) int {
	if a.dist == Cyclic {
		return (a.n - pe + a.np - 1) / a.np
	}
	return max(0, min(a.block, a.n-pe*a.block))
}

// Owner returns the PE that holds element i and its index there.
func (a *Array[T]) Owner(i int) (pe, local int) {
	if a.dist == Cyclic {
		return i % a.np, i / a.np
	}
	return i / a.block, i % a.block
}

// Global returns the global index of element k of this PE's part.
func (a *Array[T]) Global(k int) int {
	if a.dist == Cyclic {
		return k*a.np + a.me
	}
	return a.me*a.block + k
}

func (a *Array[T]) check(i int) error {
	if i < 0 || i >= a.n {
		return fmt.Errorf("dist: index %d of an array of %d", i, a.n)
	}
	return nil
}

// Local returns this PE's part of the array, element k being the array's
// element Global(k).
func (a *Array[T]) Local() []T { return a.local }

// All iterates over this PE's part: global index and value.
func (a *Array[T]) All() iter.Seq2[int, T] {
	return func(yield func(int, T) bool) {
		for k, v := range a.local {
			if !yield(a.Global(k), v) {
				return
			}
		}
	}
}

// ForEach calls fn on every element of this PE's part, with its global
// index, from GOMAXPROCS goroutines at once, and returns when all
// returned. fn must not call this package or rpc below
// shmem.ThreadMultiple.
func (a *Array[T]) ForEach(fn func(i int, v *T)) {
	w := min(runtime.GOMAXPROCS(0), len(a.local))
	var wg sync.WaitGroup
	for g := range w {
		lo, hi := g*len(a.local)/w, (g+1)*len(a.local)/w
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := lo; k < hi; k++ {
				fn(a.Global(k), &a.local[k])
			}
		}()
	}
	wg.Wait()
}

// Get returns the future of element i.
func (a *Array[T]) Get(i int) rpc.Future[T] {
	if err := a.check(i); err != nil {
		f := a.fns.get.Call(-1, nil) // an *rpc.Error naming the function
		return rpc.Then(f, func([]T, error) (T, error) { var z T; return z, err })
	}
	pe, k := a.Owner(i)
	return rpc.Then(a.fns.get.Call(pe, []int64{int64(a.id), int64(k)}), func(v []T, err error) (T, error) {
		if err != nil || len(v) != 1 {
			var z T
			return z, err
		}
		return v[0], nil
	})
}

// Set sets element i to v, at its owner, once flushed.
func (a *Array[T]) Set(i int, v T) error {
	if err := a.check(i); err != nil {
		return err
	}
	pe, k := a.Owner(i)
	return a.sets.Go(pe, arraySet[T]{a.id, int64(k), v})
}

// Gather returns the elements at the indices idx, with one call per PE
// that holds some.
func (a *Array[T]) Gather(idx []int) ([]T, error) {
	per := make([][]int64, a.np)
	pos := make([][]int, a.np)
	for j, i := range idx {
		if err := a.check(i); err != nil {
			return nil, err
		}
		pe, k := a.Owner(i)
		if per[pe] == nil {
			per[pe] = []int64{int64(a.id)}
		}
		per[pe] = append(per[pe], int64(k))
		pos[pe] = append(pos[pe], j)
	}
	futs := make([]rpc.Future[[]T], a.np)
	for pe, l := range per {
		if l != nil {
			futs[pe] = a.fns.get.Call(pe, l)
		}
	}
	out := make([]T, len(idx))
	for pe, f := range futs {
		if per[pe] == nil {
			continue
		}
		v, err := f.Wait()
		if err != nil {
			return nil, err
		}
		for k, j := range pos[pe] {
			out[j] = v[k]
		}
	}
	return out, nil
}

// Range returns elements lo to hi-1.
func (a *Array[T]) Range(lo, hi int) ([]T, error) {
	if lo < 0 || hi > a.n || lo > hi {
		return nil, fmt.Errorf("dist: range %d:%d of an array of %d", lo, hi, a.n)
	}
	idx := make([]int, hi-lo)
	for k := range idx {
		idx[k] = lo + k
	}
	return a.Gather(idx)
}

// Scatter sets element idx[j] to vals[j] for every j, at their owners,
// once flushed.
func (a *Array[T]) Scatter(idx []int, vals []T) error {
	if len(idx) != len(vals) {
		return fmt.Errorf("dist: scatter of %d values to %d indices", len(vals), len(idx))
	}
	for j, i := range idx {
		if err := a.Set(i, vals[j]); err != nil {
			return err
		}
	}
	return nil
}

// Flush sends this PE's buffered writes and atomic additions
// (rpc.Barrier also does, and makes sure they were applied).
func (a *Array[T]) Flush() error {
	if a.adds == nil {
		return a.sets.Flush()
	}
	return errors.Join(a.sets.Flush(), a.adds.Flush())
}

// Destroy removes the array from every PE, once every PE's buffered
// writes and additions were applied: a collective. The part this PE holds
// stays readable (Local); later operations fail (Set and AtomicAdd with
// rpc.ErrClosed, reads naming the PE and the function). rpc.Stop removes
// the arrays left.
func (a *Array[T]) Destroy() error {
	if a.adds == nil {
		return destroy(a.id, a.sets)
	}
	return destroy(a.id, a.sets, a.adds)
}

// Integer is the element types of the atomic operations of an Array.
type Integer interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~int | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~uint | ~uintptr
}

// addAt adds v to element k of a's part, atomically, and returns the old
// value.
func addAt[T Integer](a *Array[T], k int64, v T) T {
	p := &a.local[k]
	switch unsafe.Sizeof(v) {
	case 8:
		return T(atomic.AddUint64((*uint64)(unsafe.Pointer(p)), uint64(v)) - uint64(v))
	case 4:
		return T(atomic.AddUint32((*uint32)(unsafe.Pointer(p)), uint32(v)) - uint32(v))
	}
	a.amu.Lock()
	defer a.amu.Unlock()
	old := *p
	*p += v
	return old
}

// atomicFuncs are the atomic operations of the arrays of one type.
type atomicFuncs[T Integer] struct {
	add  *rpc.Func[arrayAdd, struct{}]
	fadd *rpc.Func[arrayAdd, int64]
}

// RegisterAtomics registers the atomic operations (AtomicAdd, FetchAdd)
// of the arrays of T on this PE, which the first of them does otherwise.
// Every PE calls it before rpc.Start, or before a barrier that precedes
// the first atomic operation: a call that reaches a PE before fails with
// rpc.ErrNotRegistered.
func RegisterAtomics[T Integer]() *atomicFuncs[T] {
	t := reflect.TypeFor[T]()
	return registerOnce(typeKey("dist.array.atomic", t), func() *atomicFuncs[T] {
		return &atomicFuncs[T]{
			add: rpc.Register(typeKey("dist.array.add", t), rpc.Inline, func(_ int, o arrayAdd) (struct{}, error) {
				a, err := object[*Array[T]](o.ID)
				if err == nil && o.I >= 0 && o.I < int64(len(a.local)) {
					addAt(a, o.I, T(o.V))
				}
				return struct{}{}, err
			}),
			fadd: rpc.Register(typeKey("dist.array.fetchadd", t), rpc.Inline, func(_ int, o arrayAdd) (int64, error) {
				a, err := object[*Array[T]](o.ID)
				if err != nil {
					return 0, err
				}
				if o.I < 0 || o.I >= int64(len(a.local)) {
					return 0, fmt.Errorf("dist: local index %d of %d", o.I, len(a.local))
				}
				return int64(addAt(a, o.I, T(o.V))), nil
			}),
		}
	})
}

// AtomicAdd adds v to element i of a, atomically, at its owner, once
// flushed (aggregated).
func AtomicAdd[T Integer](a *Array[T], i int, v T) error {
	if err := a.check(i); err != nil {
		return err
	}
	if a.adds == nil {
		a.adds = rpc.NewAggregator(RegisterAtomics[T]().add, 0)
	}
	pe, k := a.Owner(i)
	return a.adds.Go(pe, arrayAdd{a.id, int64(k), int64(v)})
}

// FetchAdd adds v to element i of a, atomically, at its owner, and
// returns the future of its value before.
func FetchAdd[T Integer](a *Array[T], i int, v T) rpc.Future[T] {
	f := RegisterAtomics[T]()
	pe, k := a.Owner(i)
	if err := a.check(i); err != nil {
		pe = -1 // the call fails naming the function and the PE
	}
	return rpc.Then(f.fadd.Call(pe, arrayAdd{a.id, int64(k), int64(v)}), func(v int64, err error) (T, error) { return T(v), err })
}
