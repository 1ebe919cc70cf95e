package ucp

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goshmem/goshmem/bootstrap"
	"github.com/goshmem/goshmem/internal/petest"
	"github.com/goshmem/goshmem/ucs"
)

// newContextCfg creates a context with features and the configuration
// variables vars (name without prefix, then value, in pairs) set.
func newContextCfg(t testing.TB, features Feature, vars ...string) *Context {
	t.Helper()
	return newContextParams(t, new(Params).SetFeatures(features), vars...)
}

// newContextParams is newContextCfg with params of the caller's.
func newContextParams(t testing.TB, params *Params, vars ...string) *Context {
	t.Helper()
	cfg, err := ReadConfig("", "")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(vars); i += 2 {
		if err := cfg.Modify(vars[i], vars[i+1]); err != nil {
			t.Fatalf("config %s=%s: %v", vars[i], vars[i+1], err)
		}
	}
	c, err := Init(params, cfg)
	if err != nil {
		t.Fatalf("Init with %v: %v", vars, err)
	}
	t.Cleanup(c.Cleanup)
	return c
}

// allTLS returns vars with UCX_TLS=all first: for tests of what needs
// both shared memory and network transports, whatever UCX_TLS the tests run
// under (a later TLS in vars overrides it).
func allTLS(vars ...string) []string { return append([]string{"TLS", "all"}, vars...) }

// mapMem maps memory with p, and unmaps it at the end of the test unless
// the test did.
func mapMem(t testing.TB, c *Context, p *MemMapParams) *MemHandle {
	t.Helper()
	m, err := c.MemMap(p)
	if err != nil {
		t.Fatalf("MemMap: %v", err)
	}
	t.Cleanup(func() {
		if !m.unmapped {
			c.MemUnmap(m)
		}
	})
	return m
}

func memBytes(m *MemHandle) []byte { return unsafe.Slice((*byte)(m.Address()), m.Length()) }

