package sm

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
	"github.com/goshmem/goshmem/uct/uctest"
)

// sysvSegmentsOf lists the System V segments that processes pids created,
// from /proc/sysvipc/shm (what ipcs -m shows): shmid to creator pid.
func sysvSegmentsOf(t testing.TB, pids ...int) map[int]int {
	t.Helper()
	f, err := os.Open("/proc/sysvipc/shm")
	if err != nil {
		t.Fatalf("cannot list System V segments: %v", err)
	}
	defer f.Close()
	out := map[int]int{}
	s := bufio.NewScanner(f)
	s.Scan() // header: key shmid perms size cpid ...
	for s.Scan() {
		fs := strings.Fields(s.Text())
		if len(fs) < 5 {
			continue
		}
		id, _ := strconv.Atoi(fs[1])
		cpid, _ := strconv.Atoi(fs[4])
		for _, p := range pids {
			if cpid == p {
				out[id] = cpid
			}
		}
	}
	return out
}

// shmStat returns IPC_STAT of shmid.
func shmStat(shmid int) (unix.SysvShmDesc, error) {
	var st unix.SysvShmDesc
	_, err := unix.SysvShmCtl(shmid, unix.IPC_STAT, &st)
	return st, err
}

func TestSysvResources(t *testing.T) {
	c, err := uct.LookupComponent("sysv")
	if err != nil {
		t.Fatal(err)
	}
	if rs, _ := c.MDResources(); len(rs) != 1 || rs[0].Name != "sysv" {
		t.Errorf("MDResources = %v", rs)
	}
	if _, err := c.OpenMD("posix", nil); !errors.Is(err, ucs.ErrNoDevice) {
		t.Errorf("OpenMD(posix) err = %v", err)
	}
	md, err := c.OpenMD("sysv", nil)
	if err != nil {
		t.Fatal(err)
	}
	tls, _ := md.TLResources()
	want := uct.TLResource{TLName: "sysv", DevName: "memory", DevType: uct.DeviceTypeShm, Latency: 80 * time.Nanosecond, Bandwidth: 12e9}
	if len(tls) != 1 || tls[0] != want {
		t.Errorf("TLResources = %v, want [%v]", tls, want)
	}
	attr, _ := md.Query()
	if attr.Flags != uct.MDFlagAlloc|uct.MDFlagFixed|uct.MDFlagRkeyPtr|uct.MDFlagNeedRkey || attr.RkeyPackedSize != SysvMkeyPackedSize ||
		attr.ComponentName != "sysv" || attr.MaxAlloc != shmMax() {
		t.Errorf("MD attr = %+v", attr)
	}
	if _, err := md.MemReg(nil, 8, 0); !errors.Is(err, ucs.ErrUnsupported) {
		t.Errorf("MemReg err = %v, want ErrUnsupported", err)
	}
	if _, err := md.MemAlloc(-1, 0, ""); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("MemAlloc(-1) err = %v, want ErrInvalidParam", err)
	}
	if _, err := md.IfaceOpen(nil, &uct.IfaceParams{TLName: PosixTLName, DevName: DevName}, nil); !errors.Is(err, ucs.ErrNoDevice) {
		t.Errorf("IfaceOpen(posix resource) err = %v, want ErrNoDevice", err)
	}
	i, err := md.IfaceOpen(nil, &uct.IfaceParams{TLName: SysvTLName, DevName: DevName}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer i.Close()
	ia, _ := i.Query()
	pi := openTestIface(t)
	pa, _ := pi.Query()
	if *ia != *pa {
		t.Errorf("sysv iface attr %+v differs from posix %+v", ia, pa)
	}
	if !i.IsReachable(pi.DeviceAddress(), pi.Address()) {
		t.Error("sysv iface cannot reach a posix iface of the same process")
	}
}

