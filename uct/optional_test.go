package uct

import (
	"testing"

	"github.com/goshmem/goshmem/ucs"
)

func TestArmedRecvEvents(t *testing.T) {
	for _, c := range []struct {
		events, recv uint32
		want         ucs.Status
	}{
		{0, 0, ucs.OK},
		{EventSendComp, 0, ucs.OK},
		{EventSendComp | EventTagComp, 0, ucs.OK},
		{1 << 4, 0, ucs.ErrInvalidParam},
		{EventRecv | 1<<31, 0, ucs.ErrInvalidParam},
		{EventRecv, EventRecv, ucs.OK},
		{EventRecvSig | EventSendComp, EventRecvSig, ucs.OK},
		{EventAll, EventRecv | EventRecvSig, ucs.OK},
	} {
		if recv, st := ArmedRecvEvents(c.events); recv != c.recv || st != c.want {
			t.Errorf("ArmedRecvEvents(%#x) = %#x, %v; want %#x, %v", c.events, recv, st, c.recv, c.want)
		}
	}
}