// freeAddress returns a page-aligned address range of n bytes that nothing
// is mapped at (it was mapped and unmapped again).
func freeAddress(t *testing.T, n int) unsafe.Pointer {
	t.Helper()
	p, err := unix.MmapPtr(-1, 0, nil, uintptr(n), unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.MunmapPtr(p, uintptr(n)); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMemMapParams(t *testing.T) {
	c := newContext(t)
	page := unix.Getpagesize()
	goMem := make([]byte, 3*page)
	aligned := unsafe.Pointer(&goMem[page-int(uintptr(unsafe.Pointer(&goMem[0])))%page])
	for _, tt := range []struct {
		name string
		p    *MemMapParams
		want error
	}{
		{"nil params", nil, ucs.ErrInvalidParam},
		{"neither length nor exported buffer", new(MemMapParams).SetFlags(MemMapAllocate), ucs.ErrInvalidParam},
		{"zero length", new(MemMapParams).SetLength(0).SetFlags(MemMapAllocate), ucs.ErrInvalidParam},
		{"negative length", new(MemMapParams).SetLength(-1).SetFlags(MemMapAllocate), ucs.ErrInvalidParam},
		{"length field not set", &MemMapParams{FieldMask: MemMapParamFieldFlags | MemMapParamFieldExportedMemhBuffer, Length: 4096, Flags: MemMapAllocate}, ucs.ErrInvalidParam},
		{"no address allocates without MemMapAllocate", new(MemMapParams).SetLength(4096), nil},
		{"nil address allocates without MemMapAllocate", new(MemMapParams).SetAddress(nil).SetLength(4096), nil},
		{"address not in the mask counts as none: allocates", &MemMapParams{FieldMask: MemMapParamFieldLength, Address: aligned, Length: 4096}, nil},
		{"fixed without address", new(MemMapParams).SetLength(4096).SetFlags(MemMapAllocate | MemMapFixed), ucs.ErrInvalidParam},
		{"fixed on memory to register", new(MemMapParams).SetAddress(aligned).SetLength(page).SetFlags(MemMapFixed), ucs.ErrInvalidParam},
		{"fixed at an unaligned address", new(MemMapParams).SetAddress(unsafe.Add(aligned, 8)).SetLength(page).SetFlags(MemMapAllocate | MemMapFixed), ucs.ErrInvalidParam},
		{"fixed over mapped memory", new(MemMapParams).SetAddress(aligned).SetLength(page).SetFlags(MemMapAllocate | MemMapFixed), ucs.ErrNoMemory},
		{"device memory", new(MemMapParams).SetLength(4096).SetFlags(MemMapAllocate).SetMemoryType(ucs.MemoryTypeCUDA), ucs.ErrUnsupported},
		{"exported buffer and allocate", new(MemMapParams).SetExportedMemhBuffer([]byte("GMH")).SetFlags(MemMapAllocate), ucs.ErrInvalidParam},
		{"allocate", new(MemMapParams).SetLength(4096).SetFlags(MemMapAllocate), nil},
		{"allocate nonblocking", new(MemMapParams).SetLength(4096).SetFlags(MemMapAllocate | MemMapNonblock), nil},
		{"allocate unknown memory type", new(MemMapParams).SetLength(4096).SetFlags(MemMapAllocate).SetMemoryType(ucs.MemoryTypeUnknown), nil},
		{"allocate at a hint", new(MemMapParams).SetAddress(aligned).SetLength(4096).SetFlags(MemMapAllocate), nil},
		{"register", new(MemMapParams).SetAddress(aligned).SetLength(page), nil},
		{"exported buffer field set to nil: length counts", new(MemMapParams).SetExportedMemhBuffer(nil).SetLength(4096).SetFlags(MemMapAllocate), nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for i := range goMem {
				goMem[i] = byte(i)
			}
			m, err := c.MemMap(tt.p)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("MemMap: %v, want %v", err, tt.want)
			}
			if err == nil {
				if m.Query().Method != "" { // allocated: the memory is there, readable and writable
					b := memBytes(m)
					b[0], b[len(b)-1] = 1, 2
				}
				if err := c.MemUnmap(m); err != nil {
					t.Fatal(err)
				}
			}
			for i := range goMem {
				if goMem[i] != byte(i) {
					t.Fatalf("Go memory changed at %d", i)
				}
			}
		})
	}
}

// TestMemMapFixedAndProt: MemMapFixed places the memory exactly at the
// address with every allocation method (mmap, and the shared-memory MDs,
// which used to be passed over: a fixed allocation then never came from
// shared memory), and never over memory mapped there already.
func TestMemMapFixedAndProt(t *testing.T) {
	backends := append([]struct {
		name, method string
		env          []string
	}{{"mmap", "mmap", []string{"UCX_ALLOC_PRIO=mmap"}}}, exportBackends...)
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			setEnvPairs(t, be.env)
			prio := be.method
			c := newContextCfg(t, FeatureRMA, allTLS()...)
			at := freeAddress(t, 1<<20)
			m, err := c.MemMap(new(MemMapParams).SetAddress(at).SetLength(1 << 20).SetFlags(MemMapAllocate | MemMapFixed))
			if err != nil {
				if _, aerr := c.MemMap(new(MemMapParams).SetLength(1 << 20)); aerr != nil {
					t.Skipf("%s allocates nothing here, fixed or not: %v", prio, aerr)
				}
				t.Fatalf("MemMapFixed at %p: %v", at, err)
			}
			t.Cleanup(func() { c.MemUnmap(m) })
			if m.Address() != at {
				t.Fatalf("MemMapFixed at %p mapped at %p", at, m.Address())
			}
			if q := m.Query(); q.Method != prio {
				t.Errorf("fixed allocation by %q, want %s", q.Method, prio)
			}
			// A second fixed mapping over the first must fail, and not
			// replace it.
			memBytes(m)[100] = 42
			if _, err := c.MemMap(new(MemMapParams).SetAddress(unsafe.Add(at, 4096)).SetLength(4096).SetFlags(MemMapAllocate | MemMapFixed)); !errors.Is(err, ucs.ErrNoMemory) {
				t.Errorf("fixed mapping over a mapping: %v, want ErrNoMemory", err)
			}
			if memBytes(m)[100] != 42 {
				t.Error("a refused fixed mapping replaced the memory")
			}
		})
	}

	c := newContext(t)
	// Protection: remote access by default; local only keeps the memory
	// out of software RMA (no token, nothing a peer can name).
	def := mapMem(t, c, new(MemMapParams).SetLength(4096).SetFlags(MemMapAllocate))
	if def.prot != ProtDefault || def.token == 0 {
		t.Errorf("default protection %#x, token %#x", def.prot, def.token)
	}
	local := mapMem(t, c, new(MemMapParams).SetLength(4096).SetFlags(MemMapAllocate).SetProt(ProtLocalRead|ProtLocalWrite))
	if local.prot != ProtLocalRead|ProtLocalWrite || local.token != 0 {
		t.Errorf("local protection %#x, token %#x", local.prot, local.token)
	}
	if _, ok := c.region(local.token, uint64(uintptr(local.Address())), 1, 0); ok {
		t.Error("locally protected memory is reachable by software RMA")
	}
}