// TestSysvSegments allocates segments and checks that they are private
// (0600, this user, marked for removal from the start), writable, and gone
// from the system when freed; a 1 GiB segment costs nothing until used.
func TestSysvSegments(t *testing.T) {
	md, _ := (&SysvComponent{}).OpenMD(SysvMDName, nil)
	sizes := []int{1, 4096, 5000}
	if shmMax() >= 1<<30 {
		sizes = append(sizes, 1<<30)
	} else {
		t.Logf("kernel.shmmax = %d: 1 GiB segment not tried", shmMax())
	}
	for _, size := range sizes {
		a, err := md.MemAlloc(size, 0, "test")
		if err != nil {
			t.Fatalf("MemAlloc(%d): %v", size, err)
		}
		h := a.Memh.(*SysvMemh)
		if a.Length < size || a.Length%os.Getpagesize() != 0 || a.Length != h.Length {
			t.Errorf("MemAlloc(%d) length %d", size, a.Length)
		}
		st, err := shmStat(h.ShmID)
		switch {
		case err != nil:
			t.Fatalf("IPC_STAT of the segment: %v", err)
		case st.Perm.Mode&0o777 != 0o600:
			t.Errorf("segment mode %o, want 600", st.Perm.Mode&0o777)
		case st.Perm.Mode&shmDest == 0:
			t.Error("segment not marked for removal")
		case st.Perm.Key != 0:
			t.Errorf("segment has key %#x", st.Perm.Key)
		case int(st.Cpid) != os.Getpid() || int(st.Perm.Uid) != os.Geteuid():
			t.Errorf("segment created by %d, owned by %d", st.Cpid, st.Perm.Uid)
		case st.Segsz != uint64(a.Length) || st.Nattch != 1:
			t.Errorf("segment of %d bytes, %d attachments", st.Segsz, st.Nattch)
		}
		if _, ok := sysvSegmentsOf(t, os.Getpid())[h.ShmID]; !ok {
			t.Errorf("shmid %d not listed in /proc/sysvipc/shm", h.ShmID)
		}
		mem := unsafe.Slice((*byte)(a.Address), a.Length)
		if mem[0] != 0 || mem[len(mem)-1] != 0 {
			t.Error("new segment not zeroed")
		}
		mem[0], mem[len(mem)-1] = 1, 2
		if mem[0] != 1 || mem[len(mem)-1] != 2 {
			t.Error("segment not writable")
		}
		if err := md.MemFree(a.Memh); err != nil {
			t.Fatal(err)
		}
		if _, err := shmStat(h.ShmID); err == nil {
			t.Errorf("shmid %d still exists after MemFree", h.ShmID)
		}
		if err := md.MemFree(a.Memh); !errors.Is(err, ucs.ErrInvalidParam) {
			t.Errorf("double MemFree err = %v", err)
		}
		if _, err := md.MkeyPack(nil, a.Memh); !errors.Is(err, ucs.ErrInvalidParam) {
			t.Errorf("MkeyPack of a freed handle err = %v", err)
		}
	}
	if left := sysvSegmentsOf(t, os.Getpid()); len(left) != 0 {
		t.Errorf("segments left in ipcs -m: %v", left)
	}
	if err := md.MemFree(&Memh{}); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("MemFree of a posix handle err = %v", err)
	}
}

