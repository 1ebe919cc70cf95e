package sm

import (
	"testing"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// BenchmarkAMShortLocal sends an 8-byte AMShort between two posix ifaces of
// this process and delivers it with the receiver's Progress: the cost of the
// send and receive paths without a second process.
func BenchmarkAMShortLocal(b *testing.B) {
	rx, tx := openTestIface(b), openTestIface(b)
	got := 0
	rx.SetAMHandler(1, func(any, []byte, uint32) ucs.Status { got++; return ucs.OK }, nil, uct.CBFlagSync)
	e, err := tx.EPCreate(&uct.EPParams{DeviceAddr: rx.DeviceAddress(), IfaceAddr: rx.Address()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(e.Destroy)
	var ep uct.EP = e
	payload := make([]byte, 8)
	b.ReportAllocs()
	b.ResetTimer()
	for k := range b.N {
		if ep.AMShort(1, uint64(k), payload) != ucs.OK {
			b.Fatal("AMShort failed")
		}
		rx.Progress()
	}
	if got != b.N {
		b.Fatalf("delivered %d of %d", got, b.N)
	}
}