func TestMemQuery(t *testing.T) {
	// Every transport, whatever UCX_TLS says: allocations then come from
	// a shared-memory domain ("md:..."), which the checks below expect.
	c := newContextCfg(t, FeatureRMA|FeatureAMO32|FeatureAMO64, "TLS", "all")
	m := mapMem(t, c, new(MemMapParams).SetLength(10000).SetFlags(MemMapAllocate))
	buf := make([]byte, 4096)
	r := mapMem(t, c, new(MemMapParams).SetAddress(unsafe.Pointer(&buf[0])).SetLength(len(buf)))
	for _, tt := range []struct {
		name string
		m    *MemHandle
		mask uint64
		want MemAttr
	}{
		{"length only", m, MemAttrFieldLength, MemAttr{Length: 10000}},
		{"address only", m, MemAttrFieldAddress, MemAttr{Address: m.Address()}},
		{"memory type", m, MemAttrFieldMemType, MemAttr{MemoryType: ucs.MemoryTypeHost}},
		{"nothing", m, 0, MemAttr{}},
		{"unknown bits ignored", m, 1 << 20, MemAttr{}},
		{"method of registered memory", r, MemAttrFieldMethod | MemAttrFieldLength, MemAttr{Length: 4096}},
		{"ucx fields", r, MemAttrFieldAddress | MemAttrFieldLength | MemAttrFieldMemType, MemAttr{Address: unsafe.Pointer(&buf[0]), Length: 4096}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := MemAttr{FieldMask: tt.mask, Length: -1, Method: "stale", MDs: []string{"stale"}}
			if err := tt.m.QueryAttr(&a); err != nil {
				t.Fatal(err)
			}
			tt.want.FieldMask = tt.mask
			if a.FieldMask != tt.want.FieldMask || a.Address != tt.want.Address || a.Length != tt.want.Length ||
				a.MemoryType != tt.want.MemoryType || a.Method != tt.want.Method || a.MDs != nil {
				t.Errorf("QueryAttr = %+v, want %+v", a, tt.want)
			}
		})
	}
	q := m.Query()
	if q.FieldMask != memAttrFieldsAll || q.Address != m.Address() || q.Length != 10000 || !strings.HasPrefix(q.Method, "md:") || len(q.MDs) == 0 {
		t.Errorf("Query = %+v", q)
	}
	if err := m.QueryAttr(nil); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("QueryAttr(nil): %v", err)
	}
	c.MemUnmap(m)
	if err := m.QueryAttr(&MemAttr{FieldMask: MemAttrFieldLength}); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("QueryAttr after unmap: %v", err)
	}
}

