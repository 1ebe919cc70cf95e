package base

import (
	"fmt"
	"time"
	"unsafe"

	"github.com/goshmem/goshmem/ucs"
	"github.com/goshmem/goshmem/uct"
)

// Names are the names of a transport whose component has a single memory
// domain and whose MD offers one kind of transport resource.
type Names struct {
	Pkg       string         // the package, which begins errors: "uct/sm"
	Component string         // the component
	MD        string         // its one memory domain
	TL        string         // the transport of its resources
	Dev       string         // the device of its one resource; "" when it has several
	DevType   uct.DeviceType // the device type of its resources
	// IfaceConfig is the configuration of its ifaces, which ucp reads
	// under the prefix UCX_<TL>_.
	IfaceConfig []ucs.ConfigField
	// Cost is the cost model of its ifaces, which their Query and the
	// resource (uct.TLResource) report.
	Cost Cost
}

// Cost is the cost model of a transport's ifaces: overhead and latency in
// seconds, bandwidth in bytes per second.
type Cost struct {
	Overhead, Latency float64
	Bandwidth         uct.Bandwidth
}

// Resource returns the resource of transport tl on device dev, of type
// devType, with the latency and bandwidth of cost.
func (cost Cost) Resource(tl, dev string, devType uct.DeviceType) uct.TLResource {
	return uct.TLResource{TLName: tl, DevName: dev, DevType: devType,
		Latency: time.Duration(cost.Latency * 1e9), Bandwidth: cost.Bandwidth.Dedicated + cost.Bandwidth.Shared}
}

// Transport is a transport as the base types see it: an empty type of the
// transport's package, the type argument of Component and MD (so that
// their zero values are ready to use).
type Transport interface {
	// Names returns the names of the transport.
	Names() Names
	// NewMD returns a new memory domain of the transport configured by
	// config (nil for the defaults); bad values fail with
	// ucs.ErrInvalidParam.
	NewMD(config *ucs.Config) (uct.MD, error)
}

func names[T Transport]() Names {
	var t T
	return t.Names()
}

// Component implements the methods of uct.Component that a component with
// a single memory domain shares; a transport embeds it in its component
// and adds the rkey methods.
type Component[T Transport] struct{}

// Name returns the name of the component.
func (Component[T]) Name() string { return names[T]().Component }

// MDResources returns the one memory domain of the component.
func (Component[T]) MDResources() ([]uct.MDResource, error) {
	return []uct.MDResource{{Name: names[T]().MD}}, nil
}

// MDConfigTable returns nil: the MD has no configuration.
func (Component[T]) MDConfigTable() []ucs.ConfigField { return nil }

// OpenMD opens the memory domain of the component, configured by config
// (nil for the defaults; see the transport's MDConfigTable). Another name
// fails with ucs.ErrNoDevice, a bad configuration with ucs.ErrInvalidParam.
func (Component[T]) OpenMD(name string, config *ucs.Config) (uct.MD, error) {
	if n := names[T](); name != n.MD {
		return nil, fmt.Errorf("%s: open MD %q: %w", n.Pkg, name, ucs.ErrNoDevice)
	}
	var t T
	return t.NewMD(config)
}

// MD implements the methods of uct.MD that the single memory domains of the
// transports share; a transport embeds it in its MD.
type MD[T Transport] struct{}

// Name returns the name of the memory domain.
func (MD[T]) Name() string { return names[T]().MD }

// Component returns the component of the memory domain, the one registered
// with uct.Register.
func (MD[T]) Component() uct.Component {
	c, _ := uct.LookupComponent(names[T]().Component)
	return c
}

// TLResources returns the one transport resource of the MD.
func (MD[T]) TLResources() ([]uct.TLResource, error) {
	n := names[T]()
	return []uct.TLResource{n.Cost.Resource(n.TL, n.Dev, n.DevType)}, nil
}

// IfaceConfigTable returns the configuration of the MD's ifaces (the
// transport's Names.IfaceConfig).
func (MD[T]) IfaceConfigTable() []ucs.ConfigField { return names[T]().IfaceConfig }

// Attr returns the attributes of the MD with its component name, flags and
// packed key size filled in; the transport sets the others.
func (MD[T]) Attr(flags uct.MDFlags, rkeyPackedSize int) uct.MDAttr {
	return uct.MDAttr{ComponentName: names[T]().Component, Flags: flags, RkeyPackedSize: rkeyPackedSize}
}

// CheckIface returns nil when params (nil for any) name the MD's resource
// or leave its transport and device empty, and otherwise an error that
// wraps ucs.ErrNoDevice.
func (MD[T]) CheckIface(params *uct.IfaceParams) error {
	n := names[T]()
	if params != nil && ((params.TLName != "" && params.TLName != n.TL) || (params.DevName != "" && params.DevName != n.Dev)) {
		return fmt.Errorf("%s: iface open on %s/%s: %w", n.Pkg, params.TLName, params.DevName, ucs.ErrNoDevice)
	}
	return nil
}

// Close does nothing: registrations, allocations and ifaces are released
// on their own.
func (MD[T]) Close() {}

// RegisterMD is the MD of a transport that only registers memory: MD with
// MemAlloc and MemFree that fail; a transport embeds it in its MD.
type RegisterMD[T Transport] struct{ MD[T] }

// MemAlloc fails with ucs.ErrUnsupported: the MD only registers memory
// allocated by others.
func (RegisterMD[T]) MemAlloc(int, uct.MemFlags, string) (uct.Allocation, error) {
	return uct.Allocation{}, fmt.Errorf("%s: mem alloc: %w", names[T]().Pkg, ucs.ErrUnsupported)
}

// MemFree fails with ucs.ErrUnsupported, as MemAlloc does.
func (RegisterMD[T]) MemFree(uct.Memh) error {
	return fmt.Errorf("%s: mem free: %w", names[T]().Pkg, ucs.ErrUnsupported)
}

// AllocateMD is the MD of a transport that only allocates memory: MD with
// MemReg and MemDereg that fail; a transport embeds it in its MD.
type AllocateMD[T Transport] struct{ MD[T] }

// MemReg fails with ucs.ErrUnsupported: the memory of the MD must be
// allocated by it.
func (AllocateMD[T]) MemReg(unsafe.Pointer, int, uct.MemFlags) (uct.Memh, error) {
	return nil, fmt.Errorf("%s: %s mem reg: %w", names[T]().Pkg, names[T]().MD, ucs.ErrUnsupported)
}

// MemDereg fails with ucs.ErrUnsupported, as MemReg does.
func (AllocateMD[T]) MemDereg(uct.Memh) error {
	return fmt.Errorf("%s: %s mem dereg: %w", names[T]().Pkg, names[T]().MD, ucs.ErrUnsupported)
}

// BindThread binds the calling goroutine, one the iface owns, to cpus
// (IfaceParams.CPUMask) with ucs.BindThread, and logs, in an error that pkg
// begins, a mask the system refused. With no cpus it does nothing.
func BindThread(log ucs.Logger, pkg, what string, cpus []int) {
	if len(cpus) == 0 {
		return
	}
	if _, err := ucs.BindThread(cpus); err != nil {
		log.Logf(ucs.LogWarn, "%s: %s goroutine: %v", pkg, what, err)
	}
}
