// Package ucp is the protocol layer of goshmem: the UCP API of the UCX
// documents in Go form. A Context selects transports and memory domains; a
// Worker opens an interface on each selected transport and has an address;
// an Endpoint, created from a remote worker's address, picks lanes among the
// interfaces that reach that worker and carries RMA and atomic operations
// over them.
//
// ucp imports no transport: it selects among those registered with
// uct.Register, which a program links in by importing them, all at once
// with
//
//	import _ "github.com/goshmem/goshmem/uct/transports"
//
// (package shmem does). Its listeners and socket-address endpoints go
// through the connection manager of a registered transport (uct.CM; tcp's).
//
// Parameters follow the field-mask rule of the UCX documents: a field counts
// only when its bit is set in the mask (the setter methods set it), and an
// unset field takes its documented default.
package ucp

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// Version of the goshmem ucp layer (ucp_get_version).
const (
	VersionMajor   = 0
	VersionMinor   = 1
	VersionRelease = 0
)

// Version returns the major, minor and release numbers of the library.
func Version() (major, minor, release int) { return VersionMajor, VersionMinor, VersionRelease }

// VersionString returns the version as "major.minor.release".
func VersionString() string {
	return fmt.Sprintf("%d.%d.%d", VersionMajor, VersionMinor, VersionRelease)
}

// Feature is a UCP feature bit (ucp_feature).
type Feature uint64

// Features, with the bit numbers of the UCX documents.
const (
	FeatureTag    Feature = 1 << 0
	FeatureRMA    Feature = 1 << 1
	FeatureAMO32  Feature = 1 << 2
	FeatureAMO64  Feature = 1 << 3
	FeatureWakeup Feature = 1 << 4
	FeatureStream Feature = 1 << 5
	FeatureAM     Feature = 1 << 6
	// FeatureExportedMemh enables exporting memory handles to other
	// processes of the node and importing theirs (Context.MemhPack with
	// MemhPackFlagExport, MemMap with an exported memh buffer).
	FeatureExportedMemh Feature = 1 << 7
)

// Fields of Params (ucp_params_field).
const (
	ParamFieldFeatures        uint64 = 1 << 0
	ParamFieldRequestSize     uint64 = 1 << 1
	ParamFieldRequestInit     uint64 = 1 << 2
	ParamFieldRequestCleanup  uint64 = 1 << 3
	ParamFieldTagSenderMask   uint64 = 1 << 4
	ParamFieldMTWorkersShared uint64 = 1 << 5
	ParamFieldEstimatedNumEPs uint64 = 1 << 6
	ParamFieldEstimatedNumPPN uint64 = 1 << 7
	ParamFieldName            uint64 = 1 << 8
	ParamFieldNodeLocalID     uint64 = 1 << 9
	ParamFieldLogger          uint64 = 1 << 10
)

// Params are the parameters of Init (ucp_params_t). Build them with the
// setters, which record the field mask:
//
//	p := new(ucp.Params).SetFeatures(ucp.FeatureRMA | ucp.FeatureAMO64)
type Params struct {
	FieldMask       uint64
	Features        Feature
	RequestSize     int
	RequestInit     func(r *Request)
	RequestCleanup  func(r *Request)
	TagSenderMask   uint64
	MTWorkersShared bool
	EstimatedNumEPs int
	EstimatedNumPPN int
	Name            string
	NodeLocalID     uint64
	Logger          ucs.Logger
}

// SetFeatures sets the features to initialize; the field is mandatory.
func (p *Params) SetFeatures(f Feature) *Params {
	p.Features, p.FieldMask = f, p.FieldMask|ParamFieldFeatures
	return p
}

// SetRequestSize reserves n bytes in every request (Request.Reserved).
func (p *Params) SetRequestSize(n int) *Params {
	p.RequestSize, p.FieldMask = n, p.FieldMask|ParamFieldRequestSize
	return p
}

// SetRequestInit sets the function called once on new request memory.
func (p *Params) SetRequestInit(fn func(*Request)) *Params {
	p.RequestInit, p.FieldMask = fn, p.FieldMask|ParamFieldRequestInit
	return p
}