func TestMemAdvise(t *testing.T) {
	c := newContext(t)
	other := newContextCfg(t, FeatureRMA)
	page := unix.Getpagesize()
	goMem := make([]byte, 3*page+100)
	for _, kind := range []struct {
		name string
		p    *MemMapParams
	}{
		{"allocated", new(MemMapParams).SetLength(5*page + 17).SetFlags(MemMapAllocate)},
		{"mmap", new(MemMapParams).SetAddress(freeAddress(t, 4*page)).SetLength(4 * page).SetFlags(MemMapAllocate | MemMapFixed)},
		{"registered Go memory", new(MemMapParams).SetAddress(unsafe.Pointer(&goMem[50])).SetLength(3*page + 10)},
	} {
		m := mapMem(t, c, kind.p)
		n := m.Length()
		at := func(off int) unsafe.Pointer { return unsafe.Add(m.Address(), off) }
		for _, tt := range []struct {
			name string
			p    *MemAdviseParams
			want error
		}{
			{"whole, will need", new(MemAdviseParams).SetAddress(at(0)).SetLength(n).SetAdvice(MadvWillneed), nil},
			{"whole, normal", new(MemAdviseParams).SetAddress(at(0)).SetLength(n).SetAdvice(MadvNormal), nil},
			{"unaligned middle", new(MemAdviseParams).SetAddress(at(7)).SetLength(n - 20).SetAdvice(MadvWillneed), nil},
			{"last byte", new(MemAdviseParams).SetAddress(at(n - 1)).SetLength(1).SetAdvice(MadvWillneed), nil},
			{"empty at the end", new(MemAdviseParams).SetAddress(at(n)).SetLength(0).SetAdvice(MadvNormal), nil},
			{"one byte past the end", new(MemAdviseParams).SetAddress(at(1)).SetLength(n).SetAdvice(MadvNormal), ucs.ErrInvalidParam},
			{"before the start", new(MemAdviseParams).SetAddress(at(-1)).SetLength(2).SetAdvice(MadvNormal), ucs.ErrInvalidParam},
			{"starts past the end", new(MemAdviseParams).SetAddress(at(n + 1)).SetLength(0).SetAdvice(MadvNormal), ucs.ErrInvalidParam},
			{"negative length", new(MemAdviseParams).SetAddress(at(0)).SetLength(-1).SetAdvice(MadvNormal), ucs.ErrInvalidParam},
			{"huge length", new(MemAdviseParams).SetAddress(at(8)).SetLength(int(^uint(0) >> 1)).SetAdvice(MadvNormal), ucs.ErrInvalidParam},
			{"unknown advice", new(MemAdviseParams).SetAddress(at(0)).SetLength(n).SetAdvice(7), ucs.ErrInvalidParam},
			{"no advice", new(MemAdviseParams).SetAddress(at(0)).SetLength(n), ucs.ErrInvalidParam},
			{"no length", new(MemAdviseParams).SetAddress(at(0)).SetAdvice(MadvNormal), ucs.ErrInvalidParam},
			{"no address", new(MemAdviseParams).SetLength(n).SetAdvice(MadvNormal), ucs.ErrInvalidParam},
			{"nil params", nil, ucs.ErrInvalidParam},
		} {
			t.Run(kind.name+"/"+tt.name, func(t *testing.T) {
				b := memBytes(m)
				b[0], b[n-1] = 0x5a, 0xa5
				err := c.MemAdvise(m, tt.p)
				if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
					t.Fatalf("MemAdvise: %v, want %v", err, tt.want)
				}
				if b[0] != 0x5a || b[n-1] != 0xa5 {
					t.Error("advice changed the memory")
				}
			})
		}
		whole := new(MemAdviseParams).SetAddress(m.Address()).SetLength(n).SetAdvice(MadvNormal)
		if err := other.MemAdvise(m, whole); !errors.Is(err, ucs.ErrInvalidParam) {
			t.Errorf("%s: advice through another context: %v", kind.name, err)
		}
		c.MemUnmap(m)
		if err := c.MemAdvise(m, whole); !errors.Is(err, ucs.ErrInvalidParam) {
			t.Errorf("%s: advice after unmap: %v", kind.name, err)
		}
	}
}

