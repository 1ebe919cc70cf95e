//go:build (!amd64 && !arm64) || race

package ucs

import "sync/atomic"

// storeRelease is atomic.StoreUint64 where there is no assembly for the
// release store, and under the race detector: the detector sees the
// happens-before edge of a sync/atomic store, not that of an assembly
// one, and would report the data the release store publishes.
func storeRelease(p *uint64, v uint64) { atomic.StoreUint64(p, v) }

func storeRelease32(p *int32, v int32) { atomic.StoreInt32(p, v) }
