// Package dist holds distributed objects and containers of a goshmem job,
// over package rpc: Object (one instance per PE under one id), Array
// (block or cyclic distribution) and Map (hash-partitioned).
//
// Their constructors are collectives of the job's PEs, after rpc.Start,
// called in the same order on every PE (the order names the objects).
// Reads are calls that return futures; writes and updates are aggregated
// calls without reply: they are applied at their owner once flushed
// (Flush, or rpc.Barrier, which also makes sure they were applied).
// Operations at the owner run inline in its progress, one at a time per
// PE; Local parts may be read and written directly by their PE between
// barriers.
package dist

import (
	"errors"
	"fmt"
	"hash/fnv"
	"reflect"
	"sync"

	"github.com/goshmem/goshmem/rpc"
	"github.com/goshmem/goshmem/shmem"
)

// objects maps the id of each object of this PE to it. Ids are never
// reused (not even after rpc.Stop): a call to an object destroyed fails,
// and reaches no other object.
var (
	mu      sync.Mutex
	objects = map[uint32]any{}
	nextID  uint32
	// funcs holds the rpc functions registered for each type set, so that
	// each is registered once per process.
	funcs = map[string]any{}
)

// newObject gives obj the next id (the same on every PE, as constructors
// are collectives called in the same order).
func newObject(obj any) uint32 {
	mu.Lock()
	defer mu.Unlock()
	nextID++
	objects[nextID] = obj
	return nextID
}

// rpc.Stop forgets every object: their aggregators are closed, and the
// next session makes new ones.
func init() {
	rpc.OnStop(func() {
		mu.Lock()
		clear(objects)
		mu.Unlock()
	})
}

// destroy removes object id from every PE, after closing its aggregators:
// a collective. Its first rpc.Barrier makes sure every PE's buffered
// operations were applied before, its second that every PE removed the
// object after (so a later call fails wherever it goes).
func destroy(id uint32, aggs ...closer) error {
	var errs []error
	for _, g := range aggs {
		errs = append(errs, g.Close())
	}
	errs = append(errs, rpc.Barrier())
	mu.Lock()
	delete(objects, id)
	mu.Unlock()
	errs = append(errs, rpc.Barrier())
	return errors.Join(errs...)
}

// closer is an aggregator of an object.
type closer interface{ Close() error }

// object returns the object id of type O.
func object[O any](id uint32) (O, error) {
	mu.Lock()
	o, ok := objects[id].(O)
	mu.Unlock()
	if !ok {
		return o, fmt.Errorf("dist: no %v with id %d on PE %d (its constructor differs between PEs, or was not called)", reflect.TypeFor[O](), id, shmem.MyPE())
	}
	return o, nil
}

// registerOnce returns the functions of key, made by mk the first time.
func registerOnce[F any](key string, mk func() F) F {
	mu.Lock()
	defer mu.Unlock()
	if f, ok := funcs[key]; ok {
		return f.(F)
	}
	f := mk()
	funcs[key] = f
	return f
}

func typeKey(kind string, ts ...reflect.Type) string {
	s := kind
	for _, t := range ts {
		s += "/" + t.String()
	}
	return s
}

// hashBytes hashes b the same on every PE.
func hashBytes(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}

// ready ends a constructor: every PE has made the object before any
// calls it.
func ready() error {
	return rpc.Barrier()
}

// Object is a value of type T with one instance on each PE, under one id:
// each PE reads and writes its own (Local), and fetches any PE's (Fetch).
type Object[T any] struct {
	id    uint32
	local T
	fetch *rpc.Func[uint32, T]
	lock  sync.Mutex
}

// NewObject makes an Object whose instance on this PE is v. A collective.
func NewObject[T any](v T) (*Object[T], error) {
	o := &Object[T]{local: v}
	o.fetch = registerOnce(typeKey("dist.object", reflect.TypeFor[T]()), func() *rpc.Func[uint32, T] {
		return rpc.Register(typeKey("dist.object.fetch", reflect.TypeFor[T]()), rpc.Inline, func(_ int, id uint32) (T, error) {
			o, err := object[*Object[T]](id)
			if err != nil {
				var zero T
				return zero, err
			}
			o.lock.Lock()
			defer o.lock.Unlock()
			return o.local, nil
		})
	})
	o.id = newObject(o)
	return o, ready()
}

// Local returns this PE's instance. Writes to it race with the fetches of
// others unless made between barriers (or under Update).
func (o *Object[T]) Local() *T { return &o.local }

// Update runs fn on this PE's instance, excluding fetches meanwhile.
func (o *Object[T]) Update(fn func(*T)) {
	o.lock.Lock()
	defer o.lock.Unlock()
	fn(&o.local)
}

// Fetch returns the future of PE pe's instance.
func (o *Object[T]) Fetch(pe int) rpc.Future[T] { return o.fetch.Call(pe, o.id) }

// Destroy removes the object from every PE: a collective. Later fetches
// of it fail, naming the PE and the function. rpc.Stop removes the
// objects left.
func (o *Object[T]) Destroy() error { return destroy(o.id) }