// exportBackends are the ways MemMap can allocate exportable memory: each
// sets UCX_ALLOC_PRIO (and the posix MD's USE_SHM_OPEN) in the environment.
var exportBackends = []struct {
	name, method string
	env          []string
}{
	{"posix-memfd", "md:posix", []string{"UCX_ALLOC_PRIO=md:posix", "UCX_POSIX_USE_SHM_OPEN=n"}},
	{"posix-shm-open", "md:posix", []string{"UCX_ALLOC_PRIO=md:posix", "UCX_POSIX_USE_SHM_OPEN=y"}},
	{"sysv", "md:sysv", []string{"UCX_ALLOC_PRIO=md:sysv"}},
}

func setEnvPairs(t *testing.T, env []string) {
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
}

// TestMemhExportLocal exports and imports within one process, through two
// contexts: the imported handle maps the same memory.
func TestMemhExportLocal(t *testing.T) {
	for _, be := range exportBackends {
		t.Run(be.name, func(t *testing.T) {
			setEnvPairs(t, be.env)
			exp := newContextCfg(t, FeatureRMA|FeatureExportedMemh, allTLS()...)
			imp := newContextCfg(t, FeatureRMA|FeatureExportedMemh, allTLS()...)
			m := mapMem(t, exp, new(MemMapParams).SetLength(3<<20+5).SetFlags(MemMapAllocate))
			if q := m.Query(); q.Method != be.method {
				t.Fatalf("allocated by %s, want %s", q.Method, be.method)
			}
			buf, err := exp.MemhPack(m, new(MemhPackParams).SetFlags(MemhPackFlagExport))
			if err != nil {
				t.Fatalf("MemhPack: %v", err)
			}
			defer MemhBufferRelease(buf, nil)
			in := mapMem(t, imp, new(MemMapParams).SetExportedMemhBuffer(buf))
			q := in.Query()
			if q.Length != m.Length() || q.Method != "import:"+strings.TrimPrefix(be.method, "md:") || q.MemoryType != ucs.MemoryTypeHost {
				t.Errorf("imported handle: %+v", q)
			}
			b, ib := memBytes(m), memBytes(in)
			ib[0], ib[len(ib)-1] = 0x11, 0x22
			if b[0] != 0x11 || b[len(b)-1] != 0x22 {
				t.Error("writes through the imported handle are not seen by the exporter")
			}
			// An imported handle is not packed again.
			if _, err := imp.RkeyPack(in); !errors.Is(err, ucs.ErrUnsupported) {
				t.Errorf("RkeyPack of imported memory: %v", err)
			}
			if _, err := imp.MemhPack(in, new(MemhPackParams).SetFlags(MemhPackFlagExport)); !errors.Is(err, ucs.ErrUnsupported) {
				t.Errorf("MemhPack of imported memory: %v", err)
			}
			// Unmapping the import leaves the exporter's memory alone.
			if err := imp.MemUnmap(in); err != nil {
				t.Fatal(err)
			}
			b[1] = 3
			if b[0] != 0x11 || b[1] != 3 {
				t.Error("the exporter's memory changed when the import was unmapped")
			}
			// Once the exporter unmapped it, the memory cannot be imported.
			if err := exp.MemUnmap(m); err != nil {
				t.Fatal(err)
			}
			if in, err := imp.MemMap(new(MemMapParams).SetExportedMemhBuffer(buf)); !errors.Is(err, ucs.ErrUnreachable) {
				if err == nil {
					imp.MemUnmap(in)
				}
				t.Errorf("import of unmapped memory: %v, want ErrUnreachable", err)
			}
		})
	}
}

