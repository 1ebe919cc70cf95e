package ucp

import (
	"encoding/binary"
	"fmt"

	"github.com/goshmem/goshmem/ucs"
)

// A client-server connection is set up by the connection manager of a
// transport (uct.CM; the tcp one, uct/tcp/cm.go, runs the authenticated
// handshake). ucp's part is the private data that the CM carries each
// way, little endian:
//
//	0  version   uint8   csPrivVersion
//	1  flags     uint8   csPrivClientID: the client id counts
//	2  client id uint64  the client's worker's (WorkerParams.ClientID),
//	                     with csPrivClientID; 0 otherwise, and from a server
//	10 worker address    address.go; of the client, or of the server
//
// as UCX packs the client id with the worker address
// (UCP_ADDRESS_PACK_FLAG_CLIENT_ID).
const (
	csPrivVersion   uint8 = 1
	csPrivClientID  uint8 = 1 << 0
	csPrivHeaderLen       = 10
)

// errCSPriv is the cause of malformed private data.
var errCSPriv = fmt.Errorf("malformed client-server private data: %w", ucs.ErrInvalidParam)

// encodeCSPriv packs the private data of a worker whose address is addr;
// sendID says whether clientID counts.
func encodeCSPriv(addr []byte, clientID uint64, sendID bool) []byte {
	b := make([]byte, csPrivHeaderLen, csPrivHeaderLen+len(addr))
	b[0] = csPrivVersion
	if sendID {
		b[1] = csPrivClientID
		binary.LittleEndian.PutUint64(b[2:], clientID)
	}
	return append(b, addr...)
}

// decodeCSPriv decodes private data: the client id (0 when it does not
// count) and the worker address. Anything malformed fails with an error
// wrapping ucs.ErrInvalidParam.
func decodeCSPriv(b []byte) (clientID uint64, ra *workerAddress, err error) {
	if len(b) < csPrivHeaderLen {
		return 0, nil, fmt.Errorf("%d bytes: %w", len(b), errCSPriv)
	}
	if b[0] != csPrivVersion || b[1]&^csPrivClientID != 0 {
		return 0, nil, fmt.Errorf("version %d, flags %#x: %w", b[0], b[1], errCSPriv)
	}
	if b[1]&csPrivClientID != 0 {
		clientID = binary.LittleEndian.Uint64(b[2:])
	} else if binary.LittleEndian.Uint64(b[2:]) != 0 {
		return 0, nil, fmt.Errorf("a client id without its flag: %w", errCSPriv)
	}
	if ra, err = decodeWorkerAddress(b[csPrivHeaderLen:]); err != nil {
		return 0, nil, err
	}
	return clientID, ra, nil
}
