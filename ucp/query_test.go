package ucp

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
)

func TestWorkerQueryAttr(t *testing.T) {
	c := newContext(t)
	w, err := c.NewWorker(new(WorkerParams).SetName("wq").SetThreadMode(ucs.ThreadModeSerialized))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Destroy()
	addr, _ := w.Address()
	full := w.Query()
	if full.ThreadMode != ucs.ThreadModeSerialized || !bytes.Equal(full.Address, addr) || full.AddressLength != len(addr) ||
		full.Name != "wq" || full.MaxAMHeader <= 0 || full.MaxDebugString <= 0 || full.UID == 0 || full.AddressFlags != 0 {
		t.Errorf("Query = %+v", full)
	}
	for _, tt := range []struct {
		name string
		mask uint64
		want WorkerAttr
	}{
		{"nothing", 0, WorkerAttr{}},
		{"thread mode", WorkerAttrFieldThreadMode, WorkerAttr{ThreadMode: ucs.ThreadModeSerialized}},
		{"name", WorkerAttrFieldName, WorkerAttr{Name: "wq"}},
		{"uid", WorkerAttrFieldUID, WorkerAttr{UID: full.UID}},
		{"limits", WorkerAttrFieldMaxAMHeader | WorkerAttrFieldMaxDebugString, WorkerAttr{MaxAMHeader: full.MaxAMHeader, MaxDebugString: full.MaxDebugString}},
		{"address", WorkerAttrFieldAddress, WorkerAttr{Address: addr, AddressLength: len(addr)}},
		// Address flags not in the mask do not count.
		{"flags without their field", WorkerAttrFieldAddress, WorkerAttr{Address: addr, AddressLength: len(addr)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := WorkerAttr{FieldMask: tt.mask, Name: "stale", UID: 1, MaxAMHeader: -1}
			if tt.name == "flags without their field" {
				a.AddressFlags = WorkerAddressFlagNetOnly
				tt.want.AddressFlags = WorkerAddressFlagNetOnly
			}
			if err := w.QueryAttr(&a); err != nil {
				t.Fatal(err)
			}
			tt.want.FieldMask = tt.mask
			if a.FieldMask != tt.want.FieldMask || a.ThreadMode != tt.want.ThreadMode || a.Name != tt.want.Name ||
				a.UID != tt.want.UID || a.MaxAMHeader != tt.want.MaxAMHeader || a.MaxDebugString != tt.want.MaxDebugString ||
				!bytes.Equal(a.Address, tt.want.Address) || a.AddressLength != tt.want.AddressLength || a.AddressFlags != tt.want.AddressFlags {
				t.Errorf("QueryAttr = %+v, want %+v", a, tt.want)
			}
		})
	}
	if err := w.QueryAttr(nil); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("QueryAttr(nil): %v", err)
	}
}

// netOnlyAddress returns w's address with WorkerAddressFlagNetOnly.
func netOnlyAddress(t *testing.T, w *Worker) []byte {
	t.Helper()
	a := WorkerAttr{FieldMask: WorkerAttrFieldAddress | WorkerAttrFieldAddressFlags, AddressFlags: WorkerAddressFlagNetOnly}
	if err := w.QueryAttr(&a); err != nil {
		t.Fatalf("NET_ONLY address: %v", err)
	}
	if a.AddressLength != len(a.Address) {
		t.Errorf("address length %d of a %d-byte address", a.AddressLength, len(a.Address))
	}
	return a.Address
}

func TestWorkerAddressQuery(t *testing.T) {
	c := newContextCfg(t, FeatureRMA|FeatureAMO32|FeatureAMO64, allTLS()...)
	a, b := newWorker(t, c), newWorker(t, c)
	for _, w := range []*Worker{a, b} {
		uid := w.Query().UID
		full, _ := w.Address()
		for name, addr := range map[string][]byte{"full": full, "net only": netOnlyAddress(t, w)} {
			q, err := WorkerAddressQuery(addr)
			if err != nil {
				t.Fatalf("%s address: %v", name, err)
			}
			if q.FieldMask != WorkerAddressAttrFieldUID || q.WorkerUID != uid {
				t.Errorf("%s address: %+v, want uid %#x", name, q, uid)
			}
		}
	}
	if a.Query().UID == b.Query().UID {
		t.Error("two workers share a uid")
	}
	full, _ := a.Address()
	for _, bad := range [][]byte{nil, []byte("GWA\x01"), full[:len(full)-1], append(append([]byte(nil), full...), 0)} {
		if _, err := WorkerAddressQuery(bad); !errors.Is(err, ucs.ErrInvalidAddr) {
			t.Errorf("WorkerAddressQuery(%d bytes): %v, want ErrInvalidAddr", len(bad), err)
		}
	}
	// Unknown address flags are refused.
	bad := append([]byte(nil), full...)
	bad[len(addrMagic)+1] = 0x80
	if _, err := WorkerAddressQuery(bad); !errors.Is(err, ucs.ErrInvalidAddr) {
		t.Errorf("address with unknown flags: %v", err)
	}
}