// TestSysvShmmax checks that a segment beyond kernel.shmmax fails with a
// clear ucs.ErrNoMemory.
func TestSysvShmmax(t *testing.T) {
	f := filepath.Join(t.TempDir(), "shmmax")
	if err := os.WriteFile(f, []byte("8192\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	defer func(old string) { shmmaxPath = old }(shmmaxPath)
	shmmaxPath = f
	md, _ := (&SysvComponent{}).OpenMD(SysvMDName, nil)
	if attr, _ := md.Query(); attr.MaxAlloc != 8192 {
		t.Errorf("MaxAlloc = %d, want 8192", attr.MaxAlloc)
	}
	_, err := md.MemAlloc(8193, 0, "")
	if !errors.Is(err, ucs.ErrNoMemory) || !strings.Contains(err.Error(), "shmmax") {
		t.Errorf("MemAlloc beyond shmmax err = %v, want ErrNoMemory naming shmmax", err)
	}
	a, err := md.MemAlloc(8192, 0, "")
	if err != nil {
		t.Fatalf("MemAlloc(shmmax): %v", err)
	}
	md.MemFree(a.Memh)
}

func TestSysvMkeyDecode(t *testing.T) {
	good := (&sysvMkey{pid: 100, shmid: 7, length: 4096, addr: 0x7f0000000000}).encode()
	if k, err := decodeSysvMkey(good); err != nil || k.pid != 100 || k.shmid != 7 || k.length != 4096 || k.addr != 0x7f0000000000 {
		t.Fatalf("decode(good) = %+v, %v", k, err)
	}
	mod := func(off int, v uint64, size int) []byte { return uctest.Patched(good, off, size, v) }
	posixKey := (&mkey{pid: 100, fd: 7, id: 1, length: 4096, addr: 0x7f0000000000}).encode()
	uctest.CheckBadKeys(t, &SysvComponent{}, good, func(b []byte) error { _, err := decodeSysvMkey(b); return err }, []uctest.BadKey{
		{Name: "posix key", Key: posixKey},
		{Name: "magic", Key: mod(0, 0x12345678, 4)},
		{Name: "version", Key: mod(4, 2, 2)},
		{Name: "reserved", Key: mod(6, 1, 2)},
		{Name: "zero pid", Key: mod(8, 0, 4)},
		{Name: "huge pid", Key: mod(8, maxPid, 4)},
		{Name: "negative shmid", Key: mod(12, 0xffffffff, 4)},
		{Name: "zero length", Key: mod(16, 0, 8)},
		{Name: "zero address", Key: mod(24, 0, 8)},
		{Name: "wrapping range", Key: mod(24, ^uint64(0)-100, 8)},
		{Name: "range above user space", Key: mod(16, maxAddr, 8)},
	}...)
	// A sysv key is not a posix key either.
	if _, err := (&PosixComponent{}).RkeyUnpack(good); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("posix RkeyUnpack of a sysv key err = %v", err)
	}
}

// TestSysvLocalRkey unpacks keys of this process: delta 0, one attachment
// shared, range checks of RkeyPtr, rkeys kept apart from posix ones.
func TestSysvLocalRkey(t *testing.T) {
	c := &SysvComponent{}
	md, _ := c.OpenMD(SysvMDName, nil)
	a, err := md.MemAlloc(8192, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	shmid := a.Memh.(*SysvMemh).ShmID
	key, _ := md.MkeyPack(nil, a.Memh)
	r1, err := c.RkeyUnpack(key)
	if err != nil || r1.Rkey != 0 {
		t.Fatalf("RkeyUnpack = %v, %v", r1, err)
	}
	r2, _ := c.RkeyUnpack(key)
	if st, _ := shmStat(shmid); st.Nattch != 1 {
		t.Errorf("%d attachments after two local unpacks, want 1", st.Nattch)
	}
	base := uint64(uintptr(a.Address))
	p, err := c.RkeyPtr(r1, base+100)
	if err != nil || p != unsafe.Add(a.Address, 100) {
		t.Errorf("RkeyPtr = %p, %v", p, err)
	}
	for _, raddr := range []uint64{base - 1, base + 8192, 0} {
		if _, err := c.RkeyPtr(r1, raddr); !errors.Is(err, ucs.ErrOutOfRange) {
			t.Errorf("RkeyPtr(%#x) err = %v, want ErrOutOfRange", raddr, err)
		}
	}
	pc := &PosixComponent{}
	if _, err := pc.RkeyPtr(r1, base); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("posix RkeyPtr of a sysv rkey err = %v", err)
	}
	if err := pc.RkeyRelease(r1); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("posix RkeyRelease of a sysv rkey err = %v", err)
	}
	md.MemFree(a.Memh)
	// The rkeys keep the attachment alive; new unpacks fail.
	*(*byte)(p) = 1
	if _, err := shmStat(shmid); err != nil {
		t.Errorf("segment gone while rkeys use it: %v", err)
	}
	if _, err := c.RkeyUnpack(key); !errors.Is(err, ucs.ErrUnreachable) {
		t.Errorf("RkeyUnpack of a freed segment err = %v, want ErrUnreachable", err)
	}
	c.RkeyRelease(r1)
	if err := c.RkeyRelease(r1); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("double RkeyRelease err = %v", err)
	}
	c.RkeyRelease(r2)
	if _, err := shmStat(shmid); err == nil {
		t.Error("segment still exists after the last release")
	}
}

