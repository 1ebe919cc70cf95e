//go:build !amd64 && !arm64

package ucs

import "sync/atomic"

func storeRelease(p *uint64, v uint64) { atomic.StoreUint64(p, v) }