// SetRequestCleanup sets the function called before request memory is
// released for good. As the seed allows, the call is delayed: the requests
// of a worker's pool that were initialized are cleaned up, each once, when
// the worker is destroyed (Worker.Destroy), and not when they are freed
// (they go back to the pool for reuse). Requests in the caller's memory
// (OpAttrFieldRequest) are the caller's to clean up.
func (p *Params) SetRequestCleanup(fn func(*Request)) *Params {
	p.RequestCleanup, p.FieldMask = fn, p.FieldMask|ParamFieldRequestCleanup
	return p
}

// SetTagSenderMask sets the bits of a tag that identify its sender.
func (p *Params) SetTagSenderMask(m uint64) *Params {
	p.TagSenderMask, p.FieldMask = m, p.FieldMask|ParamFieldTagSenderMask
	return p
}

// SetMTWorkersShared says whether several threads may share workers.
func (p *Params) SetMTWorkersShared(v bool) *Params {
	p.MTWorkersShared, p.FieldMask = v, p.FieldMask|ParamFieldMTWorkersShared
	return p
}

// SetEstimatedNumEPs sets the expected number of endpoints (default 1).
func (p *Params) SetEstimatedNumEPs(n int) *Params {
	p.EstimatedNumEPs, p.FieldMask = n, p.FieldMask|ParamFieldEstimatedNumEPs
	return p
}

// SetEstimatedNumPPN sets the expected number of processes per node
// (default 1).
func (p *Params) SetEstimatedNumPPN(n int) *Params {
	p.EstimatedNumPPN, p.FieldMask = n, p.FieldMask|ParamFieldEstimatedNumPPN
	return p
}

// SetName names the context for tracing (default: a unique generated name).
func (p *Params) SetName(name string) *Params {
	p.Name, p.FieldMask = name, p.FieldMask|ParamFieldName
	return p
}

// SetNodeLocalID sets the node-local id of the process (default 0;
// UCX_LOCAL_NODE_ID overrides it). As in UCX it only steers transport
// selection: where several lanes to a peer rank the same (two network
// devices, say), an endpoint prefers the one at index id modulo their
// number, so that the processes of a node spread over them.
func (p *Params) SetNodeLocalID(id uint64) *Params {
	p.NodeLocalID, p.FieldMask = id, p.FieldMask|ParamFieldNodeLocalID
	return p
}

// SetLogger sets the logger of the context, its workers and their
// transports (default: ucs.DefaultLogger(), standard error at the level of
// UCX_LOG_LEVEL). A nil l means the default.
func (p *Params) SetLogger(l ucs.Logger) *Params {
	p.Logger, p.FieldMask = l, p.FieldMask|ParamFieldLogger
	return p
}

