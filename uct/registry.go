package uct

import (
	"fmt"
	"sort"
	"sync"

	"github.com/goshmem/goshmem/ucs"
)

var registry struct {
	sync.Mutex
	components map[string]Component
}

// Register makes c available through Components and LookupComponent. It
// panics if a component of that name is registered already (a build
// mistake, like registering a database driver twice).
func Register(c Component) {
	registry.Lock()
	defer registry.Unlock()
	if registry.components == nil {
		registry.components = make(map[string]Component)
	}
	if _, dup := registry.components[c.Name()]; dup {
		panic("uct: Register called twice for component " + c.Name())
	}
	registry.components[c.Name()] = c
}

// Components returns the registered components sorted by name
// (uct_query_components).
func Components() []Component {
	registry.Lock()
	defer registry.Unlock()
	cs := make([]Component, 0, len(registry.components))
	for _, c := range registry.components {
		cs = append(cs, c)
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].Name() < cs[j].Name() })
	return cs
}

// LookupComponent returns the component called name, or an error wrapping
// ucs.ErrNoElem.
func LookupComponent(name string) (Component, error) {
	registry.Lock()
	defer registry.Unlock()
	if c, ok := registry.components[name]; ok {
		return c, nil
	}
	return nil, fmt.Errorf("uct: component %q: %w", name, ucs.ErrNoElem)
}
