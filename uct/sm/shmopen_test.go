package sm

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/internal/testpeer"
	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// namedSize is the size of the segment of TestNamedSegment.
const namedSize = 3 * 4096

// openNamedMD opens a posix MD with USE_SHM_OPEN=y.
func openNamedMD(tb testing.TB) uct.MD {
	tb.Helper()
	c := &PosixComponent{}
	cfg := ucs.ReadConfig("GOSHMEM_SM_TEST_NOENV_", c.MDConfigTable())
	if err := cfg.Modify("USE_SHM_OPEN", "y"); err != nil {
		tb.Fatal(err)
	}
	md, err := c.OpenMD(PosixMDName, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return md
}

func TestPosixMDConfig(t *testing.T) {
	c := &PosixComponent{}
	tab := c.MDConfigTable()
	if len(tab) != 1 || tab[0].Name != "USE_SHM_OPEN" || tab[0].Default != "n" {
		t.Fatalf("MDConfigTable = %+v", tab)
	}
	cfg := ucs.ReadConfig("GOSHMEM_SM_TEST_NOENV_", tab)
	if md, err := c.OpenMD(PosixMDName, cfg); err != nil || md.(*PosixMD).named {
		t.Fatalf("default: %+v, %v", md, err)
	}
	cfg.Modify("USE_SHM_OPEN", "maybe")
	if _, err := c.OpenMD(PosixMDName, cfg); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("USE_SHM_OPEN=maybe: err = %v, want ErrInvalidParam", err)
	}
}

// runNamedSegmentChild is the peer of TestNamedSegment (role
// "sm-named-segment"): it maps the segment whose hex key it is given,
// checks the parent's pattern and writes its own.
func runNamedSegmentChild(args []string, _ io.Reader, _ io.Writer) error {
	if len(args) != 1 {
		return fmt.Errorf("arguments %q, want a key", args)
	}
	key, err := hex.DecodeString(args[0])
	if err != nil {
		return err
	}
	k, err := decodeMkey(key)
	if err != nil || !k.named || k.pid == pid {
		return fmt.Errorf("key %+v, %v", k, err)
	}
	c := &PosixComponent{}
	rk, err := c.RkeyUnpack(key)
	if err != nil {
		return err
	}
	p, err := c.RkeyPtr(rk, k.addr)
	if err != nil {
		return err
	}
	mem := unsafe.Slice((*byte)(p), namedSize)
	for i := range mem {
		if mem[i] != byte(i*7) {
			return fmt.Errorf("byte %d is %d, want %d", i, mem[i], byte(i*7))
		}
		mem[i] = byte(i * 3)
	}
	return c.RkeyRelease(rk)
}

func TestNamedSegment(t *testing.T) {
	md := openNamedMD(t)
	a, err := md.MemAlloc(namedSize-100, uct.MemAccessDefault, "named")
	if err != nil {
		t.Fatal(err)
	}
	h := a.Memh.(*Memh)
	if a.Length != namedSize || h.FD != -1 || h.Path != ucs.ShmSegmentPath(pid, h.SegmentID) {
		t.Fatalf("allocation %+v, handle %+v", a, h)
	}
	var st unix.Stat_t
	if err := unix.Stat(h.Path, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&0o7777 != 0o600 || st.Uid != uint32(os.Geteuid()) || st.Size != namedSize {
		t.Fatalf("%s: mode %#o, uid %d, size %d; want 0600, %d, %d", h.Path, st.Mode&0o7777, st.Uid, st.Size, os.Geteuid(), namedSize)
	}
	mem := unsafe.Slice((*byte)(a.Address), a.Length)
	for i := range mem {
		mem[i] = byte(i * 7)
	}
	key, err := md.MkeyPack(nil, a.Memh)
	if err != nil {
		t.Fatal(err)
	}
	if k, err := decodeMkey(key); err != nil || !k.named || k.fd != 0 || k.id != h.SegmentID {
		t.Fatalf("packed key %+v, %v", k, err)
	}

	// A key of this process finds the allocation itself.
	c := md.Component()
	rk, err := c.RkeyUnpack(key)
	if err != nil || rk.Rkey != 0 {
		t.Fatalf("local unpack: %+v, %v", rk, err)
	}
	c.RkeyRelease(rk)

	child := testpeer.Start(t, "sm-named-segment", testpeer.Options{Args: []string{hex.EncodeToString(key)}})
	if err := child.Wait(); err != nil {
		t.Fatal(err)
	}
	for i := range mem {
		if mem[i] != byte(i*3) {
			t.Fatalf("byte %d is %d after the child, want %d", i, mem[i], byte(i*3))
		}
	}

	if err := md.MemFree(a.Memh); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(h.Path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s after MemFree: %v", h.Path, err)
	}
	if _, err := c.RkeyUnpack(key); !errors.Is(err, ucs.ErrUnreachable) {
		t.Errorf("unpack after MemFree: %v, want ErrUnreachable", err)
	}
}

// TestNamedSegmentRefused checks the checks of a peer's file: mode, type
// (no symlinks), owner, size.
func TestNamedSegmentRefused(t *testing.T) {
	const fake = maxPid - 1 // no process of ours has this pid
	if err := ucs.RemoveShmSegments(fake); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ucs.RemoveShmSegments(fake) })
	id := randomID()
	path := ucs.ShmSegmentPath(fake, id)
	fd, err := unix.Open(path, unix.O_CREAT|unix.O_EXCL|unix.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	unix.Ftruncate(fd, 4096)
	key := func(id uint64, length uint64) []byte {
		return (&mkey{pid: fake, id: id, length: length, addr: 0x10000, named: true}).encode()
	}
	c := &PosixComponent{}
	unpack := func(key []byte) error {
		rk, err := c.RkeyUnpack(key)
		if err == nil {
			c.RkeyRelease(rk)
		}
		return err
	}
	if err := unpack(key(id, 4096)); err != nil {
		t.Fatalf("mode 0600: %v", err)
	}
	for _, mode := range []uint32{0o644, 0o660, 0o400, 0o4600} {
		unix.Fchmod(fd, mode)
		if err := unpack(key(id, 4096)); !errors.Is(err, ucs.ErrUnreachable) {
			t.Errorf("mode %#o: err = %v, want ErrUnreachable", mode, err)
		}
	}
	unix.Fchmod(fd, 0o600)
	if err := unpack(key(id, 8192)); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("short file: err = %v, want ErrInvalidParam", err)
	}
	if os.Geteuid() == 0 {
		unix.Fchown(fd, 65534, 65534)
		if err := unpack(key(id, 4096)); !errors.Is(err, ucs.ErrUnreachable) {
			t.Errorf("file of another user: err = %v, want ErrUnreachable", err)
		}
		unix.Fchown(fd, 0, 0)
	}
	unix.Close(fd)
	link := randomID()
	if err := os.Symlink(path, ucs.ShmSegmentPath(fake, link)); err != nil {
		t.Fatal(err)
	}
	if err := unpack(key(link, 4096)); !errors.Is(err, ucs.ErrUnreachable) {
		t.Errorf("symlink: err = %v, want ErrUnreachable", err)
	}
	if err := unpack(key(randomID(), 4096)); !errors.Is(err, ucs.ErrUnreachable) {
		t.Errorf("missing file: err = %v, want ErrUnreachable", err)
	}
}