// configTable lists the context variables (read as UCX_<name>).
var configTable = []ucs.ConfigField{
	{Name: "TLS", Default: "all", Doc: "Transports to use: a comma-separated list of all, sm, shm, self, tcp, cma, posix, sysv; '^' excludes the listed ones"},
	{Name: "NET_DEVICES", Default: "all", Doc: "Network devices to use (all, or a comma-separated list)"},
	{Name: "ALLOC_PRIO", Default: "md:sysv,md:posix,mmap", Doc: "How mem map allocates memory, in order of preference: md:<name> or md:*, mmap"},
	{Name: "RNDV_THRESH", Default: "auto", Doc: "Message size from which tag messages use rendezvous (auto: chosen per endpoint from the lanes' performance estimates; active messages take 64k)"},
	{Name: "RNDV_SCHEME", Default: "auto", Doc: "How a rendezvous receiver takes the data: auto (mapped memory, then get, but put where the get would cross the network connection to the sender, then am), get_zcopy, put_zcopy, am (the sender pushes it in active messages)"},
	{Name: "ZCOPY_THRESH", Default: "auto", Doc: "Message size from which zero-copy protocols are used (auto: chosen per lane)"},
	{Name: "BCOPY_THRESH", Default: "0", Doc: "Message size from which buffered-copy protocols are used instead of short"},
	{Name: "NUM_EPS", Default: "auto", Doc: "Expected number of endpoints; overrides estimated_num_eps"},
	{Name: "NUM_PPN", Default: "auto", Doc: "Expected number of processes per node; overrides estimated_num_ppn"},
	{Name: "LOCAL_NODE_ID", Default: "auto", Doc: "Node-local id of the process; overrides node_local_id"},
	{Name: "KEEPALIVE_INTERVAL", Default: "20s", Doc: "How often a worker checks that the peers of its endpoints in error mode PEER live, on transports that can tell (shared memory); inf or 0 turns it off"},
	{Name: "ADAPTIVE_PROGRESS", Default: "y", Doc: "Leave out of every progress call the interfaces that nothing came to yet: they are polled on the calls that find nothing else and on every 16th of the others, until their first event (n: every interface on every call)"},
	{Name: "CS_HANDSHAKE_TIMEOUT", Default: "5s", Doc: "Time each step of a client-server handshake may take (a listener drops a client that is slower; a client gives up on a server that is)"},
	{Name: "CS_ACCEPT_TIMEOUT", Default: "30s", Doc: "Time a client waits for the server application to accept or reject its connection"},
}

// Config is the configuration of a context, read from UCX_* variables
// (ucp_config_t).
type Config struct{ *ucs.Config }

// ReadConfig reads the context configuration (ucp_config_read): each
// variable NAME from the environment as UCX_<envPrefix>_NAME (UCX_NAME for
// an empty envPrefix), else from the configuration file filename when it
// is not "" (lines UCX_NAME=value, with the same prefix, and '#'
// comments; a file that does not exist is ignored), else its default. The
// variables of the memory domains and transports the context opens
// (UCX_<envPrefix>_POSIX_USE_SHM_OPEN, ...) come from the same sources. It
// fails with ucs.ErrInvalidParam for a line of the file that is not
// NAME=value, and with ucs.ErrIOError for a file that cannot be read.
func ReadConfig(envPrefix, filename string) (*Config, error) {
	prefix := ucs.DefaultEnvPrefix
	if envPrefix != "" {
		prefix += envPrefix + "_"
	}
	var file map[string]string
	if filename != "" {
		var err error
		if file, err = ucs.ReadConfigFile(filename); err != nil {
			return nil, fmt.Errorf("ucp config read: %w", err)
		}
	}
	return &Config{ucs.ReadConfigWith(prefix, configTable, file)}, nil
}

// Release releases the configuration (ucp_config_release); it exists for
// symmetry with the UCX API.
func (c *Config) Release() {}

// ConfigTable returns the context's variables with their defaults.
func ConfigTable() []ucs.ConfigField { return append([]ucs.ConfigField(nil), configTable...) }

// resource is a transport resource selected by a context.
type resource struct {
	md    *mdEntry
	tl    uct.TLResource
	index int
}

type mdEntry struct {
	comp     uct.Component
	md       uct.MD
	attr     uct.MDAttr
	index    int
	selected int // transports of the MD that UCX_TLS selected
}

// Context is a UCP application context (ucp_context_h): the selected memory
// domains and transport resources. It is safe for concurrent use once
// created.
type Context struct {
	params    Params
	config    *Config
	name      string
	features  Feature
	log       ucs.Logger // Params.Logger or ucs.DefaultLogger()
	mds       []*mdEntry
	resources []resource
	numEPs    int
	numPPN    int
	nodeID    uint64
	zcopyThr  int // 0: per lane
	bcopyThr  int
	rndvThr   int // UCX_RNDV_THRESH; -1: auto
	rndvSch   int // UCX_RNDV_SCHEME: rndvAuto ...
	// mapped lists the mapped memory in address order, so that a send of
	// data inside it can use its key (mappedAt).
	mappedMu  sync.RWMutex
	mapped    []*MemHandle
	keepalive time.Duration // UCX_KEEPALIVE_INTERVAL; 0: off
	adaptive  bool          // UCX_ADAPTIVE_PROGRESS (Worker.initProgress)
	// csHandshake and csAccept are UCX_CS_HANDSHAKE_TIMEOUT and
	// UCX_CS_ACCEPT_TIMEOUT (listener.go).
	csHandshake, csAccept time.Duration
	allocPrio             []string
	regions               sync.Map // software RMA token -> *MemHandle
	// transients recycles the handles of the registrations made for one
	// rendezvous (memRegFor): the registration ends with its transfer,
	// its bookkeeping is used again.
	transients sync.Pool
	closed     atomic.Bool
	// leftOut are the transports this host offers that UCX_TLS left out,
	// for SelectionWith.
	leftOut []string
}