// TestNetOnlyAddress: an endpoint created from a NET_ONLY address uses only
// network transports, for its lanes, its keys and direct access.
func TestNetOnlyAddress(t *testing.T) {
	c := newContextCfg(t, FeatureRMA|FeatureAMO32|FeatureAMO64, allTLS()...)
	a, b := newWorker(t, c), newWorker(t, c)
	addr := netOnlyAddress(t, b)
	dec, err := decodeWorkerAddress(addr)
	if err != nil {
		t.Fatal(err)
	}
	if dec.flags != addrFlagNetOnly || len(dec.ifaces) == 0 {
		t.Fatalf("NET_ONLY address: flags %#x, %d interfaces", dec.flags, len(dec.ifaces))
	}
	for _, f := range dec.ifaces {
		if f.tlName != "tcp" {
			t.Errorf("NET_ONLY address holds %s/%s", f.component, f.tlName)
		}
	}
	// b answers software requests (gets, atomics) from its own goroutine.
	aAddr, _ := a.Address()
	back, err := b.NewEndpoint(new(EPParams).SetAddress(aAddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { back.Close(CloseModeForce) })
	stop, done := serve(b)
	t.Cleanup(func() { close(stop); <-done })

	m := mapMem(t, c, new(MemMapParams).SetLength(1<<16).SetFlags(MemMapAllocate))
	ep, err := a.NewEndpoint(new(EPParams).SetAddress(addr))
	if err != nil {
		t.Fatalf("endpoint from a NET_ONLY address: %v", err)
	}
	t.Cleanup(func() { ep.Close(CloseModeFlush) })
	packed, err := c.RkeyPack(m)
	if err != nil {
		t.Fatal(err)
	}
	rk, err := ep.RkeyUnpack(packed)
	if err != nil {
		t.Fatalf("RkeyUnpack: %v", err)
	}
	t.Cleanup(rk.Destroy)
	lanes := ep.Query().Lanes
	if len(lanes) == 0 {
		t.Fatal("no lanes")
	}
	for _, l := range lanes {
		if l.Transport != "tcp" {
			t.Errorf("lane %+v of a NET_ONLY endpoint", l)
		}
	}
	if _, err := rk.Ptr(uint64(uintptr(m.Address()))); !errors.Is(err, ucs.ErrUnreachable) {
		t.Errorf("direct access through a NET_ONLY endpoint: %v, want ErrUnreachable", err)
	}
	// And it works.
	base := uint64(uintptr(m.Address()))
	req, err := ep.PutNBX([]byte("over tcp"), base+8, rk, nil)
	if err == nil && req != nil {
		err = req.Wait()
	}
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	if err := ep.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := string(memBytes(m)[8:16]); got != "over tcp" {
		t.Errorf("memory holds %q after a put over tcp", got)
	}
	got := make([]byte, 8)
	req, err = ep.GetNBX(got, base+8, rk, nil)
	if err == nil && req != nil {
		err = req.Wait()
	}
	if err != nil || string(got) != "over tcp" {
		t.Errorf("get: %q, %v", got, err)
	}
	// The full address of the same worker gives shared memory lanes.
	full, _ := b.Address()
	ep2, err := a.NewEndpoint(new(EPParams).SetAddress(full))
	if err != nil {
		t.Fatal(err)
	}
	defer ep2.Close(CloseModeForce)
	for _, l := range ep2.Query().Lanes {
		if l.Transport == "tcp" {
			t.Errorf("lane %+v of an endpoint from the full address", l)
		}
	}
}

func TestNetOnlyWithoutNetwork(t *testing.T) {
	c := newContextCfg(t, FeatureRMA, "TLS", "posix,self")
	w := newWorker(t, c)
	a := WorkerAttr{FieldMask: WorkerAttrFieldAddress | WorkerAttrFieldAddressFlags, AddressFlags: WorkerAddressFlagNetOnly}
	if err := w.QueryAttr(&a); !errors.Is(err, ucs.ErrNoDevice) {
		t.Errorf("NET_ONLY address of a worker without network interfaces: %d bytes, %v", len(a.Address), err)
	}
}

func TestEvaluatePerf(t *testing.T) {
	c := newContextCfg(t, FeatureRMA|FeatureAMO32|FeatureAMO64, allTLS()...)
	a, b := newWorker(t, c), newWorker(t, c)
	full, _ := b.Address()
	sm, err := a.NewEndpoint(new(EPParams).SetAddress(full))
	if err != nil {
		t.Fatal(err)
	}
	defer sm.Close(CloseModeForce)
	tcp, err := a.NewEndpoint(new(EPParams).SetAddress(netOnlyAddress(t, b)))
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close(CloseModeForce)
	est := func(ep *Endpoint, n int) float64 {
		t.Helper()
		at, err := ep.EvaluatePerf(new(EPEvaluatePerfParams).SetMessageSize(n))
		if err != nil {
			t.Fatalf("EvaluatePerf(%d): %v", n, err)
		}
		if at.FieldMask != EPPerfAttrFieldEstimatedTime || !(at.EstimatedTime > 0) || math.IsInf(at.EstimatedTime, 0) {
			t.Fatalf("EvaluatePerf(%d) = %+v", n, at)
		}
		return at.EstimatedTime
	}
	prevSM, prevTCP := 0.0, 0.0
	for _, n := range []int{0, 1, 8, 100, 4096, 65536, 1 << 20, 1 << 30, math.MaxInt32} {
		s, tc := est(sm, n), est(tcp, n)
		if s < prevSM || tc < prevTCP {
			t.Errorf("size %d: estimate went down: sm %g after %g, tcp %g after %g", n, s, prevSM, tc, prevTCP)
		}
		if s >= tc {
			t.Errorf("size %d: shared memory %g s, tcp %g s: shared memory not faster", n, s, tc)
		}
		prevSM, prevTCP = s, tc
	}
	if est(sm, 1<<30) <= est(sm, 0) {
		t.Error("a 1 GiB message is estimated no slower than an empty one")
	}
	for _, p := range []*EPEvaluatePerfParams{nil, {}, {MessageSize: 10}, new(EPEvaluatePerfParams).SetMessageSize(-1)} {
		if _, err := sm.EvaluatePerf(p); !errors.Is(err, ucs.ErrInvalidParam) {
			t.Errorf("EvaluatePerf(%+v): %v, want ErrInvalidParam", p, err)
		}
	}
	tcp.Close(CloseModeForce)
	if _, err := tcp.EvaluatePerf(new(EPEvaluatePerfParams).SetMessageSize(1)); err == nil {
		t.Error("EvaluatePerf on a closed endpoint succeeded")
	}
}

func TestContextAndLibQuery(t *testing.T) {
	c, err := Init(new(Params).SetFeatures(FeatureRMA|FeatureExportedMemh).SetName("cq").SetRequestSize(48), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Cleanup()
	full := c.Query()
	reqSize := int(unsafe.Sizeof(Request{}))
	if full.FieldMask != contextAttrFieldsAll || full.RequestSize != reqSize || full.ThreadMode != ucs.ThreadModeMulti || full.Name != "cq" ||
		len(full.MemoryTypes) != 1 || full.MemoryTypes[0] != ucs.MemoryTypeHost || full.DeviceCounterSize != 0 ||
		full.Features != FeatureRMA|FeatureExportedMemh || len(full.Transports) == 0 {
		t.Errorf("Query = %+v", full)
	}
	for _, tt := range []struct {
		mask uint64
		ok   func(a ContextAttr) bool
	}{
		{0, func(a ContextAttr) bool {
			return a.Name == "" && a.RequestSize == 0 && a.Transports == nil && a.MemoryTypes == nil
		}},
		{ContextAttrFieldName, func(a ContextAttr) bool { return a.Name == "cq" && a.RequestSize == 0 && a.Features == 0 }},
		{ContextAttrFieldRequestSize, func(a ContextAttr) bool { return a.RequestSize == reqSize && a.Name == "" }},
		{ContextAttrFieldThreadMode | ContextAttrFieldMemoryTypes, func(a ContextAttr) bool {
			return a.ThreadMode == ucs.ThreadModeMulti && len(a.MemoryTypes) == 1 && a.Name == ""
		}},
	} {
		a := ContextAttr{FieldMask: tt.mask, Name: "stale", RequestSize: 7, Features: FeatureTag}
		if err := c.QueryAttr(&a); err != nil || a.FieldMask != tt.mask || !tt.ok(a) {
			t.Errorf("QueryAttr(mask %#x) = %+v, %v", tt.mask, a, err)
		}
	}
	if err := c.QueryAttr(nil); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("QueryAttr(nil): %v", err)
	}
	// The reserved space counts only with its field; the request size is
	// the request's own either way.
	reserved := func(c *Context) int {
		w, err := c.NewWorker(nil)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Destroy()
		r := w.newRequest(nil)
		defer r.release()
		return len(r.Reserved())
	}
	if n := reserved(c); n != 48 {
		t.Errorf("%d bytes reserved, want 48", n)
	}
	c2, err := Init(&Params{FieldMask: ParamFieldFeatures, Features: FeatureRMA, RequestSize: 99}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Cleanup()
	if rs := c2.Query().RequestSize; rs != reqSize {
		t.Errorf("request size %d, want %d", rs, reqSize)
	}
	if n := reserved(c2); n != 0 {
		t.Errorf("%d bytes reserved from a request size not in the mask", n)
	}

	if l := LibQuery(); l.FieldMask != LibAttrFieldMaxThreadLevel || l.MaxThreadLevel != ucs.ThreadModeMulti {
		t.Errorf("LibQuery = %+v", l)
	}
	l := LibAttr{MaxThreadLevel: ucs.ThreadModeSerialized}
	if err := LibQueryAttr(&l); err != nil || l.MaxThreadLevel != ucs.ThreadModeSingle || l.FieldMask != 0 {
		t.Errorf("LibQueryAttr(no field) = %+v, %v", l, err)
	}
	if err := LibQueryAttr(nil); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("LibQueryAttr(nil): %v", err)
	}
}

func TestConfigPrint(t *testing.T) {
	cfg, err := ReadConfig("", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Modify("TLS", "tcp,self"); err != nil {
		t.Fatal(err)
	}
	def := cfg.Get("ALLOC_PRIO")
	if def != "md:sysv,md:posix,mmap" {
		t.Skipf("UCX_ALLOC_PRIO is set in the environment (%q): the default-value cases need it unset", def)
	}
	for _, tt := range []struct {
		name       string
		title      string
		flags      ConfigPrintFlags
		want, none []string
	}{
		{"nothing", "t", 0, nil, []string{"UCX_", "# t"}},
		{"header only", "", ConfigPrintHeader, []string{"#\n# UCX configuration\n#\n"}, []string{"UCX_TLS"}},
		{"config", "", ConfigPrintConfig, []string{"UCX_TLS=tcp,self\n", "\nUCX_ALLOC_PRIO=md:sysv,md:posix,mmap\n"}, []string{"# UCX configuration", "default:"}},
		{"config with title", "my title", ConfigPrintConfig | ConfigPrintHeader, []string{"# my title\n", "UCX_TLS=tcp,self\n"}, nil},
		{"doc", "", ConfigPrintConfig | ConfigPrintDoc, []string{"# default: all\n#\nUCX_TLS=tcp,self\n", "# Transports to use"}, nil},
		{"comment defaults", "", ConfigPrintConfig | ConfigPrintCommentDefault, []string{"#UCX_ALLOC_PRIO=md:sysv,md:posix,mmap\n", "\nUCX_TLS=tcp,self\n"}, []string{"\nUCX_ALLOC_PRIO="}},
		{"hidden changes nothing", "", ConfigPrintConfig | ConfigPrintHidden, []string{"UCX_TLS=tcp,self\n"}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			if err := cfg.Print(&b, tt.title, tt.flags); err != nil {
				t.Fatal(err)
			}
			out := "\n" + b.String()
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tt.none {
				if strings.Contains(out, w) {
					t.Errorf("output has %q:\n%s", w, out)
				}
			}
		})
	}
	if err := cfg.Print(failWriter{}, "", ConfigPrintConfig); err == nil {
		t.Error("a write error was not returned")
	}
	c := newContextCfg(t, FeatureRMA, "TLS", "tcp,self")
	var b strings.Builder
	if err := c.Print(&b); err != nil || !strings.Contains(b.String(), "tl tcp") || !strings.Contains(b.String(), "UCX_TLS=tcp,self\n") {
		t.Errorf("Context.Print: %v\n%s", err, b.String())
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("write refused") }

// TestParamSetters: every field of ucp_params, ucp_worker_params and
// ucp_ep_params in the UCX documents has a setter that records its bit (or,
// for the wakeup fields, at least the field and its bit).
func TestParamSetters(t *testing.T) {
	for _, tt := range []struct {
		name string
		got  uint64
		want uint64
	}{
		{"features", new(Params).SetFeatures(FeatureAM).FieldMask, ParamFieldFeatures},
		{"request_size", new(Params).SetRequestSize(1).FieldMask, ParamFieldRequestSize},
		{"request_init", new(Params).SetRequestInit(func(*Request) {}).FieldMask, ParamFieldRequestInit},
		{"request_cleanup", new(Params).SetRequestCleanup(func(*Request) {}).FieldMask, ParamFieldRequestCleanup},
		{"tag_sender_mask", new(Params).SetTagSenderMask(1).FieldMask, ParamFieldTagSenderMask},
		{"mt_workers_shared", new(Params).SetMTWorkersShared(true).FieldMask, ParamFieldMTWorkersShared},
		{"estimated_num_eps", new(Params).SetEstimatedNumEPs(2).FieldMask, ParamFieldEstimatedNumEPs},
		{"estimated_num_ppn", new(Params).SetEstimatedNumPPN(2).FieldMask, ParamFieldEstimatedNumPPN},
		{"name", new(Params).SetName("n").FieldMask, ParamFieldName},
		{"node_local_id", new(Params).SetNodeLocalID(3).FieldMask, ParamFieldNodeLocalID},
		{"logger", new(Params).SetLogger(ucs.DiscardLogger()).FieldMask, ParamFieldLogger},
		{"worker thread_mode", new(WorkerParams).SetThreadMode(ucs.ThreadModeMulti).FieldMask, WorkerParamFieldThreadMode},
		{"worker cpu_mask", new(WorkerParams).SetCPUMask([]int{0}).FieldMask, WorkerParamFieldCPUMask},
		{"worker events", (&WorkerParams{FieldMask: WorkerParamFieldEvents}).FieldMask, WorkerParamFieldEvents},
		{"worker user_data", new(WorkerParams).SetUserData(1).FieldMask, WorkerParamFieldUserData},
		{"worker event_fd", (&WorkerParams{FieldMask: WorkerParamFieldEventFD}).FieldMask, WorkerParamFieldEventFD},
		{"worker flags", new(WorkerParams).SetFlags(WorkerFlagIgnoreRequestLeak).FieldMask, WorkerParamFieldFlags},
		{"worker name", new(WorkerParams).SetName("w").FieldMask, WorkerParamFieldName},
		{"worker am_alignment", new(WorkerParams).SetAMAlignment(64).FieldMask, WorkerParamFieldAMAlignment},
		{"worker client_id", new(WorkerParams).SetClientID(5).FieldMask, WorkerParamFieldClientID},
		{"ep address", new(EPParams).SetAddress([]byte{1}).FieldMask, EPParamFieldRemoteAddress},
		{"ep err_mode", new(EPParams).SetErrMode(ErrHandlingModePeer).FieldMask, EPParamFieldErrMode},
		{"ep err_handler", new(EPParams).SetErrHandler(func(any, *Endpoint, error) {}).FieldMask, EPParamFieldErrHandler},
		{"ep user_data", new(EPParams).SetUserData(1).FieldMask, EPParamFieldUserData},
		{"ep flags", new(EPParams).SetFlags(EPParamsFlagNoLoopback).FieldMask, EPParamFieldFlags},
		{"ep name", new(EPParams).SetName("e").FieldMask, EPParamFieldName},
		{"mem map address", new(MemMapParams).SetAddress(nil).FieldMask, MemMapParamFieldAddress},
		{"mem map length", new(MemMapParams).SetLength(1).FieldMask, MemMapParamFieldLength},
		{"mem map flags", new(MemMapParams).SetFlags(0).FieldMask, MemMapParamFieldFlags},
		{"mem map prot", new(MemMapParams).SetProt(0).FieldMask, MemMapParamFieldProt},
		{"mem map memory_type", new(MemMapParams).SetMemoryType(0).FieldMask, MemMapParamFieldMemoryType},
		{"mem map exported_memh_buffer", new(MemMapParams).SetExportedMemhBuffer(nil).FieldMask, MemMapParamFieldExportedMemhBuffer},
		{"memh pack flags", new(MemhPackParams).SetFlags(MemhPackFlagExport).FieldMask, MemhPackParamFieldFlags},
		{"mem advise", new(MemAdviseParams).SetAddress(nil).SetLength(0).SetAdvice(MadvNormal).FieldMask, memAdviseParamFieldsAll},
		{"ep perf message_size", new(EPEvaluatePerfParams).SetMessageSize(1).FieldMask, EPPerfParamFieldMessageSize},
	} {
		if tt.got != tt.want {
			t.Errorf("%s: field mask %#x, want %#x", tt.name, tt.got, tt.want)
		}
	}
	// Defaults of unset fields: a worker is single-threaded and gets a
	// generated name, and so does an endpoint.
	c := newContext(t)
	w := newWorker(t, c)
	if q := w.Query(); q.ThreadMode != ucs.ThreadModeSingle || q.Name == "" {
		t.Errorf("default worker: %+v", q)
	}
	addr, _ := w.Address()
	ep, err := w.NewEndpoint(&EPParams{FieldMask: EPParamFieldRemoteAddress, Address: addr, Name: "ignored"})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close(CloseModeForce)
	if ep.Query().Name == "ignored" {
		t.Errorf("a name outside the mask counted")
	}
}

// TestEndpointDefaultNames checks that endpoints created without a name
// each get a distinct one, even to the same peer, and that a given name is
// kept as is (even when another endpoint has it).
func TestEndpointDefaultNames(t *testing.T) {
	c := newContext(t)
	a, b := newWorker(t, c), newWorker(t, c)
	addrA, _ := a.Address()
	addrB, _ := b.Address()
	for _, tc := range []struct {
		name  string
		peers [][]byte // the address of each endpoint's peer
		names []string // "": no name given
	}{
		{"same peer twice", [][]byte{addrB, addrB}, []string{"", ""}},
		{"three peers", [][]byte{addrB, addrA, addrB}, []string{"", "", ""}},
		{"given names kept", [][]byte{addrB, addrB, addrB}, []string{"x", "x", ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen := map[string]bool{}
			for i, peer := range tc.peers {
				p := new(EPParams).SetAddress(peer)
				if tc.names[i] != "" {
					p.SetName(tc.names[i])
				}
				ep, err := a.NewEndpoint(p)
				if err != nil {
					t.Fatal(err)
				}
				defer ep.Close(CloseModeForce)
				got := ep.Query().Name
				switch {
				case tc.names[i] != "" && got != tc.names[i]:
					t.Errorf("endpoint %d named %q, want %q", i, got, tc.names[i])
				case tc.names[i] == "" && (got == "" || seen[got]):
					t.Errorf("endpoint %d: default name %q is not unique (%v)", i, got, seen)
				}
				seen[got] = true
			}
		})
	}
}

// TestEndpointQueryAttr checks QueryAttr of an endpoint made from a worker
// address: the socket addresses fail with ucs.ErrNotConnected, as
// ucp_ep_query says, and the other fields are filled in as asked.
func TestEndpointQueryAttr(t *testing.T) {
	c := newContext(t)
	a, b := newWorker(t, c), newWorker(t, c)
	addr, _ := b.Address()
	ep, err := a.NewEndpoint(new(EPParams).SetAddress(addr).SetName("q"))
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close(CloseModeForce)
	for _, tc := range []struct {
		name string
		mask uint64
		want error // nil: success
		ok   func(EPAttr) bool
	}{
		{"local sockaddr", EPAttrFieldLocalSockAddr, ucs.ErrNotConnected, nil},
		{"remote sockaddr", EPAttrFieldRemoteSockAddr, ucs.ErrNotConnected, nil},
		{"name and remote sockaddr", EPAttrFieldName | EPAttrFieldRemoteSockAddr, ucs.ErrNotConnected, nil},
		{"name", EPAttrFieldName, nil, func(a EPAttr) bool { return a.Name == "q" && a.Lanes == nil && a.RemoteName == "" }},
		{"transports", EPAttrFieldTransports, nil, func(a EPAttr) bool { return len(a.Lanes) > 0 && a.Name == "" }},
		{"remote name", EPAttrFieldRemoteName, nil, func(a EPAttr) bool { return a.RemoteName == b.name }},
		{"none", 0, nil, func(a EPAttr) bool { return a.Name == "" && a.Lanes == nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			attr := EPAttr{FieldMask: tc.mask, Name: "stale"}
			err := ep.QueryAttr(&attr)
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("QueryAttr: %v, want %v", err, tc.want)
				}
				return
			}
			if err != nil || attr.FieldMask != tc.mask || !tc.ok(attr) {
				t.Errorf("QueryAttr: %v, %+v", err, attr)
			}
		})
	}
	if err := ep.QueryAttr(nil); !errors.Is(err, ucs.ErrInvalidParam) {
		t.Errorf("QueryAttr(nil): %v", err)
	}
	if q := ep.Query(); q.Name != "q" || len(q.Lanes) == 0 || q.LocalSockAddr.IsValid() || q.FieldMask&epAttrFieldsSock != 0 {
		t.Errorf("Query: %+v", q)
	}
}

