package ucp

import (
	"fmt"

	"github.com/goshmem/goshmem/ucs"
)

// The wire message of the stream API. A stream is a sequence of bytes per
// pair of endpoints, without message boundaries: every send below the
// rendezvous threshold goes in one or more amStreamData messages on the
// endpoint's AM lane, each carrying a piece of the data, and the receiver
// appends each piece to the stream of the endpoint it names, in arrival
// order. A larger send goes by rendezvous (tag_wire.go): an amTagRTS of
// family famStream whose arg is sn below, then the messages every
// family's rendezvous shares. The header is little endian:
//
//	amStreamData  src u64, sn u64 | data
//
// src is the uid of the sending worker; sn is the receiving endpoint's
// connection number: the receiver's n-th endpoint to the worker src (see
// stream.go for how the two sides agree on it).
const amStreamData = amTagRevoke - 1

// streamHdrLen is the length of the header of amStreamData.
const streamHdrLen = 16

// decodeStream parses a stream message and returns the sender's uid, the
// receiving endpoint's connection number and the data. A message without
// data, or shorter than its header, fails with ucs.ErrInvalidParam.
func decodeStream(b []byte) (src, sn uint64, p []byte, ok bool) {
	if len(b) <= streamHdrLen {
		return 0, 0, nil, false
	}
	return get64(b, 0), get64(b, 1), b[streamHdrLen:], true
}

// streamShortErr is the error of a message decodeStream rejects, made by
// its caller, so that the decoding is inlined into the handler.
func streamShortErr(n int) error {
	return fmt.Errorf("ucp: stream message of %d bytes, no data after its %d-byte header: %w", n, streamHdrLen, ucs.ErrInvalidParam)
}