var contextCount atomic.Int64

// Init creates a context (ucp_init). params.Features is mandatory; config nil
// means ReadConfig("", ""). It fails with ucs.ErrInvalidParam for bad params or
// configuration values and ucs.ErrNoDevice when UCX_TLS selects nothing.
func Init(params *Params, config *Config) (*Context, error) {
	if params == nil || params.FieldMask&ParamFieldFeatures == 0 || params.Features == 0 {
		return nil, fmt.Errorf("ucp init: features must be set: %w", ucs.ErrInvalidParam)
	}
	if config == nil {
		var err error
		if config, err = ReadConfig("", ""); err != nil {
			return nil, err
		}
	}
	c := &Context{params: *params, config: config, features: params.Features, numEPs: 1, numPPN: 1}
	if params.FieldMask&ParamFieldRequestSize != 0 && params.RequestSize < 0 {
		return nil, fmt.Errorf("ucp init: request size %d: %w", params.RequestSize, ucs.ErrInvalidParam)
	}
	if params.FieldMask&ParamFieldName != 0 {
		c.name = params.Name
	} else {
		c.name = fmt.Sprintf("ucp-%d-%d", os.Getpid(), contextCount.Add(1))
	}
	if params.FieldMask&ParamFieldEstimatedNumEPs != 0 {
		c.numEPs = params.EstimatedNumEPs
	}
	if params.FieldMask&ParamFieldEstimatedNumPPN != 0 {
		c.numPPN = params.EstimatedNumPPN
	}
	if params.FieldMask&ParamFieldNodeLocalID != 0 {
		c.nodeID = params.NodeLocalID
	}
	c.log = ucs.DefaultLogger()
	if params.FieldMask&ParamFieldLogger != 0 && params.Logger != nil {
		c.log = params.Logger
	}
	if err := c.applyConfig(); err != nil {
		return nil, err
	}
	if err := c.selectResources(); err != nil {
		c.Cleanup()
		return nil, err
	}
	return c, nil
}

func parseAutoInt(name, v string) (int, bool, error) {
	if v == "auto" || v == "" {
		return 0, false, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, false, fmt.Errorf("ucp init: UCX_%s=%q: %w", name, v, ucs.ErrInvalidParam)
	}
	return n, true, nil
}

