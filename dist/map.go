package dist

import (
	"iter"
	"reflect"
	"sync"

	"github.com/goshmem/goshmem/rpc"
	"github.com/goshmem/goshmem/shmem"
)

// Found is the result of a lookup: the value and whether the key was there.
type Found[V any] struct {
	Value V
	OK    bool
}

// Merge combines the value old of a key (found says whether there was
// one) with v, at the key's owner, in Map.Update.
type Merge[V any] func(old V, found bool, v V) V

// Map is a hash map partitioned over the PEs: a key lives on the PE its
// hash names (Owner). Insert, Update and Delete are aggregated calls to the
// owner (applied there once flushed: Flush or rpc.Barrier); Get and
// Apply are calls that return futures.
type Map[K comparable, V any] struct {
	id    uint32
	n     int
	merge Merge[V]
	mu    sync.Mutex // the local part, against goroutines at ThreadMultiple
	local map[K]V
	fns   *mapFuncs[K, V]
	ops   *rpc.Aggregator[mapOp[K, V], struct{}]
	kc    keyHasher[K]
}

// mapOp is an aggregated operation on a key.
type mapOp[K comparable, V any] struct {
	ID  uint32
	Op  uint8
	Key K
	Val V
}

const (
	opInsert uint8 = iota
	opUpdate
	opDelete
)

type mapKey[K comparable] struct {
	ID  uint32
	Key K
}

type mapFuncs[K comparable, V any] struct {
	op  *rpc.Func[mapOp[K, V], struct{}]
	get *rpc.Func[mapKey[K], Found[V]]
	upd *rpc.Func[mapOp[K, V], Found[V]]
}

// NewMap makes a Map whose Update combines values with merge (nil: the
// new value replaces the old). A collective.
func NewMap[K comparable, V any](merge Merge[V]) (*Map[K, V], error) {
	if merge == nil {
		merge = func(_ V, _ bool, v V) V { return v }
	}
	m := &Map[K, V]{n: shmem.NPEs(), merge: merge, local: map[K]V{}, kc: newKeyHasher[K]()}
	kt, vt := reflect.TypeFor[K](), reflect.TypeFor[V]()
	m.fns = registerOnce(typeKey("dist.map", kt, vt), func() *mapFuncs[K, V] {
		return &mapFuncs[K, V]{
			op: rpc.Register(typeKey("dist.map.op", kt, vt), rpc.Inline, func(_ int, o mapOp[K, V]) (struct{}, error) {
				m, err := object[*Map[K, V]](o.ID)
				if err == nil {
					m.apply(o)
				}
				return struct{}{}, err
			}),
			get: rpc.Register(typeKey("dist.map.get", kt, vt), rpc.Inline, func(_ int, k mapKey[K]) (Found[V], error) {
				m, err := object[*Map[K, V]](k.ID)
				if err != nil {
					return Found[V]{}, err
				}
				return m.lookup(k.Key), nil
			}),
			upd: rpc.Register(typeKey("dist.map.update", kt, vt), rpc.Inline, func(_ int, o mapOp[K, V]) (Found[V], error) {
				m, err := object[*Map[K, V]](o.ID)
				if err != nil {
					return Found[V]{}, err
				}
				return m.apply(o), nil
			}),
		}
	})
	m.id = newObject(m)
	m.ops = rpc.NewAggregator(m.fns.op, 0)
	return m, ready()
}

// Owner returns the PE that holds key k.
func (m *Map[K, V]) Owner(k K) int { return int(m.kc.hash(&k) % uint64(m.n)) }

// apply applies o to the local part and returns the key's value after it.
func (m *Map[K, V]) apply(o mapOp[K, V]) Found[V] {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch o.Op {
	case opInsert:
		m.local[o.Key] = o.Val
	case opUpdate:
		old, ok := m.local[o.Key]
		m.local[o.Key] = m.merge(old, ok, o.Val)
	case opDelete:
		delete(m.local, o.Key)
		return Found[V]{}
	}
	return Found[V]{m.local[o.Key], true}
}

func (m *Map[K, V]) lookup(k K) Found[V] {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.local[k]
	return Found[V]{v, ok}
}

// Insert sets key k to v, at its owner, once flushed.
func (m *Map[K, V]) Insert(k K, v V) error {
	return m.ops.Go(m.Owner(k), mapOp[K, V]{ID: m.id, Op: opInsert, Key: k, Val: v})
}

// Update sets key k to the map's merge of its value and v, at its owner,
// once flushed.
func (m *Map[K, V]) Update(k K, v V) error {
	return m.ops.Go(m.Owner(k), mapOp[K, V]{ID: m.id, Op: opUpdate, Key: k, Val: v})
}

// Delete removes key k, at its owner, once flushed.
func (m *Map[K, V]) Delete(k K) error {
	return m.ops.Go(m.Owner(k), mapOp[K, V]{ID: m.id, Op: opDelete, Key: k})
}

// Apply updates key k with v (as Update) at once, unaggregated, and
// returns the future of its value after the update.
func (m *Map[K, V]) Apply(k K, v V) rpc.Future[Found[V]] {
	return m.fns.upd.Call(m.Owner(k), mapOp[K, V]{ID: m.id, Op: opUpdate, Key: k, Val: v})
}

// Get returns the future of key k's value at its owner (operations of
// this PE still buffered are not seen: Flush first).
func (m *Map[K, V]) Get(k K) rpc.Future[Found[V]] {
	return m.fns.get.Call(m.Owner(k), mapKey[K]{m.id, k})
}

// Flush sends this PE's buffered operations (rpc.Barrier also does, and
// makes sure they were applied).
func (m *Map[K, V]) Flush() error { return m.ops.Flush() }

// Destroy removes the map from every PE, once every PE's buffered
// operations were applied: a collective. The part this PE holds stays
// readable (Local, Len); later operations fail (Insert, Update and Delete
// with rpc.ErrClosed, Get and Apply naming the PE and the function).
// rpc.Stop removes the maps left.
func (m *Map[K, V]) Destroy() error { return destroy(m.id, m.ops) }

// Local iterates over the keys and values this PE holds (not to be
// interleaved with progress, which may apply operations).
func (m *Map[K, V]) Local() iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		for k, v := range m.local {
			if !yield(k, v) {
				return
			}
		}
	}
}

// Len returns the number of keys this PE holds.
func (m *Map[K, V]) Len() int { return len(m.local) }