// TestMemhExportRefused: memory that cannot be exported, or imported, is
// refused with the documented status.
func TestMemhExportRefused(t *testing.T) {
	export := new(MemhPackParams).SetFlags(MemhPackFlagExport)
	full := newContextCfg(t, FeatureRMA|FeatureExportedMemh, allTLS()...)
	good := mapMem(t, full, new(MemMapParams).SetLength(4096).SetFlags(MemMapAllocate))
	goodBuf, err := full.MemhPack(good, export)
	if err != nil {
		t.Fatalf("MemhPack: %v", err)
	}
	goMem := make([]byte, 8192)
	for _, tt := range []struct {
		name  string
		feat  Feature
		vars  []string
		p     *MemMapParams
		flags *MemhPackParams
	}{
		{"without the export flag", FeatureRMA | FeatureExportedMemh, nil, new(MemMapParams).SetLength(4096).SetFlags(MemMapAllocate), new(MemhPackParams)},
		{"nil pack params", FeatureRMA | FeatureExportedMemh, nil, new(MemMapParams).SetLength(4096).SetFlags(MemMapAllocate), nil},
		{"flags not in the mask", FeatureRMA | FeatureExportedMemh, nil, new(MemMapParams).SetLength(4096).SetFlags(MemMapAllocate), &MemhPackParams{Flags: MemhPackFlagExport}},
		{"context without FeatureExportedMemh", FeatureRMA, nil, new(MemMapParams).SetLength(4096).SetFlags(MemMapAllocate), export},
		{"registered memory", FeatureRMA | FeatureExportedMemh, nil, new(MemMapParams).SetAddress(unsafe.Pointer(&goMem[0])).SetLength(len(goMem)), export},
		{"mmap memory", FeatureRMA | FeatureExportedMemh, []string{"ALLOC_PRIO", "mmap"}, new(MemMapParams).SetLength(4096).SetFlags(MemMapAllocate), export},
		{"UCX_TLS=tcp,self, allocated", FeatureRMA | FeatureExportedMemh, []string{"TLS", "tcp,self"}, new(MemMapParams).SetLength(4096).SetFlags(MemMapAllocate), export},
		{"UCX_TLS=tcp,self, registered", FeatureRMA | FeatureExportedMemh, []string{"TLS", "tcp,self"}, new(MemMapParams).SetAddress(unsafe.Pointer(&goMem[0])).SetLength(len(goMem)), export},
		{"UCX_TLS=^posix, posix memory", FeatureRMA | FeatureExportedMemh, []string{"TLS", "^posix", "ALLOC_PRIO", "md:posix"}, new(MemMapParams).SetLength(4096).SetFlags(MemMapAllocate), export},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newContextCfg(t, tt.feat, allTLS(tt.vars...)...)
			m := mapMem(t, c, tt.p)
			buf, err := c.MemhPack(m, tt.flags)
			if !errors.Is(err, ucs.ErrUnsupported) {
				t.Errorf("MemhPack: %d bytes, %v; want ErrUnsupported", len(buf), err)
			}
		})
	}
	for _, tt := range []struct {
		name string
		feat Feature
		vars []string
		buf  []byte
		want error
	}{
		{"importer without FeatureExportedMemh", FeatureRMA, nil, goodBuf, ucs.ErrUnsupported},
		{"importer with UCX_TLS=tcp,self", FeatureRMA | FeatureExportedMemh, []string{"TLS", "tcp,self"}, goodBuf, ucs.ErrUnreachable},
		{"truncated buffer", FeatureRMA | FeatureExportedMemh, nil, goodBuf[:len(goodBuf)-1], ucs.ErrInvalidParam},
		{"garbage", FeatureRMA | FeatureExportedMemh, nil, []byte("GMH\x01 not a buffer"), ucs.ErrInvalidParam},
		{"empty buffer", FeatureRMA | FeatureExportedMemh, nil, []byte{}, ucs.ErrInvalidParam},
		{"range beyond the key", FeatureRMA | FeatureExportedMemh, nil, func() []byte {
			k, _ := decodeMemhBuffer(goodBuf)
			k.length += 1 << 20
			return k.encode()
		}(), ucs.ErrInvalidParam},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newContextCfg(t, tt.feat, allTLS(tt.vars...)...)
			m, err := c.MemMap(new(MemMapParams).SetExportedMemhBuffer(tt.buf))
			if !errors.Is(err, tt.want) {
				if err == nil {
					c.MemUnmap(m)
				}
				t.Errorf("import: %v, want %v", err, tt.want)
			}
		})
	}
	if _, err := newContextCfg(t, FeatureRMA|FeatureExportedMemh, allTLS()...).MemhPack(good, export); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("MemhPack through another context: %v", err)
	}
}