func (c *Context) applyConfig() error {
	cfg := c.config
	if n, ok, err := parseAutoInt("NUM_EPS", cfg.Get("NUM_EPS")); err != nil {
		return err
	} else if ok {
		c.numEPs = n
	}
	if n, ok, err := parseAutoInt("NUM_PPN", cfg.Get("NUM_PPN")); err != nil {
		return err
	} else if ok {
		c.numPPN = n
	}
	if n, ok, err := parseAutoInt("LOCAL_NODE_ID", cfg.Get("LOCAL_NODE_ID")); err != nil {
		return err
	} else if ok {
		c.nodeID = uint64(n)
	}
	for _, th := range []struct {
		name string
		dst  *int
	}{{"ZCOPY_THRESH", &c.zcopyThr}, {"BCOPY_THRESH", &c.bcopyThr}} {
		v := cfg.Get(th.name)
		if v == "auto" {
			continue
		}
		n, err := ucs.ParseSize(v)
		if err != nil {
			return fmt.Errorf("ucp init: UCX_%s: %w", th.name, err)
		}
		if n > 1<<62 {
			n = 1 << 62
		}
		*th.dst = int(n)
	}
	c.rndvThr = -1
	if v := cfg.Get("RNDV_THRESH"); v != "auto" && v != "" {
		n, err := ucs.ParseSize(v)
		if err != nil {
			return fmt.Errorf("ucp init: UCX_RNDV_THRESH=%q: %w", v, ucs.ErrInvalidParam)
		}
		c.rndvThr = int(min(n, math.MaxInt))
	}
	sch, err := parseRndvScheme(cfg.Get("RNDV_SCHEME"))
	if err != nil {
		return fmt.Errorf("ucp init: %w", err)
	}
	c.rndvSch = sch
	ka, err := ucs.ParseDuration(cfg.Get("KEEPALIVE_INTERVAL"))
	if err != nil {
		return fmt.Errorf("ucp init: UCX_KEEPALIVE_INTERVAL: %w", err)
	}
	c.keepalive = ka
	if c.adaptive, err = ucs.ParseBool(cfg.Get("ADAPTIVE_PROGRESS")); err != nil {
		return fmt.Errorf("ucp init: UCX_ADAPTIVE_PROGRESS: %w", err)
	}
	if c.csHandshake, c.csAccept, err = csTimeouts(cfg.Config); err != nil {
		return fmt.Errorf("ucp init: %w", err)
	}
	for _, m := range strings.Split(cfg.Get("ALLOC_PRIO"), ",") {
		if m = strings.TrimSpace(m); m != "" {
			if m != "mmap" && m != "heap" && !strings.HasPrefix(m, "md:") {
				return fmt.Errorf("ucp init: UCX_ALLOC_PRIO method %q: %w", m, ucs.ErrInvalidParam)
			}
			c.allocPrio = append(c.allocPrio, m)
		}
	}
	return nil
}

// tlAliases expands the UCX_TLS aliases to transport names.
var tlAliases = map[string][]string{
	"sm":  {"posix", "sysv", "cma", "xpmem", "knem"},
	"shm": {"posix", "sysv", "cma", "xpmem", "knem"},
	"mm":  {"posix", "sysv", "xpmem"},
}

func tlMatches(item, tl string) bool {
	if item == "all" || item == tl {
		return true
	}
	for _, a := range tlAliases[item] {
		if a == tl {
			return true
		}
	}
	return false
}

func (c *Context) selectResources() error {
	tls, err := ucs.ParseAllowList(c.config.Get("TLS"))
	if err != nil {
		return fmt.Errorf("ucp init: UCX_TLS: %w", err)
	}
	if len(tls.Names) == 0 {
		return fmt.Errorf("ucp init: UCX_TLS is empty: %w", ucs.ErrInvalidParam)
	}
	devs, err := ucs.ParseAllowList(c.config.Get("NET_DEVICES"))
	if err != nil {
		return fmt.Errorf("ucp init: UCX_NET_DEVICES: %w", err)
	}
	comps := uct.Components()
	if len(comps) == 0 {
		return fmt.Errorf("ucp init: no transport is linked into this program: import _ %q, or the transports wanted: %w",
			"github.com/goshmem/goshmem/uct/transports", ucs.ErrNoDevice)
	}
	for _, comp := range comps {
		mdrs, err := comp.MDResources()
		if err != nil {
			continue
		}
		for _, mdr := range mdrs {
			md, err := comp.OpenMD(mdr.Name, c.config.ReadAlso(c.componentPrefix(mdr.Name), comp.MDConfigTable()))
			if err != nil {
				continue // an unusable MD here is not an error of the context
			}
			attr, err := md.Query()
			if err != nil {
				md.Close()
				continue
			}
			e := &mdEntry{comp: comp, md: md, attr: attr, index: len(c.mds)}
			tlrs, _ := md.TLResources()
			selected := 0
			for _, tl := range tlrs {
				if !tls.Allows(func(item string) bool { return tlMatches(item, tl.TLName) }) {
					if !slices.Contains(c.leftOut, tl.TLName) {
						c.leftOut = append(c.leftOut, tl.TLName)
					}
					continue
				}
				if tl.DevType == uct.DeviceTypeNet && !devs.Allows(func(item string) bool { return item == "all" || item == tl.DevName }) {
					continue
				}
				c.resources = append(c.resources, resource{md: e, tl: tl, index: len(c.resources)})
				selected++
			}
			e.selected = selected
			// An MD without selected transports is kept if it can allocate
			// memory, as UCX keeps alloc-only MDs for mem map.
			if selected == 0 && attr.Flags&uct.MDFlagAlloc == 0 {
				md.Close()
				continue
			}
			c.mds = append(c.mds, e)
		}
	}
	if len(c.resources) == 0 {
		return fmt.Errorf("ucp init: no transport selected by UCX_TLS=%s: %w", c.config.Get("TLS"), ucs.ErrNoDevice)
	}
	return nil
}

