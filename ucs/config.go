package ucs

import (
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// DefaultEnvPrefix is the prefix of the environment variables read by
// ReadConfig when no other prefix is given.
const DefaultEnvPrefix = "UCX_"

// ConfigField describes one configuration variable: its name without the
// prefix (for example "TLS"), its default value as text and a one-line doc.
type ConfigField struct {
	Name    string
	Default string
	Doc     string
}

// Config holds the values of a table of configuration variables. Values are
// kept as text and parsed by the component that owns them, as UCX does; the
// parse helpers below (ParseSize, ParseBool, ParseAllowList, ...) give the
// UCX syntax. A Config is not safe for concurrent modification.
type Config struct {
	prefix string
	fields []ConfigField
	values map[string]string
	file   map[string]string // the variables of a configuration file, by full name
}

// ReadConfig builds a Config for table, taking each variable from the
// environment as prefix+Name where set, and its default otherwise. An empty
// prefix means DefaultEnvPrefix.
func ReadConfig(prefix string, table []ConfigField) *Config {
	return readConfig(prefix, table, nil)
}

// ReadConfigFile reads the configuration file path (as ucp_config_read's
// filename): lines NAME=value with full names (UCX_TLS=tcp), blank lines
// and lines that start with '#'. A file that does not exist is no error
// (an empty result); a line of another form fails with ErrInvalidParam,
// and a file that cannot be read with ErrIOError. The variables apply to
// every Config read with ReadConfigWith, or Config.ReadAlso, from the
// result, where the environment does not set them.
func ReadConfigFile(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("config file %s: %v: %w", path, err, ErrIOError)
	}
	vars := make(map[string]string)
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" || strings.ContainsAny(name, " \t[]") {
			return nil, fmt.Errorf("config file %s:%d: %q is not NAME=value: %w", path, i+1, line, ErrInvalidParam)
		}
		vars[name] = strings.TrimSpace(value)
	}
	return vars, nil
}

// ReadConfigWith is ReadConfig with the variables of a configuration file
// (ReadConfigFile) under those of the environment: a variable takes its
// value from the environment, else from file, else its default.
func ReadConfigWith(prefix string, table []ConfigField, file map[string]string) *Config {
	return readConfig(prefix, table, file)
}

// ReadAlso reads another table, under prefix, from the sources c was read
// from (the environment and c's configuration file): for the variables of
// the components a context opens.
func (c *Config) ReadAlso(prefix string, table []ConfigField) *Config {
	return readConfig(prefix, table, c.file)
}

func readConfig(prefix string, table []ConfigField, file map[string]string) *Config {
	if prefix == "" {
		prefix = DefaultEnvPrefix
	}
	c := &Config{prefix: prefix, fields: append([]ConfigField(nil), table...), values: make(map[string]string, len(table)), file: file}
	for _, f := range table {
		v := f.Default
		if e, ok := file[prefix+f.Name]; ok {
			v = e
		}
		if e, ok := os.LookupEnv(prefix + f.Name); ok {
			v = e
		}
		c.values[f.Name] = v
	}
	return c
}

// Prefix returns the environment prefix the config was read with.
func (c *Config) Prefix() string { return c.prefix }

// Get returns the current value of the variable name (without prefix), and
// "" if the table has no such variable.
func (c *Config) Get(name string) string { return c.values[name] }

// Modify sets the variable name (without prefix) to value. It fails with
// ErrNoElem if the table has no such variable.
func (c *Config) Modify(name, value string) error {
	if _, ok := c.values[name]; !ok {
		return fmt.Errorf("config %s%s: %w", c.prefix, name, ErrNoElem)
	}
	c.values[name] = value
	return nil
}

// Fields returns the table, sorted by name.
func (c *Config) Fields() []ConfigField {
	f := append([]ConfigField(nil), c.fields...)
	sort.Slice(f, func(i, j int) bool { return f[i].Name < f[j].Name })
	return f
}

