package ucs

// StoreRelease stores v in *p with release ordering: every load and store
// the caller made before it is visible to another thread or process before
// v is, to one that reads *p with an atomic load. Unlike
// sync/atomic.StoreUint64, which is sequentially consistent (an XCHG on
// amd64, which waits until this CPU owns the cache line), it does not order
// later loads before it, so it costs no more than a plain store: the way to
// publish a flag that other processes spin on, as UCX's
// ucs_memory_cpu_store_fence before a flag store.
//
// It is a plain MOV on amd64 and STLR on arm64 (in assembly, so the
// compiler keeps the caller's earlier stores before it), and
// atomic.StoreUint64 elsewhere and under the race detector (which sees the
// happens-before edge of that store, not of an assembly one).
func StoreRelease(p *uint64, v uint64) { storeRelease(p, v) }

// StoreRelease32 is StoreRelease of a 32-bit word.
func StoreRelease32(p *int32, v int32) { storeRelease32(p, v) }