// SelectionWith returns a value of UCX_TLS that selects what the
// context's selects and also the transports of names (transports or
// aliases such as "self" and "sm") that this host offers and UCX_TLS left
// out: the list with those names added ("tcp" with "self" gives
// "tcp,self"), or, for a list of exclusions, without the items that
// exclude them ("^sm,cma" with "sm" gives "^cma"; "all" when none is
// left). It returns "" when UCX_TLS leaves out none of them: a selection
// that names them changes nothing.
func (c *Context) SelectionWith(names ...string) string {
	tls, err := ucs.ParseAllowList(c.config.Get("TLS"))
	if err != nil {
		return "" // Init parsed it
	}
	var add, tlsAdded []string
	for _, name := range names {
		n := len(tlsAdded)
		for _, tl := range c.leftOut {
			if tlMatches(name, tl) {
				tlsAdded = append(tlsAdded, tl)
			}
		}
		if len(tlsAdded) > n {
			add = append(add, name)
		}
	}
	switch {
	case len(add) == 0:
		return ""
	case !tls.Negate:
		return strings.Join(append(tls.Names, add...), ",")
	}
	var keep []string
	for _, item := range tls.Names {
		if !slices.ContainsFunc(tlsAdded, func(tl string) bool { return tlMatches(item, tl) }) {
			keep = append(keep, item)
		}
	}
	if len(keep) == 0 {
		return "all"
	}
	return "^" + strings.Join(keep, ",")
}

// componentPrefix is the environment prefix of the configuration of a
// memory domain or transport called name: UCX_POSIX_, UCX_TCP_, ... as in
// UCX.
func (c *Context) componentPrefix(name string) string {
	return ComponentEnvPrefix(c.config.Prefix(), name)
}

// ComponentEnvPrefix returns the environment prefix under which the
// configuration of the memory domain or transport name is read, given the
// context's prefix ("UCX_"): for example UCX_POSIX_ for "posix".
func ComponentEnvPrefix(prefix, name string) string {
	if prefix == "" {
		prefix = ucs.DefaultEnvPrefix
	}
	return prefix + strings.ToUpper(name) + "_"
}

// Cleanup releases the context (ucp_cleanup). Workers and mapped memory must
// be released first.
func (c *Context) Cleanup() {
	if c.closed.Swap(true) {
		return
	}
	for _, e := range c.mds {
		e.md.Close()
	}
	c.mds, c.resources = nil, nil
}

// ErrClosed is the error of a call on a context, worker, endpoint or
// listener that was released (Context.Cleanup, Worker.Destroy,
// Endpoint.Close...), possibly wrapped with the name of the call. It
// matches ucs.ErrCanceled too, with errors.Is, as operations cut short by a
// release do:
//
//	if errors.Is(err, ucp.ErrClosed) { ... } // or errors.Is(err, ucs.ErrCanceled)
var ErrClosed error = closedError{}

type closedError struct{}

func (closedError) Error() string { return "ucp: use of a released object" }
func (closedError) Unwrap() error { return ucs.ErrCanceled }