// Print writes every variable as `PREFIXNAME=value`, with its doc and default
// as a comment line before it when doc is true (the format of ucx_info -c).
func (c *Config) Print(w io.Writer, doc bool) error {
	for _, f := range c.Fields() {
		if doc {
			if _, err := fmt.Fprintf(w, "#\n# %s\n# default: %s\n#\n", f.Doc, f.Default); err != nil {
				return err
			}
		}
		if _, err := fmt.Fprintf(w, "%s%s=%s\n", c.prefix, f.Name, c.values[f.Name]); err != nil {
			return err
		}
	}
	return nil
}

// ParseSize parses a memory size in the UCX syntax: a number with an optional
// suffix b, k, m, g or t (either case, optionally followed by "b"), or "inf"
// and "auto" for the largest value. It fails with ErrInvalidParam.
func ParseSize(s string) (uint64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	switch t {
	case "inf", "auto", "unlimited":
		return math.MaxUint64, nil
	case "":
		return 0, fmt.Errorf("size %q: %w", s, ErrInvalidParam)
	}
	t = strings.TrimSuffix(t, "b")
	mult := uint64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k':
			mult = 1 << 10
		case 'm':
			mult = 1 << 20
		case 'g':
			mult = 1 << 30
		case 't':
			mult = 1 << 40
		}
		if mult != 1 {
			t = t[:n-1]
		}
	}
	v, err := strconv.ParseUint(t, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, ErrInvalidParam)
	}
	if v > math.MaxUint64/mult {
		return 0, fmt.Errorf("size %q overflows: %w", s, ErrInvalidParam)
	}
	return v * mult, nil
}

// ParseBool parses y/yes/on/1/true and n/no/off/0/false (any case).
func ParseBool(s string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "y", "yes", "on", "1", "true":
		return true, nil
	case "n", "no", "off", "0", "false":
		return false, nil
	}
	return false, fmt.Errorf("boolean %q: %w", s, ErrInvalidParam)
}

// ParseDuration parses a time in the UCX syntax: a number followed by s, ms,
// us or ns (seconds when no unit is given), or "inf".
func ParseDuration(s string) (time.Duration, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if t == "inf" {
		return time.Duration(math.MaxInt64), nil
	}
	if _, err := strconv.ParseFloat(t, 64); err == nil {
		t += "s"
	}
	d, err := time.ParseDuration(t)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("time %q: %w", s, ErrInvalidParam)
	}
	return d, nil
}

// AllowList is a parsed list variable such as UCX_TLS: a list of names, or,
// when Negate is set (the value began with '^'), every name except those.
type AllowList struct {
	Names  []string
	Negate bool
}

// ParseAllowList parses a comma-separated list with an optional leading '^'.
// Empty items are dropped; a lone "^" is rejected with ErrInvalidParam.
func ParseAllowList(s string) (AllowList, error) {
	var l AllowList
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "^") {
		l.Negate = true
		s = s[1:]
	}
	for _, n := range strings.Split(s, ",") {
		if n = strings.TrimSpace(n); n != "" {
			l.Names = append(l.Names, n)
		}
	}
	if l.Negate && len(l.Names) == 0 {
		return l, fmt.Errorf("list %q excludes nothing: %w", "^"+s, ErrInvalidParam)
	}
	return l, nil
}

// Allows reports whether name passes the list, where a name of the list
// matches through match (for example to expand aliases such as "sm").
func (l AllowList) Allows(match func(item string) bool) bool {
	hit := false
	for _, n := range l.Names {
		if match(n) {
			hit = true
			break
		}
	}
	return hit != l.Negate
}

// SizeIn reads the variable name of c as a size (ParseSize syntax) and
// checks that it lies in [lo, hi]. It returns def when c is nil or the
// variable is empty or absent, and an error wrapping ucs.ErrInvalidParam,
// naming the variable with c's prefix, otherwise.
func (c *Config) SizeIn(name string, def, lo, hi int) (int, error) {
	if c == nil || c.Get(name) == "" {
		return def, nil
	}
	v, err := ParseSize(c.Get(name))
	if err != nil {
		return 0, fmt.Errorf("%s%s: %w", c.prefix, name, err)
	}
	if v < uint64(lo) || v > uint64(hi) {
		return 0, fmt.Errorf("%s%s=%d outside [%d, %d]: %w", c.prefix, name, v, lo, hi, ErrInvalidParam)
	}
	return int(v), nil
}
