package sm

import (
	"bytes"
	"errors"
	"testing"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// FuzzMkeyDecode checks that the key decoder either fails with
// ucs.ErrInvalidParam or returns a key that satisfies every invariant and
// encodes back to the same bytes.
func FuzzMkeyDecode(f *testing.F) {
	good := (&mkey{pid: 4242, fd: 9, id: 0x1122334455667788, length: 1 << 20, addr: 0x7f12_3456_0000}).encode()
	f.Add(good)
	f.Add([]byte{})
	f.Add(good[:20])
	f.Add(make([]byte, MkeyPackedSize))
	f.Add((&mkey{pid: 1, fd: 0, id: 1, length: ^uint64(0), addr: 1}).encode())
	f.Add((&mkey{pid: 4242, id: 0x1122334455667788, length: 1 << 20, addr: 0x7f12_3456_0000, named: true}).encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := decodeMkey(b)
		if err != nil {
			if !errors.Is(err, ucs.ErrInvalidParam) {
				t.Fatalf("error %v is not ErrInvalidParam", err)
			}
			return
		}
		if k.pid == 0 || k.pid >= maxPid || k.fd < 0 || (k.named && k.fd != 0) || k.id == 0 || k.length == 0 || k.addr == 0 || k.addr+k.length > maxAddr || k.addr+k.length < k.addr {
			t.Fatalf("accepted %+v", k)
		}
		if !bytes.Equal(k.encode(), b) {
			t.Fatalf("%x decodes to %+v, which encodes differently", b, k)
		}
	})
}

// FuzzIfaceAddrDecode checks the iface address decoder the same way.
func FuzzIfaceAddrDecode(f *testing.F) {
	good := (&ifaceAddr{pid: 77, fd: 5, ncells: DefaultFIFOSize, id: 99, stride: uint32(cellStride(DefaultSegSize))}).encode()
	f.Add(good)
	f.Add([]byte{})
	f.Add(good[:31])
	f.Add(make([]byte, IfaceAddrLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := decodeIfaceAddr(b)
		if err != nil {
			if !errors.Is(err, ucs.ErrInvalidAddr) {
				t.Fatalf("error %v is not ErrInvalidAddr", err)
			}
			return
		}
		if a.ncells < minFIFOCells || a.ncells&(a.ncells-1) != 0 || a.stride%cellAlign != 0 || a.stride < cellHeaderSize || a.id == 0 || a.fd < 0 {
			t.Fatalf("accepted %+v", a)
		}
		if fifoSize(int(a.ncells), int(a.stride)) > 1<<41 {
			t.Fatalf("accepted a FIFO of %d bytes", fifoSize(int(a.ncells), int(a.stride)))
		}
		if !bytes.Equal(a.encode(), b) {
			t.Fatalf("%x decodes to %+v, which encodes differently", b, a)
		}
	})
}

// FuzzCellHeaderDecode checks that a cell header from another process never
// yields a length beyond the cell or an id beyond uct.AMMaxID.
func FuzzCellHeaderDecode(f *testing.F) {
	for _, h := range []struct {
		id uint8
		n  int
	}{{0, 0}, {1, 8}, {uct.AMMaxID - 1, DefaultSegSize}, {voidID, 0}} {
		b := make([]byte, cellHeaderSize-8)
		putCellHeader(b, h.id, h.n)
		f.Add(b, DefaultSegSize)
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}, DefaultSegSize)
	f.Add([]byte{1, 2, 3}, 100)
	f.Fuzz(func(t *testing.T, b []byte, payload int) {
		id, n, err := decodeCellHeader(b, payload)
		if len(b) == cellHeaderSize-8 {
			// The fast path takes exactly the messages decodeCellHeader
			// accepts (void cells and errors are left to it).
			fid, fn, ok := cellHeaderFast((*[cellHeaderSize - 8]byte)(b), payload)
			if msg := err == nil && id != voidID; ok != msg || ok && (fid != id || fn != n) {
				t.Fatalf("%x, payload %d: fast path id %d length %d ok %v; decodeCellHeader id %d length %d err %v", b, payload, fid, fn, ok, id, n, err)
			}
		}
		if err != nil {
			if !errors.Is(err, ucs.ErrInvalidParam) {
				t.Fatalf("error %v is not ErrInvalidParam", err)
			}
			return
		}
		if n < 0 || n > payload || (id >= uct.AMMaxID && (id != voidID || n != 0)) {
			t.Fatalf("accepted id %d length %d for payload %d", id, n, payload)
		}
		e := make([]byte, len(b))
		putCellHeader(e, id, n)
		if !bytes.Equal(e, b) {
			t.Fatalf("%x decodes to id %d length %d, which encodes as %x", b, id, n, e)
		}
	})
}
