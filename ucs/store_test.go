package ucs

import (
	"sync/atomic"
	"testing"
)

func TestStoreRelease(t *testing.T) {
	for _, v := range []uint64{0, 1, 1 << 32, ^uint64(0)} {
		var x uint64 = 12345
		StoreRelease(&x, v)
		if got := atomic.LoadUint64(&x); got != v {
			t.Errorf("after StoreRelease(%#x): %#x", v, got)
		}
	}
}

func TestStoreRelease32(t *testing.T) {
	for _, v := range []int32{0, 1, -1, 1 << 30} {
		// Neighbours of the word must stay as they are: a 32-bit store.
		x := [3]int32{7, 12345, 9}
		StoreRelease32(&x[1], v)
		if got := atomic.LoadInt32(&x[1]); got != v || x[0] != 7 || x[2] != 9 {
			t.Errorf("after StoreRelease32(%#x): %#x (neighbours %d, %d)", v, got, x[0], x[2])
		}
	}
}

// TestStoreReleasePublishes passes messages from one goroutine to another:
// the data is stored, then a flag with StoreRelease; a reader that sees the
// flag must see the data.
func TestStoreReleasePublishes(t *testing.T) {
	const n = 100000
	var data [8]uint64
	var flag uint64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := uint64(1); i <= n; i++ {
			for atomic.LoadUint64(&flag) != 2*i-1 {
			}
			for j := range data {
				if got := atomic.LoadUint64(&data[j]); got != i {
					t.Errorf("message %d: word %d is %d", i, j, got)
					return
				}
			}
			StoreRelease(&flag, 2*i)
		}
	}()
	for i := uint64(1); i <= n; i++ {
		for j := range data {
			StoreRelease(&data[j], i)
		}
		StoreRelease(&flag, 2*i-1)
		for atomic.LoadUint64(&flag) != 2*i {
		}
	}
	<-done
}