// TestSysvAttachChecks attaches segments that the sysv MD did not make.
func TestSysvAttachChecks(t *testing.T) {
	for _, tt := range []struct {
		name   string
		mode   int
		remove bool
	}{
		{"not marked for removal", 0o600, false},
		{"readable by others", 0o644, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			id, err := unix.SysvShmGet(unix.IPC_PRIVATE, 4096, unix.IPC_CREAT|tt.mode)
			if err != nil {
				t.Fatalf("shmget: %v", err)
			}
			b, err := unix.SysvShmAttach(id, 0, 0)
			if err != nil {
				unix.SysvShmCtl(id, unix.IPC_RMID, nil)
				t.Fatalf("shmat: %v", err)
			}
			defer unix.SysvShmDetach(b)
			if tt.remove {
				unix.SysvShmCtl(id, unix.IPC_RMID, nil)
			} else {
				defer unix.SysvShmCtl(id, unix.IPC_RMID, nil)
			}
			k := sysvMkey{pid: pid, shmid: int32(id), length: 4096, addr: 0x10000}
			if m, err := attachSysv(k); !errors.Is(err, ucs.ErrUnreachable) {
				t.Errorf("attach err = %v, want ErrUnreachable", err)
				if err == nil {
					shmdt(m.addr)
				}
			}
			if st, _ := shmStat(id); st.Nattch != 1 {
				t.Errorf("%d attachments after a refused attach, want 1", st.Nattch)
			}
		})
	}
}

// TestSysvTwoProcess runs the posix RMA and atomics tests against a peer
// whose segment is a sysv one (one peer for both, to keep the test short),
// then checks that neither process left a segment behind.
func TestSysvTwoProcess(t *testing.T) {
	p := startPeerMD(t, sysvTest)
	t.Run("RMA", func(t *testing.T) { testTwoProcessRMA(t, p) })
	t.Run("Atomics", func(t *testing.T) { testTwoProcessAtomics(t, p) })
	peerPid := p.Pid()
	p.stop()
	if left := sysvSegmentsOf(t, os.Getpid(), peerPid); len(left) != 0 {
		t.Errorf("segments left in ipcs -m: %v", left)
	}
}

// TestSysvForgedKeys unpacks keys that name the peer's segment wrongly, and
// checks that the peer's segment disappears when both processes are done
// with it, even when the peer is killed.
func TestSysvForgedKeys(t *testing.T) {
	p := startPeerMD(t, sysvTest)
	c := &SysvComponent{}
	k, _ := decodeSysvMkey(p.key)
	if st, err := shmStat(int(k.shmid)); err != nil || st.Nattch != 2 || st.Perm.Mode&0o777 != 0o600 || st.Perm.Mode&shmDest == 0 {
		t.Errorf("peer segment: %d attachments, mode %o (err %v); want 2, 600 and marked for removal", st.Nattch, st.Perm.Mode, err)
	}
	// A local segment, so that a key can name a shmid the peer did not make.
	md, _ := c.OpenMD(SysvMDName, nil)
	local, err := md.MemAlloc(4096, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	defer md.MemFree(local.Memh)
	forge := func(f func(k *sysvMkey)) []byte {
		k2 := k
		f(&k2)
		return k2.encode()
	}
	tests := []struct {
		name string
		key  []byte
		want error
	}{
		{"another process's shmid", forge(func(k *sysvMkey) { k.shmid = int32(local.Memh.(*SysvMemh).ShmID) }), ucs.ErrUnreachable},
		{"no such shmid", forge(func(k *sysvMkey) { k.shmid = 0x7ffffff0 }), ucs.ErrUnreachable},
		{"other pid", forge(func(k *sysvMkey) { k.pid = maxPid - 1 }), ucs.ErrUnreachable},
		{"this pid", forge(func(k *sysvMkey) { k.pid = pid }), ucs.ErrUnreachable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if rk, err := c.RkeyUnpack(tt.key); !errors.Is(err, tt.want) {
				t.Errorf("RkeyUnpack err = %v, want %v", err, tt.want)
				if err == nil {
					c.RkeyRelease(rk)
				}
			}
		})
	}
	// Not cached: a longer key is checked against the segment itself.
	c.RkeyRelease(p.rkey)
	p.rkey = uct.RkeyBundle{}
	if rk, err := c.RkeyUnpack(forge(func(k *sysvMkey) { k.length = 2 * childSegSize })); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("RkeyUnpack of a key longer than its segment err = %v, want ErrInvalidParam", err)
		if err == nil {
			c.RkeyRelease(rk)
		}
	}
	if st, _ := shmStat(int(k.shmid)); st.Nattch != 1 {
		t.Errorf("%d attachments after refused unpacks, want the peer's only", st.Nattch)
	}
	// The segment outlives its owner while attached here, and no longer.
	rk, err := c.RkeyUnpack(p.key)
	if err != nil {
		t.Fatal(err)
	}
	ptr, _ := c.RkeyPtr(rk, p.base+8)
	*(*uint64)(ptr) = 0x1234
	p.Kill()
	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	if *(*uint64)(ptr) != 0x1234 {
		t.Error("segment changed after its owner died")
	}
	if _, ok := sysvSegmentsOf(t, p.Pid())[int(k.shmid)]; !ok {
		t.Error("segment gone while attached here")
	}
	if rk2, err := c.RkeyUnpack(p.key); err != nil || rk2.Rkey != rk.Rkey {
		t.Errorf("RkeyUnpack of a cached segment after its owner died = %v, %v", rk2, err)
	} else {
		c.RkeyRelease(rk2)
	}
	c.RkeyRelease(rk)
	if left := sysvSegmentsOf(t, p.Pid()); len(left) != 0 {
		t.Errorf("segments of the dead peer left in ipcs -m: %v", left)
	}
	if _, err := c.RkeyUnpack(p.key); !errors.Is(err, ucs.ErrUnreachable) {
		t.Errorf("RkeyUnpack after the segment is gone err = %v, want ErrUnreachable", err)
	}
}