// TestReadConfig checks ReadConfig's sources as ucp_config_read defines
// them: UCX_<prefix>_ variables of the environment first, then the
// configuration file (with the same names, for the context's and its
// components' variables), then the defaults; a missing file is ignored.
func TestReadConfig(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "ucx.conf")
	if err := os.WriteFile(file, []byte("# goshmem test\n\nUCX_GST_TLS = tcp\nUCX_GST_ALLOC_PRIO=md:posix\nUCX_ALLOC_PRIO=mmap\nUCX_GST_POSIX_USE_SHM_OPEN=y\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.conf")
	if err := os.WriteFile(bad, []byte("UCX_TLS=tcp\n[section]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("UCX_GST_ALLOC_PRIO", "mmap,md:sysv")
	t.Setenv("UCX_GST_NUM_EPS", "12")
	for _, tt := range []struct {
		name, prefix, file string
		want               map[string]string // variable -> value
		posixShmOpen       string
		err                error
	}{
		{"prefix and file", "GST", file, map[string]string{"TLS": "tcp", "ALLOC_PRIO": "mmap,md:sysv", "NUM_EPS": "12", "NUM_PPN": "auto"}, "y", nil},
		{"prefix without file", "GST", "", map[string]string{"ALLOC_PRIO": "mmap,md:sysv", "NUM_EPS": "12"}, "n", nil},
		{"missing file", "GST", filepath.Join(dir, "none.conf"), map[string]string{"ALLOC_PRIO": "mmap,md:sysv"}, "n", nil},
		{"file under another prefix", "OTHER", file, map[string]string{"ALLOC_PRIO": "md:sysv,md:posix,mmap", "NUM_EPS": "auto"}, "n", nil},
		{"malformed file", "GST", bad, nil, "", ucs.ErrInvalidParam},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ReadConfig(tt.prefix, tt.file)
			if !errors.Is(err, tt.err) || (err == nil) != (tt.err == nil) {
				t.Fatalf("ReadConfig: %v, want %v", err, tt.err)
			}
			if err != nil {
				return
			}
			if want := "UCX_" + tt.prefix + "_"; cfg.Prefix() != want {
				t.Errorf("prefix %q, want %q", cfg.Prefix(), want)
			}
			for name, want := range tt.want {
				if got := cfg.Get(name); got != want {
					t.Errorf("%s = %q, want %q", name, got, want)
				}
			}
			posix := cfg.ReadAlso(ComponentEnvPrefix(cfg.Prefix(), "posix"), []ucs.ConfigField{{Name: "USE_SHM_OPEN", Default: "n"}})
			if got := posix.Get("USE_SHM_OPEN"); got != tt.posixShmOpen {
				t.Errorf("POSIX_USE_SHM_OPEN = %q, want %q", got, tt.posixShmOpen)
			}
		})
	}
}
