package base

import "github.com/goshmem/goshmem/uct"

// AMHandler is an active message handler installed on an iface.
type AMHandler struct {
	CB    uct.AMCallback
	Arg   any
	Flags uint32 // the uct.CBFlag* it was installed with
}

// AMMsg is a received active message waiting for delivery.
type AMMsg struct {
	ID   uint8
	Data []byte
}