// BenchmarkSysvPutShort8 puts 8 bytes into a peer's sysv segment through the
// uct.EP interface.
func BenchmarkSysvPutShort8(b *testing.B) {
	p := startPeerMD(b, sysvTest)
	var ep uct.EP = p.ep
	buf := make([]byte, 8)
	raddr, rkey := p.base+64, p.rkey.Rkey
	b.ResetTimer()
	for range b.N {
		ep.PutShort(buf, raddr, rkey)
	}
}

// FuzzSysvMkeyDecode checks that the sysv key decoder either fails with
// ucs.ErrInvalidParam or returns a key that satisfies every invariant and
// encodes back to the same bytes.
func FuzzSysvMkeyDecode(f *testing.F) {
	good := (&sysvMkey{pid: 4242, shmid: 98307, length: 1 << 20, addr: 0x7f12_3456_0000}).encode()
	f.Add(good)
	f.Add([]byte{})
	f.Add(good[:20])
	f.Add(make([]byte, SysvMkeyPackedSize))
	f.Add((&sysvMkey{pid: 1, shmid: 0, length: ^uint64(0), addr: 1}).encode())
	f.Add((&mkey{pid: 1, fd: 3, id: 1, length: 4096, addr: 4096}).encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := decodeSysvMkey(b)
		if err != nil {
			if !errors.Is(err, ucs.ErrInvalidParam) {
				t.Fatalf("error %v is not ErrInvalidParam", err)
			}
			return
		}
		if k.pid == 0 || k.pid >= maxPid || k.shmid < 0 || k.length == 0 || k.addr == 0 || k.addr+k.length > maxAddr || k.addr+k.length < k.addr {
			t.Fatalf("accepted %+v", k)
		}
		if !bytes.Equal(k.encode(), b) {
			t.Fatalf("%x decodes to %+v, which encodes differently", b, k)
		}
	})
}

// TestEPDestroyed checks that active messages on a destroyed EP (of either
// MD's iface) fail instead of writing into the unmapped FIFO.
func TestEPDestroyed(t *testing.T) {
	for _, tm := range []testMD{posixTest, sysvTest} {
		md, _ := tm.comp.OpenMD(tm.name, nil)
		i, err := md.IfaceOpen(nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer i.Close()
		ep, err := i.EPCreate(&uct.EPParams{DeviceAddr: i.DeviceAddress(), IfaceAddr: i.Address()})
		if err != nil {
			t.Fatal(err)
		}
		ep.Destroy()
		_, sb := ep.AMBcopy(1, func([]byte) int { t.Error("pack called on a destroyed EP"); return 0 }, 0)
		for name, s := range map[string]ucs.Status{
			"AMShort":    ep.AMShort(1, 0, nil),
			"AMBcopy":    sb,
			"AMZcopy":    ep.AMZcopy(1, nil, nil, 0, nil),
			"PendingAdd": ep.PendingAdd(&uct.PendingReq{}, 0),
		} {
			if s != ucs.ErrNotConnected {
				t.Errorf("%s: %s after Destroy = %v, want ErrNotConnected", tm.name, name, s)
			}
		}
		ep.Destroy() // twice is harmless
	}
}