// TestMemhExportTwoProcesses exports memory in one PE and imports it in
// another, for each kind of exportable memory: what the importer writes,
// the exporter sees, and the other way round.
func TestMemhExportTwoProcesses(t *testing.T) {
	for _, be := range exportBackends {
		petest.RunWith(t, petest.Options{Name: be.name, NPs: []int{2}, Env: be.env}, func(t *testing.T) {
			mb, err := bootstrap.JoinFromOS()
			if err != nil {
				t.Fatal(err)
			}
			defer mb.Close()
			defer petest.ExitIfFailed(t)
			c := newContextCfg(t, FeatureRMA|FeatureExportedMemh, allTLS()...)
			const size = 1<<20 + 3
			var (
				m   *MemHandle
				buf []byte
			)
			if mb.Rank() == 0 {
				m = mapMem(t, c, new(MemMapParams).SetLength(size).SetFlags(MemMapAllocate))
				if q := m.Query(); q.Method != be.method {
					t.Fatalf("allocated by %s, want %s", q.Method, be.method)
				}
				copy(memBytes(m), "from the exporter")
				if buf, err = c.MemhPack(m, new(MemhPackParams).SetFlags(MemhPackFlagExport)); err != nil {
					t.Fatalf("MemhPack: %v", err)
				}
			}
			all, err := mb.Allgather(buf)
			if err != nil {
				t.Fatal(err)
			}
			MemhBufferRelease(buf, nil)
			if mb.Rank() == 1 {
				in, err := c.MemMap(new(MemMapParams).SetExportedMemhBuffer(all[0]))
				if err != nil {
					t.Fatalf("import: %v", err)
				}
				b := memBytes(in)
				if len(b) != size || !bytes.HasPrefix(b, []byte("from the exporter")) {
					t.Errorf("imported %d bytes starting %q", len(b), b[:17])
				}
				copy(b[size-17:], "from the importer")
				if err := c.MemUnmap(in); err != nil {
					t.Error(err)
				}
			}
			if err := mb.Barrier(); err != nil {
				t.Fatal(err)
			}
			if mb.Rank() == 0 {
				b := memBytes(m)
				if got := string(b[size-17:]); got != "from the importer" {
					t.Errorf("exporter sees %q at the end, want what the importer wrote", got)
				}
				b[0] = 'F' // still mapped after the importer unmapped
				if err := c.MemUnmap(m); err != nil {
					t.Error(err)
				}
			}
			if err := mb.Barrier(); err != nil {
				t.Fatal(err)
			}
			// Once the exporter unmapped it, the memory cannot be imported.
			if mb.Rank() == 1 {
				if in, err := c.MemMap(new(MemMapParams).SetExportedMemhBuffer(all[0])); !errors.Is(err, ucs.ErrUnreachable) {
					if err == nil {
						c.MemUnmap(in)
					}
					t.Errorf("import after the exporter unmapped: %v, want ErrUnreachable", err)
				}
			}
		})
	}
}

// exportedBuffers returns exported memh buffers of every exportable kind
// this system allows, for fuzz seeds.
func exportedBuffers(f *testing.F) [][]byte {
	var out [][]byte
	for _, prio := range []string{"md:posix", "md:sysv"} {
		c := newContextCfg(f, FeatureRMA|FeatureExportedMemh, allTLS("ALLOC_PRIO", prio)...)
		m, err := c.MemMap(new(MemMapParams).SetLength(4096).SetFlags(MemMapAllocate))
		if err != nil {
			f.Logf("no %s memory to export: %v", prio, err)
			continue
		}
		b, err := c.MemhPack(m, new(MemhPackParams).SetFlags(MemhPackFlagExport))
		if err != nil {
			f.Fatalf("MemhPack of %s memory: %v", prio, err)
		}
		out = append(out, b)
		c.MemUnmap(m)
	}
	return out
}

func FuzzMemhBuffer(f *testing.F) {
	for _, b := range exportedBuffers(f) {
		f.Add(b)
	}
	f.Add([]byte("GMH\x01"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := decodeMemhBuffer(b)
		if err != nil {
			if !errors.Is(err, ucs.ErrInvalidParam) {
				t.Fatalf("error %v is not ErrInvalidParam", err)
			}
			return
		}
		if k.length == 0 || k.address+k.length < k.address || k.component == "" || len(k.mkey) == 0 {
			t.Fatalf("accepted %+v", k)
		}
		if !bytes.Equal(b, k.encode()) {
			t.Fatalf("%x decodes to %+v, which encodes differently", b, k)
		}
	})
}

// FuzzMemhImport feeds buffers to MemMap's import: whatever comes in, it
// fails with a documented status or maps memory that can be unmapped.
func FuzzMemhImport(f *testing.F) {
	for _, b := range exportedBuffers(f) {
		f.Add(b)
	}
	c := newContextCfg(f, FeatureRMA|FeatureExportedMemh, allTLS()...)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := c.MemMap(new(MemMapParams).SetExportedMemhBuffer(b))
		if err != nil {
			if !errors.Is(err, ucs.ErrInvalidParam) && !errors.Is(err, ucs.ErrUnreachable) && !errors.Is(err, ucs.ErrNoMemory) {
				t.Fatalf("import error %v is not a documented status", err)
			}
			return
		}
		if err := c.MemUnmap(m); err != nil {
			t.Fatalf("unmap of an import: %v", err)
		}
	})
}

// TestMemMapAllocatesWithSelectedMD checks that MemMap allocates through
// an MD whose transports UCX_TLS selects before one of no selected
// transport (with UCX_TLS=posix, sysv memory would have no key the posix
// transport maps: atomics would go in software and Ptr would fail), and
// that the memory is then mapped directly by an endpoint of the context.
func TestMemMapAllocatesWithSelectedMD(t *testing.T) {
	for _, tt := range []struct {
		tls, method string
		ptr         bool // an endpoint to the own worker maps the memory
	}{
		{"all", "md:sysv", true},
		{"posix", "md:posix", true},
		{"posix,self", "md:posix", true},
		{"^sysv", "md:posix", true},
		{"sysv", "md:sysv", true},
		{"cma,tcp", "mmap", false},
		{"tcp", "mmap", false},
	} {
		t.Run(tt.tls, func(t *testing.T) {
			c := newContextCfg(t, FeatureRMA|FeatureAMO64, "TLS", tt.tls, "ALLOC_PRIO", "md:sysv,md:posix,mmap")
			m := mapMem(t, c, new(MemMapParams).SetLength(8192).SetFlags(MemMapAllocate))
			if q := m.Query(); q.Method != tt.method {
				t.Fatalf("allocated by %q, want %q", q.Method, tt.method)
			}
			if !tt.ptr {
				return
			}
			w := newWorker(t, c)
			addr, err := w.Address()
			if err != nil {
				t.Fatal(err)
			}
			ep, err := w.NewEndpoint(new(EPParams).SetAddress(addr))
			if err != nil {
				t.Fatal(err)
			}
			defer ep.Close(CloseModeForce)
			packed, err := c.RkeyPack(m)
			if err != nil {
				t.Fatal(err)
			}
			rk, err := ep.RkeyUnpack(packed)
			if err != nil {
				t.Fatal(err)
			}
			defer rk.Destroy()
			if _, err := rk.Ptr(uint64(uintptr(m.Address()))); err != nil {
				t.Errorf("Ptr: %v", err)
			}
		})
	}
}
